"""The search task's validation sizes. The large one (the default) asks 120 one-hop, 320 two-hop and 72
comparison questions, spread evenly over templates and phrasings, about the validation world and its
extension; the small one is the world docs/results/search-agent.md measured, byte for byte; the
training rows, and the demonstrations the cold-start recipe writes, are the same beside either."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from turnrl.tasks import write_task
from turnrl.tasks.search import demos, rows
from turnrl.tasks.search.corpus import ENTITIES, VAL_EXTENSION, build
from turnrl.tasks.search.questions import DEMO_TEMPLATES, N_PROBE, TEMPLATES, TWO_HOP, VAL_TWO_HOP

# sha256 of the rows as `turnrl data task search` writes them (one `json.dumps` per line), taken before
# the validation world had its extension: (seed, task arguments) -> training rows
TRAIN_SHA = {
    (0, ()): "d3f8da2f76c19afcd28fb4a7a6646c3d6f308353c17b73ac9d0e475fd7619d5a",
    (1, ()): "456bd096665aff68a69cabb7de6490dd414ff652d17f70877cac2d928d22941e",
    (1, (("train", "val_two_hop_mix"),)): "b5196733bac84aac951cbfb706841c4ccdfd5432c9bc9ab116e0eea39ba76d59",
    (0, (("train", "val_two_hop"), ("bridge_credit", 0.3))): "4070317dcde6738ca47097132bb5e8ccc86e42176aef738b2bb11eee3241e06b",
    (1, (("example", False), ("facts_seed", 1))): "18d0a4eacfe026bd7d5b1e4239d1bf0f0f53183e34bec059ccdd6eb736fd1ccb",
}  # fmt: skip
SMALL_SHA = {  # seed 0, `--arg val_size=small`: the files docs/results/search-agent.md measured on
    "val.jsonl": "56367286294072aac8ef149497b97bdbb8b782273f77037432c3c118940145e2",
    "corpus.jsonl": "a9050f165ad42046e4e87b1cd51aeb8e422d8903f106bfa90017b8ddfc0474bb",
    "qa.jsonl": "43ae45db23df363bfa2360d7a92a111c0da62768b69ada84d55ea04c60e810bf",
    "probe": "b7759543f9dd95277dfde4ff176c79468dd51349be4241117bb59d906fe6b650",  # with val=demonstrated
}
# the search_agent_rl recipe's demonstrations (`turnrl data search_sft --seed 1 --n 192
# --retry-fraction 0`), searched on the 400-document index
RECIPE_DEMOS_SHA = "2482899473cf85e55c502200297c6e4a0458e66f6ee715cbb78b0276eee6a978"


def sha(lines: list[dict]) -> str:
    return hashlib.sha256("".join(json.dumps(r) + "\n" for r in lines).encode()).hexdigest()


@pytest.fixture(scope="module")
def large() -> tuple[list[dict], list[dict]]:
    return rows("val", 0), rows("val", 0, val="demonstrated")


def by(rows_: list[dict], *keys: str) -> Counter:
    return Counter(tuple(r["extra_info"][k] for k in keys) for r in rows_)


def test_the_large_validation_asks_every_template_and_phrasing_evenly(large):
    val, probe = large
    assert Counter(r["data_source"] for r in val) == {
        "turnrl/search/1hop": 120,
        "turnrl/search/2hop": 320,
        "turnrl/search/compare": 72,
    }
    two_hop = [r for r in val if r["data_source"] == "turnrl/search/2hop"]
    asked = {t for t in VAL_TWO_HOP if not TEMPLATES[t].compare}
    assert by(two_hop, "template") == {(t,): 80 for t in asked}
    cells = by(two_hop, "template", "phrasing")  # the held-out (last) phrasing of each among them
    assert set(cells) == {(t, p) for t in asked for p in range(len(TEMPLATES[t].phrasings))}
    assert set(cells.values()) <= {26, 27}
    one_hop = by([r for r in val if r["data_source"] == "turnrl/search/1hop"], "template")
    assert len(one_hop) == 13 and set(one_hop.values()) <= {9, 10}
    compare = [r for r in val if r["data_source"] == "turnrl/search/compare"]
    assert set(by(compare, "phrasing").values()) == {24}
    assert len({frozenset(r["extra_info"]["entities"]) for r in compare}) == 72  # no pair asked twice
    assert len({r["prompt"][0]["content"] for r in val}) == len(val)
    # the probe keeps its size, now spread over the demonstrated templates
    assert len(probe) == N_PROBE and {r["data_source"] for r in probe} == {"turnrl/search/2hop_demo"}
    shown = {t.name for t in TWO_HOP if t.name in DEMO_TEMPLATES}
    assert {t for (t,) in by(probe, "template")} == shown and set(by(probe, "template").values()) <= {12, 13}


def test_every_row_index_names_one_row_whatever_the_size(large):
    train = rows("train", 0)
    for val, probe in (large, (rows("val", 0, val_size="small"), rows("val", 0, val="demonstrated", val_size="small"))):  # fmt: skip
        indexes = [r["extra_info"]["index"] for r in train + val + probe]
        assert len(indexes) == len(set(indexes))


@pytest.mark.parametrize(("seed", "args"), list(TRAIN_SHA))
def test_training_rows_are_the_same_beside_either_size(seed, args):
    want = TRAIN_SHA[(seed, args)]
    assert sha(rows("train", seed, **dict(args))) == want
    assert sha(rows("train", seed, **dict(args), val_size="small")) == want


def test_the_small_size_is_the_measured_world_byte_for_byte(tmp_path):
    files = write_task("search", tmp_path, 0, with_corpus=True, args={"val_size": "small"})
    for path in (files.val, *files.corpus_files):
        assert hashlib.sha256(path.read_bytes()).hexdigest() == SMALL_SHA[path.name], path.name
    assert hashlib.sha256(files.train.read_bytes()).hexdigest() == TRAIN_SHA[(0, ())]
    assert sha(rows("val", 0, val="demonstrated", val_size="small")) == SMALL_SHA["probe"]


def test_the_extension_changes_nothing_drawn_before_it():
    for facts_seed in (0, 1):  # a counterfactual corpus too
        small, big = build(ENTITIES, 0, facts_seed, 0), build(ENTITIES, 0, facts_seed)
        assert big.docs[: len(small.docs)] == small.docs and len(big.docs) == len(small.docs) + VAL_EXTENSION
        assert big.worlds["train"] == small.worlds["train"]
        val, ext = small.worlds["val"], big.worlds["val"]
        assert ext.people[: len(val.people)] == val.people and val.facts.items() <= ext.facts.items()
        added = set(ext.entities()) - set(val.entities())
        for (title, _), fact in ext.facts.items():  # the extension refers to itself only
            assert fact.target is None or (fact.target in added) == (title in added)
    kinds = build().worlds["val"]
    assert min(len(kinds.people), len(kinds.towns), len(kinds.companies)) >= 80  # a subject per question


def test_the_cold_start_recipes_demonstrations_are_the_same_on_the_larger_index(tmp_path: Path):
    out, report = demos.build(192, 1, 3, 0.0, tmp_path, 0.5)
    assert not report.skipped and sha(out) == RECIPE_DEMOS_SHA
