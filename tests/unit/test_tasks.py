"""The built-in tasks' table (`turnrl.tasks`) and `turnrl data task NAME --out DIR`: every task's rows
are a pure function of (split, seed), pinned byte for byte; every data source has its scorer; the
files the command writes read back, through `data.train_files`, as the task's own rows."""

from __future__ import annotations

import hashlib
import json

import pytest

from turnrl.agent.tools.base import ToolError
from turnrl.agent.tools.toolset import ToolSet
from turnrl.cli import main
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.data.dataset import load_examples, read_rows
from turnrl.models.loader import load_tokenizer
from turnrl.rewards.registry import registered
from turnrl.servers.retriever.corpus import read_corpus
from turnrl.tasks import TASKS, UnknownTask, addition, calculator, code, get, scorers, search, write_task
from turnrl.tasks.args import MAX_ROWS, TaskArgError, check_count, parse_arg

# sha256 (first 16 hex digits) of each split's JSONL at seed 0, and its row count: the rows every
# earlier run trained and validated on. A change here changes what `turnrl train` learns.
PINNED = {
    ("addition", "train"): (32, "b9f872a3ea997407"),
    ("addition", "val"): (40, "a3b3e6900e4affea"),
    ("calculator", "train"): (2048, "2d5e243ec47541c9"),
    ("calculator", "val"): (64, "b7f4a4a248b70d7b"),
    # the code task's 5 held-out problems of training families left training (19 of 24 problems)
    ("code", "train"): (512, "6eeed8a5cf4bab19"),
    ("code", "val"): (52, "cb4c96be8ac4e48d"),
    ("search", "train"): (1890, "d3f8da2f76c19afc"),
    # the large validation world (val_size=small, the 128 rows of the results' figures, is pinned in
    # tests/unit/test_search_world.py)
    ("search", "val"): (512, "d28fe320580588c3"),
}


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


@pytest.mark.parametrize(("name", "split"), list(PINNED))
def test_rows_are_pinned_byte_for_byte(name, split):
    rows = TASKS[name].rows(split, 0)
    count, digest = PINNED[(name, split)]
    assert len(rows) == count
    assert hashlib.sha256(jsonl(rows)).hexdigest()[:16] == digest
    # declared sources only; together the splits carry every one but the search probe's (only on
    # `val=demonstrated` rows)
    assert {r["data_source"] for r in rows} <= set(TASKS[name].data_sources)
    both = {r["data_source"] for sp in ("train", "val") for r in TASKS[name].rows(sp, 0)}
    assert both == set(TASKS[name].data_sources) - {"turnrl/search/2hop_demo"}
    assert {r["extra_info"]["split"] for r in rows} == {"train" if split == "train" else "test"}


@pytest.mark.parametrize("name", list(TASKS))
def test_the_seed_orders_or_draws_the_training_rows(name):
    task = TASKS[name]
    assert task.rows("train", 3) == task.rows("train", 3)
    assert task.rows("train", 3) != task.rows("train", 4)
    with pytest.raises(ValueError, match="split must be 'train' or 'val'"):
        task.rows("valid", 3)


def test_the_table_is_what_the_config_accepts_and_the_reward_routes():
    assert all(task.name == name for name, task in TASKS.items())
    table = scorers()
    # plus one entry for every reasoning-gym dataset's source (`reasoning_gym/chain_sum`, ...)
    assert sorted(table) == sorted([*(s for t in TASKS.values() for s in t.data_sources), "reasoning_gym/*"])
    assert table["turnrl/addition"] is addition.compute_score
    assert table["turnrl/calculator"] is calculator.compute_score
    # Search-R1's exact match, plus format credit, for each hop count
    assert all(table[s] is search.compute_score for s in TASKS["search"].data_sources)
    # the code task's own scorer (partial credit), bound to the run's sandbox like the public sources'
    bound = registered("http://sandbox", table)["turnrl/code"]
    assert bound.func is code.compute_score and bound.keywords == {"sandbox_url": "http://sandbox"}
    with pytest.raises(
        UnknownTask, match="unknown built-in task 'chess'; valid: addition, calculator, code, search"
    ):
        get("chess")


def test_each_task_scores_its_own_right_answer():
    for name in ("addition", "calculator", "search"):
        task = TASKS[name]
        row = task.rows("val", 0)[0]
        truth = row["reward_model"]["ground_truth"]
        answer = truth["target"][0] if isinstance(truth, dict) else truth
        result = task.scorer(row["data_source"], f"<answer> {answer} </answer>", truth, row["extra_info"])
        assert result["score"] == 1.0, (name, result)


def test_only_the_search_task_has_a_corpus_and_search_code_and_harbor_demonstrations():
    assert [n for n, t in TASKS.items() if t.corpus is not None] == ["search"]
    assert [n for n, t in TASKS.items() if t.demos is not None] == ["code", "search", "harbor"]
    assert {n: t.tools for n, t in TASKS.items()} == {
        "addition": (), "calculator": ("calculator",), "code": ("python",), "search": ("search",),
        "harbor": ("bash", "editor"),
    }  # fmt: skip


def test_data_task_writes_what_data_train_files_reads(tmp_path, capsys):
    out = tmp_path / "addition"
    assert main(["data", "task", "addition", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["train.jsonl", "val.jsonl"]  # no temporary file left
    assert read_rows(out / "train.jsonl") == addition.rows("train", 0)
    assert read_rows(out / "val.jsonl") == addition.rows("val", 0)
    assert (out / "train.jsonl").read_bytes() == jsonl(addition.rows("train", 0))
    printed = capsys.readouterr().out
    assert "addition:" in printed and "train.jsonl: 32 rows" in printed and "val.jsonl: 40 rows" in printed
    # what the trainer makes of `data.train_files=[...]`: the task's prompts and answers
    examples = load_examples([str(out / "train.jsonl")], load_tokenizer("tiny-random"), 1024)
    rows = addition.rows("train", 0)
    assert [e.raw_prompt for e in examples] == [r["prompt"] for r in rows]
    assert [e.ground_truth for e in examples] == [r["reward_model"]["ground_truth"] for r in rows]


def test_data_task_takes_a_seed_and_writes_the_corpus(tmp_path):
    out = tmp_path / "search"
    assert main(["data", "task", "search", "--out", str(out), "--seed", "3"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["corpus.jsonl", "qa.jsonl", "train.jsonl", "val.jsonl"]
    assert read_rows(out / "train.jsonl") == TASKS["search"].rows("train", 3)
    ids, contents = read_corpus(out / "corpus.jsonl", show_progress=False)  # what `retriever index` reads
    assert len(ids) == 620 and all("\n" in c for c in contents)
    again = write_task("search", tmp_path / "again", 3)  # the same files without the corpus
    assert again.corpus is None and again.train.read_bytes() == (out / "train.jsonl").read_bytes()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["chess"], "unknown built-in task 'chess'; valid: addition, calculator, code, search"),
        ([], "name the task: turnrl data task NAME --out DIR"),
        (["addition", "--n", "3"], "--n: only for search_sft, code_sft and harbor_sft"),
        (
            ["addition", "--topk", "3", "--problems", "x"],
            "--topk: only for search_sft; --problems: only for code_sft",
        ),
        (["addition", "--input", "x.jsonl"], "task generates its rows from the built-in task"),
    ],
)
def test_data_task_errors_are_one_line_and_exit_2(tmp_path, capsys, argv, expected):
    out = tmp_path / "o"
    assert main(["data", "task", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not out.exists()


COUNT = "must be a positive integer, got"


@pytest.mark.parametrize(
    ("name", "arg", "expected"),
    [
        ("addition", "n_train=abc", f"task 'addition': argument 'n_train' {COUNT} 'abc'"),
        ("addition", "n_train=1e30", f"task 'addition': argument 'n_train' {COUNT} '1e30'"),
        ("addition", "n_train=nan", f"task 'addition': argument 'n_train' {COUNT} 'nan'"),
        ("addition", "n_train=[1", f"task 'addition': argument 'n_train' {COUNT} '[1'"),
        ("addition", "n_train=2.5", f"task 'addition': argument 'n_train' {COUNT} 2.5"),
        ("addition", "n_train=true", f"task 'addition': argument 'n_train' {COUNT} True"),
        ("addition", "n_train=-1", f"task 'addition': argument 'n_train' {COUNT} -1"),
        ("addition", "n_train=0", f"task 'addition': argument 'n_train' {COUNT} 0"),
        (
            "addition",
            "n_train=100000000000000000000",  # hung before
            "task 'addition': argument 'n_train' must be at most 100,000, got 100000000000000000000",
        ),
        ("calculator", "n_train=-5", f"task 'calculator': argument 'n_train' {COUNT} -5"),
        ("calculator", "n_val=0", f"task 'calculator': argument 'n_val' {COUNT} 0"),
        ("calculator", "n_val=abc", f"task 'calculator': argument 'n_val' {COUNT} 'abc'"),
        (
            "calculator",
            "n_val=100001",
            "task 'calculator': argument 'n_val' must be at most 100,000, got 100001",
        ),
        ("code", "n_train=100001", "task 'code': argument 'n_train' must be at most 100,000, got 100001"),
    ],
)
def test_a_row_count_that_is_not_one_is_one_line_and_writes_nothing(tmp_path, capsys, name, arg, expected):
    out = tmp_path / "o"
    assert main(["data", "task", name, "--out", str(out), "--arg", arg]) == 2
    assert capsys.readouterr().err.splitlines() == [f"turnrl data: {expected}"]
    assert not out.exists()
    with pytest.raises(TaskArgError) as err:  # the same line from the rows themselves (data.task_args)
        TASKS[name].rows("val", 0, **dict([parse_arg(arg)]))
    assert str(err.value) == expected


def test_the_row_counts_take_up_to_max_rows():
    assert check_count(MAX_ROWS, "n") == MAX_ROWS
    assert len(calculator.rows("val", 0, n_train=1, n_val=3)) == 3
    assert len(addition.rows("train", 0, n_train=1)) == 1


def test_a_converter_refuses_a_task_name(tmp_path, capsys):
    assert main(["data", "gsm8k", "addition", "--input", "x.jsonl", "--out", str(tmp_path / "o")]) == 2
    assert "NAME is only for `turnrl data task`" in capsys.readouterr().err


def test_a_search_tool_without_url_or_index_needs_the_index_passed_in(tmp_path):
    # the tool layer does not know the search task: the run passes its index builder
    with pytest.raises(ToolError, match=r"set url .* or index"):
        ToolSet(MultiTurnConfig(tools=["search"]), tmp_path).start()
