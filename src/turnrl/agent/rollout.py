"""Agent-mode rollout (stage 3 with `rollout.multi_turn.enable`): the trainer's entry point.

    agent = AgentRollout(engine, tokenizer, cfg, pad_id)   # builds tools, starts/checks their servers
    batch, metrics = agent.generate(gen_batch, params)      # budget: params.max_new_tokens per response
    agent.close()                                           # stops child servers

`generate` returns the same fields as single-turn `rollout.base.assemble` (rows interleaved
A,A,B,B, `params.n` per prompt), with response_mask 0 on observation tokens, plus per-episode
stats (`agent_turns`, `agent_tool_calls`, ...) and the `agent/*` metrics.

`streaming=True` (async RL) runs each episode's turns on its own, at most `max_episodes_in_flight`
at once, so a slow tool call holds back only its episode; the default turn-locked schedule keeps
the synchronous trainer's samples bit for bit (see `agent.loop`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from turnrl.agent.assemble import agent_metrics, assemble_episodes
from turnrl.agent.executor import ToolExecutor
from turnrl.agent.loop import EpisodeLoop
from turnrl.agent.tools.toolset import ToolSet
from turnrl.agent.workspaces import Finished, Workspaces, carried_fields, one_line, workspace_metrics
from turnrl.batch import Batch
from turnrl.config.schema import Config
from turnrl.models.loader import cache_root
from turnrl.rollout.base import RolloutEngine, SamplingParams

log = logging.getLogger(__name__)

OPEN_TIMEOUT_S = 120.0
"""Opening (or closing) every episode's session of a step; a sandbox slower than this is down."""
FINISH_TIMEOUT_S = 900.0
"""Verifying every episode of a step: above the longest verifier the sandbox runs (300 s) plus its
files' transfer; each verifier is bounded by its own timeout well before."""


class AgentRollout:
    wants_rows = False

    def __init__(
        self,
        engine: RolloutEngine,
        tokenizer: Any,
        cfg: Config,
        pad_id: int,
        streaming: bool = False,
        max_episodes_in_flight: int = 64,
        default_index: Callable[[Path], Path] | None = None,
    ):
        """`default_index`: see `ToolSet` (the run's assembly passes the search task's index)."""
        mt = cfg.rollout.multi_turn
        self.wants_rows = mt.step_rewards  # the search tool's step reward reads each row's answers
        self.engine = engine  # its counters (a server engine's restarts) reach the step's metrics
        self.cfg, self.pad_id, self.streaming = mt, pad_id, streaming
        self.toolset = ToolSet(mt, cache_root(cfg.model.cache_dir), default_index).start()
        self.services = self.toolset.services  # code rewards reuse its sandbox
        self.executor: ToolExecutor | None = None
        self.workspaces: Workspaces | None = None
        if (ws := self.toolset.services.workspace) is not None:  # bash / editor: one session per episode
            self.workspaces = Workspaces(ws.url, ws.api_key or None, mt.workspace.ttl_s)
            self.wants_rows = True  # a row carries its task's workspace and tests
        try:
            self.executor = ToolExecutor(self.toolset.tools, mt.tool_timeout, mt.max_concurrent_calls)
            self.loop = EpisodeLoop(
                engine,
                tokenizer,
                mt,
                self.toolset.tools,
                self.executor,
                set(engine.eos_ids),
                max_episodes_in_flight,
                self.toolset.step_rewards if mt.step_rewards else None,
            )
        except BaseException:
            self.close()
            raise

    @property
    def tools(self) -> dict[str, Any]:
        return self.toolset.tools

    def generate(self, gen_batch: Batch, params: SamplingParams) -> tuple[Batch, dict[str, float]]:
        """`params.max_new_tokens` bounds each whole response (model and observation tokens)."""
        ids, mask = gen_batch["input_ids"], gen_batch["attention_mask"]
        prompts = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
        budget = params.max_new_tokens
        rows = [{k: v[i] for k, v in gen_batch.non_tensors.items()} for i in range(len(prompts))]
        sessions = self._open(rows, params.n)
        episodes = self.loop.run(
            prompts, params.n, params, budget, streaming=self.streaming, rows=rows, workspaces=sessions
        )
        weight = self.cfg.step_reward_weight if self.cfg.step_rewards else None
        batch = assemble_episodes(gen_batch, episodes, params.n, self.pad_id, budget, weight)
        metrics = agent_metrics(episodes, self.loop.stats)
        if sessions is not None:
            finished = self._finish(episodes, sessions)
            for key, value in carried_fields(finished).items():
                batch[key] = value
            metrics.update(workspace_metrics(finished))
        if self.toolset.supervisors:  # so far in the run: a restart is rare, a step's count would blink
            metrics["servers/restarts"] = float(self.toolset.restarts)
        return batch, metrics

    def _open(self, rows: list[dict[str, Any]], n: int) -> list[Any] | None:
        """Each episode's sandbox session (an exception where it could not be opened), in episode
        order; None without workspace tools."""
        if self.workspaces is None or self.executor is None:
            return None
        opening = [self.workspaces.open(row) for row in rows for _ in range(n)]
        return self.executor.gather(opening, OPEN_TIMEOUT_S)

    def _finish(self, episodes: list[Any], sessions: list[Any]) -> list[Finished]:
        """Each episode verified by its task's tests in its session, the sessions deleted."""
        assert self.workspaces is not None and self.executor is not None
        finishing = [self.workspaces.finish(s, e.row) for e, s in zip(episodes, sessions, strict=True)]
        done = self.executor.gather(finishing, FINISH_TIMEOUT_S)
        # finish never raises for the sandbox's sake; anything else it raised still fails only its episode
        return [d if isinstance(d, Finished) else Finished(None, f"workspace: {one_line(d)}") for d in done]

    def close(self) -> None:
        """Close tool clients and stop the child servers; safe to call twice."""
        if self.executor is not None and self.workspaces is not None:
            self.executor.gather([self.workspaces.aclose()], OPEN_TIMEOUT_S)
            self.workspaces = None
        if self.executor is not None:
            self.executor.close()
            self.executor = None
        self.toolset.close()

    def __enter__(self) -> AgentRollout:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
