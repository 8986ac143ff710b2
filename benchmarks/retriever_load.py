"""Retriever load benchmark: BM25 index build on a synthetic corpus, then HTTP query throughput.

    python benchmarks/retriever_load.py                 # 100k documents, batches 1/32/256
    python benchmarks/retriever_load.py --docs 20000 --json out.json

Measures (1) `turnrl retriever index` wall time, peak memory (max RSS of the child process)
and index size; (2) against a real `turnrl retriever serve` child on 127.0.0.1: queries/s and
p50/p95 request latency for batches of 1, 32 and 256 queries, sequential and with a few
requests in flight; (3) the server's resident memory after the run.

The corpus imitates wiki-18 passages: a two-word title, then 100 words drawn from a Zipfian
vocabulary, so posting lists have realistic skew. Queries are 5 words taken from a random
document, as an agent's search terms would share words with the passage it needs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from turnrl.servers.retriever.client import RetrieverClient
from turnrl.servers.retriever.launcher import LocalRetriever


def make_vocabulary(size: int, rng: random.Random) -> list[str]:
    letters = "bcdfghjklmnprstvz"
    vowels = "aeiou"
    words: set[str] = set()
    out: list[str] = []
    while len(out) < size:
        word = "".join(rng.choice(letters) + rng.choice(vowels) for _ in range(rng.randint(2, 4)))
        if word not in words:
            words.add(word)
            out.append(word)
    return out


def write_corpus(path: Path, n_docs: int, doc_words: int, vocab_size: int, seed: int) -> list[list[str]]:
    """Write the synthetic JSONL corpus; returns a sample of documents' words for queries."""
    rng = random.Random(seed)
    vocab = np.array(make_vocabulary(vocab_size, rng))
    # Zipf(1.1) ranks, as word frequencies in English text roughly follow.
    gen = np.random.default_rng(seed)
    ranks = (gen.zipf(1.1, size=(n_docs, doc_words)) - 1) % vocab_size
    sample: list[list[str]] = []
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n_docs):
            words = vocab[ranks[i]].tolist()
            title = f"{vocab[gen.integers(vocab_size)].title()} {vocab[gen.integers(vocab_size)].title()}"
            handle.write(json.dumps({"id": str(i), "contents": f'"{title}"\n' + " ".join(words)}) + "\n")
            if i % 97 == 0:
                sample.append([*title.lower().split(), *words])
    return sample


def build(corpus: Path, index_dir: Path) -> dict[str, float]:
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "turnrl.cli",
            "retriever",
            "index",
            "--corpus",
            str(corpus),
            "--out",
            str(index_dir),
        ],
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"index build failed: {proc.stderr.strip().splitlines()[-1]}")
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # Linux reports KiB
    size_mb = sum(f.stat().st_size for f in index_dir.rglob("*") if f.is_file()) / 2**20
    print(proc.stdout.strip().splitlines()[-1])
    return {"build_s": seconds, "peak_rss_mb": peak_mb, "index_mb": size_mb}


def in_process(index_dir: Path, queries: list[str], batches: list[int]) -> dict[int, float]:
    """Milliseconds per query of the searcher alone (no HTTP), best of 3: the floor for the server."""
    from turnrl.servers.retriever.index import load_index

    searcher = load_index(index_dir).searcher
    searcher.search(queries[:8], 3)  # page the mmap-ed score matrix in
    out = {}
    for batch in batches:
        picks = [[queries[(i * batch + j) % len(queries)] for j in range(batch)] for i in range(3)]
        best = min(_timed(searcher.search, pick, 3) for pick in picks)
        out[batch] = 1000 * best / batch
    return out


def _timed(fn: object, *args: object) -> float:
    start = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    return time.perf_counter() - start


def rss_mb(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


async def load(url: str, queries: list[str], batch: int, requests: int, in_flight: int) -> dict[str, float]:
    latencies: list[float] = []
    gate = asyncio.Semaphore(in_flight)
    rng = random.Random(batch * 1000 + in_flight)

    async with RetrieverClient(url, topk=3, timeout=120, retries=0) as client:
        await client.retrieve(queries[:batch])  # warm-up: connection, page cache

        async def one() -> None:
            payload = rng.choices(queries, k=batch)
            async with gate:
                start = time.perf_counter()
                result = await client.retrieve(payload)
                latencies.append(time.perf_counter() - start)
            assert len(result) == batch

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(requests)))
        wall = time.perf_counter() - start
    latencies.sort()
    return {
        "batch": batch,
        "in_flight": in_flight,
        "requests": requests,
        "queries_per_s": batch * requests / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p95_ms": 1000 * latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--doc-words", type=int, default=100)
    parser.add_argument("--vocab", type=int, default=50_000)
    parser.add_argument("--batches", default="1,32,256")
    parser.add_argument(
        "--queries-per-run", type=int, default=2048, help="queries sent per (batch, in-flight) run"
    )
    parser.add_argument("--in-flight", default="1,4", help="concurrent requests levels")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()

    load1, _, _ = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {load1:.1f} at start (other work skews the numbers)")
    with tempfile.TemporaryDirectory(prefix="turnrl-bench-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        sample = write_corpus(root / "corpus.jsonl", args.docs, args.doc_words, args.vocab, args.seed)
        print(
            f"corpus: {args.docs} documents x {args.doc_words} words, written in {time.perf_counter() - t0:.1f} s"
        )
        built = build(root / "corpus.jsonl", root / "index")
        print(
            f"build: {built['build_s']:.1f} s wall, peak RSS {built['peak_rss_mb']:.0f} MB, "
            f"index {built['index_mb']:.0f} MB"
        )
        rng = random.Random(args.seed)
        queries = [" ".join(rng.sample(words, 5)) for words in sample for _ in range(3)]
        batches = [int(b) for b in args.batches.split(",")]
        floor = in_process(root / "index", queries, batches)
        for batch, ms in floor.items():
            print(f"searcher alone, batch {batch:>4}: {ms:.2f} ms/query ({1000 / ms:.0f} queries/s)")
        runs = []
        with LocalRetriever(root / "index", topk=3) as server:
            assert server.process is not None
            for batch in batches:
                for in_flight in (int(c) for c in args.in_flight.split(",")):
                    requests = max(8, args.queries_per_run // batch)
                    run = asyncio.run(load(server.url, queries, batch, requests, in_flight))
                    runs.append(run)
                    print(
                        f"batch {batch:>4}  in-flight {in_flight}  {run['queries_per_s']:8.0f} queries/s  "
                        f"p50 {run['p50_ms']:7.1f} ms  p95 {run['p95_ms']:7.1f} ms  ({requests} requests)"
                    )
            memory = rss_mb(server.process.pid)
        print(f"server memory: RSS {memory['VmRSS']:.0f} MB (peak {memory['VmHWM']:.0f} MB)")
    if args.json:
        report = {"args": vars(args) | {"json": str(args.json)}, "load_avg": load1, "build": built,
                  "searcher_ms_per_query": floor, "runs": runs, "server_mb": memory}  # fmt: skip
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
