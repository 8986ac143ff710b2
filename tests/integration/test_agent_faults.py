"""Reliability under a faulty tool: calculator-agent episodes on `tiny-random`'s tokenizer through the
real rollout path, with `tests/support/faulty_tools.py` failing 10 % of the calls (raise, time out, 10 MB of
output, no output, non-UTF-8 bytes).

No episode may crash the step or hang it; every injected fault must reach its episode as an error
observation within the observation budget; and the loop's counts (`agent/tool_errors/<kind>`, the
per-episode `agent_tool_errors`) must equal what the tool recorded injecting, exactly.
"""

from __future__ import annotations

import time

import pytest

from tests.support.fault_episodes import accounting_problems, soak
from turnrl.models.loader import load_tokenizer

TIMEOUT = 1.0  # a real call under a loaded 2-core CI machine must never come near it
MAX_OBS = 32  # the calculator recipe's max_obs_length
# what the model must read for each fault: the error names the tool and says what went wrong
SHOWN = {
    "raise": "error: tool 'calculator' failed: InjectedFault: injected fault",
    "timeout": f"error: tool 'calculator' timed out after {TIMEOUT:g} s",
    "huge": "error: tool 'calculator' returned too much output (",
    "non_utf8": "error: tool 'calculator' returned invalid UTF-8 (shown as \ufffd)",
}


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


def check_observations(tok, report) -> None:
    wrap = len(tok("\n\n<result>", add_special_tokens=False)["input_ids"]) + len(
        tok("</result>\n\n", add_special_tokens=False)["input_ids"]
    )
    for expr, text in report.rows:
        assert len(tok(text, add_special_tokens=False)["input_ids"]) <= MAX_OBS + wrap + 2, (expr, text)
        kind = report.injections.get(expr)
        if kind is None:
            a, b = (int(x) for x in expr.split(" * "))
            assert text == f"\n\n<result>{a * b}</result>\n\n", (expr, text)
        elif kind == "empty":  # shown as it came, empty tags; counted as a failed call
            assert text == "\n\n<result></result>\n\n", (expr, text)
        else:
            assert SHOWN[kind] in text, (expr, kind, text)
            if kind == "huge":
                assert text.rstrip().endswith("...[truncated]</result>"), text
            if kind == "non_utf8":
                assert text.count("\ufffd") >= 2, text


@pytest.mark.slow  # the soak (~6 s); the faults of every kind and schedule run by default below
@pytest.mark.timeout(120)
def test_1000_episodes_with_10_percent_faults(tok, tmp_path):
    start = time.perf_counter()
    report = soak(tok, tmp_path, episodes=1000, rate=0.1, seed=0, tool_timeout=TIMEOUT)
    elapsed = time.perf_counter() - start
    assert report.crashes == 0 and report.episodes == 1000 and report.calls == 1000
    total = sum(report.injected.values())
    assert 60 <= total <= 140, report.injected  # 10 % of 1000 calls, give or take chance
    assert set(report.injected) == {"raise", "timeout", "huge", "empty", "non_utf8"}, report.injected
    assert accounting_problems(report) == []
    for m in report.metrics:  # the existing ratio agrees with the counts: 250 calls per batch
        assert m["agent/tool_error_ratio"] == pytest.approx(
            sum(v for k, v in m.items() if k.startswith("agent/tool_errors/")) / 250
        )
    # every huge output is cut to the budget (so may be a long error text); the metric counts each cut
    cut = [expr for expr, text in report.rows if "...[truncated]" in text]
    assert {e for e in report.injections if report.injections[e] == "huge"} <= set(cut)
    assert sum(m["agent/obs_truncated/mean"] for m in report.metrics) * 250 == pytest.approx(len(cut))
    check_observations(tok, report)
    # 4 batches: each turn waits for its slowest call, a timed-out one: 1 s, never the tool's 4 s + 4 s
    assert elapsed < 60, elapsed


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "tool_class, streaming",
    [("FaultyCalculator", True), ("BlockingFaultyCalculator", False), ("BlockingFaultyCalculator", True)],
    ids=["async-tool-streaming", "blocking-tool-turn-locked", "blocking-tool-streaming"],
)
def test_faults_in_other_schedules_and_blocking_tools(tok, tmp_path, tool_class, streaming):
    """Streaming episodes each wait for their own calls; a blocking tool's timed-out calls keep their
    threads asleep (4 s each), which must not starve the calls after them into timeouts of their own."""
    report = soak(
        tok, tmp_path, episodes=300, rate=0.3, seed=1, tool_timeout=TIMEOUT, batch_size=150,
        streaming=streaming, tool_class=tool_class,
    )  # fmt: skip
    assert report.crashes == 0 and report.calls == 300
    assert report.injected["timeout"] >= 10, report.injected
    assert accounting_problems(report) == []
    check_observations(tok, report)
