"""The learning-rate schedule (`optim.lr_warmup_steps`, `optim.lr_decay`, `optim.min_lr_ratio`): the
factor worked by hand, the rates a real AdamW steps with, and the bad settings."""

import math

import pytest
import torch

from turnrl.config import ConfigError, load_config
from turnrl.config.schema import OptimConfig
from turnrl.config.supervised_schema import SFTConfig
from turnrl.supervised.checks import check_sft
from turnrl.workers.optim import Optimizer, lr_factor


def test_linear_decay_is_the_cookbooks_one_minus_step_over_total():
    assert [lr_factor(s, 0, "linear", 4) for s in range(4)] == [1.0, 0.75, 0.5, 0.25]


def test_cosine_halfway_to_its_floor():
    # 0.2 + 0.8 * (1 + cos(pi * 2/4)) / 2 = 0.6
    assert lr_factor(2, 0, "cosine", 4, 0.2) == pytest.approx(0.6)
    assert lr_factor(0, 0, "cosine", 4, 0.2) == pytest.approx(1.0)


def test_the_decay_starts_after_the_warm_up_and_stops_at_its_floor():
    # warm-up 2: 1/2, 2/2; then 4 decaying steps to 0.1: 1, 1 - 0.9/4, 1 - 0.9/2, 1 - 0.9 * 3/4; then 0.1
    got = [lr_factor(s, 2, "linear", 6, 0.1) for s in range(8)]
    want = [0.5, 1.0, 1.0, 0.775, 0.55, 0.325, 0.1, 0.1]
    assert got == pytest.approx(want)
    assert [lr_factor(s, 2) for s in range(4)] == [0.5, 1.0, 1.0, 1.0]  # constant: warm-up only


def test_an_unknown_decay_is_refused():
    with pytest.raises(ValueError, match="lr_decay"):
        lr_factor(3, 0, "step", 10)


def test_adamw_steps_at_the_scheduled_rates():
    model = torch.nn.Linear(3, 2)
    opt = Optimizer(
        model, OptimConfig(lr=0.1, lr_decay="cosine", min_lr_ratio=0.5), name="sft", total_steps=3
    )
    rates = []
    for _ in range(4):
        model(torch.ones(1, 3)).sum().backward()
        rates.append(opt.step()["sft/lr"])
    floor = 0.05
    want = [
        0.1,
        floor + 0.05 * 0.5 * (1 + math.cos(math.pi / 3)),
        floor + 0.05 * 0.5 * (1 + math.cos(2 * math.pi / 3)),
        floor,
    ]
    assert rates == pytest.approx(want)


def test_a_decay_without_the_runs_step_count_is_refused():
    with pytest.raises(ValueError, match="lr_decay='linear' needs the run's step count"):
        Optimizer(torch.nn.Linear(2, 2), OptimConfig(lr_decay="linear"), name="actor")


def test_bad_decay_settings_are_one_line_naming_the_key(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'
    )
    base = [f"data.train_files=[{rows}]"]
    with pytest.raises(
        ConfigError, match=r"'optim.lr_decay' must be one of constant, linear, cosine; got 'step'"
    ):
        load_config(None, [*base, "optim.lr_decay=step"], schema=SFTConfig, check=check_sft)
    with pytest.raises(ConfigError, match=r"'optim.min_lr_ratio' must be in \[0, 1\]"):
        load_config(None, [*base, "optim.min_lr_ratio=1.5"], schema=SFTConfig, check=check_sft)
    with pytest.raises(
        ConfigError, match=r"'actor.optim.lr_decay'='linear': an RL run keeps a constant rate"
    ):
        load_config(None, ["actor.optim.lr_decay=linear"])
