"""`turnrl live serve [recipe] [key=value ...]` and `turnrl live rollback RUN_DIR STEP`.

`serve` serves the policy to the clients of `live.keys_file` and trains on their rewarded sessions
(docs/live.md; without a recipe, `live_addition`: the embedded model, LoRA); name the run directory (`trainer.default_local_dir=DIR`) to start again where a
stopped or crashed server left off. Ctrl-C or SIGTERM stops it after the step in progress.
`rollback` sets a stopped server's run back to the checkpoint of STEP: the later checkpoints are
moved to `RUN_DIR/rolled_back/`, and the next `serve` of that directory serves and trains on from STEP.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

from turnrl.errors import TurnrlInputError

COMMAND = "turnrl live"
DEFAULT_RECIPE = "live_addition"
"""What `turnrl live serve` serves without a recipe: the embedded model under a LoRA adapter."""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("live", help="serve the policy to real clients and learn from their rewards")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    cmds = parser.add_subparsers(dest="live_command", metavar="COMMAND")
    serve = cmds.add_parser("serve", help="serve and train on rewarded sessions (docs/live.md)")
    serve.add_argument("args", nargs="*", help="an optional recipe, then key=value overrides")
    serve.set_defaults(func=run_serve)
    back = cmds.add_parser("rollback", help="set a stopped live run back to an earlier checkpoint")
    back.add_argument("run_dir", help="the live run's directory")
    back.add_argument("step", type=int, help="the checkpoint's step (checkpoints/step_<STEP>)")
    back.set_defaults(func=run_rollback)


def fail(message: Any) -> int:
    print(f"{COMMAND}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def run_serve(ns: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from turnrl.config import load_config
    from turnrl.trainer.cli import split_args

    stops = 0
    built: list[Any] = []  # the trainer, once built: a signal during start-up stops it as it starts

    def stop(signum: int, _frame: Any) -> None:
        nonlocal stops
        stops += 1
        if stops > 1:
            raise KeyboardInterrupt
        print(f"{COMMAND}: stopping after the step in progress (again to stop now)", file=sys.stderr)
        for trainer in built:
            trainer.stop()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        recipe, overrides = split_args(ns.args)
        cfg = load_config(recipe or DEFAULT_RECIPE, overrides)
        from turnrl.live.keys import load_keys
        from turnrl.live.trainer import LiveTrainer, Stopped

        keys = load_keys(cfg.live.keys_file)  # before the model loads
        trainer = LiveTrainer(cfg, keys)
    except TurnrlInputError as err:
        return fail(err)
    built.append(trainer)
    if stops:
        trainer.stop()
    try:
        trainer.fit()
    except Stopped:
        pass
    except TurnrlInputError as err:
        return fail(err)
    print(f"run directory: {trainer.run_dir}")
    return 0


def rollback(run_dir: Path, step: int) -> str:
    """Set `run_dir` back to its checkpoint `step`; returns what was done, in one line."""
    from turnrl.trainer import checkpoint

    found = checkpoint.steps(run_dir)
    if not found:
        raise TurnrlInputError(f"{run_dir}: no checkpoints (is it a live run's directory?)")
    if step not in found:
        raise TurnrlInputError(f"step {step}: no checkpoint; this run has steps {', '.join(map(str, found))}")
    if serving_pid(run_dir) is not None:
        raise TurnrlInputError(
            f"{run_dir}: a server (pid {serving_pid(run_dir)}) is running on it; stop it first"
        )
    later = [p for s, p in found.items() if s > step]
    aside = run_dir / "rolled_back" / time.strftime("%Y%m%d-%H%M%S")
    root = run_dir / "checkpoints"
    pointer = root / ".latest.tmp"
    pointer.write_text(f"step_{step}")
    pointer.replace(root / "latest")  # first: a crash below leaves the pointer right
    events = run_dir / "live" / "events.jsonl"
    if events.parent.is_dir():  # the sessions those steps trained are never trained again
        with open(events, "a") as f:
            f.write(json.dumps({"kind": "rollback", "step": step, "at": time.time()}) + "\n")
    if later:
        aside.mkdir(parents=True, exist_ok=True)
        for path in later:
            path.rename(aside / path.name)
    moved = f"; {len(later)} later checkpoint(s) moved to {aside}" if later else ""
    return f"{run_dir} rolled back to step {step}{moved}"


def serving_pid(run_dir: Path) -> int | None:
    """The pid of a live server running on `run_dir` (its `live/serving.pid`, if that process lives)."""
    import os

    try:
        pid = int((run_dir / "live" / "serving.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def run_rollback(ns: argparse.Namespace) -> int:
    try:
        print(rollback(Path(ns.run_dir), ns.step))
    except TurnrlInputError as err:
        return fail(err)
    return 0
