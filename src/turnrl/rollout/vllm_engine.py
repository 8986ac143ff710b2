"""A colocated vLLM engine (`rollout.engine=vllm`, `pip install 'turnrl[vllm]'`): one `vllm.LLM` in the
actor's process, sharing the GPU with training.

- Token in, token out: prompts go in as `TokensPrompt(prompt_token_ids=...)`; the sampled ids come back
  verbatim from `CompletionOutput.token_ids`, never re-tokenised.
- Log-probs: `logprobs_mode="processed_logprobs"` makes vLLM report log p at the sampling temperature
  (its default, `raw_logprobs`, is before temperature), so they are comparable with the trainer's.
- Memory: with `enable_sleep_mode`, the engine sleeps (level 1: weights to CPU, KV cache dropped) while
  the actor trains and wakes for each rollout.
- Weights: after each actor update `sync_weights` loads the actor's state dict into the engine's model
  (`LLM.apply_model(... load_weights)`, vLLM >= 0.10): no file, no second process.

Written against vLLM 0.10-0.11's `LLM` API; vLLM cannot be installed on the machines this project is
tested on, so this file has not been run here (its tests skip without vLLM).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from turnrl.errors import TurnrlInputError
from turnrl.rollout.base import Generation, SamplingParams, row_limits


class VLLMMissing(TurnrlInputError):
    """`rollout.engine=vllm` without vLLM installed."""


class VLLMEngine:
    def __init__(
        self,
        model_dir: str,
        eos_ids: set[int],
        weights: Callable[[], dict[str, torch.Tensor]],
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.4,
        seed: int = 1,
    ):
        try:
            from vllm import LLM
        except ImportError:
            raise VLLMMissing("rollout.engine=vllm needs vLLM: pip install 'turnrl[vllm]'") from None
        self.eos_ids = set(eos_ids)
        self.version = 0
        self.max_lag = 0  # the protocol's; weights are swapped between batches, one version per batch
        self._weights = weights
        self.llm: Any = LLM(
            model=model_dir,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_sleep_mode=True,
            logprobs_mode="processed_logprobs",
            seed=seed,
        )
        self.llm.sleep(level=1)  # the actor's first update needs the memory

    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
    ) -> Generation:
        from vllm import SamplingParams as VSampling
        from vllm.inputs import TokensPrompt

        limits = row_limits(prompt_ids, params, max_new_tokens_per_row)
        # one request per output row: each has its own budget (agent turns) and its own seed
        prompts, sampling = [], []
        for r, limit in enumerate(limits):
            prompts.append(TokensPrompt(prompt_token_ids=prompt_ids[r // params.n]))
            sampling.append(
                VSampling(
                    n=1,
                    temperature=params.temperature,
                    top_p=params.top_p,
                    top_k=params.top_k if params.top_k > 0 else -1,
                    max_tokens=limit,
                    stop=list(params.stop) or None,
                    include_stop_str_in_output=True,
                    stop_token_ids=[] if params.ignore_eos else sorted(self.eos_ids),
                    ignore_eos=params.ignore_eos,
                    seed=None if params.seed is None else params.seed * 100_003 + r,
                    logprobs=0,
                )
            )
        self.llm.wake_up()
        try:
            outputs = self.llm.generate(prompts, sampling, use_tqdm=False)
        finally:
            self.llm.sleep(level=1)
        out = Generation([], [], [], policy_version=self.version)
        for request in outputs:
            c = request.outputs[0]
            ids = list(c.token_ids)
            out.response_ids.append(ids)
            out.log_probs.append([float(step[t].logprob) for step, t in zip(c.logprobs, ids, strict=True)])
            out.finish_reasons.append("length" if c.finish_reason == "length" else "stop")
        return out

    def sync_weights(self, version: int) -> None:
        state = self._weights()
        self.llm.wake_up(tags=["weights"])  # load into live weight memory; the KV cache stays freed
        try:
            self.llm.apply_model(lambda model: model.load_weights(state.items()))
        finally:
            self.llm.sleep(level=1)
        self.version = version

    def close(self) -> None:
        self.llm = None
