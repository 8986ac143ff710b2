"""The docs stay true to the code: every `turnrl ...` line in README.md and docs/ parses against the
CLI (command, options, recipe names, config keys), every path they name exists, the README's layout
lists every package and its reading path gives each file's length. A failure names the file, the
line and what no longer exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.doc_commands import (
    ROOT,
    command_problem,
    commands_in,
    doc_files,
    path_exists,
    paths_in,
)

README = ROOT / "README.md"
# words of a work log, not of a user's manual
BOOKKEEPING = re.compile(r"\bDeliverable\b|\bthe issue'?s?\b|\bwaves?\b", re.IGNORECASE)


def test_every_documented_command_parses():
    problems = [
        f"{found.where()}: `{found.text}`: {problem}"
        for page in doc_files()
        for found in commands_in(page)
        if (problem := command_problem(found.text))
    ]
    assert not problems, "documented commands that no longer run as written:\n" + "\n".join(problems)


def test_the_docs_name_commands_at_all():
    # the extraction itself: the README's first run and its command list are found
    texts = [found.text for found in commands_in(README)]
    assert any(t.startswith("turnrl train") for t in texts)
    assert len({t.split()[1] for t in texts}) >= 8, texts


def test_every_named_path_exists():
    problems = [
        f"{found.where()}: {found.text}"
        for page in doc_files()
        for found in paths_in(page)
        if not path_exists(found.text)
    ]
    assert not problems, "paths the docs name that do not exist:\n" + "\n".join(problems)


def layout_block() -> list[str]:
    """The README's layout tree: the code block that starts with `src/turnrl/`."""
    blocks = re.findall(r"```\n(src/turnrl/\n.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "README.md has no layout block starting with src/turnrl/"
    return blocks[0].splitlines()


def test_layout_lists_every_package_and_only_real_ones():
    listed = {m.group(1) for line in layout_block() for m in re.finditer(r"(?:^|\s)([a-z_]+)/(?=\s|$)", line)}
    listed |= {m.group(1) for line in layout_block() for m in re.finditer(r"(?:^|\s|,)([a-z_]+\.py)\b", line)}
    src = ROOT / "src" / "turnrl"
    packages = {p.parent.name for p in src.glob("*/__init__.py")}
    missing = sorted(packages - listed)
    assert not missing, f"README.md's layout omits these packages of src/turnrl/: {', '.join(missing)}"
    # a name in the tree is a file or folder of src/turnrl (at any depth), of tests/, or of the root
    real = {p.name for p in src.rglob("*")} | {p.name for p in (ROOT / "tests").iterdir()}
    unknown = sorted(name for name in listed - real - {"turnrl"} if not (ROOT / name).exists())
    assert not unknown, f"README.md's layout names what src/turnrl/ does not hold: {', '.join(unknown)}"


def test_reading_path_line_counts_are_close():
    text = README.read_text(encoding="utf-8")
    part = text[text.index("A reading path through") :]
    counted = re.findall(r"`([\w/]+\.py)` \((\d[\d,]*)", part[:4000])
    assert len(counted) >= 8, "the README's reading path gives no file lengths"
    wrong = []
    for name, claimed in counted:
        actual = len((ROOT / "src" / "turnrl" / name).read_text(encoding="utf-8").splitlines())
        if abs(actual - int(claimed.replace(",", ""))) > max(15, 0.15 * actual):
            wrong.append(f"{name}: README says {claimed} lines, it has {actual}")
    assert not wrong, "README.md's reading path is out of date:\n" + "\n".join(wrong)


def test_the_index_maps_every_page():
    index = ROOT / "docs" / "index.md"
    linked = {found.text for found in paths_in(index)}
    pages = {str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")} - {"docs/index.md"}
    missing = sorted(pages - linked)
    assert not missing, f"docs/index.md does not link: {', '.join(missing)}"


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; measurements go to docs/results/"


def test_no_work_log_words_in_docs():
    hits = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()[:100]}"
        for page in doc_files()
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if BOOKKEEPING.search(line)
    ]
    assert not hits, "docs speak to users, not of the work behind them:\n" + "\n".join(hits)


# -- the checker catches what it should --------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "culprit"),
    [
        ("turnrl trian grpo", "trian"),
        ("turnrl train no_such_recipe", "no_such_recipe"),
        ("turnrl train grpo actor.optim.learning_rate=1e-5", "actor.optim.learning_rate"),
        ("turnrl eval model.path=X --outt DIR", "--outt"),
        ("turnrl sft data.train_fils=[chat.jsonl]", "data.train_fils"),
        ("turnrl data task NAME --out DIR --sed 1", "--sed"),
    ],
)
def test_a_stale_command_is_named(command, culprit):
    problem = command_problem(command)
    assert problem is not None and culprit in problem, problem


@pytest.mark.parametrize(
    "command",
    [
        "turnrl train",
        "turnrl train [recipe] [key=value ...]",
        "turnrl train grpo data.train_files=[train.parquet] model.path=Qwen/Qwen2.5-0.5B-Instruct",
        "turnrl train gym_chain_sum data.task_args.partial_credit=true trainer.seed=S <lever>",
        "turnrl data gsm8k|math|nq_hotpotqa --input FILE --out DIR",
        "turnrl export runs/<run> --out DIR [--step N]",
        "turnrl serve --model PATH [--port 8000]",
        "turnrl train --list-keys",
    ],
)
def test_a_true_synopsis_passes(command):
    assert command_problem(command) is None


def test_a_stale_line_is_reported_with_file_and_line(tmp_path: Path, monkeypatch):
    page = ROOT / "docs" / "results" / "_doc_check_probe.md"
    page.write_text("# probe\n\ntext\n\n```bash\nturnrl train grpo rollout.nn=4   # a typo\n```\n")
    try:
        found = commands_in(page)
        assert [(f.line, f.text) for f in found] == [(6, "turnrl train grpo rollout.nn=4   # a typo")]
        assert found[0].where() == "docs/results/_doc_check_probe.md:6"
        assert "rollout.nn" in (command_problem(found[0].text) or "")
    finally:
        page.unlink()


def test_inline_commands_across_a_line_break_are_found(tmp_path: Path):
    page = tmp_path / "p.md"
    page.write_text("Run `turnrl train\ngym_chain_sum trainer.seed=1` and see\n`docs/nowhere.md`.\n")
    found = commands_in(page)
    assert [(f.line, f.text) for f in found] == [(1, "turnrl train gym_chain_sum trainer.seed=1")]
    assert [f.text for f in paths_in(page)] == ["docs/nowhere.md"]
    assert not path_exists("docs/nowhere.md")
