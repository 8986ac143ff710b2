import numpy as np
import pytest

from turnrl.rewards import code, math, qa
from turnrl.rewards.registry import registered, resolve
from turnrl.rewards.scorer import RuleReward
from turnrl.tasks import calculator, scorers, search


def test_normalisation_follows_search_r1():
    assert qa.normalize_answer("  The  Eiffel-Tower!  ") == "eiffeltower"
    assert qa.normalize_answer("An Apple a day") == "apple day"


def test_em_subem_f1():
    answers = ["Roupoba River", "Roupoba"]
    assert qa.em_check("the roupoba river.", answers) == 1.0
    assert qa.em_check("Roupoba River delta", answers) == 0.0
    assert qa.subem_check("Roupoba River delta", answers) == 1.0
    # "roupoba river delta" vs "roupoba river": common 2, P = 2/3, R = 1, F1 = 0.8
    assert qa.f1_score("Roupoba River delta", ["Roupoba River"]) == pytest.approx(0.8)
    assert qa.f1_score("nothing", answers) == 0.0


def test_qa_scores_only_the_last_answer_of_the_response():
    truth = {"target": ["Jisok"]}
    assert qa.compute_score("nq", "<search>x</search> <answer>Jisok</answer>", truth)["score"] == 1.0
    # the prompt's example (<answer> Paris </answer>) is never part of solution_str; within the response the
    # last tag decides, so an early wrong guess followed by the right answer counts as right
    assert qa.compute_score("nq", "<answer>Paris</answer> ... <answer>Jisok</answer>", truth)["score"] == 1.0
    assert qa.compute_score("nq", "<answer>Jisok</answer> <answer>Paris</answer>", truth)["score"] == 0.0
    assert qa.compute_score("nq", "Jisok", truth) == {
        "score": 0.0,
        "em": 0.0,
        "subem": 0.0,
        "f1": 0.0,
        "formatted": 0.0,
    }


def test_qa_ground_truth_forms_metric_and_format_score():
    for truth in ({"target": np.array(["1802"])}, ["1802", "eighteen oh two"], "1802"):
        assert qa.compute_score("hotpotqa", "<answer> 1802 </answer>", truth)["score"] == 1.0
    r = qa.compute_score("turnrl/search", "<answer>in 1802 AD</answer>", "1802", {"qa_metric": "subem"})
    assert r["score"] == 1.0 and r["em"] == 0.0
    r = qa.compute_score("turnrl/search", "<answer>1803</answer>", "1802", {"format_score": 0.2})
    assert r["score"] == 0.2 and r["formatted"] == 1.0
    with pytest.raises(ValueError, match="qa_metric"):
        qa.compute_score("nq", "<answer>x</answer>", "x", {"qa_metric": "bleu"})
    with pytest.raises(ValueError, match="'target'"):
        qa.targets({"answers": ["x"]})
    assert resolve("nq") is qa.compute_score
    assert resolve("turnrl/search/2hop", None, registered(extra=scorers())) is search.compute_score


def test_math_verify_equivalence():
    assert (
        math.compute_score("lighteval/MATH", "so the answer is <answer>0.5</answer>", "\\frac{1}{2}")["score"]
        == 1.0
    )
    assert math.compute_score("math", "We get $\\boxed{\\frac{2}{4}}$.", "\\frac{1}{2}")["score"] == 1.0
    assert math.compute_score("math", "<answer>3</answer>", "\\frac{1}{2}")["score"] == 0.0
    assert math.compute_score("math", "no idea", "7")["score"] == 0.0


def test_calculator_score():
    s = calculator.compute_score
    full = "<calculator>12*34</calculator>\n<result>408</result><answer>408</answer>"
    assert s("turnrl/calculator", full, "408") == {
        "score": 1.0, "acc": 1.0, "formatted": 1.0, "called_tool": 1.0, "tool_right": 1.0,
    }  # fmt: skip
    assert s("turnrl/calculator", "<answer>1,234</answer>", "1234")["score"] == 1.0
    # the right tool call without the answer ranks between the answer and a wrong tagged number
    assert (
        s("turnrl/calculator", "<calculator>12*34</calculator><result>408</result> hmm", "408")["score"]
        == 0.5
    )
    assert (
        s("turnrl/calculator", "<result>409</result><answer>407</answer>", "408")["score"]
        == calculator.FORMAT_SCORE
    )
    assert s("turnrl/calculator", "408", "408")["score"] == 0.0  # untagged: the task asks for the tag
    assert resolve("turnrl/calculator", None, registered(extra=scorers())) is s


def test_code_program_extraction_and_tests():
    fenced = "<code>print(1)</code><observation>1</observation><answer>\n```python\nprint(input()[::-1])\n```\n</answer>"
    assert code.extract_program(fenced) == "print(input()[::-1])\n"
    assert code.extract_program("```python\nx=1\n```\nthen\n```py\ny=2\n```") == "y=2\n"
    assert code.extract_program("<answer>print(2)</answer>") == "print(2)"
    assert code.extract_program("no code here") is None
    assert code.parse_tests('{"inputs": ["1\\n"], "outputs": ["2\\n"]}') == {
        "inputs": ["1\n"],
        "outputs": ["2\n"],
    }
    assert code.parse_tests({"assert": "assert f(1) == 2"}) == {"assert": "assert f(1) == 2"}
    with pytest.raises(ValueError, match="equal length"):
        code.parse_tests({"inputs": ["1"], "outputs": []})
    assert code.same_output("1 \n2\n\n", "1\n2")
    assert not code.same_output("1\n3", "1\n2")
    assert code.compute_score("turnrl/code", "nothing", {"inputs": [], "outputs": []})["score"] == 0.0


class FakeSandbox:
    """Stands in for `code._run_tests`: records the sandbox URL and key and passes every test."""

    def __init__(self):
        self.urls: list[str] = []
        self.keys: list[str | None] = []

    async def __call__(self, url, program, tests, run_timeout, api_key=None):
        self.urls.append(url)
        self.keys.append(api_key)
        return [code.CaseRun(True, True)] * len(tests.get("inputs", [None]))


PROGRAM = "<answer>\n```python\nprint(input())\n```\n</answer>"
TESTS = {"inputs": ["1\n"], "outputs": ["1\n"]}


def test_code_scorer_takes_the_sandbox_url_as_an_argument(monkeypatch):
    fake = FakeSandbox()
    monkeypatch.setattr(code, "_run_tests", fake)
    # never start a real one
    monkeypatch.setattr(code, "_child_sandbox", lambda: ("http://child", "child-key"))
    monkeypatch.setenv("TURNRL_SANDBOX_URL", "http://from-env")
    given = code.compute_score("turnrl/code", PROGRAM, TESTS, sandbox_url="http://given", sandbox_api_key="k")
    assert given["score"] == 1.0
    code.compute_score("turnrl/code", PROGRAM, TESTS)  # no URL: the environment's
    monkeypatch.delenv("TURNRL_SANDBOX_URL")
    code.compute_score("turnrl/code", PROGRAM, TESTS)  # nor that: turnrl's child sandbox, with its key
    assert fake.urls == ["http://given", "http://from-env", "http://child"]
    assert fake.keys == ["k", None, "child-key"]  # None: the client sends $TURNRL_API_KEY


def test_rule_reward_binds_its_sandbox_into_the_code_scorers(monkeypatch):
    fake = FakeSandbox()
    monkeypatch.setattr(code, "_run_tests", fake)
    monkeypatch.delenv("TURNRL_SANDBOX_URL", raising=False)
    monkeypatch.setattr(code, "_child_sandbox", lambda: ("http://child", "child-key"))
    bound = RuleReward(
        None, sandbox_url="http://run-sandbox", sandbox_api_key="run-key", scorers=scorers()
    ).table
    unbound = RuleReward(None, scorers=scorers()).table
    # (the code task's own scorer is bound too; tests/integration/test_code_task.py checks it for real)
    sources = code.CODE_SOURCES
    for source in sources:
        # verl's signature, extra_info untouched: the URL is bound, not smuggled in the row
        bound[source](source, PROGRAM, TESTS, {"run_timeout": 2.0})
        unbound[source](source, PROGRAM, TESTS, None)
    assert fake.urls == ["http://run-sandbox", "http://child"] * len(sources)
    assert fake.keys == ["run-key", "child-key"] * len(sources)
    assert resolve("apps", table=bound) is bound["apps"] and bound["nq"] is qa.compute_score
