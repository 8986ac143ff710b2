"""reasoning-gym tasks (`data.task=reasoning_gym:<dataset>`) and task arguments (`data.task_args`)."""

import json

import pytest

from turnrl.cli import main
from turnrl.config import load_config
from turnrl.config.checks import ConfigError
from turnrl.rewards.registry import registered, resolve
from turnrl.tasks import UnknownTask, addition, get, gym, scorers, write_task
from turnrl.tasks.args import TaskArgError, args_key, parse_arg, parse_args, reject_unknown
from turnrl.trainer.setup import task_dir_name

pytest.importorskip("reasoning_gym")

SMALL = {"size": 30, "val_size": 10}


def read_rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def score(row: dict, text: str) -> dict:
    """What the reward does with a row: route its data_source through the run's table, then call."""
    fn = resolve(row["data_source"], None, registered(extra=scorers()))
    return fn(row["data_source"], text, row["reward_model"]["ground_truth"], row["extra_info"])


# --- task arguments -------------------------------------------------------------------------------


def test_task_args_reach_the_config_as_a_dict():
    cfg = load_config(None, ["data.task=reasoning_gym:chain_sum", "data.task_args.size=200"])
    assert cfg.data.task_args == {"size": 200}
    cfg = load_config(None, ["data.task_args={max_digits: 2, allow_negation: true}"])
    assert cfg.data.task_args == {"max_digits": 2, "allow_negation": True}
    assert load_config(None, []).data.task_args == {}


def test_reject_unknown_names_the_key_and_the_known_ones():
    reject_unknown({"n_train": 3}, ("n_train",), "addition")
    with pytest.raises(
        TaskArgError, match=r"task 'addition' takes no argument 'sise'; its arguments: n_train"
    ):
        reject_unknown({"sise": 3}, ("n_train",), "addition")


def test_built_in_tasks_take_their_keywords_and_reject_others():
    assert len(get("addition").rows("train", 0, n_train=12)) == 12
    with pytest.raises(TaskArgError, match="'size'"):
        get("addition").rows("train", 0, size=12)
    with pytest.raises(TaskArgError, match="'size'"):
        get("calculator").rows("val", 0, size=12)


def test_args_key_is_stable_and_order_free():
    assert args_key({}) == "" and args_key(None) == ""
    assert args_key({"a": 1, "b": [1, 2]}) == args_key({"b": [1, 2], "a": 1})
    assert args_key({"a": 1}) != args_key({"a": 2}) != args_key({"a": "2"})
    assert task_dir_name("addition", 0, {}) == "addition-seed0"  # the cache of runs before task_args
    named = task_dir_name("reasoning_gym:chain_sum", 3, {"size": 20})
    assert named == f"reasoning_gym_chain_sum-seed3-args{args_key({'size': 20})}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("size=20", ("size", 20)),
        ("format_credit=0.0", ("format_credit", 0.0)),
        ("allow_negation=true", ("allow_negation", True)),
        ("format_style=simple", ("format_style", "simple")),
        ("operators=[+, -]", ("operators", ["+", "-"])),
        ("name=", ("name", "")),
    ],
)
def test_parse_arg_reads_yaml_scalars(text, expected):
    assert parse_arg(text) == expected


@pytest.mark.parametrize("text", ["size", "=3", "a b=3", "size:3"])
def test_parse_arg_refuses_what_is_not_key_value(text):
    with pytest.raises(TaskArgError, match=r"is not of the form KEY=VALUE"):
        parse_arg(text)


def test_parse_args_later_wins():
    assert parse_args(["size=1", "size=2"]) == {"size": 2} and parse_args(None) == {}


# --- reasoning-gym rows -----------------------------------------------------------------------------


@pytest.mark.parametrize("dataset", ["chain_sum", "basic_arithmetic"])
def test_rows_are_deterministic_per_seed(dataset):
    task = get(f"reasoning_gym:{dataset}")
    assert task.rows("train", 5, **SMALL) == task.rows("train", 5, **SMALL)
    assert task.rows("val", 5, **SMALL) == task.rows("val", 5, **SMALL)
    assert task.rows("train", 5, **SMALL) != task.rows("train", 6, **SMALL)
    train = task.rows("train", 5, **SMALL)
    assert len(train) == 30 and {r["data_source"] for r in train} == {f"reasoning_gym/{dataset}"}
    system, example, worked, question = train[0]["prompt"]
    assert system == {"role": "system", "content": gym.SYSTEM}
    assert question == {"role": "user", "content": train[0]["extra_info"]["problem"]}
    # the worked example is another training question, its answer in the tags, never the asked answer
    assert example["content"] in {r["extra_info"]["problem"] for r in train}
    assert worked["content"] == f"<answer>{train[0]['extra_info']['example_answer']}</answer>"
    assert train[0]["extra_info"]["example_answer"] != train[0]["reward_model"]["ground_truth"]
    bare = task.rows("train", 5, **SMALL, worked_example=False)[0]["prompt"]
    assert [m["role"] for m in bare] == ["system", "user"]
    with pytest.raises(ValueError, match="split must be 'train' or 'val'"):
        task.rows("test", 5)


def test_validation_questions_are_not_training_questions():
    task = get("reasoning_gym:chain_sum")
    train, val = task.rows("train", 0), task.rows("val", 0)
    assert (len(train), len(val)) == (gym.SIZE, gym.VAL_SIZE)
    questions = [r["extra_info"]["problem"] for r in val]
    assert not set(questions) & {r["extra_info"]["problem"] for r in train}
    assert len(set(questions)) == len(questions)
    # validation's worked examples are training questions too: no validation answer is ever shown
    assert {r["prompt"][1]["content"] for r in val} <= {r["extra_info"]["problem"] for r in train}
    assert {r["extra_info"]["split"] for r in val} == {"test"}


def test_a_small_parameter_space_shortens_validation_or_fails():
    # two one-digit terms: 200 questions in all; 1000 training rows leave almost none for validation
    tight = {"min_terms": 2, "max_terms": 2, "max_digits": 1}
    val = gym.rows("chain_sum", "val", 0, size=1000, **tight)
    assert 0 < len(val) < gym.VAL_SIZE
    assert len(gym.rows("chain_sum", "val", 0, size=50, **tight)) == gym.VAL_SIZE
    with pytest.raises(TaskArgError, match="every validation question is also a training question"):
        gym.rows("chain_sum", "val", 0, size=5000, val_size=1, **tight)


def test_dataset_parameters_reach_the_generator():
    rows = gym.rows("chain_sum", "train", 0, size=20, min_terms=2, max_terms=2, max_digits=1)
    for row in rows:
        entry = json.loads(row["extra_info"]["entry"])
        assert entry["metadata"]["num_terms"] == 2 and entry["metadata"]["num_digits"] == 1
    assert json.loads(rows[0]["extra_info"]["params"]) == {"max_digits": 1, "max_terms": 2, "min_terms": 2}


# --- scoring ------------------------------------------------------------------------------------------


def test_chain_sum_scores_hand_worked_answers():
    row = gym.rows("chain_sum", "train", 0, size=10, min_terms=2, max_terms=2, max_digits=1)[0]
    entry = json.loads(row["extra_info"]["entry"])
    a, op, b = entry["metadata"]["expression"].split()
    right = str(int(a) + int(b) if op == "+" else int(a) - int(b))
    assert row["reward_model"]["ground_truth"] == right
    full = {"score": 1.0, "acc": 1.0, "formatted": 1.0, "gym_score": 1.0}
    assert score(row, f"{a} {op} {b} = {right}. <answer>{right}</answer>") == full
    assert score(row, f"<answer>0</answer> no, <answer> {right} </answer>") == full  # the last tag, stripped
    wrong = str(int(right) + 1)
    assert score(row, f"<answer>{wrong}</answer>") == {
        "score": gym.FORMAT_CREDIT, "acc": 0.0, "formatted": 1.0, "gym_score": 0.0,
    }  # fmt: skip
    assert score(row, f"The answer is {right}.") == {
        "score": 0.0,
        "acc": 0.0,
        "formatted": 0.0,
        "gym_score": 0.0,
    }
    assert score(row, "<answer></answer>")["score"] == 0.0  # an empty tag earns no format credit
    # copying the worked example's answer earns no format credit either (the policy would learn to)
    copied = row["extra_info"]["example_answer"]
    assert copied is not None and copied != right
    assert score(row, f"<answer>{copied}</answer>") == {
        "score": 0.0,
        "acc": 0.0,
        "formatted": 1.0,
        "gym_score": 0.0,
    }


def test_basic_arithmetic_scores_hand_worked_answers():
    rows = gym.rows(
        "basic_arithmetic", "train", 0, size=10, min_terms=2, max_terms=2, max_digits=1, operators=["*"]
    )
    row = rows[0]
    entry = json.loads(row["extra_info"]["entry"])
    a, op, b = entry["metadata"]["expression"].split()
    assert op == "*" and row["reward_model"]["ground_truth"] == str(int(a) * int(b))
    assert score(row, f"<answer>{int(a) * int(b)}</answer>")["acc"] == 1.0
    assert score(row, f"<answer>{int(a) * int(b) + 1}</answer>") == {
        "score": gym.FORMAT_CREDIT, "acc": 0.0, "formatted": 1.0, "gym_score": 0.0,
    }  # fmt: skip
    assert score(row, str(int(a) * int(b)))["formatted"] == 0.0


def test_format_credit_is_a_task_argument():
    row = gym.rows("chain_sum", "train", 0, size=1, format_credit=0.0)[0]
    assert score(row, "<answer>not a number</answer>") == {
        "score": 0.0, "acc": 0.0, "formatted": 1.0, "gym_score": 0.0,
    }  # fmt: skip


def test_partial_credit_is_off_unless_asked_for():
    # reasoning-gym's default score_answer: an answer containing the right one scores
    # len(right) / len(answer): "12" against a gcd of "1" is 1 / 2 = 0.5
    rows = gym.rows("gcd", "train", 0, size=50)
    row = next(r for r in rows if r["reward_model"]["ground_truth"] == "1")
    assert score(row, "<answer>12</answer>") == {
        "score": gym.FORMAT_CREDIT,
        "acc": 0.0,
        "formatted": 1.0,
        "gym_score": 0.5,
    }  # fmt: skip: the dataset's 0.5 is reported, the reward is the format credit
    assert score(row, "<answer>1</answer>")["score"] == 1.0
    kept = next(
        r
        for r in gym.rows("gcd", "train", 0, size=50, partial_credit=True)
        if r["reward_model"]["ground_truth"] == "1"
    )
    assert score(kept, "<answer>12</answer>")["score"] == 0.5
    assert score(kept, "<answer>1234</answer>")["score"] == 0.25  # 1 / 4
    with pytest.raises(TaskArgError, match=r"'partial_credit' must be true or false, got 'yes'"):
        gym.rows("gcd", "train", 0, size=5, partial_credit="yes")


def test_data_sources_route_to_the_gym_scorer():
    table = registered(extra=scorers())
    assert table[gym.SOURCE_FAMILY] is gym.compute_score
    assert resolve("reasoning_gym/chain_sum", None, table) is gym.compute_score
    assert resolve("reasoning_gym/word_sorting", None, table) is gym.compute_score
    assert resolve("turnrl/addition", None, table) is addition.compute_score  # exact entries unchanged


def test_a_row_read_back_from_a_file_scores_the_same(tmp_path):
    files = write_task("reasoning_gym:chain_sum", tmp_path, 0, args={"size": 5, "val_size": 3})
    [row] = read_rows(files.val)[:1]
    answer = row["reward_model"]["ground_truth"]
    assert score(row, f"<answer>{answer}</answer>")["acc"] == 1.0


# --- bad input ----------------------------------------------------------------------------------------


def test_unknown_dataset_lists_the_valid_ones():
    with pytest.raises(
        gym.UnknownGymDataset, match=r"unknown reasoning-gym dataset 'chian_sum'; valid: .*chain_sum"
    ):
        get("reasoning_gym:chian_sum")
    with pytest.raises(UnknownTask, match=r", reasoning_gym:<dataset>, or harbor:<folder"):
        get("chess")


def test_unknown_and_rejected_arguments(tmp_path):
    with pytest.raises(
        TaskArgError,
        match=r"takes no argument 'sise'; its arguments: size, val_size, format_credit, partial_credit, worked_example, min_terms",
    ):
        write_task("reasoning_gym:chain_sum", tmp_path, 0, args={"sise": 3})
    with pytest.raises(
        TaskArgError, match=r"rejects its arguments \(min_terms=0\): min_terms must be positive"
    ):
        write_task("reasoning_gym:chain_sum", tmp_path, 0, args={"min_terms": 0})
    with pytest.raises(TaskArgError, match=r"'size' must be an integer >= 1, got 'ten'"):
        write_task("reasoning_gym:chain_sum", tmp_path, 0, args={"size": "ten"})
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_without_the_package_the_line_says_how_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # `import reasoning_gym` raises ImportError
    with pytest.raises(
        gym.GymNotInstalled, match=r'pip install -e "\.\[gym\]" \(or pip install reasoning-gym\)'
    ):
        get("reasoning_gym:chain_sum")


def test_the_config_accepts_a_gym_task_and_names_the_form():
    assert (
        load_config(None, ["data.task=reasoning_gym:basic_arithmetic"]).data.task
        == "reasoning_gym:basic_arithmetic"
    )
    from turnrl.trainer.setup import check_plugins  # where the run is assembled: the config knows no task

    with pytest.raises(
        ConfigError, match=r", reasoning_gym:<dataset> \(e\.g\. reasoning_gym:chain_sum\), or harbor:<folder"
    ):
        check_plugins(load_config(None, ["data.task=chess"]))


# --- turnrl data task --------------------------------------------------------------------------------


def test_data_task_writes_a_gym_task_with_its_arguments(tmp_path, capsys):
    out = tmp_path / "cs"
    assert main(["data", "task", "reasoning_gym:chain_sum", "--out", str(out), "--arg", "size=20"]) == 0
    train, val = read_rows(out / "train.jsonl"), read_rows(out / "val.jsonl")
    assert len(train) == 20 and len(val) == gym.VAL_SIZE
    assert train == gym.rows("chain_sum", "train", 0, size=20)
    printed = capsys.readouterr().out
    assert "reasoning_gym:chain_sum" in printed and "size=20" in printed and "train.jsonl: 20 rows" in printed


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["reasoning_gym:nope"], "unknown reasoning-gym dataset 'nope'; valid: "),
        (["reasoning_gym:chain_sum", "--arg", "size"], "--arg 'size' is not of the form KEY=VALUE"),
        (["reasoning_gym:chain_sum", "--arg", "sise=3"], "takes no argument 'sise'"),
        (["reasoning_gym:chain_sum", "--arg", "max_digits=0"], "rejects its arguments (max_digits=0): "),
        (["addition", "--arg", "size=3"], "task 'addition' takes no argument 'size'; its arguments: n_train"),
    ],
)
def test_data_task_bad_arguments_are_one_line(tmp_path, capsys, argv, expected):
    out = tmp_path / "o"
    assert main(["data", "task", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not out.exists()


def test_arg_is_only_for_data_task(tmp_path, capsys):
    assert main(["data", "gsm8k", "--input", "x.jsonl", "--arg", "size=3", "--out", str(tmp_path / "o")]) == 2
    assert "gsm8k: --arg is only for turnrl data task NAME" in capsys.readouterr().err
