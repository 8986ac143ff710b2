"""The wire format of `ServerEngine`: OpenAI-style `/v1/completions` requests planned from a
`generate` call, their bodies, and the sampled ids, log-probs, finish reasons and policy versions
read back. Pure functions of plain data, so the planning and the parsing are tested without a
server."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import httpx

from turnrl.errors import TurnrlInputError
from turnrl.rollout.base import SamplingParams

_TOKEN_ID_PREFIX = "token_id:"


class ServerError(TurnrlInputError):
    """An inference server that cannot be reached or used; one line naming its URL."""


class ServerUnreachable(ServerError):
    """An inference server that did not answer at all (refused, reset, timed out) after its retries."""


@dataclass
class Request:
    """One /v1/completions request: `n` samples of each prompt, all with one token budget.
    Choice k (prompt-major, as vLLM orders them) becomes output row `rows[k]`."""

    prompts: list[list[int]]
    n: int
    budget: int
    rows: list[int]
    seed: int | None = None


def plan_requests(
    prompt_ids: list[list[int]],
    n: int,
    limits: list[int],
    rows_per_request: int,
    servers: int,
    seed: int | None = None,
    max_tokens: int | None = None,
) -> list[Request]:
    """Split a generate call into requests: same budget and same sample count per prompt in one
    request, at most `rows_per_request` rows each, and at least `servers` requests when there are
    enough prompts, so that every server has work. `max_tokens`: at most that many prompt tokens
    + rows x budget per request (a server's --max-tokens-per-request); a single prompt's request
    may still exceed it, and the server then says so."""
    groups: dict[tuple[int, int], list[tuple[int, list[int]]]] = {}
    for i in range(len(prompt_ids)):
        by_budget: dict[int, list[int]] = {}
        for r in range(i * n, i * n + n):
            by_budget.setdefault(limits[r], []).append(r)
        for budget, rows in by_budget.items():
            groups.setdefault((budget, len(rows)), []).append((i, rows))
    out: list[Request] = []
    for (budget, count), items in groups.items():
        per = min(max(1, rows_per_request // count), math.ceil(len(items) / servers))
        for chunk in _chunks(items, per, [len(prompt_ids[i]) + count * budget for i, _ in items], max_tokens):
            rows = [r for _, rs in chunk for r in rs]
            out.append(Request([prompt_ids[i] for i, _ in chunk], count, budget, rows))
    for k, req in enumerate(out):  # distinct seeds: the same prompt in two requests must not repeat itself
        req.seed = None if seed is None else seed + k
    return out


def _chunks(items: list[Any], per: int, costs: list[int], budget: int | None) -> list[list[Any]]:
    """`items` in order, cut every `per` items and before the sum of `costs` would pass `budget`
    (an item costing more than the budget goes alone)."""
    out: list[list[Any]] = []
    chunk: list[Any] = []
    spent = 0
    for item, cost in zip(items, costs, strict=True):
        if chunk and (len(chunk) == per or (budget is not None and spent + cost > budget)):
            out.append(chunk)
            chunk, spent = [], 0
        chunk.append(item)
        spent += cost
    if chunk:
        out.append(chunk)
    return out


Choice = tuple[list[int], list[float], str]
"""One output row read back: its sampled ids, their log-probs and its finish reason."""


def completion_body(model: str, req: Request, p: SamplingParams) -> dict[str, Any]:
    """The JSON body of `req` for a server that serves `model`."""
    return {
        "model": model,
        "prompt": req.prompts,
        "max_tokens": req.budget,
        "n": req.n,
        "temperature": p.temperature,
        "top_p": p.top_p,
        "top_k": p.top_k if p.top_k > 0 else -1,
        "stop": list(p.stop) or None,
        "seed": req.seed,
        "ignore_eos": p.ignore_eos,  # vLLM and SGLang take it too
        "logprobs": 1,  # the sampled token's log-prob (vLLM/SGLang add one alternative)
        "return_tokens_as_token_ids": True,  # vLLM before return_token_ids existed
        "return_token_ids": True,
        "skip_special_tokens": False,  # stop strings like "<|im_end|>" must match, as in HFEngine
    }


def parse_choices(url: str, data: dict[str, Any], req: Request) -> list[Choice]:
    """`url`'s answer to `req`, one `Choice` per row of `req.rows`; ServerError when it is not one."""
    choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
    if len(choices) != len(req.prompts) * req.n:
        raise ServerError(f"{url} returned {len(choices)} choices for {len(req.prompts)} prompts x n={req.n}")
    return [_parse_choice(url, k, choice, req) for k, choice in enumerate(choices)]


def _parse_choice(url: str, k: int, choice: dict[str, Any], req: Request) -> Choice:
    ids = choice_token_ids(choice)
    if ids is None:
        raise ServerError(
            f"{url} returned no token ids; it needs return_token_ids (vLLM >= 0.10.2, SGLang) or "
            f"return_tokens_as_token_ids (vLLM)"
        )
    sent = choice.get("prompt_token_ids")
    if sent is not None and list(sent) != req.prompts[k // req.n]:
        raise ServerError(f"{url} returned choice {k} for another prompt (expected prompt-major order)")
    lps = (choice.get("logprobs") or {}).get("token_logprobs")
    if lps is None or len(lps) != len(ids) or any(v is None for v in lps):
        raise ServerError(f"{url} returned no log-prob for every sampled token (choice {k})")
    if len(ids) > req.budget:
        raise ServerError(f"{url} returned {len(ids)} tokens for max_tokens={req.budget}")
    return ids, [float(v) for v in lps], finish_reason(choice.get("finish_reason"), url)


def choice_token_ids(choice: dict[str, Any]) -> list[int] | None:
    """The sampled ids of one choice: `token_ids` (vLLM >= 0.10.2 and SGLang with return_token_ids)
    or vLLM's `return_tokens_as_token_ids` tokens "token_id:N"; None if the server sent neither."""
    ids = choice.get("token_ids")
    if ids is not None:
        return [int(t) for t in ids]
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if tokens and all(isinstance(t, str) and t.startswith(_TOKEN_ID_PREFIX) for t in tokens):
        return [int(t[len(_TOKEN_ID_PREFIX) :]) for t in tokens]
    return None


def finish_reason(reason: Any, url: str) -> str:
    """The contract's 'stop' (EOS or stop string) or 'length'; an aborted completion is an error."""
    if reason == "length":
        return "length"
    if reason in ("stop", "eos", "stop_sequence"):
        return "stop"
    raise ServerError(f"{url} ended a completion with finish_reason {reason!r}")


def response_detail(response: httpx.Response) -> str:
    """A server's error body in one short line."""
    try:
        body = response.json()
        text = body.get("detail") or body.get("message") or body.get("error") or response.text
        if isinstance(text, dict):  # OpenAI/vLLM: {"error": {"message": ...}}
            text = text.get("message", text)
    except ValueError:
        text = response.text
    return " ".join(str(text).split())[:300] or f"HTTP {response.status_code}"


def as_version(value: Any) -> int | None:
    """A reported policy version as an int, or None when the server sent none."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
