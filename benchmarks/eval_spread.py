"""How much of a score change is noise? Evaluate the untrained and a trained model repeatedly.

    python benchmarks/eval_spread.py [RUN_DIR] [--repeats 3] [key=value overrides]

For the untrained model (and, given RUN_DIR, for its latest checkpoint) it prints the greedy
validation score once (deterministic) and the score sampled at temperature 1 with
`--repeats` different seeds: mean and spread (max - min) of those repeats, for the score, the
accuracy (`val/accuracy`: the answer is right) and the format rate (`val/format_rate`: an answer could
be parsed), so a gain can be split into skill and format.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from turnrl.config import load_config
from turnrl.rollout.base import SamplingParams
from turnrl.trainer.ppo import Trainer
from turnrl.trainer.validation import validate

METRICS = {"score": "val/test_score/mean", "accuracy": "val/accuracy", "format": "val/format_rate"}


def evaluate(trainer: Trainer, temperature: float, seed: int) -> dict[str, float]:
    cfg = trainer.cfg
    params = SamplingParams(
        max_new_tokens=cfg.data.max_response_length, n=1, temperature=temperature, seed=seed
    )
    metrics, _ = validate(
        trainer.rollout,
        trainer.reward,
        trainer.val_examples,
        params,
        cfg.data.val_batch_size,
        trainer.pad_id,
    )
    return {name: metrics.get(key, float("nan")) for name, key in METRICS.items()}


def report(name: str, trainer: Trainer, repeats: int) -> None:
    greedy = evaluate(trainer, 0.0, 0)
    sampled = [evaluate(trainer, 1.0, 1000 + k) for k in range(repeats)]
    print(f"{name}: greedy " + "  ".join(f"{k} {v:.3f}" for k, v in greedy.items()))
    for k in METRICS:
        values = [s[k] for s in sampled]
        print(
            f"{name}: T=1 x{repeats} {k} mean {statistics.mean(values):.3f} spread {max(values) - min(values):.3f} "
            f"(values {', '.join(f'{v:.3f}' for v in values)})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", nargs="?", help="a run directory with checkpoints")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    def build(*extra: str) -> Trainer:
        scratch = tempfile.mkdtemp(prefix="turnrl-eval-")
        overrides = [f"trainer.default_local_dir={scratch}", "trainer.logger=[]", *extra, *args.overrides]
        return Trainer(load_config(None, overrides))

    trainer = build()
    print(f"val prompts: {len(trainer.val_examples)}")
    report("untrained", trainer, args.repeats)
    trainer.close()
    if args.run_dir:  # a run directory is a model.path: its latest checkpoint's policy
        trained = build(f"model.path={args.run_dir}")
        report(Path(args.run_dir).name, trained, args.repeats)
        trained.close()


if __name__ == "__main__":
    main()
