"""`rollout.compile=auto`: compiled CUDA-graph decode where it was measured to pay (single-turn, GPU),
off on a CPU and for agents; the setting's names and its one-line error."""

import dataclasses

import pytest
import torch

from turnrl.config import load_config
from turnrl.config.checks import ConfigError
from turnrl.trainer.setup import default_precision
from turnrl.workers.engines import compiles_decode

CUDA, CPU = torch.device("cuda"), torch.device("cpu")


def rollout(*overrides: str):
    return load_config(None, ["model.path=tiny-random", *overrides]).rollout


def test_auto_compiles_single_turn_decode_on_a_gpu_only():
    assert compiles_decode(rollout(), CUDA) is True
    assert compiles_decode(rollout(), CPU) is False


def test_auto_leaves_agents_uncompiled_where_every_turn_is_a_new_bucket():
    assert compiles_decode(rollout("rollout.multi_turn.enable=true"), CUDA) is False
    assert compiles_decode(rollout("rollout.agent.entrypoint=agent.py:run"), CUDA) is False


@pytest.mark.parametrize("value, want", [("true", True), ("True", True), ("false", False), ("FALSE", False)])
def test_an_explicit_setting_wins_on_any_device(value, want):
    for device in (CUDA, CPU):
        assert compiles_decode(rollout(f"rollout.compile={value}"), device) is want


def test_an_unknown_setting_is_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"'rollout.compile' must be auto, true or false, got 'always'"):
        rollout("rollout.compile=always")


@pytest.mark.slow  # a one-step run; its lighter siblings stay in the default run
def test_a_decode_step_that_does_not_compile_falls_back_to_the_plain_loop(
    tiny, monkeypatch, tmp_path, caplog
):
    """A real compile failure (inductor pointed at a C++ compiler that does not exist, with an empty
    cache so nothing compiled earlier is reused): one warning naming `rollout.compile` and the
    cause, then the same greedy tokens as the plain loop, and no further compile attempts."""
    import torch._inductor.config as inductor

    from turnrl.rollout.base import SamplingParams
    from turnrl.rollout.hf import HFEngine

    monkeypatch.setattr(inductor.cpp, "cxx", ("/no/such/compiler",))
    monkeypatch.setattr(inductor, "fx_graph_cache", False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    model, tok = tiny
    prompts, p = [[5, 6, 7, 8], [9, 10]], SamplingParams(max_new_tokens=6, n=2, temperature=0.0)
    engine = HFEngine(model, tok, batch_size=8, compile_decode=True)
    with caplog.at_level("WARNING", logger="turnrl.rollout.hf"):
        got = engine.generate(prompts, p)
    plain = HFEngine(model, tok, batch_size=8, kv_cache="dynamic").generate(prompts, p)
    assert got.response_ids == plain.response_ids
    (line,) = [r.getMessage() for r in caplog.records if "rollout.compile" in r.getMessage()]
    assert "did not compile" in line and "compiler" in line and "\n" not in line
    assert engine.compile_decode is False and engine.buckets == {}
    torch._dynamo.reset()


def configs(*overrides: str):
    cfg = load_config(None, ["model.path=tiny-random", *overrides])
    return cfg.model, cfg.rollout


@pytest.fixture
def bf16_device(monkeypatch):
    """A device that multiplies bfloat16 natively, whatever this machine has."""
    monkeypatch.setattr("turnrl.trainer.setup.auto_bf16", lambda device: True)


@pytest.mark.parametrize("device", [CUDA, CPU])
def test_auto_is_float32_master_weights_and_a_bfloat16_sampling_copy(bf16_device, device):
    model, rollout = default_precision(*configs(), world=1, device=device)
    assert (model.dtype, model.compute_dtype, rollout.dtype) == ("float32", "auto", "bfloat16")
    # the server engine's child loads the bfloat16 precision; weights are synced from float32
    model, rollout = default_precision(*configs("rollout.engine=server"), world=1, device=device)
    assert (model.dtype, rollout.dtype) == ("float32", "bfloat16")


def test_auto_leaves_what_it_should_alone(bf16_device):
    base_model, base_rollout = configs()
    for overrides in (["model.lora_rank=8"], ["model.dtype=bfloat16"]):
        model, rollout = configs(*overrides)
        assert default_precision(model, rollout, world=1, device=CUDA) == (model, rollout), overrides
    vllm = dataclasses.replace(base_rollout, engine="vllm")  # (its config check wants vLLM installed)
    assert default_precision(base_model, vllm, world=1, device=CUDA) == (base_model, vllm)
    # an explicit sampling precision is kept
    model, rollout = default_precision(*configs("rollout.dtype=float16"), world=1, device=CUDA)
    assert (model.dtype, rollout.dtype) == ("float32", "float16")
    # N GPU ranks: FSDP's mixed precision casts the float32 shards; the engine is left as it was
    model, rollout = default_precision(*configs(), world=2, device=CUDA)
    assert (model.dtype, rollout.dtype) == ("float32", "")
    # CPU ranks (gloo) stay exact
    assert default_precision(base_model, base_rollout, world=2, device=CPU) == (base_model, base_rollout)


def test_without_bfloat16_or_under_turnrl_exact_auto_is_float32(monkeypatch):
    base_model, base_rollout = configs()
    monkeypatch.setattr("turnrl.trainer.setup.auto_bf16", lambda device: False)
    for device in (CUDA, CPU):
        assert default_precision(base_model, base_rollout, world=1, device=device) == (
            base_model,
            base_rollout,
        )
    from turnrl.models import precision

    monkeypatch.setattr(precision, "bf16_supported", lambda device: True)
    monkeypatch.setenv("TURNRL_EXACT", "1")  # what the test suite runs under (tests/conftest.py)
    assert not precision.auto_bf16(CPU) and precision.compute_dtype("auto", torch.float32, CPU) is None
    monkeypatch.setenv("TURNRL_EXACT", "0")
    assert precision.auto_bf16(CPU) and precision.compute_dtype("auto", torch.float32, CPU) is torch.bfloat16


def test_auto_without_bfloat16_says_so_in_one_line(monkeypatch):
    from turnrl.models import precision

    monkeypatch.delenv("TURNRL_EXACT")
    monkeypatch.setattr(precision, "bf16_supported", lambda device: False)
    line = precision.fallback_note(CPU)
    assert "model.compute_dtype=auto" in line and "float32" in line and "\n" not in line
    assert precision.compute_dtype("auto", torch.float32, CPU) is None
    monkeypatch.setattr(precision, "bf16_supported", lambda device: True)
    assert precision.fallback_note(CPU) == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_the_gpu_check_without_cuda_is_one_line_and_stops(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[2] / "benchmarks" / "gpu_check.py"
    done = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stdout.strip().splitlines()
    assert (
        done.returncode == 2 and len(lines) == 1 and "no CUDA device" in lines[0] and "--dry-run" in lines[0]
    )
    assert not any((tmp_path / "out").iterdir())  # nothing half-written
