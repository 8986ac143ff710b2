"""The real-hardware path on a CUDA device: the engine, the trainer and an agent step on the GPU.

Skipped without CUDA (CI has none); `benchmarks/gpu_check.py` runs them on a lent GPU with
`-m gpu`. Each asserts what the CPU suite cannot see: compiled CUDA-graph decode giving the plain
loop's tokens, float32 master weights training under bfloat16 autocast, a multi-turn episode
stepping with the engine, the tools and the update on the device."""

import math
from pathlib import Path

import pytest
import torch

from tests.support.gpu import DEVICE, even_reward, needs_cuda, tiny_on, tiny_path
from tests.support.keep_stages import KeepStages
from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.models.logprobs import attach_log_prob_method
from turnrl.models.precision import computing_in
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.trainer.ppo import Trainer
from turnrl.workers.microbatch import trimmed_log_probs

pytestmark = [pytest.mark.gpu, needs_cuda]

EXAMPLES = Path(__file__).parents[2] / "examples"
PROMPTS = [[5, 6, 7, 8], [9, 10], [11, 12, 13], [14, 15, 16, 17, 18]]


def test_compiled_cuda_graph_decode_gives_the_plain_loops_tokens():
    model, tok = tiny_on(DEVICE)
    plain = HFEngine(model, tok, batch_size=8, kv_cache="dynamic")
    compiled = HFEngine(model, tok, batch_size=8, compile_decode=True)
    p = SamplingParams(max_new_tokens=16, n=2, temperature=0.0, ignore_eos=True)
    a, b = compiled.generate(PROMPTS, p), plain.generate(PROMPTS, p)
    assert a.response_ids == b.response_ids
    for x, y in zip(a.log_probs, b.log_probs, strict=True):
        assert torch.allclose(torch.tensor(x), torch.tensor(y), atol=1e-3)  # TF32 and fusion rounding
    assert compiled.compile_seconds > 0


def test_bfloat16_compute_on_cuda_stays_near_float32():
    """The unit test's tolerance (tests/unit/test_precision.py) on the GPU's bfloat16 units."""
    model, _ = tiny_on(DEVICE)
    attach_log_prob_method(model)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]], device=DEVICE).repeat(4, 1)
    mask, pos = torch.ones_like(ids), torch.arange(8, device=DEVICE).expand(4, 8)
    batch = Batch(
        tensors={
            "input_ids": ids.cpu(),
            "attention_mask": mask.cpu(),
            "position_ids": pos.cpu(),
            "responses": ids[:, 4:].cpu(),
            "response_mask": mask[:, 4:].cpu(),
        }
    )
    with torch.no_grad():
        exact, _ = trimmed_log_probs(model, batch, torch.device(DEVICE), 1.0, 1024, False)
        with computing_in(torch.bfloat16, torch.device(DEVICE)):
            low, _ = trimmed_log_probs(model, batch, torch.device(DEVICE), 1.0, 1024, False)
    assert low.dtype == torch.float32
    diff = (exact - low).abs()
    assert 0 < float(diff.max()) < 0.1 and float(diff.mean()) < 0.03


def _steps(trainer: Trainer, n: int) -> list[dict[str, float]]:
    try:
        return [trainer.step() for _ in range(n)]
    finally:
        trainer.close()


def test_grpo_on_cuda_trains_float32_master_weights_with_bfloat16_compute_by_default(tmp_path, monkeypatch):
    # the suite runs with `auto` meaning float32 (conftest): this test is of the defaults themselves
    monkeypatch.delenv("TURNRL_EXACT", raising=False)
    cfg = load_config(
        None,
        [
            f"model.path={tiny_path()}",
            # the defaults on one GPU; spelled out for a dry run on a CPU, where auto is float32 throughout
            *([] if DEVICE == "cuda" else ["model.dtype=float32", "rollout.dtype=bfloat16"]),
            f"trainer.device={DEVICE}",
            "data.train_batch_size=4",
            "rollout.n=4",
            "actor.ppo_mini_batch_size=4",
            "actor.optim.lr=1e-4",
            "data.max_response_length=16",
            f"reward.custom_function.path={even_reward(tmp_path)}",
            f"trainer.default_local_dir={tmp_path / 'run'}",
            "trainer.val_before_train=false",
            "trainer.test_freq=0",
            "trainer.save_freq=0",
            "trainer.logger=[jsonl]",
            "trainer.total_training_steps=2",
        ],
    )
    trainer = Trainer(cfg)
    engine = trainer.engine
    if DEVICE == "cuda":  # the actor's passes run under bfloat16 autocast
        assert trainer.actor.group.workers[0].model.response_log_probs.compute_dtype == torch.bfloat16
    assert next(engine.source.parameters()).dtype == torch.float32  # master weights
    assert next(engine.model.parameters()).dtype == torch.bfloat16  # the sampling copy
    start = {k: v.detach().clone() for k, v in engine.source.named_parameters()}
    metrics = _steps(trainer, 2)
    for m in metrics:
        assert math.isfinite(m["actor/pg_loss"]) and m["actor/grad_norm"] > 0
        assert m["response_length/mean"] > 0
    moved = [k for k, v in engine.source.named_parameters() if not torch.equal(v, start[k])]
    assert moved, "no parameter changed"
    copy = dict(engine.model.named_parameters())
    name, weight = next(iter(engine.source.named_parameters()))
    assert torch.equal(copy[name], weight.to(torch.bfloat16))  # the copy followed the update


def test_a_multi_turn_agent_step_runs_on_cuda(tmp_path):
    overrides = {
        "model.path": tiny_path(),
        "trainer.device": DEVICE,
        "data.train_batch_size": 2,
        "data.max_response_length": 24,
        "rollout.n": 2,
        "rollout.multi_turn.max_tokens_per_turn": 8,
        "actor.ppo_mini_batch_size": 1,
        "trainer.total_training_steps": 1,
        "trainer.test_freq": 0,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.default_local_dir": str(tmp_path / "run"),
    }
    keep = KeepStages()
    trainer = Trainer(
        load_config(EXAMPLES / "calculator_agent.yaml", [f"{k}={v}" for k, v in overrides.items()]),
        hooks=[keep],
    )
    (m,) = _steps(trainer, 1)
    assert m["agent/turns/mean"] >= 1 and math.isfinite(m["actor/pg_loss"])
    assert m["agent/model_tokens/mean"] > 0
    batch = next(b for b in reversed(keep.batches.values()) if "response_mask" in b.tensors)
    # observation tokens are in the sequence but out of the loss
    assert int(batch["response_mask"].sum()) <= int(
        batch["attention_mask"][:, -batch["responses"].shape[1] :].sum()
    )
