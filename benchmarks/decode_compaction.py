"""What letting finished rows ride until dropping them pays saves a decode (`rollout/decode_loop.py`,
`compaction_pays`; `rollout/kv_cache.py`, rows kept in place): the same `HFEngine.generate` call with
finished rows dropped at every finish (a whole copy of each layer's cache each time), then with the
current rule, in turns, in one process; prints each call's decode seconds, the ratio, and whether
the ids agree.

    python benchmarks/decode_compaction.py                                 # 64 rows as an agent turn
    python benchmarks/decode_compaction.py --dtype float32                 # the exact float32 copy
    python benchmarks/decode_compaction.py --model tiny-random --rows 8 --own 8 --new 8   # a smoke run

The prompts are random token ids (speed does not depend on them): `--shared` the same in every row
(a system prompt), then `--own` of each row's (the episode so far). Each row gets its own budget,
spread evenly from `--new` / 8 to `--new` tokens with EOS ignored, so rows finish one after another
as an agent turn's answers and tool calls do, and both arms decode the same tokens."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import torch
from _decode_ab import alternate, parser, setup

import turnrl.rollout.decode_loop as decode_loop
from turnrl.rollout.kv_cache import PreallocatedLayer


def whole_copy(self: PreallocatedLayer, indices: torch.Tensor) -> None:
    """Dropping rows as before: every kept row's whole buffer gathered into a new one."""
    if self._k is not None and self._v is not None:
        self._k, self._v = self._k[indices], self._v[indices]
        self.map_frozen(lambda t: t[indices])
        self._refresh()


@contextlib.contextmanager
def every_finish() -> Iterator[None]:
    with (
        mock.patch.object(decode_loop, "compaction_pays", lambda ridden, kept: True),
        mock.patch.object(PreallocatedLayer, "batch_select_indices", whole_copy),
    ):
        yield


def main() -> None:
    a = parser(__doc__, rows=64, shared=250, own=150, new=128, dtype="bfloat16").parse_args()
    model, tok, prompts, g = setup(a)
    low = max(1, a.new // 8)
    limits = [low + (a.new - low) * i // max(1, a.rows - 1) for i in range(a.rows)]
    order = torch.randperm(a.rows, generator=g).tolist()  # finishing order not the row order
    limits = [limits[i] for i in order]
    print(f"budgets {low}-{a.new}")
    arms = {"drop at every finish": every_finish, "drop when it pays": contextlib.nullcontext}
    alternate(a, model, tok, prompts, arms, limits)


if __name__ == "__main__":
    main()
