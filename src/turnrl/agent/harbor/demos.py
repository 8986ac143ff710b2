"""Scripted demonstrations for supervised fine-tuning, read from a task's `solution/solve.sh`.

A demonstration is one episode of tool calls in the chat format `turnrl sft` reads (docs/sft.md):
view each file the solution changes, change it (`str_replace` of a unique string for a patch,
`create` for a whole file), run the task's check (`[metadata] check_command`, when it has one),
and finish with a short message:

    user       <the row's prompt>
    assistant  editor {"command": "view", "path": "/app/textutils.py"}
    tool       <the file, numbered lines>
    assistant  editor {"command": "str_replace", "path": "/app/textutils.py", "old_str": ..., "new_str": ...}
    tool       <the edit's confirmation>
    assistant  bash {"command": "python3 -m unittest -q"}
    tool       <the check's output>
    assistant  The change is made and the tests pass.

solve.sh is read, never run, so it must be one of two forms (anything else is a `DemoError`):
- whole files: `cat > PATH <<'MARK'` ... `MARK`;
- patches: a `python3 - <<'MARK'` program whose `EDITS` is a literal list of `(path, old, new)`.
Lines that only set the shell up (`#` comments, `set -e...`, `cd` into the workspace) are skipped.

`demonstration` is pure: the check's output is an argument (`check_outputs` runs the checks), and how
each tool's answer reads is `Render`, which the agent's own tools can supply.
"""

from __future__ import annotations

import ast
import json
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turnrl.agent.harbor.spec import WORKSPACE, HarborTask

HEREDOC = re.compile(r"""^(?P<cmd>.*?)<<-?\s*(?P<q>['"]?)(?P<mark>\w+)(?P=q)\s*$""")
WRITE = re.compile(r"""^cat\s+>\s*(?P<path>"[^"]+"|'[^']+'|\S+)\s*$""")
PATCH = re.compile(r"^python3?\s+-\s*$")
SETUP = re.compile(r"""^(set\s+-\w+(\s+pipefail)?|cd\s+("\$\{TURNRL_WORKSPACE:-/app\}"|/app|"/app"))\s*$""")
DONE = "The change is made and the tests pass."
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command in the workspace; returns its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "editor",
            "description": "View, create or edit a file (str_replace replaces one unique string).",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "enum": ["view", "create", "str_replace"]},
                    "path": {"type": "string"},
                    "file_text": {"type": "string"},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                },
                "required": ["command", "path"],
            },
        },
    },
]
"""The schemas a demonstration row carries (`tools`): the argument names the agent's tools take."""


class DemoError(ValueError):
    """A solve.sh that is not one of the two scripted forms, or an edit that does not apply."""


@dataclass(frozen=True)
class Edit:
    """One change of solve.sh: `old is None` writes the whole file `new`; else `old` -> `new` once."""

    path: str
    new: str
    old: str | None = None


def absolute(path: str) -> str:
    return posixpath.normpath(posixpath.join(WORKSPACE, path.strip("'\"")))


def patch_edits(task: str, program: str) -> list[Edit]:
    """The `EDITS = [(path, old, new), ...]` literal of a patch program."""
    try:
        tree = ast.parse(program)
    except SyntaxError as err:
        raise DemoError(f"harbor task '{task}': solve.sh's patch program does not parse: {err.msg}") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "EDITS" for t in node.targets
        ):
            edits = ast.literal_eval(node.value)
            return [Edit(absolute(p), new, old) for p, old, new in edits]
    raise DemoError(f"harbor task '{task}': solve.sh's patch program has no EDITS list")


def parse_solve(task: str, script: str) -> list[Edit]:
    """The edits a scripted solve.sh makes, in order (module docstring: the two forms)."""
    lines, edits, i = script.splitlines(), [], 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#") or SETUP.match(line):
            continue
        here = HEREDOC.match(line)
        if here is None:
            raise DemoError(
                f"harbor task '{task}': solve.sh line {i}: {line!r} is neither a file write nor a patch"
            )
        try:
            end = lines.index(here["mark"], i)
        except ValueError:
            raise DemoError(f"harbor task '{task}': solve.sh line {i}: no closing {here['mark']}") from None
        body = "".join(line + "\n" for line in lines[i:end])
        i = end + 1
        if write := WRITE.match(here["cmd"].strip()):
            edits.append(Edit(absolute(write["path"]), body))
        elif PATCH.match(here["cmd"].strip()):
            edits += patch_edits(task, body)
        else:
            raise DemoError(
                f"harbor task '{task}': solve.sh: {here['cmd'].strip()!r} is neither a file write nor a patch"
            )
    return edits


def numbered(text: str, first: int = 1) -> str:
    """`text`'s lines numbered from `first`, as `cat -n` shows them."""
    return "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(text.split("\n"), first))


def edited(path: str, before: str, old: str, new: str) -> str:
    """An edit's confirmation: the replaced lines with two lines of context, numbered."""
    start = before[: before.index(old)].count("\n") + 1
    after = before.replace(old, new, 1).split("\n")
    around = after[max(0, start - 3) : start + new.count("\n") + 2]
    return f"edited {path}:\n" + numbered("\n".join(around), max(1, start - 2))


@dataclass(frozen=True)
class Render:
    """How each tool's answer reads in a demonstration; the defaults write what the workspace tools
    (`bash`, `editor`) answer for a file of a few hundred lines."""

    view: Callable[[str, str], str] = lambda path, text: numbered(text)
    create: Callable[[str, str], str] = lambda path, text: f"created {path} ({len(text.splitlines())} lines)"
    replace: Callable[[str, str, str, str], str] = edited
    command: Callable[[str], str] = lambda output: output.rstrip("\n") or "[no output]"


def call(messages: list[dict[str, Any]], tool: str, answer: str, **args: str) -> None:
    """Append one assistant tool call (OpenAI form, arguments as a JSON string) and its answer."""
    n = len(messages)
    function = {"name": tool, "arguments": json.dumps(args)}
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"call_{n}", "type": "function", "function": function}],
        }
    )
    messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": answer})


def apply(task: str, files: dict[str, str], edit: Edit) -> str:
    """`files` after one edit (changed in place); the file's new text."""
    if edit.old is None:
        files[edit.path] = edit.new
        return edit.new
    text = files.get(edit.path)
    if text is None or text.count(edit.old) != 1:
        found = "absent" if text is None else f"{text.count(edit.old)} times"
        raise DemoError(f"harbor task '{task}': the edit's old string in {edit.path} is {found}, not once")
    files[edit.path] = text.replace(edit.old, edit.new)
    return files[edit.path]


DEFAULT_RENDER = Render()


def demonstration(
    task: HarborTask,
    prompt: list[dict[str, Any]],
    check_output: str | None = None,
    render: Render = DEFAULT_RENDER,
) -> list[dict[str, Any]]:
    """The messages of one scripted episode of `task` after `prompt` (the row's). `check_output`:
    what the task's check command printed once solved (no check step when None)."""
    solve = task.solve_sh()
    if solve is None:
        raise DemoError(f"harbor task '{task.name}': no solution/solve.sh")
    files = {f.path: f.content.decode("utf-8", errors="replace") for f in task.files}
    messages, viewed = [*prompt], set()
    for edit in parse_solve(task.name, solve):
        if edit.path in files and edit.path not in viewed:
            viewed.add(edit.path)
            call(messages, "editor", render.view(edit.path, files[edit.path]), command="view", path=edit.path)
        if edit.old is None:
            answer = render.create(edit.path, edit.new)
            call(messages, "editor", answer, command="create", path=edit.path, file_text=edit.new)
        else:
            answer = render.replace(edit.path, files[edit.path], edit.old, edit.new)
            args = {"path": edit.path, "old_str": edit.old, "new_str": edit.new}
            call(messages, "editor", answer, command="str_replace", **args)
        apply(task.name, files, edit)
    check = task.metadata.get("check_command")
    if check and check_output is not None:
        call(messages, "bash", render.command(check_output), command=str(check))
    messages.append({"role": "assistant", "content": DONE})
    return messages


def solved_files(task: HarborTask) -> dict[str, str]:
    """The workspace once solve.sh's edits are applied (absolute path -> text): pure."""
    files = {f.path: f.content.decode("utf-8", errors="replace") for f in task.files}
    for edit in parse_solve(task.name, task.solve_sh() or ""):
        apply(task.name, files, edit)
    return files
