"""`turnrl data gsm8k|math|nq_hotpotqa`: hand-written rows in the datasets' own formats, converted
through the CLI, read back and compared field for field with the rows verl's / Search-R1's
preprocessing scripts write for them; then loaded by `turnrl.data` and scored by the registry."""

import json
import sys
import types

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from turnrl.cli import main
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


class CharTokenizer:
    """One id per character and a fixed chat template: enough for `load_examples`."""

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def write_parquet(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def write_json(path, doc):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return str(path)


def read(path):
    return pq.read_table(path).to_pylist()


def run(*args):
    return main(["data", *map(str, args)])


def user(content):
    return [{"role": "user", "content": content}]


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


# ---------------------------------------------------------------- bad input: one line, nothing written


def one_line_error(capsys):
    err = capsys.readouterr().err.strip()
    assert err.startswith("turnrl data: ") and "\n" not in err, err
    return err


def test_malformed_json_line_names_file_and_line(tmp_path, capsys):
    src = tmp_path / "train.jsonl"
    src.write_text('{"question": "a", "answer": "#### 1"}\n{"question": "b", "answer": \n')
    out = tmp_path / "out"
    assert run("gsm8k", "--input", src, "--out", out) == 2
    assert f"{src}:2: not valid JSON" in one_line_error(capsys)
    assert not out.exists()


def test_missing_field_fails_naming_the_row_and_writes_nothing(tmp_path, capsys):
    good = write_jsonl(tmp_path / "a" / "train.jsonl", [{"question": "a", "answer": "#### 1"}])
    bad = write_json(tmp_path / "b" / "test.json", [{"question": "a", "answer": "#### 1"}, {"question": "b"}])
    out = tmp_path / "out"
    assert run("gsm8k", "--input", good, "--input", bad, "--out", out) == 2
    err = one_line_error(capsys)
    assert f"{bad} row 1: row has no 'answer' field" in err
    assert not out.exists()  # the good file's rows were not written either


def test_wrong_types_fail(tmp_path, capsys):
    src = write_jsonl(tmp_path / "nq" / "train.jsonl", [{"question": "q", "golden_answers": "Homer"}])
    assert run("nq_hotpotqa", "--input", src, "--out", tmp_path / "out") == 2
    assert f"{src}:1: 'golden_answers' must be a list of strings" in one_line_error(capsys)
    src = write_json(tmp_path / "m" / "train.json", ["just a string"])
    assert run("math", "--input", src, "--out", tmp_path / "out") == 2
    assert f"{src} row 0: a row must be a JSON object" in one_line_error(capsys)


def test_every_row_skipped_is_an_error(tmp_path, capsys):
    src = write_jsonl(tmp_path / "train.jsonl", [{"problem": "p", "solution": "no box"}])
    assert run("math", "--input", src, "--out", tmp_path / "out") == 2
    assert "no row of 1 could be converted" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_split_and_data_set_must_be_known(tmp_path, capsys):
    src = write_jsonl(tmp_path / "data" / "gsm8k.jsonl", [{"question": "a", "answer": "#### 1"}])
    assert run("gsm8k", "--input", src, "--out", tmp_path / "out") == 2
    assert "cannot tell the split" in one_line_error(capsys)
    assert run("gsm8k", "--input", src, "--split", "test", "--out", tmp_path / "out") == 0
    assert read(tmp_path / "out" / "test.parquet")[0]["extra_info"]["split"] == "test"

    qa = write_jsonl(tmp_path / "data" / "train.jsonl", [{"question": "q", "golden_answers": ["a"]}])
    assert run("nq_hotpotqa", "--input", qa, "--out", tmp_path / "o2") == 2
    assert "cannot tell which data set" in one_line_error(capsys)
    assert run("nq_hotpotqa", "--input", qa, "--data-source", "squad", "--out", tmp_path / "o2") == 2
    assert "--data-source 'squad' is not one of nq, triviaqa" in one_line_error(capsys)


def test_test_and_dev_of_one_set_are_refused(tmp_path, capsys):
    row = [{"question": "q", "golden_answers": ["a"]}]
    test = write_jsonl(tmp_path / "nq" / "test.jsonl", row)
    dev = write_jsonl(tmp_path / "nq" / "dev.jsonl", row)
    assert run("nq_hotpotqa", "--input", test, "--input", dev, "--out", tmp_path / "out") == 2
    assert "nq: both" in one_line_error(capsys)


def test_existing_output_needs_overwrite(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in" / "train.jsonl", [{"question": "a", "answer": "#### 1"}])
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert run("gsm8k", "--input", src, "--out", out) == 2
    assert "exists and is not empty" in one_line_error(capsys)
    assert run("gsm8k", "--input", src, "--out", out, "--overwrite") == 0
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "train.parquet"]  # no temp file left


def test_a_failed_write_leaves_no_split_behind(tmp_path, monkeypatch):
    train = write_jsonl(tmp_path / "in" / "train.jsonl", [{"question": "a", "answer": "#### 1"}])
    test = write_jsonl(tmp_path / "in" / "test.jsonl", [{"question": "b", "answer": "#### 2"}])
    real_write, calls = pq.write_table, []

    def write_then_fail(table, where, **kw):
        calls.append(where)
        if len(calls) == 2:  # the disk fills up while the second split is written
            raise OSError("No space left on device")
        real_write(table, where, **kw)

    monkeypatch.setattr(pq, "write_table", write_then_fail)
    out = tmp_path / "out"
    with pytest.raises(OSError):
        run("gsm8k", "--input", train, "--input", test, "--out", out)
    assert list(out.iterdir()) == []  # train.parquet was staged, never renamed into place


def test_from_hub_without_datasets_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` now raises ImportError
    assert run("gsm8k", "--from-hub", "--out", tmp_path / "out") == 2
    assert "--from-hub needs the `datasets` package" in one_line_error(capsys)


def test_from_hub_offline_is_one_line(tmp_path, capsys, monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)\nmore")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    assert run("gsm8k", "--from-hub", "--out", tmp_path / "out") == 2
    err = one_line_error(capsys)
    assert "--from-hub: cannot load openai/gsm8k (Couldn't reach" in err
    assert not (tmp_path / "out").exists()
