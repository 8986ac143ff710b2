"""Agent rollouts end to end on a real (tiny) model, real tools and the trainer's own stage functions.

The tiny random model is first taught one calculator trajectory (60 Adam steps, a few seconds), so
it really emits `<calculator>12 * 34</calculator>`, reads `<result>408</result>` and answers: the
episodes below are genuine multi-turn samples, not scripted text.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from tests.support.agent_batches import agent_cfg, chat_prompt, encode, gen_batch, segments, unpadded
from turnrl.agent.rollout import AgentRollout
from turnrl.models.loader import load_model
from turnrl.models.logprobs import response_log_probs
from turnrl.rollout.base import Generation, SamplingParams
from turnrl.rollout.hf import HFEngine

BUDGET = 48
# every behaviour below holds in both schedules: all episodes turn by turn, or each on its own (async RL)
both_schedules = pytest.mark.parametrize("streaming", [False, True], ids=["turn-locked", "streaming"])


def teach(target: list[int], steps: int = 60):
    """A fresh tiny random model that has memorised `target` after the calculator prompt."""
    torch.manual_seed(0)
    model, tok = load_model("tiny-random", torch.device("cpu"), seed=0)
    prompt = chat_prompt(tok, "Compute 12 * 34.")
    x = torch.tensor([prompt + target])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        logits = model(input_ids=x[:, :-1]).logits[0, len(prompt) - 1 :]
        loss = torch.nn.functional.cross_entropy(logits, x[0, len(prompt) :])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    assert loss.item() < 0.1
    return model, tok


@pytest.fixture(scope="module")
def tool_model():
    from turnrl.models.loader import load_tokenizer

    tok = load_tokenizer("tiny-random")
    return teach(
        encode(tok, "<calculator>12 * 34</calculator>")
        + encode(tok, "\n\n<result>")
        + encode(tok, "408")
        + encode(tok, "</result>\n\n")
        + encode(tok, "<answer>408</answer>")
        + [tok.eos_token_id]
    )


class RecordingEngine(HFEngine):
    """The real engine, keeping every call's contexts and outputs for the token-in-token-out check."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[list[list[int]], int, Generation]] = []

    def generate(self, prompt_ids, params, max_new_tokens_per_row=None):
        out = super().generate(prompt_ids, params, max_new_tokens_per_row)
        self.calls.append(([list(p) for p in prompt_ids], params.n, out))
        return out


class BudgetIgnoringEngine:
    """A broken engine: it takes per-row budgets but runs every row to the longest."""

    def __init__(self, inner: HFEngine):
        self.inner = inner
        self.eos_ids = inner.eos_ids
        self.max_lag = 0

    def generate(self, prompt_ids, params, max_new_tokens_per_row=None):
        return self.inner.generate(prompt_ids, params)

    def sync_weights(self, version):
        pass

    def close(self):
        pass


def run(agent, tok, texts, n=2, budget=BUDGET, seed=1, temperature=1.0):
    params = SamplingParams(max_new_tokens=budget, n=n, temperature=temperature, seed=seed)
    return agent.generate(gen_batch(tok, texts), params)


@both_schedules
def test_multi_turn_episodes_keep_exact_ids_and_logprobs_match_trainer(tool_model, tmp_path, streaming):
    model, tok = tool_model
    engine = RecordingEngine(model, tok, 64)
    with AgentRollout(engine, tok, agent_cfg(tmp_path), tok.pad_token_id, streaming=streaming) as agent:
        batch, metrics = run(agent, tok, ["Compute 12 * 34.", "Compute 7 * 8 please."], n=3)
    assert len(batch) == 6
    assert metrics["agent/tool_calls/mean"] > 0.5 and metrics["agent/turns/mean"] > 1.5, metrics
    mask = batch["response_mask"]
    # observation tokens exist, are attended to, and are out of the loss
    obs = (mask == 0) & (batch["attention_mask"][:, -BUDGET:] == 1)
    assert obs.any()
    assert (batch["rollout_log_probs"][obs] == 0).all()
    # the taught call ran and its result is in the episode (at temperature 1 some episodes stray first)
    texts = [tok.decode(batch["responses"][i][batch["attention_mask"][i, -BUDGET:].bool()]) for i in range(6)]
    assert any("<result>408</result>" in t for t in texts), texts

    # token in, token out: every generated id list sits verbatim right after the exact context it came from
    finals = [unpadded(batch, i) for i in range(len(batch))]
    checked = 0
    for contexts, n, out in engine.calls:
        for row, (ids, lps) in enumerate(zip(out.response_ids, out.log_probs, strict=True)):
            ctx = contexts[row // n]
            hits = [
                f for f in finals if f[0][: len(ctx)] == ctx and f[0][len(ctx) : len(ctx) + len(ids)] == ids
            ]
            assert hits, f"generated ids of call row {row} not found after their context"
            full, m, lp = hits[0]
            start = len(ctx) - (len(full) - len(m))
            assert all(v == 1 for v in m[start : start + len(ids)])
            # the same float32 numbers up to the rounding of a batch that shrinks as episodes end
            assert lp[start : start + len(ids)] == pytest.approx(lps, abs=1e-5)
            checked += 1
    assert checked > len(batch)  # more than one turn was checked
    # the hazard this avoids is real: a loop that decodes the response and re-encodes it (text in, text
    # out) would train on other ids than the sampled ones, here at the tool-call/observation boundary
    drift = 0
    for full, m, _ in finals:
        response = full[len(full) - len(m) :]
        drift += int(encode(tok, tok.decode(response, skip_special_tokens=False)) != response)
    assert drift > 0

    # the trainer's recomputation (fp32, CPU) equals the rollout log-probs on every model token
    lp, _ = response_log_probs(
        model, batch["input_ids"], batch["attention_mask"], batch["position_ids"], BUDGET
    )
    gap = ((lp - batch["rollout_log_probs"]).abs() * mask).max().item()
    assert gap < 1e-4, gap


@both_schedules
def test_finished_episodes_leave_nothing_in_the_prefix_store(tool_model, tmp_path, streaming):
    """Later turns are prefilled from the store; once every episode has ended, what their last turns
    left is dropped (it would otherwise sit through the update until the next weight sync)."""
    model, tok = tool_model
    engine = HFEngine(model, tok, prefix_store_mb=64)
    assert engine.store is not None
    with AgentRollout(engine, tok, agent_cfg(tmp_path), tok.pad_token_id, streaming=streaming) as agent:
        _, metrics = run(agent, tok, ["Compute 12 * 34.", "Compute 7 * 8 please."], n=3)
    assert metrics["agent/turns/mean"] > 1.5, metrics
    assert engine.store.hits > 0  # second turns came from the store
    assert engine.store.nbytes == 0 and not engine.store.entries


@both_schedules
def test_groups_are_interleaved_with_identical_prompts(tool_model, tmp_path, streaming):
    model, tok = tool_model
    with AgentRollout(
        HFEngine(model, tok), tok, agent_cfg(tmp_path), tok.pad_token_id, streaming=streaming
    ) as agent:
        batch, _ = run(agent, tok, ["Compute 12 * 34.", "What is 5 * 6?", "Multiply 3 by 9."], n=4)
    prompts = batch["prompts"]
    assert len(batch) == 12
    for g in range(3):
        block = prompts[4 * g : 4 * g + 4]
        assert (block == block[0]).all()
    assert not torch.equal(prompts[0], prompts[4]) and not torch.equal(prompts[4], prompts[8])
    assert set(batch.keys()) >= {
        "prompts", "responses", "input_ids", "attention_mask", "position_ids",
        "response_mask", "rollout_log_probs", "finish_reason",
    }  # fmt: skip


@both_schedules
def test_budget_truncates_and_counts_never_crashes(tool_model, tmp_path, streaming):
    model, tok = tool_model
    with AgentRollout(
        HFEngine(model, tok), tok, agent_cfg(tmp_path), tok.pad_token_id, streaming=streaming
    ) as agent:
        # 14 tokens hold the tool call but not its observation: every episode ends truncated
        batch, metrics = run(agent, tok, ["Compute 12 * 34."], n=4, budget=14)
    assert batch["responses"].shape[1] == 14
    assert metrics["agent/truncated_ratio"] > 0.5
    assert list(batch["finish_reason"]).count("length") == round(metrics["agent/truncated_ratio"] * 4)
    assert (batch["attention_mask"][:, -14:].sum(1) <= 14).all()


def test_engine_that_ignores_row_budgets_is_caught(tool_model, tmp_path):
    """Per-row budgets are part of the engine contract: an engine that overruns one fails loudly
    (cutting its output would hide the bug and leave the rollout log-probs of a longer turn)."""
    from turnrl.agent.episode import Episode

    model, tok = tool_model
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=3, stop=["</answer>"])
    episodes = [Episode(chat_prompt(tok, "Compute 12 * 34.")), Episode(chat_prompt(tok, "Compute 2 * 3."))]
    with AgentRollout(HFEngine(model, tok), tok, agent_cfg(tmp_path), tok.pad_token_id) as agent:
        outs = agent.loop._generate(episodes, params, [2, 6], 1)
    assert len(outs[0].ids) <= 2 and len(outs[1].ids) <= 6  # the real engine honours each row's budget
    engine = BudgetIgnoringEngine(HFEngine(model, tok))
    agent = AgentRollout(engine, tok, agent_cfg(tmp_path), tok.pad_token_id)
    with agent, pytest.raises(RuntimeError, match="limited to 2"):
        agent.loop._generate(episodes, params, [2, 6], 1)


@both_schedules
def test_per_turn_cap_bounds_every_model_run(tool_model, tmp_path, streaming):
    model, tok = tool_model
    cfg = agent_cfg(
        tmp_path,
        **{
            "rollout.multi_turn.max_tokens_per_turn": 5,
            "rollout.multi_turn.max_turns": 3,
            "rollout.multi_turn.invalid_action_observation": "' Invalid.'",
        },
    )
    with AgentRollout(HFEngine(model, tok), tok, cfg, tok.pad_token_id, streaming=streaming) as agent:
        batch, metrics = run(agent, tok, ["Compute 12 * 34."], n=2, budget=30)
    # a per-turn cap of 5 splits the tool call, so turns end without a complete action
    assert metrics["agent/turns/mean"] > 1
    model_runs = batch["response_mask"][0]
    runs, current = [], 0
    for v in [*model_runs.tolist(), 0]:
        if v:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    assert runs and max(runs) <= 5, runs


@both_schedules
def test_observation_is_cut_with_visible_marker(tool_model, tmp_path, streaming):
    model, tok = tool_model
    cfg = agent_cfg(
        tmp_path,
        **{"rollout.multi_turn.max_obs_length": 2, "rollout.multi_turn.obs_truncation_marker": "'~'"},
    )
    with AgentRollout(HFEngine(model, tok), tok, cfg, tok.pad_token_id, streaming=streaming) as agent:
        batch, metrics = run(agent, tok, ["Compute 12 * 34."], n=4, budget=60)
    observations = [tok.decode(ids) for i in range(4) for kind, ids in segments(batch, i) if kind == 0]
    assert observations
    # "408" is 3 tokens; 2 allowed: one digit, then the marker; the closing tag survives the cut
    assert set(observations) == {"\n\n<result>4~</result>\n\n"}, observations
    assert metrics["agent/obs_truncated/mean"] > 0


@both_schedules
def test_bad_tools_become_error_observations_and_the_step_goes_on(tool_model, tmp_path, streaming):
    model, tok = tool_model
    tools = tmp_path / "bad_tools.py"
    tools.write_text(
        "import asyncio\n"
        "class Raises:\n"
        "    name = 'calculator'\n    description = 'x'\n    parameters = {'type': 'object', 'properties': {'expression': {'type': 'string'}}}\n"
        "    async def call(self, arguments):\n        raise RuntimeError('boom')\n"
        "class Slow:\n"
        "    name = 'calculator'\n    description = 'x'\n    parameters = {'type': 'object', 'properties': {'expression': {'type': 'string'}}}\n"
        "    async def call(self, arguments):\n        await asyncio.sleep(30)\n        return 'late'\n"
        "class NotText:\n"
        "    name = 'calculator'\n    description = 'x'\n    parameters = {'type': 'object', 'properties': {'expression': {'type': 'string'}}}\n"
        "    async def call(self, arguments):\n        return 42\n"
    )
    expected = {
        "Raises": "failed: RuntimeError: boom",
        "Slow": "timed out after 0.5 s",
        "NotText": "returned int, not text",
    }
    for cls, message in expected.items():
        cfg = agent_cfg(
            tmp_path,
            **{
                "rollout.multi_turn.tools": "[]",
                "rollout.multi_turn.custom_tools": f"['{tools}:{cls}']",
                "rollout.multi_turn.tool_timeout": 0.5,
                "rollout.multi_turn.max_obs_length": 64,
            },
        )
        start = time.perf_counter()
        with AgentRollout(HFEngine(model, tok), tok, cfg, tok.pad_token_id, streaming=streaming) as agent:
            batch, metrics = run(agent, tok, ["Compute 12 * 34."], n=4, budget=64)
        # Slow sleeps 30 s: ending well before that shows the 0.5 s timeout cut it (loose: loaded CI)
        assert time.perf_counter() - start < 25
        texts = [tok.decode(batch["responses"][i][batch["attention_mask"][i, -64:].bool()]) for i in range(4)]
        assert any(message in t for t in texts), (cls, texts)
        assert metrics["agent/tool_error_ratio"] == 1.0, (cls, metrics)


@both_schedules
def test_trainer_stages_run_on_agent_batches(tool_model, tmp_path, streaming):
    """Rollout -> group -> reward -> old log-prob (the actor's shared-prefix path) -> GRPO -> update."""
    from turnrl.rewards.scorer import RuleReward
    from turnrl.tasks import scorers
    from turnrl.trainer import stages
    from turnrl.workers.actor import Actor

    model, tok = tool_model
    cfg = agent_cfg(tmp_path, **{"rollout.n": 4, "actor.optim.lr": 1e-4})
    texts = ["Compute 12 * 34.", "Compute 21 * 3."]
    prompts = gen_batch(tok, texts)
    prompts["data_source"] = ["turnrl/calculator"] * 2
    prompts["ground_truth"] = ["408", "63"]
    prompts["extra_info"] = [{}, {}]
    prompts["index"] = [0, 1]
    g = stages.split_generation_input(prompts)
    with AgentRollout(HFEngine(model, tok), tok, cfg, tok.pad_token_id, streaming=streaming) as agent:
        rollout, _ = agent.generate(g, SamplingParams(max_new_tokens=BUDGET, n=4, seed=5))
    batch = stages.group_and_merge(prompts, rollout, 4)
    stages.score(RuleReward(tok, scorers=scorers()), batch)  # with the tasks' scorers, as a run
    assert batch["token_level_scores"][:4].sum(-1).max() == 1.0  # the memorised answer 408 is right
    actor = Actor(cfg.actor, cfg.model.__class__(path="tiny-random"), cfg.rollout)
    actor.model.load_state_dict(model.state_dict())  # the role builds its own module; give it these weights
    batch["old_log_probs"] = actor.compute_log_prob(batch)["log_probs"]
    gap = ((batch["old_log_probs"] - batch["rollout_log_probs"]).abs() * batch["response_mask"]).max()
    assert gap < 1e-4
    stages.advantages(batch, cfg)
    assert (batch["advantages"][batch["response_mask"] == 0] == 0).all()
    metrics, _ = actor.update(batch, step=0)
    assert torch.isfinite(torch.tensor(metrics["actor/pg_loss"]))


def test_close_is_idempotent(tool_model, tmp_path):
    model, tok = tool_model
    agent = AgentRollout(HFEngine(model, tok), tok, agent_cfg(tmp_path), tok.pad_token_id)
    agent.close()
    agent.close()
    assert asyncio.iscoroutinefunction(agent.tools["calculator"].call)


@pytest.fixture(scope="module")
def json_model():
    """A tiny model taught one JSON tool call in the chat template, then the answer."""
    from turnrl.agent.chat_template import ToolMessages
    from turnrl.models.loader import load_tokenizer

    tok = load_tokenizer("tiny-random")
    template = ToolMessages.probe(tok)
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 * 34"}}\n</tool_call>'
    return teach(
        [
            *encode(tok, call),
            tok.eos_token_id,
            *encode(tok, template.render(["408"], "<|im_end|>")),
            *encode(tok, "<answer>408</answer>"),
            tok.eos_token_id,
        ],
        steps=80,
    )


@both_schedules
def test_json_tool_calls_through_the_chat_template(json_model, tmp_path, streaming):
    model, tok = json_model
    cfg = agent_cfg(
        tmp_path, **{"rollout.multi_turn.format": "json", "rollout.multi_turn.max_obs_length": 16}
    )
    with AgentRollout(HFEngine(model, tok), tok, cfg, tok.pad_token_id, streaming=streaming) as agent:
        batch, metrics = run(agent, tok, ["Compute 12 * 34."], n=4, budget=64)
    assert metrics["agent/tool_calls/mean"] > 0.5, metrics
    observations = {tok.decode(ids) for i in range(4) for kind, ids in segments(batch, i) if kind == 0}
    # the tool result arrives as a tool message of the chat template, after the model's own <|im_end|>
    assert "\n<|im_start|>tool\n408<|im_end|>\n<|im_start|>assistant\n" in observations, observations
    for i in range(4):
        runs = segments(batch, i)
        if len(runs) > 1:
            assert runs[0][1][-1] == tok.eos_token_id  # the model's message end is a model token
    lp, _ = response_log_probs(model, batch["input_ids"], batch["attention_mask"], batch["position_ids"], 64)
    assert ((lp - batch["rollout_log_probs"]).abs() * batch["response_mask"]).max() < 1e-4

    # the same model calling a tool this run does not have: an invalid action, answered in a tool message
    other = tmp_path / "other_tool.py"
    other.write_text('def weather(city):\n    """Weather."""\n    return "sunny"\n')
    cfg = agent_cfg(
        tmp_path,
        **{
            "rollout.multi_turn.format": "json",
            "rollout.multi_turn.tools": "[]",
            "rollout.multi_turn.custom_tools": f"['{other}:weather']",
        },
    )
    with AgentRollout(HFEngine(model, tok), tok, cfg, tok.pad_token_id, streaming=streaming) as agent:
        batch, metrics = run(agent, tok, ["Compute 12 * 34."], n=4, budget=120)
    assert metrics["agent/invalid_actions/mean"] > 0.5 and metrics["agent/tool_calls/mean"] == 0
    observations = [tok.decode(ids) for i in range(4) for kind, ids in segments(batch, i) if kind == 0]
    assert any(
        "<|im_start|>tool\nerror: unknown tool 'calculator'; available: weather." in o for o in observations
    )
    assert not any("{tool_tag}" in o for o in observations)
