"""`turnrl serve`'s HTTP API: OpenAI-style completions over token ids, plus a weight update.

    POST /v1/completions          {"prompt": [[ids], ...], "max_tokens", "temperature", "top_p", "top_k",
                                   "n", "stop", "seed", "logprobs", "return_token_ids", ...}
        -> {"id", "object": "text_completion", "created", "model", "policy_version", "usage",
            "choices": [{"index", "text", "logprobs": {"tokens", "token_logprobs", ...},
                         "finish_reason", "token_ids", "prompt_token_ids"}]}
    POST /v1/chat/completions     OpenAI's chat API, rendered with the model's chat template
                                  (turnrl.servers.inference.chat_route)
    POST /update_weights_from_disk {"model_path": dir, "policy_version": int}   (SGLang's name)
        -> {"success", "message", "policy_version"}
    GET  /health                  -> {"status": "ok", "model", "vocab_size", "policy_version", "max_model_len",
                                      "limits", "batches_run", "requests_served", ...}
    GET  /v1/models               -> {"object": "list", "data": [{"id", "max_model_len", "vocab_size", ...}]}

Field names follow vLLM and SGLang (token-id prompts, `top_k`, `return_tokens_as_token_ids`,
`return_token_ids`) so one client speaks to all three. Choices are prompt-major, as vLLM orders
them: prompt i's n samples are choices i*n .. i*n+n-1. Log-probs are the engine's: log p(token)
at the sampling temperature, before top-p/top-k.

One worker thread owns the engine (`turnrl.servers.inference.batcher`): it merges concurrent requests with the
same sampling parameters and no seed into one engine call, and runs weight loads between calls;
/health never waits for it, and nothing on the event loop reads a weights file.

Careless and hostile clients: every route sits behind `turnrl.servers.guard.Guard` (the key, the
body size); a request is bounded in rows and tokens (`Limits`, reported by /health); unknown
fields are refused, not ignored; a client that leaves has its work dropped or stopped; weights
load only from `--weights-root`, in strictly increasing versions. Anything the client's input
causes is a 4xx whose `detail` is one line naming the field; a 5xx is the server's fault.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from pydantic import ConfigDict, Field
from starlette.responses import Response

from turnrl.models.weights_dir import WeightsError, WeightsOutsideRoot
from turnrl.rollout.base import Generation, SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.servers.guard import Guard, detail, finite_json
from turnrl.servers.inference.chat_route import router as chat_router
from turnrl.servers.inference.common import (  # shared with chat_route, so defined below both
    PARSE_IN_THREAD,
    BadRequest,
    Limits,
    body_of,
    check_size,
    generate_for,
    sampling,
)
from turnrl.servers.inference.common import short as _short
from turnrl.servers.inference.server import MAX_VERSION, Server
from turnrl.servers.listen import connection_health
from turnrl.servers.refusal import add_error_handlers
from turnrl.servers.validation import StrictRequest

log = logging.getLogger("turnrl.serve")


# OpenAI / vLLM / SGLang fields whose effect this server does not implement: a non-default value is
# refused rather than silently ignored (a penalty or a logit bias would change what the policy samples)
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
    "min_tokens": 0,
    "include_stop_str_in_output": False,
    "use_beam_search": False,
    "length_penalty": 1.0,
    "truncate_prompt_tokens": None,
    "allowed_token_ids": None,
    "bad_words": None,
    "no_stop_trim": False,
}


class CompletionRequest(StrictRequest):
    # unknown fields and wrong JSON types ("max_tokens": "3") are refused (StrictRequest); NaN/inf never get in
    model_config = ConfigDict(allow_inf_nan=False)

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
    skip_special_tokens: bool = Field(default=True, description="Of `text` only; ids are always all there.")
    # sent by real clients, no effect on what is sampled
    user: str | None = Field(default=None, description="OpenAI's end-user id; not used.")
    stream_options: dict[str, Any] | None = Field(default=None, description="Only without streaming.")
    spaces_between_special_tokens: bool = True
    add_special_tokens: bool = Field(default=False, description="Token prompts get no special tokens.")
    request_id: str | None = None
    rid: str | None = Field(default=None, description="SGLang's request id; not used.")
    # declared so a client sending the default is understood; any other value is refused
    stream: bool = False
    echo: bool = False
    suffix: str | None = None
    logit_bias: dict[str, float] | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_p: float = 0.0
    stop_token_ids: list[int] | None = None
    prompt_logprobs: int | None = None
    min_tokens: int = 0
    include_stop_str_in_output: bool = False
    use_beam_search: bool = False
    length_penalty: float = 1.0
    truncate_prompt_tokens: int | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    no_stop_trim: bool = False


class UpdateWeightsRequest(StrictRequest):
    model_config = ConfigDict(allow_inf_nan=False)

    model_path: str = Field(min_length=1)
    policy_version: int | None = None
    weight_version: str | None = Field(default=None, description="SGLang's name for the version, a string.")
    # SGLang's fields that turnrl's clients (and SGLang's) send; none changes what is loaded here
    load_format: str | None = Field(default=None, description="auto or safetensors (the only format).")
    flush_cache: bool = Field(default=True, description="Nothing is cached between batches here.")
    abort_all_requests: bool = Field(default=False, description="A load waits for the running batch.")
    torch_empty_cache: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0


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
                raise BadRequest(f"{where}[{j}]: {_short(t)} is not a token id in [0, {vocab_size})")
    return rows


def sampling_params(req: CompletionRequest) -> SamplingParams:
    for name, default in _UNSUPPORTED.items():
        if getattr(req, name) not in (default, None):
            raise BadRequest(f"{name}: not supported by turnrl serve")
    if req.best_of not in (None, req.n):
        raise BadRequest("best_of: not supported by turnrl serve (leave it unset or equal to n)")
    if req.logprobs is not None and req.logprobs < 0:
        raise BadRequest(f"logprobs: must be >= 0, got {_short(req.logprobs)}")
    return sampling(
        max_tokens=req.max_tokens,
        n=req.n,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        stop=req.stop,
        seed=req.seed,
        ignore_eos=req.ignore_eos,
    )


def _text(tokenizer: Any, ids: list[int], stop: list[str], reason: str, skip_special: bool) -> str:
    """A choice's text, cut before the stop string that ended it."""
    text = tokenizer.decode(ids, skip_special_tokens=skip_special)
    if reason == "stop" and stop:  # OpenAI: the text ends before the stop string (the ids keep it)
        cuts = [text.find(s) for s in stop if s in text]
        text = text[: min(cuts)] if cuts else text
    return text


def _logprobs(tokenizer: Any, ids: list[int], lps: list[float], as_ids: bool) -> dict[str, Any]:
    """OpenAI's completions `logprobs` object of one choice."""
    tokens = [f"token_id:{t}" if as_ids else tokenizer.decode([t]) for t in ids]
    offsets, pos = [], 0
    for tok in tokens:
        offsets.append(pos)
        pos += len(tok)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": None, "text_offset": offsets}


def completion_response(
    server: Server, req: CompletionRequest, prompts: list[list[int]], params: SamplingParams, gen: Generation
) -> dict[str, Any]:
    """The `text_completion` answer: choices prompt-major (prompt i's n samples at i*n..i*n+n-1)."""
    choices = []
    for index, (ids, lps, reason) in enumerate(
        zip(gen.response_ids, gen.log_probs, gen.finish_reasons, strict=True)
    ):
        choice: dict[str, Any] = {
            "index": index,
            "text": _text(server.tokenizer, ids, params.stop, reason, req.skip_special_tokens),
            "logprobs": None
            if req.logprobs is None
            else _logprobs(server.tokenizer, ids, lps, req.return_tokens_as_token_ids),
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
        "model": server.model_id,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "policy_version": gen.policy_version,
    }


def _version(req: UpdateWeightsRequest) -> int | None:
    """The asked version, range-checked; None = the next one."""
    if req.policy_version is not None:
        version, field = req.policy_version, "policy_version"
    elif req.weight_version is not None:
        field = "weight_version"
        try:
            version = int(req.weight_version)
        except ValueError:
            raise BadRequest(f"weight_version: {_short(req.weight_version)} is not an integer") from None
    else:
        return None
    if not 0 <= version <= MAX_VERSION:
        raise BadRequest(f"{field}: must be in [0, 2**63 - 1], got {_short(version)}")
    return version


def create_app(
    engine: HFEngine,
    model_id: str,
    max_model_len: int | None = None,
    max_batch_rows: int = 256,
    batch_wait_ms: float = 5.0,
    *,
    api_key: str = "",
    limits: Limits | None = None,
    weights_root: str | None = None,
    tool_call_format: str = "auto",
) -> FastAPI:
    """`max_batch_rows`: output rows (prompts x n) of one merged engine call; `batch_wait_ms`: how
    long a lone mergeable request waits for others (see turnrl.servers.inference.batcher).
    `api_key`: '' = none asked (loopback only: the CLI refuses otherwise); `weights_root`: the
    directory weight updates may load from (realpath), None = updates are off. The routes are
    module-level (`ROUTERS`: `router`, `chat_route.router`) and find the server at `app.state.server`."""
    from turnrl import __version__

    limits = limits or Limits()
    app = FastAPI(title="turnrl serve", version=__version__)
    # outermost: the key and the body size are checked before routing and before any parsing
    app.add_middleware(Guard, api_key=api_key, max_body=limits.max_body)
    app.state.server = Server(
        engine, model_id, max_model_len, max_batch_rows, batch_wait_ms, limits, weights_root, tool_call_format
    )
    add_error_handlers(app)
    for r in ROUTERS:
        app.include_router(r)
    return app


router = APIRouter()
# a new route is one module with an `APIRouter` and one line in this table
ROUTERS: list[APIRouter] = [router, chat_router]


def server_of(request: Request) -> Server:
    return request.app.state.server


@router.get("/health")
async def health(request: Request) -> Response:
    server = server_of(request)
    return finite_json(
        {
            "connections": connection_health(request.app),
            "status": "ok",
            "model": server.model_id,
            "vocab_size": server.vocab_size,
            "policy_version": server.policy_version,
            "max_model_len": server.max_model_len,
            "limits": asdict(server.limits),
            **server.batcher.stats(),
            "tool_calls_unparsed": server.tool_calls_unparsed,
        }
    )


@router.get("/v1/models")
async def models(request: Request) -> Response:
    server = server_of(request)
    card = {
        "id": server.model_id,
        "object": "model",
        "created": 0,
        "owned_by": "turnrl",
        "root": server.model_id,
        "max_model_len": server.max_model_len,
        "vocab_size": server.vocab_size,
    }
    return finite_json({"object": "list", "data": [card]})


def checked(server: Server, req: CompletionRequest) -> tuple[list[list[int]], SamplingParams]:
    """The request's prompts and sampling parameters, within the server's limits, or BadRequest."""
    prompts = parse_prompts(req.prompt, server.vocab_size)
    params = sampling_params(req)
    check_size(prompts, params, server.limits)
    if server.max_model_len:
        for i, p in enumerate(prompts):
            if len(p) + params.max_new_tokens > server.max_model_len:
                raise BadRequest(
                    f"prompt[{i}]: {len(p)} tokens + max_tokens {params.max_new_tokens} exceed "
                    f"max_model_len {server.max_model_len}"
                )
    return prompts, params


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    server = server_of(request)
    req = await body_of(request, CompletionRequest, '{"prompt": [[1, 2, 3]], "max_tokens": 16}')
    if req.model not in (None, "", server.model_id):
        return detail(
            f"model: {_short(req.model)} is not served here; this server serves {server.model_id!r}", 404
        )
    # a long prompt list is checked token by token: off the event loop, as its parsing was
    large = len(await request.body()) > PARSE_IN_THREAD  # read once, cached by the request
    prompts, params = await asyncio.to_thread(checked, server, req) if large else checked(server, req)
    gen = await generate_for(request, server.batcher, prompts, params)
    if isinstance(gen, Response):  # the client left (499), or the batch failed (500)
        return gen
    # decoding the text of many long choices is real work: off the event loop
    content = await asyncio.to_thread(completion_response, server, req, prompts, params, gen)
    return finite_json(content)


@router.post("/update_weights_from_disk")
async def update_weights(request: Request) -> Response:
    server = server_of(request)

    def refused(message: str, status: int) -> Response:
        body = {"detail": message, "success": False, "message": message}
        return finite_json({**body, "policy_version": server.policy_version}, status)

    if server.weights_root is None:
        return refused("weight updates are off; start turnrl serve with --weights-root DIR", 403)
    req = await body_of(request, UpdateWeightsRequest, '{"model_path": "/runs/x/v1", "policy_version": 1}')
    try:
        if req.load_format not in (None, "auto", "safetensors"):
            raise BadRequest(f"load_format: {_short(req.load_format)} is not supported (safetensors only)")
        count, version = await server.load(req.model_path, _version(req))
    except WeightsOutsideRoot as err:
        return refused(str(err), 403)
    except WeightsError as err:
        return refused(str(err), 400)
    except BadRequest as err:
        return refused(str(err), err.status)
    log.warning("loaded %d tensors from %s: policy version %d", count, req.model_path, version)
    return finite_json(
        {
            "success": True,
            "message": f"loaded {count} tensors from {req.model_path}",
            "policy_version": version,
            "weight_version": str(version),
        }
    )
