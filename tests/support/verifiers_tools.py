"""The tool of tests/support/verifiers_envs.py's tool environment: a verifiers MCP toolset.

verifiers starts a task's toolset as `python -m <its module>` in a child, so it lives in a module
the child can import by name (the test puts the repository on PYTHONPATH); the environments file
itself is loaded by path.
"""

from __future__ import annotations

import verifiers.v1 as vf


class CalcToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers and return the sum."""
        return str(a + b)


if __name__ == "__main__":
    CalcToolset.run()
