"""The episode loop: all episodes advance turn by turn; each turn generates for the active ones only.

    turn t:  generate (active episodes, each from prompt + response so far, until a stop tag / EOS /
             its remaining budget)  ->  parse actions  ->  run every tool call of the turn concurrently
             ->  append each observation (mask 0)  ->  next turn
    after `max_turns` tool turns, one last turn in which a tool call ends the episode.

Ids the model generated are appended exactly as sampled (token in, token out); only observations are
tokenised, on their own.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from turnrl.agent.actions import Action, JsonActions, XmlActions
from turnrl.agent.chat_template import ToolMessages
from turnrl.agent.episode import Episode
from turnrl.agent.executor import ToolCall, ToolExecutor, ToolOutcome
from turnrl.agent.observation import Observation, ObservationBuilder
from turnrl.agent.tools.base import ToolError, xml_argument
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.rollout.base import RolloutEngine, SamplingParams

log = logging.getLogger(__name__)

_SEED_STRIDE = 7919  # a different sampling stream per turn, still fixed by the step's seed


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


class EpisodeLoop:
    def __init__(
        self,
        engine: RolloutEngine,
        tokenizer: Any,
        cfg: MultiTurnConfig,
        tools: dict[str, Any],
        executor: ToolExecutor,
        eos_ids: set[int],
    ):
        self.engine, self.tokenizer, self.cfg = engine, tokenizer, cfg
        self.tools, self.executor, self.eos_ids = tools, executor, eos_ids
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
        gen = self.engine.generate(contexts, p, max_new_tokens_per_row=limits)
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

    def run(self, prompts: list[list[int]], n: int, params: SamplingParams, budget: int) -> list[Episode]:
        """`n` episodes per prompt, interleaved (A,A,B,B); `budget` bounds each whole response."""
        self.stats = self._fresh_stats()
        episodes = [Episode(list(p)) for p in prompts for _ in range(n)]
        cap = self.cfg.max_tokens_per_turn
        for turn in range(self.cfg.max_turns + 1):
            active = [e for e in episodes if not e.done]
            if not active:
                break
            for e in active:
                if e.remaining(budget) <= 0:
                    e.end(truncated=True)
            active = [e for e in active if not e.done]
            if not active:
                break
            limits = [min(e.remaining(budget), cap or budget) for e in active]
            seed = None if params.seed is None else params.seed + _SEED_STRIDE * turn
            # turn 0: the n episodes of a prompt share it, so the engine prefills it once
            group = n if turn == 0 and len(active) == len(episodes) else 1
            outputs = self._generate(active, replace(params, seed=seed), limits, group)
            final = turn == self.cfg.max_turns
            pending: list[tuple[Episode, Action, str]] = []
            for e, out in zip(active, outputs, strict=True):
                e.add_model(out.ids, out.log_probs, out.version)
                e.turns += 1
                step = self._after_generation(e, out, final, budget)
                if step is not None:
                    pending.append((e, *step))
            self._run_tools(pending, budget)
        for e in episodes:
            if not e.done:
                e.end()
        return episodes

    # -- one episode's turn ----------------------------------------------------------------------
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
    def _run_tools(self, pending: list[tuple[Episode, Action, str]], budget: int) -> None:
        calls: list[ToolCall] = [c for _, action, _ in pending for c in action.calls]
        outcomes = iter(self.executor.run(calls))
        for e, action, eos_text in pending:
            results: list[ToolOutcome] = [next(outcomes) for _ in action.calls]
            for call, r in zip(action.calls, results, strict=True):
                e.tool_calls += 1
                e.tool_errors += int(r.error)
                self.stats.latencies.append(r.latency_s)
                self.stats.errors += int(r.error)
                for k, v in r.metrics.items():
                    self.stats.per_tool[call.name][k].append(v)
            self._append(e, self._observation(action, results, eos_text), budget)

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
