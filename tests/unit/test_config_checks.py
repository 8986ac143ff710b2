"""check_config: each cross-field rule raises ConfigError naming the key, on a Config built in code."""

import re
from typing import Any

import pytest

from turnrl.config import ConfigError, check_config, load_config
from turnrl.config.schema import Config
from turnrl.errors import TurnrlInputError


def config_with(**settings: Any) -> Config:
    """A default Config with `section__key=value` settings applied (`__` stands for the dot)."""
    cfg = Config()
    for dotted, value in settings.items():
        *parents, leaf = dotted.split("__")
        node = cfg
        for part in parents:
            node = getattr(node, part)
        setattr(node, leaf, value)
    return cfg


def agent(**settings: Any) -> dict[str, Any]:
    """Settings of an enabled `rollout.multi_turn` plus `settings` under it."""
    return {
        "rollout__multi_turn__enable": True,
        **{f"rollout__multi_turn__{k}": v for k, v in settings.items()},
    }


RULES = [
    # every size must be positive (declared on the fields; tests/unit/test_config_ranges.py checks them)
    *(
        ({key.replace(".", "__"): 0}, rf"'{re.escape(key)}' must be (>= 1|in \[1, 65536\] .*), got 0")
        for key in (
            "data.train_batch_size",
            "data.max_prompt_length",
            "data.max_response_length",
            "rollout.n",
            "actor.ppo_mini_batch_size",
            "actor.ppo_micro_batch_size",
            "actor.log_prob_micro_batch_size",
            "actor.ppo_epochs",
            "rollout.generation_batch_size",
        )
    ),
    # 6 prompts cannot be split into mini-batches of 4
    (
        {"data__train_batch_size": 6, "actor__ppo_mini_batch_size": 4},
        r"'data\.train_batch_size'=6 .* 'actor\.ppo_mini_batch_size'=4 .*pick a divisor",
    ),
    (
        {"data__gen_batch_size": 16},
        r"'data\.gen_batch_size'=16 samples more .*algorithm\.filter_groups\.enable=true",
    ),
    (
        {"data__gen_batch_size": 4, "algorithm__filter_groups__enable": True},
        r"'data\.gen_batch_size'=4 is below data\.train_batch_size=8",
    ),
    (
        {"actor__optim__lr_decay": "cosine"},
        r"'actor\.optim\.lr_decay'='cosine': an RL run keeps a constant rate",
    ),
    ({"rollout__temperature": 0.0}, r"'rollout\.temperature' must be > 0"),
    ({"rollout__top_p": 0.0}, r"'rollout\.top_p' must be in \(0, 1\], got 0\.0"),
    ({"rollout__top_p": 1.5}, r"'rollout\.top_p' must be in \(0, 1\], got 1\.5"),
    ({"actor__clip_ratio_c": 1.0}, r"'actor\.clip_ratio_c' must be > 1 \(dual-clip\)"),
    ({"model__dtype": "int8"}, r"'model\.dtype' must be auto, float32, bfloat16 or float16, got 'int8'"),
    ({"trainer__logger": ["console", "mlflow"]}, r"unknown 'trainer\.logger' \['mlflow'\]; valid: console"),
    ({"algorithm__adv_estimator": "ppo"}, r"unknown 'algorithm\.adv_estimator' 'ppo'; valid: .*grpo"),
    ({"rollout__n": 1}, r"'grpo' needs 'rollout\.n' >= 2 \(a group of one has no baseline\), got 1"),
    ({"algorithm__adv_estimator": "rloo", "rollout__n": 1}, r"'rloo' needs 'rollout\.n' >= 2"),
    ({"actor__loss_agg_mode": "mean"}, r"unknown 'actor\.loss_agg_mode' 'mean'; valid: token-mean"),
    ({"critic__loss_agg_mode": "mean"}, r"unknown 'critic\.loss_agg_mode' 'mean'"),
    ({"actor__policy_loss_mode": "dapo"}, r"unknown 'actor\.policy_loss_mode' 'dapo'; valid: vanilla, gspo"),
    ({"algorithm__kl_penalty": "k4"}, r"unknown 'algorithm\.kl_penalty' 'k4'; valid: k1"),
    ({"actor__kl_loss_type": "k4"}, r"unknown 'actor\.kl_loss_type' 'k4'"),
    (
        {"algorithm__kl_ctrl__type": "pid"},
        r"unknown 'algorithm\.kl_ctrl\.type' 'pid'; valid: fixed, adaptive",
    ),
    (
        {"algorithm__adv_estimator": "gae"},
        r"'algorithm\.adv_estimator=gae' needs a critic: set critic\.enable=true",
    ),
    (
        {"actor__use_kl_loss": True, "ref__enable": False},
        r"'actor\.use_kl_loss=true' needs the reference policy: set ref\.enable=true",
    ),
    (
        {"algorithm__use_kl_in_reward": True, "ref__enable": False},
        r"'algorithm\.use_kl_in_reward=true' needs the reference policy",
    ),
    ({"reward_model__enable": True}, r"'reward_model\.enable=true' needs 'reward_model\.model\.path'"),
    # 8 prompts cannot be split into critic mini-batches of 3
    (
        {"critic__enable": True, "critic__ppo_mini_batch_size": 3},
        r"'data\.train_batch_size'=8 .* 'critic\.ppo_mini_batch_size'=3 .*pick a divisor",
    ),
    # the buffer must fit inside the 24-token response budget
    (
        {"reward__overlong_buffer__enable": True, "reward__overlong_buffer__len": 24},
        r"'reward\.overlong_buffer\.len' must be in \(0, data\.max_response_length\), got 24",
    ),
    # rollout.multi_turn, once enabled
    (agent(format="yaml"), r"'rollout\.multi_turn\.format' must be xml or json, got 'yaml'"),
    (agent(max_turns=-1), r"'rollout\.multi_turn\.max_turns' must be >= 0, got -1"),
    (agent(max_obs_length=0), r"'rollout\.multi_turn\.max_obs_length' must be >= 1, got 0"),
    (
        agent(max_tokens_per_turn=-1),
        r"'rollout\.multi_turn\.max_tokens_per_turn' must be >= 0 \(0 = up to the remaining response budget\), got -1",
    ),
    (agent(max_concurrent_calls=0), r"'rollout\.multi_turn\.max_concurrent_calls' must be >= 1, got 0"),
    (agent(tool_timeout=0.0), r"'rollout\.multi_turn\.tool_timeout' must be > 0, got 0\.0"),
    (agent(answer_tag="  "), r"'rollout\.multi_turn\.answer_tag' must not be empty"),
    (agent(tools=[]), r"rollout\.multi_turn is enabled but names no tool \(rollout\.multi_turn\.tools"),
    # rollout engines
    ({"rollout__engine": "sglang"}, r"unknown 'rollout\.engine' 'sglang'; valid: hf, server, vllm"),
    (
        {"rollout__server__urls": ["10.0.0.2:8000"]},
        r"'rollout\.server\.urls' entry '10\.0\.0\.2:8000' is not an http",
    ),
    ({"rollout__server__timeout_s": 0.0}, r"'rollout\.server\.timeout_s' must be > 0"),
    ({"rollout__sync_every": -1}, r"'rollout\.sync_every' must be >= 0"),
    ({"rollout__dtype": "int8"}, r"unknown 'rollout\.dtype' 'int8'; valid: float32, bfloat16, float16"),
    (
        {"rollout__dtype": "bfloat16", "rollout__engine": "vllm"},
        r"'rollout\.dtype' is for the hf and server engines",
    ),
    (
        {"rollout__engine": "server", "trainer__nnodes": 2, "trainer__ray_address": "h:1"},
        r"'rollout\.engine=server' on several machines needs 'rollout\.server\.urls'",
    ),
    # off-policy correction
    ({"algorithm__rollout_correction__mode": "is"}, r"unknown 'algorithm\.rollout_correction\.mode' 'is'"),
    (
        {"algorithm__rollout_correction__level": "seq"},
        r"unknown 'algorithm\.rollout_correction\.level' 'seq'",
    ),
    ({"algorithm__rollout_correction__mis_low": 3.0}, r"needs 0 <= mis_low < mis_high, got \[3\.0, 2\.0\]"),
    (
        {"algorithm__rollout_correction__bypass": "sometimes"},
        r"unknown 'algorithm\.rollout_correction\.bypass' 'sometimes'; valid: auto, true, false",
    ),
    (
        {"actor__use_dynamic_bsz": True, "actor__ppo_max_token_len_per_gpu": 100},
        r"'actor\.ppo_max_token_len_per_gpu'=100 cannot hold one sequence .* = 280 tokens",
    ),
    (
        {"ref__log_prob_use_dynamic_bsz": True, "ref__log_prob_max_token_len_per_gpu": 279},
        r"'ref\.log_prob_max_token_len_per_gpu'=279 cannot hold one sequence",
    ),
    (
        {"algorithm__rollout_correction__bypass": True, "algorithm__rollout_correction__mode": "tis"},
        r"there is no gap to correct: set algorithm\.rollout_correction\.mode=none",
    ),
    # async
    ({"trainer__mode": "overlap"}, r"unknown 'trainer\.mode' 'overlap'; valid: sync, async"),
    ({"trainer__mode": "async"}, r"'trainer\.mode=async' .*set rollout\.engine=server \(got 'hf'\)"),
    ({"trainer__max_staleness": -1}, r"'trainer\.max_staleness' must be >= 0"),
    (
        {"trainer__mode": "async", "rollout__engine": "server", "trainer__n_gpus_per_node": 2},
        r"'trainer\.mode=async' runs the trainer in one process",
    ),
    # staleness counts optimizer updates: 2 epochs x 8 / 4 = 4 a step, so 3 allows no overlap
    (
        {
            "trainer__mode": "async",
            "rollout__engine": "server",
            "trainer__max_staleness": 3,
            "actor__ppo_epochs": 2,
        },
        r"'trainer\.max_staleness=3' counts optimizer updates, and one step makes 4 \(actor\.ppo_epochs=2 x "
        r"data\.train_batch_size=8 / actor\.ppo_mini_batch_size=4\): .* set it to 0 \(no overlap\) or >= 4",
    ),
]


def test_staleness_in_updates_becomes_whole_steps_ahead():
    from turnrl.config.checks import staleness_lead, updates_per_step

    cfg = config_with(trainer__mode="async", rollout__engine="server", actor__ppo_epochs=2)
    assert updates_per_step(cfg) == 4  # 2 epochs x (8 prompts / mini-batches of 4)
    for k, lead in [(0, 0), (4, 1), (7, 1), (8, 2)]:
        cfg.trainer.max_staleness = k
        assert staleness_lead(cfg) == lead, k
    cfg.trainer.mode = "sync"
    assert staleness_lead(cfg) == 0  # sync mode never runs ahead


def _rule_id(rule: tuple[dict[str, Any], str]) -> str:
    return ",".join(f"{k.replace('__', '.')}={v}" for k, v in rule[0].items())


@pytest.mark.parametrize(("settings", "message"), RULES, ids=[_rule_id(r) for r in RULES])
def test_each_rule_names_its_key(settings, message):
    cfg = config_with(**settings)
    with pytest.raises(ConfigError, match=message) as err:
        check_config(cfg)
    assert "\n" not in str(err.value)  # one line


def test_nested_tool_settings_are_checked():
    cfg = config_with(**agent())
    cfg.rollout.multi_turn.search.topk = 0
    with pytest.raises(ConfigError, match=r"'rollout\.multi_turn\.search\.topk' must be >= 1, got 0"):
        check_config(cfg)
    cfg.rollout.multi_turn.search.topk = 3
    cfg.rollout.multi_turn.python.run_timeout = -1.0
    with pytest.raises(
        ConfigError, match=r"'rollout\.multi_turn\.python\.run_timeout' must be > 0, got -1\.0"
    ):
        check_config(cfg)


def test_multi_turn_rules_only_bind_an_enabled_agent():
    cfg = config_with(rollout__multi_turn__tools=[], rollout__multi_turn__format="yaml")
    check_config(cfg)  # a single-turn run ignores rollout.multi_turn
    cfg.rollout.multi_turn.enable = True
    with pytest.raises(ConfigError, match="must be xml or json"):
        check_config(cfg)


def test_given_data_files_make_the_task_irrelevant():
    from turnrl.trainer.setup import check_plugins

    cfg = config_with(data__task="chess", data__train_files=["t.jsonl"], data__val_files=["v.jsonl"])
    check_config(cfg)
    check_plugins(cfg)
    cfg.data.val_files = []  # the validation split would come from the (unknown) task
    with pytest.raises(ConfigError, match=r"'data\.task'"):
        check_plugins(cfg)


def test_defaults_pass_and_checking_is_idempotent():
    cfg = Config()
    before = repr(cfg)
    for _ in range(2):
        check_config(cfg)
    assert repr(cfg) == before  # reads only


def test_load_config_runs_the_same_checks():
    with pytest.raises(ConfigError, match=r"'rollout\.multi_turn\.max_concurrent_calls' must be >= 1"):
        load_config(None, ["rollout.multi_turn.enable=true", "rollout.multi_turn.max_concurrent_calls=0"])


def test_config_error_is_a_bad_input_error():
    assert issubclass(ConfigError, TurnrlInputError) and issubclass(ConfigError, ValueError)


def test_fsdp_offload_needs_ranks_on_gpus():
    with pytest.raises(ConfigError, match=r"model\.fsdp_offload"):
        load_config(None, ["model.fsdp_offload=true", "trainer.device=cpu", "trainer.n_gpus_per_node=2"])
    with pytest.raises(ConfigError, match=r"model\.fsdp_offload"):
        load_config(None, ["model.fsdp_offload=true"])  # one rank: nothing is sharded


def test_an_unknown_task_is_checked_against_the_table_before_the_model_loads():
    """`data.task` against `TASKS`, where the run is assembled (`check_plugins`, the first step of
    `build_data` and of `turnrl eval`): the config holds no copy of the tasks' names."""
    from turnrl.trainer.setup import check_plugins

    message = (
        r"unknown 'data\.task' 'chess'; valid: addition, calculator, code, search, harbor, "
        r"reasoning_gym:<dataset> \(e\.g\. reasoning_gym:chain_sum\), or harbor:<folder of task directories>"
    )
    with pytest.raises(ConfigError, match=message):
        check_plugins(config_with(data__task="chess"))
    check_plugins(config_with(data__task="reasoning_gym:chain_sum"))  # named where its rows are made
