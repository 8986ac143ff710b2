"""The pin that makes recorded numbers hold on any x86-64 processor (tests/support/pinned_cpu.py),
checked on one machine: each kernel family a training step uses is computed in a subprocess under
two dispatch settings, as two processors would choose them, and compared bit for bit."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.pinned_cpu import ANOTHER_HOST, PINNED, pinned_env, why_not_pinnable

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(why_not_pinnable() is not None, reason=str(why_not_pinnable()))


def probe(env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.kernel_probe"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def this_host() -> dict[str, str]:
    """This process's environment with none of the choices made: the machine's own."""
    return {k: v for k, v in os.environ.items() if k not in {*PINNED, *ANOTHER_HOST}}


@pytest.mark.timeout(120)
def test_pinned_every_kernel_gives_the_same_bits_whatever_the_host_chose():
    here = probe(pinned_env(this_host()))
    there = probe(pinned_env({**this_host(), **ANOTHER_HOST}))
    assert here == there
    assert here["capability"] == "AVX2" and here["threads"] == 1
    assert here["mkl_branch"] in (3, None)  # 3 = MKL_CBWR_COMPATIBLE, where the build exposes it


@pytest.mark.slow  # why the pin is needed, not whether it holds (the test above): ~6 s
@pytest.mark.timeout(120)
def test_unpinned_the_hosts_choices_change_the_bits():
    # why the pin is needed: the same products and reductions under the machine's own choices and
    # under another host's differ, in MKL's products and in ATen's vector kernels alike
    here, there = probe(this_host())["digests"], probe({**this_host(), **ANOTHER_HOST})["digests"]
    differ = {name for name in here if here[name] != there[name]}
    assert "linear16x576x1536" in differ  # MKL
    assert "log_softmax" in differ  # ATen
