from pathlib import Path

import pytest

from turnrl.config import load_config

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("recipe", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_recipe_loads_and_validates(recipe):
    cfg = load_config(recipe)
    assert cfg.data.train_batch_size > 0
