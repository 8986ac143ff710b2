"""What reading the shared prefix's keys and values once saves a decode (`rollout/attention.py`,
`SHARED_KV`): the same `HFEngine.generate` call with every row's copy read, then with the shared
positions read from the first row, in turns, in one process; prints each call's prefill and decode
seconds, the decode ratio, and whether the greedy ids agree.

    python benchmarks/shared_kv_decode.py                                  # 48 rows, 220 shared + 200 own tokens
    python benchmarks/shared_kv_decode.py --rows 12 --shared 220 --own 300 # an RL step's width
    python benchmarks/shared_kv_decode.py --model tiny-random --rows 4 --new 4   # a smoke run

The prompts are random token ids (speed does not depend on them): `--shared` the same in every row,
then `--own` of each row's; `--new` greedy tokens with EOS ignored, so both arms decode the same
steps. Numbers: docs/rollout.md, "Prefixes prefilled once"."""

from __future__ import annotations

from unittest import mock

from _decode_ab import alternate, parser, setup

import turnrl.rollout.hf as hf


def main() -> None:
    a = parser(__doc__, rows=48, shared=220, own=200, new=48, dtype="float32").parse_args()
    model, tok, prompts, _ = setup(a)
    arms = {
        "every row's copy": lambda: mock.patch.object(hf, "reads_shared_kv", lambda model: False),
        "shared read once": lambda: mock.patch.object(hf, "reads_shared_kv", hf.reads_shared_kv),
    }
    alternate(a, model, tok, prompts, arms)


if __name__ == "__main__":
    main()
