"""The server, asked once at start-up: is it up, what action does it take, which tools does it list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from turnrl.agent.openenv.common import OpenEnvError, one_line
from turnrl.agent.openenv.spec import Spec

TIMEOUT_S = 10.0
"""Seconds each start-up request may take."""


@dataclass(frozen=True)
class EnvShape:
    """How an episode talks to the env: tool calls (`tools`) or text actions (`action_field`)."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    """The env's MCP tools as OpenAI function tools; empty = the env takes text actions."""
    action_field: str = ""
    """The action field a reply's text fills; '' = the reply is the action's JSON object."""
    fields: dict[str, bool] = field(default_factory=dict)
    """The action's fields (besides `metadata`) -> required, for the hint after a bad reply."""


def probe(spec: Spec) -> EnvShape:
    """Ask the server at `spec.url`; OpenEnvError (one line) when it does not answer as OpenEnv does."""
    import httpx

    # a loopback server is reached directly; a remote one as this machine's proxy settings say
    with httpx.Client(base_url=spec.url, timeout=TIMEOUT_S, trust_env=not spec.loopback) as http:
        _health(http, spec)
        tools = _tools(http)
        schema = {} if tools else _action_schema(http, spec)
    if tools:
        return EnvShape(tools=tools)
    fields = action_fields(schema)
    name = spec.action or text_field(schema)
    if name == "json":
        name = ""
    if name and fields and name not in fields:
        raise OpenEnvError(
            f"{spec.where}: the env's action has no field {name!r} (its fields: {', '.join(fields)})"
        )
    return EnvShape(action_field=name, fields=fields)


def _health(http: Any, spec: Spec) -> None:
    import httpx

    try:
        response = http.get("/health")
    except httpx.HTTPError as err:
        raise OpenEnvError(
            f"{spec.where}: cannot reach the environment server at {spec.url}: "
            f"{type(err).__name__}: {one_line(err)} (is it running?)"
        ) from None
    if response.status_code != 200:
        raise OpenEnvError(
            f"{spec.where}: {spec.url}/health answered HTTP {response.status_code}; "
            "is this an OpenEnv environment server?"
        )


def _tools(http: Any) -> list[dict[str, Any]]:
    """The env's MCP tools (`tools/list` on `/mcp`) as OpenAI function tools; [] for an env
    without MCP (it answers with a JSON-RPC error) or a server too old to have `/mcp`."""
    import httpx

    request = {"jsonrpc": "2.0", "method": "tools/list", "params": {}, "id": 1}
    try:
        answer = http.post("/mcp", json=request).json()
    except (httpx.HTTPError, ValueError):
        return []
    listed = (answer.get("result") or {}).get("tools") if isinstance(answer, dict) else None
    return [openai_tool(t) for t in listed or [] if isinstance(t, dict) and t.get("name")]


def openai_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An MCP tool (`input_schema`, or `inputSchema` before MCP SDK 2) as an OpenAI function tool."""
    schema = tool.get("input_schema") or tool.get("inputSchema") or {"type": "object", "properties": {}}
    function = {"name": tool["name"], "description": tool.get("description") or "", "parameters": schema}
    return {"type": "function", "function": function}


def _action_schema(http: Any, spec: Spec) -> dict[str, Any]:
    """The action's JSON schema; {} from a server without one when the spec names the field."""
    import httpx

    try:
        response = http.get("/schema")
        schema = response.json().get("action") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        schema = None
    if not isinstance(schema, dict) and spec.action:
        return {}
    if not isinstance(schema, dict):
        raise OpenEnvError(
            f"{spec.where}: {spec.url}/schema did not give the env's action schema; is this an "
            "OpenEnv environment server? (#action=<field> or #action=json says what an action is)"
        )
    return schema


def action_fields(schema: dict[str, Any]) -> dict[str, bool]:
    """The action's fields, `metadata` aside (every OpenEnv action has it), -> required."""
    required = set(schema.get("required") or [])
    return {k: k in required for k in schema.get("properties") or {} if k != "metadata"}


def text_field(schema: dict[str, Any]) -> str:
    """The one string field a reply's text fills: the action's only field, or its only required
    one; '' when there is none such (the reply is then the action's JSON object)."""
    props = {k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata"}
    strings = [k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"]
    required = [k for k in schema.get("required") or [] if k in props]
    if len(props) == 1 and strings:
        return strings[0]
    if len(required) == 1 and required[0] in strings:
        return required[0]
    return ""
