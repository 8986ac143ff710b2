"""An LLM as judge: a reward from any OpenAI-compatible endpoint (`reward.judge`, docs/judges.md).

Each response is put into the rubric (`fill`), sent as one user message to the judge's
`/chat/completions`, and the judge's reply is read back into a score in [0, 1] (`parse_score`).
`RuleReward` adds `coef` times that score to the row's rule score, and turns a failed call (no
answer after the retries, a reply without a score) into a failure or a zero as `reward.on_error`
says, exactly as it does a reward function's.

    judge = Judge.from_config(cfg.reward.judge)      # starts a `turnrl serve` child if url is empty
    verdicts = judge.score([JudgeInput(prompt, response, ground_truth), ...])
    judge.close()

The parts: the template and the parser are pure functions; `JudgeCache` remembers replies (an LRU,
optionally a JSONL file); `Judge` is the client: the `openai` SDK's, `concurrency` requests at once
from a thread pool, each with `timeout_s` and the SDK's `max_retries` (exponential back-off).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import math
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from turnrl.config.checks import JUDGE_FIELDS
from turnrl.config.schema import JudgeConfig
from turnrl.keys import resolve_api_key
from turnrl.rewards.registry import RewardError, shorten
from turnrl.servers.inference.launcher import ServeProcess

if TYPE_CHECKING:
    from openai import OpenAI

log = logging.getLogger(__name__)

INSTALL = 'reward.judge needs the openai package: pip install -e ".[agents]" (or pip install openai)'

# The judge's own metrics (RuleReward reports them under these names): counts of one reward call,
# summed over a step's calls, and the seconds of each request, averaged.
REQUESTS = "reward/judge/requests"
ERRORS = "reward/judge/errors"
"""Rows whose judge request failed: no answer within the retries, an HTTP error."""
UNPARSED = "reward/judge/unparsed"
"""Rows whose judge answered without a score `score_pattern` could read."""
CACHE_HITS = "reward/judge/cache_hits"
"""Rows answered from the cache (or by an identical row's request in the same call)."""
LATENCY = "reward/judge/latency_s"
"""Seconds per request, retries included."""
COUNTS = (REQUESTS, ERRORS, UNPARSED, CACHE_HITS)
SCORE = "judge_score"
"""Per-row extra: the judge's score in [0, 1] (reported as `reward_extra/judge_score/mean`)."""

_PLACEHOLDER = re.compile(r"\{(" + "|".join(JUDGE_FIELDS) + r")\}")


# -- the template and the parser -------------------------------------------------------------------
def prompt_text(messages: Any) -> str:
    """The row's prompt as the judge reads it: a lone user message's content, else one
    `role: content` paragraph per message (a system prompt, earlier turns)."""
    if isinstance(messages, str):
        return messages
    messages = list(messages)
    if len(messages) == 1 and messages[0].get("role") == "user":
        return str(messages[0].get("content", ""))
    return "\n\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages)


def truth_text(ground_truth: Any) -> str:
    """The ground truth as text: a string as it is, anything else (a dict of tests, a list of
    answers) as JSON."""
    if isinstance(ground_truth, str):
        return ground_truth
    return json.dumps(ground_truth, ensure_ascii=False, default=str)


def fill(template: str, prompt: str, response: str, ground_truth: str) -> str:
    """The rubric with `{prompt}`, `{response}` and `{ground_truth}` filled in, in one pass: a
    response that itself writes `{ground_truth}` is not filled again, and other braces (JSON in
    the rubric) stay as written, which `str.format` would refuse."""
    values = {"prompt": prompt, "response": response, "ground_truth": ground_truth}
    return _PLACEHOLDER.sub(lambda m: values[m[1]], template)


class Unparsed(ValueError):
    """A judge reply without a score that can be read; the message says why, in one line."""


def parse_score(reply: str, pattern: str | re.Pattern[str], max_score: float) -> float:
    """The score in [0, 1] that `reply` gives: the group of the *last* match of `pattern` (a judge
    reasons first and scores last), read as a number and divided by `max_score`.

        parse_score("Fine work.\\nScore: 7", r"Score:\\s*([0-9.]+)", 10)  ->  0.7
        parse_score("Score: 12", ..., 10)   ->  Unparsed: 12 is outside [0, 10]
        parse_score("no idea", ..., 10)     ->  Unparsed: no match
    """
    regex = re.compile(pattern) if isinstance(pattern, str) else pattern
    matches = list(regex.finditer(reply))
    if not matches:
        raise Unparsed(f"has no match of reward.judge.score_pattern '{regex.pattern}'")
    text = matches[-1].group(1)
    try:
        value = float(text) if text else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise Unparsed(f"gives {shorten(repr(text), 40)} as its score, not a number")
    if not 0 <= value <= max_score:
        raise Unparsed(f"gives the score {value:g}, outside [0, reward.judge.max_score={max_score:g}]")
    return value / max_score


# -- the cache -------------------------------------------------------------------------------------
class JudgeCache:
    """The judge's replies by request (`key`), least recently used dropped beyond `size`.

    With `path`, replies are appended to that JSONL file (`{"key", "reply"}` a line) and the file's
    last `size` replies are loaded at start, so a second run asks nothing the first one asked.
    Thread-safe: the judge's worker threads share it."""

    def __init__(self, size: int, path: str | Path = "") -> None:
        self.size = size
        self.path = Path(path) if path else None
        self._replies: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        if self.path is not None and self.path.is_file():
            self._load(self.path)

    @staticmethod
    def key(model: str, message: str, temperature: float, max_tokens: int) -> str:
        """What a reply depends on: the judge's model, the filled-in rubric (the prompt, the
        response, the ground truth) and the sampling settings."""
        blob = json.dumps([model, message, temperature, max_tokens], ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def get(self, key: str) -> str | None:
        with self._lock:
            reply = self._replies.get(key)
            if reply is not None:
                self._replies.move_to_end(key)
            return reply

    def put(self, key: str, reply: str) -> None:
        with self._lock:
            self._remember(key, reply)
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps({"key": key, "reply": reply}, ensure_ascii=False) + "\n")

    def __len__(self) -> int:
        return len(self._replies)

    def _remember(self, key: str, reply: str) -> None:
        self._replies[key] = reply
        self._replies.move_to_end(key)
        while len(self._replies) > self.size:
            self._replies.popitem(last=False)

    def _load(self, path: Path) -> None:
        bad = 0
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
                self._remember(str(entry["key"]), str(entry["reply"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                bad += 1  # a line cut short by a killed run: the rest of the file is still good
        if bad:
            log.warning("skipped %d unreadable line(s) of the judge cache %s", bad, path)


# -- the client ------------------------------------------------------------------------------------
class JudgeInput(NamedTuple):
    """One row as the judge sees it, as text."""

    prompt: str
    response: str
    ground_truth: str


@dataclass(frozen=True)
class Verdict:
    """One row's judgment: `score` in [0, 1], or `error` (what went wrong, one line)."""

    score: float = 0.0
    error: str = ""
    unparsed: bool = False
    """The judge answered, but without a score (`error` says why)."""
    cached: bool = False
    """Answered from the cache or by an identical row's request: no request of its own."""
    latency_s: float | None = None
    """Seconds of its request, retries included; None without a request."""
    reply: str = ""


class Judge:
    """The judge's client: `score(rows)` asks about every row at once, `concurrency` requests in
    flight, and answers one `Verdict` per row, in order. `child`: the `turnrl serve` it stops at
    `close()` (one started for the run)."""

    def __init__(
        self,
        cfg: JudgeConfig,
        url: str,
        api_key: str,
        model_name: str = "",
        child: ServeProcess | None = None,
    ) -> None:
        try:
            from openai import OpenAI
        except ImportError:
            raise RewardError(INSTALL) from None
        self.cfg, self.url, self.child = cfg, url.rstrip("/"), child
        self.pattern = re.compile(cfg.score_pattern)
        # the SDK retries time-outs, refused connections, 408, 409, 429 and 5xx with back-off
        self.client: OpenAI = OpenAI(
            base_url=self.url, api_key=api_key, timeout=cfg.timeout_s, max_retries=cfg.max_retries
        )
        self.cache = JudgeCache(cfg.cache_size, cfg.cache_file) if cfg.cache_size > 0 else None
        self.pool = concurrent.futures.ThreadPoolExecutor(cfg.concurrency, thread_name_prefix="judge")
        self.model_name = model_name or cfg.model_name or self._first_model()

    @classmethod
    def from_config(cls, cfg: JudgeConfig, threads: int = 0, cache_dir: str = "") -> Judge:
        """The judge at `cfg.url`, or a `turnrl serve --model cfg.model` child started now (on
        `cfg.device`, `threads` torch threads; `cache_dir`: where a GGUF model is converted)."""
        if cfg.url:
            return cls(cfg, cfg.url, cfg.api_key or resolve_api_key(None) or _openai_key())
        child = JudgeServe(
            cfg.model,
            device=cfg.device,
            cache_dir=cache_dir,
            startup_timeout_s=cfg.startup_timeout_s,
            extra_args=["--threads", str(threads)] if threads else [],
        ).start()
        try:
            # the child serves its model under the --model value: no need to ask
            return cls(cfg, child.url + "/v1", child.api_key, cfg.model_name or cfg.model, child)
        except BaseException:
            child.stop()
            raise

    @property
    def name(self) -> str:
        """The judge as failure messages name it."""
        return self.child.describe() if self.child is not None else f"the judge at {self.url}"

    def _first_model(self) -> str:
        """The endpoint's first listed model: also a check, at start-up, that the judge answers."""
        import openai

        try:
            models = self.client.models.list().data
        except openai.APIError as err:
            self.close()
            raise RewardError(
                f"reward.judge.url {self.url}: GET /models failed ({_describe(err, self.cfg)}); "
                "check the URL and key, or set reward.judge.model_name"
            ) from None
        if not models:
            self.close()
            raise RewardError(
                f"reward.judge.url {self.url}: /models lists no model; set reward.judge.model_name"
            )
        return str(models[0].id)

    def score(self, rows: Sequence[JudgeInput]) -> list[Verdict]:
        """One verdict per row, in order. Rows that make the same request share one (GRPO's n
        samples of a short answer often coincide); replies in the cache make none."""
        cfg = self.cfg
        messages = [fill(cfg.prompt, r.prompt, r.response, r.ground_truth) for r in rows]
        keys = [JudgeCache.key(self.model_name, m, cfg.temperature, cfg.max_tokens) for m in messages]
        # per distinct request: the cached reply, or the request in flight
        plan: dict[str, str | concurrent.futures.Future[tuple[str, str, float]]] = {}
        for key, message in zip(keys, messages, strict=True):
            if key not in plan:
                cached = self.cache.get(key) if self.cache is not None else None
                plan[key] = cached if cached is not None else self.pool.submit(self._ask, message)
        verdicts, seen = [], set()
        for key in keys:
            entry, shared = plan[key], key in seen
            seen.add(key)
            if isinstance(entry, str):
                verdicts.append(self._verdict(entry, cached=True))
                continue
            reply, error, seconds = entry.result()
            latency = None if shared else seconds  # a shared request is counted once
            if error:
                verdicts.append(Verdict(error=error, latency_s=latency))
                continue
            if not shared and self.cache is not None:
                self.cache.put(key, reply)
            verdicts.append(self._verdict(reply, cached=shared, latency_s=latency))
        return verdicts

    def _verdict(self, reply: str, cached: bool, latency_s: float | None = None) -> Verdict:
        try:
            score = parse_score(reply, self.pattern, self.cfg.max_score)
        except Unparsed as err:
            error = f"replied {shorten(repr(reply), 80)}, which {err}"
            return Verdict(error=error, unparsed=True, cached=cached, latency_s=latency_s, reply=reply)
        return Verdict(score, cached=cached, latency_s=latency_s, reply=reply)

    def _ask(self, message: str) -> tuple[str, str, float]:
        """(reply, error, seconds) of one request; `error` is '' on success. Never raises for
        what the endpoint does: a worker's exception would otherwise surface as a traceback."""
        import openai

        start = time.perf_counter()
        try:
            out = self.client.chat.completions.create(
                model=self.model_name,
                messages=[{"role": "user", "content": message}],
                temperature=self.cfg.temperature,
                max_tokens=self.cfg.max_tokens,
            )
        except openai.APIError as err:
            return "", _describe(err, self.cfg), time.perf_counter() - start
        seconds = time.perf_counter() - start
        try:
            return out.choices[0].message.content or "", "", seconds
        except (AttributeError, IndexError, TypeError):  # a body that is not a chat completion
            return "", f"answered without a message: {shorten(repr(out), 80)}", seconds

    def close(self) -> None:
        """Stop the worker threads and the child judge, if one was started for the run."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()
        if self.child is not None:
            self.child.stop()


class JudgeServe(ServeProcess):
    """The `turnrl serve` child a run starts as its judge, named as the judge in its errors."""

    timeout_setting = "reward.judge.startup_timeout_s"

    def describe(self) -> str:
        return f"the judge (turnrl serve --model {self.model_path})"


def _describe(err: BaseException, cfg: JudgeConfig) -> str:
    """A failed request in a few words: what the endpoint did, after how many attempts."""
    import openai

    attempts = f"{cfg.max_retries + 1} attempt(s)"
    if isinstance(err, openai.APITimeoutError):
        return f"did not answer within reward.judge.timeout_s={cfg.timeout_s:g}s ({attempts})"
    if isinstance(err, openai.APIConnectionError):
        cause = err.__cause__ or err
        return f"could not be reached ({type(cause).__name__}: {shorten(str(cause), 80)}; {attempts})"
    if isinstance(err, openai.APIStatusError):
        return f"answered HTTP {err.status_code}: {shorten(_detail(err), 120)}"
    return f"failed: {type(err).__name__}: {shorten(str(err), 120)}"


def _detail(err: Any) -> str:
    """The server's own one-line reason (turnrl's `detail`, OpenAI's `error.message`)."""
    body = getattr(err, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error")
        for value in (body.get("detail"), inner.get("message") if isinstance(inner, Mapping) else inner):
            if isinstance(value, str) and value:
                return " ".join(value.split())
    return " ".join(str(getattr(err, "message", err)).split())


def _openai_key() -> str:
    """The OpenAI SDK's own variable, else a placeholder: the SDK refuses an empty key, and an
    endpoint that asks for none ignores it."""
    return os.environ.get("OPENAI_API_KEY", "") or "none"


__all__ = [
    "Judge",
    "JudgeCache",
    "JudgeInput",
    "Unparsed",
    "Verdict",
    "fill",
    "parse_score",
    "prompt_text",
    "truth_text",
]
