"""Stage 3 with an agent function (`rollout.agent.entrypoint`): any agent written against the
OpenAI API, trained as it is (docs/agent-programs.md).

    rollout = FunctionAgentRollout(engine, tokenizer, cfg, pad_id)    # loads the agent, starts the gateway
    batch, metrics = rollout.generate(gen_batch, params)               # rollout.n episodes per row
    rollout.close()

Each episode is one call of `run(client, model, row)` on a thread of its own (an `async def run`
runs on its own event loop there), at most `rollout.agent.max_concurrency` at once, each under
`rollout.agent.timeout_s`. Its client (`openai.OpenAI`, or `openai.AsyncOpenAI` for an async
agent) talks to the gateway at the episode's own base URL, which records the exact trajectory;
`row` is the dataset row (`prompt`: its messages, `data_source`, `ground_truth`, `extra_info`,
`index`), a copy per episode. An agent as a process (`rollout.agent.command`, `process.py`) is
such a function: it starts the process with the client's URL and key, and is stopped (its process
group killed) at the timeout; for a row that brings a workspace it opens the episode's sandbox
session first and scores the episode by the task's verifier (`process_workspace`).

The batch has the fields of `rollout.base.assemble` with each episode's own prompt (its first
call's, left-padded to the batch's longest), rows interleaved A,A,B,B, plus the agent's reward
carried to the reward stage (`agent_reward`, `agent_answer`, `agent_error`:
`turnrl.rewards.carried`). An episode that fails (the agent raised, timed out, returned no reward,
made no call, or its first prompt was too long) scores 0 and is counted in `agent/errors/<kind>`;
`rollout.agent.on_error` decides, in the reward stage, whether it stops the run. An agent that
fails only because the gateway refused a call for a limit (the response budget, `max_calls`) is
truncated, not failed: it scores 0 unless it returned a reward anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import threading
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from turnrl.agent.assemble import assemble_episodes
from turnrl.agent.episode import Episode
from turnrl.agent.functions.configured import load_configured
from turnrl.agent.functions.entrypoint import (
    AgentFunction,
    EpisodeFailed,
    Returned,
    describe_error,
    read_return,
)
from turnrl.agent.gateway.app import create_app
from turnrl.agent.gateway.server import Gateway, OpenEpisode
from turnrl.agent.gateway.trajectory import EpisodeLimits, Trajectory
from turnrl.batch import Batch
from turnrl.config.checks import ConfigError
from turnrl.config.schema import Config
from turnrl.rollout.base import SamplingParams, Services
from turnrl.servers.chat.template import ChatTemplate, ChatTemplateError, text_of
from turnrl.servers.chat.tool_calls import EpisodeToolCalls, tool_call_metrics, tool_call_warning
from turnrl.tensors import left_pad

log = logging.getLogger(__name__)

ERROR_KINDS = ("exception", "timeout", "bad_return", "no_calls", "prompt_too_long")
"""`agent/errors/<kind>`: why an episode failed (it scores 0, or stops the run: `rollout.agent.on_error`)."""
ROW_FIELDS = ("raw_prompt", "data_source", "ground_truth", "extra_info", "index")
"""The row fields stage 2 lends (`trainer.stages.ROW_FIELDS`; the trainer's layer is above this one)."""


@dataclass
class Read:
    """What the batch keeps of one episode: why it failed, or its reward, answer and numbers."""

    kind: str = ""
    """`agent/errors/<kind>` ('' = it did not fail)."""
    error: str = ""
    reward: float | None = None
    answer: str | None = None
    rates: dict[str, float] = field(default_factory=dict)
    returned: bool = False
    """It returned a reward or an answer (its numbers become `agent/fn/<name>`)."""


@dataclass
class Outcome:
    """How one episode ended, before it is read into a row."""

    returned: Returned | None = None
    error: str = ""
    kind: str = ""
    seconds: float = 0.0


def with_template(tokenizer: Any, path: str) -> Any:
    """The tokenizer, or a copy of it rendering with the template in `path`."""
    if not path:
        return tokenizer
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"rollout.agent.chat_template: file not found: {file}")
    out = copy.copy(tokenizer)  # shares the vocabulary; only this copy renders with the new template
    out.chat_template = file.read_text()
    return out


def _openai() -> Any:
    try:
        import openai
    except ImportError:
        raise ConfigError(
            'rollout.agent.entrypoint needs the openai package (the agent\'s client): pip install -e ".[agents]"'
        ) from None
    return openai


class FunctionAgentRollout:
    """See the module docstring."""

    wants_rows = True
    services = Services()  # its tools are the agent's own
    """Stage 2 lends this rollout the rows' own fields (`trainer.stages.split_generation_input`)."""

    def __init__(self, engine: Any, tokenizer: Any, cfg: Config, pad_id: int) -> None:
        self.engine = engine  # its counters (a server engine's restarts) reach the step's metrics
        ac = cfg.rollout.agent
        self.cfg, self.ac, self.pad_id = cfg, ac, pad_id
        self.agent: AgentFunction = load_configured(ac, cfg.rollout.multi_turn)
        self.openai = _openai()
        tok = with_template(tokenizer, ac.chat_template)
        try:
            template = ChatTemplate(tok)
        except ChatTemplateError as err:
            raise ConfigError(f"rollout.agent: {err}; set rollout.agent.chat_template") from None
        limits = EpisodeLimits(
            cfg.data.max_prompt_length, cfg.data.max_response_length, ac.max_calls, ac.max_forks
        )
        self.gateway = Gateway(
            engine, template, limits, ac.max_concurrency, tool_call_format=ac.tool_call_format
        )
        self.drift_reasons: Counter[str] = Counter()
        """The last step's episodes that drifted, by the first reason each gave (a reader's view)."""
        self.gateway.start(create_app(self.gateway))

    # -- a step's episodes ----------------------------------------------------------------------
    def generate(self, gen_batch: Batch, params: SamplingParams) -> tuple[Batch, dict[str, float]]:
        rows = self._rows(gen_batch)
        ids, mask = gen_batch["input_ids"], gen_batch["attention_mask"]
        fallback = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
        n = params.n
        # each episode its own id, so its client's base URL names it; rows interleaved A,A,B,B
        tag = uuid.uuid4().hex[:8]
        jobs = [(f"{tag}-{i}-{j}", i) for i in range(len(rows)) for j in range(n)]
        outcomes, episodes = self._run_all(jobs, rows, params)
        self.gateway.drain()
        if self.gateway.engine_errors:
            errors, self.gateway.engine_errors = self.gateway.engine_errors, []
            raise RuntimeError(f"the rollout engine failed during agent calls ({len(errors)}): {errors[0]}")
        return self._assemble(jobs, outcomes, episodes, fallback, params)

    def _rows(self, gen_batch: Batch) -> list[dict[str, Any]]:
        missing = [f for f in ROW_FIELDS if f not in gen_batch]
        if missing:
            raise ValueError(
                f"FunctionAgentRollout needs the rows' {', '.join(missing)} in the generation batch "
                "(stage 2 lends them to a rollout with wants_rows)"
            )
        names = {"raw_prompt": "prompt"}
        return [{names.get(f, f): gen_batch[f][i] for f in ROW_FIELDS} for i in range(len(gen_batch))]

    def _run_all(
        self, jobs: list[tuple[str, int]], rows: list[dict[str, Any]], params: SamplingParams
    ) -> tuple[dict[str, Outcome], dict[str, OpenEpisode]]:
        """Every episode to its end: at most `max_concurrency` running, each under `timeout_s`."""
        ac = self.ac
        outcomes: dict[str, Outcome] = {}
        episodes: dict[str, OpenEpisode] = {}
        todo = list(reversed(jobs))
        running: dict[Future[Any], tuple[str, float, float, list[Any]]] = {}
        while todo or running:
            while todo and len(running) < ac.max_concurrency:
                episode_id, i = todo.pop()
                episodes[episode_id] = self.gateway.open(episode_id, params)
                handle: list[Any] = []  # what stops the episode at its timeout (`_cancel`)
                future = self._start(episode_id, copy.deepcopy(rows[i]), handle)
                start = time.monotonic()
                running[future] = (episode_id, start, start + ac.timeout_s, handle)
            soonest = min(deadline for _, _, deadline, _ in running.values())
            done, _ = wait(
                list(running), timeout=max(0.0, soonest - time.monotonic()), return_when=FIRST_COMPLETED
            )
            now = time.monotonic()
            for future, (episode_id, start, deadline, handle) in list(running.items()):
                if future in done:
                    outcomes[episode_id] = self._outcome(future, now - start)
                elif now >= deadline:
                    outcomes[episode_id] = Outcome(
                        error=f"did not return within rollout.agent.timeout_s={ac.timeout_s:g}s (raise it)",
                        kind="timeout",
                        seconds=now - start,
                    )
                    _cancel(handle)  # an async agent stops at its next await; a thread is left to end
                else:
                    continue
                del running[future]
                self.gateway.close_episode(episode_id)  # its running call stops, its next is refused
        return outcomes, episodes

    def _start(self, episode_id: str, row: dict[str, Any], handle: list[Any]) -> Future[Any]:
        """Run the agent on a daemon thread: a hung agent must not keep the trainer from exiting."""
        future: Future[Any] = Future()
        future.set_running_or_notify_cancel()
        base_url, key = self.gateway.base_url(episode_id), self.gateway.key_of(episode_id)
        agent, openai, timeout = self.agent, self.openai, self.ac.timeout_s
        model = self.gateway.model_id
        stop = agent.stop
        if stop is not None:  # a process agent's group is killed at the timeout
            handle.append(lambda: stop(key))

        def run() -> None:
            try:
                if agent.is_async:
                    loop = asyncio.new_event_loop()
                    try:
                        task = loop.create_task(_run_async(agent, openai, base_url, key, timeout, model, row))
                        handle.append(lambda: loop.call_soon_threadsafe(task.cancel))
                        result = loop.run_until_complete(task)
                    finally:
                        loop.close()
                else:
                    client = _client(openai.OpenAI, openai.DefaultHttpxClient, base_url, key, timeout)
                    try:
                        result = agent.fn(client, model, row)
                    finally:
                        client.close()
                future.set_result(result)
            except BaseException as err:  # reported as the episode's failure; the thread just ends
                future.set_exception(err)

        threading.Thread(target=run, name=f"turnrl-agent-{episode_id}", daemon=True).start()
        return future

    def _outcome(self, future: Future[Any], seconds: float) -> Outcome:
        err = future.exception()
        if isinstance(err, EpisodeFailed):  # a failure of its own kind, already one line
            return Outcome(error=str(err), kind=err.kind, seconds=seconds)
        if err is not None:
            return Outcome(
                error=f"raised {describe_error(err, self.agent)}", kind="exception", seconds=seconds
            )
        returned = read_return(future.result())
        if returned.bad:
            return Outcome(returned, error=returned.bad, kind="bad_return", seconds=seconds)
        return Outcome(returned, seconds=seconds)

    # -- the batch ------------------------------------------------------------------------------
    def _read(self, outcome: Outcome, traj: Trajectory) -> Read:
        """What the batch keeps of one episode: its failure, or its reward, answer and numbers."""
        kind, error = outcome.kind, outcome.error
        if traj.prompt_too_long and kind != "timeout":
            kind, error = "prompt_too_long", traj.prompt_too_long
        elif traj.limit and kind in ("exception", "bad_return", "nonzero_exit"):
            kind = error = ""  # it failed because a limit refused its call: truncated, scores 0
        elif not kind and traj.episode is None:
            kind, error = (
                "no_calls",
                "returned without a model call that succeeded (use the client it was given)",
            )
        if kind:
            return Read(kind=kind, error=f"agent {self.agent.name} {error}")
        returned = outcome.returned
        # every number it returned: `acc` and `formatted` become val/accuracy and val/format_rate,
        # the others val/<name>/mean (validation has no agent/fn/* metrics of its own)
        rates = dict(returned.metrics) if returned else {}
        if returned is not None and returned.recorded:  # scored on what the model last said
            return Read(answer=_last_reply(traj), rates=rates, returned=True)
        if returned is None or (returned.reward is None and returned.answer is None):
            return Read(reward=0.0, rates=rates)  # truncated by a limit, and no reward came back
        return Read(reward=returned.reward, answer=returned.answer, rates=rates, returned=True)

    def _assemble(
        self,
        jobs: list[tuple[str, int]],
        outcomes: dict[str, Outcome],
        episodes: dict[str, OpenEpisode],
        fallback: list[list[int]],
        params: SamplingParams,
    ) -> tuple[Batch, dict[str, float]]:
        """One row per sample: an episode that forked at drift gives one per fork, each with the
        episode's reward; `episode_row` says which episode (prompt row) a row belongs to."""
        samples: list[Episode] = []
        owners: list[int] = []
        per_episode = [self._read(outcomes[e], episodes[e].trajectory) for e, _ in jobs]
        for position, (episode_id, i) in enumerate(jobs):
            forks = episodes[episode_id].trajectory.samples or [Episode(list(fallback[i]))]
            for sample in forks:
                sample.done = True
            samples += forks
            owners += [position] * len(forks)
        reads = [per_episode[p] for p in owners]
        prompt_ids, prompt_mask = left_pad([s.prompt for s in samples], self.pad_id)
        prompts = Batch({"input_ids": prompt_ids, "attention_mask": prompt_mask})
        batch = assemble_episodes(prompts, samples, 1, self.pad_id, params.max_new_tokens)
        batch["agent_reward"] = np.array([r.reward for r in reads], dtype=object)
        batch["agent_answer"] = np.array([r.answer for r in reads], dtype=object)
        batch["agent_error"] = np.array([r.error for r in reads], dtype=object)
        batch["agent_rates"] = np.array([r.rates for r in reads], dtype=object)
        batch["episode_row"] = np.array(owners, dtype=np.int64)
        batch["episode_last"] = np.array(
            [a != b for a, b in zip(owners, [*owners[1:], -1], strict=True)], dtype=bool
        )
        return batch, self._metrics(jobs, outcomes, episodes, per_episode)

    def _metrics(
        self,
        jobs: list[tuple[str, int]],
        outcomes: dict[str, Outcome],
        episodes: dict[str, OpenEpisode],
        reads: list[Read],
    ) -> dict[str, float]:
        """`agent/*`, per episode (its forks' samples summed), and the failures logged once."""
        trajs = [episodes[e].trajectory for e, _ in jobs]
        seconds = [outcomes[e].seconds for e, _ in jobs]
        kinds = Counter(r.kind for r in reads if r.kind)
        samples = [t.samples for t in trajs]
        turns = [sum(s.turns for s in ss) for ss in samples]
        out = {
            "agent/turns/mean": _mean(turns),
            "agent/turns/max": float(max(turns, default=0)),
            "agent/calls/mean": _mean([t.calls for t in trajs]),
            "agent/untrained_calls/mean": _mean([t.untrained_calls for t in trajs]),
            "agent/tool_calls/mean": _mean([sum(s.tool_calls for s in ss) for ss in samples]),
            "agent/unparsed_tool_calls": float(sum(t.unparsed_tool_calls for t in trajs)),
            "agent/abandoned_calls/mean": _mean([t.abandoned_calls for t in trajs]),
            "agent/template_drift": float(sum(bool(t.drift) for t in trajs)),
            "agent/template_forks": float(sum(t.forks for t in trajs)),
            "agent/truncated_ratio": _mean([float(bool(ss) and ss[-1].truncated) for ss in samples]),
            "agent/model_tokens/mean": _mean([sum(s.model_tokens for s in ss) for ss in samples]),
            "agent/obs_tokens/mean": _mean([sum(s.obs_tokens for s in ss) for ss in samples]),
            "agent/sampling_overridden": float(sum(episodes[e].sampling_overridden for e, _ in jobs)),
            "agent/episode_s/mean": _mean(seconds),
            "agent/episode_s/max": float(max(seconds, default=0.0)),
        }
        # counts, not ratios: a failure is a rare event, and a count can be checked against what happened
        for kind in (*ERROR_KINDS, *self.agent.error_kinds):
            out[f"agent/errors/{kind}"] = float(kinds.get(kind, 0))
        fn_metrics: dict[str, list[float]] = defaultdict(list)
        for r in reads:
            if r.returned:
                for k, v in r.rates.items():
                    fn_metrics[k].append(v)
        for name, values in fn_metrics.items():
            out[f"agent/fn/{name}"] = _mean(values)
        calls = [EpisodeToolCalls(t.tools_offered, t.tool_calls, t.unparsed_tool_calls) for t in trajs]
        out.update(tool_call_metrics(calls))
        if line := tool_call_warning(calls, self.gateway.tool_format):
            log.warning(line)  # once a step: the model may write another tool-call format, or none
        _log_trouble(reads, trajs)
        self.drift_reasons = Counter(t.drift for t in trajs if t.drift)
        return out

    def close(self) -> None:
        """Stop the gateway; safe to call twice."""
        agent = getattr(self, "agent", None)
        if agent is not None and agent.stop is not None:
            agent.stop(None)  # nothing an episode started outlives the rollout
        if agent is not None and agent.close is not None:
            agent.close()
        gateway = getattr(self, "gateway", None)
        if gateway is not None:
            gateway.close()
            self.gateway = None  # type: ignore[assignment]

    def __enter__(self) -> FunctionAgentRollout:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def _log_trouble(reads: list[Read], trajs: list[Trajectory]) -> None:
    """One warning for the step's failed episodes, one for its drifted ones, each with the first."""
    kinds = Counter(r.kind for r in reads if r.kind)
    if kinds:
        first = next(r.error for r in reads if r.error)
        log.warning("%d agent episode(s) failed (%s); the first: %s", sum(kinds.values()), dict(kinds), first)
    drifted = [t.drift for t in trajs if t.drift]
    if drifted:
        log.warning(
            "%d agent episode(s) drifted from their recorded trajectory (%d fork(s), %d call(s) untrained); "
            "the first: %s",
            len(drifted),
            sum(t.forks for t in trajs),
            sum(t.untrained_calls for t in trajs),
            drifted[0],
        )


def _client(cls: Any, http_cls: Any, base_url: str, key: str, timeout: float) -> Any:
    # no retries: a refused call is the episode's answer, and a retried one would be a second call;
    # no proxy from the environment: the gateway is on loopback
    return cls(
        base_url=base_url,
        api_key=key,
        max_retries=0,
        timeout=timeout,
        http_client=http_cls(trust_env=False, timeout=timeout),
    )


async def _run_async(
    agent: AgentFunction,
    openai: Any,
    base_url: str,
    key: str,
    timeout: float,
    model: str,
    row: dict[str, Any],
) -> Any:
    client = _client(openai.AsyncOpenAI, openai.DefaultAsyncHttpxClient, base_url, key, timeout)
    try:
        return await agent.fn(client, model, row)
    finally:
        await client.close()


def _cancel(handle: list[Any]) -> None:
    """Stop a late episode: an async agent's task is cancelled on its own loop, a process agent's
    group killed (a sync agent's thread cannot be stopped)."""
    for stop in handle:
        with contextlib.suppress(RuntimeError):  # its loop has already ended
            stop()


def _last_reply(traj: Trajectory) -> str:
    """The content of the last assistant message the gateway recorded ('' without one)."""
    last = traj.expected[-1] if traj.expected else {}
    try:
        return text_of(last.get("content"))
    except ChatTemplateError:
        return ""
