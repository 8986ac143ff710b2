"""`turnrl serve`'s HTTP API: OpenAI-style completions over token ids, plus a weight update.

    POST /v1/completions          {"prompt": [[ids], ...], "max_tokens", "temperature", "top_p", "top_k",
                                   "n", "stop", "seed", "logprobs", "return_token_ids", ...}
        -> {"id", "object": "text_completion", "created", "model", "policy_version", "usage",
            "choices": [{"index", "text", "logprobs": {"tokens", "token_logprobs", ...},
                         "finish_reason", "token_ids", "prompt_token_ids"}]}
    POST /update_weights_from_disk {"model_path": dir, "policy_version": int}   (SGLang's name)
        -> {"success", "message", "policy_version"}
    GET  /health                  -> {"status": "ok", "model", "vocab_size", "policy_version", "max_model_len",
                                      "batches_run", "requests_served", "max_rows_in_a_batch"}
    GET  /v1/models               -> {"object": "list", "data": [{"id", "max_model_len", "vocab_size", ...}]}

Field names follow vLLM and SGLang (token-id prompts, `top_k`, `return_tokens_as_token_ids`,
`return_token_ids`) so one client speaks to all three. Choices are prompt-major, as vLLM orders
them: prompt i's n samples are choices i*n .. i*n+n-1. Log-probs are the engine's: log p(token)
at the sampling temperature, before top-p/top-k.

One worker thread owns the engine (`turnrl.servers.inference.batcher`): it merges concurrent requests with the
same sampling parameters and no seed into one engine call, and runs weight loads between calls;
/health never waits for it.
A bad request gets a 400 whose `detail` is one line naming the field.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from turnrl.models.weights_dir import WeightsError, load_weights_dir
from turnrl.rollout.base import Generation, SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.servers.inference.batcher import Batcher
from turnrl.servers.validation import describe_validation_error

log = logging.getLogger("turnrl.serve")

# OpenAI / vLLM fields whose effect this server does not implement: a non-default value is refused
# rather than silently ignored (a penalty or a logit bias would change what the policy samples)
_UNSUPPORTED: dict[str, Any] = {
    "stream": False,
    "echo": False,
    "suffix": None,
    "logit_bias": None,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_p": 0.0,
    "stop_token_ids": None,
    "prompt_logprobs": None,
}


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    prompt: Any = Field(description="Token ids: a list of ints or a list of lists of ints.")
    model: str | None = None
    max_tokens: int = Field(default=16, description="Tokens to generate per choice.")
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = Field(default=None, description="-1, 0 or null = off (vLLM/SGLang extension).")
    n: int = 1
    stop: str | list[str] | None = None
    seed: int | None = None
    ignore_eos: bool = Field(default=False, description="Never stop at EOS (vLLM/SGLang extension).")
    logprobs: int | None = Field(
        default=None, description="Any value >= 0 returns the sampled tokens' log-probs."
    )
    return_tokens_as_token_ids: bool = False
    return_token_ids: bool = False
    best_of: int | None = None


class UpdateWeightsRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # SGLang's load_format, flush_cache, abort_all_requests, ...

    model_path: str
    policy_version: int | None = None
    weight_version: str | None = Field(default=None, description="SGLang's name for the version, a string.")


class BadRequest(ValueError):
    pass


def _reject(detail: str, status: int = 400, **extra: Any) -> JSONResponse:
    return JSONResponse({"detail": detail, **extra}, status_code=status)


def parse_prompts(prompt: Any, vocab_size: int) -> list[list[int]]:
    """A token-id prompt as a list of prompts; strings are refused (token in, token out)."""
    text = "prompt: text prompts are not accepted (token in, token out); send token ids"
    if isinstance(prompt, str) or (isinstance(prompt, list) and any(isinstance(p, str) for p in prompt)):
        raise BadRequest(text)
    if not isinstance(prompt, list) or not prompt:
        raise BadRequest("prompt: must be a non-empty list of token ids or a list of such lists")
    rows = [prompt] if all(isinstance(t, int) for t in prompt) else prompt
    for i, row in enumerate(rows):
        where = "prompt" if rows is not prompt else f"prompt[{i}]"
        if not isinstance(row, list) or not row:
            raise BadRequest(f"{where}: must be a non-empty list of token ids")
        for j, t in enumerate(row):
            if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size:
                raise BadRequest(f"{where}[{j}]: {t!r} is not a token id in [0, {vocab_size})")
    return rows


def sampling_params(req: CompletionRequest) -> SamplingParams:
    extra = req.model_extra or {}
    for name, default in _UNSUPPORTED.items():
        if extra.get(name, default) not in (default, None):
            raise BadRequest(f"{name}: not supported by turnrl serve")
    if req.max_tokens < 1:
        raise BadRequest(f"max_tokens: must be >= 1, got {req.max_tokens}")
    if req.n < 1:
        raise BadRequest(f"n: must be >= 1, got {req.n}")
    if req.best_of not in (None, req.n):
        raise BadRequest("best_of: not supported by turnrl serve (leave it unset or equal to n)")
    if req.temperature < 0:
        raise BadRequest(f"temperature: must be >= 0, got {req.temperature}")
    if not 0 < req.top_p <= 1:
        raise BadRequest(f"top_p: must be in (0, 1], got {req.top_p}")
    top_k = req.top_k or 0
    if top_k < -1:
        raise BadRequest(f"top_k: must be -1 or 0 (off) or a positive count, got {top_k}")
    if req.logprobs is not None and req.logprobs < 0:
        raise BadRequest(f"logprobs: must be >= 0, got {req.logprobs}")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if any(not s for s in stop):
        raise BadRequest("stop: empty stop string")
    return SamplingParams(
        max_new_tokens=req.max_tokens,
        n=req.n,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=max(top_k, 0),
        stop=stop,
        seed=req.seed,
        ignore_eos=req.ignore_eos,
    )


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
    ) -> None:
        self.engine, self.model_id, self.max_model_len = engine, model_id, max_model_len
        self.tokenizer = engine.tokenizer
        self.vocab_size = int(engine.model.get_input_embeddings().weight.shape[0])
        self.policy_version = 0
        self.batcher = Batcher(engine, max_batch_rows, batch_wait_ms / 1000)

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> Generation:
        return await asyncio.wrap_future(self.batcher.submit(prompts, params))

    async def load(self, path: str, version: int) -> int:
        # shielded: a trainer that stops waiting does not cancel a load it asked for
        return await asyncio.shield(asyncio.wrap_future(self.batcher.call(lambda: self._load(path, version))))

    def _load(self, path: str, version: int) -> int:
        count = load_weights_dir(self.engine.model, path)
        self.policy_version = version
        self.engine.sync_weights(version)
        return count

    def _text(self, ids: list[int], stop: list[str], reason: str) -> str:
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if reason == "stop" and stop:  # OpenAI: the text ends before the stop string (the ids keep it)
            cuts = [text.find(s) for s in stop if s in text]
            text = text[: min(cuts)] if cuts else text
        return text

    def _logprobs(self, ids: list[int], lps: list[float], as_ids: bool) -> dict[str, Any]:
        tokens = [f"token_id:{t}" if as_ids else self.tokenizer.decode([t]) for t in ids]
        offsets, pos = [], 0
        for tok in tokens:
            offsets.append(pos)
            pos += len(tok)
        return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": None, "text_offset": offsets}

    def response(
        self, req: CompletionRequest, prompts: list[list[int]], params: SamplingParams, gen: Generation
    ) -> dict[str, Any]:
        choices = []
        for index, (ids, lps, reason) in enumerate(
            zip(gen.response_ids, gen.log_probs, gen.finish_reasons, strict=True)
        ):
            choice: dict[str, Any] = {
                "index": index,
                "text": self._text(ids, params.stop, reason),
                "logprobs": None
                if req.logprobs is None
                else self._logprobs(ids, lps, req.return_tokens_as_token_ids),
                "finish_reason": reason,
            }
            if req.return_token_ids:
                choice["token_ids"] = ids
                choice["prompt_token_ids"] = prompts[index // params.n]
            choices.append(choice)
        completion_tokens = sum(len(ids) for ids in gen.response_ids)
        prompt_tokens = sum(len(p) for p in prompts)
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_id,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            "policy_version": gen.policy_version,
        }


def _version(req: UpdateWeightsRequest, current: int) -> int:
    if req.policy_version is not None:
        return req.policy_version
    if req.weight_version is not None:
        try:
            return int(req.weight_version)
        except ValueError:
            raise BadRequest(f"weight_version: {req.weight_version!r} is not an integer") from None
    return current + 1  # an update without a version is still a new policy


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def create_app(
    engine: HFEngine,
    model_id: str,
    max_model_len: int | None = None,
    max_batch_rows: int = 256,
    batch_wait_ms: float = 5.0,
) -> FastAPI:
    """`max_batch_rows`: output rows (prompts x n) of one merged engine call; `batch_wait_ms`: how
    long a lone mergeable request waits for others (see turnrl.servers.inference.batcher)."""
    from turnrl import __version__

    app = FastAPI(title="turnrl serve", version=__version__)
    server = Server(engine, model_id, max_model_len, max_batch_rows, batch_wait_ms)
    app.state.server = server

    async def body_of(request: Request, model: type[BaseModel], example: str) -> Any:
        body = await request.body()
        if not body.strip():
            raise BadRequest(describe_validation_error([{"type": "missing", "loc": ("body",)}], [], example))
        try:
            return model.model_validate_json(body)
        except ValidationError as err:
            raise BadRequest(
                describe_validation_error(list(err.errors()), list(model.model_fields), example)
            ) from None

    @app.exception_handler(BadRequest)
    async def _bad_request(_request: Request, err: BadRequest) -> JSONResponse:
        return _reject(str(err))

    @app.exception_handler(Exception)
    async def _internal(_request: Request, err: Exception) -> JSONResponse:
        # a bug, not the client's input: one line here, the traceback in the server's log (Starlette re-raises)
        return _reject(f"internal error: {_one_line(err)}", 500)

    @app.get("/health")
    async def _health() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": server.model_id,
            "vocab_size": server.vocab_size,
            "policy_version": server.policy_version,
            "max_model_len": server.max_model_len,
            **server.batcher.stats(),
        }

    @app.get("/v1/models")
    async def _models() -> dict[str, Any]:
        card = {
            "id": server.model_id,
            "object": "model",
            "created": 0,
            "owned_by": "turnrl",
            "root": server.model_id,
            "max_model_len": server.max_model_len,
            "vocab_size": server.vocab_size,
        }
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    async def _completions(request: Request) -> JSONResponse:
        req = await body_of(request, CompletionRequest, '{"prompt": [[1, 2, 3]], "max_tokens": 16}')
        if req.model not in (None, "", server.model_id):
            return _reject(
                f"model: {req.model!r} is not served here; this server serves {server.model_id!r}", 404
            )
        prompts = parse_prompts(req.prompt, server.vocab_size)
        params = sampling_params(req)
        if server.max_model_len:
            for i, p in enumerate(prompts):
                if len(p) + params.max_new_tokens > server.max_model_len:
                    raise BadRequest(
                        f"prompt[{i}]: {len(p)} tokens + max_tokens {params.max_new_tokens} exceed "
                        f"max_model_len {server.max_model_len}"
                    )
        try:
            gen = await server.generate(prompts, params)
        except Exception as err:  # the whole merged batch failed (out of memory, ...); the server goes on
            return _reject(f"generation failed: {_one_line(err)}", 500)
        return JSONResponse(server.response(req, prompts, params, gen))

    @app.post("/update_weights_from_disk")
    async def _update(request: Request) -> JSONResponse:
        req = await body_of(
            request, UpdateWeightsRequest, '{"model_path": "/runs/x/v1", "policy_version": 1}'
        )
        version = _version(req, server.policy_version)
        try:
            count = await server.load(req.model_path, version)
        except WeightsError as err:
            msg = str(err)
            return _reject(msg, success=False, message=msg, policy_version=server.policy_version)
        log.warning("loaded %d tensors from %s: policy version %d", count, req.model_path, version)
        return JSONResponse(
            {
                "success": True,
                "message": f"loaded {count} tensors from {req.model_path}",
                "policy_version": version,
                "weight_version": str(version),
            }
        )

    return app
