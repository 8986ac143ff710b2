"""`rollout.agent.env=verifiers:<env>`: a verifiers environment played as a turnrl agent function.

    run = load_verifiers_agent("my-taskset")        # an installed verifiers taskset (its package id)
    run = load_verifiers_agent("envs/mine.py:load")  # or module:attr: an Env, an EnvConfig, or a function returning one
    await run(AsyncOpenAI(base_url=episode_url, api_key=key), model, row)
    # -> {"reward": 0.75, "reward/contains": 1.0, "reward/length": 0.5, "chars": 41.0}

verifiers 0.4 (`verifiers.v1`) describes an environment as a taskset (tasks, each scored by its
`@vf.reward` and `@vf.metric` methods) played by agents: a harness program (the `null` chat loop,
the `bash` coding agent, ...) in a runtime, whose model calls go through verifiers' own
interception server. `run` plays one episode of the env (`Env.run_episode`) for the row's task and
returns what the env's scoring recorded. Its model calls reach the episode's `client`, so the turns
are the episode's: verifiers calls the loopback relay below, which sends each call through `client`.

The row -> task mapping (`task_of`): a row written by `verifiers_rows` (`turnrl data verifiers:<env>`)
carries the task's own data (`extra_info.verifiers_task`) and plays exactly that task. Any other
verl row becomes a task of the taskset's type: `prompt` <- the row's messages, `answer` <-
`reward_model.ground_truth` (when the task data has an `answer` field), and every `extra_info` key
that names a task-data field (`info`, `id`, ...) <- its value.

The returned dict: `reward` is the trace's weighted reward sum (verifiers' `Trace.reward`);
`reward/<name>` each reward's unweighted score; every metric under its own name. An episode with
several trainable traces (best-of-n, ...) averages each number over them.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import importlib
import inspect
import json
import math
import os
import re
import secrets
import sys
import threading
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turnrl.errors import TurnrlInputError
from turnrl.plugins import load_attribute

if TYPE_CHECKING:
    import verifiers.v1 as vf

PREFIX = "verifiers:"
INSTALL = 'pip install -e ".[verifiers]"'
TASK_KEY = "verifiers_task"
"""`extra_info` key of a row written by `verifiers_rows`: the task's data as verifiers' JSON."""
RELAY_KEY_HEADER = "X-Turnrl-Relay-Key"
MAX_BODY = 64 * 2**20

AgentFn = Callable[[Any, str, dict[str, Any]], Awaitable[dict[str, float]]]


class VerifiersEnvError(TurnrlInputError):
    """A verifiers environment that cannot be loaded, or a row it cannot play; one line naming it."""


class VerifiersEpisodeError(RuntimeError):
    """An episode that verifiers itself recorded as failed (a harness, tool or model-call error)."""


def _one_line(err: BaseException | str, limit: int = 400) -> str:
    # pydantic and verifiers errors span lines; what failed is said first, and a traceback that
    # verifiers quotes ends with its cause, so a long one keeps both ends
    text = " ".join(str(err).split()) or type(err).__name__
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head]} ... {text[-(limit - head - 5) :]}"


def _verifiers(where: str) -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError as err:
        # the package itself missing (or a pre-0.4 one without verifiers.v1), else a broken dependency
        missing = isinstance(err, ModuleNotFoundError) and err.name in ("verifiers", "verifiers.v1")
        why = "is not installed (or is older than 0.4)" if missing else f"does not import ({_one_line(err)})"
        raise VerifiersEnvError(f"{where}: the verifiers package {why}; {INSTALL}") from None
    return vf


# --- loading ------------------------------------------------------------------------------------


def load_verifiers_env(spec: str) -> vf.Env:
    """The environment `spec` names (what follows `verifiers:`): an installed taskset id, optionally
    paired with a verifiers env id (`best-of-n+my-taskset`), or `path/to/file.py:attr` /
    `module:attr` holding a `vf.Env`, a `vf.EnvConfig`, or a function returning either."""
    spec = spec.strip().removeprefix(PREFIX)
    where = f"{PREFIX}{spec}"
    if not spec:
        raise VerifiersEnvError(
            f"{where}: name an environment: verifiers:<taskset id> or verifiers:path/to/file.py:load"
        )
    vf = _verifiers(where)
    target, sep, attr = spec.rpartition(":")
    if sep and target and attr.isidentifier():
        return _env_from(vf, _attribute(target, attr, where), where)
    return _env_by_id(vf, spec, where)


def _attribute(target: str, attr: str, where: str) -> Any:
    if target.endswith(".py") or "/" in target or Path(target).is_file():
        # registered in sys.modules under a top-level name, which verifiers can import a taskset by
        return load_attribute(target, attr, where, VerifiersEnvError)
    try:
        module = importlib.import_module(target)
    except ImportError as err:
        raise VerifiersEnvError(f"{where}: cannot import module {target!r} ({_one_line(err)})") from None
    except Exception as err:
        raise VerifiersEnvError(f"{where}: importing {target} failed: {_one_line(repr(err))}") from None
    if not hasattr(module, attr):
        raise VerifiersEnvError(f"{where}: module {target} defines no {attr!r}")
    return getattr(module, attr)


def _env_from(vf: Any, obj: Any, where: str) -> vf.Env:
    if callable(obj) and not isinstance(obj, vf.Env | vf.EnvConfig | type):
        try:
            obj = obj()
        except Exception as err:
            raise VerifiersEnvError(
                f"{where}: the loader raised {type(err).__name__}: {_one_line(err)}"
            ) from None
    if isinstance(obj, vf.EnvConfig):
        return _construct(vf, obj, where)
    if not isinstance(obj, vf.Env):
        raise VerifiersEnvError(
            f"{where}: expected a verifiers Env (vf.Env), an EnvConfig or a function returning one, "
            f"got {type(obj).__name__} {_one_line(repr(obj), 80)}"
        )
    return obj


def _env_by_id(vf: Any, spec: str, where: str) -> vf.Env:
    env_id, _, taskset_id = spec.rpartition("+")
    try:
        config_cls = vf.env_config_type(taskset_id, env_id)
        data: dict[str, Any] = {"taskset": {"id": taskset_id}, **({"id": env_id} if env_id else {})}
        # verifiers' default runtime is a Prime cloud sandbox; a seat that does not pin one runs
        # here, as `vf-eval --env.agent.runtime.type subprocess` would
        for name, field in config_cls.model_fields.items():
            if isinstance(field.default, vf.AgentConfig) and "runtime" not in field.default.model_fields_set:
                data[name] = {"runtime": {"type": "subprocess"}}
        config = vf.resolve_env_config(data)
    except Exception as err:  # a missing package, a bad plugin, a config that does not validate
        raise VerifiersEnvError(
            f"{where}: cannot load environment {spec!r}: {type(err).__name__}: {_one_line(err)}"
        ) from None
    return _construct(vf, config, where)


def _construct(vf: Any, config: Any, where: str) -> vf.Env:
    try:
        return vf.load_environment(config)
    except Exception as err:
        raise VerifiersEnvError(
            f"{where}: cannot load environment {config.env_id!r}: {type(err).__name__}: {_one_line(err)}"
        ) from None


def env_name(env: vf.Env) -> str:
    """The env's verifiers id (`best-of-n+my-taskset`); a taskset in a file loaded by path (module
    `turnrl_user_<hash>`) is named by its class instead."""
    name = env.config.env_id
    if not name or "turnrl_user_" in name:
        return type(env.taskset).__name__
    return name


def load_verifiers_agent(spec: str) -> AgentFn:
    """`async def run(client, model, row) -> dict` playing environment `spec` (see `load_verifiers_env`)
    against `client` (an `openai.AsyncOpenAI`, or `openai.OpenAI`) and `model`."""
    env = load_verifiers_env(spec)
    where = f"{PREFIX}{spec.strip().removeprefix(PREFIX)}"

    async def run(client: Any, model: str, row: dict[str, Any]) -> dict[str, float]:
        episode = await run_episode(env, client, model, row, where)
        return episode_result(episode, where)

    run.__qualname__ = run.__name__ = f"verifiers_agent[{env_name(env)}]"
    return run


# --- one episode ----------------------------------------------------------------------------------


def task_of(env: vf.Env, row: dict[str, Any], where: str = "verifiers") -> Any:
    """The env's task for a turnrl row (the mapping in the module docstring)."""
    task_cls = type(env.taskset).task_type()
    data_cls = task_cls.data_type()
    extra = row.get("extra_info") or {}
    if not isinstance(extra, dict):
        raise VerifiersEnvError(
            f"{where}: the row's extra_info must be an object, got {type(extra).__name__}"
        )
    try:
        wire = extra.get(TASK_KEY)
        if wire is not None:
            data = (
                data_cls.model_validate_json(wire) if isinstance(wire, str) else data_cls.model_validate(wire)
            )
        else:
            data = data_cls.model_validate(_fields_of(row, extra, data_cls, where))
    except TurnrlInputError:
        raise
    except Exception as err:  # pydantic's ValidationError, or JSON that does not parse
        raise VerifiersEnvError(
            f"{where}: row {extra.get('index', '?')} is not a {data_cls.__name__}: {_one_line(err)}"
        ) from None
    if env.taskset.system_prompt is not None:  # the taskset's config overrides every task's
        data = data.model_copy(update={"system_prompt": env.taskset.system_prompt})
    return task_cls(data, env.taskset.config.task)


def _fields_of(row: dict[str, Any], extra: dict[str, Any], data_cls: Any, where: str) -> dict[str, Any]:
    known = data_cls.model_fields
    fields: dict[str, Any] = {k: v for k, v in extra.items() if k in known and k not in ("idx", "prompt")}
    prompt = row.get("prompt")
    if prompt is None or prompt == []:
        raise VerifiersEnvError(f"{where}: the row has no 'prompt' (a list of chat messages, or a string)")
    fields["prompt"] = prompt
    truth = (row.get("reward_model") or {}).get("ground_truth")
    if "answer" in known and truth is not None:
        fields["answer"] = truth
    return fields


async def run_episode(
    env: vf.Env, client: Any, model: str, row: dict[str, Any], where: str = "verifiers"
) -> Any:
    """One `vf.Episode` of `env` on the row's task, its model calls sent through `client`."""
    vf = _verifiers(where)
    task = task_of(env, row, where)
    _run_chat_program_here()
    # episodes run concurrently, each on its own thread and event loop; `serving()` keeps its
    # interception on the env object, so each episode serves a shallow copy of its own
    episode_env = copy.copy(env)
    async with _Relay(client) as relay:
        ctx = vf.ModelContext(
            model=model,
            # an unset key variable: verifiers then sends "Bearer EMPTY" to the relay, which checks its own header
            client=vf.EvalClientConfig(
                base_url=relay.url,
                api_key_var="TURNRL_VERIFIERS_NO_KEY",
                headers={RELAY_KEY_HEADER: relay.key},
            ),
        )
        async with episode_env.serving():
            return await episode_env.run_episode(task, ctx)


def episode_result(episode: Any, where: str = "verifiers") -> dict[str, float]:
    """`{"reward": ..., "reward/<name>": score, "<metric>": value}` of a finished episode (module
    docstring); VerifiersEpisodeError (one line) for an episode verifiers recorded as failed."""
    if episode.errors:
        raise VerifiersEpisodeError(f"{where}: the episode failed: {_error_line(episode.errors[-1])}")
    traces = [t for t in episode.traces if t.agent.trainable] or list(episode.traces)
    if not traces:
        raise VerifiersEpisodeError(f"{where}: the episode ran no agent")
    for trace in traces:
        if trace.errors:
            raise VerifiersEpisodeError(
                f"{where}: the agent's rollout failed ({trace.stop_condition}): {_error_line(trace.errors[-1])}"
            )
        unscored = sorted(name for name, r in {**trace.rewards, **trace.metrics}.items() if r is None)
        if unscored:
            raise VerifiersEpisodeError(f"{where}: the rollout ended unscored ({', '.join(unscored)})")
        if not trace.rewards:
            raise VerifiersEpisodeError(f"{where}: the task recorded no reward (no @vf.reward, no judge)")
    per_trace = [_numbers(t) for t in traces]
    names = list(dict.fromkeys(k for numbers in per_trace for k in numbers))
    return {k: sum(n[k] for n in per_trace if k in n) / sum(k in n for n in per_trace) for k in names}


def _numbers(trace: Any) -> dict[str, float]:
    out = {"reward": float(trace.reward)}
    out |= {f"reward/{name}": float(r.score) for name, r in trace.rewards.items()}
    for name, value in trace.metrics.items():
        # a metric named like a reward key keeps its value under metric/<name>
        key = f"metric/{name}" if name == "reward" or name.startswith("reward/") else name
        out[key] = float(value)
    # a metric that is not a number is left out; a reward that is not one stays, for the caller
    # to refuse (turnrl counts it as a bad return, it does not train on it)
    return {k: v for k, v in out.items() if math.isfinite(v)} | {"reward": out["reward"]}


def _error_line(error: Any) -> str:
    return f"{error.type}: {_one_line(error.message)}"


# --- the relay: verifiers' model calls, through the episode's client ---------------------------------


class _Relay:
    """A loopback OpenAI-compatible endpoint for one episode, in front of its `client`.

    verifiers' harness programs stream (`stream: true`), and verifiers relays a streamed call to the
    provider as a stream; turnrl's chat endpoints answer whole responses only. The relay sends each
    call through `client` without streaming and, when it was asked for, frames the answer as one
    server-sent event. Routing through `client` also keeps its key, headers and timeouts: the key
    never goes into an environment variable that verifiers would read.
    """

    def __init__(self, client: Any) -> None:
        if not callable(getattr(client, "post", None)):
            raise VerifiersEnvError(
                f"the verifiers agent needs an openai.AsyncOpenAI or openai.OpenAI client, got {type(client).__name__}"
            )
        self.client = client
        self.key = secrets.token_urlsafe(24)
        self.url = ""
        self._runner: Any = None

    async def __aenter__(self) -> _Relay:
        from aiohttp import web

        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _unknown(self, request: Any) -> Any:
        from aiohttp import web

        message = f"turnrl's episode endpoint serves POST /v1/chat/completions only, not {request.method} {request.path}"
        return web.json_response({"error": {"message": message, "type": "invalid_request_error"}}, status=404)

    async def _chat(self, request: Any) -> Any:
        import httpx
        import openai
        from aiohttp import web

        if not hmac.compare_digest(request.headers.get(RELAY_KEY_HEADER, ""), self.key):
            return web.json_response(
                {"error": {"message": "bad relay key", "type": "auth_error"}}, status=401
            )
        body = await request.json()
        stream = bool(body.pop("stream", False))
        options = body.pop("stream_options", None) or {}
        try:
            if inspect.iscoroutinefunction(self.client.post):
                response = await self.client.post("/chat/completions", cast_to=httpx.Response, body=body)
            else:  # a sync client would block this loop, which also serves verifiers' interception
                response = await asyncio.to_thread(
                    self.client.post, "/chat/completions", cast_to=httpx.Response, body=body
                )
        except openai.APIStatusError as err:  # the endpoint's own answer (a refused call, a bad request)
            return web.Response(
                status=err.status_code, body=err.response.content, content_type="application/json"
            )
        except openai.APIConnectionError as err:
            message = f"turnrl: the episode's endpoint did not answer: {_one_line(err)}"
            return web.json_response(
                {"error": {"message": message, "type": "api_connection_error"}}, status=502
            )
        completion = response.json()
        if not stream:
            return web.json_response(completion)
        events = sse_events(completion, include_usage=bool(options.get("include_usage")))
        return web.Response(body=events, content_type="text/event-stream")


def sse_events(completion: dict[str, Any], include_usage: bool) -> bytes:
    """A whole chat completion as the stream OpenAI would have sent: one chunk per choice carrying
    its message as the delta, a usage chunk when asked for, then `[DONE]`."""
    head = {k: v for k, v in completion.items() if k not in ("object", "choices", "usage")}
    chunks = []
    for choice in completion.get("choices") or []:
        delta = {k: v for k, v in (choice.get("message") or {}).items() if v is not None}
        if delta.get("tool_calls"):  # a streamed tool call carries its position
            delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(delta["tool_calls"])]
        chunks.append(
            {
                **head,
                "object": "chat.completion.chunk",
                "choices": [
                    {
                        "index": choice.get("index", 0),
                        "delta": delta,
                        "logprobs": choice.get("logprobs"),
                        "finish_reason": choice.get("finish_reason"),
                    }
                ],
            }
        )
    if include_usage and completion.get("usage") is not None:
        chunks.append(
            {**head, "object": "chat.completion.chunk", "choices": [], "usage": completion["usage"]}
        )
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


# --- verifiers' chat program, in this interpreter ------------------------------------------------------

_prepared = threading.Lock()
_chat_program_ready = False


def _run_chat_program_here() -> None:
    """Let verifiers' built-in chat harnesses (`null`, `bash`) run without `uv` or a network.

    They run a PEP 723 script whose environment verifiers builds with `uv sync --script` (downloads)
    on first use. Every package it declares comes with turnrl's `verifiers` extra, so when this
    interpreter satisfies them all, the script is registered in the subprocess runtime's own
    per-script interpreter cache (where `prepare_uv_script` looks before calling uv) as run by this
    interpreter. Anything else (other harnesses, container runtimes) still prepares with uv.
    """
    global _chat_program_ready
    with _prepared:
        if _chat_program_ready:
            return
        _chat_program_ready = True
        try:
            from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
            from verifiers.v1.runtimes.subprocess import SubprocessRuntime
        except ImportError:  # another verifiers layout: leave preparation to verifiers
            return
        cache = getattr(SubprocessRuntime, "_interpreters", None)
        if not isinstance(cache, dict) or not _satisfied(script_dependencies(CHAT_PROGRAM_SOURCE)):
            return
        digest = hashlib.sha256(CHAT_PROGRAM_SOURCE.encode()).hexdigest()
        path = Path(SubprocessRuntime.scripts_dir) / f"{digest}.py"
        if str(path) in cache:
            return
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(CHAT_PROGRAM_SOURCE)
            os.replace(tmp, path)  # a reader never sees half a script
        except OSError:  # an unwritable cache: verifiers prepares the script itself, with uv
            tmp.unlink(missing_ok=True)
            return
        cache[str(path)] = sys.executable


def script_dependencies(source: str) -> list[str]:
    """The `dependencies` of a PEP 723 `# /// script` block ([] without one)."""
    block = re.search(r"^# /// script\s*$(.*?)^# ///\s*$", source, re.MULTILINE | re.DOTALL)
    if block is None:
        return []
    toml = "\n".join(line.removeprefix("#").removeprefix(" ") for line in block.group(1).splitlines())
    import tomllib

    return list(tomllib.loads(toml).get("dependencies", []))


def _satisfied(requirements: list[str]) -> bool:
    from packaging.requirements import Requirement

    for text in requirements:
        req = Requirement(text)
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            return False
        if not req.specifier.contains(version, prereleases=True):
            return False
    return True


# --- the env's own tasks as turnrl rows ----------------------------------------------------------------


def verifiers_rows(env: vf.Env, split: str = "train", name: str | None = None) -> list[dict[str, Any]]:
    """The env's taskset as verl-format rows, in its order, `data_source = verifiers/<env name>`.

    verifiers 0.4 tasksets have no splits (`vf-eval` evaluates on the taskset it trains on): every
    split is the whole taskset, `split` only goes into `extra_info.split`. Each row carries the
    task's own data (`extra_info.verifiers_task`), so `run` plays exactly that task; `prompt` is
    its system prompt and prompt as messages (what the prompt-length filter and logs read), and
    `reward_model.ground_truth` its `answer` field ('' without one: the env scores, not the row).
    """
    where = f"{PREFIX}{name or env_name(env)}"
    if not env.taskset.bounded:
        raise VerifiersEnvError(
            f"{where}: the taskset is infinite; bound it in the loader (env.taskset = env.taskset.take(n))"
        )
    source = f"verifiers/{name or env_name(env)}"
    rows = []
    for position, task in enumerate(env.taskset):
        data = task.data
        messages = _messages_of(data)
        if not messages:
            raise VerifiersEnvError(
                f"{where}: task {data.idx} has no prompt (its user opens the conversation); a turnrl row needs one"
            )
        answer = getattr(data, "answer", None)
        rows.append(
            {
                "data_source": source,
                "prompt": messages,
                "ability": "verifiers",
                "reward_model": {
                    "style": "verifiers",
                    "ground_truth": "" if answer is None else _plain(answer),
                },
                "extra_info": {
                    "split": split,
                    "index": data.idx if data.idx is not None else position,
                    TASK_KEY: data.model_dump_json(exclude_none=True),
                },
            }
        )
    if not rows:
        raise VerifiersEnvError(f"{where}: the taskset has no tasks")
    return rows


def _messages_of(data: Any) -> list[dict[str, str]]:
    from verifiers.v1.types import content_text

    messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(data.prompt, str):
        messages.append({"role": "user", "content": data.prompt})
    else:
        messages += [{"role": m.role, "content": content_text(m.content)} for m in data.prompt or []]
    return messages if len(messages) > bool(data.system_prompt) else []


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value
