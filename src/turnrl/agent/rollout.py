"""Agent-mode rollout (stage 3 with `rollout.multi_turn.enable`): the trainer's entry point.

    agent = AgentRollout(engine, tokenizer, cfg)      # builds tools, starts/checks their servers
    batch, metrics = agent.generate(gen_batch, params, pad_id, response_length)
    agent.close()                                      # stops child servers

`generate` returns the same fields as single-turn `rollout.base.assemble` (rows interleaved
A,A,B,B, `params.n` per prompt), with response_mask 0 on observation tokens, plus per-episode
stats (`agent_turns`, `agent_tool_calls`, ...) and the `agent/*` metrics.
"""

from __future__ import annotations

import logging
from typing import Any

from turnrl.agent.assemble import agent_metrics, assemble_episodes
from turnrl.agent.executor import ToolExecutor
from turnrl.agent.loop import EpisodeLoop
from turnrl.agent.tools.base import ToolError
from turnrl.agent.tools.toolset import ToolSet
from turnrl.batch import Batch
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.config.schema import Config
from turnrl.models.loader import cache_root
from turnrl.rollout.base import RolloutEngine, SamplingParams

log = logging.getLogger(__name__)


def check_multi_turn(mt: MultiTurnConfig) -> None:
    """Cross-field checks of `rollout.multi_turn`, run before any server starts."""
    checks = [
        (mt.format in ("xml", "json"), f"'rollout.multi_turn.format' must be xml or json, got '{mt.format}'"),
        (mt.max_turns >= 0, f"'rollout.multi_turn.max_turns' must be >= 0, got {mt.max_turns}"),
        (
            mt.max_obs_length >= 1,
            f"'rollout.multi_turn.max_obs_length' must be >= 1, got {mt.max_obs_length}",
        ),
        (mt.tool_timeout > 0, f"'rollout.multi_turn.tool_timeout' must be > 0, got {mt.tool_timeout}"),
        (
            mt.max_tokens_per_turn >= 0,
            f"'rollout.multi_turn.max_tokens_per_turn' must be >= 0, got {mt.max_tokens_per_turn}",
        ),
        (
            mt.max_concurrent_calls >= 1,
            f"'rollout.multi_turn.max_concurrent_calls' must be >= 1, got {mt.max_concurrent_calls}",
        ),
        (bool(mt.answer_tag.strip()), "'rollout.multi_turn.answer_tag' must not be empty"),
        (mt.search.topk >= 1, f"'rollout.multi_turn.search.topk' must be >= 1, got {mt.search.topk}"),
        (
            mt.python.run_timeout > 0,
            f"'rollout.multi_turn.python.run_timeout' must be > 0, got {mt.python.run_timeout}",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ToolError(message)
    if not mt.tools and not mt.custom_tools:
        raise ToolError(
            "rollout.multi_turn is enabled but names no tool (rollout.multi_turn.tools / custom_tools)"
        )


def engine_eos(engine: Any, tokenizer: Any) -> set[int]:
    eos = getattr(engine, "eos", None)
    if eos:
        return {int(i) for i in eos}
    return {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()


class AgentRollout:
    def __init__(self, engine: RolloutEngine, tokenizer: Any, cfg: Config):
        mt = cfg.rollout.multi_turn
        check_multi_turn(mt)
        self.cfg = mt
        self.toolset = ToolSet(mt, cache_root(cfg.model.cache_dir)).start()
        self.executor: ToolExecutor | None = None
        try:
            if self.toolset.sandbox_url:
                from turnrl.rewards.code import use_sandbox

                use_sandbox(self.toolset.sandbox_url)  # code rewards reuse the run's sandbox
            self.executor = ToolExecutor(self.toolset.tools, mt.tool_timeout, mt.max_concurrent_calls)
            self.loop = EpisodeLoop(
                engine, tokenizer, mt, self.toolset.tools, self.executor, engine_eos(engine, tokenizer)
            )
        except BaseException:
            self.close()
            raise

    @property
    def tools(self) -> dict[str, Any]:
        return self.toolset.tools

    def generate(
        self, gen_batch: Batch, params: SamplingParams, pad_id: int, response_length: int
    ) -> tuple[Batch, dict[str, float]]:
        ids, mask = gen_batch["input_ids"], gen_batch["attention_mask"]
        prompts = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
        episodes = self.loop.run(prompts, params.n, params, response_length)
        batch = assemble_episodes(gen_batch, episodes, params.n, pad_id, response_length)
        return batch, agent_metrics(episodes, self.loop.stats)

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
