"""Removing what sandboxed programs leave behind, whatever its shape.

`shutil.rmtree` recurses once per directory level, so a program that builds a tree deeper than
Python's recursion limit (`for i in range(3000): os.mkdir('d'); os.chdir('d')`) makes it raise
RecursionError, which `ignore_errors` does not catch, and the tree stays on the host. `remove_tree`
then falls back to coreutils' `rm -rf`, which walks a tree of any depth (by directory descriptors,
so paths longer than PATH_MAX are no obstacle either)."""

from __future__ import annotations

import shutil
import subprocess


def remove_tree(path: str) -> None:
    """Remove `path` and everything below it; errors are ignored, as with `ignore_errors=True`."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--", path], check=False, capture_output=True)
