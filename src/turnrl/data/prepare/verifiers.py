"""`turnrl data verifiers:<env> --out DIR`: a verifiers environment's own tasks as turnrl rows
(`train.jsonl`, `val.jsonl`), to train on with `rollout.agent.env=verifiers:<env>`.

verifiers 0.4 tasksets have no splits, so both files hold every task of the taskset (as `vf-eval`
evaluates on the taskset it trains on); `extra_info.split` tells them apart. Each row carries its
task's own data, so the agent plays exactly that task (turnrl.agent.verifiers).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turnrl.agent.verifiers import PREFIX, TASK_KEY, VerifiersEnvError, env_name, load_verifiers_env
from turnrl.data.dataset import DataError
from turnrl.data.prepare.output import check_out_dir
from turnrl.data.prepare.tasks import write_rows

if TYPE_CHECKING:
    import verifiers.v1 as vf

# the other datasets' flags; a verifiers environment's rows are its own tasks
NOT_FOR_VERIFIERS = ("input", "from_hub", "split", "data_source", "arg")
NOT_FOR_VERIFIERS += ("n", "seed", "topk", "retry_fraction", "two_hop_share", "opener", "cache_dir")


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


def verifiers_rows(env: vf.Env, split: str = "train", name: str | None = None) -> list[dict[str, Any]]:
    """The env's taskset as verl-format rows, in its order, `data_source = verifiers/<env name>`.

    verifiers 0.4 tasksets have no splits (`vf-eval` evaluates on the taskset it trains on): every
    split is the whole taskset, `split` only goes into `extra_info.split`. Each row carries the
    task's own data (`extra_info.verifiers_task`), so `run` plays exactly that task; `prompt` is
    its system prompt and prompt as messages (what the prompt-length filter and logs read), and
    `reward_model.ground_truth` its `answer` field ('' without one: the env scores, not the row).
    """
    where = f"{PREFIX}{name or env_name(env)}"
    if not env.taskset.bounded:
        raise VerifiersEnvError(
            f"{where}: the taskset is infinite; bound it in the loader (env.taskset = env.taskset.take(n))"
        )
    source = f"verifiers/{name or env_name(env)}"
    rows = []
    for position, task in enumerate(env.taskset):
        data = task.data
        messages = _messages_of(data)
        if not messages:
            raise VerifiersEnvError(
                f"{where}: task {data.idx} has no prompt (its user opens the conversation); a turnrl row needs one"
            )
        answer = getattr(data, "answer", None)
        rows.append(
            {
                "data_source": source,
                "prompt": messages,
                "ability": "verifiers",
                "reward_model": {
                    "style": "verifiers",
                    "ground_truth": "" if answer is None else _plain(answer),
                },
                "extra_info": {
                    "split": split,
                    "index": data.idx if data.idx is not None else position,
                    TASK_KEY: data.model_dump_json(exclude_none=True),
                },
            }
        )
    if not rows:
        raise VerifiersEnvError(f"{where}: the taskset has no tasks")
    return rows


def _messages_of(data: Any) -> list[dict[str, str]]:
    from verifiers.v1.types import content_text

    messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(data.prompt, str):
        messages.append({"role": "user", "content": data.prompt})
    else:
        messages += [{"role": m.role, "content": content_text(m.content)} for m in data.prompt or []]
    return messages if len(messages) > bool(data.system_prompt) else []


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value
