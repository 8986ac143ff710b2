"""The search task's questions: one-hop, two-hop (a bridge entity between) and comparisons.

A question is a chain of facts (`corpus.Fact`): a one-hop question asks one fact of a named entity;
a two-hop question asks a fact of the entity that a first fact names (the **bridge**: "On which
river lies the town where X was born?" asks X's birthplace, then that town's river); a comparison
asks the same fact of two named entities and answers with a name.

Validation questions come from the validation world only, training questions from the training
world only (`corpus`), so no validation entity is on a training question's path. Each template has
several phrasings; the last `held_out` of them word validation questions only. Two-hop templates
are split too: the ones validation asks (`Template.val`) are in RL's training rows but never in the
SFT demonstrations, which may show the others (`DEMO_TEMPLATES`).

Which questions are asked, and how they are worded, is drawn from the name seed only: a
counterfactual corpus (another facts seed) asks the same questions and expects its own answers.

Validation comes in two sizes (`VAL_SIZES`): "large" (the default) asks about the validation world
with its extension (`corpus.VAL_EXTENSION`), as evenly as it can over the templates and, within each,
over the phrasings; "small" is the validation world alone, sampled as before the extension existed
(the figures of docs/results/search-agent.md). Training questions are the same for both.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from functools import lru_cache

from turnrl.tasks.search.corpus import ENTITIES, FACTS_SEED, SEED, World, build


@dataclass(frozen=True)
class Template:
    name: str
    chain: tuple[str, ...]  # the relations looked up in turn (a comparison: the one compared)
    subject: str  # the kind of entity named in the question
    phrasings: tuple[str, ...]  # "{e}" the entity; comparisons "{a}" and "{b}"
    val: bool = False  # validation asks it
    held_out: int = 1  # the last phrasings word validation questions only
    compare: bool = False

    @property
    def hops(self) -> int:
        return 2 if self.compare else len(self.chain)

    def phrasing_ids(self, split: str) -> range:
        n = len(self.phrasings)
        return range(n) if split == "val" else range(n - self.held_out)


T = Template
ONE_HOP = (
    T("length_km", ("length_km",), "river", ("How long is the {e}, in kilometres?", "What is the length of the {e} in kilometres?", "How many kilometres long is the {e}?"), True),
    T("source", ("source",), "river", ("On which mountain does the {e} rise?", "Where does the {e} rise?", "Name the mountain where the {e} has its source."), True),
    T("mouth", ("mouth",), "river", ("Into which sea does the {e} flow?", "Which sea does the {e} flow into?", "Where does the {e} end: in which sea?"), True),
    T("founded", ("founded",), "town", ("In which year was the town of {e} founded?", "When was {e} founded?", "What year was the market town {e} founded in?"), True),
    T("river", ("river",), "town", ("On which river does the town of {e} lie?", "Which river is {e} on?", "Name the river that flows through {e}."), True),
    T("trade", ("trade",), "town", ("What is the main trade of the town of {e}?", "What is {e} known for trading?", "Which trade is the town of {e} chiefly engaged in?"), True),
    T("birth_year", ("birth_year",), "person", ("In which year was {e} born?", "When was {e} born?", "What is the birth year of {e}?"), True),
    T("birthplace", ("birthplace",), "person", ("In which town was {e} born?", "Where was {e} born?", "Name the birthplace of {e}."), True),
    T("profession", ("profession",), "person", ("What is the profession of {e}?", "What does {e} do for a living?", "What is {e}'s occupation?"), True),
    T("founder", ("founder",), "company", ("Who founded {e}?", "Who is the founder of {e}?", "Name the person who founded {e}."), True),
    T("company_founded", ("company_founded",), "company", ("In which year was {e} founded?", "When was {e} established?", "What year did {e} begin?"), True),
    T("headquarters", ("headquarters",), "company", ("In which town is {e} based?", "Where is {e} based?", "Which town is home to {e}?"), True),
    T("product", ("product",), "company", ("What does {e} make?", "What product does {e} manufacture?", "Which goods are made by {e}?"), True),
)  # fmt: skip
TWO_HOP = (
    # asked by validation (and in RL's training rows), never demonstrated
    T("birthplace_river", ("birthplace", "river"), "person", ("On which river lies the town where {e} was born?", "{e} was born in a town. Which river does that town lie on?", "Name the river of the town in which {e} was born."), True),
    T("founder_birth_year", ("founder", "birth_year"), "company", ("In which year was the founder of {e} born?", "{e} was founded by someone. In which year was that person born?", "What is the birth year of the person who founded {e}?"), True),
    T("headquarters_trade", ("headquarters", "trade"), "company", ("What is the main trade of the town where {e} is based?", "{e} is based in a town. What is that town's main trade?", "Which trade is the home town of {e} known for?"), True),
    T("river_mouth", ("river", "mouth"), "town", ("Into which sea flows the river on which {e} lies?", "The town of {e} lies on a river. Into which sea does it flow?", "Which sea does the river through {e} reach?"), True),
    # training only: the demonstrations may show these
    T("birthplace_founded", ("birthplace", "founded"), "person", ("In which year was the town where {e} was born founded?", "{e} was born in a town. When was that town founded?")),
    T("founder_profession", ("founder", "profession"), "company", ("What is the profession of the founder of {e}?", "{e} was founded by someone. What is that person's profession?")),
    T("founder_birthplace", ("founder", "birthplace"), "company", ("In which town was the founder of {e} born?", "{e} was founded by someone. Where was that person born?")),
    T("headquarters_river", ("headquarters", "river"), "company", ("On which river lies the town where {e} is based?", "{e} is based in a town. Which river is that town on?")),
    T("river_source", ("river", "source"), "town", ("On which mountain does the river through {e} rise?", "The town of {e} lies on a river. Where does that river rise?")),
)  # fmt: skip
COMPARE = (
    T("born_earlier", ("birth_year",), "person", ("Who was born earlier, {a} or {b}?", "Which of {a} and {b} was born first?", "Of {a} and {b}, who is older?"), True, compare=True),
    T("founded_earlier", ("company_founded",), "company", ("Which was founded earlier, {a} or {b}?", "Which of {a} and {b} is the older company?"), compare=True),
)  # fmt: skip
TEMPLATES = {t.name: t for t in (*ONE_HOP, *TWO_HOP, *COMPARE)}
VAL_TWO_HOP = frozenset(t.name for t in (*TWO_HOP, *COMPARE) if t.val)
DEMO_TEMPLATES = frozenset((*(t.name for t in ONE_HOP), *(t.name for t in TWO_HOP if not t.val)))

# Validation: this many of each sort, from the validation world (at least half two-hop), by size; the
# large one asks each two-hop template validation asks 80 times, each of their three phrasings 26-27
N_VAL = {
    "large": {"1hop": 120, "2hop": 320, "compare": 72},
    "small": {"1hop": 40, "2hop": 64, "compare": 24},
}
VAL_SIZES = tuple(N_VAL)
# `corpus.build`'s `val_extension` by size: the task's corpus's own (`corpus.VAL_EXTENSION`), or none
VAL_EXTENSIONS: dict[str, int | None] = {"large": None, "small": 0}
N_PROBE = 64  # the demonstrated two-hop templates asked about validation entities (`demonstrated_probe`)


@dataclass(frozen=True)
class Question:
    text: str
    answers: tuple[str, ...]
    template: str
    phrasing: int
    hops: int
    sort: str  # "1hop", "2hop" or "compare": the row's data source
    subjects: tuple[str, ...]  # the entities the question names
    entities: tuple[str, ...]  # every entity on the answer path, by title
    bridge: str | None  # a two-hop question's bridge entity
    relation: str  # the last relation looked up
    world: str

    @property
    def doc_titles(self) -> tuple[str, ...]:
        """The documents stating the facts needed, in the order they are needed."""
        return self.entities if self.sort == "compare" else self.entities[: self.hops]


def sort_of(t: Template) -> str:
    return "compare" if t.compare else f"{t.hops}hop"


def ask(world: World, t: Template, subjects: tuple[str, ...], phrasing: int) -> Question:
    """The question of template `t` about `subjects` in `world`, with its answer and path."""
    if t.compare:
        a, b = subjects
        year = {s: int(world.fact(s, t.chain[0]).answers[0]) for s in subjects}
        answer = a if year[a] < year[b] else b
        text = t.phrasings[phrasing].format(a=a, b=b)
        return Question(
            text, (answer,), t.name, phrasing, 2, "compare", subjects, subjects, None, t.chain[0], world.name
        )
    (subject,) = subjects
    path, fact = [subject], world.fact(subject, t.chain[0])
    for relation in t.chain[1:]:
        assert fact.target is not None, (t.name, relation)
        path.append(fact.target)
        fact = world.fact(fact.target, relation)
    if fact.target is not None:  # the answer is itself an entity: its document is on the path too
        path.append(fact.target)
    bridge = path[1] if t.hops == 2 else None
    text = t.phrasings[phrasing].format(e=subject)
    return Question(text, fact.answers, t.name, phrasing, t.hops, sort_of(t), subjects, tuple(path), bridge, fact.relation, world.name)  # fmt: skip


def subjects_of(world: World, t: Template, rng: random.Random) -> list[tuple[str, ...]]:
    """Every subject of `t` in `world`; for comparisons, as many random pairs as there are entities."""
    pool = {"river": world.rivers, "town": world.towns, "person": world.people, "company": world.companies}[
        t.subject
    ]
    if not t.compare:
        return [(s,) for s in pool]
    return [tuple(rng.sample(pool, 2)) for _ in pool]  # type: ignore[misc]


def world_questions(world: World, split_name: str, rng: random.Random) -> list[Question]:
    """Every question a split asks of `world`, one phrasing each drawn from `rng`, in template order."""
    questions = []
    for t in TEMPLATES.values():
        if split_name == "val" and not t.val:
            continue
        for subjects in subjects_of(world, t, rng):
            questions.append(ask(world, t, subjects, rng.choice(t.phrasing_ids(split_name))))
    return questions


def balanced(
    world: World, templates: list[Template], n: int, split_name: str, rng: random.Random
) -> list[Question]:
    """`n` questions of `templates` about `world`, spread as evenly as their subjects allow: the
    templates take turns, and each template's subjects, shuffled, cycle through its phrasings (those
    `split_name` uses), so every phrasing is asked about as often. No subject (a comparison: no pair
    of people) is asked twice by one template."""
    queues = []
    for t in templates:
        seen: set[frozenset[str]] = set()
        subjects = []
        for s in subjects_of(world, t, rng):  # a pair of people once, in the order drawn first
            if frozenset(s) not in seen:
                seen.add(frozenset(s))
                subjects.append(s)
        rng.shuffle(subjects)
        phrasings = t.phrasing_ids(split_name)
        queues.append([ask(world, t, s, phrasings[i % len(phrasings)]) for i, s in enumerate(subjects)])
    out: list[Question] = []
    for turn in range(max(map(len, queues), default=0)):
        out += [q[turn] for q in queues if turn < len(q)][: n - len(out)]
    return out


@lru_cache(maxsize=8)
def split(
    seed: int = SEED, facts_seed: int = FACTS_SEED, n_entities: int = ENTITIES, val_size: str = "large"
) -> tuple[tuple[Question, ...], tuple[Question, ...]]:
    """(validation, training) questions: validation `N_VAL[val_size]` of each sort from the validation
    world, in a mixed fixed order; training every question of the training world, in a fixed order
    (the same whatever `val_size`: its draws come first)."""
    corpus = build(n_entities, seed, facts_seed, VAL_EXTENSIONS[val_size])
    rng = random.Random(f"{seed}/questions")  # independent of the facts: a counterfactual asks the same
    train = world_questions(corpus.worlds["train"], "train", rng)
    world, sizes = corpus.worlds["val"], N_VAL[val_size]
    if val_size == "small":  # a sample of every validation question of each sort
        by_sort: dict[str, list[Question]] = {s: [] for s in sizes}
        for q in world_questions(world, "val", rng):
            by_sort[q.sort].append(q)
        val = [q for sort, n in sizes.items() for q in rng.sample(by_sort[sort], min(n, len(by_sort[sort])))]
    else:
        asked = [t for t in TEMPLATES.values() if t.val]
        val = []
        for sort, n in sizes.items():
            val += balanced(world, [t for t in asked if sort_of(t) == sort], n, "val", rng)
    rng.shuffle(val)  # any prefix mixes the sorts
    return tuple(val), tuple(train)


@lru_cache(maxsize=8)
def demonstrated_probe(
    seed: int = SEED, facts_seed: int = FACTS_SEED, n_entities: int = ENTITIES, val_size: str = "large"
) -> tuple[Question, ...]:
    """`N_PROBE` two-hop questions of the templates the demonstrations show (`DEMO_TEMPLATES`), about
    the validation world's entities, in the phrasings training uses: whether a cold start taught
    chaining on what it saw, with new entities only (no new wording, no template only RL sees).
    Sort `2hop_demo`. No training row or demonstration names a validation entity, so none of these
    is trained on; the held-out validation (`split`) never asks these templates. The large size
    spreads them evenly over the templates (`balanced`), the small samples them as before."""
    corpus = build(n_entities, seed, facts_seed, VAL_EXTENSIONS[val_size])
    rng = random.Random(f"{seed}/probe")
    world = corpus.worlds["val"]
    if val_size != "small":
        shown = [t for t in TWO_HOP if t.name in DEMO_TEMPLATES]
        probe = balanced(world, shown, N_PROBE, "train", rng)
        rng.shuffle(probe)
        return tuple(dataclasses.replace(q, sort="2hop_demo") for q in probe)
    out = []
    for t in TWO_HOP:
        if t.name not in DEMO_TEMPLATES:
            continue
        for subjects in subjects_of(world, t, rng):
            q = ask(world, t, subjects, rng.choice(t.phrasing_ids("train")))
            out.append(dataclasses.replace(q, sort="2hop_demo"))
    return tuple(rng.sample(out, min(N_PROBE, len(out))))
