"""Procedural reasoning tasks from reasoning-gym: `data.task=reasoning_gym:<dataset>`.

reasoning-gym (`pip install -e ".[gym]"`) generates problems of a hundred kinds (`chain_sum`,
`basic_arithmetic`, `word_sorting`, ...) from a seed and checks answers with each dataset's own
`score_answer(answer, entry)`. This module turns a dataset into a turnrl task:

Rows. `data.task_args` holds the dataset's own parameters (`min_terms`, `max_digits`, ...) and
four of turnrl's: `size` (training rows, default 1000), `val_size` (validation rows, default 100),
`format_credit` and `worked_example` (below). Training is `create_dataset(name, seed=s, size=size, **params)`;
validation is drawn from seed `s + VAL_SEED_OFFSET` and then every question whose text is also a
training question, or an earlier validation question, is skipped, drawing further until `val_size`
are kept or `VAL_DRAW_FACTOR * val_size` were tried. With a small parameter space validation can
come out shorter than `val_size` (chain_sum with two one-digit terms has 200 distinct questions:
1000 training rows cover nearly all of them); a validation split left with no question fails.

Prompt. A system message (`SYSTEM`) asks for the final answer alone inside `<answer>` tags; one
worked exchange follows (a training question, then `<answer>` with its answer, never the asked
question's answer), then the dataset's question as the user's turn. `worked_example=false` leaves
the exchange out. Why it is there: under the system message alone the embedded
SmolLM2-135M-Instruct wrote no tag at all (0 of 16 greedy validation answers on two-term, two-digit
chain_sum: "The final answer is 6."), so every GRPO group scored 0; with it, 16 of 16 were tagged. Worked examples are training questions in
both splits: no validation question or answer is ever shown.

Scoring (`compute_score`), on the text of the last `<answer>...</answer>` (stripped):

    score      1.0 for a right answer (the dataset's `score_answer` is 1.0); a non-empty tagged
               answer scores at least `format_credit` (default 0.1), so GRPO groups differ before
               any answer is right
    acc        1.0 when the dataset's score is 1.0 (a right answer), else 0.0
    formatted  1.0 when an `<answer>` tag was found
    gym_score  the dataset's score itself (some datasets give partial credit)

Partial credit is off by default (`data.task_args.partial_credit=true` keeps it in `score`):
reasoning-gym's default `score_answer` gives an answer that contains the right one len(right) /
len(answer), so on `gcd` "12" earns 0.5 whenever the answer is 1 or 2. With it, the embedded model
went from answering "1" on 96 of 100 validation questions (right on 22) to "12" on 99 after 5 steps
(right on none): the reward was higher for the wrong constant (benchmarks/gym_recipes.py, docs/results/reasoning-gym.md).

The credit is for a tag holding something, never for a right answer outside the tag (the trap
the addition task measured: the policy stays untagged), nor for copying the worked example's answer
(the other trap it measured: the policy learns to copy). `data.task_args.format_credit=0` turns it
off. Everything the scorer needs is in the row (`extra_info`: the dataset's name, its parameters
and the entry as JSON), so rows written by `turnrl data task` and read back with
`data.train_files` are scored the same, in whatever process scores rewards.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from functools import lru_cache
from typing import Any

from turnrl.errors import TurnrlInputError
from turnrl.tasks.args import TaskArgError, reject_unknown

PREFIX = "reasoning_gym:"
"""`data.task` of a reasoning-gym dataset: `reasoning_gym:chain_sum`."""
SOURCE_PREFIX = "reasoning_gym/"
"""Rows' `data_source`: `reasoning_gym/chain_sum`."""
SOURCE_FAMILY = SOURCE_PREFIX + "*"
"""The reward table's key for every reasoning-gym data source."""
INSTALL = 'pip install -e ".[gym]" (or pip install reasoning-gym)'

SYSTEM = (
    "Solve the problem. Give only the final answer inside <answer></answer> tags, "
    "for example <answer>42</answer>."
)
SIZE, VAL_SIZE = 1000, 100
VAL_SEED_OFFSET = 1_000_003  # a prime far from any seed a user types: the val stream is another one
VAL_DRAW_FACTOR = 10
FORMAT_CREDIT = 0.1
OWN_ARGS = ("size", "val_size", "format_credit", "partial_credit", "worked_example")
# the dataset config's fields turnrl sets itself
RESERVED = ("seed", "size")

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


class GymNotInstalled(TurnrlInputError):
    """A reasoning-gym task or data source without the reasoning-gym package."""


class UnknownGymDataset(TurnrlInputError):
    """A `reasoning_gym:<name>` whose name reasoning-gym does not know; the message lists them."""


def is_gym(task: str) -> bool:
    return task.startswith(PREFIX)


def dataset_of(task: str) -> str:
    """`reasoning_gym:chain_sum` -> `chain_sum`."""
    return task.removeprefix(PREFIX)


def data_source(dataset: str) -> str:
    return SOURCE_PREFIX + dataset


def _gym() -> Any:
    try:
        import reasoning_gym
    except ImportError:
        raise GymNotInstalled(f"reasoning-gym tasks need the reasoning-gym package: {INSTALL}") from None
    return reasoning_gym


def dataset_names() -> list[str]:
    return sorted(_gym().factory.DATASETS)


def check_dataset(dataset: str) -> None:
    """GymNotInstalled without the package, UnknownGymDataset listing the names for a wrong one."""
    names = dataset_names()
    if dataset not in names:
        raise UnknownGymDataset(f"unknown reasoning-gym dataset '{dataset}'; valid: {', '.join(names)}")


def _params_of(dataset: str) -> tuple[str, ...]:
    config_cls = _gym().factory.DATASETS[dataset][1]
    return tuple(f.name for f in dataclasses.fields(config_cls) if f.name not in RESERVED)


def split_args(dataset: str, args: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(turnrl's own arguments, the dataset's parameters); an unknown key is a TaskArgError
    naming the keys this dataset takes."""
    check_dataset(dataset)
    reject_unknown(args, (*OWN_ARGS, *_params_of(dataset)), PREFIX + dataset)
    own = {k: v for k, v in args.items() if k in OWN_ARGS}
    for key in ("size", "val_size"):
        value = own.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TaskArgError(f"task '{PREFIX}{dataset}': '{key}' must be an integer >= 1, got {value!r}")
    for key, default in (("worked_example", True), ("partial_credit", False)):
        if not isinstance(own.get(key, default), bool):
            raise TaskArgError(f"task '{PREFIX}{dataset}': '{key}' must be true or false, got {own[key]!r}")
    credit = own.get("format_credit", FORMAT_CREDIT)
    if isinstance(credit, bool) or not isinstance(credit, int | float) or not 0 <= credit < 1:
        raise TaskArgError(f"task '{PREFIX}{dataset}': 'format_credit' must be in [0, 1), got {credit!r}")
    return own, {k: v for k, v in args.items() if k not in OWN_ARGS}


def create(dataset: str, seed: int, size: int, params: dict[str, Any]) -> Any:
    """The dataset object; parameters its config rejects are one TaskArgError with its message."""
    try:
        return _gym().create_dataset(dataset, seed=seed, size=size, **params)
    except (AssertionError, ValueError, TypeError) as err:  # its configs check with `assert`
        given = ", ".join(f"{k}={v!r}" for k, v in sorted(params.items())) or "none"
        raise TaskArgError(
            f"task '{PREFIX}{dataset}' rejects its arguments ({given}): {err or type(err).__name__}"
        ) from None


def make_row(
    dataset: str,
    entry: dict[str, Any],
    split: str,
    index: int,
    params: str,
    credit: float,
    example: dict[str, Any] | None = None,
    partial: bool = False,
) -> dict[str, Any]:
    """One verl row; with `example`, one worked exchange (its question, then `<answer>` with its
    answer) comes before the question. `partial`: the reward keeps the dataset's partial credit."""
    shown = [] if example is None else [
        {"role": "user", "content": example["question"]},
        {"role": "assistant", "content": f"<answer>{example['answer']}</answer>"},
    ]  # fmt: skip
    return {
        "data_source": data_source(dataset),
        "prompt": [
            {"role": "system", "content": SYSTEM},
            *shown,
            {"role": "user", "content": entry["question"]},
        ],
        "ability": "reasoning",
        "reward_model": {"style": "rule", "ground_truth": str(entry["answer"])},
        "extra_info": {
            "split": split,
            "index": index,
            "problem": entry["question"],
            "dataset": dataset,
            # JSON text, not nested objects: metadata differs per dataset and row, which a
            # parquet schema cannot hold; the scorer reads it back as the entry it was
            "params": params,
            "entry": json.dumps(entry, default=_jsonable, sort_keys=True),
            "format_credit": credit,
            "partial_credit": partial,
            # the shown answer, which earns no format credit when copied (the scorer's trap check)
            "example_answer": None if example is None else str(example["answer"]),
        },
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)


def rows(dataset: str, split: str, seed: int, **args: Any) -> list[dict[str, Any]]:
    """`train`: `size` rows from `seed`; `val`: up to `val_size` rows from `seed + VAL_SEED_OFFSET`
    whose questions are not training's (module docstring)."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    own, params = split_args(dataset, args)
    size, val_size = own.get("size", SIZE), own.get("val_size", VAL_SIZE)
    credit = float(own.get("format_credit", FORMAT_CREDIT))
    partial = bool(own.get("partial_credit", False))
    params_json = json.dumps(params, sort_keys=True)
    train = list(create(dataset, seed, size, params))
    shown = bool(own.get("worked_example", True))
    # worked examples are training questions in both splits, so no validation answer is ever shown
    rng = random.Random(f"{seed}-{split}-examples")
    if split == "train":
        return [
            make_row(
                dataset,
                e,
                "train",
                i,
                params_json,
                credit,
                _example(rng, train, e) if shown else None,
                partial,
            )
            for i, e in enumerate(train)
        ]
    kept = held_out(
        train, create(dataset, seed + VAL_SEED_OFFSET, val_size * VAL_DRAW_FACTOR, params), val_size
    )
    if not kept:
        raise TaskArgError(
            f"task '{PREFIX}{dataset}': every validation question is also a training question "
            f"(size={size}); lower 'size' or widen the dataset's parameters"
        )
    return [
        make_row(
            dataset,
            e,
            "test",
            size + i,
            params_json,
            credit,
            _example(rng, train, e) if shown else None,
            partial,
        )
        for i, e in enumerate(kept)
    ]


def _example(rng: random.Random, train: list[dict[str, Any]], entry: dict[str, Any]) -> dict[str, Any] | None:
    """A training entry whose answer is not `entry`'s (a shown right answer is one the policy could
    copy); None when a few draws find none (a dataset with one answer)."""
    for _ in range(20):
        candidate = train[rng.randrange(len(train))]
        if str(candidate["answer"]) != str(entry["answer"]):
            return candidate
    return None


def held_out(train: list[dict[str, Any]], candidates: Any, limit: int) -> list[dict[str, Any]]:
    """The first `limit` of `candidates` whose question is neither a training one nor repeated."""
    seen = {e["question"] for e in train}
    kept: list[dict[str, Any]] = []
    for entry in candidates:
        if entry["question"] not in seen:
            seen.add(entry["question"])
            kept.append(entry)
            if len(kept) == limit:
                break
    return kept


def extract_answer(text: str) -> str | None:
    found = ANSWER.findall(text)
    return found[-1].strip() if found else None


@lru_cache(maxsize=64)
def _dataset_for_scoring(dataset: str, params: str) -> Any:
    # built once per (dataset, parameters) in the scoring process; some score_answer read the config
    return create(dataset, 0, 1, json.loads(params))


def dataset_score(dataset: str, params: str, answer: str | None, entry: dict[str, Any]) -> float:
    if answer is None:
        return 0.0
    return float(_dataset_for_scoring(dataset, params).score_answer(answer, entry))


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None
) -> dict[str, float]:
    """verl's signature; the numbers are the module docstring's."""
    info = extra_info if isinstance(extra_info, dict) else {}
    dataset = info.get("dataset") or data_source.removeprefix(SOURCE_PREFIX)
    if "entry" in info:
        entry = json.loads(info["entry"])
    else:  # a row made elsewhere: the answer is all there is to compare with
        entry = {"question": info.get("problem", ""), "answer": str(ground_truth), "metadata": {}}
    answer = extract_answer(solution_str)
    raw = dataset_score(dataset, info.get("params") or "{}", answer, entry)
    credit = float(info.get("format_credit", FORMAT_CREDIT))
    copied = answer is not None and answer == info.get("example_answer")
    earned = raw if raw >= 1.0 or info.get("partial_credit", False) else 0.0
    score = max(earned, credit) if answer and not copied else earned
    return {
        "score": score,
        "acc": float(raw >= 1.0),
        "formatted": float(answer is not None),
        "gym_score": raw,
    }
