"""`rollout.agent.env=openenv:<server>`: an OpenEnv environment server played as a turnrl agent function.

    run = load_openenv_agent("openenv:http://127.0.0.1:8000")         # checks the server now
    run = load_openenv_agent("openenv:localhost:8000#action=json&reward=last&max_turns=4&max_tokens=64")
    await run(AsyncOpenAI(base_url=episode_url, api_key=key), model, row)
    # -> {"reward": 1.5, "env_steps": 2.0, "env_done": 1.0, "invalid_actions": 0.0}

OpenEnv (the `openenv-core` package) serves an environment over HTTP and WebSocket: `/health`,
`/schema` (the action's JSON schema), `/mcp` (JSON-RPC `tools/list` for an env with MCP tools) and
`/ws`, a session with its own env instance that takes `reset`, `step` and `close` messages and
answers each with an observation, its reward and `done`, or an error with a code.

At load the server is asked once: unreachable, or not answering as OpenEnv does, is one line. An
env that lists MCP tools is played with tool calls; any other with text actions. Each episode:
1. opens a session and resets it with the row's `extra_info.openenv_reset` (an object of keyword
   arguments; none without it). A server whose sessions are all taken is asked again until one is
   free (a warning says so once);
2. asks the model (the episode's client, chat completions; the env's tools offered as OpenAI
   function tools; `#max_tokens=<n>` caps each reply) for its next move, given the conversation
   so far: the row's prompt (its instructions; may be empty), then the reset's observation as a
   user message (joined to the prompt's last message when that is a user's text). An observation
   is written as text: its one field's value, or `name: value` lines (a value that is not a
   string as JSON);
3. makes the reply an action:
   - tools: each tool call is a step `{"type": "call_tool", "tool_name", "arguments"}`, its
     observation the call's `tool` message (the MCP result's text, or `error: ...`). A reply
     without a tool call ends the episode;
   - text: the reply's content fills the action's one string field (its only field, or its only
     required one; `#action=<field>` names another), else the reply is the action's JSON object
     (`#action=json`; a ```json fence is allowed). The step's observation is the next user
     message;
   a reply that is no action (not JSON; a step the env refuses with `VALIDATION_ERROR`; tool
   arguments that are not an object) is told to the model as the next message and counted;
4. steps until the env says `done`, or `max_turns` model calls (`rollout.agent.max_calls`, or the
   spec's `#max_turns=<n>` when lower), or the gateway refuses a call for the response budget
   (the episode keeps what it earned).

The returned numbers: `reward` is the sum of the steps' rewards (a step without one: 0), or the
last step's with `#reward=last`; `env_steps`, `env_done` (1 when the env ended the episode) and
`invalid_actions`. A server that fails the episode (a step or reset that raised, a session it
closed or a message it did not answer in `rollout.agent.timeout_s`) raises OpenEnvEpisodeError,
one line: the function agent counts it in `agent/errors/env` and `rollout.agent.on_error` decides.

The package, by concern: `common` (names, errors), `spec` (the spec and its options), `probe`
(the server at start-up), `render` (the prompting contract as pure functions), `session` (the
WebSocket protocol), `episode` (one episode), `load` (the agent function).
"""

from turnrl.agent.openenv.common import (
    FAILURE_KIND,
    INSTALL,
    PREFIX,
    RESET_KEY,
    OpenEnvEpisodeError,
    OpenEnvError,
)
from turnrl.agent.openenv.load import load_openenv_agent
from turnrl.agent.openenv.probe import EnvShape, probe
from turnrl.agent.openenv.render import observation_text, text_action, tool_result_text
from turnrl.agent.openenv.spec import Spec, parse_spec

__all__ = [
    "FAILURE_KIND",
    "INSTALL",
    "PREFIX",
    "RESET_KEY",
    "EnvShape",
    "OpenEnvEpisodeError",
    "OpenEnvError",
    "Spec",
    "load_openenv_agent",
    "observation_text",
    "parse_spec",
    "probe",
    "text_action",
    "tool_result_text",
]
