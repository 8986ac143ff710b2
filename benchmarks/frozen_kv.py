"""What copying the prompt's keys and values out of the preallocated cache once saves a bfloat16 decode
(`rollout/kv_cache.py`, `freeze`; `rollout/attention.py`, `FROZEN_KV`): the same `HFEngine.generate`
call with the decode attention reading the cache's strided view at every step (which torch's CPU
product in bfloat16 copies whole), then reading the frozen copy, in turns, in one process; prints
each call's decode seconds, the ratio, and how many rows' ids agree.

    python benchmarks/frozen_kv.py                                          # 48 rows as an agent turn
    python benchmarks/frozen_kv.py --dtype float32                          # float32 (not frozen by default)
    python benchmarks/frozen_kv.py --model tiny-random --rows 8 --own 8 --new 8   # a smoke run

The prompts are random token ids (speed does not depend on them): `--shared` the same in every row
(a system prompt, read once), then `--own` of each row's (the episode so far), then `--new` greedy
tokens a row with EOS ignored."""

from __future__ import annotations

from unittest import mock

from _decode_ab import alternate, parser, setup

import turnrl.rollout.hf as hf


def main() -> None:
    a = parser(__doc__, rows=48, shared=250, own=290, new=64, dtype="bfloat16").parse_args()
    model, tok, prompts, _ = setup(a)
    arms = {
        "strided view": lambda: mock.patch.object(hf, "freeze_pays", lambda cache: False),
        "frozen copy": lambda: mock.patch.object(hf, "freeze_pays", lambda cache: True),
    }
    alternate(a, model, tok, prompts, arms)


if __name__ == "__main__":
    main()
