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

The package, by concern: `common` (names, errors), `load` (the environment and the agent function
that plays it), `episode` (a row's task, one episode, its numbers), `relay` (verifiers' model
calls through the episode's client), `program` (verifiers' chat program in this interpreter). The
env's own tasks as turnrl rows are a data converter: `turnrl.data.prepare.verifiers`.
"""

from turnrl.agent.verifiers.common import (
    INSTALL,
    PREFIX,
    TASK_KEY,
    VerifiersEnvError,
    VerifiersEpisodeError,
)
from turnrl.agent.verifiers.episode import episode_result, run_episode, task_of
from turnrl.agent.verifiers.load import env_name, load_verifiers_agent, load_verifiers_env
from turnrl.agent.verifiers.program import script_dependencies
from turnrl.agent.verifiers.relay import sse_events

__all__ = [
    "INSTALL",
    "PREFIX",
    "TASK_KEY",
    "VerifiersEnvError",
    "VerifiersEpisodeError",
    "env_name",
    "episode_result",
    "load_verifiers_agent",
    "load_verifiers_env",
    "run_episode",
    "script_dependencies",
    "sse_events",
    "task_of",
]
