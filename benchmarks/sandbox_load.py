"""Load benchmark for turnrl's code sandbox: runs/s and latency at several concurrencies.

Starts the real server (`turnrl sandbox serve`) as a child process and sends a trivial python
program from N concurrent clients; latency is measured at the client (queueing included).

    python benchmarks/sandbox_load.py                       # concurrency 1, 8, 32; full isolation
    python benchmarks/sandbox_load.py --isolation auto no-cgroup basic --workers 4
    python benchmarks/sandbox_load.py --isolation auto no-seccomp no-rootfs --concurrency 1 8
    python benchmarks/sandbox_load.py --interleave 100 --isolation auto no-seccomp no-rootfs basic

--interleave N starts every set-up at once and sends N sequential runs to each in turn, so that
the load of a shared machine drifts over all of them alike: the fair way to price one layer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from dataclasses import dataclass

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
    "basic": ("basic", []),
}


@dataclass
class Level:
    isolation: str
    concurrency: int
    runs: int
    seconds: float
    latencies: list[float]
    exec_times: list[float]

    @property
    def rate(self) -> float:
        return self.runs / self.seconds

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(url: str, isolation: str, concurrency: int, runs: int) -> Level:
    async with SandboxClient(url, timeout=120, retries=5) as client:
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

        start = time.monotonic()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        return Level(isolation, concurrency, runs, time.monotonic() - start, latencies, exec_times)


def interleave(urls: dict[str, str], runs: int) -> None:
    """Sequential runs sent round-robin to every server; median client latency and run time each."""

    async def go() -> dict[str, list[tuple[float, float]]]:
        clients = {name: SandboxClient(url, timeout=120, retries=5) for name, url in urls.items()}
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
    header = f"{'isolation':<18} {'latency p50 ms':>15} {'run time p50 ms':>16}"
    print(header)
    print("-" * len(header))
    for name, pairs in seen.items():
        latency = statistics.median(p[0] for p in pairs) * 1e3
        run_time = statistics.median(p[1] for p in pairs) * 1e3
        print(f"{name:<18} {latency:>15.0f} {run_time:>16.0f}")


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
    parser.add_argument(
        "--interleave", type=int, default=0, metavar="N", help="N sequential runs per set-up, round-robin"
    )
    args = parser.parse_args()

    if args.interleave:
        with contextlib.ExitStack() as stack:
            urls = {}
            for isolation in args.isolation:
                mode, extra = SETUPS[isolation]
                server = SandboxProcess(workers=1, isolation=mode, extra_args=extra)
                urls[isolation] = stack.enter_context(server).url
            interleave(urls, args.interleave)
        return 0

    levels: list[Level] = []
    for isolation in args.isolation:
        queue = max(args.concurrency) + 8
        mode, extra = SETUPS[isolation]
        with SandboxProcess(workers=args.workers, queue=queue, isolation=mode, extra_args=extra) as server:
            layers = [k for k, on in server.health["isolation"]["layers"].items() if on]
            print(f"isolation {isolation}: {', '.join(layers)}", file=sys.stderr)
            for c in args.concurrency:
                runs = args.runs or max(40, 6 * c)
                levels.append(asyncio.run(measure(server.url, isolation, c, runs)))

    print(f"\ntrivial python program, server --workers {args.workers}, {os.cpu_count()} CPU cores")
    header = f"{'isolation':<18} {'concurrency':>11} {'runs':>5} {'runs/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'exec p50 ms':>12}"
    print(header)
    print("-" * len(header))
    for lv in levels:
        print(
            f"{lv.isolation:<18} {lv.concurrency:>11} {lv.runs:>5} {lv.rate:>8.1f} {lv.pct(0.5) * 1e3:>8.0f} "
            f"{lv.pct(0.95) * 1e3:>8.0f} {statistics.median(lv.exec_times) * 1e3:>12.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
