"""Sandbox sessions: creation latency, one command's round trip, and many live sessions at once.

    python benchmarks/sandbox_sessions.py                      # a private server, every layer this host has
    python benchmarks/sandbox_sessions.py --isolation basic
    python benchmarks/sandbox_sessions.py --url http://host:8080 --api-key KEY

Prints the processor (lscpu's model name), then per measurement the median, p90 and max latency in
milliseconds as the client sees it (HTTP included): `create` (POST /sessions with two small files),
`true` and `python -c pass` (one command of a live session), `read`/`write` (the file API), and
`N sessions` (N live sessions each running commands at once: latency and commands per second).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from _cli import cpu_name

from turnrl.servers.sandbox.client import CommandResult, SandboxClient
from turnrl.servers.sandbox.process import SandboxProcess


def summary(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))]
    return f"{name:<28} n={len(ms):<5} median {statistics.median(ms):7.1f} ms   p90 {p90:7.1f} ms   max {ms[-1]:7.1f} ms"


async def timed(n: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        out.append(time.perf_counter() - start)
    return out


async def bench(client: SandboxClient, repeats: int, sessions: int, per_session: int) -> None:
    files = {"src/main.py": "print('hi')\n", "/tests/test.sh": "python /app/src/main.py\n"}
    await client.delete_session(await client.create_session())  # warm the connection
    create_s = []
    for _ in range(repeats):  # each deleted before the next (untimed): the live cap stays clear
        start = time.perf_counter()
        sid = await client.create_session(files, ttl_s=600)
        create_s.append(time.perf_counter() - start)
        await client.delete_session(sid)
    print(summary("create", create_s))
    async with client.session(files=files) as s:
        await s.run("true")
        for label, command, n in (
            ("run `true`", "true", repeats),
            ("run `python -c pass`", "python -c pass", max(10, repeats // 2)),
        ):
            results: list[CommandResult] = []

            async def one(command: str = command, results: list[CommandResult] = results) -> None:
                results.append(await s.run(command))

            print(summary(label, await timed(n, one)))
            assert all(r.return_code == 0 for r in results), results[-1]
        print(summary("write_file", await timed(repeats, lambda: s.write("x.txt", b"x" * 1000))))
        print(summary("read_file", await timed(repeats, lambda: s.read("x.txt"))))

    latencies: list[float] = []

    async def worker(i: int) -> None:
        async with client.session(files={"n.txt": str(i)}) as s:
            for j in range(per_session):
                start = time.perf_counter()
                result = await s.run(f"echo {j} >> log; cat n.txt")
                latencies.append(time.perf_counter() - start)
                assert result.stdout == str(i), result

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(sessions)))
    wall = time.perf_counter() - start
    print(summary(f"{sessions} sessions, `echo; cat`", latencies))
    print(f"{'':<28} {len(latencies)} commands in {wall:.2f} s: {len(latencies) / wall:.0f} commands/s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="a running server (default: start a private one)")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--isolation", default="auto", choices=("auto", "basic"))
    parser.add_argument("--workers", type=int, default=None, help="the private server's --workers")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--per-session", type=int, default=10)
    args = parser.parse_args()
    print(f"processor: {cpu_name()}")

    async def against(url: str, key: str | None) -> None:
        async with SandboxClient(url, api_key=key, timeout=120) as client:
            iso = (await client.health()).get("isolation", {})
            on = [name for name, up in iso.get("layers", {}).items() if up]
            print(f"server: {url}; isolation {iso.get('mode')}: {', '.join(on)}")
            await bench(client, args.repeats, args.sessions, args.per_session)

    if args.url:
        asyncio.run(against(args.url, args.api_key))
        return
    extra = ["--max-sessions", str(max(64, args.sessions + 2))]
    with SandboxProcess(workers=args.workers, isolation=args.isolation, extra_args=extra) as server:
        asyncio.run(against(server.url, server.api_key))


if __name__ == "__main__":
    main()
