"""Scripted search-agent episodes for a supervised cold start (`turnrl data search_sft` writes them).

Each row is the search task's training row (`tasks.search.make_row`, the very prompt RL samples
from) plus an `episode`: what a successful agent episode holds in the XML protocol, model turns and
observations in order (docs/sft.md):

    assistant    <think> I need to find the year Velmora Quist was born. </think>\\n<search> Velmora Quist birth year </search>
    observation  tag "information": Doc 1(Title: Velmora Quist) Velmora Quist is a poet, born in 1854 ...
    assistant    <think> Doc 1 says: ... So the answer is 1854. </think>\\n<answer> 1854 </answer>

A two-hop demonstration searches twice: the first search finds the bridge entity ("So Velmora Quist
was born in Drelith. Now I need the river the town of Drelith lies on."), the second names it.

Which questions: training-world questions only (`questions.split`), one-hop ones and the two-hop
templates validation never asks (`questions.DEMO_TEMPLATES`): the templates validation asks are
left for RL to generalise to. A training question whose text equals a validation question's is
excluded too.

The observation is a real search: the built-in BM25 index, searched in-process with the tool's `topk`
and rendered by the tool's own `passages_text`, so a live search for that query shows the model the
same text. A step is kept only when the passages include the document stating its fact; when a
query misses, the episode searches again with another query, and a question no query finds is
skipped. A `--retry-fraction` of one-hop first queries leave the entity's name out (as a careless
first query would), so the data also shows a second search after a miss. Phrasing is drawn from
(seed, question), so a question's demonstration does not depend on `--n`.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from turnrl.errors import TurnrlInputError
from turnrl.tasks.search import indexed, make_row
from turnrl.tasks.search.corpus import build as build_corpus
from turnrl.tasks.search.corpus import builtin_index
from turnrl.tasks.search.questions import DEMO_TEMPLATES, TEMPLATES, Question


class Phrasing(NamedTuple):
    kind: str  # entities of its kind, plural: the think text after a nameless query names them
    what: str  # the fact sought, `{e}` the entity: "the year {e} was born"
    keywords: str  # a named keyword query
    vague: str  # a query without the entity's name: it finds other entities' documents


RELATIONS: dict[str, Phrasing] = {
    "birth_year": Phrasing("people", "the year {e} was born", "{e} birth year", "born in the year"),
    "birthplace": Phrasing("people", "the town where {e} was born", "{e} born town", "born in the town of"),
    "profession": Phrasing("people", "the profession of {e}", "{e} profession", "person profession job"),
    "founded": Phrasing("towns", "the year the town of {e} was founded", "{e} town founded", "market town founded in"),
    "river": Phrasing("towns", "the river the town of {e} lies on", "{e} town river", "market town on the river"),
    "trade": Phrasing("towns", "the main trade of {e}", "{e} main trade", "town main trade"),
    "length_km": Phrasing("rivers", "the length of the {e} in kilometres", "{e} length kilometres", "river kilometres long"),
    "source": Phrasing("rivers", "the mountain where the {e} rises", "{e} rises mount", "river rises on mount"),
    "mouth": Phrasing("rivers", "the sea the {e} flows into", "{e} flows into sea", "river flows into the sea"),
    "founder": Phrasing("companies", "who founded {e}", "{e} founder", "company founded by"),
    "company_founded": Phrasing("companies", "the year {e} was founded", "{e} founded year", "company founded in year"),
    "headquarters": Phrasing("companies", "the town where {e} is based", "{e} based in town", "company based in town"),
    "product": Phrasing("companies", "what {e} makes", "{e} makes products", "company that makes"),
}  # fmt: skip
FIRST_THOUGHTS = (
    "I need to find {what}.",
    "I do not know {what}, so I will search for it.",
    "The question asks for {what}. Let me search.",
    "I have never heard of {e}. I should look up {what}.",
)
# A two-hop opener never starts like a one-hop one (greedy decoding commits at the first words: when
# both began "I do not know ...", a model trained on both opened every greedy episode as a one-hop one),
# and a bridge step never starts like an answer (answers open with "Doc", "According", "The passage",
# "I found"). A bridge step also says it is not the answer before it copies anything, and then
# shares no words with an answer: when it copied the passage's sentence first and went on "So it is X.
# That is not the answer yet." (an answer goes on "So the answer is X."), one SFT seed ended 30 of 32
# demonstrated bridge steps as answers; when it committed first and then copied the sentence as
# answers do ("Doc 1 says: ..."), seeds 1 and 3 wrote answers that ended as bridge steps and searched
# again until the turn limit (docs/results/search-agent.md).
TWO_HOP_THOUGHTS = (
    "This takes two searches. First I need {what}.",
    "This takes two searches: first {what}, then what the question asks about it.",
    "This takes two searches. The answer depends on {what}, which I must look up first.",
)
BRIDGE_COMMIT = "First step done, not the answer yet."
# the bridge is named after the description the opener copied from the question ("The founder of X
# is Y"): without it, one seed named whichever entity the passage held first (a company's town for
# its founder) on 7 of 32 demonstrated questions (docs/results/search-agent.md)
BRIDGE_THOUGHTS = (
    BRIDGE_COMMIT + " {Described} is {bridge}, so now I need {what}.",
    BRIDGE_COMMIT + " {Described} is {bridge}. I still need {what}, so I will search for it.",
    BRIDGE_COMMIT + " The question asks about {described}, which is {bridge}, so I search again for {what}.",
)
# `opener="subject"`: every opening thought first names what the question is about, copied from the
# question: the entity itself for a one-hop question, the bridge's description for a two-hop one. The
# choice of protocol then comes after copied words (the description's first word, "town", "founder",
# "river", against the entity's name) rather than as the first word of the episode, where a model
# trained on both kinds opened every greedy episode alike, chosen by the seed (docs/results/search-agent.md).
SUBJECT = "This question is about {subject}."
BRIDGE_SUBJECT = {  # the bridge, as the two-hop questions describe it, by the first relation
    "birthplace": "the town where {e} was born",
    "founder": "the founder of {e}",
    "headquarters": "the town where {e} is based",
    "river": "the river through {e}",
}
# `opener="joined"`: the same, with a two-hop question's description and "this takes two searches"
# in one sentence ("This question is about the founder of X, so this takes two searches."), so no
# sentence boundary falls between them where a one-hop opener could start: with "subject", a model
# that described the bridge still went on "I need to find ..." and searched once in some episodes.
OPENERS = ("plain", "subject", "joined")
DEFAULT_OPENER = "joined"
RETRY_THOUGHTS = {  # after a query that missed: with the name left out, or with it
    False: "These passages are about other {kind}, not {e}. I should search again with its name.",
    True: "The results do not say {what}. Let me try a more specific query.",
}
ANSWER_THOUGHTS = (
    "Doc {i} says: {sentence} So the answer is {answer}.",
    "According to Doc {i}: {sentence}",
    "The passage about {title} gives it: {answer}.",
    "I found it in Doc {i}. {sentence}",
)
MAX_SEARCHES = 2  # per fact looked up


class DemoError(TurnrlInputError):
    """A question the demonstrations cannot script; the message names what to add."""


class InProcessSearch:
    """The built-in BM25 index searched in-process, rendered as the search tool renders results."""

    def __init__(self, cache: Path, topk: int):
        from turnrl.servers.retriever.index import load_index  # bm25s: only when demonstrations are built

        self.index, self.topk = load_index(builtin_index(cache)), topk

    def __call__(self, query: str) -> tuple[str, list[dict[str, str]]]:
        """(the observation text, the documents in rank order) for one query."""
        from turnrl.agent.tools.search import passages_text  # numpy and httpx: only when searching

        # the same calls as the retriever server's /retrieve, minus HTTP
        positions, _ = self.index.searcher.search([query], self.topk)
        docs = self.index.corpus.documents(positions.reshape(-1).tolist())
        return passages_text(docs), docs


@dataclass
class Report:
    questions: int = 0
    """Training questions a demonstration may use (one-hop and the demonstrated two-hop templates)."""
    excluded: int = 0
    """Training questions whose text equals a validation question's."""
    used: int = 0
    searches: Counter[int] = field(default_factory=Counter)
    """Written demonstrations by number of searches."""
    missed: Counter[str] = field(default_factory=Counter)
    """Queries that missed the fact, by style (each followed by another search)."""
    skipped: list[str] = field(default_factory=list)
    first_styles: Counter[str] = field(default_factory=Counter)
    templates: Counter[str] = field(default_factory=Counter)
    """Written demonstrations by template."""


def _fact_sentence(contents: str, answer: str) -> str:
    text = contents.split("\n", 1)[-1]  # the first line is the title
    return next((s for s in re.split(r"(?<=\.)\s+", text) if answer in s), text)


def _found(docs: list[dict[str, str]], doc_id: str) -> bool:
    return any(d["id"] == doc_id for d in docs)


@dataclass
class _Step:
    """One fact looked up: the searches it took, and where the document came back."""

    turns: list[dict[str, str]]
    missed: list[str]
    docs: list[dict[str, str]]
    rank: int  # -1: no query found it


def _look_up(
    search: Any, queries: dict[str, str], styles: list[str], doc_id: str, thought: str, retry: dict[str, str]
) -> _Step:
    """Search with each style's query in turn until the passages include `doc_id` (at most
    `MAX_SEARCHES`); `retry` is the thought after a miss, by whether the missed query was named."""
    turns: list[dict[str, str]] = []
    missed: list[str] = []
    for style in styles[:MAX_SEARCHES]:
        text, docs = search(queries[style])
        turns.append(
            {
                "role": "assistant",
                "content": f"<think> {thought} </think>\n<search> {queries[style]} </search>",
            }
        )
        turns.append({"role": "observation", "tag": "information", "content": text})
        if _found(docs, doc_id):
            rank = next(i for i, d in enumerate(docs) if d["id"] == doc_id)
            return _Step(turns, missed, docs, rank)
        missed.append(style)
        thought = retry["named" if style != "vague" else "vague"]
    return _Step(turns, missed, [], -1)


def _phrasing(relation: str) -> Phrasing:
    p = RELATIONS.get(relation)
    if p is None:
        raise DemoError(f"search_sft: no phrasing for relation '{relation}' (add it to RELATIONS)")
    return p


def demonstration(
    q: Question,
    index: int,
    seed: int,
    search: Any,
    retry_fraction: float,
    report: Report,
    doc_ids: dict[str, str],
    opener: str = DEFAULT_OPENER,
) -> dict[str, Any] | None:
    """The task row of question `q` with its scripted `episode`, or None when no query finds a fact.
    `opener`: one of `OPENERS` ("subject", "joined": the opening thought first names what the question
    is about)."""
    t = TEMPLATES[q.template]
    rng = random.Random(f"{seed}/{q.text}")  # a question's wording does not depend on --n
    answer = q.answers[0]
    episode: list[dict[str, str]] = []
    missed: list[str] = []
    first_style = ""
    step: _Step | None = None
    # every draw from `rng` happens in this order, hop by hop: a reordering would reword every row
    for hop, relation in enumerate(t.chain):
        e, p = q.entities[hop], _phrasing(relation)
        fill, queries, retry = _wording(q, e, p)
        styles = rng.sample(["question" if hop == 0 else "name", "keywords"], 2)
        if hop == 0:
            one = t.hops == 1
            described = "" if one else _described(e, relation)
            thought = rng.choice(FIRST_THOUGHTS if one else TWO_HOP_THOUGHTS).format(**fill)
            if opener != "plain":
                subject = _subject(e, p, described)
                joined = opener == "joined" and not one
                thought = (
                    f"{subject[:-1]}, so {thought[0].lower()}{thought[1:]}"
                    if joined
                    else f"{subject} {thought}"
                )
            # a nameless first query only where it really misses: one that hits by luck teaches nothing
            if one and rng.random() < retry_fraction and not _found(search(p.vague)[1], doc_ids[e]):
                styles.insert(0, "vague")
            first_style = styles[0]
        else:
            assert step is not None  # the bridge step: the first hop found the bridge entity
            thought = _bridge_thought(rng, described, e, fill["what"])
        step = _look_up(search, queries, styles, doc_ids[e], thought, retry)
        if step.rank < 0:
            report.missed.update(missed + step.missed[:-1])  # the last miss was followed by no search
            report.skipped.append(f"{q.text} (no query retrieved the document of {e})")
            return None
        episode += step.turns
        missed += step.missed
    assert step is not None
    report.missed.update(missed)
    return _answered(q, index, answer, rng, step, episode, first_style, report)


def _subject(e: str, p: Phrasing, described: str) -> str:
    """The opener's first sentence: the bridge's description (`_described`) for a two-hop question,
    or, where there is none (""), the entity the question is about."""
    if not described:
        return SUBJECT.format(subject=f"the {e}" if p.kind == "rivers" else e)
    return SUBJECT.format(subject=described)


def _described(e: str, bridge_relation: str) -> str:
    """The bridge as a two-hop question about `e` describes it ("the founder of Sithin Press")."""
    described = BRIDGE_SUBJECT.get(bridge_relation)
    if described is None:
        raise DemoError(
            f"search_sft: no bridge description for relation '{bridge_relation}' (add it to BRIDGE_SUBJECT)"
        )
    return described.format(e=e)


def _wording(q: Question, e: str, p: Phrasing) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """One hop's words: the thoughts' fill-ins, the queries by style, the retry thoughts by missed style."""
    fill = {"e": e, "what": p.what.format(e=e), "kind": p.kind}
    queries = {"keywords": p.keywords.format(e=e), "vague": p.vague, "question": q.text, "name": e}
    retry = {
        "named": RETRY_THOUGHTS[True].format(**fill),
        "vague": RETRY_THOUGHTS[False].format(**fill),
    }
    return fill, queries, retry


def _bridge_thought(rng: random.Random, described: str, bridge: str, what: str) -> str:
    """The second hop's thought: `bridge`, found by the first hop, as the question `described` it,
    and what to look up about it."""
    cap = described[0].upper() + described[1:]
    return rng.choice(BRIDGE_THOUGHTS).format(Described=cap, described=described, bridge=bridge, what=what)


def _answered(
    q: Question,
    index: int,
    answer: str,
    rng: random.Random,
    step: _Step,
    episode: list[dict[str, str]],
    first_style: str,
    report: Report,
) -> dict[str, Any]:
    """Close `episode` with the answer turn, count it in `report`, and return its task row."""
    sentence = _fact_sentence(step.docs[step.rank]["contents"], answer)
    final = rng.choice(ANSWER_THOUGHTS).format(
        i=step.rank + 1, sentence=sentence, answer=answer, title=q.entities[TEMPLATES[q.template].hops - 1]
    )
    episode.append({"role": "assistant", "content": f"<think> {final} </think>\n<answer> {answer} </answer>"})
    searches = len(episode) // 2
    report.searches[searches] += 1
    report.first_styles[first_style] += 1
    report.templates[q.template] += 1
    row = make_row(q, "train", index)
    row["extra_info"].update(searches=searches, first_query=first_style)
    row["episode"] = episode
    return row


def build(
    n: int | None,
    seed: int,
    topk: int,
    retry_fraction: float,
    cache: Path,
    two_hop_share: float | None = None,
    opener: str = DEFAULT_OPENER,
) -> tuple[list[dict[str, Any]], Report]:
    """Demonstrations for up to `n` training questions (all when None), in a seed-shuffled order.
    `two_hop_share`: the share of the `n` questions that are two-hop (None: as they come, about a
    quarter); a question that no query finds is skipped, so the written share can differ a little.
    `opener`: how an episode's first thought begins (`OPENERS`; "plain": the protocol's first words)."""
    val, train = indexed()
    held_out = {q.text for _, q in val}
    train = [(i, q) for i, q in train if q.template in DEMO_TEMPLATES]
    report = Report(questions=len(train))
    train = [(i, q) for i, q in train if q.text not in held_out]
    report.excluded = report.questions - len(train)
    random.Random(seed).shuffle(train)
    if two_hop_share is not None:
        train = interleave(train, two_hop_share)
    train = train[:n] if n is not None else train
    report.used = len(train)
    search = InProcessSearch(cache, topk)
    doc_ids = build_doc_ids()
    if opener not in OPENERS:
        raise DemoError(f"search_sft: --opener must be one of {', '.join(OPENERS)}, got '{opener}'")
    rows = [demonstration(q, i, seed, search, retry_fraction, report, doc_ids, opener) for i, q in train]
    return [r for r in rows if r is not None], report


def interleave(questions: list[tuple[int, Question]], share: float) -> list[tuple[int, Question]]:
    """The questions reordered so that every prefix is `share` two-hop (rounded) while both kinds
    last, each kind in its own order: the first n are the same whatever n (a demonstration set
    grows by adding, never by swapping)."""
    kinds = {True: [q for q in questions if q[1].hops == 2], False: [q for q in questions if q[1].hops != 2]}
    taken = {True: 0, False: 0}
    out: list[tuple[int, Question]] = []
    for position in range(1, len(questions) + 1):
        left = {k: taken[k] < len(v) for k, v in kinds.items()}
        two = left[True] and (not left[False] or round(position * share) > taken[True])
        out.append(kinds[two][taken[two]])
        taken[two] += 1
    return out


def corpus_size() -> int:
    """Documents in the built-in corpus: the most passages one search can return (`topk`)."""
    return len(build_corpus().docs)


def build_doc_ids() -> dict[str, str]:
    """Title -> document id of the built-in corpus (the index `InProcessSearch` searches)."""
    return dict(build_corpus().doc_ids)
