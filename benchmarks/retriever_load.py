"""Retriever load benchmark: BM25 index build on a synthetic corpus, then search and HTTP throughput.

    python benchmarks/retriever_load.py                 # 100k documents, batches 1/32/256
    python benchmarks/retriever_load.py --docs 20000 --json out.json
    python benchmarks/retriever_load.py --workdir /tmp/rb --batches 256   # reuse the index across runs

Measures (1) `turnrl retriever index` wall time, peak memory (max RSS of the child process)
and index size; (2) the searcher alone, in this process: turnrl's BM25 search ("after") next to
bm25s's own `retrieve` over the same index ("before": how turnrl searched until it scored
queries itself), with the speed-up and a check that both give the same scores and documents;
(3) against a real `turnrl retriever serve` child on 127.0.0.1, and the same server running the
bm25s search: queries/s and p50/p95 request latency for batches of 1, 32 and 256 queries,
sequential and with a few requests in flight; (4) the server's resident memory after the run.
`--no-before` skips the bm25s side.

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
    if (index_dir / "meta.json").is_file():  # --workdir from an earlier run
        size_mb = sum(f.stat().st_size for f in index_dir.rglob("*") if f.is_file()) / 2**20
        print(f"index: reusing {index_dir}")
        return {"build_s": float("nan"), "peak_rss_mb": float("nan"), "index_mb": size_mb}
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


class Bm25sSearcher:
    """The search before turnrl scored queries itself: bm25s's own `retrieve` over the same index."""

    method = "bm25"

    def __init__(self, index_dir: Path) -> None:
        import bm25s

        self._model = bm25s.BM25.load(str(index_dir / "bm25"), mmap=True, show_progress=False)
        self.num_docs = int(self._model.scores["num_docs"])

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        import bm25s

        tokens = bm25s.tokenize(queries, stopwords="en", return_ids=False, show_progress=False)
        positions, scores = self._model.retrieve(tokens, k=k, show_progress=False)
        return np.asarray(positions, dtype=np.int64), np.asarray(scores, dtype=np.float32)


def same_results(new: tuple[np.ndarray, np.ndarray], old: tuple[np.ndarray, np.ndarray]) -> tuple[int, int]:
    """(rows with identical documents, rows differing only in the order of tied scores).

    Raises if scores differ anywhere, or if the documents differ beyond the order of ties
    (bm25s orders tied scores as its partition happens to leave them; turnrl by position).
    """
    (new_pos, new_scores), (old_pos, old_scores) = new, old
    if not np.array_equal(new_scores, old_scores):
        raise AssertionError("scores differ from bm25s's")
    identical = tied = 0
    for pos_a, pos_b, scores in zip(new_pos, old_pos, new_scores, strict=True):
        if np.array_equal(pos_a, pos_b):
            identical += 1
            continue
        # Above the k-th score, each score's documents are fixed; at it, which tied documents fill the list is free.
        for value in np.unique(scores[scores > scores[-1]]):
            if set(pos_a[scores == value].tolist()) != set(pos_b[scores == value].tolist()):
                raise AssertionError(f"documents differ from bm25s's beyond ties: {pos_a} vs {pos_b}")
        tied += 1
    return identical, tied


def in_process(
    index_dir: Path, queries: list[str], batches: list[int], before: bool, repeats: int = 5
) -> dict[str, dict[int, float]]:
    """Milliseconds per query of each searcher alone (no HTTP), best of `repeats`: the server's floor."""
    from turnrl.servers.retriever.index import load_index

    searchers = {"after": load_index(index_dir).searcher}
    if before:
        searchers["before"] = Bm25sSearcher(index_dir)
        for k in (3, 10):
            total = [0, 0]
            for start in range(0, len(queries), 256):
                pick = queries[start : start + 256]
                counts = same_results(searchers["after"].search(pick, k), searchers["before"].search(pick, k))
                total = [total[0] + counts[0], total[1] + counts[1]]
            print(
                f"top {k:>2}: same scores as bm25s on all {len(queries)} queries; same documents on "
                f"{total[0]}, the others differ only in the order of tied scores"
            )
    out: dict[str, dict[int, float]] = {}
    for name, searcher in searchers.items():
        searcher.search(queries[:8], 3)  # page the mmap-ed score matrix in
        out[name] = {}
        for batch in batches:
            picks = [[queries[(i * batch + j) % len(queries)] for j in range(batch)] for i in range(repeats)]
            best = min(_timed(searcher.search, pick, 3) for pick in picks)
            out[name][batch] = 1000 * best / batch
    return out


def _timed(fn: object, *args: object) -> float:
    start = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    return time.perf_counter() - start


class Bm25sServer(LocalRetriever):
    """`turnrl retriever serve`'s app with the bm25s searcher, run by this script (--serve-bm25s)."""

    def command(self, port: int) -> list[str]:
        return [sys.executable, __file__, "--serve-bm25s", str(self.index_dir), "--port", str(port)]


def serve_bm25s(index_dir: Path, port: int) -> None:
    import uvicorn

    from turnrl.keys import resolve_api_key
    from turnrl.servers.retriever.index import load_index
    from turnrl.servers.retriever.server import create_app

    index = load_index(index_dir)
    index.searcher = Bm25sSearcher(index_dir)
    # the key Bm25sServer (a ChildServer) passed in $TURNRL_API_KEY, as `turnrl retriever serve` reads it
    app = create_app(index, 3, api_key=resolve_api_key(None))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def rss_mb(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


async def load(
    url: str, queries: list[str], batch: int, requests: int, in_flight: int, api_key: str = ""
) -> dict[str, float]:
    latencies: list[float] = []
    gate = asyncio.Semaphore(in_flight)
    rng = random.Random(batch * 1000 + in_flight)

    async with RetrieverClient(url, topk=3, timeout=120, retries=0, api_key=api_key) as client:
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


def http_runs(server: LocalRetriever, queries: list[str], args: argparse.Namespace) -> list[dict[str, float]]:
    runs = []
    for batch in (int(b) for b in args.batches.split(",")):
        for in_flight in (int(c) for c in args.in_flight.split(",")):
            requests = max(8, args.queries_per_run // batch)
            runs.append(asyncio.run(load(server.url, queries, batch, requests, in_flight, server.api_key)))
    return runs


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
    parser.add_argument("--no-before", action="store_true", help="skip the bm25s search (the 'before')")
    parser.add_argument(
        "--workdir", type=Path, default=None, help="keep the corpus and index here, and reuse them next time"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    parser.add_argument("--serve-bm25s", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_bm25s:  # the child of Bm25sServer
        serve_bm25s(args.serve_bm25s, args.port)
        return 0

    load1, _, _ = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {load1:.1f} at start (other work skews the numbers)")
    with tempfile.TemporaryDirectory(prefix="turnrl-bench-") as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        sample = write_corpus(root / "corpus.jsonl", args.docs, args.doc_words, args.vocab, args.seed)
        print(
            f"corpus: {args.docs} documents x {args.doc_words} words, written in {time.perf_counter() - t0:.1f} s"
        )
        built = build(root / "corpus.jsonl", root / "index")
        if built["build_s"] == built["build_s"]:  # not NaN: built in this run
            print(
                f"build: {built['build_s']:.1f} s wall, peak RSS {built['peak_rss_mb']:.0f} MB, "
                f"index {built['index_mb']:.0f} MB"
            )
        rng = random.Random(args.seed)
        queries = [" ".join(rng.sample(words, 5)) for words in sample for _ in range(3)]
        batches = [int(b) for b in args.batches.split(",")]
        floor = in_process(root / "index", queries, batches, before=not args.no_before)
        for batch in batches:
            after = floor["after"][batch]
            line = f"searcher alone, batch {batch:>4}: {after:.3f} ms/query ({1000 / after:6.0f} queries/s)"
            if "before" in floor:
                before = floor["before"][batch]
                line += (
                    f"; bm25s {before:.3f} ms/query ({1000 / before:4.0f} queries/s): x{before / after:.1f}"
                )
            print(line)
        with LocalRetriever(root / "index", topk=3) as server:
            assert server.process is not None
            runs = http_runs(server, queries, args)
            memory = rss_mb(server.process.pid)
        before_runs: list[dict[str, float]] = []
        before_memory: dict[str, float] = {}
        if not args.no_before:
            with Bm25sServer(root / "index", topk=3) as server:
                assert server.process is not None
                before_runs = http_runs(server, queries, args)
                before_memory = rss_mb(server.process.pid)
        for i, run in enumerate(runs):
            line = (
                f"HTTP batch {run['batch']:>4}  in-flight {run['in_flight']}  {run['queries_per_s']:6.0f} queries/s  "
                f"p50 {run['p50_ms']:7.1f} ms  p95 {run['p95_ms']:7.1f} ms  ({run['requests']} requests)"
            )
            if before_runs:
                old = before_runs[i]
                line += f"; bm25s {old['queries_per_s']:4.0f} queries/s: x{run['queries_per_s'] / old['queries_per_s']:.1f}"
            print(line)
        line = f"server memory: RSS {memory['VmRSS']:.0f} MB (peak {memory['VmHWM']:.0f} MB)"
        if before_memory:
            line += f"; bm25s {before_memory['VmRSS']:.0f} MB (peak {before_memory['VmHWM']:.0f} MB)"
        print(line)
    if args.json:
        report = {"args": {k: str(v) for k, v in vars(args).items()}, "load_avg": load1, "build": built,
                  "searcher_ms_per_query": floor, "runs": runs, "bm25s_runs": before_runs,
                  "server_mb": memory, "bm25s_server_mb": before_memory}  # fmt: skip
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
