"""Everything a run needs, built and checked before anything is written to disk."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from turnrl.config import Config, ConfigError
from turnrl.config.rollout_schema import RolloutConfig
from turnrl.config.schema import ModelConfig
from turnrl.data.dataset import Example, check_data_file, load_examples
from turnrl.models.loader import ModelError, cache_root, load_tokenizer, tokenizer_difference
from turnrl.models.precision import auto_bf16, fallback_note
from turnrl.rewards.judge import Judge
from turnrl.rewards.registry import registered, resolve
from turnrl.rewards.scorer import RuleReward
from turnrl.rollout.base import Rollout, RolloutEngine, Services
from turnrl.rollout.single_turn import SingleTurnRollout
from turnrl.runtime import ensure_writable_dir, seed_everything
from turnrl.tasks import gym, scorers, write_task
from turnrl.tasks.args import args_key
from turnrl.tasks.search.corpus import builtin_index
from turnrl.trainer import checkpoint
from turnrl.trainer.run_dirs import resolve_model_path, resolve_model_paths
from turnrl.workers.actor import Actor
from turnrl.workers.critic import Critic
from turnrl.workers.group import Group, LocalGroup, WorkerGroup
from turnrl.workers.handles import (
    ActorHandle,
    CriticHandle,
    ReferenceHandle,
    RewardModelHandle,
    RoleHandle,
    TeacherHandle,
)
from turnrl.workers.reference import Reference
from turnrl.workers.reward_model import RewardModel
from turnrl.workers.teacher import Teacher

log = logging.getLogger(__name__)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device=cuda but no CUDA device is available; use trainer.device=cpu")
    return torch.device(name)


def resolve_data_files(cfg: Config) -> None:
    """Fill `data.train_files` / `val_files` with the built-in task when none are given."""
    if cfg.data.train_files and cfg.data.val_files:
        return
    name = task_dir_name(cfg.data.task, cfg.trainer.seed, cfg.data.task_args)
    out = cache_root(cfg.model.cache_dir) / "tasks" / name
    files = write_task(cfg.data.task, out, cfg.trainer.seed, args=cfg.data.task_args)
    cfg.data.train_files = cfg.data.train_files or [str(files.train)]
    cfg.data.val_files = cfg.data.val_files or [str(files.val)]


def task_dir_name(task: str, seed: int, args: dict[str, Any]) -> str:
    """`addition-seed0`, `reasoning_gym_chain_sum-seed0-args3f9c0a1b2d`: the task's cached rows
    are keyed by everything they are made from, so runs with other arguments never share them."""
    key = args_key(args)
    name = re.sub(r"[^\w.-]+", "_", task)
    if "/" in task:  # harbor:<folder>: its last part names it, a hash of the path keeps folders apart
        name = re.sub(r"[^\w.-]+", "_", task.split(":", 1)[0] + "_" + Path(task.split(":", 1)[1]).name)
        name += "-" + hashlib.sha256(task.encode()).hexdigest()[:8]
    return f"{name}-seed{seed}" + (f"-args{key}" if key else "")


@dataclass
class Data:
    tokenizer: Any
    train_examples: list[Example]
    val_examples: list[Example]


def check_plugins(cfg: Config) -> None:
    """Plugin names against their tables, here where the run is assembled (the config knows no
    plugin), before any model loads: `data.task` against `TASKS` (when a split is to be written
    from it; a reasoning-gym dataset's name is checked where its rows are made, which needs the
    package), the built-in tools against `TOOLS`."""
    from turnrl.tasks import TASKS, gym
    from turnrl.tasks.harbor.folder import is_folder_task

    d = cfg.data
    written = not (d.train_files and d.val_files)
    known = d.task in TASKS or (gym.is_gym(d.task) and gym.dataset_of(d.task)) or is_folder_task(d.task)
    if written and not known:
        raise ConfigError(
            f"unknown 'data.task' '{d.task}'; valid: {', '.join(TASKS)}, "
            f"{gym.PREFIX}<dataset> (e.g. {gym.PREFIX}chain_sum), or harbor:<folder of task directories>"
        )
    if cfg.rollout.multi_turn.enable:
        from turnrl.agent.tools.toolset import check_tool_names

        check_tool_names(cfg.rollout.multi_turn.tools)


def build_data(cfg: Config) -> Data:
    """Seeds, the tokenizer and both data splits, checked before any model loads."""
    if cfg.trainer.num_threads:
        torch.set_num_threads(cfg.trainer.num_threads)
    seed_everything(cfg.trainer.seed, cfg.trainer.deterministic)
    check_plugins(cfg)
    resolve_data_files(cfg)
    for f in [*cfg.data.train_files, *cfg.data.val_files]:
        check_data_file(f)  # fail before the minute-long model load
    # a training run as `model.path` is exported (once) here, before any model loads
    tokenizer = load_tokenizer(resolve_model_path(cfg.model.path, cfg.model.cache_dir), cfg.model.cache_dir)
    check_teacher_tokenizer(cfg, tokenizer)
    train = load_examples(cfg.data.train_files, tokenizer, cfg.data.max_prompt_length, cfg.data.prompt_key)
    val = load_examples(cfg.data.val_files, tokenizer, cfg.data.max_prompt_length, cfg.data.prompt_key)
    check_scorers(cfg, train + val)
    return Data(tokenizer, train, val)


def check_teacher_tokenizer(cfg: Config, tokenizer: Any) -> None:
    """On-policy distillation's teacher scores the policy's token ids, so it must read them as the same
    text: the same vocabulary, EOS and pad ids. Checked on the tokenizers alone, before any model loads
    (a training run as `teacher.model.path` is exported here, once, like the policy's)."""
    path = cfg.teacher.model.path
    if not path:
        return
    teacher = load_tokenizer(resolve_model_path(path, cfg.model.cache_dir), cfg.model.cache_dir)
    why = tokenizer_difference(tokenizer, teacher, "the policy", "the teacher")
    if why:
        raise ModelError(
            f"teacher.model.path '{path}' does not share the tokenizer of model.path '{cfg.model.path}': {why}; "
            "the teacher scores the policy's token ids, so both models need one tokenizer"
        )


def check_scorers(cfg: Config, examples: list[Example]) -> None:
    """A data source without a rule scorer fails now, before the models load (a custom function
    scores every source; with a reward model or a judge a source may have no rule, and an agent
    function may return its own reward)."""
    agent = cfg.rollout.agent.entrypoint or cfg.rollout.agent.env or cfg.rollout.agent.command
    rule_optional = cfg.reward_model.enable or cfg.reward.judge.enable or agent
    if not cfg.reward.custom_function.path and not rule_optional:
        table = registered(extra=scorers())
        for source in sorted({e.data_source for e in examples}):
            resolve(source, None, table)
    if not cfg.reward.custom_function.path:
        # reasoning-gym rows (also ones written earlier by `turnrl data task`) are scored by the
        # package: without it, or for a dataset it lacks, fail now rather than at the first reward
        gym_sources = {e.data_source for e in examples if e.data_source.startswith(gym.SOURCE_PREFIX)}
        for source in sorted(gym_sources):
            gym.check_dataset(source.removeprefix(gym.SOURCE_PREFIX))


def build_rollout(
    cfg: Config, engine: RolloutEngine, tokenizer: Any, pad_id: int, streaming: bool = False
) -> Rollout:
    """Stage 3 over `engine`: single-turn, or agent episodes with the configured tools (this starts
    and health-checks their servers; `close()` stops them), or an agent function's episodes through
    the gateway (`rollout.agent.entrypoint` or `.env`). `streaming`: see `AgentRollout`."""
    if cfg.rollout.agent.entrypoint or cfg.rollout.agent.env or cfg.rollout.agent.command:
        from turnrl.agent.functions.rollout import FunctionAgentRollout

        return FunctionAgentRollout(engine, tokenizer, cfg, pad_id)
    if not cfg.rollout.multi_turn.enable:
        return SingleTurnRollout(engine, pad_id)
    from turnrl.agent.rollout import AgentRollout

    # without a search URL or index, the search tool serves the search task's corpus
    return AgentRollout(engine, tokenizer, cfg, pad_id, streaming=streaming, default_index=builtin_index)


def build_reward(cfg: Config, tokenizer: Any, services: Services) -> RuleReward:
    """The rule reward of `reward.*`, plus the judge of `reward.judge` (started now when it is a
    child; `close()` stops it); code rewards reuse the sandbox of `services` (the rollout's)."""
    sandbox = services.sandbox
    jc = cfg.reward.judge
    judge = Judge.from_config(jc, cfg.trainer.num_threads, cfg.model.cache_dir) if jc.enable else None
    try:
        return RuleReward(
            tokenizer,
            cfg.reward.custom_function.path,
            cfg.reward.custom_function.name,
            missing_ok=cfg.reward_model.enable or jc.enable,
            sandbox_url=sandbox.url if sandbox else None,
            sandbox_api_key=(sandbox.api_key or None) if sandbox else None,
            on_error=cfg.reward.on_error,
            timeout_s=cfg.reward.timeout_s,
            scorers=scorers(),  # the built-in tasks' data sources
            judge=judge,
            agent_on_error=cfg.rollout.agent.on_error
            if cfg.rollout.agent.entrypoint or cfg.rollout.agent.env or cfg.rollout.agent.command
            else None,
        )
    except BaseException:
        if judge is not None:  # a custom function that does not load: no judge child left behind
            judge.close()
        raise


@dataclass
class Roles:
    """One typed handle per role (`workers/handles.py`); `ref` runs on the actor's group with LoRA
    (the actor with its adapters off)."""

    actor: ActorHandle
    ref: ReferenceHandle | None
    critic: CriticHandle | None
    reward_model: RewardModelHandle | None
    pool: Any = None
    """The Ray pool the groups run in (None in one process)."""
    teacher: TeacherHandle | None = None
    """On-policy distillation's teacher (`teacher.model.path`), in a group of its own."""

    def owned(self) -> dict[str, WorkerGroup]:
        """Roles that keep state of their own, by checkpoint sub-directory."""
        return {k: h for k, h in self._own().items()}

    def _own(self) -> dict[str, RoleHandle]:
        out: dict[str, RoleHandle | None] = {
            "actor": self.actor,
            "reference": self.ref,
            "teacher": self.teacher,
            "critic": self.critic,
            "reward_model": self.reward_model,
        }
        return {
            k: h
            for k, h in out.items()
            if h is not None and (k == "actor" or h.group is not self.actor.group)
        }

    def dispatch_metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for handle in self._own().values():
            out.update(handle.dispatch_metrics())
        return out

    def close(self) -> None:
        for group in self.owned().values():
            group.close()
        if self.pool is not None:
            self.pool.close()


def default_precision(
    model: ModelConfig, rollout: RolloutConfig, world: int, device: torch.device
) -> tuple[ModelConfig, RolloutConfig]:
    """What `model.dtype=auto` and an empty `rollout.dtype` mean where the device multiplies
    bfloat16 natively (`models.precision.auto_bf16`): float32 master weights, bfloat16 compute. A
    step at a learning rate of 1e-6 moves most bfloat16 weights by less than half their last bit, so
    with bfloat16 parameters most of the update rounds away.

    - N GPU ranks: FSDP's mixed precision casts the float32 shards for each pass.
    - One GPU, or a CPU with AVX512-BF16/AMX, full fine-tuning: autocast (`model.compute_dtype=auto`),
      and the `hf` engine samples from a bfloat16 copy refreshed at every weight sync (`rollout.dtype`,
      when left empty). Measured on an H200 (docs/results/speed-gpu.md): 4.46x TRL's step against 4.21x with bfloat16
      parameters, in one invocation; on a 2-core CPU, docs/rollout.md.
    - LoRA keeps its base as it is: the frozen base never updates, and peft keeps adapters in float32.
      So does `rollout.engine=vllm`, which loads the policy in `model.dtype` (unchanged here).
    - CPU ranks (gloo, world > 1) stay float32, exact.
    Elsewhere, or with `$TURNRL_EXACT` set, `auto` is float32 throughout (exact)."""
    if model.dtype != "auto" or not auto_bf16(device):
        return model, rollout
    on_gpu = device.type == "cuda"
    if world > 1:
        return (dataclasses.replace(model, dtype="float32"), rollout) if on_gpu else (model, rollout)
    if model.lora_rank > 0 or rollout.engine == "vllm":
        return model, rollout
    if not rollout.dtype:  # hf: a bfloat16 copy; server: the child loads bfloat16, synced from float32
        rollout = dataclasses.replace(rollout, dtype="bfloat16")
    return dataclasses.replace(model, dtype="float32"), rollout


def build_roles(cfg: Config, tokenizer: Any, run_dir: Path | None = None) -> Roles:
    """Each role builds its own model from its own config section (`run_dir`: the actor's rollout
    engine keeps its files there). The order is the order the
    global RNG is drawn in (LoRA init, then the value head): keep it, or seeded runs change."""
    cfg = resolve_model_paths(cfg)  # training runs named as models: their exported policies
    t = cfg.trainer
    lora = cfg.model.lora_rank > 0
    world = t.nnodes * t.n_gpus_per_node
    model_cfg, rollout_cfg = default_precision(cfg.model, cfg.rollout, world, pick_device(t.device))
    note = fallback_note(pick_device(t.device)) if cfg.model.compute_dtype == "auto" else ""
    if note:
        log.warning(note)
    factories: dict[str, Any] = {
        "actor": partial(Actor, cfg.actor, model_cfg, rollout_cfg, cfg.ref, run_dir=run_dir)
    }
    if (cfg.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward) and not lora:
        factories["reference"] = partial(Reference, cfg.ref, model_cfg, cfg.rollout)
    if cfg.teacher.model.path:  # another model in the policy's dtype; it never trains nor backpropagates
        teacher_model = dataclasses.replace(
            model_cfg, path=cfg.teacher.model.path, lora_rank=0, gradient_checkpointing=False
        )
        factories["teacher"] = partial(Teacher, cfg.teacher, teacher_model, cfg.rollout)
    if cfg.critic.enable:
        factories["critic"] = partial(Critic, cfg.critic, model_cfg, cfg.rollout)
    if cfg.reward_model.enable:
        factories["reward_model"] = partial(RewardModel, cfg.reward_model, tokenizer)
    pool = None
    if world == 1:
        device = pick_device(t.device)
        groups: dict[str, Group] = {
            name: LocalGroup([make(device, t.seed)]) for name, make in factories.items()
        }
    else:
        from turnrl.workers.ray_group import RayGroup, RayPool

        pool = RayPool(cfg)
        if model_cfg.fsdp_offload and pool.device != "cuda":
            pool.close()
            raise ConfigError(
                "'model.fsdp_offload' needs GPUs, but the ranks run on the CPU (no CUDA device)"
            )
        pool.reserve(len(factories))
        groups = {}
        try:
            for name, make in factories.items():
                factory = partial(make, pool.device, t.seed)
                groups[name] = RayGroup(pool, name, factory, t.seed, t.balance_batch, t.deterministic)
        except BaseException:
            pool.close()  # ends the ranks of every group it placed, a half-built one's too
            raise
    needs_ref = cfg.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
    ref = ReferenceHandle(groups["actor"] if lora else groups["reference"]) if needs_ref else None
    critic, rm, teacher = groups.get("critic"), groups.get("reward_model"), groups.get("teacher")
    return Roles(
        ActorHandle(groups["actor"]),
        ref,
        CriticHandle(critic) if critic is not None else None,
        RewardModelHandle(rm) if rm is not None else None,
        pool,
        TeacherHandle(teacher) if teacher is not None else None,
    )


def make_run_dir(cfg: Config) -> Path:
    """The run directory's path, checked to be creatable and writable; nothing is created yet."""
    if cfg.trainer.default_local_dir:
        path = Path(cfg.trainer.default_local_dir)
    else:
        path = Path("runs") / f"{cfg.trainer.experiment_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    # found now, not after the models have loaded and the first write fails
    what = "run directory (trainer.default_local_dir)"
    ensure_writable_dir(path, what, ConfigError)
    if problem := checkpoint.layout_problem(path, "jsonl" in cfg.trainer.logger):
        raise ConfigError(f"{what} {path}: {problem}")  # before a resume moves or rewrites anything
    return path
