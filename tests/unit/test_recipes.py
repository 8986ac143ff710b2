from pathlib import Path

import pytest

from turnrl.config import load_config

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("recipe", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_recipe_loads_and_validates(recipe):
    cfg = load_config(recipe)
    assert cfg.data.train_batch_size > 0


def test_shipped_recipes_are_reachable_by_name_and_listed(capsys):
    from turnrl.cli import main
    from turnrl.config.loader import builtin_recipes

    assert set(builtin_recipes()) == {p.stem for p in EXAMPLES}  # examples/ is the package's folder
    assert load_config("calculator_agent").rollout.multi_turn.enable
    assert main(["train", "--list-recipes"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == sorted(builtin_recipes())
    assert "Calculator agent on a CPU with the embedded SmolLM2-135M-Instruct" in listed[0]


def test_an_unknown_recipe_name_suggests_the_closest(tmp_path):
    from turnrl.config import ConfigError

    with pytest.raises(ConfigError) as err:
        load_config("grpoo")
    assert "did you mean 'grpo'?" in str(err.value) and "built-in: calculator_agent" in str(err.value)
