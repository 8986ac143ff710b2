"""One episode of a verifiers environment: the row's task, the episode, its result as numbers."""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any

from turnrl.agent.verifiers.common import (
    RELAY_KEY_HEADER,
    TASK_KEY,
    VerifiersEnvError,
    VerifiersEpisodeError,
    import_verifiers,
    one_line,
)
from turnrl.agent.verifiers.program import run_chat_program_here
from turnrl.agent.verifiers.relay import Relay
from turnrl.errors import TurnrlInputError

if TYPE_CHECKING:
    import verifiers.v1 as vf

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
            f"{where}: row {extra.get('index', '?')} is not a {data_cls.__name__}: {one_line(err)}"
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
    vf = import_verifiers(where)
    task = task_of(env, row, where)
    run_chat_program_here()
    # episodes run concurrently, each on its own thread and event loop; `serving()` keeps its
    # interception on the env object, so each episode serves a shallow copy of its own
    episode_env = copy.copy(env)
    async with Relay(client) as relay:
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
    return f"{error.type}: {one_line(error.message)}"
