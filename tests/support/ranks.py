"""Run configs whose one-rank and two-rank runs must agree to float rounding, and the checks."""

import pytest

GRPO = {
    "data.train_batch_size": 4,
    "actor.ppo_mini_batch_size": 2,
    "actor.ppo_micro_batch_size": 3,  # uneven micro-batches on each rank
    "rollout.n": 4,
    "trainer.save_freq": 0,
    # Adam turns float-rounding differences of near-zero gradients into steps of up to lr: a
    # moderate lr keeps two honest runs within 1e-5 of each other
    "actor.optim.lr": 1e-3,
    # both runs recompute the old log-probs (one rank would take the engine's): like for like
    "algorithm.rollout_correction.bypass": "false",
}
# Two honest runs' weights: Adam turns float-rounding differences of near-zero gradients into
# steps of up to lr, so how far the weights drift apart depends on the kernels' rounding. Measured on
# one machine under six CPU dispatch settings (ATen AVX-512 / AVX2 / none x MKL auto / COMPATIBLE,
# test_ppo_gae_two_ranks_equal_one after 2 steps): 0.9e-6 to 1.15e-5, the largest with MKL's
# COMPATIBLE branch. A wrong update moves a weight by a whole step (lr 1e-3): lr / 20 tells the two
# apart with 4x room on each side. Losses and gradient norms stay at 1e-5 (measured: 3.7e-6 at most).
WEIGHT_TOL = GRPO["actor.optim.lr"] / 20
BUDGET = {"ppo": 220, "forward": 300}  # tokens; a row is ~100 (prompt ~92 + 8): 1-3 rows per pass
PPO = {
    **GRPO,
    "algorithm.adv_estimator": "gae",
    "algorithm.use_kl_in_reward": True,
    "critic.enable": True,
    "critic.ppo_mini_batch_size": 2,
    # every role's passes by token budget: rows sorted by length, each rank its own count of passes
    "data.max_prompt_length": 128,
    "actor.use_dynamic_bsz": True,
    "actor.ppo_max_token_len_per_gpu": BUDGET["ppo"],
    "actor.log_prob_max_token_len_per_gpu": BUDGET["forward"],
    "ref.log_prob_use_dynamic_bsz": True,
    "ref.log_prob_max_token_len_per_gpu": BUDGET["forward"],
    "critic.use_dynamic_bsz": True,
    "critic.ppo_max_token_len_per_gpu": BUDGET["ppo"],
    "critic.forward_max_token_len_per_gpu": BUDGET["forward"],
}


def assert_same(one: list[dict], two: list[dict], keys: tuple[str, ...]) -> None:
    """Per-step metrics `keys` of two runs agree to 1e-5."""
    for a, b in zip(one, two, strict=True):
        for k in keys:
            assert b[k] == pytest.approx(a[k], abs=1e-5, rel=1e-5), (a["step"], k, a[k], b[k])
