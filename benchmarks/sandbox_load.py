"""Load benchmark for turnrl's code sandbox: runs/s and latency at several concurrencies.

Starts the real server (`turnrl sandbox serve`) as a child process and sends a trivial python
program from N concurrent clients; latency is measured at the client (queueing included).

    python benchmarks/sandbox_load.py                       # concurrency 1, 8, 32; full isolation
    python benchmarks/sandbox_load.py --isolation auto no-cgroup basic --workers 4
    python benchmarks/sandbox_load.py --isolation auto no-seccomp no-rootfs --concurrency 1 8
    python benchmarks/sandbox_load.py --interleave 100 --isolation auto no-seccomp no-rootfs basic

    # before/after on a shared machine: an older commit's code beside this one, 5 rounds
    git archive 0108cb5 src | tar -x -C /tmp/turnrl-before
    python benchmarks/sandbox_load.py --concurrency 8 --runs 300 --rounds 5 \
        --baseline-src /tmp/turnrl-before/src --cpu-split

`cpu ms/run` is the CPU time the server, its zygote, every process of every run and the client
spent per run: what the machine's cores must supply, whatever else runs there (kernel work done in
worker threads, such as tearing down network namespaces, is not in it); `--cpu-split` breaks it
down by process. `--rounds R` measures every set-up R times, in turn, and reports the best and
the median round, so that the load of a shared machine drifts over all set-ups alike.

--interleave N starts every set-up at once and sends N sequential runs to each in turn: the fair
way to price one layer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import statistics
import sys
import time
from dataclasses import dataclass

import httpx

from turnrl.servers.sandbox.client import SandboxClient
from turnrl.servers.sandbox.process import SandboxProcess

PROGRAM = "print(sum(range(100)))"
# server set-ups: the --isolation mode and the flags that switch single layers off
SETUPS = {
    "auto": ("auto", []),
    "no-cgroup": ("auto", ["--no-cgroup"]),
    "no-seccomp": ("auto", ["--no-seccomp"]),
    "no-rootfs": ("auto", ["--no-rootfs"]),
    "no-rootfs-seccomp": ("auto", ["--no-rootfs", "--no-seccomp"]),
    "no-zygote": ("auto", ["--no-zygote"]),
    "basic": ("basic", []),
}
BASELINE = "@baseline"  # suffix of a set-up run with the --baseline-src tree
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Level:
    isolation: str
    concurrency: int
    runs: int
    seconds: float
    latencies: list[float]
    exec_times: list[float]
    cpu: dict[str, float]  # seconds by process: server, zygote, runs, client

    @property
    def rate(self) -> float:
        return self.runs / self.seconds

    @property
    def cpu_ms(self) -> float:
        return self.part_ms(*self.cpu)

    def part_ms(self, *parts: str) -> float:
        return sum(self.cpu[p] for p in parts) / self.runs * 1e3

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _process_cpu(pid: int) -> tuple[float, float]:
    """(utime + stime of `pid`, of the children it has waited for: the runs), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = [int(x) for x in f.read().rsplit(")", 1)[1].split()[11:15]]
    except OSError:  # gone (a zygote replaced after dying)
        return 0.0, 0.0
    return (fields[0] + fields[1]) / TICKS, (fields[2] + fields[3]) / TICKS


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Server:
    """One set-up's server and what its CPU time is read from."""

    def __init__(self, name: str, workers: int, queue: int, baseline_src: str | None) -> None:
        mode, extra = SETUPS[name.removesuffix(BASELINE)]
        env = None
        if name.endswith(BASELINE):
            assert baseline_src is not None
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([baseline_src, os.environ.get("PYTHONPATH", "")]),
            }
        self.name = name
        self.process = SandboxProcess(workers=workers, queue=queue, isolation=mode, extra_args=extra, env=env)

    def cpu(self) -> dict[str, float]:
        """Seconds of CPU so far: the server process, its zygote, every run's processes (reaped by
        one of the two), and this client."""
        health = httpx.get(self.process.url + "/health", headers=self.process.headers, timeout=10)
        zygote = health.json().get("zygote") or {}
        server, server_runs = _process_cpu(self.process.pid)
        own, zygote_runs = _process_cpu(zygote["pid"]) if zygote.get("pid") else (0.0, 0.0)
        return {"server": server, "zygote": own, "runs": server_runs + zygote_runs, "client": _own_cpu()}


async def measure(server: Server, concurrency: int, runs: int) -> Level:
    async with SandboxClient(
        server.process.url, timeout=120, retries=5, api_key=server.process.api_key
    ) as client:
        for _ in range(min(4, concurrency)):  # warm the page cache and the connection pool
            await client.run_code(PROGRAM)
        remaining = runs
        latencies: list[float] = []
        exec_times: list[float] = []

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                result = await client.run_code(PROGRAM, run_timeout=30)
                if not result.ok or result.stdout != "4950\n":
                    raise RuntimeError(f"unexpected result: {result}")
                latencies.append(result.latency)
                exec_times.append(result.execution_time or 0.0)

        before = server.cpu()
        start = time.monotonic()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        seconds = time.monotonic() - start
        after = server.cpu()
        cpu = {part: after[part] - before[part] for part in before}
        return Level(server.name, concurrency, runs, seconds, latencies, exec_times, cpu)


def interleave(urls: dict[str, tuple[str, str]], runs: int) -> None:
    """Sequential runs sent round-robin to every server (name -> URL and key); median client
    latency and run time each."""

    async def go() -> dict[str, list[tuple[float, float]]]:
        clients = {
            name: SandboxClient(url, timeout=120, retries=5, api_key=key) for name, (url, key) in urls.items()
        }
        seen: dict[str, list[tuple[float, float]]] = {name: [] for name in urls}
        try:
            for i in range(runs + 4):  # the first rounds warm caches and connections
                for name, client in clients.items():
                    result = await client.run_code(PROGRAM, run_timeout=30)
                    if not result.ok or result.stdout != "4950\n":
                        raise RuntimeError(f"{name}: unexpected result: {result}")
                    if i >= 4:
                        seen[name].append((result.latency, result.execution_time or 0.0))
        finally:
            for client in clients.values():
                await client.aclose()
        return seen

    seen = asyncio.run(go())
    print(
        f"\ntrivial python program, {runs} sequential runs per set-up, interleaved; {os.cpu_count()} CPU cores"
    )
    header = f"{'isolation':<28} {'latency p50 ms':>15} {'run time p50 ms':>16}"
    print(header)
    print("-" * len(header))
    for name, pairs in seen.items():
        latency = statistics.median(p[0] for p in pairs) * 1e3
        run_time = statistics.median(p[1] for p in pairs) * 1e3
        print(f"{name:<28} {latency:>15.0f} {run_time:>16.0f}")


def report_cpu(levels: list[Level]) -> None:
    """Where the CPU time per run went, by process (median over rounds)."""
    parts = ["server", "zygote", "runs", "client"]
    header = f"{'isolation':<28} {'concurrency':>11} " + " ".join(f"{p + ' ms':>10}" for p in parts)
    print(f"\nCPU per run by process\n{header}\n{'-' * len(header)}")
    for key in _keys(levels):
        same = [lv for lv in levels if (lv.isolation, lv.concurrency) == key]
        cells = " ".join(f"{statistics.median(lv.part_ms(p) for lv in same):>10.1f}" for p in parts)
        print(f"{key[0]:<28} {key[1]:>11} {cells}")


def report(levels: list[Level], workers: int, load: tuple[str, str]) -> None:
    rounds = max(sum(1 for lv in levels if (lv.isolation, lv.concurrency) == key) for key in _keys(levels))
    print(
        f"\ntrivial python program, server --workers {workers}, {os.cpu_count()} CPU cores; "
        f"load average {load[0]} at the start, {load[1]} at the end"
        + (f"; best and median of {rounds} rounds" if rounds > 1 else "")
    )
    header = (
        f"{'isolation':<28} {'concurrency':>11} {'runs':>5} {'runs/s':>8} {'median':>7} "
        f"{'p50 ms':>7} {'p95 ms':>7} {'exec p50 ms':>12} {'cpu ms/run':>11}"
    )
    print(header)
    print("-" * len(header))
    for key in _keys(levels):
        same = [lv for lv in levels if (lv.isolation, lv.concurrency) == key]
        best = max(same, key=lambda lv: lv.rate)
        print(
            f"{best.isolation:<28} {best.concurrency:>11} {best.runs:>5} {best.rate:>8.1f} "
            f"{statistics.median(lv.rate for lv in same):>7.1f} {best.pct(0.5) * 1e3:>7.0f} "
            f"{best.pct(0.95) * 1e3:>7.0f} {statistics.median(best.exec_times) * 1e3:>12.0f} "
            f"{statistics.median(lv.cpu_ms for lv in same):>11.1f}"
        )


def _keys(levels: list[Level]) -> list[tuple[str, int]]:
    return list(dict.fromkeys((lv.isolation, lv.concurrency) for lv in levels))


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="server --workers")
    parser.add_argument(
        "--runs", type=int, default=0, help="runs per level (default: max(40, 6 x concurrency))"
    )
    parser.add_argument(
        "--isolation",
        nargs="+",
        default=["auto"],
        choices=list(SETUPS),
        help="server set-ups to compare: every layer, every layer but the one named, basic layers only",
    )
    parser.add_argument("--rounds", type=int, default=1, help="measure every set-up this many times, in turn")
    parser.add_argument(
        "--baseline-src",
        metavar="DIR",
        help="also run each set-up with the turnrl source tree in DIR (e.g. an older commit's src)",
    )
    parser.add_argument(
        "--interleave", type=int, default=0, metavar="N", help="N sequential runs per set-up, round-robin"
    )
    parser.add_argument("--cpu-split", action="store_true", help="also print CPU per run by process")
    args = parser.parse_args()
    names = list(args.isolation)
    if args.baseline_src:
        names = [n + suffix for n in names for suffix in (BASELINE, "")]

    if args.interleave:
        with contextlib.ExitStack() as stack:
            urls = {}
            for name in names:
                server = Server(name, 1, 16, args.baseline_src)
                urls[name] = (stack.enter_context(server.process).url, server.process.api_key)
            interleave(urls, args.interleave)
        return 0

    levels: list[Level] = []
    start_load = _load()
    with contextlib.ExitStack() as stack:
        servers = [Server(name, args.workers, max(args.concurrency) + 8, args.baseline_src) for name in names]
        for server in servers:
            stack.enter_context(server.process)
            layers = [k for k, on in server.process.health["isolation"]["layers"].items() if on]
            print(f"isolation {server.name}: {', '.join(layers)}", file=sys.stderr)
        for _ in range(args.rounds):
            for server in servers:
                for c in args.concurrency:
                    levels.append(asyncio.run(measure(server, c, args.runs or max(40, 6 * c))))
    report(levels, args.workers, (start_load, _load()))
    if args.cpu_split:
        report_cpu(levels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
