"""The search task's corpus: invented facts, and questions that only a search can answer.

Every entity (person, town, river, company) has an invented name and invented attributes,
so a language model cannot know "In which year was Velmora Quist born?" from pre-training:
it has to search. Each question's fact is stated in exactly one document, the one titled
with the entity's name, and the answer string is in that document's text. Everything is a
pure function of (n_entities, seed): the agent-training task and the retriever's index built
from the same seed agree. `builtin_index` is the BM25 index that an agent run's search tool
serves when `rollout.multi_turn.search` names neither a URL nor an index.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

_ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "k", "kl", "l", "m", "n", "p", "r", "s", "st", "t", "th", "v", "z", "h", "j")  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou")
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "k", "m")
_PROFESSIONS = (
    "cartographer", "violinist", "glassblower", "astronomer", "botanist", "clockmaker",
    "shipwright", "poet", "engineer", "painter", "chemist", "architect", "beekeeper", "weaver",
)  # fmt: skip
_TRADES = ("salt", "wool", "timber", "pottery", "copper", "linen", "cider", "marble", "amber", "tea")
_PRODUCTS = (
    "telescopes", "barometers", "sailcloth", "bicycles", "typewriters", "lanterns", "pianos",
    "compasses", "looms", "ink", "porcelain", "rope", "candles", "maps",
)  # fmt: skip
_COMPANY_KINDS = ("Ironworks", "Shipping", "Mills", "Instruments", "Brewing", "Textiles", "Foundry", "Press")
# Words a BM25 tokenizer drops (Lucene's English list): a name made of one would be unsearchable.
# Kept here rather than imported so the generated corpus never changes with a library version.
_STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
    "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
    "will", "with",
))  # fmt: skip
MIN_ENTITIES = 4  # one of each kind, so every reference has a target
# The search task and the built-in index must describe the same invented world.
ENTITIES = 300
SEED = 0


@dataclass(frozen=True)
class QAPair:
    """One question; `answers[0]` is the canonical answer, the rest accepted aliases."""

    question: str
    answers: tuple[str, ...]
    doc_id: str  # the single document stating the fact
    title: str  # that document's title: the entity the question is about
    relation: str  # e.g. "birth_year", "founder"


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
        self._used: set[str] = set(_STOPWORDS)

    def word(self) -> str:
        for _ in range(10_000):
            syllables = self._rng.choice((2, 2, 3))
            text = "".join(self._rng.choice(_ONSETS) + self._rng.choice(_VOWELS) for _ in range(syllables))
            text += self._rng.choice(_CODAS)
            if len(text) >= 4 and text not in self._used:
                self._used.add(text)
                return text.capitalize()
        raise RuntimeError("invented-name space exhausted; use fewer entities")


def _kind_counts(n: int) -> dict[str, int]:
    towns, rivers, companies = max(1, n // 4), max(1, (n * 3) // 20), max(1, n // 4)
    return {"town": towns, "river": rivers, "company": companies, "person": n - towns - rivers - companies}


@lru_cache(maxsize=4)
def _generate(n_entities: int, seed: int) -> tuple[tuple[tuple[str, str], ...], tuple[QAPair, ...]]:
    if n_entities < MIN_ENTITIES:
        raise ValueError(f"n_entities: need at least {MIN_ENTITIES}, got {n_entities}")
    rng = random.Random(seed)
    names = _Names(rng)
    counts = _kind_counts(n_entities)
    docs: list[tuple[str, str]] = []
    qa: list[QAPair] = []

    def add(title: str, text: str, facts: list[tuple[str, str, tuple[str, ...]]]) -> str:
        doc_id = str(len(docs))
        docs.append((doc_id, f"{title}\n{text}"))
        for relation, question, answers in facts:
            assert answers[0] in text, (title, answers[0])
            qa.append(QAPair(question, answers, doc_id, title, relation))
        return title

    rivers: list[str] = []
    for _ in range(counts["river"]):
        name, mountain, sea = names.word(), names.word(), names.word()
        length = rng.randint(40, 2400)
        title = f"{name} River"
        text = (
            f"The {name} River is a river {length} kilometres long. "
            f"It rises on Mount {mountain} and flows into the {sea} Sea."
        )
        add(title, text, [
            ("length_km", f"How long is the {name} River, in kilometres?", (str(length),)),
            ("source", f"On which mountain does the {name} River rise?", (f"Mount {mountain}", mountain)),
            ("mouth", f"Into which sea does the {name} River flow?", (f"{sea} Sea", sea, f"the {sea} Sea")),
        ])  # fmt: skip
        rivers.append(name)

    towns: list[str] = []
    for _ in range(counts["town"]):
        name, river = names.word(), rng.choice(rivers)
        year, trade = rng.randint(900, 1899), rng.choice(_TRADES)
        text = f"{name} is a market town on the {river} River, founded in {year}. Its main trade is {trade}."
        add(name, text, [
            ("founded", f"In which year was the town of {name} founded?", (str(year),)),
            ("river", f"On which river does the town of {name} lie?", (f"{river} River", river)),
            ("trade", f"What is the main trade of the town of {name}?", (trade,)),
        ])  # fmt: skip
        towns.append(name)

    people: list[str] = []
    for _ in range(counts["person"]):
        name = f"{names.word()} {names.word()}"
        year, town, job = rng.randint(1700, 1990), rng.choice(towns), rng.choice(_PROFESSIONS)
        article = "an" if job[0] in "aeiou" else "a"
        text = f"{name} is {article} {job}, born in {year} in the town of {town}."
        add(name, text, [
            ("birth_year", f"In which year was {name} born?", (str(year),)),
            ("birthplace", f"In which town was {name} born?", (town,)),
            ("profession", f"What is the profession of {name}?", (job,)),
        ])  # fmt: skip
        people.append(name)

    for _ in range(counts["company"]):
        name = f"{names.word()} {rng.choice(_COMPANY_KINDS)}"
        founder, year = rng.choice(people), rng.randint(1750, 2015)
        town, product = rng.choice(towns), rng.choice(_PRODUCTS)
        text = f"{name} is a company that makes {product}. It was founded in {year} by {founder} and is based in {town}."
        add(name, text, [
            ("founder", f"Who founded {name}?", (founder,)),
            ("company_founded", f"In which year was {name} founded?", (str(year),)),
            ("headquarters", f"In which town is {name} based?", (town,)),
            ("product", f"What does {name} make?", (product,)),
        ])  # fmt: skip

    # Mix relations so any prefix of the list (a train/validation split) covers all kinds.
    rng.shuffle(qa)
    return tuple(docs), tuple(qa)


def builtin_documents(n_entities: int = 300, seed: int = 0) -> list[dict[str, str]]:
    """Corpus rows `{id, contents}`, title on the first line of `contents`."""
    docs, _ = _generate(n_entities, seed)
    return [{"id": doc_id, "contents": contents} for doc_id, contents in docs]


def builtin_qa(n_entities: int = 300, seed: int = 0) -> list[QAPair]:
    """Questions over `builtin_documents(n_entities, seed)`, in a seed-shuffled order."""
    _, qa = _generate(n_entities, seed)
    return list(qa)


def write_builtin_corpus(out_dir: str | Path, n_entities: int = 300, seed: int = 0) -> BuiltinCorpusPaths:
    """Write `corpus.jsonl` ({id, contents}) and `qa.jsonl` ({question, answers, ...}) into `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    docs, qa = builtin_documents(n_entities, seed), builtin_qa(n_entities, seed)
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


def write_task_corpus(out_dir: Path) -> tuple[Path, ...]:
    """The search task's own corpus (`ENTITIES`, `SEED`) and its questions into `out_dir`:
    (`corpus.jsonl`, `qa.jsonl`)."""
    paths = write_builtin_corpus(out_dir, ENTITIES, SEED)
    return paths.corpus, paths.qa


def builtin_index(cache: Path) -> Path:
    """A BM25 index over the task's corpus, built once into `cache` (about a second)."""
    from turnrl.servers.retriever.index import build_index

    out = cache / "retriever" / f"builtin-{ENTITIES}-seed{SEED}"
    if (out / "meta.json").is_file():
        return out
    # build beside the target and rename, so two runs starting together never see half an index
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    paths = write_builtin_corpus(tmp / "corpus", ENTITIES, SEED)
    build_index(paths.corpus, tmp / "index", show_progress=False)
    try:
        (tmp / "index").rename(out)
    except OSError:
        if not (out / "meta.json").is_file():
            raise
    shutil.rmtree(tmp, ignore_errors=True)
    return out
