"""Cold start for the search agent (task v2): does SFT on scripted demonstrations help RL, and does RL
add to SFT on two-hop questions the demonstrations never show? Four conditions, several seeds.

    python benchmarks/cold_start.py                                  # embedded SmolLM2-135M, 3 seeds
    python benchmarks/cold_start.py --seeds 1 --steps 15 --demos 600 --out runs/cold_start
    python benchmarks/cold_start.py --model tiny-random --tiny       # smoke run (~2-3 min, scores are 0)

Every stage is the real CLI in a child process, one after the other, on the shipped recipes
(`src/turnrl/recipes/sft/search_sft.yaml`, `src/turnrl/recipes/search_agent_rl.yaml`: the settings of
docs/results/search-agent.md); the flags below change a recipe's setting only
when they are given, as `key=value` overrides on top of it, and so does --rl-set:

    untrained    turnrl eval search_agent_rl model.path=MODEL                (once: greedy, seed-free)
    SFT          turnrl data search_sft, turnrl sft search_sft on its demonstrations, turnrl eval of <sft>/model
    RL           turnrl train search_agent_rl model.path=MODEL               (its final validation)
    SFT + RL     turnrl train search_agent_rl model.path=<sft>/model        (the same RL config)

Validation is the task's held-out questions (a world of entities training never names), greedy,
reported by sort: one-hop (`turnrl/search/1hop`), two-hop through a bridge entity
(`turnrl/search/2hop`; the demonstrations never show these templates) and comparisons
(`turnrl/search/compare`). From the validation samples' response texts (`turnrl eval --out`'s
`samples.jsonl`, a run's `val_samples/step_N.jsonl`) come the searches per episode and, for two-hop
questions, the fraction of episodes whose second query names the bridge entity (the row's
`extra_info.bridge`): the behaviour a two-hop question needs and one search cannot fake.

Counterfactual: each trained model is evaluated again on a corpus with the same entities and
re-sampled facts (`turnrl data task search --arg facts_seed=F`, its own index by `turnrl retriever
index`, rows with the new answers): a model that searches and reads keeps its score, one that
memorised training facts does not (validation entities are never trained on anyway, so this mostly
tests the one-hop and comparison reading).

Each condition runs for `--seeds` seeds (trainer seed, demonstration order and wording); the table
gives the mean and the spread (min-max) over seeds. Everything is written to `<out>/cold_start.json`.

CPU sizing (the recipes'): RL 6 prompts x 4 samples, 8 steps, at most 3 tool turns, no KL term (no
reference forward); SFT 192 demonstrations, one epoch, 8 per step, at lr 1e-4, with one search per
one-hop question (`--retry-fraction 0`); 3 passages per search (namesakes make the right document
not always first); a 512-token response budget. With SmolLM2's tokenizer a prompt is
271-286 tokens (the worked example is ~120 of them), a one-hop demonstration 175-284 response tokens
(median 227) and a two-hop one 361-521 (median 433). The counterfactual pass takes the first
`--cf-prompts` validation questions. On a 2-core CPU a training token costs ~10 ms forward +
backward: SFT ~110k tokens (~20 min), RL ~17k tokens a step (~30 min for 8 steps), so SFT then RL
aims at an hour per seed; this is an estimate from that cost, not yet a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _cli import Stages, cli, read_jsonl, recipe_overrides, recipe_value, report

from turnrl.tasks.search import SEARCH
from turnrl.tasks.search.demos import DEFAULT_OPENER, OPENERS

TINY = {  # a smoke run: every stage and file, in a few minutes
    "seeds": 1,
    "steps": 1,
    "batch": 2,
    "n": 2,
    "response_length": 32,
    "demos": 8,
    "sft_epochs": 1,
    "sft_batch": 8,
    "max_turns": 1,
    "val_prompts": 8,
    "probe_prompts": 4,
    "cf_prompts": 4,
}
SFT_RECIPE = "search_sft"  # `turnrl sft search_sft`
RL_RECIPE = "search_agent_rl"  # `turnrl train search_agent_rl`; the evaluations read its episode settings
RL_LEVERS = {
    "steps": "trainer.total_training_steps",
    "batch": "data.train_batch_size",
    "n": "rollout.n",
    "rl_lr": "actor.optim.lr",
    "response_length": "data.max_response_length",
    "max_turns": "rollout.multi_turn.max_turns",
    "topk": "rollout.multi_turn.search.topk",
    "val_batch": "data.val_batch_size",
}
"""Each flag that changes the RL recipe, and the setting it changes (unset: the recipe's value)."""
EPISODE = (
    "data.max_response_length",
    "data.val_batch_size",
    "rollout.generation_batch_size",
    "rollout.multi_turn",
)
"""The RL recipe's settings an evaluation reads, as its validation does: how an episode runs."""
SFT_LEVERS = {
    "model": "model.path",
    "sft_epochs": "trainer.total_epochs",
    "sft_batch": "trainer.train_batch_size",
    "sft_lr": "optim.lr",
}
"""Each flag that changes the SFT recipe, and the setting it changes (unset: the recipe's value)."""
SORTS = ("1hop", "2hop", "compare", "2hop_demo")
TWO_HOP = ("2hop", "2hop_demo")  # sorts with a bridge entity
QUERY = SEARCH  # the search task's own pattern for a query


# -- what a condition scores, from its validation samples ------------------------------------------


def sort_of(row: dict[str, Any]) -> str:
    return row["data_source"].rsplit("/", 1)[-1]


def episode_stats(samples: list[dict[str, Any]], rows: dict[int, dict[str, Any]]) -> dict[str, float]:
    """Accuracy (exact match: score 1) and format rate (score > 0: a well-formed answer) by sort and
    overall; searches per episode; for two-hop rows the share of episodes whose second query names
    the bridge entity (of all two-hop episodes, and of those that searched twice)."""
    out: dict[str, float] = {}
    by_sort: dict[str, list[dict[str, Any]]] = {s: [] for s in SORTS}
    for s in samples:
        by_sort[sort_of(rows[int(s["index"])])].append(s)
    for sort, group in [*by_sort.items(), ("all", samples)]:
        if group:
            out[f"acc/{sort}"] = statistics.fmean(float(s["score"]) >= 1.0 for s in group)
            out[f"format/{sort}"] = statistics.fmean(float(s["score"]) > 0.0 for s in group)
            out[f"searches/{sort}"] = statistics.fmean(len(QUERY.findall(s["response"])) for s in group)
    for sort in TWO_HOP:
        named = twice = 0
        for s in by_sort[sort]:
            queries = QUERY.findall(s["response"])
            bridge = rows[int(s["index"])]["extra_info"]["bridge"]
            twice += len(queries) >= 2
            named += len(queries) >= 2 and bridge.lower() in queries[1].lower()
        if by_sort[sort]:
            out[f"bridge_named/{sort}"] = named / len(by_sort[sort])
            out[f"bridge_named/{sort}_searched_twice"] = named / twice if twice else 0.0
    return out


# -- the stages -------------------------------------------------------------------------------------


def rl_levers(a: argparse.Namespace) -> list[str]:
    """The RL recipe's settings this run's flags change, as overrides (none with the defaults): the
    levers, and the sizes that follow from them (a mini-batch of half the prompts; one engine call
    per validation batch or RL rollout, since the engine cuts its calls to this size)."""
    wanted = {key: getattr(a, flag) for flag, key in RL_LEVERS.items()}
    wanted["actor.ppo_mini_batch_size"] = max(1, a.batch // 2)
    wanted["rollout.generation_batch_size"] = max(a.val_batch, a.batch * a.n)
    return recipe_overrides(RL_RECIPE, wanted)


def run_settings(a: argparse.Namespace, seed: int, index: Path | None = None) -> list[str]:
    """What every stage's command adds that is not a setting of the method: its seed, its threads,
    and for the counterfactual passes the other corpus's index."""
    return [
        *([f"rollout.multi_turn.search.index={index}"] if index else []),
        f"trainer.seed={seed}",
        f"trainer.num_threads={a.threads}",
    ]


STAGES: Stages  # set in main()


def eval_command(a: argparse.Namespace, model: str, out: Path, val_file: Path, seed: int, index: Path | None = None) -> list[str]:  # fmt: skip
    """`turnrl eval` with the RL recipe's episode settings (those of its validation), greedy only."""
    episode = [o for o in rl_levers(a) if o.startswith(EPISODE)]
    return [
        "eval", RL_RECIPE, f"model.path={model}", f"data.val_files=[{val_file}]", *episode,
        *run_settings(a, seed, index), "eval.n=0", "--out", str(out),
    ]  # fmt: skip


def evaluate(a: argparse.Namespace, model: str, out: Path, val_file: Path, seed: int, index: Path | None = None) -> tuple[list[dict[str, Any]], float]:  # fmt: skip
    """`turnrl eval`, greedy only: (its samples, wall seconds of the process)."""
    args = eval_command(a, model, out, val_file, seed, index)
    wall = STAGES.run(out.name, out / "samples.jsonl", args, out.with_suffix(".log"))
    samples = [s for s in read_jsonl(out / "samples.jsonl") if s["pass"] == "greedy"]
    return samples, wall


def rl_command(a: argparse.Namespace, model: str, run_dir: Path, val_file: Path, seed: int) -> list[str]:
    """`turnrl train search_agent_rl` from `model`, validated on `val_file`, with the flags' and
    --rl-set's overrides on top of the recipe."""
    return [
        "train", RL_RECIPE, f"model.path={model}", f"data.val_files=[{val_file}]", *rl_levers(a),
        *run_settings(a, seed), "trainer.logger=[jsonl]", f"trainer.default_local_dir={run_dir}",
        *a.rl_set,  # a lever: algorithm.adv_estimator=gigpo, algorithm.filter_groups.refill=same, ...
    ]  # fmt: skip


def rl(a: argparse.Namespace, model: str, run_dir: Path, val_file: Path, seed: int) -> tuple[list[dict[str, Any]], float, float]:  # fmt: skip
    """One RL run: (its final validation's samples, seconds of that validation, wall seconds)."""
    args = rl_command(a, model, run_dir, val_file, seed)
    wall = STAGES.run(run_dir.name, run_dir / "metrics.jsonl", args, run_dir.with_suffix(".log"))
    metrics = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "val/test_score/mean" in r][-1]
    last = max((run_dir / "val_samples").glob("step_*.jsonl"), key=lambda p: int(p.stem.split("_")[1]))
    return read_jsonl(last), float(metrics.get("timing_s/validate", 0.0)), wall


def demos_command(a: argparse.Namespace, demos: Path, seed: int) -> list[str]:
    """`turnrl data search_sft`: the recipes' header command with this run's demonstration flags."""
    return [
        "data", "search_sft", "--out", str(demos), "--n", str(a.demos), "--seed", str(seed),
        "--topk", str(a.topk), "--retry-fraction", str(a.retry_fraction),
        "--two-hop-share", str(a.two_hop_share), "--opener", a.opener,
    ]  # fmt: skip


def sft_command(a: argparse.Namespace, train_file: Path, sft_dir: Path, seed: int) -> list[str]:
    """`turnrl sft search_sft` on `train_file`, with the flags' overrides on top of the recipe."""
    wanted = {key: getattr(a, flag) for flag, key in SFT_LEVERS.items()}
    return [
        "sft", SFT_RECIPE, f"data.train_files=[{train_file}]",
        *recipe_overrides(SFT_RECIPE, wanted, command="sft"), *run_settings(a, seed),
        "trainer.logger=[jsonl]", f"trainer.default_local_dir={sft_dir}",
    ]  # fmt: skip


def sft(a: argparse.Namespace, out: Path, seed: int) -> tuple[Path, float]:
    """Demonstrations and `turnrl sft` on them: (the run directory, wall seconds)."""
    demos = out / f"demos_s{seed}"
    args = demos_command(a, demos, seed)
    data_s = STAGES.run(demos.name, demos / "train.jsonl", args, out / f"demos_s{seed}.log")
    sft_dir = out / f"sft_s{seed}"
    args = sft_command(a, demos / "train.jsonl", sft_dir, seed)
    sft_s = STAGES.run(sft_dir.name, sft_dir / "model", args, out / f"sft_s{seed}.log")
    return sft_dir, data_s + sft_s


def task_files(out: Path, name: str, k: int, probe: int, facts_seed: int | None = None) -> tuple[Path, dict[int, dict[str, Any]]]:  # fmt: skip
    """The task's validation rows (`turnrl data task search`, with `facts_seed` the counterfactual's,
    and its corpus), the first `k` (0: all), then the first `probe` rows of the demonstrated two-hop
    templates about validation entities (`--arg val=demonstrated`), as one file; and every row of
    both by index."""
    extra = ["--arg", f"facts_seed={facts_seed}"] if facts_seed is not None else []
    lines: list[str] = []
    rows: dict[int, dict[str, Any]] = {}
    for part, n, args in ((name, k, extra), (f"{name}_probe", probe, [*extra, "--arg", "val=demonstrated"])):
        if part != name and not n:
            continue
        task = out / part
        cli(["data", "task", "search", "--out", str(task), "--overwrite", *args], out / f"{part}.log")
        these = (task / "val.jsonl").read_text().splitlines(keepends=True)
        lines += these[:n] if n else these
        rows.update({r["extra_info"]["index"]: r for r in map(json.loads, these)})
    path = out / f"{name}_val.jsonl"
    path.write_text("".join(lines))
    return path, rows


# -- the table --------------------------------------------------------------------------------------


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def summarise(per_seed: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Condition -> metric -> mean, min, max over the seeds that ran it."""
    return {
        cond: {k: spread([r[k] for r in runs if k in r]) for k in sorted({k for r in runs for k in r})}
        for cond, runs in per_seed.items()
    }


def cell(stats: dict[str, dict[str, float]], key: str) -> str:
    if key not in stats:
        return "-"
    s = stats[key]
    return f"{s['mean']:.3f}" + (f" ({s['min']:.2f}-{s['max']:.2f})" if s["max"] > s["min"] else "")


COLUMNS = (
    ("1hop acc", "acc/1hop"), ("2hop acc", "acc/2hop"), ("2hop demo acc", "acc/2hop_demo"),
    ("cmp acc", "acc/compare"), ("format", "format/all"), ("searches", "searches/all"),
    ("2hop bridge", "bridge_named/2hop"), ("demo bridge", "bridge_named/2hop_demo"),
    ("cf 2hop", "cf/acc/2hop"), ("cf all", "cf/acc/all"), ("original, same qs", "cf_original/acc/all"),
    ("train s", "train_s"),
)  # fmt: skip


def print_table(summary: dict[str, dict[str, dict[str, float]]]) -> None:
    width = 20
    print(f"{'condition':<10}" + "".join(f"{name:>{width}}" for name, _ in COLUMNS))
    for cond, stats in summary.items():
        print(f"{cond:<10}" + "".join(f"{cell(stats, key):>{width}}" for _, key in COLUMNS))
    print(
        "acc: exact match, greedy, on the held-out one-hop, two-hop (bridge; templates the demonstrations "
        "never show) and comparison questions, and '2hop demo': two-hop templates the demonstrations show, "
        "about validation entities; format: well-formed answers; searches: per episode; bridge: two-hop "
        "episodes whose second query names the bridge entity; cf: the same on the counterfactual corpus (its "
        "first --cf-prompts questions), beside the original corpus on those same questions; "
        "mean (min-max) over seeds"
    )


RECIPES = "(default: the recipe's)"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help=f"model.path of the untrained model {RECIPES}")
    ap.add_argument("--out", default="", help="output directory (default runs/cold_start-<time>)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per condition (1, 2, ...)")
    ap.add_argument(
        "--seed-from",
        type=int,
        default=1,
        help="first seed to run (seeds N..--seeds): two processes can run seeds apart, and a --resume "
        "over a directory holding both stage sets makes the table",
    )
    ap.add_argument("--steps", type=int, help=f"RL steps {RECIPES}")
    ap.add_argument("--batch", type=int, help=f"RL prompts per step {RECIPES}")
    ap.add_argument("--n", type=int, help=f"RL samples per prompt {RECIPES}")
    ap.add_argument("--rl-lr", type=float, help=f"RL actor learning rate {RECIPES}")
    ap.add_argument("--response-length", type=int, help=f"tokens of a whole episode's response {RECIPES}")
    ap.add_argument("--max-turns", type=int, help=f"tool turns per episode {RECIPES}")
    ap.add_argument("--topk", type=int, help=f"passages per search, demonstrations and RL alike {RECIPES}")
    ap.add_argument("--val-batch", type=int, help=f"validation prompts per generation call {RECIPES}")
    ap.add_argument(
        "--val-prompts", type=int, default=0, help="validate on the first K questions (0 = all 128)"
    )
    ap.add_argument(
        "--cf-prompts", type=int, default=64, help="counterfactual: the first K questions (0 = all)"
    )
    ap.add_argument(
        "--no-cf",
        action="store_true",
        help="skip the counterfactual passes (64 questions: 3-4 min a model on one thread of a 2-core Xeon); a later --resume without it adds them",
    )
    ap.add_argument("--facts-seed", type=int, default=1, help="the counterfactual corpus's facts seed")
    ap.add_argument("--demos", type=int, default=192, help="SFT demonstrations")
    ap.add_argument("--two-hop-share", type=float, default=0.5, help="share of two-hop demonstrations")
    ap.add_argument(
        "--opener", choices=OPENERS, default=DEFAULT_OPENER,
        help="search_sft --opener: 'joined'/'subject' first name what the question is about (runs before: plain)",
    )  # fmt: skip
    ap.add_argument(
        "--probe-prompts", type=int, default=32,
        help="validation rows of the demonstrated two-hop templates about validation entities (0: none)",
    )  # fmt: skip
    ap.add_argument("--no-rl", action="store_true", help="untrained and SFT only: tune the cold start")
    ap.add_argument("--retry-fraction", type=float, default=0.0, help="one-hop demonstrations with a missed first search")  # fmt: skip
    ap.add_argument("--sft-epochs", type=int, help=f"SFT epochs {RECIPES}")
    ap.add_argument("--sft-lr", type=float, help=f"SFT learning rate {RECIPES}")
    ap.add_argument("--sft-batch", type=int, help=f"SFT demonstrations per optimizer step {RECIPES}")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per process (0 = torch's default)")
    ap.add_argument(
        "--no-rl-alone", action="store_true",
        help="skip RL from the untrained model (it never searches, so no sample is rewarded: docs/results/search-agent.md)",
    )  # fmt: skip
    ap.add_argument("--no-report", action="store_true", help="skip `turnrl report` of each run")
    ap.add_argument(
        "--no-untrained", action="store_true", help="skip the untrained model's evaluation (seed-free)"
    )
    ap.add_argument(
        "--rl-set", nargs="*", default=[], metavar="KEY=VALUE",
        help="overrides added to every RL run: a lever to measure (its stages get their own --out)",
    )  # fmt: skip
    ap.add_argument(
        "--resume", action="store_true",
        help="--out may hold an earlier run: stages it finished (stages.json) are reused, e.g. to add seeds",
    )  # fmt: skip
    ap.add_argument(
        "--tiny",
        action="store_true",
        help="smoke-run sizes: " + ", ".join(f"{k}={v}" for k, v in TINY.items()),
    )
    return ap


def settings(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed flags, --tiny's sizes applied and every lever not given read from its recipe."""
    ap = parser()
    a = ap.parse_args(argv)
    if not 1 <= a.seed_from <= a.seeds:
        ap.error(f"--seed-from {a.seed_from} is outside the seeds 1..{a.seeds} (--seeds)")
    if a.tiny:
        for key, value in TINY.items():
            setattr(a, key, value)
    for recipe, levers, command in ((RL_RECIPE, RL_LEVERS, "train"), (SFT_RECIPE, SFT_LEVERS, "sft")):
        for flag, key in levers.items():
            if getattr(a, flag) is None:
                setattr(a, flag, recipe_value(recipe, key, command))
    return a


def main() -> None:
    a = settings()
    out = Path(a.out or f"runs/cold_start-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    if out.exists() and any(out.iterdir()) and not a.resume:
        sys.exit(f"--out {out} is not empty (--resume reuses the stages it finished)")
    out.mkdir(parents=True, exist_ok=True)
    global STAGES
    STAGES = Stages(out, a.resume)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; model {a.model}; out {out}"
    )
    val, rows = task_files(out, "task", a.val_prompts, a.probe_prompts)
    cf_val, cf_rows = task_files(out, "cf", a.cf_prompts, 0, a.facts_seed)
    cf_index = out / "cf_index"
    cli(["retriever", "index", "--corpus", str(out / "cf" / "corpus.jsonl"), "--out", str(cf_index),
         "--no-progress"], out / "cf_index.log")  # fmt: skip

    per_seed: dict[str, list[dict[str, float]]] = {c: [] for c in ("untrained", "SFT", "RL", "SFT + RL")}
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in per_seed}

    def record(cond: str, seed: int, samples: list[dict[str, Any]], cf: list[dict[str, Any]] | None,
               train_s: float, eval_s: float, run_dir: Path | None) -> None:  # fmt: skip
        stats = episode_stats(samples, rows)
        if cf is not None:
            stats.update({f"cf/{k}": v for k, v in episode_stats(cf, cf_rows).items()})
            # the same model on the same questions of the original corpus: the only fair comparison
            # (the counterfactual pass asks the first --cf-prompts questions, with the same indices)
            asked = {int(s["index"]) for s in cf}
            same = [s for s in samples if int(s["index"]) in asked]
            stats.update({f"cf_original/{k}": v for k, v in episode_stats(same, rows).items()})
        stats.update(train_s=train_s, eval_s=eval_s)
        per_seed[cond].append(stats)
        link = report(run_dir) if run_dir and not a.no_report else None
        runs[cond].append(
            {"seed": seed, "run_dir": str(run_dir) if run_dir else None, "report": link, **stats}
        )
        shown = ", ".join(
            f"{k} {stats[k]:.3f}"
            for k in ("acc/1hop", "acc/2hop", "acc/2hop_demo", "acc/compare")
            if k in stats
        )
        print(f"  {cond} (seed {seed}): {shown}; train {train_s:.0f} s, eval {eval_s:.0f} s", flush=True)

    def counterfactual(model: str, name: str, seed: int) -> list[dict[str, Any]] | None:
        """The model's samples on the counterfactual corpus (None with --no-cf)."""
        return None if a.no_cf else evaluate(a, model, out / name, cf_val, seed, cf_index)[0]

    if not a.no_untrained:
        samples, wall = evaluate(
            a, a.model, out / "eval_untrained", val, 1
        )  # greedy: the same for every seed
        record("untrained", 0, samples, None, 0.0, wall, None)
    for seed in range(a.seed_from, a.seeds + 1):
        sft_dir, sft_s = sft(a, out, seed)
        samples, eval_s = evaluate(a, str(sft_dir / "model"), out / f"eval_sft_s{seed}", val, seed)
        cf = counterfactual(str(sft_dir / "model"), f"cf_sft_s{seed}", seed)
        record("SFT", seed, samples, cf, sft_s, eval_s, sft_dir)
        conditions = [("RL", a.model, 0.0), ("SFT + RL", str(sft_dir / "model"), sft_s)]
        for cond, start, extra in conditions[2 if a.no_rl else a.no_rl_alone :]:
            run_dir = out / f"{'sft_rl' if extra else 'rl'}_s{seed}"
            samples, val_s, wall = rl(a, start, run_dir, val, seed)
            cf = counterfactual(str(run_dir), f"cf_{run_dir.name}", seed)
            record(cond, seed, samples, cf, extra + wall - val_s, val_s, run_dir)

    summary = summarise(per_seed)
    print(
        f"\nsearch agent cold start: {a.model}; {a.seeds} seeds; RL {a.steps} steps x {a.batch} prompts x {a.n} "
        f"samples, response {a.response_length} tokens, top {a.topk}; SFT {a.demos} demonstrations x "
        f"{a.sft_epochs} epochs, lr {a.sft_lr}"
    )
    print_table(summary)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    path = out / "cold_start.json"
    path.write_text(
        json.dumps({"settings": vars(a), "machine": machine, "summary": summary, "runs": runs}, indent=1)
        + "\n"
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
