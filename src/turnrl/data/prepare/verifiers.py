"""`turnrl data verifiers:<env> --out DIR`: a verifiers environment's own tasks as turnrl rows
(`train.jsonl`, `val.jsonl`), to train on with `rollout.agent.env=verifiers:<env>`.

verifiers 0.4 tasksets have no splits, so both files hold every task of the taskset (as `vf-eval`
evaluates on the taskset it trains on); `extra_info.split` tells them apart. Each row carries its
task's own data, so the agent plays exactly that task (turnrl.agent.verifiers_env).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from turnrl.agent.verifiers_env import env_name, load_verifiers_env, verifiers_rows
from turnrl.data.dataset import DataError
from turnrl.data.prepare.output import check_out_dir
from turnrl.data.prepare.tasks import write_rows

# the other datasets' flags; a verifiers environment's rows are its own tasks
NOT_FOR_VERIFIERS = ("input", "from_hub", "split", "data_source", "arg")
NOT_FOR_VERIFIERS += ("n", "seed", "topk", "retry_fraction", "two_hop_share", "cache_dir")


def run_verifiers(ns: argparse.Namespace) -> int:
    """Write the env `ns.dataset` names (`verifiers:<env>`) as `train.jsonl` and `val.jsonl` in `ns.out`."""
    given = [
        f"--{k.replace('_', '-')}" for k in NOT_FOR_VERIFIERS if getattr(ns, k, None) not in (None, False, [])
    ]
    if ns.name is not None:
        given.insert(0, repr(ns.name))
    if given:
        raise DataError(
            f"{ns.dataset}: {', '.join(given)} do not apply; its rows are the environment's own tasks"
        )
    out = Path(ns.out)
    check_out_dir(out, ns.overwrite)  # before the environment loads: a refused --out costs nothing
    env = load_verifiers_env(ns.dataset)
    train, val = verifiers_rows(env, "train"), verifiers_rows(env, "val")
    write_rows(train, out / "train.jsonl")
    write_rows(val, out / "val.jsonl")
    print(f"{ns.dataset}: {len(train)} tasks of {env_name(env)} (data_source {train[0]['data_source']})")
    print(f"  {out / 'train.jsonl'}: {len(train)} rows")
    print(f"  {out / 'val.jsonl'}: {len(val)} rows (the same tasks: verifiers tasksets have no splits)")
    return 0
