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
from turnrl.batch import Batch
from turnrl.config.schema import Config
from turnrl.models.loader import cache_root
from turnrl.rollout.base import RolloutEngine, SamplingParams

log = logging.getLogger(__name__)


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
        episodes = self.loop.run(prompts, params.n, params, budget, streaming=self.streaming, rows=rows)
        weight = self.cfg.step_reward_weight if self.cfg.step_rewards else None
        batch = assemble_episodes(gen_batch, episodes, params.n, self.pad_id, budget, weight)
        metrics = agent_metrics(episodes, self.loop.stats)
        if self.toolset.supervisors:  # so far in the run: a restart is rare, a step's count would blink
            metrics["servers/restarts"] = float(self.toolset.restarts)
        return batch, metrics

    def close(self) -> None:
        """Close tool clients and stop the child servers; safe to call twice."""
        if self.executor is not None:
            self.executor.close()
            self.executor = None
        self.toolset.close()

    def __enter__(self) -> AgentRollout:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
