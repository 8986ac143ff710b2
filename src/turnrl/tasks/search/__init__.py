"""Search-agent task over a corpus of invented facts: one-hop, two-hop and comparison questions.

Every question is about invented entities (`corpus`), so the model can only answer by searching:
the retriever that agent runs start by default indexes the same corpus (`corpus.builtin_index`).
Validation asks about a world of entities that training never names (`corpus`, `questions`), mostly
with two-hop questions whose second search must name an entity that only the first search reveals,
partly in phrasings training never uses. The prompt follows Search-R1's protocol (think,
`<search>`, `<information>`, `<answer>`) and, by default, shows one worked one-hop episode about a
person who is not in the corpus.

Rows' data sources split validation by hops, so `val/test_score/<source>` reports each:
`turnrl/search/1hop`, `turnrl/search/2hop` (a bridge entity between two facts) and
`turnrl/search/compare` (the same fact of two named entities, `hops` 2: two facts to read, but
no bridge to find, and one search naming both often shows both, so reported on its own). All are scored by `compute_score`: Search-R1's exact match, plus a
small credit for a well-formed wrong answer.

Task arguments (`data.task_args`, `turnrl data task search --arg KEY=VALUE`): `example` (default
true: the worked example in the prompt), `facts_seed` (default 0: another value gives a
counterfactual corpus, the same entities with re-sampled facts, and rows with its answers) and
`val` (default `held_out`; `demonstrated`: the validation rows are instead the two-hop templates the
demonstrations show, asked about validation entities, source `turnrl/search/2hop_demo`: a probe of
whether a cold start learned to chain where it was shown how), `val_size` (default `large`: 120
one-hop, 320 two-hop and 72 comparison questions about the validation world and its extension;
`small`: the 40, 64 and 24 about the validation world alone that docs/results/search-agent.md
measured, with its 400-document corpus), `bridge_credit` (default 0: a process
reward for two-hop training rows, below).
`demos` scripts successful episodes for a supervised cold start (`turnrl data search_sft`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnrl.rewards.qa import em_check, extract_answer, targets
from turnrl.tasks.args import TaskArgError, reject_unknown
from turnrl.tasks.search.corpus import ENTITIES, FACTS_SEED, SEED, write_builtin_corpus
from turnrl.tasks.search.questions import N_VAL as N_VAL_BY_SIZE
from turnrl.tasks.search.questions import (
    TEMPLATES,
    VAL_EXTENSIONS,
    VAL_SIZES,
    Question,
    demonstrated_probe,
    split,
)

SOURCES = {sort: f"turnrl/search/{sort}" for sort in ("1hop", "2hop", "compare", "2hop_demo")}
DATA_SOURCES = tuple(SOURCES.values())
# The small validation's row count: training rows are indexed from it whatever the validation size,
# so they are the same rows, byte for byte, beside either
N_VAL = sum(N_VAL_BY_SIZE["small"].values())
FORMAT_SCORE = 0.1  # a well-formed wrong answer: enough to learn the protocol, far below a right one
MAX_ANSWER_WORDS = 8  # longer is an explanation, not an answer: no format credit
ARGS = ("example", "facts_seed", "val", "bridge_credit", "train", "val_size")
SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL)
VAL_SETS = ("held_out", "demonstrated")
# which training questions `rows("train")` gives: every one; only the two-hop questions of the
# templates validation asks (RL's prompts for the chaining it must extend past the demonstrations);
# or those and one one-hop question for every three of them, so RL also sees questions where one
# search is right (with two-hop prompts alone, RL taught a second search on every question: docs/results/search-agent.md)
TRAIN_SETS = ("all", "val_two_hop", "val_two_hop_mix")
MIX_ONE_HOP_PER_TWO_HOP = 1 / 3

INSTRUCTIONS = (
    "Answer the question below. Think step by step inside <think> and </think> whenever you get new "
    "information. If you are missing a fact, search for it by writing <search> your query </search>; "
    "the top results come back between <information> and </information>. You may search several "
    "times: when a result names something else you need to look up, search for that next. When you "
    "know the answer, write it between <answer> and </answer> with no explanation."
)
# One one-hop episode about a person who is not in the corpus (`corpus.EXAMPLE_NAMES` are never
# generated): it shows the protocol, not a fact the model could reuse.
EXAMPLE = (
    "\nExample:\nQuestion: In which town was Orsolya Pennick born?\n"
    "<think> I need to find the town where Orsolya Pennick was born. </think>\n"
    "<search> Orsolya Pennick born town </search>\n"
    "<information> Doc 1(Title: Orsolya Pennick) Orsolya Pennick is a weaver, born in 1790 in the town "
    "of Ashgrove. </information>\n"
    "<think> Doc 1 says Orsolya Pennick was born in Ashgrove. </think>\n"
    "<answer> Ashgrove </answer>\n"
)
NO_EXAMPLE = " For example, <answer> Paris </answer>.\n"


@dataclass(frozen=True)
class Options:
    example: bool = True
    facts_seed: int = FACTS_SEED
    val: str = "held_out"
    bridge_credit: float = 0.0
    train: str = "all"
    val_size: str = "large"


def options(args: dict[str, Any]) -> Options:
    """The task's arguments, checked: an unknown key or a wrongly typed value is one line."""
    reject_unknown(args, ARGS, "search")
    example, facts_seed = args.get("example", True), args.get("facts_seed", FACTS_SEED)
    if not isinstance(example, bool):
        raise TaskArgError(f"task 'search': example must be true or false, got {example!r}")
    if isinstance(facts_seed, bool) or not isinstance(facts_seed, int):
        raise TaskArgError(f"task 'search': facts_seed must be an integer, got {facts_seed!r}")
    val = args.get("val", "held_out")
    if val not in VAL_SETS:
        raise TaskArgError(f"task 'search': val must be one of {', '.join(VAL_SETS)}, got {val!r}")
    credit = args.get("bridge_credit", 0.0)
    # a wrong answer plus the credit must stay below a right one's 1: accuracy is still score >= 1
    if isinstance(credit, bool) or not isinstance(credit, int | float) or not 0 <= credit < 1 - FORMAT_SCORE:
        raise TaskArgError(
            f"task 'search': bridge_credit must be a number in [0, {1 - FORMAT_SCORE:g}), got {credit!r}"
        )
    train = args.get("train", "all")
    if train not in TRAIN_SETS:
        raise TaskArgError(f"task 'search': train must be one of {', '.join(TRAIN_SETS)}, got {train!r}")
    val_size = args.get("val_size", "large")
    if val_size not in VAL_SIZES:
        raise TaskArgError(f"task 'search': val_size must be one of {', '.join(VAL_SIZES)}, got {val_size!r}")
    return Options(example, facts_seed, val, float(credit), train, val_size)


def prompt(question: str, example: bool = True) -> str:
    shown = EXAMPLE if example else NO_EXAMPLE
    return f"{INSTRUCTIONS}{shown}Question: {question}\n"


def make_row(
    q: Question, split_name: str, index: int, example: bool = True, bridge_credit: float = 0.0
) -> dict[str, Any]:
    row = {
        "data_source": SOURCES[q.sort],
        "prompt": [{"role": "user", "content": prompt(q.text, example)}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": list(q.answers)}},
        "extra_info": {
            "split": split_name,
            "index": index,
            "template": q.template,
            "hops": q.hops,
            "bridge": q.bridge,
            "entities": list(q.entities),
            "phrasing": q.phrasing,
            "relation": q.relation,
        },
    }
    if bridge_credit and q.bridge is not None:  # training rows only (`rows`): validation scores answers
        row["extra_info"]["bridge_credit"] = bridge_credit
    return row


def indexed(
    facts_seed: int = FACTS_SEED, val_size: str = "large"
) -> tuple[list[tuple[int, Question]], list[tuple[int, Question]]]:
    """(validation, training) questions with their row index, in the fixed order (the index is the
    same whatever the training order): training from `N_VAL`; the small validation 0 .. N_VAL-1, the
    large after every training row (no index is shared, and a training row is the same beside either)."""
    val, train = split(SEED, facts_seed, ENTITIES, val_size)
    first_val = 0 if val_size == "small" else N_VAL + len(train)
    return [(first_val + i, q) for i, q in enumerate(val)], [(N_VAL + i, q) for i, q in enumerate(train)]


def rows(split_name: str, seed: int, **args: Any) -> list[dict[str, Any]]:
    """`val`: the held-out questions in a fixed order; `train`: the training world's questions (with
    `train=val_two_hop` only its two-hop questions of the templates validation asks; `val_two_hop_mix`
    those and the first third as many one-hop questions, in the fixed order), shuffled by `seed` (the
    corpus is fixed, so `seed` changes only the training order)."""
    opts = options(args)
    val, train = indexed(opts.facts_seed, opts.val_size)
    if split_name == "train":
        if opts.train != "all":
            two_hop = [(i, q) for i, q in train if q.sort == "2hop" and TEMPLATES[q.template].val]
            one_hop = [(i, q) for i, q in train if q.sort == "1hop"]
            extra = round(len(two_hop) * MIX_ONE_HOP_PER_TWO_HOP) if opts.train == "val_two_hop_mix" else 0
            train = two_hop + one_hop[:extra]
        out = [make_row(q, "train", i, opts.example, opts.bridge_credit) for i, q in train]
        random.Random(seed).shuffle(out)
        return out
    if split_name != "val":
        raise ValueError(f"split must be 'train' or 'val', got {split_name!r}")
    if opts.val == "demonstrated":  # indexed after every training and validation row: no index is shared
        first = max(i for i, _ in val + train) + 1
        probe = demonstrated_probe(SEED, opts.facts_seed, ENTITIES, opts.val_size)
        return [make_row(q, "test", first + i, opts.example) for i, q in enumerate(probe)]
    return [make_row(q, "test", i, opts.example) for i, q in val]


def write_corpus(out_dir: Path, **args: Any) -> tuple[Path, ...]:
    """The task's corpus (`corpus.jsonl`) and its one-hop fact questions (`qa.jsonl`) into `out_dir`;
    `facts_seed` writes the counterfactual one, `val_size=small` the one without the validation
    world's extension."""
    opts = options(args)  # `example` is accepted (a run passes the same arguments to both) and unused
    paths = write_builtin_corpus(out_dir, ENTITIES, SEED, opts.facts_seed, VAL_EXTENSIONS[opts.val_size])
    return paths.corpus, paths.qa


def well_formed(answer: str | None) -> bool:
    """An answer tag holding a short, non-empty answer."""
    return answer is not None and 0 < len(answer.split()) <= MAX_ANSWER_WORDS


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None
) -> dict[str, float]:
    """1 for an exact match of the last `<answer>` (Search-R1's normalisation), `FORMAT_SCORE` for a
    well-formed wrong one, else 0; `acc` is the exact match, `formatted` whether the answer is
    well-formed (the validation's `val/accuracy` and `val/format_rate`).

    A row with `extra_info.bridge_credit` (two-hop training rows of `bridge_credit` > 0) adds it to a
    well-formed wrong answer whose episode searched for the bridge entity after its first search: a
    process reward for the step a two-hop question needs (StepSearch, Wang et al. 2025, rewards each
    search by the evidence it retrieves; here the evidence is known: the bridge). It pays the query,
    the model's own text, so a passage the model writes itself cannot earn it; and a right answer
    stays 1, above any wrong one."""
    answer = extract_answer(solution_str)
    formatted = well_formed(answer)
    acc = em_check(answer, targets(ground_truth)) if formatted and answer is not None else 0.0
    score = 1.0 if acc else FORMAT_SCORE if formatted else 0.0
    info = extra_info if isinstance(extra_info, dict) else {}
    credit, bridge = float(info.get("bridge_credit") or 0.0), info.get("bridge")
    if credit and bridge and formatted and not acc and searched_for(solution_str, str(bridge)):
        score += credit
    return {"score": score, "acc": acc, "formatted": float(formatted)}


def searched_for(text: str, entity: str) -> bool:
    """Whether a query after the episode's first names `entity` (case-insensitive): the second hop of a
    two-hop question, which only the first search's results can reveal."""
    return any(entity.lower() in query.lower() for query in SEARCH.findall(text)[1:])
