"""User tools loaded from a file: `rollout.multi_turn.custom_tools=[my_tools.py:Weather]`.

`Name` may be a class (instantiated without arguments) or an instance implementing the tool
protocol, or a plain function (wrapped as `FunctionTool`: its keywords are the arguments).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from turnrl.agent.tools.base import FunctionTool, ToolError, check_tool


def load_custom_tool(spec: str) -> Any:
    """Import `path.py:Name` and return a tool object; every failure is one line naming the spec."""
    where = f"rollout.multi_turn.custom_tools: '{spec}'"
    path_text, sep, attr = spec.rpartition(":")
    if not sep or not path_text or not attr:
        raise ToolError(f"{where}: expected 'path/to/file.py:Name'")
    path = Path(path_text)
    if not path.is_file():
        raise ToolError(f"{where}: file not found: {path}")
    module_name = f"turnrl_user_tool_{abs(hash(str(path.resolve())))}"
    module = sys.modules.get(module_name)
    if module is None:
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ToolError(f"{where}: cannot import {path}")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as err:
            del sys.modules[module_name]
            raise ToolError(f"{where}: importing {path} failed: {err!r}") from None
    obj = getattr(module, attr, None)
    if obj is None:
        raise ToolError(f"{where}: {path} defines no '{attr}'")
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
