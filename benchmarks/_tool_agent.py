"""The agent `gateway_load.py` times, run as a process (`rollout.agent.command`): a fixed number of
tool-calling model calls per episode, in one of the gateway's dialects, whatever the model writes.

It reads the row from stdin and its client settings from the environment the gateway sets
(OPENAI_BASE_URL / OPENAI_API_KEY, ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY, TURNRL_MODEL). Every call
offers a `multiply` tool and carries an earlier tool exchange, so the gateway renders tools, tool
calls and tool results each time and reads the output for calls. A call the model made is answered
with its result; otherwise the agent asks it to go on. Set by the benchmark:

    GATEWAY_LOAD_DIALECT    chat, responses or messages
    GATEWAY_LOAD_CLIENT     sdk: the dialect's SDK (openai, anthropic); http: the same requests with
                            the standard library, which costs the agent next to nothing
    GATEWAY_LOAD_CALLS      calls per episode;  GATEWAY_LOAD_TOKENS: max tokens per call
    GATEWAY_LOAD_BARRIER    <folder>:<n>: the first call waits until `n` agents have started (each
                            leaves a file there), so the calls are not slowed by the others' start-ups
    GATEWAY_LOAD_NICE       the process's niceness (the trainer's process then comes first for the CPU)

It prints a reward of 0 (only the time is measured) and its own CPU: seconds to start (Python, the
SDK's import, the client) and milliseconds per call (the client's side of each call), which the
rollout reports as `agent/fn/start_cpu_s` and `agent/fn/call_cpu_ms`.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any

os.nice(int(os.environ.get("GATEWAY_LOAD_NICE", "0")))  # before the SDK's import, the bulk of its start-up
DIALECT = os.environ.get("GATEWAY_LOAD_DIALECT", "chat")
CLIENT = os.environ.get("GATEWAY_LOAD_CLIENT", "sdk")
CALLS = int(os.environ.get("GATEWAY_LOAD_CALLS", "4"))
TOKENS = int(os.environ.get("GATEWAY_LOAD_TOKENS", "16"))
MODEL = os.environ.get("TURNRL_MODEL", "policy")
NAME, DESCRIPTION = "multiply", "Multiply two integers."
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}
EXAMPLE_ARGS = '{"a": 6, "b": 7}'
"""An earlier exchange every call carries: the model called the tool, the tool answered 42."""


STARTED_CPU: list[float] = []
"""The CPU seconds the process had used once its client was made, and once past the barrier."""


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def barrier() -> None:
    """Wait for the other agents to start (GATEWAY_LOAD_BARRIER), at most two minutes."""
    STARTED_CPU.append(cpu_s())
    spec = os.environ.get("GATEWAY_LOAD_BARRIER")
    if spec:
        folder, _, count = spec.rpartition(":")
        open(os.path.join(folder, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 120
        while len(os.listdir(folder)) < int(count) and time.monotonic() < deadline:
            time.sleep(0.2)  # a poll costs CPU the gateway and the engine share
    STARTED_CPU.append(cpu_s())


def result_of(arguments: Any) -> str:
    """The tool's answer to the model's arguments (JSON text or an object), or why it has none."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
        return str(int(args["a"]) * int(args["b"]))
    except (ValueError, TypeError, KeyError):
        return "error: send integer arguments a and b"


def sdk_client(dialect: str) -> Any:
    """`create(body) -> dict` through the dialect's SDK (openai's, or anthropic's for messages)."""
    if dialect == "messages":
        from anthropic import Anthropic

        anthropic = Anthropic(max_retries=0)  # ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY
        return lambda body: anthropic.messages.create(**body).model_dump(exclude_none=True)
    from openai import OpenAI

    openai = OpenAI(max_retries=0)  # OPENAI_BASE_URL and OPENAI_API_KEY
    create = openai.responses.create if dialect == "responses" else openai.chat.completions.create
    return lambda body: create(**body).model_dump(exclude_none=True)


def http_client(dialect: str) -> Any:
    """`create(body) -> dict` with the standard library alone: the same requests, no SDK's cost."""
    import urllib.request

    base = os.environ["OPENAI_BASE_URL"]
    url = base + {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}[dialect]
    headers = {"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}", "Content-Type": "application/json"}

    def create(body: dict[str, Any]) -> Any:
        request = urllib.request.Request(url, json.dumps(body).encode(), headers)
        with urllib.request.urlopen(request, timeout=600) as answer:
            return json.loads(answer.read())

    return create


def chat(create: Any, question: str) -> None:
    tools = [
        {"type": "function", "function": {"name": NAME, "description": DESCRIPTION, "parameters": SCHEMA}}
    ]
    example = {"id": "call_0", "type": "function", "function": {"name": NAME, "arguments": EXAMPLE_ARGS}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is 6 * 7?"},
        {"role": "assistant", "content": "", "tool_calls": [example]},
        {"role": "tool", "tool_call_id": "call_0", "content": "42"},
        {"role": "user", "content": question},
    ]
    for _ in range(CALLS):
        out = create({"model": MODEL, "messages": messages, "tools": tools, "max_tokens": TOKENS})
        message = {k: v for k, v in out["choices"][0]["message"].items() if v is not None}
        messages.append(message)
        calls = message.get("tool_calls") or []
        for call in calls:
            result = result_of(call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        if not calls:
            messages.append({"role": "user", "content": "Go on."})


def responses(create: Any, question: str) -> None:
    tools = [{"type": "function", "name": NAME, "description": DESCRIPTION, "parameters": SCHEMA}]
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "What is 6 * 7?"},
        {"type": "function_call", "call_id": "call_0", "name": NAME, "arguments": EXAMPLE_ARGS},
        {"type": "function_call_output", "call_id": "call_0", "output": "42"},
        {"role": "user", "content": question},
    ]
    body: dict[str, Any] = {"model": MODEL, "tools": tools, "max_output_tokens": TOKENS}
    for _ in range(CALLS):  # the conversation kept by the gateway: each call sends what is new
        out = create({**body, "input": items})
        body["previous_response_id"] = out["id"]
        calls = [item for item in out["output"] if item["type"] == "function_call"]
        items = [
            {"type": "function_call_output", "call_id": c["call_id"], "output": result_of(c["arguments"])}
            for c in calls
        ] or [{"role": "user", "content": "Go on."}]


def messages_api(create: Any, question: str) -> None:
    tools = [{"name": NAME, "description": DESCRIPTION, "input_schema": SCHEMA}]
    example = {"type": "tool_use", "id": "toolu_0", "name": NAME, "input": json.loads(EXAMPLE_ARGS)}
    result = {"type": "tool_result", "tool_use_id": "toolu_0", "content": "42"}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is 6 * 7?"},
        {"role": "assistant", "content": [example]},
        {"role": "user", "content": [result, {"type": "text", "text": question}]},
    ]
    for _ in range(CALLS):
        out = create({"model": MODEL, "messages": messages, "tools": tools, "max_tokens": TOKENS})
        messages.append({"role": "assistant", "content": out["content"] or ""})
        results = [
            {"type": "tool_result", "tool_use_id": b["id"], "content": result_of(b["input"])}
            for b in out["content"]
            if b["type"] == "tool_use"
        ]
        messages.append({"role": "user", "content": results or "Go on."})


AGENTS = {"chat": chat, "responses": responses, "messages": messages_api}


def main() -> None:
    row = json.load(sys.stdin)
    prompt = row["prompt"]
    question = prompt[-1]["content"] if prompt else "Compute 12 * 34."
    create = (http_client if CLIENT == "http" else sdk_client)(DIALECT)
    barrier()
    AGENTS[DIALECT](create, question)
    calls_cpu = cpu_s() - STARTED_CPU[1]
    print(json.dumps({"reward": 0, "start_cpu_s": STARTED_CPU[0], "call_cpu_ms": 1000 * calls_cpu / CALLS}))


if __name__ == "__main__":
    main()
