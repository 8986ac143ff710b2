"""`turnrl.runtime.memory_metrics`: a process's peak resident memory, read in a fresh child process
so that nothing else in the test session sets its peak."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import json
from turnrl.runtime import memory_metrics
first = b"x" * (100 * 2**20)  # 100 MiB, every page written: from here the peak is the current size
before = memory_metrics()
second = b"x" * (300 * 2**20)  # 300 MiB more, kept alive beside the first
after = memory_metrics()
print(json.dumps({"before": before, "after": after, "torch": "torch" in __import__("sys").modules}))
"""


# a parent that touched 600 MiB starts the child: Linux's ru_maxrss would carry the parent's peak
# across exec, and the child would report 0.6 GiB before touching anything
PARENT = f"""
import subprocess, sys
ballast = b"x" * (600 * 2**20)
print(subprocess.run([sys.executable, "-c", {CHILD!r}], capture_output=True, text=True, check=True).stdout)
"""


def test_peak_rss_grows_by_what_the_process_touched():
    out = subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    before, after = got["before"]["perf/max_rss_gb"], got["after"]["perf/max_rss_gb"]
    # 300 MiB = 300 / 1024 = 0.293 GiB, give or take the interpreter's own few MiB
    assert 0.28 < after - before < 0.31
    assert 0.09 < before < 0.3  # a bare interpreter (some 10-40 MiB) with the first 100 MiB
    assert got["torch"] is False  # runtime stays free of torch: the servers import it
    assert set(got["after"]) == {"perf/max_rss_gb"}  # no CUDA figure without CUDA in use
