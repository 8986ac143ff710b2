"""The search task's corpus: two invented worlds, one index, and the facts its questions ask for.

Every entity (river, town, person, company) has an invented name, so a language model cannot know
"In which year was Velmora Quist born?" from pre-training: it has to search. The corpus holds two
worlds that never refer to each other: the **training world** and the **validation world** (val
people are born in val towns, which lie on val rivers; val companies are founded by val people and
based in val towns). Questions stay inside one world, so no validation entity is ever on a training
question's answer path, yet both worlds live in one index and are searched together. The task's
validation world has an **extension** (`VAL_EXTENSION` more entities, drawn after everything else, so
the training world and the first validation entities are the same with or without it): more held-out
questions measure a model more finely (`questions.N_VAL`).

Names are drawn so that a partial name is ambiguous: people share first names and surnames
("Velmora Quist", "Velmora Dran", "Tarek Quist") and companies share stems ("Brask Ironworks",
"Brask Mills"); a company's document names its founder and town, so a person's name retrieves
the companies they founded too. The right document is not always first.

Names come from `seed`; facts (years, towns, rivers, professions, founders ...) from
(`seed`, `facts_seed`), the extension's after the two worlds' own. Another `facts_seed` gives a counterfactual corpus: the same entities under
the same names, their facts re-sampled. Everything is a pure function of (n_entities, seed,
facts_seed, val_extension): the task and the index built from the same arguments agree. `builtin_index` is the BM25
index an agent run's search tool serves when `rollout.multi_turn.search` names neither a URL nor an
index.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

_ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "k", "kl", "l", "m", "n", "p", "r", "s", "st", "t", "th", "v", "z", "h", "j")  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou")
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "k", "m")
PROFESSIONS = (
    "cartographer", "violinist", "glassblower", "astronomer", "botanist", "clockmaker",
    "shipwright", "poet", "engineer", "painter", "chemist", "architect", "beekeeper", "weaver",
)  # fmt: skip
# Many trades: a town's trade is a two-hop answer, and a few words would turn up by chance in any
# town's passage.
TRADES = (
    "salt", "wool", "timber", "pottery", "copper", "linen", "cider", "marble", "amber", "tea",
    "silk", "tin", "cheese", "leather", "glass", "paper", "honey", "slate", "hemp", "saffron",
    "indigo", "pewter", "oysters", "lace",
)  # fmt: skip
PRODUCTS = (
    "telescopes", "barometers", "sailcloth", "bicycles", "typewriters", "lanterns", "pianos",
    "compasses", "looms", "ink", "porcelain", "rope", "candles", "maps",
)  # fmt: skip
COMPANY_KINDS = ("Ironworks", "Shipping", "Mills", "Instruments", "Brewing", "Textiles", "Foundry", "Press")
# Words a BM25 tokenizer drops (Lucene's English list): a name made of one would be unsearchable.
# Kept here rather than imported so the generated corpus never changes with a library version.
_STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
    "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
    "will", "with",
))  # fmt: skip
# The names of the prompt's worked example: never generated, so the example is about nothing here.
EXAMPLE_NAMES = frozenset(("orsolya", "pennick", "ashgrove"))
WORLDS = ("train", "val")
VAL_SHARE = 0.25  # of the entities, the validation world's
MIN_WORLD = 8  # a world needs one river, town and company, and people to compare and to found them
MIN_ENTITIES = 2 * MIN_WORLD
# The search task and the built-in index must describe the same invented world.
ENTITIES = 400
# The task's validation world grows by this many entities (80 towns and companies and 112 people with
# its own 100): enough for 80 two-hop questions of each template validation asks. A corpus of another
# size (a test's, a demo's) has no extension unless it asks for one.
VAL_EXTENSION = 220
SEED = 0
FACTS_SEED = 0
INDEX_VERSION = "v2"  # in the built-in index's cache key: a cached index of the v1 corpus is not reused


@dataclass(frozen=True)
class Fact:
    """One fact of one entity: what a one-hop question asks for."""

    title: str  # the entity, by its document's title
    relation: str  # e.g. "birth_year", "founder"
    answers: tuple[str, ...]  # `answers[0]` canonical, the rest accepted aliases
    target: str | None  # the entity the answer names (its title), when it is one: the next hop


@dataclass(frozen=True)
class World:
    """One world's entities by kind (titles) and facts, keyed by (title, relation)."""

    name: str
    rivers: tuple[str, ...]
    towns: tuple[str, ...]
    people: tuple[str, ...]
    companies: tuple[str, ...]
    facts: dict[tuple[str, str], Fact]

    def entities(self) -> tuple[str, ...]:
        return (*self.rivers, *self.towns, *self.people, *self.companies)

    def fact(self, title: str, relation: str) -> Fact:
        return self.facts[(title, relation)]


@dataclass(frozen=True)
class Corpus:
    docs: tuple[tuple[str, str], ...]  # (doc id, contents: title, newline, text)
    worlds: dict[str, World]
    doc_ids: dict[str, str]  # title -> doc id


@dataclass(frozen=True)
class QAPair:
    """One one-hop question; `answers[0]` is the canonical answer, the rest accepted aliases."""

    question: str
    answers: tuple[str, ...]
    doc_id: str  # the single document stating the fact
    title: str  # that document's title: the entity the question is about
    relation: str  # e.g. "birth_year", "founder"
    world: str = "train"


@dataclass(frozen=True)
class BuiltinCorpusPaths:
    corpus: Path
    qa: Path
    num_docs: int
    num_questions: int


class _Names:
    """Unique invented words; a word is never reused, so each names one thing only."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._used: set[str] = set(_STOPWORDS) | EXAMPLE_NAMES

    def word(self) -> str:
        for _ in range(10_000):
            syllables = self._rng.choice((2, 2, 3))
            text = "".join(self._rng.choice(_ONSETS) + self._rng.choice(_VOWELS) for _ in range(syllables))
            text += self._rng.choice(_CODAS)
            if len(text) >= 4 and text not in self._used:
                self._used.add(text)
                return text.capitalize()
        raise RuntimeError("invented-name space exhausted; use fewer entities")

    def words(self, n: int) -> list[str]:
        return [self.word() for _ in range(n)]


def kind_counts(n: int) -> dict[str, int]:
    """Entities of each kind in a world of `n`: people are the rest, at least two."""
    towns, rivers, companies = max(1, n // 4), max(1, (n * 3) // 20), max(1, n // 4)
    return {"river": rivers, "town": towns, "person": n - towns - rivers - companies, "company": companies}


def world_sizes(n_entities: int) -> dict[str, int]:
    val = max(MIN_WORLD, round(n_entities * VAL_SHARE))
    return {"train": n_entities - val, "val": val}


def extension_of(n_entities: int, val_extension: int | None) -> int:
    """The validation world's extension: `val_extension`, or by default (None) `VAL_EXTENSION` for the
    task's corpus (`ENTITIES`) and none for a corpus of another size."""
    if val_extension is None:
        return VAL_EXTENSION if n_entities == ENTITIES else 0
    if val_extension and val_extension < MIN_WORLD:
        raise ValueError(f"val_extension: need 0 or at least {MIN_WORLD}, got {val_extension}")
    return val_extension


def _pairs(rng: random.Random, firsts: list[str], seconds: list[str], n: int) -> list[str]:
    """`n` distinct "first second" names from two pools: every pool word is shared by several names,
    so half a name matches namesakes (the point: a partial-name query is ambiguous)."""
    combos = [f"{a} {b}" for a in firsts for b in seconds]
    rng.shuffle(combos)
    return combos[:n]


@dataclass(frozen=True)
class WorldNames:
    """A world's names: fixed by the name seed whatever the facts are."""

    rivers: tuple[str, ...]  # "X River"
    towns: tuple[str, ...]
    people: tuple[str, ...]
    companies: tuple[str, ...]
    mountains: tuple[str, ...]
    seas: tuple[str, ...]


def _world_names(rng: random.Random, names: _Names, n: int) -> WorldNames:
    c = kind_counts(n)
    rivers = tuple(f"{w} River" for w in names.words(c["river"]))
    towns = tuple(names.words(c["town"]))
    # ~3 people share each first name, ~3 each surname (a tiny world: enough pairs for everyone)
    pool = max(2, math.ceil(c["person"] / 3), math.isqrt(c["person"] - 1) + 1)
    firsts, lasts = names.words(pool), names.words(pool)
    people = tuple(_pairs(rng, firsts, lasts, c["person"]))
    stems = names.words(max(1, math.ceil(c["company"] / 2)))  # ~2 companies per stem
    companies = tuple(_pairs(rng, stems, list(COMPANY_KINDS), c["company"]))
    mountains = tuple(names.words(c["river"]))
    seas = tuple(names.words(max(2, c["river"] // 2)))
    assert len(people) == c["person"] and len(companies) == c["company"], "name pools too small"
    return WorldNames(rivers, towns, people, companies, mountains, seas)


def _facts(rng: random.Random, w: WorldNames) -> tuple[dict[tuple[str, str], Fact], dict[str, str]]:
    """Every fact of a world, drawn from `rng` (the facts seed), and each entity's document text."""
    facts: dict[tuple[str, str], Fact] = {}
    texts: dict[str, str] = {}

    def add(title: str, relation: str, answers: tuple[str, ...], target: str | None = None) -> None:
        assert answers[0] in texts[title], (title, answers[0])  # the answer is in its one document
        facts[(title, relation)] = Fact(title, relation, answers, target)

    for river in w.rivers:
        length, mountain, sea = rng.randint(40, 2400), rng.choice(w.mountains), rng.choice(w.seas)
        texts[river] = (
            f"The {river} is a river {length} kilometres long. "
            f"It rises on Mount {mountain} and flows into the {sea} Sea."
        )
        add(river, "length_km", (str(length),))
        add(river, "source", (f"Mount {mountain}", mountain))
        add(river, "mouth", (f"{sea} Sea", sea, f"the {sea} Sea"))
    for town in w.towns:
        river, year, trade = rng.choice(w.rivers), rng.randint(900, 1899), rng.choice(TRADES)
        texts[town] = f"{town} is a market town on the {river}, founded in {year}. Its main trade is {trade}."
        add(town, "founded", (str(year),))
        add(town, "river", (river, river.removesuffix(" River")), river)
        add(town, "trade", (trade,))
    # distinct birth years: "who was born earlier" never ties, whatever the facts seed
    years = rng.sample(range(1700, 1991), len(w.people))
    for person, year in zip(w.people, years, strict=True):
        town, job = rng.choice(w.towns), rng.choice(PROFESSIONS)
        article = "an" if job[0] in "aeiou" else "a"
        texts[person] = f"{person} is {article} {job}, born in {year} in the town of {town}."
        add(person, "birth_year", (str(year),))
        add(person, "birthplace", (town,), town)
        add(person, "profession", (job,))
    for company in w.companies:
        founder, year = rng.choice(w.people), rng.randint(1750, 2015)
        town, product = rng.choice(w.towns), rng.choice(PRODUCTS)
        texts[company] = (
            f"{company} is a company that makes {product}. "
            f"It was founded in {year} by {founder} and is based in {town}."
        )
        add(company, "founder", (founder,), founder)
        add(company, "company_founded", (str(year),))
        add(company, "headquarters", (town,), town)
        add(company, "product", (product,))
    return facts, texts


@lru_cache(maxsize=8)
def build(
    n_entities: int = ENTITIES,
    seed: int = SEED,
    facts_seed: int = FACTS_SEED,
    val_extension: int | None = None,
) -> Corpus:
    """The corpus: both worlds' documents (training world first, the validation world's extension
    last) and facts. The extension's entities refer only to each other: with it, the validation world
    is two parts that questions never cross, except a comparison of two people."""
    if n_entities < MIN_ENTITIES:
        raise ValueError(f"n_entities: need at least {MIN_ENTITIES}, got {n_entities}")
    extension = extension_of(n_entities, val_extension)
    name_rng = random.Random(seed)
    names = _Names(name_rng)
    # every world's names before any fact: the names never depend on the facts seed; the extension's
    # last, so the two worlds' are the same with or without it
    parts = {w: [_world_names(name_rng, names, n)] for w, n in world_sizes(n_entities).items()}
    if extension:
        parts["val"].append(_world_names(name_rng, names, extension))
    fact_rng = random.Random(f"{seed}/facts/{facts_seed}")
    docs: list[tuple[str, str]] = []
    doc_ids: dict[str, str] = {}
    drawn: dict[str, list[tuple[WorldNames, dict[tuple[str, str], Fact]]]] = {w: [] for w in parts}
    # facts in the order of the documents (training, validation, its extension): the extension's
    # draws come after every other, so they change nothing before them
    for name, wn in ((w, wn) for w, world_parts in parts.items() for wn in world_parts):
        facts, texts = _facts(fact_rng, wn)
        for title, text in texts.items():
            doc_ids[title] = str(len(docs))
            docs.append((doc_ids[title], f"{title}\n{text}"))
        drawn[name].append((wn, facts))
    return Corpus(tuple(docs), {w: _joined(w, drawn[w]) for w in parts}, doc_ids)


def _joined(name: str, parts: list[tuple[WorldNames, dict[tuple[str, str], Fact]]]) -> World:
    """One world of its parts' entities (in order) and facts."""

    def kind(attr: str) -> tuple[str, ...]:
        return tuple(title for wn, _ in parts for title in getattr(wn, attr))

    facts = {key: fact for _, part in parts for key, fact in part.items()}
    return World(name, kind("rivers"), kind("towns"), kind("people"), kind("companies"), facts)


# The one-hop question of each relation, as the corpus's own question list (`qa.jsonl`) words it.
# The task's rows word questions with several phrasings each (`tasks.search.questions`).
CANONICAL = {
    "length_km": "How long is the {e}, in kilometres?",
    "source": "On which mountain does the {e} rise?",
    "mouth": "Into which sea does the {e} flow?",
    "founded": "In which year was the town of {e} founded?",
    "river": "On which river does the town of {e} lie?",
    "trade": "What is the main trade of the town of {e}?",
    "birth_year": "In which year was {e} born?",
    "birthplace": "In which town was {e} born?",
    "profession": "What is the profession of {e}?",
    "founder": "Who founded {e}?",
    "company_founded": "In which year was {e} founded?",
    "headquarters": "In which town is {e} based?",
    "product": "What does {e} make?",
}


def builtin_documents(
    n_entities: int = ENTITIES,
    seed: int = SEED,
    facts_seed: int = FACTS_SEED,
    val_extension: int | None = None,
) -> list[dict[str, str]]:
    """Corpus rows `{id, contents}`, title on the first line of `contents`."""
    return [{"id": i, "contents": c} for i, c in build(n_entities, seed, facts_seed, val_extension).docs]


def builtin_qa(
    n_entities: int = ENTITIES,
    seed: int = SEED,
    facts_seed: int = FACTS_SEED,
    val_extension: int | None = None,
) -> list[QAPair]:
    """Every fact of the corpus (both worlds) as a one-hop question, in a seed-shuffled order."""
    corpus = build(n_entities, seed, facts_seed, val_extension)
    qa = [
        QAPair(
            CANONICAL[f.relation].format(e=f.title),
            f.answers,
            corpus.doc_ids[f.title],
            f.title,
            f.relation,
            w.name,
        )
        for w in corpus.worlds.values()
        for f in w.facts.values()
    ]
    random.Random(seed).shuffle(qa)
    return qa


def write_builtin_corpus(
    out_dir: str | Path,
    n_entities: int = ENTITIES,
    seed: int = SEED,
    facts_seed: int = FACTS_SEED,
    val_extension: int | None = None,
) -> BuiltinCorpusPaths:
    """Write `corpus.jsonl` ({id, contents}) and `qa.jsonl` (every one-hop fact question) into `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    args = (n_entities, seed, facts_seed, val_extension)
    docs, qa = builtin_documents(*args), builtin_qa(*args)
    corpus_path, qa_path = out / "corpus.jsonl", out / "qa.jsonl"
    with corpus_path.open("w", encoding="utf-8") as handle:
        for row in docs:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    with qa_path.open("w", encoding="utf-8") as handle:
        for pair in qa:
            handle.write(
                json.dumps({**asdict(pair), "answers": list(pair.answers)}, ensure_ascii=False) + "\n"
            )
    return BuiltinCorpusPaths(corpus_path, qa_path, len(docs), len(qa))


def builtin_index(cache: Path) -> Path:
    """A BM25 index over the task's corpus (`ENTITIES` and the validation world's `VAL_EXTENSION`,
    `SEED`, `FACTS_SEED`), built once into `cache` (about a second)."""
    from turnrl.servers.retriever.index import build_index

    name = f"builtin-{INDEX_VERSION}-{ENTITIES}+{VAL_EXTENSION}-seed{SEED}-facts{FACTS_SEED}"
    out = cache / "retriever" / name
    if (out / "meta.json").is_file():
        return out
    # build beside the target and rename, so two runs starting together never see half an index
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    paths = write_builtin_corpus(tmp / "corpus", ENTITIES, SEED, FACTS_SEED, VAL_EXTENSION)
    build_index(paths.corpus, tmp / "index", show_progress=False)
    try:
        (tmp / "index").rename(out)
    except OSError:
        if not (out / "meta.json").is_file():
            raise
    shutil.rmtree(tmp, ignore_errors=True)
    return out
