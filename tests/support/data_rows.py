"""Rows in the public datasets' own formats, written to disk, and `turnrl data` run in-process."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from turnrl.cli import main


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
