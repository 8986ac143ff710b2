"""`turnrl eval`: score a model, a training run or a checkpoint on held-out prompts, greedy and
sampled (mean@n, pass@k), with the same config, rollout and reward as `turnrl train` (docs/eval.md)."""
