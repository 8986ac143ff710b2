"""Scripted search-agent episodes for a supervised cold start (`turnrl data search_sft` writes them).

Each row is the search task's training row (`tasks.search.make_row`, the very prompt
RL samples from) plus an `episode`: what a successful agent episode holds in the XML protocol, model
turns and observations in order (docs/sft.md):

    assistant    <think> I need to find the year Velmora Quist was born. </think>\\n<search> Velmora Quist birth year </search>
    observation  tag "information": Doc 1(Title: Velmora Quist) Velmora Quist is a poet, born in 1854 ...
    assistant    <think> Doc 1 says: ... So the answer is 1854. </think>\\n<answer> 1854 </answer>

The observation is a real search: the built-in BM25 index, searched in-process with the tool's `topk`
and rendered by the tool's own `passages_text`, so a live search for that query shows the model the
same text. A demonstration is kept only when the passages include the one document stating the fact;
when a query misses, the episode searches again with a named query, and a question no query finds
is skipped. A `--retry-fraction` of first queries leave the entity's name out (as a careless first
query would), so the data also shows a second search after a miss: with the name in the query the
built-in index always ranks the right document first.

Only training questions are used (`tasks.search.split_questions`), never the validation ones;
a training question whose text equals a validation question's is excluded too. Phrasing is drawn
from (seed, question), so a question's demonstration does not depend on `--n`.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from turnrl.errors import TurnrlInputError
from turnrl.tasks.search import make_row, split_questions
from turnrl.tasks.search.corpus import ENTITIES, SEED, QAPair, builtin_index, builtin_qa


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
MAX_SEARCHES = 2


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
    """Training questions of the task."""
    excluded: int = 0
    """Training questions whose text equals a validation question's."""
    used: int = 0
    searches: Counter[int] = field(default_factory=Counter)
    """Written demonstrations by number of searches."""
    missed: Counter[str] = field(default_factory=Counter)
    """Queries that missed the fact, by style (each followed by another search)."""
    skipped: list[str] = field(default_factory=list)
    first_styles: Counter[str] = field(default_factory=Counter)


def _fact_sentence(contents: str, answer: str) -> str:
    text = contents.split("\n", 1)[-1]  # the first line is the title
    return next((s for s in re.split(r"(?<=\.)\s+", text) if answer in s), text)


def _found(docs: list[dict[str, str]], doc_id: str) -> bool:
    return any(d["id"] == doc_id for d in docs)


def demonstration(
    q: QAPair, index: int, seed: int, search: InProcessSearch, retry_fraction: float, report: Report
) -> dict[str, Any] | None:
    """The task row of question `q` with its scripted `episode`, or None when no query finds its fact."""
    p = RELATIONS.get(q.relation)
    if p is None:
        raise DemoError(f"search_sft: no phrasing for relation '{q.relation}' (add it to RELATIONS)")
    rng = random.Random(f"{seed}/{q.question}")  # a question's wording does not depend on --n
    e, answer = q.title, q.answers[0]
    fill = {"e": e, "what": p.what.format(e=e), "kind": p.kind}
    queries = {"question": q.question, "keywords": p.keywords.format(e=e), "vague": p.vague}
    styles = rng.sample(["question", "keywords"], 2)
    # a nameless first query only where it really misses: one that hits by luck teaches nothing
    if rng.random() < retry_fraction and not _found(search(p.vague)[1], q.doc_id):
        styles.insert(0, "vague")
    thought = rng.choice(FIRST_THOUGHTS).format(**fill)
    episode: list[dict[str, str]] = []
    missed: list[str] = []
    for style in styles[:MAX_SEARCHES]:
        text, docs = search(queries[style])
        episode.append(
            {
                "role": "assistant",
                "content": f"<think> {thought} </think>\n<search> {queries[style]} </search>",
            }
        )
        episode.append({"role": "observation", "tag": "information", "content": text})
        if _found(docs, q.doc_id):
            break
        missed.append(style)
        thought = RETRY_THOUGHTS[style != "vague"].format(**fill)
    else:
        report.missed.update(missed[:-1])  # the last miss was followed by no search
        report.skipped.append(f"{q.question} (no query retrieved its document {q.doc_id})")
        return None
    report.missed.update(missed)
    rank = next(i for i, d in enumerate(docs) if d["id"] == q.doc_id)
    sentence = _fact_sentence(docs[rank]["contents"], answer)
    final = rng.choice(ANSWER_THOUGHTS).format(i=rank + 1, sentence=sentence, answer=answer, title=e)
    episode.append({"role": "assistant", "content": f"<think> {final} </think>\n<answer> {answer} </answer>"})
    searches = len(episode) // 2
    report.searches[searches] += 1
    report.first_styles[styles[0]] += 1
    row = make_row(q.question, list(q.answers), "train", index, q.relation)
    row["extra_info"].update(searches=searches, first_query=styles[0])
    row["episode"] = episode
    return row


def build(
    n: int | None, seed: int, topk: int, retry_fraction: float, cache: Path
) -> tuple[list[dict[str, Any]], Report]:
    """Demonstrations for up to `n` training questions (all when None), in a seed-shuffled order."""
    indexed = list(enumerate(builtin_qa(ENTITIES, SEED)))  # index = the task row's
    val, train = split_questions(indexed)
    held_out = {q.question for _, q in val}
    report = Report(questions=len(train))
    train = [(i, q) for i, q in train if q.question not in held_out]
    report.excluded = report.questions - len(train)
    random.Random(seed).shuffle(train)
    train = train[:n] if n is not None else train
    report.used = len(train)
    search = InProcessSearch(cache, topk)
    rows = [demonstration(q, i, seed, search, retry_fraction, report) for i, q in train]
    return [r for r in rows if r is not None], report
