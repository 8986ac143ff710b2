"""1 rank vs N data-parallel ranks (Ray + FSDP2 on CPU): step time, stage times and memory per rank.

    python benchmarks/distributed.py                        # embedded SmolLM2-135M, PPO + critic, 3 steps
    python benchmarks/distributed.py --model tiny-random    # a quick run (about 2 minutes on 2 cores)
    python benchmarks/distributed.py --repeats 2 --single-threads 1   # 1,2,2,1 runs; 1 thread per process
    python benchmarks/distributed.py --steps 5 data.max_response_length=32   # overrides for both runs

Both runs use `examples/ppo_gae.yaml` (PPO with a critic, GAE, KL in the reward, so actor,
reference and critic all exist) with `trainer.critic_warmup=0` (the actor updates every step),
the same seed and the same global batch (`--batch` prompts x `--n` samples, the whole batch one
mini-batch), no validation and no checkpoint. One run is the single-process trainer (no Ray);
the other `trainer.device=cpu trainer.n_gpus_per_node=N`. Each runs in its own child process,
one after the other (`--repeats R`: R of each, in the order 1,N,N,1,... so that a load that
drifts hits both), so the single process's peak memory is its own.

It prints:
- time: `timing_s/step` and every stage's `timing_s/<stage>`, read back from each run's
  `metrics.jsonl`, as the mean over the steps after the first (a warm-up), the median over
  repeats; the CPU seconds per step of all the run's processes (/proc/<pid>/stat), which a
  machine shared with other work disturbs less than wall time;
- peak memory per rank: the summed VmHWM (/proc/<pid>/status) of the rank's processes, one per
  role (`RayGroup.pids`), vs the single process's own VmHWM; the N-rank driver's too;
- the state per rank, counted inside each rank (a function run in the rank's process through
  Ray's `__ray_call__`): local elements of the parameters (DTensor `to_local()`), of their
  gradients and of AdamW's two moments, times their element sizes, vs the same count in the
  single process; the parameters FSDP2 still holds gathered; rank 0's full sampling copy;
and the N-rank / 1-rank ratios. Every rank gets `cpu_count // N` torch threads, the single
process torch's default or `--single-threads`. Quote ratios from one invocation, with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RECIPE = Path(__file__).resolve().parent.parent / "examples" / "ppo_gae.yaml"
MIB = 2**20


# -- inside a run ---------------------------------------------------------------------------------
def role_bytes(role: Any) -> dict[str, int]:
    """Bytes this process holds of a role's parameters, gradients and AdamW moments: local shards
    for FSDP2 DTensors, whole tensors otherwise; `sampling_copy`: the actor's separate engine model."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    world = dist.get_world_size() if dist.is_initialized() else 1

    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if isinstance(t, DTensor) else t

    def size(t: torch.Tensor) -> int:
        t = local(t)
        return t.numel() * t.element_size()

    model = role.model
    out = {"params": 0, "grads": 0, "adam": 0, "sampling_copy": 0, "gathered": 0, "full": 0}
    for p in model.parameters():
        out["params"] += size(p)
        out["full"] += p.numel() * p.element_size()  # a DTensor's numel is the full tensor's
        if world > 1 and not isinstance(p, DTensor):  # FSDP2 shows a module it holds unsharded
            out["gathered"] += size(p)  # through plain full tensors in place of its DTensors
        if p.grad is not None:
            out["grads"] += size(p.grad)
    optim = getattr(role, "optim", None)
    if optim is not None:
        for state in optim.opt.state.values():
            out["adam"] += sum(size(state[k]) for k in ("exp_avg", "exp_avg_sq") if k in state)
    engine = getattr(role, "engine", None)
    if engine is not None and engine.model is not model:
        out["sampling_copy"] = sum(size(p) for p in engine.model.parameters())
    return out


def _remote_role_bytes(worker: Any) -> dict[str, int]:
    return role_bytes(worker.role)  # runs inside the rank's process (RankWorker.role)


def proc_status(pid: int | str) -> dict[str, int]:
    """VmHWM (peak resident set), VmRSS and RssAnon of a process, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS", "RssAnon"):
            out[key] = int(value.split()[0]) * 1024  # kB
    return out


def cpu_seconds(pid: int | str) -> float:
    """user + system CPU time a process has used so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def processes(trainer: Any) -> dict[str, list[int | str]]:
    """The processes each role runs in, by rank: the rank workers, or this very process."""
    out: dict[str, list[int | str]] = {}
    for name, handle in trainer.roles.owned().items():
        out[name] = list(getattr(handle.group, "pids", ["self"]))  # a RayGroup has one per rank
    return out


def measure(trainer: Any) -> dict[str, Any]:
    """Memory and sharded sizes per rank, per role: {rank: {role: {...}}}."""
    import ray

    ranks: dict[int, dict[str, Any]] = {}
    for name, handle in trainer.roles.owned().items():
        group = handle.group
        if hasattr(group, "pids"):  # a RayGroup: one process per rank
            sizes = ray.get([w.__ray_call__.remote(_remote_role_bytes) for w in group.workers])
            for r, (pid, sz) in enumerate(zip(group.pids, sizes, strict=True)):
                ranks.setdefault(r, {})[name] = {**sz, **proc_status(pid), "pid": pid}
        else:  # a LocalGroup: the role lives in this process
            ranks.setdefault(0, {})[name] = {**role_bytes(group.workers[0])}
    return {"ranks": ranks, "driver": proc_status("self")}


def child(args: argparse.Namespace) -> None:
    import torch

    from turnrl.config import load_config
    from turnrl.trainer.ppo import Trainer

    run_dir = Path(args.child_dir)
    overrides = [
        f"model.path={args.model}",
        f"data.train_batch_size={args.batch}",
        f"rollout.n={args.n}",
        f"data.max_response_length={args.max_response_length}",
        f"actor.ppo_mini_batch_size={args.batch}",
        f"critic.ppo_mini_batch_size={args.batch}",
        "trainer.critic_warmup=0",
        "trainer.test_freq=0",
        "trainer.val_before_train=false",
        "trainer.save_freq=0",
        "trainer.logger=[jsonl]",
        "trainer.device=cpu",
        f"trainer.n_gpus_per_node={args.child}",
        f"trainer.default_local_dir={run_dir}",
        *args.overrides,
    ]
    cfg = load_config(str(RECIPE), overrides)
    start = time.perf_counter()
    trainer = Trainer(cfg)
    setup_s = time.perf_counter() - start
    pids = sorted({p for ps in processes(trainer).values() for p in ps} | {"self"}, key=str)
    after_setup = {str(p): proc_status(p)["VmHWM"] for p in pids}
    try:
        batches = trainer.batches
        for i in range(args.steps + 1):
            if i == 1:  # after the warm-up step
                cpu0, t0 = sum(cpu_seconds(p) for p in pids), time.perf_counter()
            trainer.global_step += 1  # numbered as fit() numbers them (critic_warmup=0: the actor updates)
            metrics = trainer.step(next(batches))
            trainer.tracker.log(metrics, step=trainer.global_step)
        cpu_per_step = (sum(cpu_seconds(p) for p in pids) - cpu0) / max(args.steps, 1)
        wall_per_step = (time.perf_counter() - t0) / max(args.steps, 1)
        mem = measure(trainer)
    finally:
        trainer.close()
    threads = getattr(trainer.roles.pool, "threads", torch.get_num_threads())
    result = {
        "world": args.child,
        "setup_s": setup_s,
        "threads_per_rank": threads,
        "cpu_s_per_step": cpu_per_step,
        "wall_s_per_step": wall_per_step,
        "load_avg": os.getloadavg()[0],
        "hwm_after_setup": after_setup,
        **mem,
    }
    (run_dir / "bench.json").write_text(json.dumps(result))


# -- the comparison -------------------------------------------------------------------------------
def run_one(args: argparse.Namespace, ranks: int, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", str(ranks), "--child-dir", str(out)]
    cmd += ["--model", args.model, "--steps", str(args.steps), "--batch", str(args.batch)]
    cmd += ["--n", str(args.n), "--max-response-length", str(args.max_response_length), *args.overrides]
    if ranks == 1 and args.single_threads:
        cmd.append(f"trainer.num_threads={args.single_threads}")
    print(f"-- {ranks} rank(s): {' '.join(cmd[1:])}", flush=True)
    subprocess.run(cmd, check=True)
    result = json.loads((out / "bench.json").read_text())
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    result["rows"] = [r for r in rows if "timing_s/step" in r]
    return result


def after_first(res: dict[str, Any], key: str) -> float:
    """Mean of a metric over the steps after the first (warm-up) step."""
    rows = res["rows"]
    return statistics.mean(r.get(key, 0.0) for r in (rows[1:] or rows))


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem = int(Path("/proc/meminfo").read_text().split()[1]) / 2**20
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {platform.system()} {platform.release()}"


def per_rank(res: dict[str, Any], rank: int, key: str) -> int:
    return sum(role.get(key, 0) for role in res["ranks"][str(rank)].values())


def setup_peak(res: dict[str, Any], rank: int) -> int:
    """Summed VmHWM of a rank's processes right after the roles were built."""
    pids = [str(role.get("pid", "self")) for role in res["ranks"][str(rank)].values()]
    return sum(res["hwm_after_setup"][p] for p in set(pids))


def report(args: argparse.Namespace, ones: list[dict[str, Any]], manys: list[dict[str, Any]]) -> None:
    import torch

    one, many = ones[-1], manys[-1]  # memory: the last run of each (it repeats to the MiB)
    n = many["world"]
    order = f" (order 1,{n},{n},1,...)" if len(ones) > 1 else ""
    print(f"\nmachine: {machine()}; torch {torch.__version__}")
    print(
        f"model={args.model} PPO+GAE+critic+reference (examples/ppo_gae.yaml, critic_warmup=0), "
        f"{args.batch} prompts x {args.n} samples/step, max_response_length={args.max_response_length}, "
        f"{args.steps} timed steps after 1 warm-up, {len(ones)} run(s) of each{order}; "
        f"torch threads: 1 rank {one['threads_per_rank']}, {n} ranks {many['threads_per_rank']} each"
    )
    head = f"{'':36s} {'1 rank':>10s} {f'{n} ranks':>10s} {f'{n}/1':>7s}"

    def line(label: str, a: float, b: float, fmt: str = "{:10.2f}") -> None:
        ratio = f"{b / a:7.2f}" if a >= 1e-3 else f"{'-':>7s}"  # no ratio to a stage that takes microseconds
        print(f"{label:36s} {fmt.format(a)} {fmt.format(b)} {ratio}")

    print(f"\n== time (seconds: mean over the steps after the first; median of {len(ones)} run(s)) ==")
    print(head)

    def both(value: Any) -> tuple[float, float]:
        """The median over the runs of each: 1 rank, N ranks."""
        return statistics.median(map(value, ones)), statistics.median(map(value, manys))

    line("setup (build roles; N: + Ray start)", *both(lambda r: r["setup_s"]))
    line("step", *both(lambda r: after_first(r, "timing_s/step")))
    stages = [k for k in one["rows"][0] if k.startswith("timing_s/") and k != "timing_s/step"]
    for k in stages:
        a, b = both(lambda r, k=k: after_first(r, k))
        if max(a, b) >= 0.005:  # the bookkeeping stages take microseconds
            line(f"  {k[9:]}", a, b)
    line("CPU s per step (all rank processes)", *both(lambda r: r["cpu_s_per_step"]))
    line("first step (warm-up)", *both(lambda r: r["rows"][0]["timing_s/step"]))
    if len(ones) > 1:
        for label, runs in (("1 rank", ones), (f"{n} ranks", manys)):
            steps = ", ".join(
                f"{after_first(r, 'timing_s/step'):.2f} (load {r['load_avg']:.1f})" for r in runs
            )
            print(f"  step per run, {label}: {steps}")

    print("\n== memory per rank (MiB) ==")
    print(head)
    single_hwm = one["driver"]["VmHWM"] / MIB
    for r in range(n):
        line(
            f"peak RSS, rank {r} (sum of its roles)", single_hwm, per_rank(many, r, "VmHWM") / MIB, "{:10.0f}"
        )
    for r in range(n):
        built = one["hwm_after_setup"]["self"] / MIB, setup_peak(many, r) / MIB
        line(f"  of it, peak once built, rank {r}", *built, "{:10.0f}")
    for role in many["ranks"]["0"]:
        hwm = " / ".join(f"{many['ranks'][str(r)][role]['VmHWM'] / MIB:.0f}" for r in range(n))
        print(f"{'  ' + role + ' process, rank 0 / 1 ...':36s} {'':>10s} {hwm:>10s}")
    print(f"{'peak RSS of the driver':36s} {single_hwm:10.0f} {many['driver']['VmHWM'] / MIB:10.0f}")

    print("\n== state per rank (MiB: local shard elements x bytes, counted inside each rank) ==")
    print(head)
    for key, label in (("params", "parameters"), ("grads", "gradients"), ("adam", "AdamW moments")):
        for role in one["ranks"]["0"]:
            a = one["ranks"]["0"][role][key] / MIB
            b = many["ranks"]["0"][role][key] / MIB
            if a or b:
                line(f"{label}: {role}", a, b)
    tot1 = sum(per_rank(one, 0, k) for k in ("params", "grads", "adam")) / MIB
    for r in range(n):
        totn = sum(per_rank(many, r, k) for k in ("params", "grads", "adam")) / MIB
        line(f"params+grads+Adam, rank {r}", tot1, totn)
    for r in range(n):
        gathered = per_rank(many, r, "gathered") / MIB
        print(f"{f'  of which held gathered, rank {r}':36s} {'':>10s} {gathered:10.2f}")
    copy = many["ranks"]["0"].get("actor", {}).get("sampling_copy", 0) / MIB
    print(f"{'rank 0 full sampling copy (actor)':36s} {0:10.2f} {copy:10.2f}")
    print(
        "\nPeak RSS: each process's VmHWM (whole resident set: Python, torch, Ray's worker runtime, "
        "shared libraries), summed over a rank's role processes; Ray's own daemons are not counted. "
        "Once built, one process's weights are still memory-mapped from the model file (resident "
        "when first used, shared by its roles until written); N ranks copy their shards. "
        "'held gathered': parameters FSDP2 still holds unsharded (plain tensors in place of "
        "DTensors) at the end, after the last step. CPU s: user+system time of the rank processes "
        "and the driver over the timed steps."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model", default="smollm2-135m-instruct", help="model.path (tiny-random for a quick run)"
    )
    ap.add_argument("--ranks", type=int, default=2, help="data-parallel CPU ranks of the second run")
    ap.add_argument("--steps", type=int, default=3, help="timed steps, after one warm-up step")
    ap.add_argument("--batch", type=int, default=2, help="prompts per step (= the mini-batch)")
    ap.add_argument("--n", type=int, default=2, help="samples per prompt (rollout.n)")
    ap.add_argument("--max-response-length", type=int, default=16)
    ap.add_argument(
        "--single-threads", type=int, default=0, help="torch threads of the 1-rank run (0: torch's default)"
    )
    ap.add_argument("--repeats", type=int, default=1, help="runs of each, alternated 1,N,N,1,...")
    ap.add_argument("--keep", action="store_true", help="keep the run directories (printed)")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--child-dir", default="", help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help="more key=value config overrides, for both runs")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    root = Path(tempfile.mkdtemp(prefix="turnrl-bench-dist-"))
    runs: dict[int, list[dict[str, Any]]] = {1: [], args.ranks: []}
    for i in range(args.repeats):
        order = (1, args.ranks) if i % 2 == 0 else (args.ranks, 1)  # ABBA: drifting load hits both
        for ranks in order:
            runs[ranks].append(run_one(args, ranks, root / f"ranks{ranks}-{i}"))
    report(args, runs[1], runs[args.ranks])
    if args.keep:
        print(f"\nrun directories: {root}")
    else:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
