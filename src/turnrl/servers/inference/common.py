"""What the generation routes of `turnrl serve` share: the bounds a request is checked against, the
one-line refusal, the sampling checks, and running a generation that stops when its client leaves.

`/v1/completions` (`app`) and `/v1/chat/completions` (`chat_route`) both use them; they live here,
below both, because `app` registers `chat_route` and a route module importing `app` would be an
import cycle.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from turnrl.rollout.base import Generation, SamplingParams
from turnrl.servers.guard import detail, wait_for_disconnect
from turnrl.servers.inference.batcher import Batcher, Busy
from turnrl.servers.refusal import Refusal
from turnrl.servers.validation import describe_validation_error, fields_at

SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1
"""What `torch.Generator.manual_seed` accepts; beyond it, it raises."""
MIN_TEMPERATURE = 1e-6
"""Below it (but above 0, greedy) logits / temperature overflow float32 to inf and sampling fails."""


PARSE_IN_THREAD = 1 << 20
"""Bodies larger than this are parsed on a worker thread, so /health does not wait for them."""


async def body_of(request: Request, model: type[BaseModel], example: str) -> Any:
    """The request's JSON body as `model`, or BadRequest naming the field (with `example`)."""
    body = await request.body()
    if not body.strip():
        raise BadRequest(describe_validation_error([{"type": "missing", "loc": ("body",)}], [], example))
    try:
        if len(body) > PARSE_IN_THREAD:
            return await asyncio.to_thread(model.model_validate_json, body)
        return model.model_validate_json(body)
    except ValidationError as err:
        errors = list(err.errors())
        loc = tuple(errors[0].get("loc", ())) if errors else ()  # the field the message names
        raise BadRequest(describe_validation_error(errors, fields_at(model, loc), example)) from None


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; each is a `turnrl serve` option, reported by /health."""

    max_rows_per_request: int = 1024
    """Output rows (prompts x n) of one request (--max-rows-per-request)."""
    max_tokens_per_request: int = 4 << 20
    """Prompt tokens + rows x max_tokens of one request (--max-tokens-per-request): the KV cache
    and the result it may make the server hold."""
    max_body: int = 32 << 20
    """Bytes of one request body (--max-body), enforced by the guard while the body streams in."""
    max_waiting: int = 64
    """Generation requests waiting for the engine at once (--max-waiting); one more is answered
    503 with Retry-After, so queued work (and the memory its prompts hold) stays bounded."""


class BadRequest(Refusal):
    """A request this server will not serve: `status` (400 unless said) and a one-line message."""


def short(value: Any, limit: int = 80) -> str:
    """`repr(value)`, cut: a refusal names what was sent, it does not echo a megabyte back."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4300-digit printing limit
        return "a number too long to print"
    return text if len(text) <= limit else text[:limit] + "..."


def one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def sampling(
    *,
    max_tokens: int,
    n: int,
    temperature: float,
    top_p: float,
    top_k: int | None,
    stop: str | list[str] | None,
    seed: int | None,
    ignore_eos: bool,
    max_tokens_field: str = "max_tokens",
) -> SamplingParams:
    """The checks every generation route makes of its sampling fields, and the engine's parameters.
    `max_tokens_field`: the name the client used for the budget (chat has two)."""
    if max_tokens < 1:
        raise BadRequest(f"{max_tokens_field}: must be >= 1, got {short(max_tokens)}")
    if n < 1:
        raise BadRequest(f"n: must be >= 1, got {short(n)}")
    if temperature < 0 or 0 < temperature < MIN_TEMPERATURE:
        raise BadRequest(
            f"temperature: must be 0 (greedy) or >= {MIN_TEMPERATURE:g}, got {short(temperature)}"
        )
    if not 0 < top_p <= 1:
        raise BadRequest(f"top_p: must be in (0, 1], got {short(top_p)}")
    top_k = top_k or 0
    if top_k < -1:
        raise BadRequest(f"top_k: must be -1 or 0 (off) or a positive count, got {short(top_k)}")
    if seed is not None and not SEED_MIN <= seed <= SEED_MAX:
        raise BadRequest(f"seed: must be in [-2**63, 2**64 - 1], got {short(seed)}")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if any(not s for s in stops):
        raise BadRequest("stop: empty stop string")
    return SamplingParams(
        max_new_tokens=max_tokens,
        n=n,
        temperature=temperature,
        top_p=top_p,
        top_k=max(top_k, 0),
        stop=stops,
        seed=seed,
        ignore_eos=ignore_eos,
    )


def check_size(prompts: list[list[int]], params: SamplingParams, limits: Limits) -> None:
    """413 when the request asks for more rows or tokens than `limits` allow."""
    rows = len(prompts) * params.n
    if rows > limits.max_rows_per_request:
        raise BadRequest(
            f"n: {len(prompts)} prompt(s) x n={short(params.n)} = {short(rows)} rows exceed this "
            f"server's {limits.max_rows_per_request} rows per request (--max-rows-per-request)",
            413,
        )
    tokens = sum(len(p) for p in prompts) + rows * params.max_new_tokens
    if tokens > limits.max_tokens_per_request:
        raise BadRequest(
            f"max_tokens: prompt tokens + {rows} rows x max_tokens {short(params.max_new_tokens)} = "
            f"{short(tokens)} tokens exceed this server's {limits.max_tokens_per_request} per request "
            f"(--max-tokens-per-request)",
            413,
        )


async def generate_for(
    request: Request, batcher: Batcher, prompts: list[list[int]], params: SamplingParams
) -> Generation | Response:
    """Queue a generation and wait for it, or for the client to leave: then its work is dropped or
    stopped and a 499 comes back (nobody reads it). A failed batch is a one-line 500."""
    gone = threading.Event()
    try:
        submitted = batcher.submit(prompts, params, gone)
    except Busy as err:
        return detail(f"{err}; retry later", 503, {"Retry-After": "1"})
    job = asyncio.wrap_future(submitted)
    left = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        await asyncio.wait({job, left}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        left.cancel()
    if not job.done():  # the client left: drop its request, or stop its rows at the next step
        gone.set()
        job.cancel()
        return Response(status_code=499)  # nginx's "client closed request"
    try:
        return job.result()
    except Exception as err:  # the whole merged batch failed (out of memory, ...); the server goes on
        return detail(f"generation failed: {one_line(err)}", 500)
