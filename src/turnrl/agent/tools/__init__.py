"""Tools an agent can call: the protocol (`base`), built-ins (calculator, python, search), user tools
loaded from a file (`custom`), MCP servers' tools (`mcp_tools`), and `ToolSet`, which builds them and the
servers they need."""

from turnrl.agent.tools.base import FunctionTool, Tool, ToolError, ToolResult, schema
from turnrl.agent.tools.calculator import Calculator

__all__ = ["Calculator", "FunctionTool", "Tool", "ToolError", "ToolResult", "schema"]
