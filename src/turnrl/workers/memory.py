"""Out of memory in a role's forward or backward pass, reported as the config key to lower.

A micro-batch that does not fit is a config value too large for the machine, not a bug: torch's
error (a `torch.OutOfMemoryError` on a GPU, a RuntimeError from the CPU allocator) becomes an
`OutOfMemory`, a bad-input error whose one line names the stage, the key and its value. The
decorator wraps a role's whole method, so forward, backward and optimizer step are covered.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from turnrl.errors import TurnrlInputError

F = TypeVar("F", bound=Callable[..., Any])

# torch.OutOfMemoryError covers CUDA (and XPU); the CPU and MPS allocators raise plain RuntimeErrors
OOM_MARKERS = ("DefaultCPUAllocator: can't allocate memory", "out of memory")
_CPU_BYTES = re.compile(r"tried to allocate (\d+) bytes")
_GPU_SIZE = re.compile(r"Tried to allocate ([\d.]+ [KMGT]?i?B)")


class OutOfMemory(TurnrlInputError):
    """A micro-batch (or chunk) too large for the device's memory; the message names the key to lower."""


def is_out_of_memory(err: BaseException) -> bool:
    # RuntimeError subclasses only: a MemoryError from Python objects is no micro-batch's fault
    if not isinstance(err, RuntimeError):
        return False
    return isinstance(err, torch.OutOfMemoryError) or any(m in str(err) for m in OOM_MARKERS)


def requested(err: BaseException) -> str:
    """How much torch asked for, as its message says (`3.0 GiB`), or '' when it does not say."""
    text = str(err)
    if m := _CPU_BYTES.search(text):
        size = int(m.group(1))
        return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"
    if m := _GPU_SIZE.search(text):
        return m.group(1)
    return ""


def out_of_memory_message(err: BaseException, stage: str, key: str, value: int, also: str = "") -> str:
    """One line: where memory ran out, the key to lower with a value to try, and other keys that help."""
    size = requested(err)
    asked = f"; torch tried to allocate {size}" if size else ""
    other = f", or {also}" if also else ""
    return (
        f"out of memory in the {stage} ({key}={value}{asked}): lower {key} (e.g. {max(value // 2, 1)}){other}"
    )


def names_key_on_oom(
    stage: str, key: str, value_of: Callable[[Any], int], also: str = ""
) -> Callable[[F], F]:
    """Decorate a role method: torch's out-of-memory error inside it is raised as `OutOfMemory`
    naming `key`, whose current value `value_of(role)` reads."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(self, *args, **kwargs)
            except RuntimeError as err:
                if not is_out_of_memory(err):
                    raise
                message = out_of_memory_message(err, stage, key, value_of(self), also)
            # raised outside the except clause: chained to torch's error, its traceback would keep the
            # failed pass's tensors alive, and a caller retrying with a smaller micro-batch would fail too
            raise OutOfMemory(message)

        return method  # type: ignore[return-value]

    return wrap
