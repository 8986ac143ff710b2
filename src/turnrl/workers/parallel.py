"""Data parallelism inside a role: FSDP2 sharding, global reductions, equal collective counts.

One process per rank; `torch.distributed` is initialised by the worker group before the role
is built (gloo on CPU, NCCL on GPU). Without a process group every function here is the
single-process identity, so a role's code reads the same on 1 or N ranks.

Sharding follows torchtitan's order: the model is built, then each decoder block and finally
the root are wrapped with `fully_shard`; the optimizer is created on the sharded parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from turnrl.batch import Batch
from turnrl.workers.dispatch import shard_rows
from turnrl.workers.microbatch import restore_order, split_rows


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if distributed() else 1


def all_reduce(values: list[float], op: str = "sum") -> list[float]:
    """Sum (or max) floats over ranks, in float64 so sums of per-rank parts stay exact enough."""
    if not distributed() or not values:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return t.tolist()


def global_count(n: int) -> int:
    """The most micro-batches any rank will run: every rank must run as many forwards as the
    others, because each sharded forward is a collective (an all-gather per block)."""
    return int(all_reduce([float(n)], "max")[0])


def _with_stand_ins(parts: list[Batch], batch: Batch) -> list[tuple[Batch, bool]]:
    """`parts` padded with stand-ins (`real` False, results to be dropped) to the busiest rank's
    count: every rank must join the same number of forward passes (each is a collective)."""
    stand_in = batch.index([0]) if len(batch) else None
    count = global_count(len(parts))
    if count > len(parts) and stand_in is None:
        raise RuntimeError(f"rank {rank()} received no rows but must join {count} forward passes")
    return [(p, True) for p in parts] + [(stand_in, False)] * (count - len(parts))  # type: ignore[list-item]


def local_micro_batches(
    batch: Batch, size: int, max_tokens: int = 0, key: str = ""
) -> list[tuple[Batch, bool]]:
    """This rank's own batch (a data-parallel shard) in micro-batches of `size` rows, or of
    similar-length rows within `max_tokens` (named `key` in errors) when that is > 0, padded
    with stand-ins to the count of the busiest rank."""
    return _with_stand_ins(split_rows(batch, size, max_tokens, key)[0], batch)


def map_micro_batches(
    batch: Batch,
    size: int,
    fn: Callable[[Batch], tuple[torch.Tensor, ...]],
    max_tokens: int = 0,
    key: str = "",
) -> list[torch.Tensor]:
    """`fn` on each of this rank's micro-batches (as `local_micro_batches`); the real results'
    outputs concatenated, each back in the batch's own row order."""
    parts, order = split_rows(batch, size, max_tokens, key)
    outs = []
    for mb, real in _with_stand_ins(parts, batch):
        out = fn(mb)  # a stand-in runs too: the other ranks' collectives wait for it
        if real:
            outs.append(out)
    return [restore_order(torch.cat(col), order) for col in zip(*outs, strict=True)]


def my_micro_batches(mini: Batch, size: int, max_tokens: int = 0, key: str = "") -> list[tuple[Batch, bool]]:
    """This rank's share of a mini-batch that every rank holds whole: the same token-balanced,
    uid-whole partition on every rank (it is deterministic), then `local_micro_batches`.
    With one rank and no token budget: `mini.split(size)`, exactly."""
    if world_size() == 1:
        return [(p, True) for p in split_rows(mini, size, max_tokens, key)[0]]
    mine = mini.index(shard_rows(mini, world_size())[rank()])
    if len(mine):
        return local_micro_batches(mine, size, max_tokens, key)
    return [(mini.index([0]), False)] * global_count(0)


def decoder_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated transformer blocks of a Hugging Face model (LoRA-wrapped or not)."""
    blocks = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 0]
    if not blocks:
        raise ValueError(f"cannot find the decoder blocks of {type(model).__name__} to shard")
    return list(max(blocks, key=len))


def shard(
    model: torch.nn.Module,
    mixed_precision: bool,
    offload: bool = False,
    forward_methods: tuple[str, ...] = (),
) -> torch.nn.Module:
    """FSDP2: shard every decoder block, then the root. bf16 params/compute with fp32 gradient
    reduction when `mixed_precision`; master weights stay in the parameters' own dtype (fp32).
    `forward_methods`: methods other than `forward` that use the root's own weights."""
    if not distributed() or world_size() == 1:
        return model
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        fully_shard,
        register_fsdp_forward_method,
    )

    kwargs: dict[str, Any] = {}
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    for block in decoder_blocks(model):
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    for name in forward_methods:
        register_fsdp_forward_method(model, name)
    return model


def backward(loss: torch.Tensor) -> None:
    """Backward of a rank's part of a loss whose denominator is global (the whole mini-batch):
    FSDP averages gradients over ranks, so scale by the world size to make them add up."""
    (loss * world_size()).backward() if world_size() > 1 else loss.backward()


def sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def full_state_dict(model: torch.nn.Module, trainable_only: bool) -> dict[str, torch.Tensor]:
    """The whole (unsharded) state on rank 0, on the CPU, the same names on 1 or N ranks; every
    rank must call it (it is a gather), the others get {}."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    if not sharded(model):
        state = model.state_dict()
        return {
            k: state[k].detach().cpu().clone().contiguous()
            for k in full_state_dict_names(model, trainable_only)
        }
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank() != 0:
        return {}  # gathered to rank 0 only (with cpu_offload): the others took part in the gather
    return {k: state[k].contiguous() for k in full_state_dict_names(model, trainable_only)}


def full_state_dict_names(model: torch.nn.Module, trainable_only: bool) -> list[str]:
    """The names `full_state_dict` returns (a tied weight once), without gathering anything."""
    if trainable_only:
        return [n for n, p in model.named_parameters() if p.requires_grad]
    return list(model.state_dict())


def full_state_dict_shapes(model: torch.nn.Module, trainable_only: bool) -> dict[str, tuple[int, ...]]:
    """The unsharded shape of each tensor `full_state_dict` returns, without gathering anything (a
    sharded parameter's shape is its global one)."""
    if trainable_only:
        return {n: tuple(p.shape) for n, p in model.named_parameters() if p.requires_grad}
    return {n: tuple(t.shape) for n, t in model.state_dict().items()}


def barrier() -> None:
    if distributed():
        dist.barrier()


def load_full_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a full state (possibly only the trainable part) into a sharded or plain model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    if not sharded(model):
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, value in state.items():
                if name in params:
                    params[name].copy_(value.to(params[name].device, params[name].dtype))
        rest = {k: v for k, v in state.items() if k not in params}
        if rest:  # buffers
            model.load_state_dict(rest, strict=False)
        return
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=False))


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Optimizer state keyed by parameter name, unsharded: loadable on any number of ranks."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(model, optimizer, options=opts)


def load_full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


def save_shards(path: Any, model: torch.nn.Module, optimizer: Any, trainable_only: bool) -> None:
    """Every rank writes its own shards (torch.distributed.checkpoint): no rank holds the whole."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    names = set(full_state_dict_names(model, trainable_only))
    state: dict[str, Any] = {"model": {k: v for k, v in get_model_state_dict(model).items() if k in names}}
    if optimizer is not None and optimizer.state:
        state["optim"] = get_optimizer_state_dict(model, optimizer)
    dcp.save(state, checkpoint_id=str(path))


def load_shards(path: Any, model: torch.nn.Module, optimizer: Any, names: list[str]) -> None:
    """Read shards written by any number of ranks into this model (sharded or not, or in a
    process with no process group at all) and, when given, the optimizer."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    wanted = set(names)
    state: dict[str, Any] = {"model": {k: v for k, v in get_model_state_dict(model).items() if k in wanted}}
    if optimizer is not None:
        state["optim"] = get_optimizer_state_dict(model, optimizer)
    dcp.load(state, checkpoint_id=str(path))
    set_model_state_dict(model, state["model"], options=StateDictOptions(strict=False))
    if optimizer is not None:
        set_optimizer_state_dict(model, optimizer, state["optim"])
