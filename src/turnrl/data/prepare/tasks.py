"""`turnrl data task NAME`, `turnrl data search_sft` and `turnrl data code_sft`: the built-in tasks' files, for a user to read
or train on (the rows, corpora and demonstrations themselves are made in `turnrl.tasks`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from turnrl.data.dataset import DataError
from turnrl.data.prepare.output import check_out_dir
from turnrl.tasks import TASKS, get, write_task
from turnrl.tasks.args import check_count, parse_args

OUT_FILE = "train.jsonl"


def run_task(ns: argparse.Namespace) -> int:
    """Write task `ns.name`'s `train.jsonl` and `val.jsonl` (and its corpus) into `ns.out`."""
    if not ns.name:
        raise DataError(f"task: name the task: turnrl data task NAME --out DIR; tasks: {', '.join(TASKS)}")
    task = get(ns.name)  # an unknown name fails before --out is looked at
    args = parse_args(getattr(ns, "arg", None))
    seed = ns.seed if ns.seed is not None else 0
    out = Path(ns.out)
    check_out_dir(out, ns.overwrite)
    files = write_task(task.name, out, seed, with_corpus=True, args=args)
    given = "".join(f", {k}={v}" for k, v in sorted(args.items()))
    print(f"{task.name}: {task.summary} (seed {seed}{given})")
    for path in files.paths:  # train, val, and a corpus with its questions
        print(f"  {path}: {_lines(path)} rows")
    return 0


def _lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def write_rows(rows: list[dict[str, Any]], path: Path) -> None:
    """JSONL under a hidden temporary name, renamed into place once complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def run_search_sft(ns: argparse.Namespace) -> int:
    """Write the search task's demonstrations (`turnrl.tasks.search.demos`) as `train.jsonl`."""
    from turnrl.config.agent_schema import SearchToolConfig
    from turnrl.models.loader import cache_root
    from turnrl.tasks.search import demos

    n, topk = ns.n, ns.topk if ns.topk is not None else SearchToolConfig().topk
    retry = ns.retry_fraction if ns.retry_fraction is not None else 0.1
    seed = ns.seed if ns.seed is not None else 0
    if n is not None:  # no upper bound: the training questions are the most it can use
        check_count(n, "--n", None, DataError)
    size = demos.corpus_size()
    if not 1 <= topk <= size:  # the index's own check, made before anything is built or written
        raise DataError(f"--topk must be between 1 and the corpus size ({size}), got {topk}")
    if not 0.0 <= retry <= 1.0:
        raise DataError(f"--retry-fraction must be in [0, 1], got {retry}")
    share = ns.two_hop_share if ns.two_hop_share is not None else 0.5
    if not 0.0 <= share <= 1.0:
        raise DataError(f"--two-hop-share must be in [0, 1], got {share}")
    opener = ns.opener if ns.opener is not None else demos.DEFAULT_OPENER
    if opener not in demos.OPENERS:
        raise DataError(f"--opener must be one of {', '.join(demos.OPENERS)}, got '{opener}'")
    cache = cache_root(ns.cache_dir or "", "--cache-dir")
    out = Path(ns.out)
    check_out_dir(out, ns.overwrite)
    rows, report = demos.build(n, seed, topk, retry, cache, share, opener)
    if not rows:
        raise DataError(
            f"no demonstration could be made ({len(report.skipped)} skipped); nothing written to {out}"
        )
    path = out / OUT_FILE
    write_rows(rows, path)
    for line in report.skipped[:10]:
        print(f"turnrl data: skipped {line}", file=sys.stderr)
    print(
        f"search_sft: {report.questions} training questions ({report.excluded} excluded as identical to a "
        f"validation question); {report.used} used (seed {seed}, topk {topk})"
    )
    searches = ", ".join(f"{v} with {k} search{'es' * (k > 1)}" for k, v in sorted(report.searches.items()))
    print(f"  {path}: {len(rows)} demonstrations: {searches}")
    print(f"  first query: {_counts(report.first_styles)}")
    print(f"  queries that missed the fact and were followed by another search: {_counts(report.missed)}")
    print(f"  skipped (no query found the fact): {len(report.skipped)}")
    return 0


def run_code_sft(ns: argparse.Namespace) -> int:
    """Write the code task's demonstrations (`turnrl.tasks.code.demos`) as `train.jsonl`."""
    from turnrl.tasks import code
    from turnrl.tasks.code.demos import MAX_DEMOS

    seed = ns.seed if ns.seed is not None else 0
    if ns.n is not None:
        check_count(ns.n, "--n", MAX_DEMOS, DataError)
    retry = ns.retry_fraction if ns.retry_fraction is not None else 0.0
    if not 0.0 <= retry <= 1.0:
        raise DataError(f"--retry-fraction must be in [0, 1], got {retry}")
    try:  # a bad name fails before anything is written
        problems = code.demo_problems(ns.problems)
    except ValueError as err:
        raise DataError(f"code_sft: --problems: {err}") from None
    out = Path(ns.out)
    check_out_dir(out, ns.overwrite)
    rows, report = code.demonstrations(ns.n, seed, problems=problems, retry_fraction=retry)
    path = out / OUT_FILE
    write_rows(rows, path)
    print(
        f"code_sft: {report.used} demonstrations from the code task's training rows (seed {seed}), "
        f"{len(report.problems)} problems of the training families ({', '.join(sorted(report.problems))}); "
        "each runs the reference program on its example, then answers with it"
    )
    if report.repairs:
        print(
            f"  {report.repairs} first run another problem's program of the family, see it is wrong, then fix it"
        )
    print(f"  {path}: {len(rows)} demonstrations")
    return 0


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "none"


def run_harbor_sft(ns: argparse.Namespace) -> int:
    """Write the built-in Harbor tasks' scripted episodes (`turnrl.tasks.harbor.builtin.demonstrations`:
    each training task's solution as bash and editor calls, the check's real output) as `train.jsonl`."""
    from turnrl.tasks.harbor import builtin

    seed = ns.seed if ns.seed is not None else 0
    if ns.n is not None:  # more than the training tasks repeats them, in the rows' order
        check_count(ns.n, "--n", None, DataError)
    out = Path(ns.out)
    check_out_dir(out, ns.overwrite)
    rows, report = builtin.demonstrations(ns.n, seed)
    path = out / OUT_FILE
    write_rows(rows, path)
    print(
        f"harbor_sft: {len(rows)} demonstrations of {len(report)} training tasks (seed {seed}); each "
        "applies the task's solution with the editor, runs its check with bash, and stops"
    )
    print(f"  {path}: {len(rows)} demonstrations")
    return 0
