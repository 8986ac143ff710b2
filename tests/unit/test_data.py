import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from turnrl.data.dataset import DataError, load_examples, read_rows
from turnrl.data.loader import StatefulLoader
from turnrl.tasks.addition import make_row
from turnrl.tensors import left_pad, position_ids_from_mask


class CharTokenizer:
    """A real (if minimal) tokenizer: one id per character, a fixed chat template."""

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + (
            "<assistant>" if add_generation_prompt else ""
        )

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_reads_verl_rows_from_jsonl_and_parquet(tmp_path):
    rows = [make_row(1, 2, "train", 0), make_row(3, 4, "train", 1)]
    rows[1]["reward_model"]["ground_truth"] = {"target": ["7", "seven"]}  # Search-R1 shape
    j = write_jsonl(tmp_path / "d.jsonl", rows)
    pq.write_table(pa.Table.from_pylist(rows[:1]), tmp_path / "d.parquet")
    ex = load_examples([j, str(tmp_path / "d.parquet")], CharTokenizer(), 1000)
    assert len(ex) == 3
    assert ex[0].ground_truth == "3" and ex[0].index == 0 and ex[0].data_source == "turnrl/addition"
    assert ex[1].ground_truth == {"target": ["7", "seven"]}
    text = "".join(map(chr, ex[0].prompt_ids))
    assert text.startswith("<user>Compute 3 + 4.") and text.endswith(
        "<user>Compute 1 + 2. Respond with only <answer>NUMBER</answer>.<assistant>"
    )


def test_overlong_prompts_are_dropped_and_counted(tmp_path, caplog):
    rows = [make_row(1, 2, "train", 0), {**make_row(3, 4, "train", 1), "prompt": "x" * 500}]
    ex = load_examples([write_jsonl(tmp_path / "d.jsonl", rows)], CharTokenizer(), 200)
    assert len(ex) == 1
    assert "dropped 1 prompt" in caplog.text


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"data_source": "x", "reward_model": {"ground_truth": "1"}}, "row 0: row has no 'prompt'"),
        ({"prompt": [{"role": "user", "content": "hi"}]}, "row 0: row has no 'reward_model.ground_truth'"),
        (
            {"prompt": [{"content": "hi"}], "reward_model": {"ground_truth": "1"}},
            "needs 'role' and 'content'",
        ),
        # once converted with str(): the model was prompted with "['a', 'b']", "None" or "5"
        (
            {"prompt": [{"role": "user", "content": ["a", "b"]}], "reward_model": {"ground_truth": "1"}},
            r"row 0: 'prompt' message 0 \('user'\) content must be text, got list$",
        ),
        (
            {"prompt": [{"role": "user", "content": None}], "reward_model": {"ground_truth": "1"}},
            "content must be text, got NoneType$",
        ),
        (
            {"prompt": [{"role": "user", "content": 5}], "reward_model": {"ground_truth": "1"}},
            "content must be text, got int$",
        ),
        (
            {"prompt": [{"role": "bogus", "content": "hi"}], "reward_model": {"ground_truth": "1"}},
            "'prompt' message 0 needs a 'role' of system, user, assistant, tool; got 'bogus'$",
        ),
        (
            {"prompt": [{"role": 5, "content": "hi"}], "reward_model": {"ground_truth": "1"}},
            "needs a 'role' of system, user, assistant, tool; got 5$",
        ),
    ],
)
def test_malformed_rows_name_file_and_row(tmp_path, row, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [row])
    with pytest.raises(DataError, match=message) as err:
        load_examples([path], CharTokenizer(), 100)
    assert "bad.jsonl" in str(err.value)


def test_missing_file_bad_json_and_unknown_suffix(tmp_path):
    with pytest.raises(DataError, match="not found"):
        read_rows(tmp_path / "nope.jsonl")
    (tmp_path / "dir.jsonl").mkdir()  # once "not found" too
    with pytest.raises(DataError, match=r"data file .*dir\.jsonl is a directory, not a file$"):
        read_rows(tmp_path / "dir.jsonl")
    (tmp_path / "b.jsonl").write_text('{"a": 1}\n{not json\n')
    with pytest.raises(DataError, match=r"b\.jsonl:2: not valid JSON"):
        read_rows(tmp_path / "b.jsonl")
    (tmp_path / "c.csv").write_text("a,b\n")
    with pytest.raises(DataError, match="unsupported"):
        read_rows(tmp_path / "c.csv")
    (tmp_path / "d.parquet").write_text("garbage")
    with pytest.raises(DataError, match="cannot read parquet"):
        read_rows(tmp_path / "d.parquet")


def test_left_pad_and_positions():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    # positions count real tokens only: the single token of row 1 is at position 0
    assert position_ids_from_mask(mask).tolist() == [[0, 1, 2], [0, 0, 0]]
    full = torch.tensor([[0, 1, 1, 1, 1]])
    assert position_ids_from_mask(full).tolist() == [[0, 0, 1, 2, 3]]


def _examples(tmp_path, n):
    rows = [make_row(i % 10, 1, "train", i) for i in range(n)]
    return load_examples([write_jsonl(tmp_path / "d.jsonl", rows)], CharTokenizer(), 1000)


def test_loader_is_seeded_and_resumable(tmp_path):
    ex = _examples(tmp_path, 10)
    a = StatefulLoader(ex, 3, 0, seed=7)
    assert len(a) == 3  # the partial last batch is dropped
    seen = [list(b["index"]) for b in a.epoch_batches()]
    assert a.epoch == 1 and a.position == 0
    again = [list(b["index"]) for b in StatefulLoader(ex, 3, 0, seed=7).epoch_batches()]
    assert seen == again  # same seed, same order
    other = [list(b["index"]) for b in StatefulLoader(ex, 3, 0, seed=8).epoch_batches()]
    assert other != seen

    # stop after 2 batches of epoch 1, restore into a fresh loader, get the rest
    b = StatefulLoader(ex, 3, 0, seed=7)
    list(b.epoch_batches())
    it = b.epoch_batches()
    first_two = [list(next(it)["index"]) for _ in range(2)]
    state = b.state_dict()
    c = StatefulLoader(ex, 3, 0, seed=7)
    c.load_state_dict(state)
    rest = [list(x["index"]) for x in c.epoch_batches()]
    d = StatefulLoader(ex, 3, 0, seed=7)
    d.load_state_dict({"epoch": 1, "position": 0, "seed": 7})
    full_epoch1 = [list(x["index"]) for x in d.epoch_batches()]
    assert first_two + rest == full_epoch1


def test_resume_at_epoch_boundary_moves_to_next_epoch(tmp_path):
    # a checkpoint taken right after the last batch of an epoch must not yield 0 batches forever
    ex = _examples(tmp_path, 6)
    loader = StatefulLoader(ex, 3, 0, seed=1)
    loader.load_state_dict({"epoch": 0, "position": 2, "seed": 1})
    assert list(loader.epoch_batches()) == []
    assert loader.epoch == 1
    assert len(list(loader.epoch_batches())) == 2
