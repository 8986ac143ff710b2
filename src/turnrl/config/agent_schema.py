"""Configuration of agent rollouts: multi-turn episodes with turnrl's tools (`rollout.multi_turn.*`)
and agents written as plain functions against the OpenAI API (`rollout.agent.*`).

Token budgets count tokens of one response (one episode), never of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from turnrl.config.rules import ranged

DEFAULT_INVALID = (
    "\nMy previous action is invalid. To use a tool, put its input between the tool's tags, "
    "e.g. <{tool_tag}> ... </{tool_tag}>. To answer, put the answer between <{answer_tag}> and "
    "</{answer_tag}>. Let me try again.\n"
)


@dataclass
class SearchToolConfig:
    url: str = ""
    """Retriever URL (Search-R1's `POST /retrieve` API). Empty = start turnrl's own retriever as a child process."""
    index: str = ""
    """Index directory for the child retriever. Empty = the built-in corpus (indexed once into the cache)."""
    api_key: str = ""
    """Key of `url`'s retriever, sent as `Authorization: Bearer`. Empty = $TURNRL_API_KEY (prefer it:
    a key here is saved with the run's config). turnrl's own child retriever gets a fresh key by itself."""
    topk: int = ranged(3, ">= 1")
    """Passages per query."""
    tag: str = "search"
    """XML action tag: the model writes `<search>query</search>`."""
    obs_tag: str = "information"
    """XML tag wrapping the passages shown to the model."""


@dataclass
class PythonToolConfig:
    url: str = ""
    """SandboxFusion-compatible `/run_code` URL. Empty = start turnrl's own sandbox as a child process."""
    api_key: str = ""
    """Key of `url`'s sandbox, sent as `Authorization: Bearer`. Empty = $TURNRL_API_KEY (prefer it:
    a key here is saved with the run's config). turnrl's own child sandbox gets a fresh key by itself,
    which the tool and the code rewards that reuse the sandbox send."""
    run_timeout: float = ranged(5.0, "> 0")
    """Wall-clock seconds one program may run in the sandbox."""
    memory_limit_mb: int = ranged(-1, ">= 1 or -1", "-1 = the server's default")
    """Memory limit per run in MB (-1 = the server's default)."""
    workers: int = ranged(0, ">= 0", "0 = one per CPU core")
    """Concurrent runs of the child sandbox (0 = one per CPU core); ignored with `url`."""
    tag: str = "code"
    """XML action tag: the model writes `<code>program</code>`."""
    obs_tag: str = "observation"
    """XML tag wrapping the program's output."""


@dataclass
class WorkspaceToolConfig:
    """The `bash` and `editor` tools' sandbox: one session per episode of a task that brings a
    workspace (`data.task=harbor`, docs/data.md "Harbor tasks")."""

    url: str = ""
    """A turnrl sandbox server (`turnrl sandbox serve`: sessions are turnrl's own routes). Empty = start
    turnrl's own sandbox as a child process."""
    api_key: str = ""
    """Key of `url`'s sandbox. Empty = $TURNRL_API_KEY (a child sandbox gets a fresh key by itself)."""
    workers: int = ranged(0, ">= 0", "0 = one per CPU core")
    """Concurrent commands of the child sandbox (0 = one per CPU core); ignored with `url`."""
    command_timeout_s: float = ranged(30.0, "> 0")
    """Wall-clock seconds one `bash` command (or an editor's listing) may run."""
    ttl_s: float = ranged(1800.0, "> 0")
    """Longest life of an episode's session; the server removes it and its files then, whatever
    happened to the run (each session lives at most its task's agent and verifier time, plus 60 s)."""


@dataclass
class CalculatorToolConfig:
    tag: str = "calculator"
    """XML action tag: the model writes `<calculator>12 * 34</calculator>`."""
    obs_tag: str = "result"
    """XML tag wrapping the calculator's answer."""


@dataclass
class MultiTurnConfig:
    enable: bool = False
    """Run episodes of generate -> tool call -> observation -> generate instead of one response."""
    max_turns: int = ranged(4, ">= 0")
    """Tool-using turns per episode; after the last one the model answers without tools."""
    tools: list[str] = field(default_factory=lambda: ["search"])
    """Built-in tools the model may call: any of calculator, python, search."""
    custom_tools: list[str] = field(default_factory=list)
    """User tools as `path/to/file.py:Name` (a class with name/description/parameters/call, or a function)."""
    mcp_servers: list[str] = field(default_factory=list)
    """MCP servers whose tools the model may call, each a command line split like a shell would (shlex),
    started as a child process and spoken to over stdio, e.g. `["python my_server.py", "npx -y
    @modelcontextprotocol/server-filesystem /data"]`. Each server's tools (name, description, input
    schema) join the tool set; a name another tool has stops the run. Needs `pip install -e ".[agents]"`."""
    mcp_startup_timeout_s: float = ranged(60.0, "> 0")
    """Seconds an MCP server may take to start, initialise and list its tools (`npx`/`uvx` may download
    the server first); one that has not answered by then stops the run in one line."""
    format: str = "xml"
    """`xml`: `<tag>input</tag>` actions (Search-R1, Code-R1); `json`: `<tool_call>{"name", "arguments"}</tool_call>` in the chat template."""
    answer_tag: str = "answer"
    """XML tag of the final answer; `<answer>...</answer>` ends the episode."""
    max_obs_length: int = ranged(512, ">= 1")
    """Tokens of one tool output shown to the model; longer outputs are cut and end with `obs_truncation_marker`."""
    obs_truncation_marker: str = "...[truncated]"
    """Text appended to a cut observation, so the model can see it was cut."""
    max_tokens_per_turn: int = ranged(0, ">= 0", "0 = up to the remaining response budget")
    """Model tokens one turn may generate (0 = up to the remaining response budget)."""
    tool_timeout: float = ranged(30.0, "> 0")
    """Seconds one tool call may take; a late call becomes an error observation and the episode goes on."""
    max_concurrent_calls: int = ranged(64, ">= 1")
    """Tool calls in flight at once across the batch (they run concurrently within a turn)."""
    invalid_action_observation: str = DEFAULT_INVALID
    """Shown after an unusable action (`{tool_tag}`, `{answer_tag}` are filled in); empty = end the episode instead."""
    eos_ends_episode: bool = True
    """An EOS with no action ends the episode (true) or counts as an invalid action (false, Search-R1's way)."""
    step_rewards: bool = False
    """Record a step reward per model turn, carried in the batch as `turn_rewards` for
    `algorithm.adv_estimator=gigpo` or `turn_rloo` to add to the turns' returns. A tool's call gives
    one with `ToolResult.reward`; the built-in tools' own: search 1 when its passages name the
    question's bridge entity or an answer not found by an earlier search of the episode (after
    StepSearch, arXiv 2505.15107), calculator 1 for a call that evaluates, python 1 for a program
    that runs and exits 0; else 0. A turn's reward is the mean over its calls that give one."""
    step_reward_weight: float = ranged(0.1, "> 0")
    """Each step reward is multiplied by this before it enters a turn's return (the outcome reward
    is 1 for a right answer in the built-in tasks)."""
    search: SearchToolConfig = field(default_factory=SearchToolConfig)
    """The `search` tool (retriever client)."""
    python: PythonToolConfig = field(default_factory=PythonToolConfig)
    """The `python` tool (code sandbox client)."""
    calculator: CalculatorToolConfig = field(default_factory=CalculatorToolConfig)
    """The `calculator` tool (exact arithmetic, no code execution)."""
    workspace: WorkspaceToolConfig = field(default_factory=WorkspaceToolConfig)
    """The `bash` and `editor` tools' sandbox sessions."""


@dataclass
class FunctionAgentConfig:
    """`rollout.agent`: an agent written against the OpenAI API, trained as it is (docs/agent-programs.md)."""

    entrypoint: str = ""
    """The agent: `path/to/file.py:run` or `package.module:run`, a function `run(client, model, row)`
    (or `async def`) returning its reward. Empty = off. Set, it replaces `rollout.multi_turn`."""
    env: str = ""
    """An environment as the agent, instead of an entrypoint: `verifiers:<taskset id>` or
    `verifiers:path/to/file.py:load` (a verifiers v1 `Env`; pip install -e ".[verifiers]"). Its own
    rollout runs against the episode's client and its rubric's reward is the episode's (docs/agent-loop.md);
    or `openenv:<server URL>[#options]`, an OpenEnv environment server played turn by turn, its
    reward the episode's (pip install -e ".[openenv]"; docs/agent-programs.md)."""
    command: str = ""
    """An agent as a process, in any language, instead of an entrypoint: an executable and its
    arguments (split like a shell would, run without one, in the working directory), started once
    per episode with `OPENAI_BASE_URL`, `OPENAI_API_KEY` (and `ANTHROPIC_*`) naming the episode's
    gateway, `TURNRL_MODEL`, and the row as JSON on its stdin and in `TURNRL_ROW_FILE`. Its reward:
    a `reward: <number>` line it prints, else `test_command`'s, else the rule scorer on a
    printed `answer: <text>` or on its last reply. It is killed with its children when it ends, at
    `timeout_s`, or past 1 MiB of stdout or stderr (docs/agent-programs.md, "An agent as a process")."""
    test_command: str = ""
    """With `command`: run after the agent, in the same form, when it printed no reward; its reward is
    the number it writes to the file `$TURNRL_REWARD_FILE`, else 1.0 for exit status 0 and 0.0 for
    any other. It sees the agent's `TURNRL_EPISODE_DIR`. Empty = none."""
    max_concurrency: int = ranged(64, ">= 1")
    """Episodes running at once (each one agent call with its own client)."""
    timeout_s: float = ranged(300.0, "> 0")
    """Wall-clock seconds one episode may take; a late episode scores 0 (`agent/errors/timeout`)."""
    max_calls: int = ranged(32, ">= 1")
    """Model calls one episode may make; the next one is refused and the episode ends truncated."""
    max_forks: int = ranged(4, ">= 0", "0 = no forks")
    """New samples one episode may start where its messages stop extending what was sampled (the
    agent rewrote its history, or the chat template re-renders it differently): the sample so far is
    kept and the next starts from the rewritten context, with the episode's reward
    (`agent/template_forks`). Past this, such calls are served but not trained on."""
    chat_template: str = ""
    """A Jinja chat template file used instead of the tokenizer's, for models whose own template
    renders no tools or tool calls. Empty = the tokenizer's."""
    on_error: str = "fail_first_step"
    """What an agent that raises (a process: exits non-zero, floods its output), times out, returns
    no reward or makes no call does: `fail` stops the run, `zero` scores the episode 0 (counted in
    `agent/errors/<kind>`), `fail_first_step` stops the run in validation before training and in
    the first step, then scores 0."""
    tool_call_format: str = "auto"
    """How the gateway reads tool calls from the model's text: `auto` (the format the chat template
    writes, read off its source: `<function=` qwen3_xml, `[TOOL_CALLS]` mistral, `<tool_call>` hermes,
    `<|python_tag|>` or Llama headers with `"parameters"` llama3_json; else hermes), or one of
    `hermes` (`<tool_call>{"name", "arguments"}</tool_call>`), `qwen3_xml` (Qwen3-Coder, Qwen3.5:
    `<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>`),
    `llama3_json` (`{"name", "parameters"}`, also after `<|python_tag|>`) or `mistral`
    (`[TOOL_CALLS][{"name", "arguments"}]` or `[TOOL_CALLS]NAME[ARGS]{...}`)."""
