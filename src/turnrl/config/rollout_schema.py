"""Configuration of sampling (`rollout.*`): the engine, its inference servers, the sampling
parameters; agent episodes are `rollout.multi_turn.*` and `rollout.agent.*` (`agent_schema.py`).

Token budgets count tokens of one response, never of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from turnrl.config.agent_schema import FunctionAgentConfig, MultiTurnConfig
from turnrl.config.rules import ranged


@dataclass
class ServerConfig:
    urls: list[str] = field(default_factory=list)
    """Inference servers (`turnrl serve`, vLLM or SGLang OpenAI-compatible), e.g. `http://10.0.0.2:8000`.
    Empty = start one `turnrl serve` child process for the run on this machine."""
    timeout_s: float = ranged(600.0, "> 0")
    """Seconds one completion request may take before it counts as failed."""
    max_retries: int = ranged(3, ">= 0")
    """Retries of a request after a connection error (on the next server), before the run stops."""
    startup_timeout_s: float = ranged(300.0, "> 0")
    """Seconds to wait for a server (or the child server) to answer `/health` at start-up."""
    weights_dir: str = ""
    """Where the trainer writes each synced policy version for the servers to load (must be visible to
    them). Empty = `<run>/rollout_weights`."""
    device: str = "auto"
    """Device of the child server: `auto` (the trainer's), `cpu` or `cuda`."""
    api_key: str = ""
    """Key of the servers in `urls`, sent as `Authorization: Bearer <key>`. Empty = $TURNRL_API_KEY
    (prefer it: a key here is saved with the run's config). The child server started without `urls`
    gets a fresh key of its own."""


@dataclass
class RolloutConfig:
    engine: str = "hf"
    """Who samples: `hf` (in-process transformers loop), `server` (HTTP inference servers, see
    `rollout.server`) or `vllm` (in-process vLLM, `pip install turnrl[vllm]`)."""
    server: ServerConfig = field(default_factory=ServerConfig)
    """Inference servers for `rollout.engine=server`."""
    n: int = ranged(8, "in [1, 65536]", "a group's size; more is a typo")
    """Samples per prompt: the group size for GRPO-style estimators."""
    temperature: float = ranged(1.0, "> 0")
    """Sampling temperature; old log-probs are computed at this temperature too."""
    top_p: float = ranged(1.0, "in (0, 1]")
    """Nucleus sampling threshold (1.0 = off)."""
    top_k: int = ranged(0, ">= 0", "0 = off")
    """Top-k sampling (0 = off)."""
    stop: list[str] = field(default_factory=list)
    """Extra stop strings; generation always stops at the tokenizer's EOS unless `ignore_eos`."""
    ignore_eos: bool = False
    """Generate every response to the full budget, never stopping at EOS (for benchmarks: every
    step then does the same work). EOS tokens are still sampled and kept; rewards see them."""
    generation_batch_size: int = ranged(64, ">= 1")
    """Responses generated per forward batch (bounds rollout memory)."""
    sync_every: int = ranged(0, ">= 0", "0 = by device")
    """`hf` engine: decode steps between host syncs (stop checks, dropping finished rows); 0 = 1 on CPU,
    16 on CUDA, where a sync per token would stall the GPU."""
    kv_cache: str = "preallocated"
    """`hf` engine: `preallocated` (each batch's KV cache allocated once and written in place) or
    `dynamic` (transformers' cache, which copies itself at every token). Same numbers either way;
    models with sliding-window layers always use `dynamic`."""
    share_prefix: bool = True
    """`hf` engine: the prompt prefix all rows of a forward batch share (an agent's system prompt,
    re-sent every turn) is prefilled for one row and its keys and values copied to the others; the
    same function of the same tokens, fewer prefill tokens (docs/rollout.md)."""
    prefix_cache_mb: int = ranged(2048, ">= 0", "0 = off")
    """`hf` engine, agent rollouts: the keys and values each finished row leaves (its prompt and the
    tokens it sampled) are kept, up to this many MiB, and an episode's next turn prefills only what
    its prompt adds (the tool's observation): the same numbers (tested against the whole prefill);
    cleared at every weight sync. 0 = off (docs/rollout.md)."""
    compile: str = "auto"
    """`hf` engine: `true` decodes with fixed shapes through `torch.compile` (CUDA graphs on a GPU,
    where a small model's step is bound by kernel launches). Finished rows ride along instead of
    being dropped; the first batches pay the compile (`benchmarks/rollout_speed.py` prints how long);
    every new bucket of batch and prompt plus response length (128 tokens) compiles again. `auto`:
    on for single-turn runs on a GPU (measured 3.5x TRL's step there against 0.7x without on an H100, docs/results/speed-gpu.md),
    off on a CPU (no gain, docs/results/speed-cpu.md) and for agents, whose prompts grow every turn. `false`: off."""
    dtype: str = ""
    """The precision the rollout samples in. Empty = the policy's own (`model.dtype`). `bfloat16` or
    `float16`: the `hf` engine samples from a copy of the policy in that precision (refreshed after every
    update); a `server` child loads its model in it. Half the bytes per weight, and on a CPU with
    bfloat16 instructions twice the arithmetic rate: a decode step 1.9-2.1x faster on the 2-core
    AVX512-BF16 machine (docs/rollout.md). The trainer keeps `model.dtype`; the gap between the two policies shows in
    `rollout_corr/*` and is corrected like any engine's (`algorithm.rollout_correction`)."""
    val_temperature: float = ranged(0.0, ">= 0", "0 = greedy")
    """Temperature for validation; 0 = greedy."""
    val_n: int = ranged(1, "in [1, 65536]")
    """Samples per validation prompt."""
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    """Agent mode: multi-turn episodes with tools."""
    agent: FunctionAgentConfig = field(default_factory=FunctionAgentConfig)
    """An agent written against the OpenAI API, as a function (`rollout.agent.entrypoint`)."""
