"""How much of a score change is noise? Evaluate the untrained and a trained model repeatedly.

    python benchmarks/eval_spread.py [RUN_DIR] [--repeats 3] [key=value overrides]

For the untrained model (and, given RUN_DIR, for its latest checkpoint) it prints the greedy
validation score once (deterministic) and the score sampled at temperature 1 with
`--repeats` different seeds: mean, spread (max - min) of those repeats, and `acc`.
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


def evaluate(trainer: Trainer, temperature: float, seed: int) -> tuple[float, float]:
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
    return metrics["val/test_score/mean"], metrics.get("val/acc/mean", float("nan"))


def report(name: str, trainer: Trainer, repeats: int) -> None:
    g_score, g_acc = evaluate(trainer, 0.0, 0)
    sampled = [evaluate(trainer, 1.0, 1000 + k) for k in range(repeats)]
    scores = [s for s, _ in sampled]
    accs = [a for _, a in sampled]
    print(
        f"{name:10s} greedy score {g_score:.3f} acc {g_acc:.3f} | T=1 x{repeats}: score mean {statistics.mean(scores):.3f} "
        f"spread {max(scores) - min(scores):.3f} (values {', '.join(f'{s:.3f}' for s in scores)}) "
        f"acc mean {statistics.mean(accs):.3f}"
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
