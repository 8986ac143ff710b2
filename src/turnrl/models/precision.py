"""The precision the training roles' forward and backward passes compute in (`model.compute_dtype`).

Parameters, gradients and optimizer state stay in `model.dtype` (the master weights); with a lower
compute precision the matrix products run under `torch.autocast`, which casts each weight as it is
read and keeps reductions (log-softmax, logsumexp, norms) in float32. The lever is for float32
master weights: a policy-gradient step at a learning rate of 1e-6 changes most bfloat16 weights by
less than half their last bit, so with bfloat16 parameters most of the update rounds away.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

from turnrl.errors import TurnrlInputError

log = logging.getLogger(__name__)

EXACT_ENV = "TURNRL_EXACT"
"""`TURNRL_EXACT=1`: every `auto` precision is float32, exactly, on any device. The test suite sets
it, so that its numbers do not depend on whether the processor has bfloat16 instructions."""

COMPUTE_DTYPES = ("auto", "float32", "bfloat16")
"""`model.compute_dtype`'s values (the config checks name them too, before any model loads)."""

F = TypeVar("F", bound=Callable[..., Any])


class PrecisionError(TurnrlInputError):
    """A compute precision the device cannot run; the message names `model.compute_dtype`."""


def bf16_supported(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 natively: a GPU of compute capability >= 8.0, or a CPU
    whose oneDNN has bfloat16 instructions (AVX512-BF16 or AMX)."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def exact_requested() -> bool:
    """Whether `$TURNRL_EXACT` asks every `auto` precision to be float32."""
    return os.environ.get(EXACT_ENV, "") not in ("", "0")


def auto_bf16(device: torch.device) -> bool:
    """Whether `auto` precisions mean bfloat16 on `device`: it multiplies bfloat16 natively and
    `$TURNRL_EXACT` is not set."""
    return not exact_requested() and bf16_supported(device)


def fallback_note(device: torch.device) -> str:
    """The one line said at start when `auto` falls back to float32 for want of bfloat16 ('' when not)."""
    if exact_requested() or bf16_supported(device):
        return ""
    return (
        f"model.compute_dtype=auto: this {device.type} has no bfloat16 instructions (AVX512-BF16 or AMX on "
        "a CPU, compute capability 8.0 on a GPU); training and sampling run in float32"
    )


def compute_dtype(name: str, param_dtype: torch.dtype, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for `model.compute_dtype=name` (None: compute in the parameters' own
    precision, exactly).

    `auto` is bfloat16 for float32 parameters where the device multiplies bfloat16 natively (a GPU of
    compute capability 8.0+, a CPU with AVX512-BF16 or AMX) and exact elsewhere, or everywhere under
    `$TURNRL_EXACT`. Measured on a CPU (docs/results/default-job.md): the default job's held-out accuracy stays within the
    float32 runs' spread. `bfloat16` asks for it wherever the device has it, and is an error naming the
    key where not."""
    if name not in COMPUTE_DTYPES:
        raise PrecisionError(
            f"'model.compute_dtype' must be one of {', '.join(COMPUTE_DTYPES)}, got '{name}'"
        )
    if name == "float32" or param_dtype != torch.float32:
        return None  # exact, or the parameters are already in a lower precision
    if name == "auto":
        return torch.bfloat16 if auto_bf16(device) else None
    if not bf16_supported(device):
        raise PrecisionError(
            f"'model.compute_dtype=bfloat16' needs bfloat16 instructions, which this {device.type} lacks "
            "(a GPU of compute capability 8.0+, or a CPU with AVX512-BF16/AMX); use auto or float32"
        )
    return torch.bfloat16


@contextlib.contextmanager
def computing_in(dtype: torch.dtype | None, device: torch.device) -> Iterator[None]:
    """Autocast to `dtype` on `device`'s type; nothing at all for None."""
    if dtype is None:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=dtype):
        yield


def in_compute_dtype(fn: F, dtype: torch.dtype | None, device: torch.device) -> F:
    """`fn` run under `computing_in(dtype, device)`; `fn` itself for None."""
    if dtype is None:
        return fn

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with computing_in(dtype, device):
            return fn(*args, **kwargs)

    wrapped.compute_dtype = dtype  # type: ignore[attr-defined]  # what a test or a report can read back
    return wrapped  # type: ignore[return-value]
