"""What prefilling each prompt token once saves an agent's evaluation: `turnrl eval` of a search-agent
model three times on the same questions, with the whole prefill, with the shared prefix run once
(`rollout.share_prefix`), and with the previous turn's keys and values kept as well
(`rollout.prefix_cache_mb`); prints the prompt tokens prefilled, the CPU seconds of the engine's
prefill and decode and of the whole process, and whether the responses are the same.

    python benchmarks/agent_prefill.py --model runs/search-sft-<time>/model --rows 32
    python benchmarks/agent_prefill.py --model tiny-random --rows 4          # a smoke run

Each setting runs in its own process, one torch thread, greedy, on the first --rows held-out
two-hop questions of the search task's validation world. Numbers: docs/rollout.md, "Prefixes
prefilled once"."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTINGS = {
    "whole prefill": ["rollout.share_prefix=false", "rollout.prefix_cache_mb=0"],
    "shared prefix": ["rollout.share_prefix=true", "rollout.prefix_cache_mb=0"],
    "shared prefix + previous turn": ["rollout.share_prefix=true", "rollout.prefix_cache_mb=2048"],
}


def child(out: Path, argv: list[str]) -> None:
    """In the child: time the engine's prefill and decode on this process's CPU clock, run the eval."""
    import turnrl.rollout.decode_loop as decode_loop
    import turnrl.rollout.hf as hf
    from turnrl.cli import main

    seen = {"prefill_s": 0.0, "decode_s": 0.0, "prefill_tokens": 0}
    prefill, run = hf.HFEngine._prefill, decode_loop.DecodeLoop.run

    def timed_prefill(self, ids, mask, pos, budget, shared=0, restored=None):  # type: ignore[no-untyped-def]
        start = time.process_time()
        result = prefill(self, ids, mask, pos, budget, shared, restored)
        seen["prefill_s"] += time.process_time() - start
        skipped = (ids.shape[0] - 1) * shared + (sum(c - shared for c in restored.cached) if restored else 0)
        seen["prefill_tokens"] += int(mask.sum()) - skipped
        return result

    def timed_run(self):  # type: ignore[no-untyped-def]
        start = time.process_time()
        result = run(self)
        seen["decode_s"] += time.process_time() - start
        return result

    hf.HFEngine._prefill, decode_loop.DecodeLoop.run = timed_prefill, timed_run
    code = main(argv)
    seen["process_s"] = time.process_time()
    (out / "timers.json").write_text(json.dumps(seen))
    sys.exit(code)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-random", help="a model path or a run's model directory")
    ap.add_argument("--rows", type=int, default=32, help="held-out two-hop questions to answer")
    ap.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(Path(a.child[0]), a.child[1:])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
        task = root / "task"
        subprocess.run([sys.executable, "-m", "turnrl.cli", "data", "task", "search", "--out", str(task)],
                       check=True, capture_output=True, env=env)  # fmt: skip
        rows = [r for r in (task / "val.jsonl").read_text().splitlines() if '"turnrl/search/2hop"' in r]
        val = root / "val.jsonl"
        val.write_text("\n".join(rows[: a.rows]) + "\n")
        print(f"{a.model}: the first {a.rows} held-out two-hop questions, greedy, one torch thread")
        print(f"{'prefill':32} {'tokens':>8} {'prefill s':>10} {'decode s':>9} {'process s':>10}  same")
        first: list[str] | None = None
        for name, overrides in SETTINGS.items():
            out = root / name.replace(" ", "_").replace("+", "and")
            out.mkdir()
            argv = ["eval", "search_agent_rl", f"model.path={a.model}", "trainer.num_threads=1",
                    f"data.val_files=[{val}]", "eval.n=0", *overrides, "--out", str(out / "eval")]  # fmt: skip
            done = subprocess.run([sys.executable, __file__, "--child", str(out), *argv],
                                  capture_output=True, text=True, env=env)  # fmt: skip
            if done.returncode != 0:
                sys.exit(f"{name}: turnrl eval failed:\n{done.stderr[-2000:]}")
            t = json.loads((out / "timers.json").read_text())
            samples = (out / "eval" / "samples.jsonl").read_text().splitlines()
            responses = [json.loads(s)["response"] for s in samples]
            first = first or responses
            same = sum(x == y for x, y in zip(first, responses, strict=True))
            print(
                f"{name:32} {t['prefill_tokens']:>8} {t['prefill_s']:>10.1f} {t['decode_s']:>9.1f} "
                f"{t['process_s']:>10.1f}  {same}/{len(responses)}"
            )


if __name__ == "__main__":
    main()
