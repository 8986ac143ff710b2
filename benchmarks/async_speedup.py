"""Sync vs async training (`trainer.mode=async`, one and two steps ahead), side by side.

    python benchmarks/async_speedup.py                          # embedded model, default task + search agent
    python benchmarks/async_speedup.py --tasks default --steps 6
    python benchmarks/async_speedup.py --model tiny-random --steps 3     # a quick run (scores are 0)

Every run is `turnrl train` in its own child process, one after the other, with the same seed and
`rollout.engine=server` (turnrl starts its own inference server; the synchronous run uses it too,
so the only difference is the overlap). Tasks:
- `default`: the built-in addition task, the default recipe;
- `search`: `examples/search_agent.yaml` scaled down, its retriever behind a proxy that adds
  `--latency-ms` (300) to every `/retrieve` call, as a remote search service would.
`--model` should be a policy that searches (e.g. the SFT model of `benchmarks/cold_start.py`,
`runs/<cold_start>/sft/model`, with `--topk 1` as it was trained): an untrained one never calls the
tool, so there is no latency to hide. Printed per run: seconds per 100 trained samples (`timing_s/step` of the steps after the first,
which pays the start-up), the trainer's idle seconds per step, the mean staleness, the final validation score
(`val/test_score/mean`) and tool calls per episode, plus each async run's speed-up over the synchronous one. Quote the
numbers with the machine: on a 2-core CPU the server and the trainer share the same two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
UPDATES_PER_STEP = {"default": 2, "search": 1}
"""Optimizer updates per step (train batch / mini-batch): `trainer.max_staleness` counts them."""


def modes(task: str) -> dict[str, list[str]]:
    """sync, and async one and two steps ahead (`trainer.max_staleness` = steps x updates per step)."""
    u = UPDATES_PER_STEP[task]
    return {"sync": ["trainer.mode=sync"]} | {
        f"async k={k}": ["trainer.mode=async", f"trainer.max_staleness={k * u}"] for k in (1, 2)
    }


def task_overrides(task: str, search_url: str, topk: int = 3) -> list[str]:
    if task == "default":
        return []
    return [
        str(ROOT / "examples" / "search_agent.yaml"),
        "data.train_batch_size=4",
        "data.val_batch_size=32",
        "data.max_response_length=160",
        "rollout.n=4",
        "rollout.generation_batch_size=64",
        "actor.ppo_mini_batch_size=4",
        "actor.ppo_micro_batch_size=8",
        "actor.optim.lr=2e-5",
        "rollout.multi_turn.max_turns=2",
        "rollout.multi_turn.max_obs_length=120",
        f"rollout.multi_turn.search.url={search_url}",
        f"rollout.multi_turn.search.topk={topk}",
    ]


@contextmanager
def slow_retriever(latency_s: float) -> Iterator[str]:
    """The built-in retriever (a child process) behind a proxy that sleeps before each /retrieve."""
    import httpx
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from turnrl.models.loader import cache_root
    from turnrl.runtime import free_port
    from turnrl.servers.retriever.launcher import LocalRetriever
    from turnrl.tasks.search.corpus import builtin_index

    with LocalRetriever(builtin_index(cache_root())) as real:
        app = FastAPI()
        client = httpx.AsyncClient(timeout=60)

        @app.post("/retrieve")
        async def retrieve(request: Request) -> JSONResponse:
            import asyncio

            await asyncio.sleep(latency_s)
            r = await client.post(
                real.url,
                content=await request.body(),
                headers={"content-type": "application/json", **real.headers},  # the child's own key
            )
            return JSONResponse(r.json(), status_code=r.status_code)

        @app.get("/health")
        async def health() -> JSONResponse:
            r = await client.get(f"{real.base_url}/health", headers=real.headers)
            return JSONResponse(r.json(), status_code=r.status_code)

        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{port}/retrieve"
        finally:
            server.should_exit = True
            thread.join(timeout=10)


def run(name: str, overrides: list[str], out: Path) -> dict[str, float]:
    run_dir = out / name.replace(" ", "_").replace("=", "")
    recipes = [o for o in overrides if o.endswith(".yaml")]  # the recipe comes before the overrides
    rest = [o for o in overrides if not o.endswith(".yaml")]
    cmd = [
        sys.executable,
        "-m",
        "turnrl.cli",
        "train",
        *recipes,
        *rest,
        f"trainer.default_local_dir={run_dir}",
    ]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode:
        sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    samples_per_step = cfg["data"]["train_batch_size"] * cfg["rollout"]["n"]
    later = [r for r in rows if "timing_s/step" in r][1:]  # the first step pays the start-up
    vals = [r["val/test_score/mean"] for r in rows if "val/test_score/mean" in r]
    step_s = statistics.mean(r["timing_s/step"] for r in later)
    return {
        "wall_s": wall,
        "per_100": 100 * step_s / samples_per_step,
        "idle_s": statistics.mean(r.get("async/trainer_idle_s", 0.0) for r in later),
        "staleness": statistics.mean(r.get("async/staleness/mean", 0.0) for r in later),
        "val": vals[-1] if vals else float("nan"),
        "tool_calls": statistics.mean(r.get("agent/tool_calls/mean", 0.0) for r in later),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="default,search")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--latency-ms", type=float, default=300.0)
    ap.add_argument("--topk", type=int, default=3, help="search task: passages per search")
    ap.add_argument("--threads", type=int, default=0, help="torch threads of the trainer (0 = default)")
    args = ap.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; model {args.model}"
    )
    common = [
        f"model.path={args.model}",
        f"trainer.total_training_steps={args.steps}",
        "rollout.engine=server",
        "trainer.val_before_train=false",
        "trainer.test_freq=0",
        "trainer.logger=[jsonl]",
        "trainer.save_freq=0",
        f"trainer.num_threads={args.threads}",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for task in args.tasks.split(","):
            with slow_retriever(args.latency_ms / 1000) if task == "search" else _nothing() as url:
                results = {
                    name: run(f"{task} {name}", common + task_overrides(task, url, args.topk) + extra, out)
                    for name, extra in modes(task).items()
                }
            base = results["sync"]
            label = f"{task}" + (
                f" (+{args.latency_ms:.0f} ms retriever latency)" if task == "search" else ""
            )
            print(f"\n{label}: {args.steps} steps, mean over steps 2..{args.steps}")
            print(
                f"{'mode':>10} {'s/100 samples':>14} {'speed-up':>9} {'idle s/step':>12} {'staleness':>10} {'val score':>10} {'tool calls':>11}"
            )
            for name, r in results.items():
                print(
                    f"{name:>10} {r['per_100']:>14.1f} {base['per_100'] / r['per_100']:>8.2f}x "
                    f"{r['idle_s']:>12.1f} {r['staleness']:>10.2f} {r['val']:>10.3f} {r['tool_calls']:>11.2f}"
                )


@contextmanager
def _nothing() -> Iterator[str]:
    yield ""


if __name__ == "__main__":
    main()
