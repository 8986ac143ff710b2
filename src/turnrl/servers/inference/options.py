"""`turnrl serve`'s settings, one field each: the command's options are made from this dataclass
(`servers.options.add_options`), so a setting's type, default and help live here only. Free of
torch and the web stack, so `turnrl serve --help` imports neither."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServeOptions:
    model: str = ""
    """A Hugging Face model directory, a .gguf file, 'smollm2-135m-instruct' or 'tiny-random'."""
    host: str = "127.0.0.1"
    """Interface to bind; any other than loopback needs a key."""
    port: int = 8000
    """TCP port (0 = any free port)."""
    weights_root: str = ""
    """The only directory /update_weights_from_disk may load from (symlinks followed); without it, weight updates are refused."""
    max_rows_per_request: int = 1024
    """Output rows (prompts x n) one request may ask for."""
    max_tokens_per_request: int = 4 << 20
    """Prompt tokens + rows x max_tokens one request may ask for."""
    max_body: int = 32 << 20
    """Bytes of one request body."""
    max_waiting: int = 64
    """Generation requests waiting for the engine at once; one more is answered 503 with Retry-After."""
    device: str = "auto"
    """auto (cuda if available), cpu, cuda or cuda:N."""
    dtype: str = "auto"
    """auto (bf16 on cuda, fp32 on cpu), float32, bfloat16, float16."""
    seed: int = 0
    """Initial weights of 'tiny-random' (a training run's trainer.seed)."""
    cache_dir: str = ""
    """Where converted GGUF models are cached."""
    served_model_name: str = ""
    """The model id clients see (empty: the --model value)."""
    chat_template: str = ""
    """A Jinja chat template file (or the template text) for /v1/chat/completions, in place of the model's own (as vLLM's option)."""
    tool_call_format: str = "auto"
    """How /v1/chat/completions reads tool calls from the model's text: auto (the format the chat template writes), hermes, qwen3_xml, llama3_json or mistral."""
    batch_size: int = 64
    """Responses per forward batch."""
    max_batch_rows: int = 256
    """Output rows (prompts x n) of one merged engine call when concurrent requests are batched together."""
    batch_wait_ms: float = 5.0
    """How long a lone unseeded request waits for others to batch with."""
    threads: int = 0
    """CPU threads for torch (0 = torch's default); 1 suits small models on a shared CPU."""
    log_level: str = "warning"
    """uvicorn's log level."""
