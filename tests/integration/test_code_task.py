"""The code task against turnrl's real sandbox: every problem's reference program passes every test
of its rows, the partial-credit reward graded by hand, the run's sandbox bound into the task's
scorer, and `turnrl data code_sft` demonstrations that really run and pass."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pytest

from turnrl.cli import main
from turnrl.config.supervised_schema import SFTDataConfig
from turnrl.models.loader import load_tokenizer
from turnrl.rewards.registry import registered
from turnrl.servers.sandbox.process import SandboxProcess
from turnrl.supervised.sft_data import load_conversations
from turnrl.tasks import code, scorers
from turnrl.tasks.code import demos
from turnrl.tasks.code.problems import PROBLEMS, TRAIN_FAMILIES


@pytest.fixture(scope="module")
def sandbox_process() -> Iterator[SandboxProcess]:
    with SandboxProcess(workers=4, queue=64) as proc:
        yield proc


@pytest.fixture(scope="module")
def sandbox(sandbox_process: SandboxProcess) -> Iterator[dict[str, str]]:
    """The keywords that send a scorer's programs to the test's sandbox, with its key."""
    yield {"sandbox_url": str(sandbox_process.url), "sandbox_api_key": sandbox_process.api_key}


def answer(program: str) -> str:
    return f"<answer>\n```python\n{program}```\n</answer>"


@pytest.mark.slow
def test_every_reference_program_passes_all_its_tests(sandbox):
    rng = random.Random(0)
    failed = {}
    for problem in PROBLEMS:
        row = code.make_row(problem, rng, "train", 0)
        truth = row["reward_model"]["ground_truth"]
        got = code.compute_score(code.DATA_SOURCE, answer(problem.solution), truth, **sandbox)
        if got != {"score": 1.0, "acc": 1.0, "formatted": 1.0, "pass_rate": 1.0, "ran": 1.0}:
            failed[problem.name] = got
    assert failed == {}


def test_partial_credit_graded_by_hand(sandbox):
    # 10 tests of "print 2n": the program is right on n <= 3 only
    truth = {"inputs": [f"{n}\n" for n in range(1, 11)], "outputs": [f"{2 * n}\n" for n in range(1, 11)]}
    three = "n = int(input())\nprint(2 * n if n <= 3 else n)\n"
    got = code.compute_score(code.DATA_SOURCE, answer(three), truth, **sandbox)
    assert got["score"] == pytest.approx(0.1 + 0.9 * 0.3) and got["acc"] == pytest.approx(0.3)
    constant = code.compute_score(code.DATA_SOURCE, answer("print(4)\n"), truth, **sandbox)
    assert constant["score"] == pytest.approx(0.1 + 0.9 * 0.1) and constant["ran"] == 1.0
    crash = code.compute_score(code.DATA_SOURCE, answer("raise SystemExit(3)\n"), truth, **sandbox)
    assert crash == {"score": 0.0, "acc": 0.0, "formatted": 1.0, "pass_rate": 0.0, "ran": 0.0}


def test_the_run_sandbox_is_bound_into_the_task_scorer(sandbox):
    # what RuleReward(sandbox_url=..., sandbox_api_key=...) holds
    bound = registered(sandbox["sandbox_url"], scorers(), sandbox["sandbox_api_key"])["turnrl/code"]
    assert bound.func is code.compute_score and bound.keywords == sandbox
    row = code.rows("val", 0)[0]
    solution = {p.name: p.solution for p in PROBLEMS}[row["extra_info"]["problem"]]
    truth = row["reward_model"]["ground_truth"]
    assert bound(code.DATA_SOURCE, answer(solution), truth, row["extra_info"])["score"] == 1.0


def test_code_sft_writes_episodes_that_run_and_pass(tmp_path, capsys, sandbox):
    out = tmp_path / "demos"
    assert main(["data", "code_sft", "--out", str(out), "--n", "30", "--seed", "3"]) == 0
    assert [p.name for p in out.iterdir()] == ["train.jsonl"]
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 30 and "code_sft: 30 demonstrations" in capsys.readouterr().out
    task_rows = code.rows("train", 3)[:30]
    solutions = {p.name: p.solution for p in PROBLEMS}
    for row, task_row in zip(rows, task_rows, strict=True):
        assert {k: v for k, v in row.items() if k != "episode"} == task_row  # the RL prompt and tests
        assert row["extra_info"]["family"] in TRAIN_FAMILIES
        probe, observation, final = row["episode"]
        assert probe["content"].startswith("<code>\nimport io, sys\nsys.stdin = io.StringIO(")
        shown = row["prompt"][0]["content"].rsplit("Example output:\n", 1)[1].strip()
        assert observation == {"role": "observation", "tag": "observation", "content": shown}
        assert final["content"] == answer(solutions[row["extra_info"]["problem"]])
    # the final answers score 1 with the task's reward in the real sandbox
    for row in rows[:5]:
        truth = row["reward_model"]["ground_truth"]
        assert code.compute_score(code.DATA_SOURCE, row["episode"][-1]["content"], truth, **sandbox)[
            "score"
        ] == pytest.approx(1.0)
    # and `turnrl sft` reads them as episodes: the model turns trained, the observation not
    tok = load_tokenizer("tiny-random")
    path = str(out / "train.jsonl")
    examples = load_conversations([path], tok, SFTDataConfig(train_files=[path]), {tok.eos_token_id})
    assert len(examples) == 30
    for example, row in zip(examples, rows, strict=True):
        trained = tok.decode([i for i, m in zip(example.ids, example.mask, strict=True) if m])
        assert trained == row["episode"][0]["content"] + row["episode"][2]["content"]


def test_code_sft_demonstrates_only_the_problems_named(tmp_path, capsys):
    # training rows take the 19 training problems in turn, so list_sum is row 0, 19, 38, ... and
    # reverse row 4, 23, 42, ...: 5 demonstrations of the two are rows 0, 4, 19, 23, 38
    out = tmp_path / "demos"
    only = ["--problems", "list_sum, reverse"]
    assert main(["data", "code_sft", "--out", str(out), "--n", "5", "--seed", "2", *only]) == 0
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    task_rows = code.rows("train", 2, n_train=39)
    assert [r["extra_info"]["index"] for r in rows] == [0, 4, 19, 23, 38]
    for row in rows:  # the RL run's own rows, at the same indices
        assert {k: v for k, v in row.items() if k != "episode"} == task_rows[row["extra_info"]["index"]]
    assert "2 problems of the training families (list_sum, reverse)" in capsys.readouterr().out


def test_code_sft_repair_demonstrations_try_a_sibling_first(tmp_path, capsys):
    out = tmp_path / "demos"
    named = ("list_sum", "list_max", "reverse", "upper")
    argv = ["--n", "10", "--seed", "2", "--problems", ",".join(named), "--retry-fraction", "0.5"]
    assert main(["data", "code_sft", "--out", str(out), *argv]) == 0
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    by_name = {p.name: p for p in PROBLEMS}
    repairs = [r for r in rows if len(r["episode"]) == 5]
    # 5 of the 10 rows are drawn; on one of them the sibling's program prints the right output too
    # (as `repair` returns None for below), so 4 show a mistake and the rest are plain demonstrations
    assert len(repairs) == 4 and all(len(r["episode"]) == 3 for r in rows if r not in repairs)
    assert "4 first run another problem's program of the family" in capsys.readouterr().out
    for row in repairs:
        problem = by_name[row["extra_info"]["problem"]]
        wrong, seen, fix, observation, final = row["episode"]
        expected = row["prompt"][0]["content"].rsplit("Example output:\n", 1)[1].strip()
        # the first program is a named sibling's (same family, never a problem left to RL), and wrong here
        (other,) = [by_name[n] for n in named if wrong["content"].endswith(by_name[n].solution + "</code>")]
        assert other.family == problem.family and other.name != problem.name
        assert seen["role"] == "observation" and seen["content"] != expected
        assert fix["content"].startswith(
            f"That is not {expected}, so this program solves another problem.\n<code>"
        )
        assert fix["content"].endswith(problem.solution + "</code>")
        assert observation["content"] == expected and final["content"] == answer(problem.solution)
    # SFT trains the three model turns of a repair and neither observation
    tok = load_tokenizer("tiny-random")
    path = str(out / "train.jsonl")
    examples = load_conversations([path], tok, SFTDataConfig(train_files=[path]), {tok.eos_token_id})
    for example, row in zip(examples, rows, strict=True):
        trained = tok.decode([i for i, m in zip(example.ids, example.mask, strict=True) if m])
        assert trained == "".join(turn["content"] for turn in row["episode"][::2])


def test_a_sibling_that_happens_to_be_right_makes_no_repair():
    by_name = {p.name: p for p in PROBLEMS}
    # on the one-number list "7" the largest is the sum: list_max's program is not a mistake there
    assert demos.repair(by_name["list_max"].solution, by_name["list_sum"].solution, "7", "7") is None
    # on "3 4" it prints 4, not 7: the repair shows it, then the right program's run
    steps = demos.repair(by_name["list_max"].solution, by_name["list_sum"].solution, "3 4", "7")
    assert [t["content"] for t in steps[1::2]] == ["4", "7"]


def test_demo_problems_parses_and_refuses():
    assert code.demo_problems(None) is None
    assert code.demo_problems(" list_sum,reverse,list_sum ") == ("list_sum", "reverse")
    for names, why in [("lcm", "'lcm' is a validation problem"), ("sum", "'sum' is not a training problem"),
                       (" , ", "no problem named")]:  # fmt: skip
        with pytest.raises(ValueError, match=why):
            code.demo_problems(names)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--topk", "2"], "--topk: only for search_sft"),
        (["--n", "0"], "--n must be a positive integer, got 0"),
        (["--n", "100000000000"], "--n must be at most 5,000, got 100000000000"),  # ran for days before
        (["--input", "x.jsonl"], "code_sft generates its rows from the built-in task"),
        (["--problems", "list_sum,count_positive"], "code_sft: --problems: 'count_positive' is a validation"),
        (["--retry-fraction", "1.5"], "--retry-fraction must be in [0, 1], got 1.5"),
    ],
)
def test_code_sft_errors_are_one_line(tmp_path, capsys, argv, expected):
    out = tmp_path / "o"
    assert main(["data", "code_sft", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not out.exists()


def test_problems_is_code_sft_only(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["data", "search_sft", "--problems", "list_sum", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--problems: only for code_sft" in err[0], err
    assert not out.exists()
