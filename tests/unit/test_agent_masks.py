"""Every use of response_mask on agent-shaped batches: observation tokens must never count.

Each test poisons the observation positions (huge log-probs, values, entropies) and/or compares with
the same batch whose observations were cut out: if an observation leaked anywhere, the numbers move.
The batch comes from the real episode loop, in both schedules (turn-locked and streaming), playing the
hand-written episodes below with a scripted engine, a toy tokenizer and three toy tools.
"""

from collections import defaultdict

import numpy as np
import pytest
import torch

from tests.support.losses import policy_loss
from tests.support.scripted_engine import ScriptedEngine
from turnrl.agent.assemble import assemble_episodes
from turnrl.agent.episode import Episode
from turnrl.agent.executor import ToolExecutor
from turnrl.agent.loop import EpisodeLoop
from turnrl.agent.tools.base import text_parameter
from turnrl.algorithms.advantages import gae_advantage, grpo_outcome_advantage
from turnrl.algorithms.core import agg_loss, masked_mean
from turnrl.algorithms.kl import apply_kl_in_reward, kl_loss, kl_penalty
from turnrl.algorithms.rollout_corr import rollout_correction
from turnrl.batch import Batch
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.rewards.scorer import RuleReward, last_token_index
from turnrl.rollout.base import SamplingParams
from turnrl.tensors import left_pad, position_ids_from_mask
from turnrl.trainer.metrics import data_metrics

R = 16
PAD = 0
PROMPTS = [[5, 6, 7], [8, 9]]
# rows A,A,B,B: model turns and observations, as the loop must build them
EPISODES = [
    (PROMPTS[0], [("model", [11, 12, 13]), ("obs", [90, 91, 92, 93]), ("model", [14, 15])]),
    (
        PROMPTS[0],
        [("model", [21]), ("obs", [94, 95]), ("model", [22, 23]), ("obs", [96]), ("model", [24])],
    ),
    (PROMPTS[1], [("model", [31, 32, 33, 34, 35])]),
    (PROMPTS[1], [("model", [41, 42]), ("obs", [97, 98, 99]), ("model", [43])]),
]
# the toy vocabulary that makes the loop produce exactly those ids: tool calls <a>/<b>/<c>, answers,
# the observation tags <ra>/<rb>/<rc>, the invalid-action text "!" and the truncation marker "~"
PIECES = {
    11: "<a>", 12: "x", 13: "</a>", 14: "so", 15: "<answer>ok</answer>",  # tool a -> "p q", answer
    21: "<b>y</b>", 22: "hm", 23: "m", 24: "<answer>b</answer>",  # tool b -> "", no action, answer
    31: "t", 32: "h", 33: "i", 34: "n", 35: "<eos>",  # text, then EOS: the episode ends
    41: "<c>", 42: "w</c>", 43: "<answer>c</answer>",  # tool c -> "z", answer
    90: "\n\n<ra>", 91: "p", 92: " q", 93: "</ra>\n\n", 94: "\n\n<rb>", 95: "</rb>\n\n", 96: "!",
    97: "\n\n<rc>", 98: "z", 99: "</rc>\n\n", 80: "~",
}  # fmt: skip
EOS = 35


def episode(prompt: list[int], turns: list[tuple[str, list[int]]]) -> Episode:
    e = Episode(prompt)
    for kind, ids in turns:
        if kind == "model":
            e.add_model(ids, [-0.5] * len(ids))
        else:
            e.add_observation(ids)
    return e


class ToyTokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return "".join(PIECES[i] for i in ids)

    def __call__(self, text, add_special_tokens=False):
        """Greedy longest match over the pieces; text outside the vocabulary fails the test."""
        ids, at = [], 0
        while at < len(text):
            best = max((i for i, p in PIECES.items() if text.startswith(p, at)), key=lambda i: len(PIECES[i]))
            ids.append(best)
            at += len(PIECES[best])
        return {"input_ids": ids}


class Fixed:
    """A tool that always answers `text`; its action tag is `tag`, its observation tag `r<tag>`."""

    def __init__(self, tag: str, text: str):
        self.name = self.tag = tag
        self.obs_tag, self.text = f"r{tag}", text
        self.description, self.parameters = tag, text_parameter("input", "anything")

    async def call(self, arguments):
        return self.text


def play(streaming: bool) -> list[Episode]:
    """Run the loop on a scripted engine that writes each episode's model turns of EPISODES."""
    script: dict[tuple[int, ...], list[list[int]]] = defaultdict(list)
    for prompt, turns in EPISODES:
        context = list(prompt)
        for kind, ids in turns:
            if kind == "model":
                script[tuple(context)].append(ids)
            context += ids
    engine = ScriptedEngine(lambda c: script[tuple(c)].pop(0), eos_ids={EOS})
    tools = {t.name: t for t in (Fixed("a", "p q"), Fixed("b", ""), Fixed("c", "z"))}
    cfg = MultiTurnConfig(
        enable=True, max_turns=2, tools=[], invalid_action_observation="!", obs_truncation_marker="~"
    )
    executor = ToolExecutor(tools)
    # one episode in flight: the two samples of a prompt then meet the script's turns in row order
    loop = EpisodeLoop(engine, ToyTokenizer(), cfg, tools, executor, {EOS}, max_episodes_in_flight=1)
    try:
        return loop.run(PROMPTS, 2, SamplingParams(max_new_tokens=R, n=2, seed=0), R, streaming=streaming)
    finally:
        executor.close()


@pytest.fixture(params=[False, True], ids=["turn-locked", "streaming"])
def batch(request) -> Batch:
    eps = play(streaming=request.param)
    for e, (prompt, turns) in zip(eps, EPISODES, strict=True):
        want = episode(prompt, turns)
        assert (e.ids, e.mask, e.log_probs, e.versions) == (
            want.ids,
            want.mask,
            want.log_probs,
            want.versions,
        )
    assert [e.finish_reason for e in eps] == ["stop"] * 4
    ids, mask = left_pad(PROMPTS, PAD)
    g = Batch({"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)})
    return assemble_episodes(g, eps, 2, PAD, R)


def obs_positions(b: Batch) -> torch.Tensor:
    return (b["response_mask"] == 0) & (b["attention_mask"][:, -R:] == 1)


def compact(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The same rows with observation columns removed (model tokens shifted left)."""
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        keep = x[i][mask[i].bool()]
        out[i, : len(keep)] = keep
    return out


def compact_mask(mask: torch.Tensor) -> torch.Tensor:
    n = mask.sum(1).long()
    return (torch.arange(mask.shape[1])[None, :] < n[:, None]).float()


def poison(x: torch.Tensor, where: torch.Tensor, value: float = 1e4) -> torch.Tensor:
    return torch.where(where, torch.full_like(x, value), x)


def test_batch_layout(batch):
    mask, att = batch["response_mask"], batch["attention_mask"][:, -R:]
    assert mask.sum(1).tolist() == [5, 4, 5, 3]
    assert att.sum(1).tolist() == [9, 7, 5, 6]  # observations are attended to
    assert obs_positions(batch).sum().item() == 10
    assert (batch["rollout_log_probs"][obs_positions(batch)] == 0).all()
    assert batch["responses"][1, :7].tolist() == [21, 94, 95, 22, 23, 96, 24]
    assert list(batch["agent_turns"]) == [2, 3, 1, 2]
    assert list(batch["agent_tool_calls"]) == [1, 1, 0, 1]
    assert list(batch["agent_invalid_actions"]) == [0, 1, 0, 0]  # "hmm": no action, shown "!"


def test_policy_loss_ignores_observations(batch):
    mask, obs = batch["response_mask"], obs_positions(batch)
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, R, generator=g)
    new = old + 0.3 * torch.randn(4, R, generator=g)
    adv = torch.randn(4, 1, generator=g).expand(4, R).clone()
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        ref, _ = policy_loss(
            old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, loss_agg_mode=mode
        )
        hit, _ = policy_loss(
            old_log_prob=poison(old, obs, -50.0), log_prob=poison(new, obs), advantages=poison(adv, obs),
            response_mask=mask, loss_agg_mode=mode,
        )  # fmt: skip
        cm = compact_mask(mask)
        cut, _ = policy_loss(
            old_log_prob=compact(old, mask), log_prob=compact(new, mask), advantages=compact(adv, mask),
            response_mask=cm, loss_agg_mode=mode,
        )  # fmt: skip
        assert torch.isfinite(hit) and hit.item() == pytest.approx(ref.item(), abs=1e-6), mode
        assert cut.item() == pytest.approx(ref.item(), abs=1e-6), mode
    # and the mask is what does it: counting observations as actions changes the loss
    leaked, _ = policy_loss(
        old_log_prob=old, log_prob=poison(new, obs, 0.0), advantages=adv,
        response_mask=batch["attention_mask"][:, -R:].float(),
    )  # fmt: skip
    assert leaked.item() != pytest.approx(ref.item(), abs=1e-3)


def test_entropy_and_kl_ignore_observations(batch):
    mask, obs = batch["response_mask"], obs_positions(batch)
    ent = torch.rand(4, R)
    assert agg_loss(poison(ent, obs), mask, "token-mean") == pytest.approx(
        agg_loss(ent, mask, "token-mean").item()
    )
    assert masked_mean(poison(ent, obs), mask).item() == pytest.approx(masked_mean(ent, mask).item())
    lp, ref = -torch.rand(4, R), -torch.rand(4, R)
    scores = torch.zeros(4, R)
    r1, m1 = apply_kl_in_reward(scores, lp, ref, mask, 0.1, "k1")
    r2, m2 = apply_kl_in_reward(scores, poison(lp, obs), poison(ref, obs, -3.0), mask, 0.1, "k1")
    assert torch.equal(r1, r2) and m1 == m2
    assert (r1[obs] == 0).all()  # no KL penalty is put on an observation token
    expected = (0.1 * kl_penalty(lp, ref, "k1"))[mask.bool()]
    assert torch.allclose(-r1[mask.bool()], expected)
    for kind in ("k1", "k3"):
        a = kl_loss(lp, ref, mask, kind, "token-mean")
        b = kl_loss(poison(lp, obs), poison(ref, obs, -9.0), mask, kind, "token-mean")
        assert a.item() == pytest.approx(b.item(), abs=1e-6)


def test_gae_steps_over_observations_without_cutting(batch):
    mask, obs = batch["response_mask"], obs_positions(batch)
    rewards = torch.zeros(4, R)
    rewards[torch.arange(4), last_token_index(mask)] = torch.tensor([1.0, 0.0, 1.0, 0.5])
    values = torch.rand(4, R)
    adv, ret = gae_advantage(rewards, values, mask, gamma=0.9, lam=0.8, whiten=False)
    adv_p, ret_p = gae_advantage(
        poison(rewards, obs), poison(values, obs), mask, gamma=0.9, lam=0.8, whiten=False
    )
    assert torch.allclose(adv, adv_p) and torch.allclose(ret, ret_p)
    assert (adv[obs] == 0).all() and (ret[obs] == 0).all()
    # the same as if the observations were never there: gamma and lambda count model tokens only
    cm = compact_mask(mask)
    adv_c, _ = gae_advantage(
        compact(rewards, mask), compact(values, mask), cm, gamma=0.9, lam=0.8, whiten=False
    )
    assert torch.allclose(compact(adv, mask), adv_c, atol=1e-6)
    # GRPO broadcasts one advantage to model tokens only
    g_adv, _ = grpo_outcome_advantage(rewards, mask, np.array([0, 0, 1, 1]))
    assert (g_adv[obs] == 0).all() and (g_adv[mask.bool()] != 0).all()


def test_response_length_counts_model_tokens(batch):
    mask = batch["response_mask"]
    b = Batch(dict(batch.tensors), dict(batch.non_tensors))
    b["token_level_scores"] = torch.zeros(4, R)
    b["token_level_rewards"] = torch.zeros(4, R)
    b["advantages"] = torch.zeros(4, R)
    b["returns"] = torch.zeros(4, R)
    m = data_metrics(b, R)
    assert m["response_length/mean"] == pytest.approx(
        17 / 4
    )  # 5 + 4 + 5 + 3 model tokens, 10 observation tokens
    assert m["response_length/max"] == 5
    assert m["response_length/clip_ratio"] == 0.0  # 9 attended tokens in row 0, but only 5 are the policy's
    b["old_log_probs"] = poison(b["rollout_log_probs"], obs_positions(b), 7.0)
    gap = rollout_correction(b["old_log_probs"], b["rollout_log_probs"], b["response_mask"], mode="tis")
    assert gap.metrics["rollout_corr/abs_diff_max"] == 0.0  # the poisoned observation tokens do not count
    assert gap.weights[b["response_mask"] == 0].abs().sum() == 0.0
    del mask


class DigitTokenizer:
    """Maps ids to text for the scorer: 11..43 are model text, 90..99 observation text."""

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(("<answer>ok</answer>" if i == 15 else f"t{i}") for i in ids if i != PAD)


def test_reward_lands_on_the_last_model_token(batch, monkeypatch):
    from turnrl.rewards import registry

    def score(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0 if "<answer>ok</answer>" in solution_str else 0.5

    monkeypatch.setitem(registry.BUILTIN, "test/agent-last-token", score)

    b = Batch(dict(batch.tensors), dict(batch.non_tensors))
    b["data_source"] = ["test/agent-last-token"] * 4
    b["ground_truth"] = [None] * 4
    b["extra_info"] = [{}] * 4
    # in-process (timeout_s=0): the patched table lives in this process, not in a reward child
    scores, _ = RuleReward(DigitTokenizer(), timeout_s=0)(b)
    # row 1 ends: model 21 | obs 94 95 | model 22 23 | obs 96 | model 24 -> column 6; row 3: column 5
    assert last_token_index(b["response_mask"]).tolist() == [8, 6, 4, 5]
    assert scores[0, 8] == 1.0 and scores[1, 6] == 0.5 and scores.sum().item() == 1.0 + 0.5 * 3
    assert (scores[obs_positions(b)] == 0).all()
