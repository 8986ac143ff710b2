"""The parts of tests/support/verifiers_envs.py that verifiers' child processes import by name.

verifiers starts a task's toolset as `python -m <its module>` in a child, and that child fetches
the rollout's task and rebuilds it from its data class's `module:qualname`; so the toolset and the
task data live in a module a child can import (the test puts the repository on PYTHONPATH). The
environments file itself is loaded by path, as a user's would be.
"""

from __future__ import annotations

import verifiers.v1 as vf


class EchoData(vf.TaskData):
    answer: str = ""


class CalcToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers and return the sum."""
        return str(a + b)


if __name__ == "__main__":
    CalcToolset.run()
