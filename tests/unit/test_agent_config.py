from pathlib import Path

import pytest

from turnrl.agent.tools.base import ToolError
from turnrl.agent.tools.toolset import ToolSet
from turnrl.config import ConfigError, check_config, load_config
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.data.dataset import load_examples
from turnrl.models.loader import load_tokenizer
from turnrl.rewards.registry import registered, resolve
from turnrl.tasks import TASKS, scorers, write_task

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


@pytest.mark.parametrize("recipe", ["search_agent.yaml", "code_agent.yaml", "calculator_agent.yaml"])
def test_agent_recipes_load_and_pass_checks(recipe):
    cfg = load_config(EXAMPLES / recipe)  # runs check_config, multi-turn rules included
    mt = cfg.rollout.multi_turn
    assert mt.enable and mt.tools
    check_config(cfg)  # idempotent: the Trainer checks again
    assert cfg.data.task in ("search", "code", "calculator")


def test_search_recipe_is_search_r1_shaped():
    cfg = load_config(EXAMPLES / "search_agent.yaml")
    mt = cfg.rollout.multi_turn
    assert (cfg.rollout.n, mt.max_turns, mt.search.tag, mt.search.obs_tag, cfg.algorithm.adv_estimator) == (
        5, 4, "search", "information", "grpo",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("format=yaml", "must be xml or json"),
        ("max_turns=-1", "max_turns' must be >= 0"),
        ("max_obs_length=0", "max_obs_length' must be >= 1"),
        ("tool_timeout=0", "tool_timeout' must be > 0"),
        ("tools=[]", "names no tool"),
        ("search.topk=0", "topk' must be >= 1"),
    ],
)
def test_bad_multi_turn_settings_are_named(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["rollout.multi_turn.enable=true", f"rollout.multi_turn.{override}"])
    # only an enabled agent is held to them
    cfg = load_config(None, [f"rollout.multi_turn.{override}"])
    cfg.rollout.multi_turn.enable = True
    with pytest.raises(ConfigError, match=message):
        check_config(cfg)


def test_unknown_tool_is_named(tmp_path):
    with pytest.raises(ToolError, match="unknown tool 'browser'; built-in: calculator, python, search"):
        ToolSet(MultiTurnConfig(tools=["calculator", "browser"]), tmp_path).start()
    with pytest.raises(ToolError, match="two tools are named 'calculator'"):
        ToolSet(MultiTurnConfig(tools=["calculator", "calculator"]), tmp_path).start()


@pytest.mark.parametrize("task", ["search", "code", "calculator"])
def test_agent_tasks_write_loadable_rows_with_a_scorer(task, tmp_path, tok):
    files = write_task(task, tmp_path, seed=3)
    train, val = files.train, files.val
    examples = load_examples([str(val)], tok, 1024)
    assert len(examples) >= 10
    sources = {e.data_source for e in examples}
    # the search task's: one per sort (its probe's source is on `val=demonstrated` rows only); the
    # code task's: its two held-out sorts (training rows are `turnrl/code`)
    assert sources == set(TASKS[task].data_sources) - {"turnrl/search/2hop_demo", "turnrl/code"}
    for source in sources:
        resolve(source, None, registered(extra=scorers()))  # the task has a scorer
    assert len(load_examples([str(train)], tok, 1024)) > len(examples)
    again = write_task(task, tmp_path / "again", seed=3).train
    assert again.read_text() == train.read_text()  # a pure function of the seed


def test_search_task_questions_are_answered_by_the_builtin_corpus(tmp_path, tok):
    from turnrl.tasks.search.corpus import ENTITIES, SEED, builtin_documents

    docs = {d["contents"].split("\n", 1)[0]: d["contents"] for d in builtin_documents(ENTITIES, SEED)}
    val = write_task("search", tmp_path, seed=0).val
    for e in load_examples([str(val)], tok, 1024)[:20]:
        answers = e.ground_truth["target"]
        assert any(any(a in text for a in answers) for text in docs.values())


def test_tools_sharing_a_tag_or_the_answer_tag_are_refused(tiny, tmp_path):
    from turnrl.agent.rollout import AgentRollout
    from turnrl.rollout.hf import HFEngine

    model, tokenizer = tiny
    f = tmp_path / "t.py"
    f.write_text(
        "def answer(text):\n    return text\n\ndef other(x):\n    return x\nother.tag = 'calculator'\n"
    )
    for spec, message in [
        ("answer", "answer_tag 'answer' is also a tool tag"),
        ("other", "share the tag <calculator>"),
    ]:
        cfg = load_config(
            None,
            [
                "rollout.multi_turn.tools=[calculator]",
                f"rollout.multi_turn.custom_tools=['{f}:{spec}']",
                f"model.cache_dir={tmp_path}",
            ],
        )
        with pytest.raises(ValueError, match=message):
            AgentRollout(HFEngine(model, tokenizer), tokenizer, cfg, tokenizer.pad_token_id)


def test_a_new_builtin_tool_is_a_builder_and_a_table_line(tmp_path, monkeypatch):
    """Tools are dispatched by the `TOOLS` table: a toy tool added there is built by `ToolSet`,
    with its own config section, and no other file changes."""
    from turnrl.agent.tools import toolset
    from turnrl.agent.tools.calculator import Calculator

    class Abacus(Calculator):
        name = "abacus"

    def build_abacus(tools):
        return Abacus("abacus", tools.cfg.calculator.obs_tag)  # a calculator under another name and tag

    monkeypatch.setitem(toolset.TOOLS, "abacus", toolset.ToolSpec("calculator", build_abacus, "a toy tool"))
    with ToolSet(MultiTurnConfig(tools=["abacus"]), tmp_path) as tools:
        assert list(tools.tools) == ["abacus"] and tools.tools["abacus"].tag == "abacus"


def test_an_unknown_tool_stops_the_run_before_the_model_loads():
    from turnrl.trainer.setup import check_plugins

    cfg = load_config(
        None, ["rollout.multi_turn.enable=true", "rollout.multi_turn.tools=[calculator,browser]"]
    )
    with pytest.raises(
        ToolError,
        match=r"rollout\.multi_turn\.tools: unknown tool 'browser'; built-in: calculator, python, search",
    ):
        check_plugins(cfg)  # the first thing build_data and turnrl eval do: before any tokenizer or model
