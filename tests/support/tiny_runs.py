"""Short training runs of tiny-random with a learnable reward, and how tests compare them.

The reward is the share of response tokens with an even id: the random policy sits at 0.5 and a
policy gradient moves it up within a few steps, so a run that trains shows it in its metrics.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from turnrl.config.schema import Config

# what the clock and the machine decide, not the seed: every comparison of two runs' metrics
# leaves these out (one list, so a new timing or memory metric is added once)
VARYING = (
    "timing_s/",
    "perf/throughput",
    "perf/max_",
    "perf/time_per_step",
    "agent/tool_latency_s",
    "agent/wait_",
    "engine/prefill_s",
    "engine/decode_s",
)


@functools.cache
def tokenizer_json() -> str:
    """tiny-random's `tokenizer.json` (the embedded model's tokenizer, converted once and cached)."""
    from turnrl.models.loader import load_tokenizer

    path = Path(load_tokenizer("tiny-random").name_or_path) / "tokenizer.json"
    assert path.is_file(), path
    return str(path)


def reward_file(tmp_path: Path, tokenizer: str = "") -> str:
    """The even-id reward as a custom reward file. It reads tiny-random's tokenizer with the
    `tokenizers` library itself (the fast tokenizer transformers wraps: the same ids), so the
    reward process every run starts does not import transformers and torch (seconds per run).
    `tokenizer`: another `tokenizer.json` with the same ids (a prepared copy on a GPU machine)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "even_reward.py"
    path.write_text(
        "from tokenizers import Tokenizer\n"
        f"_tok = Tokenizer.from_file({tokenizer or tokenizer_json()!r})\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    ids = _tok.encode(solution_str, add_special_tokens=False).ids\n"
        "    return sum(1 for i in ids if i % 2 == 0) / max(len(ids), 1)\n"
    )
    return str(path)


VAL_ROWS = 16  # the final validation's prompts: enough to score, a sixth of the task's 100


def val_file(tmp_path: Path, seed: int | None = None) -> str:
    """The first VAL_ROWS validation rows of the built-in addition task (for `seed`, by default the
    config's, as the run would make them): every tiny run ends with a validation, and 100 prompts
    cost seconds each."""
    from turnrl.tasks import addition, write_jsonl

    seed = Config().trainer.seed if seed is None else seed
    return str(write_jsonl(tmp_path / "tiny_val.jsonl", addition.rows("val", seed)[:VAL_ROWS]))


def tiny_overrides(tmp_path: Path, **extra: object) -> list[str]:
    """A run of tiny-random on the built-in addition task (train rows made from the run's seed), the
    even-id reward, 8 steps of 4 prompts x 8 samples, validated once at the end on VAL_ROWS prompts."""
    seed = int(str(extra.get("trainer.seed", Config().trainer.seed)))  # the task's rows follow the run's seed
    base = {
        "model.path": "tiny-random",
        "data.train_batch_size": 4,
        "data.max_response_length": 8,
        "data.val_batch_size": 100,
        "rollout.n": 8,
        "actor.ppo_mini_batch_size": 2,
        "actor.ppo_micro_batch_size": 32,
        "actor.optim.lr": 1e-2,
        "trainer.total_training_steps": 8,
        "trainer.test_freq": 0,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.default_local_dir": str(tmp_path / "run"),
        "reward.custom_function.path": reward_file(tmp_path),
        "data.val_files": f"[{val_file(tmp_path, seed)}]",
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


metrics = read_metrics


def policy(trainer) -> torch.nn.Module:
    return trainer.actor.group.workers[0].model  # the in-process group's one actor


def same_metrics(a, b, steps: range) -> None:
    """Trainers `a` and `b` logged identical metrics (not close: equal) at `steps`, clock aside."""
    for step in steps:
        ma = next(m for m in metrics(a.run_dir) if m["step"] == step and "critic/score/mean" in m)
        mb = next(m for m in metrics(b.run_dir) if m["step"] == step and "critic/score/mean" in m)
        keys = {k for k in ma if not k.startswith(VARYING)}
        assert keys == {k for k in mb if not k.startswith(VARYING)}
        assert {k: ma[k] for k in keys} == {k: mb[k] for k in keys}, step  # identical, not close


def role_weights(role_dir: Path) -> dict[str, torch.Tensor]:
    """A role's saved weights: one file from one rank, shards from N (read back whole here)."""
    if (role_dir / "weights.safetensors").is_file():
        return load_file(str(role_dir / "weights.safetensors"))
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(role_dir / "shards", role_dir.parent / f"{role_dir.name}.pt")
    return torch.load(role_dir.parent / f"{role_dir.name}.pt", weights_only=False)["model"]


def assert_same_weights(one: Path, two: Path, tol: float) -> None:
    """Every weight of two checkpoints' role within `tol` (tests/support/ranks.py's WEIGHT_TOL says why)."""
    a, b = role_weights(one), role_weights(two)
    assert a.keys() == b.keys()
    worst, name = max(((a[k] - b[k]).abs().max().item(), k) for k in a)
    assert worst <= tol, f"{name} differs by {worst:.3g} > {tol:g}"


# the synchronous run through a child `turnrl serve` that test_async and test_train_server share
SERVER_RUN = {"rollout.engine": "server", "trainer.total_training_steps": 3, "trainer.rollout_dump_freq": 1}


@dataclass
class ServerRun:
    """What a finished server-engine run left: its directory, and whether it stopped its server."""

    run_dir: Path
    server_stopped: bool


def server_run(root: Path) -> ServerRun:
    """The 3-step tiny run with `rollout.engine=server` (the trainer starts its own server child)."""
    from turnrl.config import load_config
    from turnrl.trainer.ppo import Trainer

    trainer = Trainer(load_config(None, tiny_overrides(root, **SERVER_RUN)))
    child = trainer.engine.child.process
    run_dir = trainer.fit()
    return ServerRun(run_dir, child.poll() is not None)
