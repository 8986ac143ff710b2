"""The engine's work counters, counted by hand on a small batch, and the stages' bounds worked by
hand (turnrl/trainer/bounds.py)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.trainer.bounds import ModelShape, Rates, stage_bounds, stage_table

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_counts_prefill_positions_and_decode_steps_rows_and_cache_reads(tiny):
    model, tok = tiny
    engine = HFEngine(model, tok, batch_size=16, sync_every=1)
    p = SamplingParams(max_new_tokens=3, n=1, temperature=0.0, ignore_eos=True)
    # three rows left-padded to 4 columns: 12 positions prefilled, 9 of them real
    out = engine.generate([[5, 6, 7, 8], [9, 10], [11, 12, 13]], p, [3, 1, 2])
    assert [len(r) for r in out.response_ids] == [3, 1, 2]
    m = engine.work.take()
    assert (m["engine/prefill_tokens"], m["engine/prefill_new_tokens"]) == (12, 9)
    # token 1 of every row is sampled from the prefill's logits; row 2 (limit 1) is done but rides
    # along (1 row-step ridden < 2 rows kept), so the first decode step runs all 3 rows over 4 cached
    # positions; row 3 (limit 2) is done too: 1 + 2 row-steps ridden >= 1 row kept, both leave, and
    # the second runs row 1 over 5; row 1's third token ends the loop without a forward
    assert (m["engine/decode_steps"], m["engine/decode_rows"], m["engine/decode_kv_tokens"]) == (
        2,
        4,
        3 * 4 + 5,
    )
    assert m["engine/prefill_s"] > 0 and m["engine/decode_s"] > 0
    assert all(v == 0 for v in engine.work.take().values())  # taken: back to zero


def test_a_shared_prefix_is_counted_once_and_the_rest_per_row(tiny):
    model, tok = tiny
    engine = HFEngine(model, tok, batch_size=16, sync_every=1)
    shared = list(range(20, 40))  # 20 tokens every row starts with: run once, copied
    rows = [[*shared, 5, 6], [*shared, 7], [*shared, 8, 9, 10]]
    engine.generate(rows, SamplingParams(max_new_tokens=1, n=1, temperature=0.0, ignore_eos=True))
    m = engine.work.take()
    assert (m["engine/prefill_tokens"], m["engine/prefill_new_tokens"]) == (20 + 3 * 3, 20 + 6)
    assert m["engine/decode_steps"] == 0  # one token each: sampled from the prefill's logits


SHAPE = ModelShape(trunk_params=100, head_params=10, weight_bytes=440, kv_bytes_per_token=8)
RATES = Rates(matmul_flops=1000.0, bandwidth=100.0)
STEP = {
    "engine/prefill_tokens": 5,
    "engine/decode_steps": 2,
    "engine/decode_rows": 4,
    "engine/decode_kv_tokens": 10,
    "perf/total_num_tokens": 30,
    "prompt_length/mean": 2.0,
    "response_length/mean": 1.0,
}


def test_bounds_by_hand():
    b = stage_bounds(STEP, SHAPE, RATES)
    assert b["prefill"] == pytest.approx(2 * 100 * 5 / 1000)  # 1.0 s
    # decode: 880 FLOP (0.88 s) against 2 x 440 weight bytes + 10 x 8 cache bytes (9.6 s): memory-bound
    assert b["decode"] == pytest.approx(9.6)
    # 30 tokens through the trunk, the head over the 10 response tokens: 6,200 FLOP forward
    assert b["old_log_prob"] == pytest.approx(6.2)
    assert b["update_actor"] == pytest.approx(18.6)  # forward and backward: 3 x the forward
    assert stage_bounds(STEP, SHAPE, RATES, update_passes=2)["update_actor"] == pytest.approx(37.2)
    # 10 rows: with pairs of rows sharing their prompt's forward, 5 prompts of 2 and 10 responses of 1
    assert stage_bounds(STEP, SHAPE, RATES, prompt_share=2)["old_log_prob"] == pytest.approx(4.2)
    # many rows over a small cache: the same step becomes compute-bound
    busy = {**STEP, "engine/decode_rows": 400, "engine/decode_kv_tokens": 0}
    assert stage_bounds(busy, SHAPE, RATES)["decode"] == pytest.approx(2 * 110 * 400 / 1000)


def test_the_table_splits_generation_and_shares_its_bounds():
    step = {
        **STEP,
        "timing_s/gen": 15.0,
        "engine/prefill_s": 2.0,
        "engine/decode_s": 12.0,
        "timing_s/update_actor": 37.2,
        "timing_s/reward": 0.8,
        "timing_s/step": 53.0,
    }
    rows = {
        name: (wall, share, bound) for name, wall, share, bound in stage_table([step, step], SHAPE, RATES)
    }
    assert rows["prefill"] == pytest.approx((2.0, 2 / 53, 0.5))
    assert rows["decode"] == pytest.approx((12.0, 12 / 53, 0.8))
    assert rows["gen (the rest: tools, episodes)"] == pytest.approx((1.0, 1 / 53, None))
    assert rows["update_actor"] == pytest.approx((37.2, 37.2 / 53, 0.5))
    assert rows["reward"][2] is None and rows["step"] == (53.0, 1.0, None)
    assert "gen" not in rows


def test_the_model_shape_of_tiny_random(tiny):
    model, _ = tiny
    cfg = model.config
    shape = ModelShape.of(model, 4)
    head = cfg.vocab_size * cfg.hidden_size
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert (shape.head_params, shape.trunk_params) == (head, linear - head)
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    assert shape.kv_bytes_per_token == 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * 4


@pytest.mark.slow  # a benchmark's smoke run (~8 s): `python -m pytest -m slow` runs it
def test_the_benchmark_prints_a_run_s_table(tmp_path):
    """A real run's metrics (one tiny step) through `benchmarks/stage_bounds.py`."""
    from tests.support.tiny_runs import tiny_overrides
    from turnrl.config import load_config
    from turnrl.trainer.ppo import Trainer

    run = Trainer(load_config(None, [*tiny_overrides(tmp_path), "trainer.total_training_steps=2"])).fit()
    out = subprocess.run(
        # rates given: measuring them is the script's own business, not this test's
        [
            sys.executable,
            str(ROOT / "benchmarks" / "stage_bounds.py"),
            str(run),
            "--threads",
            "1",
            "--rates",
            "50,10",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    table = {line.split("|")[1].strip(): line for line in out.stdout.splitlines() if line.startswith("| ")}
    for stage in ("prefill", "decode", "update_actor", "step"):
        assert stage in table, out.stdout
    assert table["decode"].rstrip(" |").endswith("%")  # a share of its bound was computed
