"""The LLM judge (`reward.judge`) against a real `turnrl serve --model tiny-random --threads 1` child.

tiny-random writes random text, so what the judge says about a response carries no meaning here;
what is tested is the mechanics: requests reach the server with its key, replies are parsed (or
are not, and then follow `reward.on_error`), the cache saves requests, failures are counted. For a
reply that parses, the child is given weights that make it a judge which answers "7777..." to
anything (`sevens`): still the real server, the real client and the real chat template.

Time-outs, retries and concurrency are measured against a port that accepts connections and never
answers (`SilentPort`): a judge that hangs.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

from tests.support.serving import KEY, serve_process
from tests.support.tiny_runs import read_metrics, tiny_overrides
from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.config.schema import JudgeConfig
from turnrl.models.loader import load_tokenizer
from turnrl.models.weights_dir import write_weights_dir
from turnrl.rewards import judge as judges
from turnrl.rewards.guard import ERRORS_KEY
from turnrl.rewards.judge import Judge, JudgeInput
from turnrl.rewards.registry import RewardError
from turnrl.rewards.scorer import RewardFunctionError, RuleReward
from turnrl.rollout.base import Services
from turnrl.runtime import free_port
from turnrl.tasks import scorers
from turnrl.trainer.ppo import Trainer
from turnrl.trainer.setup import build_reward

pytest.importorskip("openai")

DIGIT = r"(\d)"
"""A score pattern the sevens judge's reply always matches: 7, so 0.7 with max_score 10."""


# -- the servers -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One tiny-random child for the module, with key KEY; weights loadable from its root."""
    root = tmp_path_factory.mktemp("judge_weights")
    with serve_process(root) as child:
        child.loaded = "random"  # which weights it serves now (see `weights`)
        yield child


def sevens_state(model: torch.nn.Module, tokenizer) -> dict[str, torch.Tensor]:
    """tiny-random's weights changed into a judge that answers "7777..." to anything, greedily.

    Every layer adds nothing (attention and MLP output projections are zero), so the last hidden
    state is the current token's embedding. The final norm keeps its dimension 1 only, which every
    embedding sets to 1 and the "7"'s to 2: with the tied output head, a token's logit is its
    dimension 1 times the same positive number, and "7" has the largest."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for name, tensor in state.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            tensor.zero_()
    embed = state["model.embed_tokens.weight"]
    embed[:, 1] = 1.0
    embed[tokenizer.convert_tokens_to_ids("7"), 1] = 2.0
    state["lm_head.weight"] = embed  # tied: the state dict holds both names
    state["model.norm.weight"].zero_()
    state["model.norm.weight"][1] = 1.0
    return state


@pytest.fixture(scope="module")
def weights(server, tiny, tmp_path_factory):
    """`weights("sevens")` / `weights("random")`: make the child serve those weights (loaded as its
    next policy version, only when it serves the other ones)."""
    model, tokenizer = tiny
    states = {"random": model.state_dict(), "sevens": sevens_state(model, tokenizer)}
    root = Path(server.weights_root)

    def use(kind: str) -> None:
        if server.loaded == kind:
            return
        version = health(server)["policy_version"] + 1
        path = write_weights_dir(states[kind], root / f"{kind}-{version}")
        body = {"model_path": str(path), "policy_version": version}
        r = httpx.post(
            server.url + "/update_weights_from_disk", json=body, headers=server.headers, timeout=60
        )
        assert r.status_code == 200, r.text
        server.loaded = kind

    return use


def health(server) -> dict:
    return httpx.get(server.url + "/health", headers=server.headers, timeout=10).json()


def served(server) -> int:
    """Generation requests the child has answered so far."""
    return int(health(server)["requests_served"])


class SilentPort:
    """A port that accepts connections, reads what they send and never answers: a hung judge.
    Counts the connections it accepted and the most it held open at once."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.accepted = self.peak = 0
        self.open: set[socket.socket] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.sock, selectors.EVENT_READ)
        while not self.stop.is_set():
            for key, _ in selector.select(0.02):
                if key.fileobj is self.sock:
                    conn, _ = self.sock.accept()
                    conn.setblocking(False)
                    selector.register(conn, selectors.EVENT_READ)
                    self.open.add(conn)
                    self.accepted += 1
                    self.peak = max(self.peak, len(self.open))
                    continue
                conn = key.fileobj
                try:
                    data = conn.recv(1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:  # the client gave up and closed
                    selector.unregister(conn)
                    conn.close()
                    self.open.discard(conn)
        for conn in self.open:
            conn.close()
        selector.close()
        self.sock.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


@pytest.fixture
def silent():
    port = SilentPort()
    yield port
    port.close()


@pytest.fixture
def make_judge(server):
    """`make_judge(url=..., **JudgeConfig fields)`: a judge of `server` (with its key, replies of 8
    tokens at most) unless told otherwise; closed at the end of the test."""
    made: list[Judge] = []

    def make(**settings) -> Judge:
        settings = {"url": server.url + "/v1", "api_key": KEY, "max_tokens": 8, **settings}
        made.append(Judge.from_config(JudgeConfig(enable=True, **settings)))
        return made[-1]

    yield make
    for judge in made:
        judge.close()


def row(i: int) -> JudgeInput:
    return JudgeInput(f"What is {i} + 1?", f"<answer>{i + 1}</answer>", str(i + 1))


# -- requests, the key, parsing --------------------------------------------------------------------
def test_the_judge_asks_the_server_with_its_key_and_reads_the_score(server, weights, make_judge):
    weights("sevens")
    judge = make_judge(score_pattern=DIGIT)  # no model_name: the first one /v1/models lists
    assert judge.model_name == "tiny-random"
    before = served(server)
    verdicts = judge.score([row(1), row(2), row(3)])
    assert served(server) - before == 3  # one request per row, every one let in by the key
    for v in verdicts:
        assert (v.score, v.error, v.cached) == (pytest.approx(0.7), "", False)  # "7" / max_score 10
        assert v.reply.startswith("7777") and v.latency_s is not None and v.latency_s > 0


def test_a_wrong_key_is_refused(server, make_judge):
    # at start-up, by the one request that asks for the model's name
    with pytest.raises(
        RewardError, match=r"GET /models failed \(answered HTTP 401: api key: wrong key\); check the URL"
    ):
        make_judge(api_key="not-the-key")
    # mid-run: an error (HTTP 401 is not retried), not an unparsed reply
    judge = make_judge(api_key="not-the-key", model_name="tiny-random")
    before = served(server)
    (verdict,) = judge.score([row(1)])
    assert verdict.error == "answered HTTP 401: api key: wrong key" and not verdict.unparsed
    assert served(server) == before


def test_random_text_is_an_unparsed_reply(server, weights, make_judge):
    weights("random")
    (verdict,) = make_judge().score([row(1)])  # the default pattern: no "Score: N" in random text
    assert verdict.unparsed and "has no match of reward.judge.score_pattern 'Score:" in verdict.error
    assert verdict.reply and verdict.error.startswith("replied '")
    # the reply's last character (greedy tiny-random writes newlines here): not a number
    (verdict,) = make_judge(score_pattern=r"(?s)(.)").score([row(1)])
    assert verdict.unparsed and verdict.error.endswith("as its score, not a number"), verdict.error


def test_a_score_out_of_range_is_an_unparsed_reply(server, weights, make_judge):
    weights("sevens")
    (verdict,) = make_judge(score_pattern=r"(\d+)").score([row(1)])  # "77777777" out of 10
    assert (
        verdict.unparsed
        and "gives the score 7.77778e+07, outside [0, reward.judge.max_score=10]" in verdict.error
    )


# -- the cache -------------------------------------------------------------------------------------
def test_the_cache_makes_a_repeated_request_once(server, weights, make_judge, tmp_path):
    weights("sevens")
    cache_file = tmp_path / "judge-cache.jsonl"
    judge = make_judge(score_pattern=DIGIT, cache_file=str(cache_file))
    rows = [row(1), row(2), row(1), row(1)]
    before = served(server)
    first = judge.score(rows)
    assert served(server) - before == 2  # identical rows in one call share a request
    assert [v.cached for v in first] == [False, False, True, True]
    assert [v.score for v in first] == [pytest.approx(0.7)] * 4
    second = judge.score(rows)
    assert served(server) - before == 2  # the second call asks nothing
    assert all(v.cached and v.latency_s is None and v.score == pytest.approx(0.7) for v in second)
    # another run with the same cache file asks nothing either
    again = make_judge(score_pattern=DIGIT, cache_file=str(cache_file)).score(rows)
    assert served(server) - before == 2 and all(v.cached for v in again)
    # without a cache, each call asks again (identical rows of one call still share one request)
    uncached = make_judge(score_pattern=DIGIT, cache_size=0)
    uncached.score([row(1), row(1)])
    uncached.score([row(1)])
    assert served(server) - before == 4


# -- time-outs, retries, concurrency ---------------------------------------------------------------
def test_a_judge_that_never_answers_times_out_retries_and_runs_concurrently(silent, make_judge):
    judge = make_judge(url=silent.url, model_name="m", timeout_s=0.5, max_retries=1, concurrency=4)
    start = time.monotonic()
    verdicts = judge.score([row(i) for i in range(4)])
    elapsed = time.monotonic() - start
    for v in verdicts:
        assert v.error == "did not answer within reward.judge.timeout_s=0.5s (2 attempt(s))"
        assert not v.unparsed
    assert silent.accepted == 8  # 4 rows x (1 attempt + 1 retry)
    assert silent.peak == 4  # all four at once
    assert elapsed < 3.0, elapsed  # one after another: 4 x (0.5 s + ~0.5 s back-off + 0.5 s)


def test_concurrency_one_asks_one_at_a_time(silent, make_judge):
    judge = make_judge(url=silent.url, model_name="m", timeout_s=0.3, max_retries=0, concurrency=1)
    judge.score([row(1), row(2), row(3)])
    assert (silent.accepted, silent.peak) == (3, 1)


def test_an_unreachable_judge_is_an_error(make_judge):
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}/v1"  # nothing listens there
    (verdict,) = make_judge(url=url, model_name="m", max_retries=0).score([row(1)])
    assert (
        verdict.error.startswith("could not be reached (ConnectError: ") and "1 attempt(s)" in verdict.error
    )


# -- in the run's reward: rule + coef x judge, and reward.on_error --------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny-random")


def batch_of(tokenizer, sources: list[str]) -> Batch:
    """One row per data source, each answering "<answer>3</answer>" to "1 + 2", truth 3 (the
    addition task's rule scores it 1)."""
    rows = len(sources)
    ids = torch.tensor([tokenizer("<answer>3</answer>", add_special_tokens=False)["input_ids"]] * rows)
    mask = torch.ones_like(ids, dtype=torch.float32)
    return Batch(
        tensors={
            "responses": ids,
            "response_mask": mask,
            "attention_mask": torch.cat([torch.ones(rows, 2, dtype=torch.long), mask.long()], dim=1),
        },
        non_tensors={
            "data_source": sources,
            "ground_truth": ["3"] * rows,
            "extra_info": [{}] * rows,
            "index": [f"q{i}" for i in range(rows)],
            "raw_prompt": [[{"role": "user", "content": "What is 1 + 2?"}]] * rows,
        },
    )


@pytest.fixture
def make_reward(tokenizer):
    made: list[RuleReward] = []

    def make(judge: Judge, on_error: str) -> RuleReward:
        # timeout_s=0: the rule runs in this process (the judge always does)
        made.append(
            RuleReward(
                tokenizer, missing_ok=True, on_error=on_error, timeout_s=0, scorers=scorers(), judge=judge
            )
        )
        return made[-1]

    yield make
    for reward in made:
        reward.close()  # closing a judge twice (make_judge does too) is harmless


def test_the_reward_is_rule_plus_coef_times_judge(server, weights, make_judge, make_reward, tokenizer):
    weights("sevens")
    reward = make_reward(make_judge(score_pattern=DIGIT, coef=0.5), "fail")
    scores, extras = reward(batch_of(tokenizer, ["turnrl/addition", "turnrl/addition", "my/task"]))
    # the addition rule gives 1; "my/task" has none (0) and scores the judge's alone
    assert scores.sum(-1).tolist() == pytest.approx([1 + 0.5 * 0.7, 1 + 0.5 * 0.7, 0.5 * 0.7])
    assert extras[judges.SCORE] == pytest.approx([0.7] * 3)
    assert extras[judges.REQUESTS] == [1.0] and extras[judges.CACHE_HITS] == [2.0]  # one rubric, 3 rows
    assert extras[ERRORS_KEY] == [0.0] and extras[judges.UNPARSED] == [0.0] and extras["acc"] == [1.0, 1.0]


def test_an_unparsed_reply_follows_reward_on_error(server, weights, make_judge, make_reward, tokenizer):
    weights("sevens")
    batch = batch_of(tokenizer, ["turnrl/addition", "turnrl/addition"])
    unparsed = make_judge()  # the default pattern: "7777..." has no "Score: N"
    with pytest.raises(RewardFunctionError) as err:
        make_reward(unparsed, "fail")(batch)
    message = str(err.value)
    assert message.startswith(
        f"the judge at {server.url}/v1 replied '77777777', which has no match of reward.judge.score_pattern"
    )
    assert message.endswith(
        "on row 0 (index 'q0', data_source 'turnrl/addition') in training; fix reward.judge.prompt or "
        "reward.judge.score_pattern, or set reward.on_error=zero to score such rows 0 (counted in reward/errors)"
    )
    # zero: the row scores 0 whatever its rule said, and is counted
    scores, extras = make_reward(unparsed, "zero")(batch)
    assert scores.sum(-1).tolist() == [0.0, 0.0]
    assert (extras[ERRORS_KEY], extras[judges.UNPARSED], extras[judges.ERRORS]) == ([2.0], [2.0], [0.0])
    # fail_first_step: strict in validation before training and in the first step, zero after it
    first = make_reward(unparsed, "fail_first_step")
    with pytest.raises(
        RewardFunctionError, match=r"in validation before training; .* even in the first step"
    ):
        first(batch, validation=True)
    later = make_reward(make_judge(score_pattern=DIGIT), "fail_first_step")
    later(batch, validation=True)
    later(batch)  # the first training step, scored
    later.judge = unparsed  # the judge starts writing replies without a score
    scores, extras = later(batch)
    assert scores.sum(-1).tolist() == [0.0, 0.0] and extras[ERRORS_KEY] == [2.0]


def test_a_judge_time_out_follows_reward_on_error(silent, make_judge, make_reward, tokenizer):
    judge = make_judge(url=silent.url, model_name="m", timeout_s=0.3, max_retries=0)
    batch = batch_of(tokenizer, ["turnrl/addition", "my/task"])
    with pytest.raises(
        RewardFunctionError,
        match=r"did not answer within reward.judge.timeout_s=0.3s .* check that the judge answers",
    ):
        make_reward(judge, "fail")(batch)
    scores, extras = make_reward(judge, "zero")(batch)
    assert scores.sum(-1).tolist() == [0.0, 0.0]
    assert (extras[ERRORS_KEY], extras[judges.ERRORS], extras[judges.UNPARSED]) == ([2.0], [2.0], [0.0])


# -- the run's reward, built as the trainer builds it ----------------------------------------------
@pytest.mark.slow  # a one-step run; its lighter siblings stay in the default run
def test_the_runs_reward_starts_and_stops_a_child_judge(tokenizer):
    cfg = load_config(
        None,
        [
            "model.path=tiny-random",
            "reward.judge.enable=true",
            "reward.judge.model=tiny-random",
            "reward.judge.max_tokens=8",
            "reward.on_error=zero",
            "trainer.num_threads=1",  # the judge child's torch threads too
        ],
    )
    reward = build_reward(cfg, tokenizer, Services())
    try:
        child = reward.judge.child
        assert child is not None and child.alive() and child.api_key  # a fresh key of its own
        assert "--threads" in child.command(child.port)
        scores, extras = reward(batch_of(tokenizer, ["turnrl/addition"] * 2 + ["my/task"]))
        # random text has no "Score: N": every row fails its judgment and scores 0 (on_error=zero)
        assert scores.sum(-1).tolist() == [0.0, 0.0, 0.0]
        assert extras[judges.REQUESTS] == [1.0] and extras[judges.UNPARSED] == [3.0]
        assert health(child)["requests_served"] == 1
    finally:
        reward.close()
    assert not child.alive()


# -- training runs ---------------------------------------------------------------------------------
def judge_run(tmp_path: Path, **judge: object) -> list[str]:
    """One step of the tiny addition run, scored by the task's rule and `reward.judge` (`judge`)."""
    settings = {f"reward.judge.{k}": v for k, v in {"enable": "true", "max_tokens": 8, **judge}.items()}
    overrides = tiny_overrides(
        tmp_path, **{"trainer.total_training_steps": 1, "trainer.num_threads": 1, **settings}
    )
    return [o for o in overrides if not o.startswith("reward.custom_function")]  # the task's own rule


@pytest.mark.timeout(300)
def test_a_run_scores_rule_plus_coef_times_judge(server, weights, tmp_path, monkeypatch, keep_torch_threads):
    weights("sevens")
    monkeypatch.setenv("TURNRL_API_KEY", KEY)  # reward.judge.api_key is empty: $TURNRL_API_KEY is sent
    cfg = load_config(None, judge_run(tmp_path, url=server.url + "/v1", score_pattern=DIGIT, coef=0.5))
    before = served(server)
    rows = read_metrics(Trainer(cfg).fit())
    step = next(m for m in rows if "critic/score/mean" in m)
    # the random policy never writes an <answer> tag: the rule gives 0, the judge 0.7 x coef 0.5
    assert step["reward_extra/formatted/mean"] == 0.0
    assert (step["critic/score/min"], step["critic/score/max"]) == (pytest.approx(0.35), pytest.approx(0.35))
    assert step["reward_extra/judge_score/mean"] == pytest.approx(0.7)
    assert step["reward/judge/requests"] + step["reward/judge/cache_hits"] == 32  # 4 prompts x 8 samples
    assert step["reward/errors"] == step["reward/judge/unparsed"] == step["reward/judge/errors"] == 0
    val = next(m for m in rows if "val/test_score/mean" in m)
    assert val["val/test_score/mean"] == pytest.approx(0.35) and val["val/reward/errors"] == 0
    assert served(server) - before == step["reward/judge/requests"] + val["val/reward/judge/requests"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_with_a_child_judge_stops_at_a_reply_without_a_score(tmp_path, keep_torch_threads):
    trainer = Trainer(load_config(None, judge_run(tmp_path, model="tiny-random")))
    child = trainer.reward.judge.child
    assert child is not None and child.alive()
    # tiny-random's random text has no "Score: N"; reward.on_error=fail_first_step stops the run
    with pytest.raises(
        RewardFunctionError, match=r"^the judge \(turnrl serve --model tiny-random\) replied "
    ) as err:
        trainer.fit()
    assert "in the first training step; fix reward.judge.prompt or reward.judge.score_pattern" in str(
        err.value
    )
    assert not child.alive()  # stopped with the run
