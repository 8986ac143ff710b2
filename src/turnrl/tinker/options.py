"""`turnrl tinker serve`'s settings, one field each: the command's options are made from this
dataclass (`servers.options.add_options`), so a setting's type, default and help live here only.
Free of torch, the web stack and the tinker SDK, so `turnrl tinker serve --help` imports none."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TinkerServeOptions:
    model: str = ""
    """The base model to serve: a Hugging Face model directory, 'smollm2-135m-instruct' or 'tiny-random' (clients name it as given)."""
    state_root: str = ""
    """The directory every tinker:// checkpoint path resolves inside (save_state, save_weights_for_sampler); created if missing."""
    host: str = "127.0.0.1"
    """Interface to bind; any other than loopback needs a key."""
    port: int = 8000
    """TCP port (0 = any free port)."""
    device: str = "auto"
    """auto (cuda if available), cpu, cuda or cuda:N."""
    dtype: str = "auto"
    """auto (bf16 on cuda, fp32 on cpu), float32, bfloat16, float16."""
    seed: int = 0
    """Initial weights of 'tiny-random'."""
    cache_dir: str = ""
    """Where converted GGUF models are cached."""
    threads: int = 0
    """CPU threads for torch (0 = torch's default); 1 suits small models on a shared CPU."""
    max_body: int = 64 << 20
    """Bytes of one request body; forward_backward batches are split by the SDK below a quarter of it."""
    max_training_clients: int = 16
    """LoRA training clients held at once (each one adapter and its optimizer state)."""
    max_samplers: int = 64
    """Sampling sessions held at once (each one adapter snapshot); the least recently used goes first."""
    max_futures: int = 4096
    """Results kept for the SDK to fetch; a full store of unfinished work answers 429."""
    future_ttl_s: float = 3600.0
    """Seconds a finished result waits to be fetched before it is dropped."""
    max_waiting: int = 256
    """Requests waiting for the model at once (one runs at a time); one more is answered 503 with Retry-After, which the SDK retries."""
    max_sessions: int = 256
    """Live sessions (ServiceClients) at once."""
    session_timeout_s: float = 300.0
    """Seconds without a heartbeat or request after which a session has lost its client: it ends, its queued work is dropped, its clients freed."""
    max_num_samples: int = 128
    """num_samples one sample request may ask for."""
    max_sample_tokens: int = 1 << 20
    """Prompt tokens + num_samples x max_tokens one sample request may ask for."""
    log_level: str = "warning"
    """uvicorn's log level."""
