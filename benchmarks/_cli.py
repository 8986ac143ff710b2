"""What the benchmarks that chain real CLI stages share: run `turnrl ARGS` in a child process with its
output in a log, and plot a run. (`benchmarks/` is a folder of scripts; `python benchmarks/x.py` puts
this folder first on the path, so `from _cli import cli` finds this module.)"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import secrets
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def cli(args: list[str], log: Path) -> float:
    """Run `turnrl ARGS` (this interpreter's turnrl); its output goes to `log`. Returns wall seconds;
    a failed stage ends the benchmark with the command and the last 30 lines of its log."""
    cmd = [sys.executable, "-m", "turnrl.cli", *args]
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as fh:
        fh.write(shlex.join(cmd) + "\n")
        fh.flush()
        done = subprocess.run(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "TQDM_DISABLE": "1"}
        )
    wall = time.perf_counter() - start
    if done.returncode:
        tail = log.read_text().splitlines()[-30:]
        sys.exit(f"failed ({done.returncode}): {shlex.join(cmd)}\n" + "\n".join(tail))
    return wall


class Stages:
    """`<out>/stages.json`: the command and wall seconds of every CLI stage that finished. With
    `--resume` a finished stage whose output is still there is not run again, so a measurement spread
    over several sessions (one seed each) adds up to one table.

    A finished stage whose command differs from the one this run would give it (an RL run of 6 steps
    when 24 are asked) ends the benchmark with one line naming the difference: reusing it would put
    two settings in one table, and running it again would overwrite what it measured."""

    IGNORED = ("trainer.num_threads=",)
    """Arguments left out of the comparison: the thread count changes a stage's speed, not what it
    computes, and adding seeds on another machine should not be refused for it."""

    def __init__(self, out: Path, resume: bool) -> None:
        self.out = out
        self.path = out / "stages.json"
        self.done: dict[str, Any] = {}
        if resume and self.path.exists():
            try:
                self.done = json.loads(self.path.read_text())
            except json.JSONDecodeError as e:  # a hand edit gone wrong: say so, do not run over it
                sys.exit(f"--resume: {self.path} is not valid JSON ({e}); mend or delete it")
            if not isinstance(self.done, dict):
                sys.exit(f"--resume: {self.path} holds a {type(self.done).__name__}, not the stages' record")

    def command(self, args: list[str]) -> list[str]:
        """`args` as recorded: `--out`'s path written `{out}` (a moved directory still resumes)."""
        return [a.replace(str(self.out), "{out}") for a in args if not a.startswith(self.IGNORED)]

    def run(self, key: str, output: Path, args: list[str], log: Path) -> float:
        """`turnrl ARGS` as stage `key` unless it finished before with these args and `output` is
        still there. Returns the stage's wall seconds (the recorded ones when reused)."""
        command = self.command(args)
        entry = self.done.get(key)
        if entry is not None and output.exists():
            # entries of benchmarks from before the command was recorded: seconds, or a measurement dict
            was = entry.get("command") if isinstance(entry, dict) else None
            if was is not None and was != command:
                sys.exit(f"--resume: stage {key} in {self.out} {difference(was, command)}; use another --out")
            wall = float(entry["wall_s"] if isinstance(entry, dict) else entry)
            print(f"  {key}: reused ({wall:.0f} s{'' if was else ', command not recorded'})", flush=True)
            return wall
        wall = cli(args, log)
        self.done[key] = {"wall_s": wall, "command": command}
        self._record(key)
        return wall

    def _record(self, key: str) -> None:
        """Write stage `key` into the file as it is now, so that two benchmark processes on other seeds
        in one `--out` keep each other's stages; whole or not at all (a temporary file, renamed)."""
        try:
            on_disk = json.loads(self.path.read_text()) if self.path.exists() else {}
        except json.JSONDecodeError:
            on_disk = {}
        merged = {**(on_disk if isinstance(on_disk, dict) else {}), key: self.done[key]}
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(merged, indent=1) + "\n")
        os.replace(tmp, self.path)


def difference(was: list[str], now: list[str]) -> str:
    """What a recorded command has that the new one lacks, and the reverse, in one phrase (an option
    with its value counts as one word: `--n 4` where this run asks `--n 5`)."""
    before, after = words(was), words(now)
    gone, added = [w for w in before if w not in after], [w for w in after if w not in before]
    if not gone and not added:
        return "ran the same arguments in another order"
    return f"ran `{' '.join(gone) or '(nothing more)'}` where this run asks `{' '.join(added) or '(nothing more)'}`"


def words(args: list[str]) -> list[str]:
    """`args` with each `--option` joined to the value after it."""
    out: list[str] = []
    for arg in args:
        if out and out[-1].startswith("--") and " " not in out[-1] and not arg.startswith("--"):
            out[-1] += f" {arg}"
        else:
            out.append(arg)
    return out


def sft_args(a: Any, train_file: Path, run_dir: Path, seed: int, max_obs_length: int) -> list[str]:
    """`turnrl sft` on a benchmark's demonstrations, sized by its --model, --sft-epochs, --sft-batch,
    --sft-lr and --threads; `max_obs_length` is the agent recipe's
    `rollout.multi_turn.max_obs_length`, so SFT cuts tool output where RL will."""
    return [
        "sft", f"model.path={a.model}", f"data.train_files=[{train_file}]",
        f"data.max_obs_length={max_obs_length}", f"trainer.total_epochs={a.sft_epochs}",
        f"trainer.train_batch_size={a.sft_batch}", "trainer.micro_batch_size=4", f"optim.lr={a.sft_lr}",
        f"trainer.seed={seed}", f"trainer.num_threads={a.threads}", "trainer.logger=[jsonl]",
        f"trainer.default_local_dir={run_dir}",
    ]  # fmt: skip


@functools.cache
def recipe_config(recipe: str, command: str = "train") -> Any:
    """A shipped recipe's resolved config (`turnrl train NAME`, or `turnrl sft NAME` with `sft`)."""
    from turnrl.config import load_config

    if command == "sft":
        from turnrl.config.supervised_schema import SFTConfig
        from turnrl.supervised.checks import check_sft

        return load_config(recipe, schema=SFTConfig, check=check_sft, command="sft")
    return load_config(recipe, command=command)


def recipe_value(recipe: str, key: str, command: str = "train") -> Any:
    """One setting of a shipped recipe, by its dotted key (`trainer.total_training_steps`)."""
    return functools.reduce(getattr, key.split("."), recipe_config(recipe, command))


def recipe_overrides(recipe: str, wanted: dict[str, Any], command: str = "train") -> list[str]:
    """`key=value` for each wanted setting that differs from the recipe's: a benchmark's command is
    the recipe's, plus the levers it changes."""
    return [f"{key}={value}" for key, value in wanted.items() if value != recipe_value(recipe, key, command)]


def report(run_dir: Path) -> str:
    """`turnrl report RUN_DIR`: its plots and page; returns the page's path."""
    cli(["report", str(run_dir)], run_dir.with_name(run_dir.name + "_report.log"))
    return str(run_dir / "report" / "report.html")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """A JSONL file's rows (metrics.jsonl, samples.jsonl, val_samples/step_N.jsonl)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


TINY_RUN = [
    "model.path=tiny-random",
    "data.train_batch_size=2",
    "rollout.n=2",
    "actor.ppo_mini_batch_size=2",
    "data.max_response_length=8",
    "data.val_batch_size=40",
]
"""A smoke run's `turnrl train` overrides: tiny-random, small batches, a few validation prompts."""


def cpu_name() -> str:
    """The processor's model name (`lscpu`), for a benchmark's record of where it ran."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        out = ""
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def start_tinker_server(model: str, out: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`turnrl tinker serve --model MODEL` on a free port, one torch thread, its state and log under
    `out`; returns the process and its URL (the API key: `TINKER_API_KEY`, set here when unset)."""
    os.environ.setdefault("TINKER_API_KEY", "tml-" + secrets.token_hex(16))
    path = out / "server.log"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "turnrl.cli", "tinker", "serve", "--model", model]
    cmd += ["--state-root", str(out / "state"), "--port", "0", "--threads", "1"]
    with path.open("w") as log:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        found = re.search(r"listening on (http://\S+)", path.read_text())
        if found:
            return proc, found.group(1)
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"turnrl tinker serve did not start; see {path}")


SERVICE_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
"""What `turnrl tinker serve` adapts with the SDK's defaults (train_attn, train_mlp, train_unembed) on a Llama."""


def service_lora(rank: int) -> list[str]:
    """The overrides that give `turnrl train` / `turnrl sft` the service's LoRA: rank `rank`, its
    alpha (`turnrl.tinker.backbone.LORA_ALPHA`, 32), on every projection and the unembedding."""
    from turnrl.tinker.backbone import LORA_ALPHA

    return [
        f"model.lora_rank={rank}",
        f"model.lora_alpha={LORA_ALPHA}",
        f"model.target_modules=[{','.join(SERVICE_TARGETS)}]",
    ]
