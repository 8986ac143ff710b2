"""The LLM judge's pure parts (`turnrl.rewards.judge`): filling the rubric, reading the score back,
the reply cache, the judge's metrics, and the config's checks of `reward.judge`."""

from __future__ import annotations

import json
import re

import pytest

from turnrl.config import ConfigError, check_config, load_config
from turnrl.config.schema import DEFAULT_JUDGE_PROMPT, Config, JudgeConfig
from turnrl.rewards import judge as judges
from turnrl.rewards.judge import JudgeCache, Unparsed, Verdict, fill, parse_score, prompt_text, truth_text
from turnrl.rewards.scorer import judge_metrics, own_metrics

DEFAULT = JudgeConfig().score_pattern


# -- the rubric ------------------------------------------------------------------------------------
def test_fill_puts_each_field_in_its_place():
    out = fill("Q: {prompt}\nA: {response}\nRef: {ground_truth}", "2+2?", "4", "4")
    assert out == "Q: 2+2?\nA: 4\nRef: 4"


def test_fill_leaves_other_braces_and_fills_once():
    # JSON in the rubric stays (str.format would raise on it); a response that writes a placeholder
    # is not filled again: one pass over the template only
    template = 'Reply as {"score": N}. Response: {response} Truth: {ground_truth}'
    out = fill(template, "p", "see {ground_truth} and {prompt}", "42")
    assert out == 'Reply as {"score": N}. Response: see {ground_truth} and {prompt} Truth: 42'


def test_default_prompt_has_every_placeholder():
    out = fill(DEFAULT_JUDGE_PROMPT, "PROMPT", "RESPONSE", "TRUTH")
    assert all(word in out for word in ("PROMPT", "RESPONSE", "TRUTH"))
    assert "{" not in out  # the default rubric writes no other braces
    assert parse_score(out.splitlines()[-1].replace('"Score: N"', "Score: 10"), DEFAULT, 10) == 1.0


def test_prompt_text_of_chat_messages():
    assert prompt_text([{"role": "user", "content": "What is 2+2?"}]) == "What is 2+2?"
    two = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert prompt_text(two) == "system: Be brief.\n\nuser: 2+2?"
    assert prompt_text("plain") == "plain"


def test_truth_text():
    assert truth_text("12") == "12"
    assert truth_text({"target": ["Paris"]}) == '{"target": ["Paris"]}'
    assert truth_text(7) == "7"


# -- the score -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "max_score", "expected"),
    [
        ("Score: 7", 10, 0.7),  # 7 / 10
        ("Looks right.\nScore: 10", 10, 1.0),
        ("Score: 0", 10, 0.0),
        ("Score:3.5", 5, 0.7),  # 3.5 / 5
        ("Score: 2 at first... on reflection Score: 9", 10, 0.9),  # the last match counts
        ("Score: 7.", 10, 0.7),  # a sentence's full stop: "7." reads as 7
    ],
)
def test_parse_score_divides_by_max_score(reply, max_score, expected):
    assert parse_score(reply, DEFAULT, max_score) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("reply", "pattern", "why"),
    [
        ("Score: 12", DEFAULT, "gives the score 12, outside [0, reward.judge.max_score=10]"),
        ("I cannot grade this.", DEFAULT, "has no match of reward.judge.score_pattern"),
        ("Score: ...", DEFAULT, "gives '...' as its score, not a number"),
        ("Score: 1.2.3", DEFAULT, "gives '1.2.3' as its score, not a number"),
        ("xyz", r"(\S)", "gives 'z' as its score, not a number"),  # random text's last character
        ("anything", r"^()", "gives '' as its score, not a number"),  # a group that matched nothing
        ("anything", r"(\d)?", "gives None as its score, not a number"),  # a group that took no part
        ("Score: -1", r"Score:\s*(-?\d+)", "gives the score -1, outside"),
    ],
)
def test_parse_score_refuses(reply, pattern, why):
    with pytest.raises(Unparsed, match=re.escape(why)):
        parse_score(reply, pattern, 10)


# -- the cache -------------------------------------------------------------------------------------
def test_cache_drops_the_least_recently_used():
    cache = JudgeCache(2)
    cache.put("a", "Score: 1")
    cache.put("b", "Score: 2")
    assert cache.get("a") == "Score: 1"  # a is now the most recent
    cache.put("c", "Score: 3")
    assert cache.get("b") is None
    assert (cache.get("a"), cache.get("c"), len(cache)) == ("Score: 1", "Score: 3", 2)


def test_cache_key_is_the_whole_request():
    key = JudgeCache.key("judge", "rubric with response", 0.0, 64)
    assert key == JudgeCache.key("judge", "rubric with response", 0.0, 64)
    others = [
        JudgeCache.key("other-judge", "rubric with response", 0.0, 64),
        JudgeCache.key("judge", "rubric with another response", 0.0, 64),
        JudgeCache.key("judge", "rubric with response", 0.7, 64),
        JudgeCache.key("judge", "rubric with response", 0.0, 128),
    ]
    assert key not in others and len(set(others)) == 4


def test_cache_file_outlives_the_run(tmp_path):
    path = tmp_path / "judge" / "cache.jsonl"
    first = JudgeCache(10, path)
    first.put("k1", "Score: 4")
    first.put("k2", "Score: 5")
    with path.open("a") as f:
        f.write('{"key": "k3", "rep')  # a line cut short by a killed run
    second = JudgeCache(10, path)
    assert (second.get("k1"), second.get("k2"), second.get("k3")) == ("Score: 4", "Score: 5", None)
    small = JudgeCache(1, path)  # the file's last `size` replies
    assert (small.get("k1"), small.get("k2")) == (None, "Score: 5")
    assert json.loads(path.read_text().splitlines()[0]) == {"key": "k1", "reply": "Score: 4"}


# -- the metrics -----------------------------------------------------------------------------------
def test_judge_metrics_count_rows_and_requests():
    verdicts = [
        Verdict(0.7, latency_s=0.5, reply="Score: 7"),
        Verdict(0.7, cached=True, reply="Score: 7"),  # the same request as the first row's
        Verdict(error="replied 'x', which has no match", unparsed=True, latency_s=1.5),
        Verdict(error="did not answer within reward.judge.timeout_s=1s (1 attempt(s))", latency_s=1.0),
    ]
    out = judge_metrics(verdicts)
    assert out == {
        judges.REQUESTS: [3.0],
        judges.ERRORS: [1.0],
        judges.UNPARSED: [1.0],
        judges.CACHE_HITS: [1.0],
        judges.LATENCY: [0.5, 1.5, 1.0],
    }


def test_own_metrics_sum_counts_and_average_seconds():
    extras = {
        "reward/errors": [0.0, 2.0],
        judges.CACHE_HITS: [3.0, 1.0],
        judges.LATENCY: [0.5, 1.5],
        "acc": [1.0, 0.0],
    }
    assert own_metrics(extras) == {"reward/errors": 2.0, judges.CACHE_HITS: 4.0, judges.LATENCY: 1.0}


# -- the config ------------------------------------------------------------------------------------
def judge_config(**settings) -> Config:
    cfg = Config()
    cfg.reward.judge = JudgeConfig(enable=True, **settings)
    return cfg


def test_a_judge_by_url_or_by_model_is_accepted():
    check_config(judge_config(url="http://127.0.0.1:8000/v1"))
    check_config(judge_config(model="tiny-random"))
    cfg = load_config(overrides=["reward.judge.enable=true", "reward.judge.model=tiny-random"])
    assert cfg.reward.judge.model == "tiny-random"
    check_config(Config())  # off: nothing of it is checked


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "'reward.judge.enable=true' needs 'reward.judge.url' (an OpenAI-compatible endpoint) or"),
        ({"url": "localhost:8000"}, "'reward.judge.url' 'localhost:8000' is not an http(s):// URL"),
        ({"model": "m", "device": "tpu"}, "unknown 'reward.judge.device' 'tpu'; valid: auto, cpu, cuda"),
        ({"model": "m", "prompt": "Rate {prompt}"}, "'reward.judge.prompt' has no {response} placeholder"),
        ({"model": "m", "score_pattern": r"Score: \d+"}, "has 0 groups; it needs exactly one"),
        ({"model": "m", "score_pattern": r"(Score|Grade): (\d+)"}, "has 2 groups; it needs exactly one"),
        (
            {"model": "m", "score_pattern": "Score: ([0-9"},
            "'reward.judge.score_pattern' 'Score: ([0-9' is not a regex",
        ),
        ({"model": "m", "max_score": 0.0}, "'reward.judge.max_score' must be > 0, got 0.0"),
        ({"model": "m", "concurrency": 0}, "'reward.judge.concurrency' must be >= 1, got 0"),
        (
            {"model": "m", "timeout_s": float("nan")},
            "'reward.judge.timeout_s' must be finite and > 0, got nan",
        ),
    ],
)
def test_bad_judge_settings_name_the_key(settings, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        check_config(judge_config(**settings))
    assert "\n" not in str(err.value)
