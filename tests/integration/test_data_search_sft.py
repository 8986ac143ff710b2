"""`turnrl data search_sft`: demonstrations from training questions only, each a complete, correct
episode whose answer its last observation shows; deterministic in the seed; written atomically."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from turnrl.cli import main
from turnrl.tasks import write_task
from turnrl.tasks.search import N_VAL, compute_score, demos, indexed
from turnrl.tasks.search.questions import DEMO_TEMPLATES, TEMPLATES, VAL_TWO_HOP

ANSWER = re.compile(r"<answer> (.*) </answer>$")


def generate(tmp_path, capsys, name: str, *flags: str) -> tuple[list[dict], str]:
    out = tmp_path / name
    assert (
        main(["data", "search_sft", "--out", str(out), "--cache-dir", str(tmp_path / "cache"), *flags]) == 0
    )
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert [p.name for p in out.iterdir()] == ["train.jsonl"]  # no temporary file left behind
    return rows, capsys.readouterr().out


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sft")
    out = tmp / "all"
    assert main(["data", "search_sft", "--out", str(out), "--cache-dir", str(tmp / "cache")]) == 0
    return [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()], tmp


def test_only_training_questions_and_the_task_rows_prompt(full, tmp_path):
    rows_, _ = full
    val, train = indexed()
    held_out = {q.text for _, q in val}
    val_entities = {e for _, q in val for e in q.entities}
    asked = [r["prompt"][0]["content"].rsplit("Question: ", 1)[1].strip() for r in rows_]
    assert not held_out & set(asked)
    eligible = [q for _, q in train if q.template in DEMO_TEMPLATES]
    assert len(rows_) == len(eligible) == len(set(asked))  # every eligible question once, none skipped
    assert not {r["extra_info"]["template"] for r in rows_} & VAL_TWO_HOP  # left for RL to generalise to
    assert not val_entities & {e for r in rows_ for e in r["extra_info"]["entities"]}
    # each row is the task's own training row (the prompt RL samples from), plus its episode
    task_train = write_task("search", tmp_path, 0).train
    task = {r["extra_info"]["index"]: r for r in map(json.loads, task_train.read_text().splitlines())}
    for r in rows_:
        assert r["extra_info"]["index"] >= N_VAL
        same = task[r["extra_info"]["index"]]
        assert {k: r[k] for k in same if k != "extra_info"} == {
            k: v for k, v in same.items() if k != "extra_info"
        }
        assert {k: r["extra_info"][k] for k in same["extra_info"]} == same["extra_info"]


def test_every_demonstration_is_a_correct_episode(full):
    rows, _ = full
    searches: Counter[tuple[int, int]] = Counter()  # (hops, searches)
    for r in rows:
        episode, answers = r["episode"], r["reward_model"]["ground_truth"]["target"]
        roles = [s["role"] for s in episode]
        assert roles == ["assistant", "observation"] * (len(roles) // 2) + ["assistant"]
        assert all(s["content"].startswith("<think> ") for s in episode[::2])
        assert all(s["content"].endswith(" </search>") for s in episode[:-1:2])
        final = ANSWER.search(episode[-1]["content"])
        assert final and final.group(1) == answers[0]
        last_observation = episode[-2]
        assert last_observation["tag"] == "information" and last_observation["content"].startswith(
            "Doc 1(Title: "
        )
        assert any(a in last_observation["content"] for a in answers)
        assert r["extra_info"]["searches"] == len(roles) // 2
        searches[(r["extra_info"]["hops"], r["extra_info"]["searches"])] += 1
        response = "\n".join(s["content"] for s in episode)  # scored as RL scores it
        assert compute_score(r["data_source"], response, r["reward_model"]["ground_truth"])["acc"] == 1.0
    one_hop = sum(v for (hops, _), v in searches.items() if hops == 1)
    assert searches[(1, 2)] > 0.05 * one_hop  # the nameless first queries missed and were searched again
    # a bridge takes two searches at least
    assert searches[(2, 2)] > 0 and not any(n < 2 for hops, n in searches if hops == 2)


def test_seeded_and_independent_of_n(full, tmp_path, capsys):
    rows, _ = full
    again, out = generate(tmp_path, capsys, "again", "--n", "50")
    assert again == rows[:50]
    assert "50 used (seed 0, topk 3)" in out and "skipped (no query found the fact): 0" in out
    other, _ = generate(tmp_path, capsys, "other", "--n", "50", "--seed", "1")
    assert other != again


def test_a_training_question_equal_to_a_validation_one_is_excluded(tmp_path, capsys, monkeypatch):
    val, train = indexed()
    twin = next(q for _, q in val if q.hops == 1)
    train[5] = (train[5][0], twin)  # a training slot now asks a held-out question
    monkeypatch.setattr(demos, "indexed", lambda: (val, train))
    rows, out = generate(tmp_path, capsys, "dup", "--retry-fraction", "0")
    assert twin.text not in {r["prompt"][0]["content"].rsplit("Question: ", 1)[1].strip() for r in rows}
    assert "(1 excluded as identical to a validation question)" in out
    assert all(r["extra_info"]["searches"] == r["extra_info"]["hops"] for r in rows)  # no nameless query


def test_topk_sets_the_passages_per_search(tmp_path, capsys):
    rows, _ = generate(tmp_path, capsys, "k1", "--n", "20", "--topk", "1")
    assert all(
        s["content"].count("Doc ") == 1 for r in rows for s in r["episode"] if s["role"] == "observation"
    )


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--input", "x.jsonl"], "search_sft generates its rows from the built-in corpus"),
        (["--n", "0"], "--n must be a positive integer, got 0"),
        (["--topk", "100000"], "--topk must be between 1 and the corpus size (620), got 100000"),
        (["--topk", "0"], "--topk must be between 1 and the corpus size (620), got 0"),
        (["--retry-fraction", "2"], "--retry-fraction must be in [0, 1]"),
        (["--two-hop-share", "1.5"], "--two-hop-share must be in [0, 1], got 1.5"),
        (["--opener", "loud"], "--opener must be one of plain, subject, joined, got 'loud'"),
    ],
)
def test_bad_flags_are_one_line(tmp_path, capsys, flags, expected):
    assert main(["data", "search_sft", "--out", str(tmp_path / "o"), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]
    assert not (tmp_path / "o").exists()


def test_a_cache_dir_that_is_a_file_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("afile").write_text("hi\n")
    for cache, why in [("afile", "is a file"), ("afile/sub", "afile is a file")]:
        assert main(["data", "search_sft", "--out", "o", "--cache-dir", cache]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"turnrl data: --cache-dir {cache}: {why}, not a directory"
        ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"] and Path("afile").read_text() == "hi\n"


def test_the_two_hop_share_sets_the_mix(tmp_path, capsys):
    rows, out = generate(
        tmp_path, capsys, "half", "--n", "40", "--two-hop-share", "0.5", "--retry-fraction", "0"
    )
    assert sum(r["extra_info"]["hops"] == 2 for r in rows) == 20 and "20 with 1 search" in out
    rows, _ = generate(tmp_path, capsys, "none", "--n", "40", "--two-hop-share", "0", "--retry-fraction", "0")
    assert not any(r["extra_info"]["hops"] == 2 for r in rows)


def test_the_opener_names_the_entity_or_the_bridge_description(full, tmp_path, capsys):
    rows, _ = full  # the default opener, "joined"
    _, train = indexed()
    by_index = dict(train)
    for r in rows:
        q = by_index[r["extra_info"]["index"]]
        first = r["episode"][0]["content"]
        if q.hops == 1:  # "This question is about Gopubi." (a river: "about the Peiman River.")
            subject = f"the {q.entities[0]}" if TEMPLATES[q.template].subject == "river" else q.entities[0]
            assert first.startswith(f"<think> This question is about {subject}. ")
            assert "two searches" not in first
        else:  # the bridge as the question describes it, and the protocol in the same sentence
            described = demos.BRIDGE_SUBJECT[TEMPLATES[q.template].chain[0]].format(e=q.entities[0])
            assert first.startswith(f"<think> This question is about {described}, so this takes two searches")
    # every two-hop template the demonstrations show has a first relation with a description
    assert {TEMPLATES[t].chain[0] for t in DEMO_TEMPLATES if TEMPLATES[t].hops == 2} <= set(
        demos.BRIDGE_SUBJECT
    )
    # --opener subject: two sentences ("... the founder of Sithin Press. This takes two searches ...")
    subject, _ = generate(tmp_path, capsys, "subject", "--n", "30", "--opener", "subject")
    for a, b in zip(subject, rows[:30], strict=True):
        first, joined = a["episode"][0]["content"], b["episode"][0]["content"]
        expected = joined.replace(", so this takes two searches", ". This takes two searches", 1)
        assert first == expected and (a["extra_info"]["hops"] == 1) == (first == joined)
        assert a["episode"][1:] == b["episode"][1:]
    # --opener plain: the openers without the subject sentence, the same episodes otherwise
    plain, _ = generate(tmp_path, capsys, "plain", "--n", "30", "--opener", "plain")
    for a, b in zip(plain, subject, strict=True):
        first = a["episode"][0]["content"]
        assert not first.startswith("<think> This question is about")
        rest = first[len("<think> ") :]
        assert b["episode"][0]["content"].endswith(rest)
        assert b["episode"][0]["content"].startswith("<think> This question is about")
        assert a["episode"][1:] == b["episode"][1:]


def test_the_bridge_step_names_the_bridge_after_the_question_s_description(full):
    """ "First step done, not the answer yet. The founder of X is Y ...": the bridge entity comes right
    after the description the opener copied, and nothing of the first passage is copied."""
    rows, _ = full
    _, train = indexed()
    by_index = dict(train)
    seen = 0
    for r in rows:
        q = by_index[r["extra_info"]["index"]]
        if q.hops != 2:
            continue
        described = demos.BRIDGE_SUBJECT[TEMPLATES[q.template].chain[0]].format(e=q.entities[0])
        bridge = next(m["content"] for m in r["episode"] if "First step done" in m["content"])
        assert bridge.startswith("<think> First step done, not the answer yet. "), bridge
        assert f"{described}, which is {q.bridge}," in bridge or f"{described[1:]} is {q.bridge}" in bridge
        assert "Doc" not in bridge.split("</think>")[0]  # no passage quoted, none pointed at
        seen += 1
    assert seen > 20


def test_generator_flags_are_refused_for_converters(tmp_path, capsys):
    assert main(["data", "gsm8k", "--input", "x.jsonl", "--out", str(tmp_path / "o"), "--n", "3"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "turnrl data: --n: only for search_sft, code_sft and harbor_sft"
    ]
    assert main(["data", "gsm8k", "--input", "x.jsonl", "--out", str(tmp_path / "o"), "--seed", "3"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "turnrl data: --seed: only for task, search_sft, code_sft and harbor_sft"
    ]
    assert main(["data", "gsm8k", "--out", str(tmp_path / "o")]) == 2
    assert "give the dataset's files with --input FILE" in capsys.readouterr().err


def test_every_relation_has_phrasing():
    relations = {relation for t in TEMPLATES.values() for relation in t.chain}
    assert relations == set(demos.RELATIONS)


class FakeSearch:
    """Finds the fact only from query number `hit_at` on (never when None)."""

    def __init__(self, q, doc_id: str, hit_at: int | None):
        self.q, self.doc_id, self.hit_at, self.queries = q, doc_id, hit_at, []

    def __call__(self, query: str):
        self.queries.append(query)
        other = {"id": "x", "contents": "Other\nNothing here."}
        found = self.hit_at is not None and len(self.queries) > self.hit_at
        docs = (
            [{"id": self.doc_id, "contents": f"{self.q.entities[0]}\nIt is {self.q.answers[0]}."}]
            if found
            else [other]
        )
        return "\n".join(d["contents"] for d in docs), docs


def test_a_missed_named_query_is_searched_again_and_a_question_never_found_is_skipped():
    index, q = next((i, q) for i, q in indexed()[1] if q.hops == 1)
    doc_ids = demos.build_doc_ids()
    doc_id = doc_ids[q.entities[0]]
    report = demos.Report()
    search = FakeSearch(q, doc_id, hit_at=1)
    row = demos.demonstration(q, index, 0, search, 0.0, report, doc_ids)
    assert row["extra_info"]["searches"] == 2 and len(search.queries) == 2
    assert "The results do not say" in row["episode"][2]["content"]
    assert sum(report.missed.values()) == 1 and not report.skipped
    search = FakeSearch(q, doc_id, hit_at=None)
    assert demos.demonstration(q, index, 0, search, 0.0, report, doc_ids) is None
    assert len(search.queries) == demos.MAX_SEARCHES
    assert len(report.skipped) == 1 and sum(report.missed.values()) == 2  # + the first of the two misses
