"""Is the agent gateway the bottleneck? Process agents (`rollout.agent.command`, each a Python script
on the `openai` SDK: `benchmarks/_tool_agent.py`) make tool-calling calls through the gateway to
the in-process engine; every call is timed from its request's arrival to its last byte sent, and
the time its engine call took is taken away. What is left is the gateway's own time per call:
reading the request, checking it, rendering the chat template and tokenising, planning it on the
trajectory, decoding and reading the answer for tool calls, recording it, writing the body, and the
hops between the event loop and its worker threads.

    python benchmarks/gateway_load.py                                # 64 episodes x 4 calls, at 1, 8, 64
    python benchmarks/gateway_load.py --episodes 64 --concurrency 64 --dialect responses

Measured from outside the gateway: an ASGI middleware around its app times each call, the engine
runner's `submit` is wrapped to time the call's engine part (from submission to its answer, its
wait in the engine's queue included: that is the engine's time, not the gateway's), and the
gateway's `prepare`, `Turn.answer` and `Turn.record` are wrapped to split the rest into phases:

    request   arrival -> its plan starts     the body, routing, the key, the dialect's parse, a hop
    plan      checks, template render, tokenise, plan on the trajectory (a worker thread)
    submit    the plan -> the engine         the hop back to the event loop
    engine    submitted -> answered          (not overhead)
    wake      answered -> decode starts      the event loop sees the answer, a hop
    answer    decode, tool calls read        (a worker thread)
    record    the hop and the recording      (a worker thread)
    respond   the hop back, the dialect's body, JSON, the send

Each concurrency runs `--episodes` episodes, at most that many at once (`rollout.agent.max_concurrency`).
A third table says where the CPU went: the gateway's threads per call (its cost whatever the
load), the agents' own (per call, and to start: Python and the SDK's import), the engine's, the
machine's other processes'. Wall time and CPU time part ways under load: with 64 agents the
engine answers their calls together, so they reach the gateway together and wait for one another
there (one event loop and the GIL: about half a burst of calls times the CPU of one). The agents
share the CPU with the gateway and the engine; by default (`--barrier`) their calls start only once
all have started, and `--client http` takes their SDK's cost out of the picture.

    python benchmarks/gateway_load.py --client http --concurrency 64     # the gateway, cheap agents
    python benchmarks/gateway_load.py --concurrency 64 --profile /tmp/gateway.prof
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import cProfile
import functools
import itertools
import json
import os
import pstats
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE.parent / "examples" / "templates" / "chatml_tools.jinja"
AGENT = HERE / "_tool_agent.py"
PHASES = ("request", "plan", "submit", "engine", "wake", "answer", "record", "respond")
QUESTIONS = [f"Compute {a} * {b}." for a, b in [(12, 34), (417, 29), (88, 905), (7, 63)]]


@dataclass
class CallTiming:
    """One call's timestamps (perf_counter seconds); a phase the call never reached stays 0."""

    arrived: float = 0.0
    status: int = 0
    plan: tuple[float, float] = (0.0, 0.0)
    submitted: float = 0.0
    answered: float = 0.0
    answer: tuple[float, float] = (0.0, 0.0)
    record: tuple[float, float] = (0.0, 0.0)
    sent: float = 0.0

    @property
    def complete(self) -> bool:
        return self.status == 200 and all((self.plan[1], self.answered, self.record[1], self.sent))

    def phases(self) -> dict[str, float]:
        """Seconds per phase (`PHASES`), from one boundary to the next."""
        marks = [self.arrived, *self.plan, self.submitted, self.answered, *self.answer, self.record[1]]
        return {p: b - a for p, (a, b) in zip(PHASES, itertools.pairwise([*marks, self.sent]), strict=True)}

    @property
    def total(self) -> float:
        return self.sent - self.arrived

    @property
    def overhead(self) -> float:
        return self.total - (self.answered - self.submitted)


CURRENT: contextvars.ContextVar[CallTiming | None] = contextvars.ContextVar("gateway_load_call", default=None)
"""The call being served (set by `Timed`; read by the wrapped gateway functions, in the call's task
or in the worker thread `asyncio.to_thread` runs them on, which copies the context)."""


PROFILE: list[cProfile.Profile] | None = None
"""With --profile: one profiler per gateway thread (its event loop, each worker thread), started on
the thread's first call."""
_local = threading.local()


def profile_this_thread() -> None:
    if PROFILE is not None and getattr(_local, "profile", None) is None:
        _local.profile = cProfile.Profile(time.thread_time)  # CPU time: waits are not cost
        PROFILE.append(_local.profile)
        _local.profile.enable()


CLOCK_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
GROUPS = {"turnrl-gateway": "gateway", "asyncio_": "gateway", "turnrl-serve-batcher": "engine"}
"""Threads by name: the gateway's event loop and the worker threads its calls hop to, the engine's."""


def thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's live threads, by `GROUPS` (the rest: `rollout`), from /proc."""
    out = {"gateway": 0.0, "engine": 0.0, "rollout": 0.0}
    for thread in threading.enumerate():
        group = next((g for prefix, g in GROUPS.items() if thread.name.startswith(prefix)), "rollout")
        try:
            stat = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
        except OSError:  # not Linux, or the thread has just ended
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after the name, which may hold spaces
        out[group] += (int(fields[11]) + int(fields[12])) / CLOCK_TICK  # utime, stime
    return out


def cpu_now() -> dict[str, float]:
    """CPU seconds so far: this process, its ended children (the agents), the machine's busy time."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        jiffies = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        busy = (sum(jiffies) - jiffies[3] - jiffies[4]) / CLOCK_TICK  # all but idle and iowait
    except (OSError, IndexError, ValueError):
        busy = float("nan")
    return {"process": time.process_time(), "agents": children.ru_utime + children.ru_stime, "machine": busy}


class Timed:
    """ASGI middleware around the gateway's app: each POST's arrival, status and last byte sent."""

    def __init__(self, app: Any, calls: list[CallTiming]) -> None:
        self.app, self.calls = app, calls

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        timing = CallTiming(arrived=time.perf_counter())
        profile_this_thread()
        token = CURRENT.set(timing)

        async def timed_send(message: dict[str, Any]) -> None:
            await send(message)
            if message["type"] == "http.response.start":
                timing.status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                timing.sent = time.perf_counter()

        try:
            await self.app(scope, receive, timed_send)
        finally:
            CURRENT.reset(token)
            self.calls.append(timing)


def _spanned(fn: Any, slot: str) -> Any:
    """`fn`, writing its start and end into the current call's `slot`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        profile_this_thread()
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            timing = CURRENT.get()
            if timing is not None:
                setattr(timing, slot, (start, time.perf_counter()))

    return wrapper


def _timed_submit(submit: Any) -> Any:
    """The engine runner's `submit`, noting when the call went in and when its answer came."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        timing, start = CURRENT.get(), time.perf_counter()
        future = submit(*args, **kwargs)
        if timing is not None:
            timing.submitted = start
            future.add_done_callback(lambda _: setattr(timing, "answered", time.perf_counter()))
        return future

    return wrapper


@contextlib.contextmanager
def probes(calls: list[CallTiming]) -> Iterator[None]:
    """The gateway's app wrapped in `Timed`, its phases wrapped in `_spanned`, while inside."""
    from turnrl.agent.functions import rollout as rollout_module
    from turnrl.agent.gateway import calls as core

    saved = (rollout_module.create_app, core.prepare, core.Turn.answer, core.Turn.record)
    create_app = saved[0]
    rollout_module.create_app = lambda gateway: Timed(create_app(gateway), calls)  # type: ignore[assignment]
    core.prepare = _spanned(core.prepare, "plan")  # type: ignore[assignment]
    core.Turn.answer = _spanned(core.Turn.answer, "answer")  # type: ignore[method-assign]
    core.Turn.record = _spanned(core.Turn.record, "record")  # type: ignore[method-assign]
    try:
        yield
    finally:
        rollout_module.create_app, core.prepare, core.Turn.answer, core.Turn.record = saved  # type: ignore[assignment,method-assign]


def rows_batch(tok: Any, episodes: int) -> Any:
    from turnrl.batch import Batch
    from turnrl.tensors import left_pad, position_ids_from_mask

    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(episodes)]
    prompts = [
        tok.encode(
            tok.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
            ),
            add_special_tokens=False,
        )
        for q in questions
    ]
    ids, mask = left_pad(prompts, tok.pad_token_id)
    return Batch(
        {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)},
        {
            "raw_prompt": [[{"role": "user", "content": q}] for q in questions],
            "data_source": ["turnrl/calculator"] * episodes,
            "ground_truth": ["0"] * episodes,
            "extra_info": [{} for _ in questions],
            "index": list(range(episodes)),
        },
    )


@dataclass
class Level:
    """One concurrency's run: its calls' timings and the run's totals."""

    concurrency: int
    calls: list[CallTiming] = field(default_factory=list)
    wall_s: float = 0.0
    engine_busy_s: float = 0.0
    engine_calls: int = 0
    failed: int = 0
    drifted: int = 0
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds over the run: the gateway's threads, the engine's, the agents', the machine's."""
    agent_cpu: dict[str, float] = field(default_factory=dict)
    """What each agent reported of its own CPU: to start (s), per call (ms)."""


def run_level(a: Any, engine: Any, tok: Any, concurrency: int, episodes: int) -> Level:
    """`episodes` process agents, at most `concurrency` at once, through one step's `generate`."""
    from turnrl.agent.functions.rollout import FunctionAgentRollout
    from turnrl.config import load_config
    from turnrl.rollout.base import SamplingParams

    budget = a.calls * (a.tokens + 96)  # the calls' answers and the messages between them
    cfg = load_config(None, [
        f"rollout.agent.command={sys.executable} {AGENT}", f"rollout.agent.chat_template={TEMPLATE}",
        f"rollout.agent.max_concurrency={concurrency}", "rollout.agent.timeout_s=900",
        f"data.max_response_length={budget}", "data.max_prompt_length=1024",
    ])  # fmt: skip
    level = Level(concurrency)
    with contextlib.ExitStack() as stack:
        if a.barrier:  # the agents' first calls wait until `concurrency` of them have started
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="gateway-load-"))
            stack.enter_context(environ(GATEWAY_LOAD_BARRIER=f"{folder}:{concurrency}"))
        stack.enter_context(probes(level.calls))
        rollout = stack.enter_context(FunctionAgentRollout(engine, tok, cfg, tok.pad_token_id))
        rollout.gateway.runner.submit = _timed_submit(rollout.gateway.runner.submit)  # type: ignore[method-assign]
        engine.busy, engine.calls = 0.0, 0
        threads, cpu = thread_cpu(), cpu_now()
        start = time.perf_counter()
        _, metrics = rollout.generate(rows_batch(tok, episodes), SamplingParams(max_new_tokens=budget, n=1))
        level.wall_s = time.perf_counter() - start
        level.cpu_s = {
            **{k: v - cpu[k] for k, v in cpu_now().items()},
            **{k: v - threads[k] for k, v in thread_cpu().items() if k != "rollout"},
        }
    level.engine_busy_s, level.engine_calls = engine.busy, engine.calls
    level.failed = int(sum(v for k, v in metrics.items() if k.startswith("agent/errors/")))
    level.drifted = int(metrics.get("agent/template_drift", 0))
    level.agent_cpu = {k: metrics.get(f"agent/fn/{k}", float("nan")) for k in ("start_cpu_s", "call_cpu_ms")}
    return level


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    """Environment variables set while inside (the agents' processes inherit them)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def percentiles(values: list[float]) -> tuple[float, float, float]:
    """Mean, median and 95th percentile of `values`, in milliseconds."""
    import numpy as np

    ms = np.asarray(values) * 1000
    return float(ms.mean()), float(np.median(ms)), float(np.percentile(ms, 95))


def summary(level: Level) -> dict[str, Any]:
    done = [c for c in level.calls if c.complete]
    mean, median, p95 = percentiles([c.overhead for c in done]) if done else (0.0, 0.0, 0.0)
    phases = {p: 1000 * sum(c.phases()[p] for c in done) / max(len(done), 1) for p in PHASES}
    return {
        "concurrency": level.concurrency,
        "calls": len(done),
        "refused_or_left": len(level.calls) - len(done),
        "failed_episodes": level.failed,
        "drifted_episodes": level.drifted,
        "wall_s": round(level.wall_s, 2),
        "calls_per_s": round(len(done) / level.wall_s, 2),
        "overhead_ms": {"mean": round(mean, 2), "median": round(median, 2), "p95": round(p95, 2)},
        "total_ms_mean": round(1000 * sum(c.total for c in done) / max(len(done), 1), 2),
        "phase_ms_mean": {p: round(v, 2) for p, v in phases.items()},
        "engine_busy_s": round(level.engine_busy_s, 2),
        "engine_generate_calls": level.engine_calls,
        "cpu_s": {k: round(v, 2) for k, v in level.cpu_s.items()},
        "gateway_cpu_ms_per_call": round(1000 * level.cpu_s.get("gateway", 0.0) / max(len(done), 1), 2),
        "agent_cpu": {k: round(v, 2) for k, v in level.agent_cpu.items()},
    }


def print_tables(a: Any, rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{a.model}, dialect {a.dialect} ({a.client} client), {a.episodes} process agents x {a.calls} "
        f"tool-calling calls x {a.tokens} tokens, torch threads {a.threads or 'default'}, {os.cpu_count()} CPUs"
    )
    print("\ngateway overhead per call (its time minus its engine call's), ms")
    print("| concurrency | calls | mean | median | p95 | call ms (mean) | calls/s | engine busy s | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        o = r["overhead_ms"]
        print(
            f"| {r['concurrency']} | {r['calls']} | {o['mean']:.2f} | {o['median']:.2f} | {o['p95']:.2f} | "
            f"{r['total_ms_mean']:.1f} | {r['calls_per_s']} | {r['engine_busy_s']} | {r['wall_s']} |"
        )
    print("\nwhere a call's time goes (mean ms per phase; `engine` is not overhead)")
    print("| concurrency | " + " | ".join(PHASES) + " |")
    print("|---|" + "---|" * len(PHASES))
    for r in rows:
        print(f"| {r['concurrency']} | " + " | ".join(f"{r['phase_ms_mean'][p]:.2f}" for p in PHASES) + " |")
    print(
        "\nCPU: per call (the gateway's threads; an agent's SDK), per agent's start-up, and over the run "
        "in core-seconds (`others`: the machine's other processes)"
    )
    print(
        "| concurrency | gateway ms/call | agent SDK ms/call | agent start s | gateway | engine | agents "
        "| rest of this process | others | cores busy |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cpu = r["cpu_s"]
        rest = cpu["process"] - cpu["gateway"] - cpu["engine"]
        others = cpu["machine"] - cpu["process"] - cpu["agents"]
        print(
            f"| {r['concurrency']} | {r['gateway_cpu_ms_per_call']:.2f} | {r['agent_cpu']['call_cpu_ms']:.1f} | "
            f"{r['agent_cpu']['start_cpu_s']:.2f} | {cpu['gateway']:.1f} | "
            f"{cpu['engine']:.1f} | {cpu['agents']:.1f} | {rest:.1f} | {others:.1f} | "
            f"{cpu['machine'] / r['wall_s']:.2f} |"
        )
    for r in rows:
        if r["drifted_episodes"]:
            print(f"warning: at concurrency {r['concurrency']}, {r['drifted_episodes']} episode(s) drifted")
        if r["failed_episodes"] or r["refused_or_left"]:
            print(
                f"warning: at concurrency {r['concurrency']}, {r['failed_episodes']} episode(s) failed and "
                f"{r['refused_or_left']} call(s) were refused or left unanswered (not in the numbers)"
            )


def write_profile(profiles: list[cProfile.Profile], path: str) -> None:
    """The gateway threads' profiles as one pstats file, and its top functions by own time."""
    stats = pstats.Stats(profiles[0])
    for profile in profiles[1:]:
        stats.add(profile)
    stats.dump_stats(path)
    print(
        f"\nthe gateway's threads under cProfile, CPU seconds ({len(profiles)} threads; {path}), by own time:"
    )
    stats.sort_stats("tottime").print_stats(25)


def dialects() -> list[str]:
    """The gateway's dialects the agent script speaks."""
    from _tool_agent import AGENTS

    from turnrl.agent.gateway.dialects import DIALECTS

    return [d.name for d in DIALECTS if d.name in AGENTS]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-random", help="the policy the engine samples from")
    ap.add_argument("--episodes", type=int, default=64, help="episodes (agent processes) per concurrency")
    ap.add_argument("--calls", type=int, default=4, help="tool-calling model calls per episode")
    ap.add_argument("--tokens", type=int, default=16, help="max tokens per call")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64], help="episodes at once")
    ap.add_argument("--dialect", default="chat", choices=dialects(), help="the API the agents speak")
    ap.add_argument(
        "--client", default="sdk", choices=["sdk", "http"],
        help="sdk: the agents call through the dialect's SDK (openai, anthropic); http: the same requests "
        "with Python's standard library, so the agents' own CPU leaves the gateway's time alone",
    )  # fmt: skip
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    ap.add_argument(
        "--barrier", action=argparse.BooleanOptionalAction, default=True,
        help="agents make their first call once `concurrency` of them have started, so the calls are "
        "timed apart from the start-ups (Python, the SDK's import); --no-barrier overlaps them, as a "
        "training step does",
    )  # fmt: skip
    ap.add_argument(
        "--agent-nice", type=int, default=0,
        help="the agents' niceness (0-19): above 0 the trainer's process, the gateway's, is served first",
    )  # fmt: skip
    ap.add_argument("--profile", default="", help="cProfile the gateway's threads; write the stats here")
    ap.add_argument("--out", default="", help="write the results as JSON here too")
    return ap.parse_args()


def main() -> None:
    a = parse_args()
    import torch
    from agent_proxy import TimedEngine

    from turnrl.models.loader import load_model

    if a.threads:
        torch.set_num_threads(a.threads)
    os.environ.update(
        GATEWAY_LOAD_DIALECT=a.dialect,
        GATEWAY_LOAD_CALLS=str(a.calls),
        GATEWAY_LOAD_TOKENS=str(a.tokens),
        GATEWAY_LOAD_NICE=str(a.agent_nice),
        GATEWAY_LOAD_CLIENT=a.client,
    )
    torch.manual_seed(0)
    model, tok = load_model(a.model, torch.device("cpu"), "float32", "", 0)
    model.eval()
    engine = TimedEngine(model, tok, batch_size=max(a.concurrency))
    run_level(a, engine, tok, 2, 2)  # warm-up: imports, the template's compilation, first allocations
    global PROFILE
    PROFILE = [] if a.profile else None
    rows = []
    for c in a.concurrency:
        rows.append(summary(run_level(a, engine, tok, c, a.episodes)))
        print(json.dumps(rows[-1]), flush=True)
    print_tables(a, rows)
    if PROFILE:
        write_profile(PROFILE, a.profile)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
