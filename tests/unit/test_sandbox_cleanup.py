"""A work directory a program turned into a tree 3,000 levels deep is removed all the same."""

import os
import subprocess
import sys

from turnrl.servers.sandbox.cleanup import remove_tree

DEEP = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\nopen('f', 'w').write('x')\n"


def test_a_tree_deeper_than_the_recursion_limit_is_removed(tmp_path):
    work = tmp_path / "run-1"
    work.mkdir()
    subprocess.run([sys.executable, "-c", DEEP], cwd=work, check=True)  # as a sandboxed program would
    assert (work / "d" / "d").is_dir()
    remove_tree(str(work))
    assert not work.exists() and os.listdir(tmp_path) == []


def test_an_ordinary_tree_and_a_missing_one(tmp_path):
    work = tmp_path / "run-2"
    (work / "a" / "b").mkdir(parents=True)
    (work / "a" / "b" / "f").write_text("x")
    remove_tree(str(work))
    assert not work.exists()
    remove_tree(str(tmp_path / "never-made"))  # nothing to remove: no error
