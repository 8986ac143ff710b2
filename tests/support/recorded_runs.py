"""The three runs whose metrics are recorded in tests/fixtures/refactor (the guard is
tests/integration/test_numbers_unchanged.py), and how to record them again:

    python -m tests.support.recorded_runs        # only on purpose: say why in the commit

Each run is a `turnrl train` subprocess in the pinned environment (tests/support/pinned_cpu.py);
the recording keeps every metric but the ones that measure time.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.pinned_cpu import pinned_env
from tests.support.tiny_runs import VARYING

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "refactor"
RUNS = {
    "grpo": [],
    "ppo_gae": [str(ROOT / "examples" / "ppo_gae.yaml")],
    "calc": [str(ROOT / "examples" / "calculator_agent.yaml")],
}


def train(name: str, run: Path, env: dict[str, str], *extra: str) -> list[dict]:
    """Run `name` for 3 steps into `run` under `env` (`extra`: more overrides); its metrics, one dict
    per logged row."""
    cmd = [
        sys.executable, "-m", "turnrl.cli", "train", *RUNS[name], "model.path=tiny-random",
        "trainer.total_training_steps=3", f"trainer.default_local_dir={run}",
        # recorded with the trainer recomputing the old log-probs (auto would skip the pass)
        "algorithm.rollout_correction.bypass=false",
        # and with every response through the update: tiny-random's groups are mostly flat, and the
        # guard is to keep covering the update's forward (its entropy) rather than skip it
        "actor.skip_flat_responses=false",
    ]  # fmt: skip
    if name != "calc":  # recorded on the addition task's first version (160 training rows, all 100 problems
        # validated), frozen as files: the task now holds problems out of training
        train_rows, val_rows = FIXTURES / "addition_train160.jsonl", FIXTURES / "addition_val.jsonl"
        cmd += [f"data.train_files=[{train_rows}]", f"data.val_files=[{val_rows}]"]
    cmd += extra
    run.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(cmd, cwd=run.parent, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"recorded run {name} failed: {done.stderr[-3000:]}")
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def recorded(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines()]


def untimed(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(VARYING)}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name in RUNS:
            rows = [untimed(r) for r in train(name, Path(tmp) / name, pinned_env())]
            (FIXTURES / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            print(f"recorded {name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
