"""Code rewards: run the model's final program against tests in the code sandbox.

The program is the last fenced code block (```python ... ```) inside the last `<answer>` tag, or
else the last fenced block of the response, or else the answer tag's text itself.

Ground truth (a dict, or the same as a JSON string, as verl/Code-R1 datasets store it):
- `{"inputs": [stdin, ...], "outputs": [expected stdout, ...]}`: one run per case, stdout compared
  line by line with trailing whitespace ignored;
- `{"assert": "assert f(2) == 4\\n..."}`: appended to the program, one run, passes if it exits 0.

Score 1 when every test passes, else 0 (`pass_rate` is reported as a metric). `run_program_tests`
(parse, extract, run) gives each test's result to scorers that grade by more than all or nothing
(the built-in code task's, `turnrl.tasks.code`, which has its own data source).

The sandbox: the `sandbox_url` argument (an agent run binds its own through
`RuleReward(sandbox_url=...)`), else `$TURNRL_SANDBOX_URL`, else a turnrl sandbox started on first
use as a child process (one per interpreter, stopped at exit). Its key: the `sandbox_api_key`
argument (bound beside the URL), else $TURNRL_API_KEY; a child sandbox's own fresh key for the child.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import os
import re
import threading
from dataclasses import dataclass
from typing import Any

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
FENCE = re.compile(r"```(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL)
CODE_SOURCES = ("codecontests", "apps", "taco", "codeforces")  # the built-in code task adds its own
DEFAULT_RUN_TIMEOUT = 5.0

_start_lock = threading.Lock()  # reward threads must not start two sandboxes


@functools.cache
def _child_sandbox() -> tuple[str, str]:
    """Start turnrl's sandbox once per interpreter (stopped at exit); its URL and its key."""
    from turnrl.servers.sandbox import SandboxProcess

    child = SandboxProcess().start()
    return str(child.url), child.api_key


def resolve_sandbox(url: str | None = None, api_key: str | None = None) -> tuple[str, str | None]:
    """The sandbox and its key: `url` if given, else `$TURNRL_SANDBOX_URL`, each with `api_key`
    (None = $TURNRL_API_KEY's, as the client sends it), else the child sandbox and its own key."""
    if url:
        return url, api_key
    if os.environ.get("TURNRL_SANDBOX_URL"):
        return os.environ["TURNRL_SANDBOX_URL"], api_key
    with _start_lock:
        return _child_sandbox()


def extract_program(text: str) -> str | None:
    answer = ANSWER.findall(text)
    scope = answer[-1] if answer else text
    blocks = FENCE.findall(scope)
    if blocks:
        return blocks[-1]
    if answer and answer[-1].strip():
        return answer[-1].strip()
    return None


def parse_tests(ground_truth: Any) -> dict[str, Any]:
    data = ground_truth
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError:
            raise ValueError("code ground truth string is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError(f"code ground truth must be a dict, got {type(data).__name__}")
    if "assert" in data:
        return {"assert": str(data["assert"])}
    inputs, outputs = data.get("inputs"), data.get("outputs")
    if inputs is None or outputs is None or len(list(inputs)) != len(list(outputs)):
        raise ValueError("code ground truth needs 'inputs' and 'outputs' of equal length, or 'assert'")
    return {"inputs": [str(i) for i in inputs], "outputs": [str(o) for o in outputs]}


def same_output(actual: str, expected: str) -> bool:
    def lines(s: str) -> list[str]:
        return [line.rstrip() for line in s.strip().splitlines()]

    return lines(actual) == lines(expected)


@dataclass(frozen=True)
class CaseRun:
    """One stdin/stdout test of a program: did it run cleanly (exit 0, no time-out), and was its
    output the expected one."""

    ran: bool
    passed: bool


async def _run_stdio(
    url: str,
    program: str,
    inputs: list[str],
    outputs: list[str],
    run_timeout: float,
    api_key: str | None = None,
) -> list[CaseRun]:
    from turnrl.servers.sandbox import SandboxClient

    async with SandboxClient(url, timeout=30.0, retries=2, api_key=api_key) as client:
        runs = await asyncio.gather(
            *(client.run_code(program, stdin=i, run_timeout=run_timeout) for i in inputs)
        )
    return [CaseRun(r.ok, r.ok and same_output(r.stdout, o)) for r, o in zip(runs, outputs, strict=True)]


async def _run_tests(
    url: str, program: str, tests: dict[str, Any], run_timeout: float, api_key: str | None = None
) -> list[CaseRun]:
    if "assert" in tests:  # one run of the program with the asserts appended: it passes if it exits 0
        from turnrl.servers.sandbox import SandboxClient

        async with SandboxClient(url, timeout=30.0, retries=2, api_key=api_key) as client:
            result = await client.run_code(program + "\n\n" + tests["assert"], run_timeout=run_timeout)
        return [CaseRun(result.ok, result.ok)]
    return await _run_stdio(url, program, tests["inputs"], tests["outputs"], run_timeout, api_key)


def run_program_tests(
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    *,
    sandbox_url: str | None = None,
    sandbox_api_key: str | None = None,
) -> list[CaseRun] | None:
    """What every code scorer does before it grades: parse the tests, extract the final program, run
    it on each test in the sandbox (`extra_info["run_timeout"]` seconds a run, default 5). One
    `CaseRun` per test, in order; None when the response holds no program."""
    tests = parse_tests(ground_truth)
    program = extract_program(solution_str)
    if program is None:
        return None
    info = extra_info if isinstance(extra_info, dict) else {}
    timeout = float(info.get("run_timeout", DEFAULT_RUN_TIMEOUT))
    url, key = resolve_sandbox(sandbox_url, sandbox_api_key)
    return _run_sync(_run_tests(url, program, tests, timeout, key))


def _run_sync(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # called from inside an event loop
        return pool.submit(asyncio.run, coro).result()


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    *,
    sandbox_url: str | None = None,
    sandbox_api_key: str | None = None,
) -> dict[str, float]:
    """verl's signature; `sandbox_url` and its key `sandbox_api_key` (bound by the reward table)
    pick the sandbox."""
    runs = run_program_tests(
        solution_str, ground_truth, extra_info, sandbox_url=sandbox_url, sandbox_api_key=sandbox_api_key
    )
    if runs is None:
        return {"score": 0.0, "pass_rate": 0.0, "formatted": 0.0}
    rate = sum(r.passed for r in runs) / len(runs) if runs else 0.0
    return {"score": float(rate == 1.0), "pass_rate": rate, "formatted": 1.0}
