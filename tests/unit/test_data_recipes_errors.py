"""`turnrl data gsm8k|math|nq_hotpotqa` on bad input: one line naming the culprit, exit code 2, nothing
written (or left half-written)."""

import sys
import types

import pyarrow.parquet as pq
import pytest

from tests.support.data_rows import read, run, write_json, write_jsonl

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


def test_a_directory_as_input_is_said_to_be_one(tmp_path, capsys):
    src = tmp_path / "train.jsonl"
    src.mkdir()  # once "input file not found"
    out = tmp_path / "out"
    assert run("gsm8k", "--input", src, "--split", "train", "--out", out) == 2
    assert one_line_error(capsys) == f"turnrl data: input file {src} is a directory, not a file"
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
