"""Load benchmark for turnrl's code sandbox: runs/s and latency at several concurrencies.

Starts the real server (`turnrl sandbox serve`) as a child process and sends a trivial python
program from N concurrent clients; latency is measured at the client (queueing included).

    python benchmarks/sandbox_load.py                       # concurrency 1, 8, 32; full isolation
    python benchmarks/sandbox_load.py --isolation auto no-cgroup basic --workers 4
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass

from turnrl.servers.sandbox.client import SandboxClient
from turnrl.servers.sandbox.process import SandboxProcess

PROGRAM = "print(sum(range(100)))"


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
        choices=["auto", "no-cgroup", "basic"],
        help="server set-ups to compare: every layer, every layer but the cgroup, basic layers only",
    )
    args = parser.parse_args()

    levels: list[Level] = []
    for isolation in args.isolation:
        queue = max(args.concurrency) + 8
        mode, extra = ("auto", ["--no-cgroup"]) if isolation == "no-cgroup" else (isolation, [])
        with SandboxProcess(workers=args.workers, queue=queue, isolation=mode, extra_args=extra) as server:
            layers = [k for k, on in server.health["isolation"]["layers"].items() if on]
            print(f"isolation {isolation}: {', '.join(layers)}", file=sys.stderr)
            for c in args.concurrency:
                runs = args.runs or max(40, 6 * c)
                levels.append(asyncio.run(measure(server.url, isolation, c, runs)))

    print(f"\ntrivial python program, server --workers {args.workers}, {os.cpu_count()} CPU cores")
    header = f"{'isolation':<10} {'concurrency':>11} {'runs':>5} {'runs/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'exec p50 ms':>12}"
    print(header)
    print("-" * len(header))
    for lv in levels:
        print(
            f"{lv.isolation:<10} {lv.concurrency:>11} {lv.runs:>5} {lv.rate:>8.1f} {lv.pct(0.5) * 1e3:>8.0f} "
            f"{lv.pct(0.95) * 1e3:>8.0f} {statistics.median(lv.exec_times) * 1e3:>12.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
