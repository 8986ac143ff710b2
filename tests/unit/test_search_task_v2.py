"""The search task, second version: validation on a world of entities training never names, mostly
two-hop questions that one search of the question text does not answer, namesakes that make a
partial name ambiguous, held-out phrasings, a scorer with format credit, counterfactual facts."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from turnrl.tasks import TASKS
from turnrl.tasks.args import TaskArgError
from turnrl.tasks.search import DATA_SOURCES, FORMAT_SCORE, compute_score, rows, write_corpus
from turnrl.tasks.search import demos as search_demos
from turnrl.tasks.search.corpus import build, builtin_documents
from turnrl.tasks.search.questions import DEMO_TEMPLATES, TEMPLATES, VAL_SIZES, VAL_TWO_HOP

COPY_BOUND = 0.15  # of two-hop validation questions that one search of the question text answers


def question_of(row: dict) -> str:
    return row["prompt"][0]["content"].rsplit("Question: ", 1)[1].strip()


@pytest.fixture(scope="module")
def val() -> list[dict]:
    return rows("val", 0)


@pytest.fixture(scope="module", params=VAL_SIZES)
def val_of_size(request) -> tuple[list[dict], list[dict]]:
    """Each validation size's (held-out rows, probe rows)."""
    size = request.param
    return rows("val", 0, val_size=size), rows("val", 0, val="demonstrated", val_size=size)


@pytest.fixture(scope="module")
def train() -> list[dict]:
    return rows("train", 0)


@pytest.fixture(scope="module")
def search(tmp_path_factory):
    return search_demos.InProcessSearch(tmp_path_factory.mktemp("cache"), 3)  # the real index, top 3


@pytest.fixture(scope="module")
def demo_rows(tmp_path_factory) -> list[dict]:
    out, report = search_demos.build(None, 0, 3, 0.1, tmp_path_factory.mktemp("demo_cache"))
    assert not report.skipped and len(out) == report.used
    return out


def test_every_row_names_its_entities_and_validation_shares_none(val_of_size, train, demo_rows):
    """Whatever the validation size, no entity on a validation row's path (held-out or probe) is on a
    training row's or a demonstration's, or named in its prompt or its episode."""
    val = val_of_size[0] + val_of_size[1]
    titles = set(build().doc_ids)
    for row in val + train + demo_rows:
        assert row["extra_info"]["entities"] and set(row["extra_info"]["entities"]) <= titles
    val_entities = {e for r in val for e in r["extra_info"]["entities"]}
    assert val_entities <= set(build().worlds["val"].entities())
    pattern = re.compile(
        r"\b(" + "|".join(map(re.escape, sorted(val_entities, key=len, reverse=True))) + r")\b"
    )
    for row in train + demo_rows:
        assert not val_entities & set(row["extra_info"]["entities"])
        assert not pattern.search(row["prompt"][0]["content"]), question_of(row)
        for step in row.get("episode", []):  # not even a demonstration's passages show one
            assert not pattern.search(step["content"])


def test_at_least_half_of_validation_is_two_hop_and_reported_by_source(val, train):
    hops = Counter(r["extra_info"]["hops"] for r in val)
    assert hops[2] >= 0.5 * len(val)
    assert sum(r["data_source"] == "turnrl/search/2hop" for r in val) >= 0.5 * len(val)  # bridges alone
    for r in val + train:
        info = r["extra_info"]
        sort = "compare" if TEMPLATES[info["template"]].compare else f"{info['hops']}hop"
        assert r["data_source"] == f"turnrl/search/{sort}"
        assert (info["bridge"] is not None) == (r["data_source"] == "turnrl/search/2hop")
        if info["bridge"]:
            assert info["entities"][1] == info["bridge"]
    probe = {r["data_source"] for r in rows("val", 0, val="demonstrated")}
    assert {r["data_source"] for r in val} | probe == set(DATA_SOURCES) == set(TASKS["search"].data_sources)


def test_the_probe_asks_the_demonstrated_templates_about_entities_no_training_row_names(train, demo_rows):
    """`val=demonstrated`: two-hop questions of the templates the demonstrations show, in their
    training phrasings, about the validation world: new entities and nothing else new."""
    probe = rows("val", 0, val="demonstrated")
    assert len(probe) == 64 and {r["data_source"] for r in probe} == {"turnrl/search/2hop_demo"}
    val_world = set(build().worlds["val"].entities())
    seen = {e for r in train + demo_rows for e in r["extra_info"]["entities"]}
    seen_text = {question_of(r) for r in train + demo_rows}
    for r in probe:
        info = r["extra_info"]
        assert info["template"] in DEMO_TEMPLATES and info["hops"] == 2 and info["bridge"]
        assert info["phrasing"] in TEMPLATES[info["template"]].phrasing_ids("train")
        assert set(info["entities"]) <= val_world and not set(info["entities"]) & seen
        assert question_of(r) not in seen_text
    # indexed after every training row: a row's index names one row in any file of the task
    assert min(r["extra_info"]["index"] for r in probe) > max(r["extra_info"]["index"] for r in train)
    assert len({r["extra_info"]["template"] for r in probe}) >= 4  # every demonstrated template, roughly


def test_a_two_hop_opener_or_bridge_step_never_starts_like_a_one_hop_opener_or_an_answer():
    """Greedy decoding commits at the first words: a model shown one-hop and two-hop openers that
    begin alike opened every episode as a one-hop one (README). The fixed text before the first
    placeholder of each is compared, three words."""

    def starts(thoughts) -> set[str]:
        return {" ".join(t.split("{", 1)[0].split()[:3]).lower() for t in thoughts}

    one, two = starts(search_demos.FIRST_THOUGHTS), starts(search_demos.TWO_HOP_THOUGHTS)
    bridge, answer = starts(search_demos.BRIDGE_THOUGHTS), starts(search_demos.ANSWER_THOUGHTS)
    assert not any(a.startswith(b) or b.startswith(a) for a in one for b in two if a and b)
    assert not any(a.startswith(b) or b.startswith(a) for a in bridge for b in answer if a and b)


def test_a_bridge_step_says_it_is_not_the_answer_before_it_copies_anything():
    """A bridge step that copied the passage first and committed after ("Doc 1 says: ... So it is X.
    That is not the answer yet.") shared that prefix with an answer ("Doc 1 says: ... So the answer is
    X."), and one SFT seed ended its bridge steps as answers (README). Each bridge thought's fixed text
    before its first placeholder says it is not the answer."""
    for thought in search_demos.BRIDGE_THOUGHTS:
        assert "not the answer" in thought.split("{", 1)[0], thought


def test_a_bridge_step_shares_no_span_with_an_answer():
    """A bridge step that committed first and then copied the passage as answers do ("Doc 1 says:
    <sentence>") let answers end as bridge steps, searching again until the turn limit (README): no
    bridge thought copies the sentence or holds an answer thought's first three words."""
    answer_starts = {" ".join(t.split()[:3]) for t in search_demos.ANSWER_THOUGHTS}
    assert "Doc {i} says:" in answer_starts  # the span the earlier bridge step shared
    for thought in search_demos.BRIDGE_THOUGHTS:
        assert "{sentence}" not in thought, thought
        assert not [a for a in answer_starts if a in thought], thought


def test_one_search_of_the_question_text_rarely_shows_a_two_hop_answer(val, search, capsys):
    seen: dict[str, list[bool]] = defaultdict(list)
    both: list[bool] = []  # a comparison's answer is a name it asks about: count its two facts instead
    ids = build().doc_ids
    for r in val:
        text, docs = search(question_of(r))  # the tool's own search path: BM25, top 3, rendered passages
        answers = r["reward_model"]["ground_truth"]["target"]
        seen[r["data_source"]].append(any(a in text for a in answers))
        if r["data_source"] == "turnrl/search/compare":
            both.append({ids[e] for e in r["extra_info"]["entities"]} <= {d["id"] for d in docs})
    rate = {k: round(sum(v) / len(v), 3) for k, v in seen.items()}
    overall = sum(sum(v) for v in seen.values()) / len(val)
    with capsys.disabled():
        print(f"\nanswer in the top 3 of one question-text search: {rate}, overall {overall:.3f}")
        print(f"comparisons with both facts in those top 3: {sum(both)} of {len(both)}")
    assert rate["turnrl/search/2hop"] <= COPY_BOUND  # measured 0 of 320 (small world: 1 of 64)
    assert rate["turnrl/search/1hop"] >= 0.9  # one-hop stays answerable in one search


def test_namesakes_make_a_partial_name_retrieve_another_entity(search):
    corpus = build()
    for world in corpus.worlds.values():
        firsts = Counter(p.split()[0] for p in world.people)
        lasts = Counter(p.split()[1] for p in world.people)
        stems = Counter(c.split()[0] for c in world.companies)
        assert max(firsts.values()) >= 2 and max(lasts.values()) >= 2 and max(stems.values()) >= 2
    people = corpus.worlds["val"].people
    wrong_first = sum(search(f"{p.split()[1]} birth year")[1][0]["id"] != corpus.doc_ids[p] for p in people)
    assert wrong_first >= 0.3 * len(people)  # measured 75 of 112 (small world: 23 of 35)


def test_demonstrations_never_use_a_validation_two_hop_template_and_phrasings_are_held_out(
    val_of_size, train, demo_rows
):
    val = val_of_size[0]
    assert {r["extra_info"]["template"] for r in demo_rows} <= DEMO_TEMPLATES
    assert not DEMO_TEMPLATES & VAL_TWO_HOP
    assert {r["extra_info"]["template"] for r in demo_rows if r["extra_info"]["hops"] == 2}  # some two-hop
    assert {r["extra_info"]["template"] for r in train} >= VAL_TWO_HOP  # RL trains on them
    held = {(r["extra_info"]["template"], r["extra_info"]["phrasing"]) for r in val}
    for r in train + demo_rows:
        t = TEMPLATES[r["extra_info"]["template"]]
        assert r["extra_info"]["phrasing"] in t.phrasing_ids("train")
    val_only = {(name, p) for name, p in held if p not in TEMPLATES[name].phrasing_ids("train")}
    assert val_only  # validation does ask in the held-out phrasings
    train_texts = {
        TEMPLATES[r["extra_info"]["template"]].phrasings[r["extra_info"]["phrasing"]] for r in train
    }
    assert not {TEMPLATES[n].phrasings[p] for n, p in val_only} & train_texts


def test_demonstrations_search_twice_for_a_bridge(demo_rows):
    two = [r for r in demo_rows if r["extra_info"]["hops"] == 2]
    for r in two[:50]:
        bridge = r["extra_info"]["bridge"]
        queries = [s["content"].rsplit("<search>", 1)[1] for s in r["episode"] if "<search>" in s["content"]]
        assert len(queries) >= 2 and bridge in queries[-1] and bridge not in question_of(r)


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("<think> x </think>\n<answer> Klebrimou River </answer>", ["Klebrimou River"], (1.0, 1.0, 1.0)),
        # Search-R1's normalisation
        ("<answer> the klebrimou river. </answer>", ["Klebrimou River"], (1.0, 1.0, 1.0)),
        ("<answer> Klebrimou </answer>", ["Klebrimou River", "Klebrimou"], (1.0, 1.0, 1.0)),  # an alias
        ("<answer> 1802 </answer>", ["1803"], (FORMAT_SCORE, 0.0, 1.0)),  # well-formed, wrong
        # the last tag counts
        ("<answer> 1803 </answer> then <answer> 1802 </answer>", ["1803"], (FORMAT_SCORE, 0.0, 1.0)),
        ("<answer>   </answer>", ["1803"], (0.0, 0.0, 0.0)),  # empty
        # an explanation, not an answer
        ("<answer> " + "it was " * 6 + "1803 </answer>", ["1803"], (0.0, 0.0, 0.0)),
        ("The answer is 1803.", ["1803"], (0.0, 0.0, 0.0)),  # no tag
    ],
)
def test_scorer_on_hand_worked_examples(response, truth, expected):
    got = compute_score("turnrl/search/2hop", response, {"target": truth})
    assert (got["score"], got["acc"], got["formatted"]) == expected


# the bridge credit, 0.3 on a two-hop training row whose bridge is Hokle and answer "silk":
#   right answer                                         -> 1.0 (never more)
#   wrong answer, second query names Hokle               -> 0.1 format + 0.3 = 0.4
#   wrong answer, only the FIRST query names Hokle       -> 0.1 (the bridge must come from a search)
#   wrong answer, second query repeats the subject       -> 0.1
#   second query names Hokle, no answer tag              -> 0.0 (the credit needs a well-formed answer)
HOP1 = "<search> Stori Textiles based in town </search><information> Doc 1(Title: Stori Textiles) ... based in Hokle. </information>"  # fmt: skip
CREDIT_CASES = [  # (response, score with the credit, score without: validation rows, the default)
    (HOP1 + "<search> Hokle main trade </search><answer> silk </answer>", 1.0, 1.0),
    (HOP1 + "<search> hokle trade </search><answer> copper </answer>", FORMAT_SCORE + 0.3, FORMAT_SCORE),
    ("<search> Hokle </search><search> Stori Textiles </search><answer> copper </answer>", FORMAT_SCORE, FORMAT_SCORE),
    (HOP1 + "<search> Stori Textiles main trade </search><answer> 1797 </answer>", FORMAT_SCORE, FORMAT_SCORE),
    (HOP1 + "<search> Hokle main trade </search> I think it is copper", 0.0, 0.0),
]  # fmt: skip


@pytest.mark.parametrize(("response", "credited", "plain"), CREDIT_CASES)
def test_the_bridge_credit_pays_a_second_search_for_the_bridge_hand_worked(response, credited, plain):
    truth = {"target": ["silk"]}
    got = compute_score("turnrl/search/2hop", response, truth, {"bridge": "Hokle", "bridge_credit": 0.3})
    without = compute_score("turnrl/search/2hop", response, truth, {"bridge": "Hokle"})
    assert got["score"] == pytest.approx(credited) and without["score"] == pytest.approx(plain)


def test_the_bridge_credit_goes_to_two_hop_training_rows_only():
    train, val = rows("train", 0, bridge_credit=0.3), rows("val", 0, bridge_credit=0.3)
    credited = [r for r in train if "bridge_credit" in r["extra_info"]]
    assert credited and all(
        r["extra_info"]["bridge"] and r["extra_info"]["bridge_credit"] == 0.3 for r in credited
    )
    assert len(credited) == sum(r["data_source"] == "turnrl/search/2hop" for r in train)
    assert not any("bridge_credit" in r["extra_info"] for r in val)
    assert not any("bridge_credit" in r["extra_info"] for r in rows("train", 0))  # off by default


def test_train_val_two_hop_keeps_the_two_hop_questions_of_validations_templates_only(train, val):
    picked = rows("train", 0, train="val_two_hop")
    asked = {r["extra_info"]["template"] for r in val if r["data_source"] == "turnrl/search/2hop"}
    # every training question that is two-hop and of a template validation asks, and no other
    want = {
        r["extra_info"]["index"]
        for r in train
        if r["data_source"] == "turnrl/search/2hop" and r["extra_info"]["template"] in asked
    }
    assert {r["extra_info"]["index"] for r in picked} == want and len(picked) == len(want) > 100
    assert {r["extra_info"]["template"] for r in picked} == asked
    assert all(TEMPLATES[r["extra_info"]["template"]].val for r in picked)
    assert rows("val", 0, train="val_two_hop") == val  # validation is the same whatever trains
    assert [r["extra_info"]["index"] for r in rows("train", 0, train="all")] == [
        r["extra_info"]["index"] for r in train
    ]


def test_train_val_two_hop_mix_adds_one_one_hop_question_for_every_three_two_hop_ones(train, val):
    two_hop = {r["extra_info"]["index"] for r in rows("train", 0, train="val_two_hop")}
    mix = rows("train", 5, train="val_two_hop_mix")
    one_hop = [r for r in mix if r["data_source"] == "turnrl/search/1hop"]
    assert {r["extra_info"]["index"] for r in mix} - {r["extra_info"]["index"] for r in one_hop} == two_hop
    assert len(one_hop) == round(len(two_hop) / 3)  # 330 two-hop: 110 one-hop
    # the same one-hop questions whatever the seed (the first in the fixed order), only shuffled
    again = rows("train", 6, train="val_two_hop_mix")
    assert {r["extra_info"]["index"] for r in again} == {r["extra_info"]["index"] for r in mix}
    assert [r["extra_info"]["index"] for r in again] != [r["extra_info"]["index"] for r in mix]
    assert not {r["extra_info"]["index"] for r in mix} & {r["extra_info"]["index"] for r in val}


def test_counterfactual_keeps_the_names_and_changes_the_answers(tmp_path):
    base, other = rows("val", 0), rows("val", 0, facts_seed=1)
    assert [r["prompt"] for r in base] == [r["prompt"] for r in other]  # the same questions
    changed = sum(a["reward_model"] != b["reward_model"] for a, b in zip(base, other, strict=True))
    assert changed >= 0.75 * len(base)
    titles = [d["contents"].split("\n", 1)[0] for d in builtin_documents()]
    cf = [d["contents"].split("\n", 1)[0] for d in builtin_documents(facts_seed=1)]
    assert titles == cf and builtin_documents() != builtin_documents(facts_seed=1)
    corpus, _ = write_corpus(tmp_path, facts_seed=1)
    texts = corpus.read_text()
    for r in other:  # every counterfactual answer is stated in the counterfactual corpus
        assert r["reward_model"]["ground_truth"]["target"][0] in texts


def test_the_worked_example_is_optional_and_about_nothing_in_the_corpus():
    with_example, without = rows("val", 0)[0], rows("val", 0, example=False)[0]
    assert "Orsolya Pennick" in with_example["prompt"][0]["content"]
    assert "Example:" not in without["prompt"][0]["content"]
    assert question_of(with_example) == question_of(without)
    contents = "\n".join(d["contents"] for d in builtin_documents())
    assert not re.search(r"Orsolya|Pennick|Ashgrove", contents)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"exmple": False},
            "task 'search' takes no argument 'exmple'; its arguments: example, facts_seed, val, bridge_credit, train, val_size",
        ),
        ({"bridge_credit": 0.9}, "bridge_credit must be a number in [0, 0.9), got 0.9"),
        ({"bridge_credit": -0.1}, "bridge_credit must be a number in [0, 0.9), got -0.1"),
        ({"bridge_credit": "0.3"}, "bridge_credit must be a number in [0, 0.9), got '0.3'"),
        ({"bridge_credit": True}, "bridge_credit must be a number"),
        ({"val": "train"}, "val must be one of held_out, demonstrated, got 'train'"),
        ({"val_size": "medium"}, "val_size must be one of large, small, got 'medium'"),
        ({"train": "two_hop"}, "train must be one of all, val_two_hop, val_two_hop_mix, got 'two_hop'"),
        ({"example": "yes"}, "example must be true or false"),
        ({"facts_seed": "one"}, "facts_seed must be an integer"),
    ],
)
def test_an_unknown_or_bad_task_argument_is_one_line(args, message):
    with pytest.raises(TaskArgError) as err:
        rows("val", 0, **args)
    assert message in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(TaskArgError):
        write_corpus(Path("/nonexistent"), **args)


def test_interleave_keeps_every_prefix_at_the_share_hand_worked():
    """Two-hop A, B, C and one-hop x, y, z at share 0.5. Position p takes a two-hop question while
    round(p x 0.5) exceeds the two-hop ones taken (Python rounds halves to even): p1 round(0.5)=0 -> x;
    p2 1 > 0 -> A; p3 round(1.5)=2 > 1 -> B; p4 2 -> y; p5 round(2.5)=2 -> z; p6 one-hop gone -> C."""
    from turnrl.tasks.search import indexed

    _, train = indexed()
    two = [q for q in train if q[1].hops == 2 and not TEMPLATES[q[1].template].compare][:3]
    one = [q for q in train if q[1].hops == 1][:3]
    mixed = [one[0], two[0], one[1], two[1], two[2], one[2]]
    assert search_demos.interleave(mixed, 0.5) == [one[0], two[0], two[1], one[1], one[2], two[2]]
    assert search_demos.interleave(mixed, 0.0) == [*one, *two]  # each kind keeps its own order
    assert search_demos.interleave(mixed, 1.0) == [*two, *one]
