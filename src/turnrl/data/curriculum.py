"""`data.sampler=curriculum`: skip the prompts whose recent groups gave GRPO no signal.

A group whose `rollout.n` samples all scored the same (all right or all wrong) has zero advantage
under every group-relative estimator (GRPO, RLOO, ...): the step spends its generation on it and
learns nothing from it. The curriculum loader remembers, per prompt (keyed by its dataset `index`,
which is the batch's `uid`), the outcome of its last `data.curriculum.window` groups, one letter
per group, oldest first:

    R   flat, all right (every score >= data.curriculum.pass_threshold)
    W   flat, all wrong
    V   varied: the scores differ (a learning signal)

"Flat" means the group's scores are equal (within 1e-8, as DAPO's filter decides), so a group of
wrong answers that differ in format credit is varied: GRPO learns the format from it. A prompt whose
last `window` groups were all flat is skipped when its turn in the seeded epoch order comes, unless
a seeded coin (probability `data.curriculum.revisit_prob`) revisits it; a prompt seen fewer than
`window` times is never skipped. `should_skip` is that rule, a pure function.

Batches are always full: the walk goes on past skipped prompts, into the next epoch's order when
the current one ends (a prompt already in the batch is passed over there). Two epochs' length of
slots hold a whole epoch, so a draw that walked that far has met every prompt of the pool: it stops
skipping then, and a pool smaller than a batch (or empty) still fills one, its own prompts first.

The orders are the plain loader's (`StatefulLoader`: a permutation from (seed, epoch)) and the coins
a function of (seed, epoch, slot), so everything the loader decides follows from its state: epoch,
slot, history and counters, plain JSON in `state_dict()`, saved with the run state in every
checkpoint. A resumed run draws exactly the batches the uninterrupted one drew. `GroupWatch` feeds
it the outcomes of every scored round, before the step's loader state is taken.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from turnrl.batch import Batch
from turnrl.config.schema import CurriculumConfig, DataConfig
from turnrl.data.dataset import DataError, Example
from turnrl.data.loader import StatefulLoader, collate

RIGHT, WRONG, VARIED = "R", "W", "V"
"""A group's outcome: flat and all right, flat and all wrong, or varied scores."""
FLAT_TOLERANCE = 1e-8
"""Scores within this of each other are equal (`trainer.stages.keep_varied_groups` uses the same)."""
_COIN_SALT = 7919
"""Keeps the revisit coins' random stream apart from the epoch order's, drawn from (seed, epoch)."""


def should_skip(history: str, window: int) -> bool:
    """Whether a prompt with `history` (outcome letters, oldest first) is skipped: its last `window`
    groups were all flat. Fewer than `window` groups seen: never skipped."""
    recent = history[-window:]
    return len(recent) == window and VARIED not in recent


def group_outcomes(uids: Sequence[Any], scores: Sequence[float], pass_threshold: float) -> dict[str, str]:
    """The outcome letter of each group (samples sharing a uid), keyed by `str(uid)` in the order the
    groups first appear."""
    groups: dict[str, list[float]] = {}
    for uid, s in zip(uids, scores, strict=True):
        groups.setdefault(str(uid), []).append(float(s))
    out = {}
    for key, v in groups.items():
        if max(v) - min(v) > FLAT_TOLERANCE:
            out[key] = VARIED
        else:
            out[key] = RIGHT if min(v) >= pass_threshold else WRONG
    return out


class CurriculumLoader:
    """`StatefulLoader`'s interface (`__len__`, `epoch_batches`, `state_dict`, `load_state_dict`) plus
    `observe`, fed the outcome of every scored group. `position` counts the slots of the current
    epoch's order already walked (the plain loader counts batches)."""

    def __init__(
        self,
        examples: list[Example],
        batch_size: int,
        pad_id: int,
        seed: int,
        cfg: CurriculumConfig,
        shuffle: bool = True,
    ):
        if len(examples) < batch_size:
            raise DataError(f"{len(examples)} usable prompts are fewer than one batch of {batch_size}")
        self.examples, self.batch_size, self.pad_id = examples, batch_size, pad_id
        self.seed, self.shuffle = seed, shuffle
        self.window, self.revisit_prob, self.pass_threshold = cfg.window, cfg.revisit_prob, cfg.pass_threshold
        self.epoch = 0
        self.position = 0  # slots of this epoch's order already walked
        self.history: dict[str, str] = {}  # str(index) -> outcome letters, oldest first (<= window)
        self.counters = {"skipped": 0, "revisited": 0, "skipped_total": 0, "revisited_total": 0}
        self._plan: tuple[int, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        """Batches per epoch, as the plain loader counts them: `trainer.total_epochs` buys the same
        number of steps with either sampler."""
        return len(self.examples) // self.batch_size

    # -- drawing -------------------------------------------------------------------------------
    def _epoch_plan(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """The order of epoch `epoch` (the plain loader's permutation from (seed, epoch)) and the
        revisit coin of each of its slots (from (seed, epoch, salt)). The walk only moves forward:
        one epoch's plan is kept."""
        if self._plan is None or self._plan[0] != epoch:
            n = len(self.examples)
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(n) if self.shuffle else np.arange(n)
            coins = np.random.default_rng([self.seed, epoch, _COIN_SALT]).random(n)
            self._plan = (epoch, order, coins)
        return self._plan[1], self._plan[2]

    def out_of_pool(self, example: Example) -> bool:
        """Whether `example` is out of the pool right now (its recent groups were all flat)."""
        return should_skip(self.history.get(str(example.index), ""), self.window)

    def _draw(self) -> Batch:
        """One full batch: walk the order from the current slot, passing over skipped prompts (unless
        their slot's coin revisits them) and, across an epoch's end, prompts already taken."""
        n = len(self.examples)
        rows: list[int] = []
        taken: set[int] = set()
        walked = 0
        while len(rows) < self.batch_size:
            if self.position >= n:
                self.epoch, self.position = self.epoch + 1, 0
            order, coins = self._epoch_plan(self.epoch)
            slot = self.position
            row = int(order[slot])
            self.position += 1
            walked += 1
            if row in taken:  # the walk crossed into the next epoch and met a prompt of this batch
                continue
            # two epochs' length walked: the whole pool is in, take what comes
            if walked <= 2 * n and self.out_of_pool(self.examples[row]):
                if coins[slot] < self.revisit_prob:
                    self.counters["revisited"] += 1
                    self.counters["revisited_total"] += 1
                else:
                    self.counters["skipped"] += 1
                    self.counters["skipped_total"] += 1
                    continue
            rows.append(row)
            taken.add(row)
        return collate([self.examples[i] for i in rows], self.pad_id)

    def epoch_batches(self) -> Iterator[Batch]:
        """Full batches until the walk reaches the end of the current epoch's order (the last one may
        end in the next epoch's); afterwards the loader is in the next epoch."""
        if self.position >= len(self.examples):  # stopped at an epoch's very end
            self.epoch, self.position = self.epoch + 1, 0
        start = self.epoch
        while self.epoch == start and self.position < len(self.examples):
            yield self._draw()

    # -- outcomes and metrics ------------------------------------------------------------------
    def observe(self, uids: Sequence[Any], scores: Sequence[float]) -> dict[str, str]:
        """Record each group's outcome (samples sharing a uid; `scores`: their sequence scores) in its
        prompt's history, which keeps the last `window`. Returns the outcomes."""
        outcomes = group_outcomes(uids, scores, self.pass_threshold)
        for key, letter in outcomes.items():
            self.history[key] = (self.history.get(key, "") + letter)[-self.window :]
        return outcomes

    def take_metrics(self) -> dict[str, float]:
        """`data/curriculum/*` since the last call: `pool` (prompts not skipped now), `skipped` and
        `revisited` (while drawing), `mastered` (skipped prompts whose last group was all right)."""
        out = self.pool_metrics()
        out["data/curriculum/skipped"] = float(self.counters["skipped"])
        out["data/curriculum/revisited"] = float(self.counters["revisited"])
        self.counters["skipped"] = self.counters["revisited"] = 0
        return out

    def pool_metrics(self) -> dict[str, float]:
        out = {"data/curriculum/pool": 0.0, "data/curriculum/mastered": 0.0}
        for e in self.examples:
            h = self.history.get(str(e.index), "")
            if not should_skip(h, self.window):
                out["data/curriculum/pool"] += 1
            elif h[-1] == RIGHT:
                out["data/curriculum/mastered"] += 1
        return out

    # -- checkpoint ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything the walk depends on, as plain JSON (a copy: the producer may draw on)."""
        return {
            "sampler": "curriculum",
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "history": dict(self.history),
            "counters": dict(self.counters),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A curriculum state, or a plain loader's (a run switching samplers on resume: its position
        counts batches, and no prompt has a history yet)."""
        self.epoch, self.seed = int(state["epoch"]), int(state["seed"])
        if state.get("sampler") == "curriculum":
            self.position = int(state["position"])
            self.history = {str(k): str(v) for k, v in state.get("history", {}).items()}
            self.counters.update({k: int(v) for k, v in state.get("counters", {}).items()})
        else:
            self.position = int(state["position"]) * self.batch_size
            self.history = {}
        self._plan = None


Loader = StatefulLoader | CurriculumLoader


def make_loader(data: DataConfig, examples: list[Example], pad_id: int, seed: int) -> Loader:
    """The training loader `data.sampler` names, drawing a generation round's prompts at a time."""
    size = data.gen_batch_size or data.train_batch_size
    if data.sampler == "curriculum":
        return CurriculumLoader(examples, size, pad_id, seed, data.curriculum, data.shuffle)
    return StatefulLoader(examples, size, pad_id, seed, data.shuffle)


class GroupWatch:
    """Told of every scored round of a step (`StepSampler`'s `on_scored`): counts its flat groups and
    feeds the curriculum loader, if that is the loader. `metrics()` is the step's `data/flat_groups`
    (the fraction of sampled groups with zero advantage, before any DAPO filter) and, with the
    curriculum, `data/curriculum/*`; called by the producer before it takes the loader's state."""

    def __init__(self, loader: Loader):
        self.loader = loader
        self.groups = self.flat = 0

    def observe(self, batch: Batch) -> None:
        uids, scores = batch["uid"], batch["token_level_scores"].sum(-1).tolist()
        if isinstance(self.loader, CurriculumLoader):
            outcomes = self.loader.observe(uids, scores)
        else:
            outcomes = group_outcomes(uids, scores, pass_threshold=1.0)  # flatness alone is read
        self.groups += len(outcomes)
        self.flat += sum(letter != VARIED for letter in outcomes.values())

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.groups:
            out["data/flat_groups"] = self.flat / self.groups
        if isinstance(self.loader, CurriculumLoader):
            out.update(self.loader.take_metrics())
            if self.groups:
                out["data/curriculum/flat_groups"] = out["data/flat_groups"]
        self.groups = self.flat = 0
        return out


__all__ = [
    "CurriculumLoader",
    "GroupWatch",
    "group_outcomes",
    "make_loader",
    "should_skip",
]
