"""Loading a verifiers environment (`rollout.agent.env=verifiers:<env>`) and the agent function that plays it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from turnrl.agent.verifiers.common import PREFIX, AgentFn, VerifiersEnvError, import_verifiers, one_line
from turnrl.agent.verifiers.episode import episode_result, run_episode
from turnrl.plugins import load_object

if TYPE_CHECKING:
    import verifiers.v1 as vf

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
    vf = import_verifiers(where)
    target, sep, attr = spec.rpartition(":")
    if sep and target and attr.isidentifier():
        return _env_from(vf, load_object(target, attr, where, VerifiersEnvError), where)
    return _env_by_id(vf, spec, where)


def _env_from(vf: Any, obj: Any, where: str) -> vf.Env:
    if callable(obj) and not isinstance(obj, vf.Env | vf.EnvConfig | type):
        try:
            obj = obj()
        except Exception as err:
            raise VerifiersEnvError(
                f"{where}: the loader raised {type(err).__name__}: {one_line(err)}"
            ) from None
    if isinstance(obj, vf.EnvConfig):
        return _construct(vf, obj, where)
    if not isinstance(obj, vf.Env):
        raise VerifiersEnvError(
            f"{where}: expected a verifiers Env (vf.Env), an EnvConfig or a function returning one, "
            f"got {type(obj).__name__} {one_line(repr(obj), 80)}"
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
            f"{where}: cannot load environment {spec!r}: {type(err).__name__}: {one_line(err)}"
        ) from None
    return _construct(vf, config, where)


def _construct(vf: Any, config: Any, where: str) -> vf.Env:
    try:
        return vf.load_environment(config)
    except Exception as err:
        raise VerifiersEnvError(
            f"{where}: cannot load environment {config.env_id!r}: {type(err).__name__}: {one_line(err)}"
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
