"""The episode loop: generate -> parse -> tool calls -> observation, turn after turn, in one of two schedules.

    turn-locked (default): all episodes advance turn by turn; each turn generates for the active ones in
             one engine call, then runs every tool call of the turn concurrently, then appends each
             observation (mask 0); a turn waits for the slowest tool call of the batch.
    streaming: each episode runs its own turns in a worker thread (at most `max_episodes_in_flight` at
             once), so a slow tool call holds back only its own episode (async RL: the batch's tail no
             longer idles the engine). Engine calls overlap only if the engine says `concurrent = True`.
    after `max_turns` tool turns, one last turn in which a tool call ends the episode.

Both schedules share one turn step (`_can_act`, `_generate`, `_take_turn`, `_observe`), so masks, budgets,
invalid actions, truncation and policy versions follow the same rules. Ids the model generated are
appended exactly as sampled (token in, token out); only observations are tokenised, on their own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from turnrl.agent.actions import Action, JsonActions, XmlActions
from turnrl.agent.chat_template import ToolMessages
from turnrl.agent.episode import Episode
from turnrl.agent.executor import ToolCall, ToolExecutor, ToolOutcome
from turnrl.agent.observation import Observation, ObservationBuilder
from turnrl.agent.tools.base import ToolError, xml_argument
from turnrl.agent.tools.step_rewards import StepReward
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.rollout.base import RolloutEngine, SamplingParams

log = logging.getLogger(__name__)

_SEED_STRIDE = 7919  # a different sampling stream per turn, still fixed by the step's seed
# streaming: one engine call per episode and turn, so each episode needs its own stream too
# (7919 and 104729 are primes: seed + 7919 t + 104729 i never repeats for t < 104729)
_EPISODE_STRIDE = 104729


@dataclass
class TurnOutput:
    ids: list[int]
    log_probs: list[float]
    reason: str
    version: int


@dataclass
class CallStats:
    latencies: list[float]
    errors: int
    per_tool: dict[str, dict[str, list[float]]]
    error_kinds: Counter[str] = field(default_factory=Counter)
    """Failed calls by `ToolOutcome.kind`; they sum to `errors`."""
    engine_s: float = 0.0
    """Seconds spent waiting on the engine's generate calls."""
    tools_s: float = 0.0
    """Seconds spent waiting on tool calls (summed over episodes' threads when streaming)."""


class EpisodeLoop:
    def __init__(
        self,
        engine: RolloutEngine,
        tokenizer: Any,
        cfg: MultiTurnConfig,
        tools: dict[str, Any],
        executor: ToolExecutor,
        eos_ids: set[int],
        max_episodes_in_flight: int = 64,
        step_rewards: Mapping[str, StepReward] | None = None,
    ):
        """`step_rewards`: None, no step rewards; else the built-in tools' by name (`ToolSet.step_rewards`),
        and every turn's calls are rewarded (`_reward_turn`)."""
        self.engine, self.tokenizer, self.cfg = engine, tokenizer, cfg
        self.step_rewards = step_rewards
        self.tools, self.executor, self.eos_ids = tools, executor, eos_ids
        if max_episodes_in_flight < 1:
            raise ValueError(f"max_episodes_in_flight must be >= 1, got {max_episodes_in_flight}")
        self.max_episodes_in_flight = max_episodes_in_flight
        # streaming: the turn step's bookkeeping (parsing, observation tokenising, `stats`) runs under
        # this lock; only engine and tool calls run outside it. It is pure Python work that holds the
        # GIL anyway, and the tokenizer is never used from two episode threads at once.
        self._step_lock = threading.Lock()
        self.template: ToolMessages | None = None
        self.parser: XmlActions | JsonActions
        if cfg.format == "xml":
            tags: dict[str, tuple[str, str]] = {}
            for t in tools.values():
                tag = getattr(t, "tag", t.name)
                if tag in tags:
                    raise ToolError(
                        f"rollout.multi_turn: tools '{tags[tag][0]}' and '{t.name}' share the tag <{tag}>"
                    )
                tags[tag] = (t.name, xml_argument(t))
            self.parser = XmlActions(tags, cfg.answer_tag)
            first_tag = next(iter(tags), "tool")
        elif cfg.format == "json":
            probed = ToolMessages.probe(tokenizer)
            if isinstance(probed, str):
                log.warning(
                    "format=json: %s; tool results go inside the assistant message as <tool_response>", probed
                )
                self.parser = JsonActions(set(tools), stops=["</tool_call>"])
            else:
                self.template = probed
                self.parser = JsonActions(set(tools))
            first_tag = "tool_call"
        else:
            raise ToolError(f"rollout.multi_turn.format must be 'xml' or 'json', got '{cfg.format}'")
        self.tags = {"tool_tag": first_tag, "answer_tag": cfg.answer_tag}
        self.obs = ObservationBuilder(
            tokenizer,
            cfg.max_obs_length,
            cfg.obs_truncation_marker,
            cfg.invalid_action_observation,
            self.template,
        )
        self.stats = self._fresh_stats()

    @staticmethod
    def _fresh_stats() -> CallStats:
        return CallStats([], 0, defaultdict(lambda: defaultdict(list)))

    # -- generation ------------------------------------------------------------------------------
    def _generate(
        self, active: list[Episode], params: SamplingParams, limits: list[int], n: int
    ) -> list[TurnOutput]:
        stops = list(dict.fromkeys([*params.stop, *self.parser.stops]))
        p = replace(params, n=n, max_new_tokens=max(limits), stop=stops)
        contexts = [e.context for e in active[::n]]
        start = time.perf_counter()
        gen = self.engine.generate(contexts, p, max_new_tokens_per_row=limits)
        self.stats.engine_s += time.perf_counter() - start  # one engine call at a time, even when streaming
        out = []
        for row, (ids, lps, reason, limit) in enumerate(
            zip(gen.response_ids, gen.log_probs, gen.finish_reasons, limits, strict=True)
        ):
            if len(ids) > limit:  # an engine must honour its row's budget: a silent cut would hide it
                raise RuntimeError(f"rollout engine returned {len(ids)} tokens for a row limited to {limit}")
            out.append(
                TurnOutput(
                    list(ids), list(lps), reason, min(gen.versions_of(row), default=gen.policy_version)
                )
            )
        return out

    def run(
        self,
        prompts: list[list[int]],
        n: int,
        params: SamplingParams,
        budget: int,
        streaming: bool = False,
        rows: list[dict[str, Any]] | None = None,
        workspaces: list[Any] | None = None,
    ) -> list[Episode]:
        """`n` episodes per prompt, interleaved (A,A,B,B) whatever order they finish in; `budget` bounds
        each whole response. `streaming`: each episode runs its own turns (see the module docstring).
        `rows`: each prompt's dataset row, for the step rewards that read it. `workspaces`: each
        episode's sandbox session (`agent.workspaces`), in episode order; an exception in place of one
        (it could not be opened) ends that episode before its first turn."""
        self.stats = self._fresh_stats()
        rows = rows or [{} for _ in prompts]
        episodes = [Episode(list(p), row=row) for p, row in zip(prompts, rows, strict=True) for _ in range(n)]
        for e, w in zip(episodes, workspaces or [], strict=False):
            e.workspace, e.done = (None, True) if isinstance(w, BaseException) else (w, False)
        if streaming:
            self._run_streaming(episodes, params, budget)
        else:
            self._run_turn_locked(episodes, n, params, budget)
        for e in episodes:
            if not e.done:
                e.end()
        release = getattr(self.engine, "release", None)  # an engine's cache of their last turns
        if release is not None:
            release([e.context for e in episodes])
        return episodes

    def _run_turn_locked(self, episodes: list[Episode], n: int, params: SamplingParams, budget: int) -> None:
        for turn in range(self.cfg.max_turns + 1):
            active = [e for e in episodes if self._can_act(e, budget)]
            if not active:
                break
            limits = [self._turn_limit(e, budget) for e in active]
            seed = None if params.seed is None else params.seed + _SEED_STRIDE * turn
            # turn 0: the n episodes of a prompt share it, so the engine prefills it once
            group = n if turn == 0 and len(active) == len(episodes) else 1
            outputs = self._generate(active, replace(params, seed=seed), limits, group)
            final = turn == self.cfg.max_turns
            pending: list[tuple[Episode, Action, str]] = []
            for e, out in zip(active, outputs, strict=True):
                step = self._take_turn(e, out, final, budget)
                if step is not None:
                    pending.append((e, *step))
            calls: list[ToolCall] = [c for _, action, _ in pending for c in action.calls]
            start = time.perf_counter()
            outcomes = iter(self.executor.run(calls))
            self.stats.tools_s += time.perf_counter() - start
            for e, action, eos_text in pending:
                self._observe(e, action, [next(outcomes) for _ in action.calls], eos_text, budget)

    def _run_streaming(self, episodes: list[Episode], params: SamplingParams, budget: int) -> None:
        if not episodes:
            return
        # an in-process engine (HFEngine) runs one call at a time; tools still overlap across episodes
        engine_lock = nullcontext() if getattr(self.engine, "concurrent", False) else threading.Lock()
        abort = threading.Event()
        workers = min(self.max_episodes_in_flight, len(episodes))
        with ThreadPoolExecutor(workers, thread_name_prefix="turnrl-episode") as pool:
            futures = [
                pool.submit(self._run_episode, e, i, params, budget, engine_lock, abort)
                for i, e in enumerate(episodes)
            ]
            try:
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                for f in futures:
                    if f in done:
                        f.result()  # raises a failed episode's error
            finally:  # after an error (or an interrupt) the other episodes stop at their next turn
                abort.set()
                for f in futures:
                    f.cancel()

    def _run_episode(
        self,
        e: Episode,
        index: int,
        params: SamplingParams,
        budget: int,
        engine_lock: AbstractContextManager[Any],
        abort: threading.Event,
    ) -> None:
        """One episode's turns, in a worker thread: generate -> parse -> its own tool calls -> observe."""
        for turn in range(self.cfg.max_turns + 1):
            if abort.is_set() or not self._can_act(e, budget):
                return
            seed = None
            if params.seed is not None:
                seed = params.seed + _SEED_STRIDE * turn + _EPISODE_STRIDE * index
            with engine_lock:
                (out,) = self._generate([e], replace(params, seed=seed), [self._turn_limit(e, budget)], 1)
            with self._step_lock:
                step = self._take_turn(e, out, turn == self.cfg.max_turns, budget)
            if step is None:
                continue  # ended, or shown a corrective observation
            action, eos_text = step
            start = time.perf_counter()
            outcomes = self.executor.run(action.calls)
            with self._step_lock:
                self.stats.tools_s += time.perf_counter() - start
                self._observe(e, action, outcomes, eos_text, budget)

    # -- one episode's turn ----------------------------------------------------------------------
    def _can_act(self, e: Episode, budget: int) -> bool:
        """Whether the episode gets another turn; one with no budget left ends truncated."""
        if e.done:
            return False
        if e.remaining(budget) <= 0:
            e.end(truncated=True)
            return False
        return True

    def _turn_limit(self, e: Episode, budget: int) -> int:
        return min(e.remaining(budget), self.cfg.max_tokens_per_turn or budget)

    def _take_turn(self, e: Episode, out: TurnOutput, final: bool, budget: int) -> tuple[Action, str] | None:
        """Append the turn's generated ids as sampled; returns (tool action, eos text) when tools must run."""
        e.add_model(out.ids, out.log_probs, out.version)
        e.turns += 1
        step = self._after_generation(e, out, final, budget)
        if step is not None and e.workspace is not None:  # the tools that act in it get it with each call
            for call in step[0].calls:
                call.workspace = e.workspace
        return step

    def _after_generation(
        self, e: Episode, out: TurnOutput, final: bool, budget: int
    ) -> tuple[Action, str] | None:
        """Decide what the turn did; returns (tool action, eos text) when tools must run."""
        eos_text = ""
        if out.ids and out.ids[-1] in self.eos_ids:
            eos_text = self.tokenizer.decode(out.ids[-1:], skip_special_tokens=False)
        action = self.parser.parse(self.tokenizer.decode(out.ids, skip_special_tokens=False))
        if isinstance(self.parser, JsonActions) and action.kind == "answer" and not eos_text:
            action = Action("none")  # a chat message without a call is an answer only once the model ends it
        out_of_budget = e.remaining(budget) <= 0
        if action.kind == "answer":
            e.valid_actions += 1
            e.answered = True
            e.end()
        elif action.kind == "tool":
            e.valid_actions += 1
            if final or out_of_budget:
                e.end(truncated=out_of_budget)  # no tools after max_turns; no room for an observation
            else:
                return action, eos_text
        elif action.kind == "invalid":
            e.invalid_actions += 1
            self._correct(e, action.reason, final, budget, eos_text)
        elif out_of_budget:
            e.end(truncated=True)
        elif eos_text and self.cfg.eos_ends_episode:
            e.end()
        else:  # stopped without an action: EOS (Search-R1's way), a user stop string, or the per-turn cap
            e.invalid_actions += 1
            self._correct(e, "no action", final, budget, eos_text)
        return None

    def _correct(self, e: Episode, reason: str, final: bool, budget: int, eos_text: str) -> None:
        if final or not self.cfg.invalid_action_observation:
            e.end()
            return
        if self.template is not None:
            text = self.obs.invalid_text_for(reason, **self.tags).strip()
            obs = self.obs.tool_messages([f"error: {reason}. {text}"], eos_text)
        else:
            obs = self.obs.invalid(reason, **self.tags)
        self._append(e, obs, budget)

    def _append(self, e: Episode, obs: Observation, budget: int) -> None:
        if len(obs.ids) >= e.remaining(budget):  # it would leave the model no token to act on
            e.end(truncated=True)
            return
        e.add_observation(obs.ids)
        e.obs_cut += obs.cut

    # -- tools -----------------------------------------------------------------------------------
    def _observe(
        self, e: Episode, action: Action, results: list[ToolOutcome], eos_text: str, budget: int
    ) -> None:
        """Count one turn's tool outcomes and append them as the episode's observation."""
        for call, r in zip(action.calls, results, strict=True):
            e.tool_calls += 1
            e.tool_errors += int(r.error)
            self.stats.latencies.append(r.latency_s)
            self.stats.errors += int(r.error)
            if r.error:
                self.stats.error_kinds[r.kind] += 1
            for k, v in r.metrics.items():
                self.stats.per_tool[call.name][k].append(v)
        if self.step_rewards is not None:
            self._reward_turn(e, action, results, self.step_rewards)
        self._append(e, self._observation(action, results, eos_text), budget)

    def _reward_turn(
        self, e: Episode, action: Action, results: list[ToolOutcome], builtins: Mapping[str, StepReward]
    ) -> None:
        """The turn's step reward: the mean over its calls that give one (a tool's own
        `ToolResult.reward`, else its built-in step reward), so several calls in one turn earn no
        more than one; a turn whose calls give none keeps 0."""
        rewards = []
        for call, r in zip(action.calls, results, strict=True):
            reward, builtin = r.reward, builtins.get(call.name)
            if reward is None and builtin is not None:
                reward = builtin(r, e.row, e.step_memo)
            if reward is not None:
                rewards.append(reward)
                self.stats.per_tool[call.name]["step_reward"].append(reward)
        if rewards:
            e.reward_turn(sum(rewards) / len(rewards))

    def _observation(self, action: Action, results: list[ToolOutcome], eos_text: str) -> Observation:
        if self.template is not None:
            return self.obs.tool_messages([r.text for r in results], eos_text)
        parts = []
        for call, r in zip(action.calls, results, strict=True):
            tag = (
                "tool_response"
                if self.cfg.format == "json"
                else getattr(self.tools[call.name], "obs_tag", "observation")
            )
            parts.append(self.obs.xml(tag, r.text))
        return Observation([i for p in parts for i in p.ids], sum(p.cut for p in parts))
