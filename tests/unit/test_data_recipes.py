"""`turnrl data gsm8k|math|nq_hotpotqa`: hand-written rows in the datasets' own formats, converted
through the CLI, read back and compared field for field with the rows verl's / Search-R1's
preprocessing scripts write for them; then loaded by `turnrl.data` and scored by the registry."""

import pytest

from tests.support.data_rows import CharTokenizer, read, run, user, write_json, write_jsonl, write_parquet
from turnrl.data.dataset import load_examples
from turnrl.rewards import registry

GSM8K_TAIL = ' Let\'s think step by step and output the final answer after "####".'
MATH_TAIL = " Let's think step by step and output the final answer within \\boxed{}."
SEARCH_PROMPT = (  # Search-R1's "base" template, typed out once more by hand
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time "
    "you get new information. After reasoning, if you find you lack some knowledge, you can call a search "
    "engine by <search> query </search> and it will return the top searched results between <information> "
    "and </information>. You can search as many times as your want. If you find no further external "
    "knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed "
    "illustrations. For example, <answer> Beijing </answer>. Question: "
)


# ---------------------------------------------------------------- GSM8K


def test_gsm8k_rows_match_verl(tmp_path, capsys):
    train = write_jsonl(
        tmp_path / "gsm8k" / "train.jsonl",
        [
            {"question": "Ann has 3 apples.", "answer": "3*2=<<3*2=6>>6\n#### 6"},
            {"question": "How many?", "answer": "no marker here"},  # skipped, but keeps its index 1
            {"question": "Big?", "answer": "1000+250=1250\n#### 1,250"},  # commas removed
        ],
    )
    test = write_parquet(tmp_path / "gsm8k" / "test.parquet", [{"question": "Neg?", "answer": "#### -4"}])
    out = tmp_path / "out"
    assert run("gsm8k", "--input", train, "--input", test, "--out", out) == 0
    printed = capsys.readouterr()
    assert "read 4 rows, skipped 1" in printed.out
    assert f"{train}:2: answer has no '#### <number>'" in printed.err

    assert read(out / "train.parquet") == [
        {
            "data_source": "openai/gsm8k",
            "prompt": user("Ann has 3 apples." + GSM8K_TAIL),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "6"},
            "extra_info": {
                "split": "train",
                "index": 0,
                "answer": "3*2=<<3*2=6>>6\n#### 6",
                "question": "Ann has 3 apples.",
            },
        },
        {
            "data_source": "openai/gsm8k",
            "prompt": user("Big?" + GSM8K_TAIL),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "1250"},
            "extra_info": {
                "split": "train",
                "index": 2,
                "answer": "1000+250=1250\n#### 1,250",
                "question": "Big?",
            },
        },
    ]
    assert read(out / "test.parquet") == [
        {
            "data_source": "openai/gsm8k",
            "prompt": user("Neg?" + GSM8K_TAIL),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "-4"},
            "extra_info": {"split": "test", "index": 0, "answer": "#### -4", "question": "Neg?"},
        }
    ]
    # turnrl's own loader reads the output
    ex = load_examples([str(out / "train.parquet")], CharTokenizer(), 10_000)
    assert [(e.data_source, e.ground_truth, e.index) for e in ex] == [
        ("openai/gsm8k", "6", 0),
        ("openai/gsm8k", "1250", 2),
    ]
    assert ex[0].raw_prompt == user("Ann has 3 apples." + GSM8K_TAIL)


# ---------------------------------------------------------------- MATH


def test_math_rows_match_verl(tmp_path, capsys):
    train = write_json(
        tmp_path / "math" / "train.json",  # a .json list, as the lighteval export
        [
            {
                "problem": "Compute $1/2$.",
                "level": "Level 1",
                "type": "Prealgebra",
                "solution": "It is $\\boxed{\\frac{1}{2}}$.",  # nested braces kept whole
            },
            {"problem": "P2", "level": "Level 2", "type": "Algebra", "solution": "no box at all"},
            {
                "problem": "P3",
                "level": "Level 3",
                "type": "Algebra",
                "solution": "First \\boxed{1}, finally \\boxed{x^{2}}.",  # the last box wins
            },
        ],
    )
    # hendrycks' original layout: one problem per .json file under <split>/<subject>/
    test = write_json(
        tmp_path / "MATH" / "test" / "algebra" / "1.json",
        {"problem": "P4", "level": "Level 5", "type": "Algebra", "solution": "So $\\boxed 7$."},
    )
    out = tmp_path / "out"
    assert run("math", "--input", train, "--input", test, "--out", out) == 0
    printed = capsys.readouterr()
    assert "read 4 rows, skipped 1" in printed.out
    assert f"{train} row 1: solution has no \\boxed{{}}" in printed.err

    source = "DigitalLearningGmbH/MATH-lighteval"
    # level and type stay as columns: verl's script pops only problem and solution
    assert read(out / "train.parquet") == [
        {
            "level": "Level 1",
            "type": "Prealgebra",
            "data_source": source,
            "prompt": user("Compute $1/2$." + MATH_TAIL),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "\\frac{1}{2}"},
            "extra_info": {"split": "train", "index": 0},
        },
        {
            "level": "Level 3",
            "type": "Algebra",
            "data_source": source,
            "prompt": user("P3" + MATH_TAIL),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "x^{2}"},
            "extra_info": {"split": "train", "index": 2},
        },
    ]
    assert read(out / "test.parquet") == [
        {
            "level": "Level 5",
            "type": "Algebra",
            "data_source": source,
            "prompt": user("P4" + MATH_TAIL),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "7"},  # "\boxed 7$": up to the '$'
            "extra_info": {"split": "test", "index": 0},
        }
    ]
    ex = load_examples([str(out / "test.parquet")], CharTokenizer(), 10_000)
    assert (ex[0].data_source, ex[0].ground_truth, ex[0].extra_info) == (
        source,
        "7",
        {"split": "test", "index": 0},
    )


# ---------------------------------------------------------------- nq + hotpotqa (FlashRAG)


def search_row(id_, question, answers, source, split, index, **extra):
    return {
        "id": id_,
        "question": question,
        "golden_answers": answers,
        **extra,
        "data_source": source,
        "prompt": user(SEARCH_PROMPT + question + "\n"),
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
        "extra_info": {"split": split, "index": index},
    }


def test_nq_hotpotqa_rows_match_search_r1(tmp_path, capsys):
    flashrag = tmp_path / "flashrag"
    nq_train = write_jsonl(
        flashrag / "nq" / "train.jsonl",
        [
            {"id": "train_0", "question": "  who wrote the iliad ", "golden_answers": ["Homer"]},
            {"id": "train_1", "question": "capital of france?", "golden_answers": ["Paris", "paris"]},
        ],
    )
    hp_train = write_parquet(
        flashrag / "hotpotqa" / "train.parquet",
        [{"id": "5a7a", "question": "Which came first", "golden_answers": ["the egg"]}],
    )
    nq_test = write_jsonl(
        flashrag / "nq" / "test.jsonl",
        [{"id": "test_0", "question": "who is x", "golden_answers": ["Y"]}],
    )
    hp_dev = write_jsonl(  # hotpotqa has no test split: Search-R1 evaluates on dev, labelled test
        flashrag / "hotpotqa" / "dev.jsonl",
        [{"id": "5ab3", "question": "Is z?", "golden_answers": ["yes"], "metadata": {"type": "comparison"}}],
    )
    out = tmp_path / "out"
    args = ["--input", nq_train, "--input", hp_train, "--input", nq_test, "--input", hp_dev]
    assert run("nq_hotpotqa", *args, "--out", out) == 0
    assert "train.parquet: 3 rows (nq 2, hotpotqa 1)" in capsys.readouterr().out

    # question stripped and closed with '?', also in the kept `question` column; index restarts per set
    assert read(out / "train.parquet") == [
        search_row("train_0", "who wrote the iliad?", ["Homer"], "nq", "train", 0),
        search_row("train_1", "capital of france?", ["Paris", "paris"], "nq", "train", 1),
        search_row("5a7a", "Which came first?", ["the egg"], "hotpotqa", "train", 0),
    ]
    # a column only some rows have (hotpotqa's metadata) reads back as null in the others
    assert read(out / "test.parquet") == [
        search_row("test_0", "who is x?", ["Y"], "nq", "test", 0, metadata=None),
        search_row("5ab3", "Is z?", ["yes"], "hotpotqa", "test", 0, metadata={"type": "comparison"}),
    ]
    ex = load_examples([str(out / "train.parquet")], CharTokenizer(), 10_000)
    assert [(e.data_source, e.ground_truth) for e in ex] == [
        ("nq", {"target": ["Homer"]}),
        ("nq", {"target": ["Paris", "paris"]}),
        ("hotpotqa", {"target": ["the egg"]}),
    ]


# ---------------------------------------------------------------- the registry scores every data_source

SCORED = [
    # (converter, --data-source, source row, a right response, a wrong one)
    ("gsm8k", "openai/gsm8k", {"question": "q", "answer": "#### 1,250"}, "So 1250.\n#### 1250", "#### 1205"),
    *(
        (
            "math",
            name,
            {"problem": "p", "solution": "$\\boxed{\\frac{1}{2}}$", "level": "Level 1", "type": "Algebra"},
            "The answer is $\\boxed{0.5}$.",  # equal by value: math-verify
            "The answer is $\\boxed{\\frac{1}{3}}$.",
        )
        for name in ("DigitalLearningGmbH/MATH-lighteval", "lighteval/MATH")
    ),
    *(
        (
            "nq_hotpotqa",
            name,
            {"id": "0", "question": "q", "golden_answers": ["The Beatles", "Beatles"]},
            "<think>...</think> <answer> the beatles </answer>",
            "<answer> The Rolling Stones </answer>",
        )
        for name in ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
    ),
]


@pytest.mark.parametrize(("recipe", "source", "row", "right", "wrong"), SCORED, ids=[s[1] for s in SCORED])
def test_registry_scores_converted_rows(tmp_path, recipe, source, row, right, wrong):
    src = write_jsonl(tmp_path / "in" / "train.jsonl", [row])
    out = tmp_path / "out"
    assert run(recipe, "--input", src, "--data-source", source, "--out", out) == 0
    (converted,) = read(out / "train.parquet")
    assert converted["data_source"] == source
    fn = registry.resolve(source)
    truth, extra = converted["reward_model"]["ground_truth"], converted["extra_info"]
    assert registry.split_score(fn(source, right, truth, extra), source)[0] == 1.0
    assert registry.split_score(fn(source, wrong, truth, extra), source)[0] == 0.0
