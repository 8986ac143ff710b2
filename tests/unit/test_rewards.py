import subprocess
import sys

import pytest
import torch

from turnrl.batch import Batch
from turnrl.rewards.registry import RewardError, load_custom, registered, resolve, split_score
from turnrl.rewards.scorer import RuleReward, last_token_index
from turnrl.tasks import scorers
from turnrl.tasks import search as search_task
from turnrl.tasks.addition import compute_score, extract_answer


def test_addition_scorer():
    assert extract_answer("x <answer>3</answer> y <answer> 7 </answer>") == "7"  # the last tag counts
    assert compute_score("turnrl/addition", "<answer>12</answer>", "12")["score"] == 1.0
    assert compute_score("turnrl/addition", "1 + 11 = 12", "12")["score"] == 0.0  # right, but not in the tag
    assert compute_score("turnrl/addition", "<answer>11</answer>", "12")["score"] == 0.1  # format only
    assert compute_score("turnrl/addition", "<answer>NUMBER</answer>", "12")["score"] == 0.0  # not an integer
    assert compute_score("turnrl/addition", "the answer is 13", "12")["score"] == 0.0
    assert compute_score("turnrl/addition", "<answer>12</answer>", "12")["acc"] == 1.0
    # copying the prompt's example earns nothing; any other wrong integer earns the format credit
    assert compute_score("turnrl/addition", "<answer>7</answer>", "12", {"example": 7})["score"] == 0.0
    assert compute_score("turnrl/addition", "<answer>8</answer>", "12", {"example": 7})["score"] == 0.1
    assert compute_score("turnrl/addition", "<answer>12</answer>", "12", {"example": 7})["score"] == 1.0


def test_registry_routes_by_data_source_and_names_unknown():
    assert resolve("turnrl/addition", None, registered(extra=scorers())) is compute_score
    with pytest.raises(RewardError, match="no reward function for data_source 'gsm9k'"):
        resolve("gsm9k")


def test_custom_function_loaded_from_file(tmp_path):
    f = tmp_path / "my_reward.py"
    f.write_text(
        "def my_score(data_source, solution_str, ground_truth, extra_info=None):\n    return len(solution_str)\n"
    )
    fn = load_custom(str(f), "my_score")
    assert fn("x", "abcd", None) == 4
    with pytest.raises(RewardError, match="defines no 'nope'"):
        load_custom(str(f), "nope")
    with pytest.raises(RewardError, match="file not found"):
        load_custom(str(tmp_path / "missing.py"), "f")
    (tmp_path / "broken.py").write_text("import not_a_module_anywhere\n")
    with pytest.raises(RewardError, match=r"importing .*broken\.py failed"):
        load_custom(str(tmp_path / "broken.py"), "f")


def test_split_score_dicts_and_numbers():
    assert split_score(0.5, "f") == (0.5, {})
    assert split_score({"score": 1, "acc": True, "note": "x"}, "f") == (1.0, {"acc": 1.0})
    with pytest.raises(RewardError, match="without 'score'"):
        split_score({"acc": 1}, "f")


def test_last_token_index_skips_trailing_padding_and_observations():
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]], dtype=torch.float32)
    # row 1: an observation sits at columns 1-2; the last model token is column 3
    assert last_token_index(mask).tolist() == [1, 3, 0]


class SpaceTokenizer:
    vocab = ("<pad>", "<answer>", "</answer>", "1", "2", "obs")

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.vocab[i] for i in ids if i != 0)


def test_scores_land_on_last_model_token():
    # responses: "<answer>1</answer>" (correct), "<answer>2</answer>" + padding (wrong, formatted)
    responses = torch.tensor([[1, 3, 2, 0], [1, 4, 2, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.float32)
    batch = Batch(
        tensors={
            "responses": responses,
            "response_mask": mask,
            "attention_mask": torch.cat([torch.ones(2, 2, dtype=torch.long), mask.long()], dim=1),
        },
        non_tensors={
            "data_source": ["turnrl/addition"] * 2,
            "ground_truth": ["1", "1"],
            "extra_info": [{}, {}],
        },
    )
    scores, extras = RuleReward(SpaceTokenizer(), scorers=scorers())(batch)
    assert scores.tolist() == [[0, 0, 1.0, 0], [0, 0, pytest.approx(0.1), 0]]
    assert extras["acc"] == [1.0, 0.0]


def test_builtin_table_keeps_every_data_source():
    from turnrl.rewards import code, math, qa
    from turnrl.tasks import code as code_task

    public = [
        *("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500", "math"),
        "openai/gsm8k",
        *("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle"),
        *("codecontests", "apps", "taco", "codeforces"),
    ]
    assert sorted(registered()) == sorted(public)  # the reward layer knows no built-in task
    table = registered(extra=scorers())  # a run adds the built-in tasks' sources
    search = ["turnrl/search/1hop", "turnrl/search/2hop", "turnrl/search/compare", "turnrl/search/2hop_demo"]
    code_sources = ["turnrl/code", "turnrl/code/new_problem", "turnrl/code/new_family"]
    harbor = [
        "turnrl/harbor",
        "turnrl/harbor/new_task",
        "turnrl/harbor/new_family",
    ]  # scored in their sessions
    tasks = ["turnrl/addition", "turnrl/calculator", *search, *code_sources, *harbor, "reasoning_gym/*"]
    assert sorted(table) == sorted(public + tasks)
    assert table["lighteval/MATH"] is math.compute_score and table["nq"] is qa.compute_score
    assert all(table[s] is search_task.compute_score for s in search)  # exact match + format credit
    assert table["apps"] is code.compute_score  # no URL given: the code scorer picks its own sandbox
    # the code task's partial-credit scorer, for training rows and both held-out sorts
    assert all(table[s] is code_task.compute_score for s in code_sources)
    table["turnrl/addition"] = None
    assert registered(extra=scorers())["turnrl/addition"] is compute_score  # a copy: callers cannot change it


def test_scorer_modules_do_not_import_the_registry():
    # the table imports the scorers, never the other way round
    probe = (
        "import sys\n"
        "import turnrl.rewards.code, turnrl.rewards.gsm8k, turnrl.rewards.math, turnrl.rewards.qa\n"
        "assert 'turnrl.rewards.registry' not in sys.modules, 'a scorer imported the registry'\n"
        "assert 'math_verify' not in sys.modules, 'math-verify is imported on first use only'\n"
        "import turnrl.rewards.scorer\n"
        "assert 'turnrl.tasks' not in sys.modules, 'the reward layer imported the tasks above it'\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_missing_ok_scores_unknown_sources_zero():
    batch = Batch(
        tensors={
            "responses": torch.tensor([[1, 3, 2]]),
            "response_mask": torch.ones(1, 3),
            "attention_mask": torch.ones(1, 5, dtype=torch.long),
        },
        non_tensors={"data_source": ["rm-only"], "ground_truth": ["1"], "extra_info": [{}]},
    )
    reward = RuleReward(SpaceTokenizer(), missing_ok=True)
    reward.check({"rm-only"})  # a reward model covers it
    assert reward(batch)[0].sum().item() == 0.0
    with pytest.raises(RewardError, match="no reward function for data_source 'rm-only'"):
        RuleReward(SpaceTokenizer()).check({"rm-only"})


@pytest.mark.parametrize(
    ("response", "score"),
    [
        ("She pays 3 * 24 = 72 dollars.\n#### 72", 1.0),
        ("#### 1,072", 0.0),  # 1072 != 72
        ("The answer is 72.", 0.0),  # no "####": no answer, as verl's strict rule
        ("#### 70\nwait, 3 * 24 = 72\n#### 72", 1.0),  # the last one counts
        ("#### 72\n" + "x" * 400, 0.0),  # only the last 300 characters are searched
        ("#### $72", 0.0),  # the rule wants digits right after "#### "
    ],
)
def test_gsm8k_is_scored_by_the_number_after_the_last_hashes(response, score):
    from turnrl.rewards.registry import registered

    result = registered()["openai/gsm8k"]("openai/gsm8k", response, "72")
    assert result["score"] == score
