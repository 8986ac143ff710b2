"""The settings that decide a CPU run's bits, pinned so numbers recorded on one x86-64 machine hold
on another (docs/architecture.md, "What is exact, where").

A float32 run's bits depend on which kernels the libraries dispatch to, and they choose by the
processor: on an AMD EPYC with AVX-512 ATen runs its AVX-512 kernels and MKL its AVX2 code (MKL
keeps AVX-512 for Intel), while an Intel Xeon runs AVX-512 in both. Each choice sums in another
order; a sampled run then draws other tokens and its metrics move by percents, not by rounding
(measured: step-2 entropy 2.7641 on a Xeon against 2.7492 on the EPYC). No tolerance tells that
from a real change, so the runs whose numbers are recorded pin every choice instead:

- ATen's kernels to AVX2 (every x86-64 machine of this project's kinds has it);
- MKL to its COMPATIBLE branch, the one Intel documents as giving the same results on Intel and
  Intel-compatible processors (its AVX2 branch falls back to AUTO on AMD: read back with
  `mkl_serv_cbwr_get`, tests/integration/test_pinned_cpu.py);
- oneDNN to AVX2 (no AMX or AVX512-BF16 kernels where a run uses oneDNN);
- one thread (a reduction split over threads sums in another order).

arm64 has neither MKL nor these kernels: the recorded numbers are x86-64 numbers and those tests
skip there, saying so; the tests that compute both sides on one machine run everywhere.
"""

import os
import platform
from pathlib import Path

PINNED = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

# Every choice a host's processor makes, made otherwise than on this project's machines: no vector
# kernels in ATen, MKL's SSE4.2 code, oneDNN at SSE4.1, two threads. Unpinned, each changes bits.
ANOTHER_HOST = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "AUTO",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "OMP_NUM_THREADS": "2",
    "MKL_NUM_THREADS": "2",
}


def pinned_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (this process's environment by default) with every dispatch choice pinned."""
    return {**(dict(os.environ) if base is None else base), **PINNED}


def why_not_pinnable() -> str | None:
    """Why this machine cannot compute the recorded x86-64 bits, or None when it can."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        return f"recorded numbers are x86-64 bits (AVX2 kernels, MKL); this machine is {machine}"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        flags = next((line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")), "")
        missing = [f for f in ("avx2", "fma") if f not in flags.split()]
        if missing:
            return f"recorded numbers need AVX2 kernels; this processor lacks {', '.join(missing)}"
    import torch

    if not torch.backends.mkl.is_available():
        return "recorded numbers need torch's MKL (the x86-64 CPU build); this torch has none"
    return None
