"""Stage 6: turn decoded responses into `token_level_scores` (score at the last model token).

A row's score is its rule score (the reward function of its data source), plus `coef` times the
judge's score when `reward.judge` is on (`turnrl.rewards.judge`); a failure of either is handled
by `reward.on_error`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import torch

from turnrl.batch import Batch
from turnrl.config.checks import ON_ERROR_MODES
from turnrl.rewards import judge as judges
from turnrl.rewards.carried import AgentEpisodeError, Carried, CarriedRow, agent_fix
from turnrl.rewards.guard import ERRORS_KEY, InProcess, Outcome, RewardProcess
from turnrl.rewards.judge import Judge, JudgeInput, Verdict, prompt_text, truth_text
from turnrl.rewards.registry import RewardError, ScoreFn, load_custom, lookup, registered, resolve

log = logging.getLogger(__name__)


def last_token_index(response_mask: torch.Tensor) -> torch.Tensor:
    """Column of the last model token per row (0 for an empty response)."""
    cols = torch.arange(response_mask.shape[1], device=response_mask.device).expand_as(response_mask)
    return torch.where(response_mask > 0, cols, torch.zeros_like(cols)).max(dim=1).values


def on_last_token(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) float32 token-level scores: row i's `scores[i]` on its last model token, 0 elsewhere
    (and 0 for a row with an empty response)."""
    token_level = torch.zeros_like(response_mask, dtype=torch.float32)
    rows = torch.arange(len(scores))
    token_level[rows, last_token_index(response_mask)] = scores * (response_mask.sum(1) > 0).float()
    return token_level


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


OWN_PREFIX = "reward/"
"""Extras under this prefix are the reward stage's own metrics, reported under their own names, not
as `reward_extra/<key>/mean`: `reward/errors` and the judge's `reward/judge/*`. A reward function
cannot report into them."""
SUMMED = (ERRORS_KEY, *judges.COUNTS)
"""Own metrics that count rows or requests of one call (one entry per call): summed over a step's
calls. The others (the judge's seconds per request) are averaged."""


def own_metrics(extras: Mapping[str, list[float]]) -> dict[str, float]:
    """The reward stage's own metrics among `extras`, by their own names:

    {"reward/errors": [0, 2], "reward/judge/latency_s": [0.5, 1.5], "acc": [1]}
        ->  {"reward/errors": 2.0, "reward/judge/latency_s": 1.0}
    """
    out = {}
    for key, values in extras.items():
        if key.startswith(OWN_PREFIX) and (values or key in SUMMED):
            out[key] = float(sum(values)) if key in SUMMED else float(sum(values) / len(values))
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
    `judge`: an LLM judge whose score, times its `coef`, is added to each row's rule score (closed
    by `close()`); a row without a rule (`missing_ok`) scores the judge's alone.
    `agent_on_error`: set in a function-agent run (`rollout.agent.on_error`): rows whose agent gave
    its own reward or failed (`turnrl.rewards.carried`) are scored so, not by their rule.
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
        judge: Judge | None = None,
        agent_on_error: str | None = None,
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
        self.judge = judge
        self.agent_on_error = agent_on_error
        self.trained = False  # has a training batch been scored? (fail_first_step is strict until then)
        self.calls: InProcess | RewardProcess = (
            RewardProcess(custom_path, custom_name, self.table, timeout_s)
            if timeout_s > 0
            else InProcess(self.custom, self.table)
        )

    def check(self, data_sources: set[str]) -> None:
        """Fail at start-up, not mid-run, when a data source has no scorer."""
        # an agent function may return its own reward: a source needs a scorer only for the rows
        # whose agent returns messages, and those fail in one line when they are scored
        if self.missing_ok or self.agent_on_error is not None:
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
        function or judge failed and scored 0; a failure where `reward.on_error` says stop raises
        instead. With a judge, `extras` holds its own counts too (`OWN_PREFIX`)."""
        texts = self.decode(batch)
        carried = Carried.of(batch)  # a function agent's own rewards and final answers
        if carried is not None:
            texts = carried.texts(texts)
        strict = self._strict(validation)
        scores = torch.zeros(len(batch))
        extras: dict[str, list[float]] = defaultdict(list)
        failed: list[str] = []
        scored: list[int] = []  # rows whose rule did not fail: the ones the judge scores
        for i, text in enumerate(texts):
            source = batch["data_source"][i]
            if carried is not None and not carried.scored_by_rule(i):
                row = carried.row(i)
                self._take_carried(row, batch, i, validation, scores)
                if not row.error:  # the agent's own accuracy and format, as a scorer's would be
                    for k, v in row.rates.items():
                        extras[k].append(v)
                continue
            if self.missing_ok and self.custom is None and lookup(source, self.table) is None:
                scored.append(i)  # no rule: 0 from the rule
                continue
            out = self.calls(source, text, batch["ground_truth"][i], batch["extra_info"][i])
            if out.error:
                what = self._failure(out, batch, i, validation)
                if strict:
                    raise RewardFunctionError(f"{what}; {_fix(out, self.on_error)}")
                failed.append(what)
                continue  # scores 0
            scores[i] = out.score
            scored.append(i)
            for k, v in out.extra.items():
                if not k.startswith(OWN_PREFIX):  # our metrics' names; a function cannot report into them
                    extras[k].append(v)
        if self.judge is not None and scored:
            self._add_judge(self.judge, batch, texts, scored, scores, extras, failed, validation)
        if not validation:
            self.trained = True
        if failed:
            log.warning(
                "%d reward call(s) failed and scored 0 (reward.on_error=%s); the first: %s",
                len(failed), self.on_error, failed[0],
            )  # fmt: skip
        extras[ERRORS_KEY] = [float(len(failed))]
        return on_last_token(scores, batch["response_mask"]), dict(extras)

    def _add_judge(
        self,
        judge: Judge,
        batch: Batch,
        texts: list[str],
        rows: list[int],
        scores: torch.Tensor,
        extras: dict[str, list[float]],
        failed: list[str],
        validation: bool,
    ) -> None:
        """Add `coef` x the judge's score to `rows`' scores, all rows asked at once; a row whose
        judgment failed raises where `reward.on_error` says stop, else scores 0 and is counted."""
        prompts = batch["raw_prompt"] if "raw_prompt" in batch else [""] * len(batch)
        asked = [
            JudgeInput(prompt_text(prompts[i]), texts[i], truth_text(batch["ground_truth"][i])) for i in rows
        ]
        verdicts = judge.score(asked)
        strict = self._strict(validation)
        for i, verdict in zip(rows, verdicts, strict=True):
            if verdict.error:
                what = f"{judge.name} {verdict.error} {self._where(batch, i, validation)}"
                if strict:
                    raise RewardFunctionError(f"{what}; {_judge_fix(verdict, self.on_error)}")
                failed.append(what)
                scores[i] = 0.0  # a failed reward scores the row 0, whatever its rule said
                continue
            scores[i] += judge.cfg.coef * verdict.score
            extras[judges.SCORE].append(verdict.score)
        for key, values in judge_metrics(verdicts).items():
            extras[key] += values

    def _take_carried(
        self, row: CarriedRow, batch: Batch, i: int, validation: bool, scores: torch.Tensor
    ) -> None:
        """A row whose agent function returned its reward, or failed (`rollout.agent.on_error`)."""
        if not row.error:
            scores[i] = row.reward
            return
        mode = self.agent_on_error or "fail_first_step"
        if self._strict(validation, mode):
            raise AgentEpisodeError(f"{row.error} {self._where(batch, i, validation)}; {agent_fix(mode)}")
        # else it scores 0; the rollout counted it in agent/errors/<kind>

    def _strict(self, validation: bool, on_error: str | None = None) -> bool:
        """Does a failure stop the run? `fail_first_step` is strict until the first training batch
        has been scored: validation before training and step 1 are where a broken function shows.
        `on_error`: the mode to apply (default `reward.on_error`'s)."""
        mode = on_error or self.on_error
        if mode == "fail_first_step":
            return not self.trained
        return mode == "fail"

    def _failure(self, out: Outcome, batch: Batch, i: int, validation: bool) -> str:
        """What failed, where: the function, what it did, the row, its index and data_source."""
        return f"{self._name(batch['data_source'][i])} {out.error} {self._where(batch, i, validation)}"

    def _where(self, batch: Batch, i: int, validation: bool) -> str:
        """`on row 3 (index 'q7', data_source 'my/task') in the first training step`."""
        source = batch["data_source"][i]
        index = batch["index"][i] if "index" in batch else i
        phase = "validation" if validation else "training"
        if self.on_error == "fail_first_step" and not self.trained:
            phase = "validation before training" if validation else "the first training step"
        return f"on row {i} (index {index!r}, data_source '{source}') in {phase}"

    def _name(self, source: str) -> str:
        if self.custom_path:
            return f"reward function {self.custom_path}:{self.custom_name}"
        fn = self.table.get(source)
        fn = getattr(fn, "func", fn)  # a functools.partial binding the sandbox
        return f"reward function {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"

    def close(self) -> None:
        """Stop the reward process and the judge, if there are."""
        self.calls.close()
        if self.judge is not None:
            self.judge.close()


def judge_metrics(verdicts: list[Verdict]) -> dict[str, list[float]]:
    """The judge's own extras of one call: its counts (one entry each) and each request's seconds."""
    out: dict[str, list[float]] = {
        judges.REQUESTS: [float(sum(v.latency_s is not None for v in verdicts))],
        judges.ERRORS: [float(sum(bool(v.error) and not v.unparsed for v in verdicts))],
        judges.UNPARSED: [float(sum(v.unparsed for v in verdicts))],
        judges.CACHE_HITS: [float(sum(v.cached and not v.error for v in verdicts))],
    }
    latencies = [v.latency_s for v in verdicts if v.latency_s is not None]
    if latencies:
        out[judges.LATENCY] = latencies
    return out


def _judge_fix(verdict: Verdict, on_error: str) -> str:
    """What to do about a failed judgment: the settings to look at, and `reward.on_error`."""
    if verdict.unparsed:
        todo = "fix reward.judge.prompt or reward.judge.score_pattern"
    else:
        todo = "check that the judge answers (reward.judge.url, api_key, timeout_s, max_retries)"
    later = "" if on_error == "fail" else " even in the first step"
    return f"{todo}, or set reward.on_error=zero to score such rows 0{later} (counted in reward/errors)"


def _fix(out: Outcome, on_error: str) -> str:
    if out.timed_out:
        return "raise reward.timeout_s, or set reward.on_error=zero to score such rows 0"
    if on_error == "fail":
        return "fix the function, or set reward.on_error=zero to score such rows 0 (counted in reward/errors)"
    return "fix the function, or set reward.on_error=zero to score such rows 0 even in the first step"
