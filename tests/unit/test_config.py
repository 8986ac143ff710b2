import pytest

from turnrl.config import ConfigError, field_docs, load_config
from turnrl.config.loader import valid_keys


def test_defaults_yaml_and_overrides_merge_in_order(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("rollout:\n  n: 4\n  temperature: 0.7\nactor:\n  optim:\n    lr: 3.0e-6\n")
    cfg = load_config(recipe, ["rollout.n=2", "trainer.logger=[console]"])
    assert cfg.rollout.n == 2  # override beats YAML
    assert cfg.rollout.temperature == 0.7  # YAML beats default
    assert cfg.actor.optim.lr == 3e-6
    assert cfg.trainer.logger == ["console"]
    assert cfg.data.max_response_length == 24  # default kept


def test_unknown_key_names_closest_valid_key():
    with pytest.raises(
        ConfigError, match=r"unknown config key 'rollout\.temprature'.*'rollout\.temperature'"
    ):
        load_config(None, ["rollout.temprature=0.5"])
    # a right leaf in the wrong section
    with pytest.raises(ConfigError, match=r"did you mean 'actor\.optim\.lr'"):
        load_config(None, ["trainer.lr=1e-5"])


def test_unknown_key_in_yaml_names_file(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("data:\n  train_batch_sise: 4\n")
    with pytest.raises(ConfigError, match=r"data\.train_batch_sise.*r\.yaml.*data\.train_batch_size"):
        load_config(recipe)


def test_bad_type_names_key():
    with pytest.raises(ConfigError, match=r"rollout\.n"):
        load_config(None, ["rollout.n=many"])


def test_batch_size_must_divide_into_mini_batches():
    with pytest.raises(ConfigError, match=r"train_batch_size'=6.*ppo_mini_batch_size'=4"):
        load_config(None, ["data.train_batch_size=6", "actor.ppo_mini_batch_size=4"])


def test_group_estimator_needs_n_at_least_two_and_known_names():
    with pytest.raises(ConfigError, match="group of one"):
        load_config(None, ["rollout.n=1"])
    with pytest.raises(ConfigError, match="valid: gae, grpo"):
        load_config(None, ["algorithm.adv_estimator=ppo2"])


def test_missing_recipe_and_bad_override_form():
    with pytest.raises(ConfigError, match="recipe file not found"):
        load_config("nope.yaml")
    with pytest.raises(ConfigError, match="key=value"):
        load_config(None, ["rollout.n"])


def test_every_field_has_a_docstring():
    docs = field_docs()
    leaves = [k for k in valid_keys() if k.count(".") >= 1 and k not in ("reward.custom_function",)]
    missing = [k for k in leaves if not docs.get(k)]
    assert not missing, f"fields without a docstring: {missing}"


def test_ppo_family_bad_input_names_the_missing_piece():
    with pytest.raises(ConfigError, match=r"valid: token-mean"):
        load_config(None, ["actor.loss_agg_mode=mean"])
    with pytest.raises(ConfigError, match=r"valid: vanilla, gspo"):
        load_config(None, ["actor.policy_loss_mode=ppo"])
    with pytest.raises(ConfigError, match=r"'algorithm\.kl_penalty' 'k4'; valid: k1"):
        load_config(None, ["algorithm.kl_penalty=k4"])
    with pytest.raises(ConfigError, match=r"needs a critic: set critic\.enable=true"):
        load_config(None, ["algorithm.adv_estimator=gae"])
    with pytest.raises(ConfigError, match=r"needs the reference policy: set ref\.enable=true"):
        load_config(None, ["actor.use_kl_loss=true", "ref.enable=false"])
    with pytest.raises(ConfigError, match="group of one"):
        load_config(None, ["algorithm.adv_estimator=rloo", "rollout.n=1"])
    with pytest.raises(ConfigError, match=r"reward_model\.model\.path"):
        load_config(None, ["reward_model.enable=true"])


def test_moved_key_is_suggested_under_the_section_named():
    with pytest.raises(ConfigError, match=r"did you mean 'critic\.optim\.lr'"):
        load_config(None, ["critic.lr=1e-5"])
    with pytest.raises(ConfigError, match=r"did you mean 'actor\.optim\.lr'"):
        load_config(None, ["actor.lr=1e-5"])


def test_a_task_swapped_on_the_command_line_drops_the_recipes_task_args():
    # gym_chain_sum's task_args (max_digits, ...) are chain_sum's: another task would refuse them
    kept = load_config("gym_chain_sum", ["data.task=reasoning_gym:chain_sum"]).data.task_args
    assert kept["max_digits"] == 1 and kept["size"] == 160
    swapped = load_config(
        "gym_chain_sum", ["data.task_args.size=50", "data.task=reasoning_gym:basic_arithmetic"]
    )
    assert swapped.data.task == "reasoning_gym:basic_arithmetic"
    assert swapped.data.task_args == {"size": 50}  # the command line's own, given before the task
    assert load_config("gym_chain_sum", ["data.task=addition"]).data.task_args == {}


def test_list_keys_shows_each_keys_declared_range():
    """`turnrl train --list-keys`: the range declared on the field, its sentinel's meaning, the
    docstring; a key without a range (a string) shows none."""
    from turnrl.config import key_listing

    lines = {line.split()[0]: line for line in key_listing()}
    assert "[>= 0; 0 = off] Top-k sampling" in lines["rollout.top_k"]
    assert "[> 0] Peak learning rate" in lines["actor.optim.lr"]
    assert "[" not in lines["data.task"].split("Built-in")[0]
