"""Two real steps of every estimator and loss variant on `tiny-random` (issue: the PPO family)."""

import json

import pytest

from tests.support.keep_stages import KeepStages
from tests.support.tiny_runs import reward_file, tokenizer_json
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

COMMON = {
    "model.path": "tiny-random",
    "data.train_batch_size": 2,
    "data.max_response_length": 6,
    "data.val_batch_size": 100,
    "rollout.n": 4,
    "actor.ppo_mini_batch_size": 1,
    "critic.ppo_mini_batch_size": 1,
    "trainer.total_training_steps": 2,
    "trainer.test_freq": 0,
    "trainer.val_before_train": False,
    "trainer.logger": "[jsonl]",
}

CASES = {
    "grpo": {"algorithm.adv_estimator": "grpo"},
    "dr_grpo": {"algorithm.norm_adv_by_std_in_grpo": False, "actor.loss_agg_mode": "seq-mean-token-sum-norm"},
    "rloo": {"algorithm.adv_estimator": "rloo"},
    "reinforce_plus_plus": {
        "algorithm.adv_estimator": "reinforce_plus_plus",
        "rollout.n": 1,
        "actor.use_kl_loss": True,
    },
    "reinforce_plus_plus_baseline": {"algorithm.adv_estimator": "reinforce_plus_plus_baseline"},
    "remax": {"algorithm.adv_estimator": "remax"},
    "gae": {
        "algorithm.adv_estimator": "gae",
        "critic.enable": True,
        "algorithm.use_kl_in_reward": True,
        "algorithm.kl_ctrl.type": "adaptive",
        "trainer.critic_warmup": 1,
    },
    "gspo_kl_loss": {
        "actor.policy_loss_mode": "gspo",
        "actor.use_kl_loss": True,
        "actor.kl_loss_type": "k3",
        "actor.clip_ratio_high": 0.28,
        "actor.loss_agg_mode": "seq-mean-token-mean",
    },
    # the newer policy losses (tests/unit/test_policy_loss_modes.py has their math); ratios large enough
    # for Clip-Cov / KL-Cov to act on a 4-response micro-batch
    "cispo": {"actor.policy_loss_mode": "cispo", "actor.clip_ratio_low": 1.0, "actor.clip_ratio_high": 0.28},
    "sapo": {"actor.policy_loss_mode": "sapo", "actor.entropy_coeff": 0.01},
    "gmpo": {
        "actor.policy_loss_mode": "gmpo",
        "actor.clip_ratio_low": 0.4,
        "actor.clip_ratio_high": 0.4,
        "actor.loss_agg_mode": "seq-mean-token-mean",
    },
    "clip_cov": {"actor.policy_loss_mode": "clip_cov", "actor.clip_cov_ratio": 0.2, "actor.clip_cov_lb": 0.0},
    "kl_cov": {"actor.policy_loss_mode": "kl_cov", "actor.kl_cov_ratio": 0.2},
    "dapo": {
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.max_num_gen_batches": 3,
        "reward.overlong_buffer.enable": True,
        "reward.overlong_buffer.len": 2,
        "actor.clip_ratio_high": 0.28,
    },
    "reward_model": {"reward_model.enable": True, "reward_model.model.path": "tiny-random"},
}


# advantage-only variants: their math is unit-tested (tests/unit/test_algo_adv_outcome.py); slow here
SLOW_CASES = ("dr_grpo", "rloo", "reinforce_plus_plus_baseline")


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_CASES else n for n in CASES]
)
def test_two_steps(tmp_path, name):
    overrides = {**COMMON, "trainer.default_local_dir": str(tmp_path / "run"), **CASES[name]}
    if name != "reward_model":
        overrides["reward.custom_function.path"] = reward_file(tmp_path)
    cfg = load_config(None, [f"{k}={v}" for k, v in overrides.items()])
    run = Trainer(cfg).fit()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "critic/score/mean" in r]
    assert len(steps) == 2
    last = steps[-1]
    for key in ("critic/advantages/mean", "actor/pg_loss", "actor/grad_norm"):
        assert key in last and last[key] == last[key], key  # present and not NaN
    if name == "gae":
        for key in (
            "critic/vf_loss",
            "critic/vf_clipfrac",
            "critic/vpred_mean",
            "critic/values/mean",
            "critic/returns/mean",
            "critic/kl",
            "critic/kl_coeff",
        ):
            assert key in last, key
        assert "actor/pg_loss" not in steps[0]  # critic warm-up held the actor back at step 1
    if name in ("gspo_kl_loss", "reinforce_plus_plus"):
        assert "actor/kl_loss" in last and "actor/kl_coef" in last
    if name in ("clip_cov", "kl_cov"):
        assert last["actor/pg_covfrac"] > 0.0
    if name == "dapo":
        assert "batch/num_gen_batches" in last and "batch/dropped_groups" in last
    if name == "reward_model":
        assert "reward_extra/reward_model_score/mean" in last


@pytest.mark.timeout(240)
def test_dynamic_sampling_refills_with_the_same_prompts(tmp_path):
    # a rare reward (the ids' sum divisible by 7: about 1 in 7) leaves about half the groups of 4 all zero;
    # `refill=same` samples those prompts again instead of drawing new ones
    reward = tmp_path / "rare.py"
    reward.write_text(
        "from tokenizers import Tokenizer\n"
        f"_tok = Tokenizer.from_file({tokenizer_json()!r})\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    ids = _tok.encode(solution_str, add_special_tokens=False).ids\n"
        "    return float(sum(ids) % 7 == 0)\n"
    )
    overrides = {
        **COMMON,
        "data.train_batch_size": 8,  # some group is flat unless all 8 vary: (1 - 0.54) ** 8 = 0.2 %
        "trainer.total_training_steps": 1,
        "trainer.default_local_dir": str(tmp_path / "run"),
        "reward.custom_function.path": str(reward),
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.max_num_gen_batches": 4,
        "algorithm.filter_groups.refill": "same",
    }
    keep = KeepStages()
    run = Trainer(load_config(None, [f"{k}={v}" for k, v in overrides.items()]), hooks=[keep]).fit()
    step = next(
        json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if "batch/retried_groups" in x
    )
    assert step["batch/retried_groups"] > 0 and step["batch/num_gen_batches"] > 1
    # every trained group is one of the step's own prompts: none was drawn fresh
    assert set(keep.batches["adv"]["uid"]) <= set(keep.batches["load_batch"]["index"])
    assert step["batch/kept_prompts"] == len(set(keep.batches["adv"]["uid"]))


def test_an_unknown_refill_is_one_line():
    from turnrl.config import ConfigError

    with pytest.raises(ConfigError, match=r"algorithm\.filter_groups\.refill") as err:
        load_config(None, ["algorithm.filter_groups.refill=again"])
    assert "\n" not in str(err.value)


@pytest.mark.timeout(240)
def test_a_step_whose_groups_all_stay_flat_trains_on_nothing_instead_of_failing(tmp_path):
    reward = tmp_path / "never.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n"
    )
    overrides = {
        **COMMON,
        "trainer.total_training_steps": 1,
        "trainer.default_local_dir": str(tmp_path / "run"),
        "reward.custom_function.path": str(reward),
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.max_num_gen_batches": 2,
        "algorithm.filter_groups.refill": "same",
    }
    run = Trainer(load_config(None, [f"{k}={v}" for k, v in overrides.items()])).fit()
    step = next(
        json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if "batch/kept_prompts" in x
    )
    assert step["batch/kept_prompts"] == 0 and step["batch/num_gen_batches"] == 2
    assert step["batch/retried_groups"] == 2  # both prompts sampled again once
    assert step["actor/grad_norm"] == 0.0  # all advantages 0: the policy is left alone
