"""What the docs test reads out of Markdown: every `turnrl ...` command line (in code blocks and in
inline code), every repository path the text names, and whether each parses against the real CLI.

Nothing here loads a model: a command is parsed by turnrl's own argument parser, its recipe is
looked up among the shipped ones and its `key=value` overrides are checked against the config
schema's keys, the same checks `turnrl train` makes before it loads anything.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_COMMAND = re.compile(r"`(turnrl\s[^`]*)`")
# an optional group in a synopsis (`[recipe]`, `[--seed S]`), not a list value (`files=[a.jsonl]`)
OPTIONAL_GROUP = re.compile(r"(?<![=\w\]])\[[^\[\]]*\]")
# `turnrl train: <message>`: what a command prints, quoted in the docs, not a command
MESSAGE = re.compile(r"^turnrl(?: [\w-]+){0,2}:")
# a synopsis may name an option without its value, or leave required ones out (`turnrl serve`)
INCOMPLETE = (
    "the following arguments are required",
    "expected one argument",
    "expected at least one argument",
)
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*|<[^>]*>|\.\.\.|…)$")
CHAIN = re.compile(r"\s(?:&&|\|\||;|\|)\s")
# a repository path the text names: a top-level folder of the repository, then a file or folder name
REPO_PATH = re.compile(r"(?<![\w./-])(?:src|docs|benchmarks|tests|examples|\.ci)/[\w.*/-]*[\w*/]")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Found:
    """A command or path, where the docs hold it."""

    file: Path
    line: int
    text: str

    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def split_fences(text: str) -> tuple[list[tuple[int, str]], str]:
    """(the lines inside code blocks with their 1-based numbers, the prose with those lines blanked,
    so that inline code in it keeps its line numbers)."""
    code: list[tuple[int, str]] = []
    prose: list[str] = []
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
            prose.append("")
        elif inside:
            code.append((number, line))
            prose.append("")
        else:
            prose.append(line)
    return code, "\n".join(prose)


def joined_code_lines(code: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Code lines with `\\` continuations joined, numbered by their first line."""
    start, parts = 0, []
    for number, line in code:
        if not parts:
            start = number
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        yield start, " ".join(parts)
        parts = []
    if parts:
        yield start, " ".join(parts)


def commands_in(path: Path) -> list[Found]:
    """Every `turnrl ...` command the page shows."""
    code, prose = split_fences(path.read_text(encoding="utf-8"))
    found: list[Found] = []
    for number, line in joined_code_lines(code):
        for part in CHAIN.split(line):
            part = part.strip().removeprefix("$ ").strip()
            if part.startswith("turnrl ") and not MESSAGE.match(part):
                found.append(Found(path, number, part))
    for match in INLINE_COMMAND.finditer(prose):
        number = prose.count("\n", 0, match.start()) + 1
        if not MESSAGE.match(match.group(1)):
            found.append(Found(path, number, " ".join(match.group(1).split())))
    return found


def paths_in(path: Path) -> list[Found]:
    """Every repository path the page names in code or inline code, and every relative link."""
    text = path.read_text(encoding="utf-8")
    found: list[Found] = []
    for number, line in enumerate(text.splitlines(), 1):
        for span in re.findall(r"`([^`]*)`", line) if not FENCE.match(line) else []:
            found += [Found(path, number, p.rstrip("/.")) for p in REPO_PATH.findall(span)]
        for target in MD_LINK.findall(re.sub(r"`[^`]*`", "", line)):
            target = target.split("#", 1)[0]
            if target and not re.match(r"^[a-z]+:", target):
                found.append(Found(path, number, str((path.parent / target).resolve().relative_to(ROOT))))
    return found


def path_exists(text: str) -> bool:
    return any(ROOT.glob(text)) if "*" in text else (ROOT / text).exists()


# -- parsing a command against the CLI ---------------------------------------------------------


def variants(command: str) -> list[list[str]]:
    """The argument lists a synopsis stands for: optional groups dropped, placeholders kept as
    values, `a|b` alternatives expanded. Raises ValueError for text shlex cannot split."""
    text = re.sub(r"<[^<>]*>", "<X>", command).removesuffix(" &")  # `<sft run>`; run in the background
    while OPTIONAL_GROUP.search(text):
        text = OPTIONAL_GROUP.sub(" ", text)
    tokens = [t for t in shlex.split(text, comments=True)[1:] if t not in ("...", "…", "&")]  # drop `turnrl`
    choices = [t.split("|") if "|" in t and "=" not in t and "/" not in t else [t] for t in tokens]
    return [list(v) for v in itertools.product(*choices)]


def schema_for(command: str) -> type | None:
    """The config schema whose keys a command's overrides set."""
    from turnrl.config.schema import Config
    from turnrl.config.supervised_schema import RMConfig, SFTConfig

    return {"train": Config, "eval": Config, "trace": Config, "sft": SFTConfig, "rm": RMConfig}.get(command)


def recipe_problem(command: str, recipe: str) -> str | None:
    """Why a recipe argument would not resolve, or None. A placeholder or a user's own .yaml file
    passes: the docs cannot ship the reader's files."""
    from turnrl.config.loader import builtin_recipes

    if PLACEHOLDER.match(recipe) or "<" in recipe or recipe.endswith((".yaml", ".yml")):
        return None
    shipped = sft_recipes() if command in ("sft", "rm") else builtin_recipes()
    if recipe in shipped:
        return None
    return f"no built-in {command} recipe '{recipe}' (built-in: {', '.join(shipped) or 'none'})"


def sft_recipes() -> dict[str, Path]:
    """The shipped recipes of `turnrl sft` / `turnrl rm`, where the package has any."""
    from turnrl.config import loader

    listing = getattr(loader, "builtin_sft_recipes", None)
    return dict(listing()) if listing else {}


def override_problem(schema: type, item: str) -> str | None:
    """Why `key=value` would be refused for its key, or None (values may be placeholders)."""
    from turnrl.config.checks import ConfigError
    from turnrl.config.loader import _check_keys, _nest

    if "=" not in item:
        return None if PLACEHOLDER.match(item) or "<" in item else f"'{item}' is not key=value"
    key = item.split("=", 1)[0].lstrip("+")
    if PLACEHOLDER.match(key) or "<" in key:
        return None
    try:
        _check_keys(_nest(key, None), "the docs", schema=schema)
    except ConfigError as err:
        return str(err)
    return None


def parse_problem(argv: list[str]) -> str | None:
    """Why turnrl's argument parser refuses `argv`, or None. A synopsis leaves required options out
    (`turnrl serve`), so only a wrong command, option or choice counts."""
    from turnrl.cli import build_parser

    argv = [
        "1" if PLACEHOLDER.match(tok) and i and argv[i - 1].startswith("--") else tok
        for i, tok in enumerate(argv)
    ]
    parser = build_parser(argv)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            ns = parser.parse_args(argv)
        except SystemExit as stop:
            message = " ".join(err.getvalue().split())
            if stop.code in (0, None) or any(words in message for words in INCOMPLETE):
                return None
            return message or f"exit {stop.code}"
    return config_problem(ns)


def config_problem(ns: object) -> str | None:
    """The recipe and overrides of a command that takes a config."""
    command = getattr(ns, "command", None)
    schema = schema_for(command or "")
    args = list(getattr(ns, "args", None) or [])
    if schema is None or not args:
        return None
    if "=" not in args[0] and (problem := recipe_problem(command, args.pop(0))):
        return problem
    return next((p for item in args if (p := override_problem(schema, item))), None)


def command_problem(command: str) -> str | None:
    """Why a documented `turnrl ...` line would not run as written, or None."""
    if PLACEHOLDER.match(command.split()[1] if len(command.split()) > 1 else ""):
        return None  # `turnrl <command>`: the CLI's shape, no command named
    try:
        argvs = variants(command)
    except ValueError as err:
        return f"cannot split into arguments: {err}"
    return next((p for argv in argvs if (p := parse_problem(argv))), None)
