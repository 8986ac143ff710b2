"""Stage 6: turn decoded responses into `token_level_scores` (score at the last model token)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import torch

from turnrl.batch import Batch
from turnrl.config.checks import ON_ERROR_MODES
from turnrl.rewards.guard import ERRORS_KEY, InProcess, Outcome, RewardProcess
from turnrl.rewards.registry import RewardError, ScoreFn, load_custom, lookup, registered, resolve

log = logging.getLogger(__name__)


def last_token_index(response_mask: torch.Tensor) -> torch.Tensor:
    """Column of the last model token per row (0 for an empty response)."""
    cols = torch.arange(response_mask.shape[1], device=response_mask.device).expand_as(response_mask)
    return torch.where(response_mask > 0, cols, torch.zeros_like(cols)).max(dim=1).values


# A scorer that reports these keys separates skill from format: `acc`, the answer is right (or the
# fraction of tests passed), and `formatted`, an answer could be parsed at all. Validation and
# `turnrl eval` report them as `accuracy` and `format_rate`, so a gain in format (the model learnt
# to close the tag) is never read as a gain in skill.
RATE_KEYS = {"acc": "accuracy", "formatted": "format_rate"}


def rates_by_source(
    sources: list[str], extras: Mapping[str, list[float]]
) -> dict[str, dict[str, list[float]]]:
    """`{"accuracy" | "format_rate": {data_source: values}}` from one scored batch.

    `extras[k]` lists the values of the rows whose scorer reported `k`, in row order; when every row
    reported it the list is row-aligned and is split by `sources`. Otherwise (a failed call, a source
    whose scorer does not report it) the row of a value is unknown, and the values go under `""`:
    counted in the overall rate, in no source's.

        sources ["a", "b", "a"], extras {"acc": [1, 0, 1]}  ->  {"accuracy": {"a": [1, 1], "b": [0]}}
        sources ["a", "b", "a"], extras {"acc": [1, 0]}     ->  {"accuracy": {"": [1, 0]}}
    """
    out: dict[str, dict[str, list[float]]] = {}
    for key, name in RATE_KEYS.items():
        values = extras.get(key)
        if not values:
            continue
        by_source: dict[str, list[float]] = defaultdict(list)
        if len(values) == len(sources):
            for source, v in zip(sources, values, strict=True):
                by_source[source].append(float(v))
        else:
            by_source[""] += [float(v) for v in values]
        out[name] = dict(by_source)
    return out


class RewardFunctionError(RewardError):
    """A reward function that raised, hung or returned a non-score where `reward.on_error` says
    to stop; the message names the function, the row, its index and data_source."""


class RuleReward:
    """Calls the reward function of each row's data source on its decoded response.

    `sandbox_url`: where code rewards run programs (an agent run passes the sandbox its python
    tool uses); None = `$TURNRL_SANDBOX_URL`, else a child sandbox started on first use.
    `sandbox_api_key`: that sandbox's key (the tool's child's own); None = $TURNRL_API_KEY's.
    `on_error` and `timeout_s`: as `reward.on_error` and `reward.timeout_s` (turnrl.rewards.guard).
    `scorers`: data sources added to the public datasets' table, `data_source -> scorer`: a run
    passes the built-in tasks' (`turnrl.tasks.scorers()`).
    """

    def __init__(
        self,
        tokenizer: Any,
        custom_path: str = "",
        custom_name: str = "compute_score",
        missing_ok: bool = False,
        sandbox_url: str | None = None,
        sandbox_api_key: str | None = None,
        on_error: str = "fail_first_step",
        timeout_s: float = 60.0,
        scorers: Mapping[str, ScoreFn] | None = None,
    ):
        if on_error not in ON_ERROR_MODES:
            raise RewardError(f"unknown reward.on_error '{on_error}'; valid: {', '.join(ON_ERROR_MODES)}")
        self.tokenizer = tokenizer
        # with a reward model, a data source may have no rule: it then scores 0 here
        self.missing_ok = missing_ok
        self.custom_path, self.custom_name = custom_path, custom_name
        # loaded here even when a child process calls it: a file that does not import fails at start-up
        self.custom: ScoreFn | None = load_custom(custom_path, custom_name) if custom_path else None
        self.table = registered(sandbox_url, scorers, sandbox_api_key)
        self.on_error = on_error
        self.trained = False  # has a training batch been scored? (fail_first_step is strict until then)
        self.calls: InProcess | RewardProcess = (
            RewardProcess(custom_path, custom_name, self.table, timeout_s)
            if timeout_s > 0
            else InProcess(self.custom, self.table)
        )

    def check(self, data_sources: set[str]) -> None:
        """Fail at start-up, not mid-run, when a data source has no scorer."""
        if self.missing_ok:
            return
        for source in data_sources:
            resolve(source, self.custom, self.table)

    def decode(self, batch: Batch) -> list[str]:
        # only model tokens and observations within the response, never padding
        texts = []
        for ids, mask in zip(
            batch["responses"], batch["attention_mask"][:, -batch["responses"].shape[1] :], strict=True
        ):
            texts.append(self.tokenizer.decode(ids[mask.bool()].tolist(), skip_special_tokens=True))
        return texts

    def __call__(self, batch: Batch, validation: bool = False) -> tuple[torch.Tensor, dict[str, list[float]]]:
        """(token_level_scores, extras). `extras[ERRORS_KEY]` holds this call's count of rows whose
        function failed and scored 0; a failure where `reward.on_error` says stop raises instead."""
        texts = self.decode(batch)
        strict = self._strict(validation)
        scores = torch.zeros(len(batch))
        extras: dict[str, list[float]] = defaultdict(list)
        failed: list[str] = []
        for i, text in enumerate(texts):
            source = batch["data_source"][i]
            if self.missing_ok and self.custom is None and lookup(source, self.table) is None:
                continue
            out = self.calls(source, text, batch["ground_truth"][i], batch["extra_info"][i])
            if out.error:
                what = self._failure(out, batch, i, validation)
                if strict:
                    raise RewardFunctionError(f"{what}; {_fix(out, self.on_error)}")
                failed.append(what)
                continue  # scores 0
            scores[i] = out.score
            for k, v in out.extra.items():
                if k != ERRORS_KEY:  # the name of our count; a function cannot report into it
                    extras[k].append(v)
        if not validation:
            self.trained = True
        if failed:
            log.warning(
                "%d reward call(s) failed and scored 0 (reward.on_error=%s); the first: %s",
                len(failed), self.on_error, failed[0],
            )  # fmt: skip
        extras[ERRORS_KEY] = [float(len(failed))]
        mask = batch["response_mask"]
        token_level = torch.zeros_like(mask, dtype=torch.float32)
        rows = torch.arange(len(batch))
        token_level[rows, last_token_index(mask)] = scores * (mask.sum(1) > 0).float()
        return token_level, dict(extras)

    def _strict(self, validation: bool) -> bool:
        """Does a failure stop the run? `fail_first_step` is strict until the first training batch
        has been scored: validation before training and step 1 are where a broken function shows."""
        if self.on_error == "fail_first_step":
            return not self.trained
        return self.on_error == "fail"

    def _failure(self, out: Outcome, batch: Batch, i: int, validation: bool) -> str:
        """What failed, where: the function, what it did, the row, its index and data_source."""
        source = batch["data_source"][i]
        index = batch["index"][i] if "index" in batch else i
        phase = "validation" if validation else "training"
        if self.on_error == "fail_first_step" and not self.trained:
            phase = "validation before training" if validation else "the first training step"
        return f"{self._name(source)} {out.error} on row {i} (index {index!r}, data_source '{source}') in {phase}"

    def _name(self, source: str) -> str:
        if self.custom_path:
            return f"reward function {self.custom_path}:{self.custom_name}"
        fn = self.table.get(source)
        fn = getattr(fn, "func", fn)  # a functools.partial binding the sandbox
        return f"reward function {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"

    def close(self) -> None:
        """Stop the reward process, if there is one."""
        self.calls.close()


def _fix(out: Outcome, on_error: str) -> str:
    if out.timed_out:
        return "raise reward.timeout_s, or set reward.on_error=zero to score such rows 0"
    if on_error == "fail":
        return "fix the function, or set reward.on_error=zero to score such rows 0 (counted in reward/errors)"
    return "fix the function, or set reward.on_error=zero to score such rows 0 even in the first step"
