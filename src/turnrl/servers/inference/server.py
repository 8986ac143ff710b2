"""The served model behind `turnrl serve`'s routes: the engine, its batcher, the policy version and
weight loads. Every engine call, generation or weight load, runs on the batcher's one worker thread,
so a load never lands in the middle of a generation. The routes (`app`, `chat_route`) only read it."""

from __future__ import annotations

import asyncio

from turnrl.models.weights_dir import load_weights_dir
from turnrl.rollout.hf import HFEngine
from turnrl.servers.inference.batcher import Batcher
from turnrl.servers.inference.common import BadRequest, Limits

MAX_VERSION = 2**63 - 1
"""The largest policy version (an int64: what SGLang, torch and JSON readers all hold exactly)."""


class Server:
    """The served model and its policy version. Every engine call, generation or weight load, runs
    on the batcher's one worker thread, so a load never lands in the middle of a generation."""

    def __init__(
        self,
        engine: HFEngine,
        model_id: str,
        max_model_len: int | None,
        max_batch_rows: int = 256,
        batch_wait_ms: float = 5.0,
        limits: Limits | None = None,
        weights_root: str | None = None,
        tool_call_format: str = "auto",
    ) -> None:
        self.engine, self.model_id, self.max_model_len = engine, model_id, max_model_len
        self.tool_call_format = tool_call_format
        """`--tool-call-format`: how tool calls are read from the model's text (auto: from the template)."""
        self.limits = limits or Limits()
        self.weights_root = weights_root
        self.tokenizer = engine.tokenizer
        self.vocab_size = int(engine.model.get_input_embeddings().weight.shape[0])
        self.policy_version = 0
        self.batcher = Batcher(engine, max_batch_rows, batch_wait_ms / 1000, self.limits.max_waiting)
        self.tool_calls_unparsed = 0  # /v1/chat/completions: <tool_call> blocks returned as content

    async def load(self, path: str, version: int | None) -> tuple[int, int]:
        # shielded: a trainer that stops waiting does not cancel a load it asked for
        future = self.batcher.call(lambda: self._load(path, version))
        return await asyncio.shield(asyncio.wrap_future(future))

    def _load(self, path: str, version: int | None) -> tuple[int, int]:
        """On the worker thread: the path checks touch the file system, which may block."""
        assert self.weights_root is not None
        version = self.policy_version + 1 if version is None else version  # no version: still a new one
        if version > MAX_VERSION:
            raise BadRequest(f"policy_version: {version} is beyond {MAX_VERSION}")
        if version <= self.policy_version:  # checked here, where loads run one at a time
            raise BadRequest(
                f"policy_version: {version} is not newer than the served version {self.policy_version}; "
                f"versions only go up",
                409,
            )
        count = load_weights_dir(self.engine.model, path, root=self.weights_root)
        self.policy_version = version
        self.engine.sync_weights(version)
        return count, version
