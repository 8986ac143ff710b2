"""User tools loaded from a file: `rollout.multi_turn.custom_tools=[my_tools.py:Weather]`.

`Name` may be a class (instantiated without arguments) or an instance implementing the tool
protocol, or a plain function (wrapped as `FunctionTool`: its keywords are the arguments).
"""

from __future__ import annotations

import inspect
from typing import Any

from turnrl.agent.tools.base import FunctionTool, ToolError, check_tool
from turnrl.plugins import load_attribute


def load_custom_tool(spec: str) -> Any:
    """Import `path.py:Name` and return a tool object; every failure is one line naming the spec."""
    where = f"rollout.multi_turn.custom_tools: '{spec}'"
    path_text, sep, attr = spec.rpartition(":")
    if not sep or not path_text or not attr:
        raise ToolError(f"{where}: expected 'path/to/file.py:Name'")
    obj = load_attribute(path_text, attr, where, ToolError)
    if inspect.isclass(obj):
        try:
            tool = obj()
        except Exception as err:
            raise ToolError(f"{where}: {attr}() failed: {err!r}") from None
    elif inspect.isfunction(obj) or inspect.iscoroutinefunction(obj):
        tool = FunctionTool(obj)
    else:
        tool = obj
    check_tool(tool, where)
    return tool
