"""A training client's passes: `forward` / `forward_backward` with a built-in loss, and `optim_step`.

`check_batch` runs in the route, before anything is queued: a datum whose loss inputs do not fit
its tokens, an unknown loss or config key is a one-line 4xx at once. The passes run on the worker
thread with the client's adapter selected (`Backbone.active`).

Alignment, as Tinker defines it: a datum's `model_input` holds N tokens and position t predicts
`target_tokens[t]`, so every loss input has N entries (N x K for K candidate targets per position).
Each datum goes through the model alone, so its log-probs are exactly a plain forward pass's, and
its backward pass runs before the next datum's forward (gradients accumulate in the adapter until
`optim_step`, which applies and clears them, as Tinker's training loop expects).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch

from turnrl.servers.inference.common import short
from turnrl.servers.refusal import Refusal
from turnrl.tinker.backbone import Backbone
from turnrl.tinker.losses import LOSSES, LossSpec
from turnrl.tinker.protobuf import DatumIn, ForwardBackwardIn, encode_forward_backward
from turnrl.tinker.registry import TrainingModel
from turnrl.tinker.shared_prompts import grouped_target_logprobs, silent_prefix
from turnrl.tinker.wire import unknown_field

MAX_LEARNING_RATE = 1.0
"""Adam moves each weight by about the learning rate per step: past 1 a step only wrecks the adapter
(1e10 made its outputs NaN), so a larger one is refused before it is queued."""
ADAM_DEFAULTS = {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0.0, "grad_clip_norm": 0.0}  # fmt: skip
"""The SDK's `AdamParams` fields and defaults: the optimizer's settings before the first step (every
step sets them again from its request)."""


def loss_spec(name: str) -> LossSpec:
    spec = LOSSES.get(name)
    if spec is None:
        raise Refusal(f"loss_fn: {name!r} is not a loss of this server; use one of {', '.join(LOSSES)}")
    return spec


def loss_config(spec: LossSpec, name: str, given: dict[str, float | str]) -> dict[str, float]:
    """`loss_fn_config` over the loss's defaults, or a Refusal naming the key."""
    cfg = dict(spec.config)
    for key, value in given.items():
        if key not in spec.config:
            raise unknown_field(f"loss_fn_config.{key}", list(spec.config))
        if isinstance(value, str) or not math.isfinite(value):
            raise Refusal(f"loss_fn_config.{key}: must be a finite number, got {value!r}")
        cfg[key] = float(value)
    for key in spec.config_required:
        if key not in given:
            raise Refusal(f"loss_fn_config.{key}: required by {name} (Tinker documents no default), e.g. loss_fn_config={{'{key}': 0.05}}")  # fmt: skip
    if cfg.get("beta", 0.0) < 0:
        raise Refusal(f"loss_fn_config.beta: must be >= 0, got {cfg['beta']}")
    if "clip_low_threshold" in cfg and not 0 <= cfg["clip_low_threshold"] <= 1 <= cfg["clip_high_threshold"]:
        raise Refusal(
            f"loss_fn_config: need 0 <= clip_low_threshold <= 1 <= clip_high_threshold, got "
            f"{cfg['clip_low_threshold']} and {cfg['clip_high_threshold']}"
        )
    return cfg


def check_batch(req: ForwardBackwardIn, spec: LossSpec, vocab_size: int, max_context: int | None) -> None:
    """Every datum's tokens and loss inputs, or a Refusal naming the first that does not fit."""
    if not req.data:
        raise Refusal("data: no datums")
    allowed = (*spec.required, *spec.optional)
    for i, datum in enumerate(req.data):
        where, n = f"data[{i}]", len(datum.tokens)
        if n == 0:
            raise Refusal(f"{where}.model_input: no tokens")
        if max_context and n > max_context:
            raise Refusal(f"{where}.model_input: {n} tokens exceed the model's context of {max_context}")
        _check_ids(np.asarray(datum.tokens), vocab_size, f"{where}.model_input")
        for name in datum.inputs:
            if name not in allowed:
                raise unknown_field(f"{where}.loss_fn_inputs.{name}", allowed)
        for name in spec.required:
            if name not in datum.inputs:
                raise Refusal(f"{where}.loss_fn_inputs: {req.loss_fn} needs {name!r} (it takes {', '.join(allowed)})")  # fmt: skip
        _check_inputs(datum, spec, where, n, vocab_size)


def _check_ids(ids: np.ndarray, vocab_size: int, where: str) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = int(ids[(ids < 0) | (ids >= vocab_size)].flat[0])
        raise Refusal(f"{where}: {bad} is not a token id in [0, {vocab_size})")


def _check_inputs(datum: DatumIn, spec: LossSpec, where: str, n: int, vocab_size: int) -> None:
    targets = datum.inputs["target_tokens"]
    shapes = "(N,) or (N, K)" if spec.top_k else "(N,)"
    if targets.dtype.kind != "i" or targets.ndim not in ((1, 2) if spec.top_k else (1,)):
        raise Refusal(f"{where}.loss_fn_inputs.target_tokens: must be integer token ids of shape {shapes}, got {targets.dtype} {list(targets.shape)}")  # fmt: skip
    if targets.ndim == 2 and targets.shape[1] == 0:
        raise Refusal(f"{where}.loss_fn_inputs.target_tokens: shape {list(targets.shape)} has no candidate per position")  # fmt: skip
    if targets.shape[0] != n:
        raise Refusal(
            f"{where}.loss_fn_inputs.target_tokens: {targets.shape[0]} targets for {n} input tokens "
            f"(position t of model_input predicts target t: one target per input token)"
        )
    _check_ids(targets, vocab_size, f"{where}.loss_fn_inputs.target_tokens")
    for name, value in datum.inputs.items():
        if name == "target_tokens":
            continue
        if value.shape != targets.shape:
            raise Refusal(
                f"{where}.loss_fn_inputs.{name}: shape {list(value.shape)} does not match target_tokens' "
                f"{list(targets.shape)} ({n} input tokens)"
            )
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise Refusal(f"{where}.loss_fn_inputs.{name}: holds NaN or infinity")


def _tensors(datum: DatumIn, device: torch.device) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    targets = torch.as_tensor(datum.inputs["target_tokens"], dtype=torch.long, device=device)
    x = {
        name: torch.as_tensor(value, dtype=torch.float32, device=device)
        for name, value in datum.inputs.items()
        if name != "target_tokens"
    }
    x.setdefault("weights", torch.ones(targets.shape, dtype=torch.float32, device=device))
    return targets, x


def target_logprobs(net: torch.nn.Module, tokens: list[int], targets: torch.Tensor) -> torch.Tensor:
    """log p(target) at every position of one datum, in float32: (N,) or (N, K) like `targets`."""
    ids = torch.tensor([tokens], device=targets.device)
    logits = net(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, targets.reshape(len(tokens), -1)).reshape(targets.shape)


TOKENS_PER_PASS = 512
"""Padded tokens of one batched forward. On a CPU a pass of 100-token data costs what its data cost
one by one (16 data of the embedded model with rank-32 LoRA: 27 s against 26 s of CPU at 512, 33
against 29 at 2,048, whose float32 logits take 400 MB); on a GPU one pass replaces a launch-bound
forward per datum."""


def forward_backward(
    backbone: Backbone,
    model: TrainingModel,
    req: ForwardBackwardIn,
    spec: LossSpec,
    cfg: dict[str, float],
    one_by_one: bool = False,
) -> bytes:
    """The loss of every datum (and, unless `req.forward_only`, its gradient, added to the
    adapter's): a `ForwardBackwardOutput` with each datum's `logprobs` and `elementwise_loss` and
    the summed `loss:sum`. The data run in batched passes of up to `TOKENS_PER_PASS` padded tokens;
    when anything is wrong (a loss or a gradient that is not finite) the request is undone and run
    again datum by datum (as `one_by_one` runs it from the start), which names the first culprit."""
    params = backbone.parameters(model.adapter) if not req.forward_only else []
    # the gradients accumulated so far: a request refused half-way leaves them as they were
    before = [None if p.grad is None else p.grad.clone() for p in params]
    with backbone.active(model.adapter) as net:
        answer = None if one_by_one else _batched(net, backbone.device, req, spec, cfg, params)
        if answer is None:
            _restore(params, before)
            answer = _one_by_one(net, backbone.device, req, spec, cfg, params, before)
    outputs, total = answer
    if not math.isfinite(total):  # finite terms whose sum overflows float64: not in practice
        raise Refusal(f"loss: the {req.loss_fn} loss sums to {total}")
    return encode_forward_backward(outputs, {"loss:sum": total})


Outputs = tuple[list[dict[str, np.ndarray]], float]


def _output(lp: torch.Tensor, per_token: torch.Tensor) -> dict[str, np.ndarray]:
    return {"logprobs": lp.detach().cpu().numpy(), "elementwise_loss": per_token.detach().cpu().numpy()}


def _batched(
    net: torch.nn.Module,
    device: torch.device,
    req: ForwardBackwardIn,
    spec: LossSpec,
    cfg: dict[str, float],
    params: list[torch.nn.Parameter],
) -> Outputs | None:
    """Every datum's outputs and the summed loss, pass by pass; None as soon as a loss or the
    gradient is not finite (the caller undoes what was added)."""
    outputs, total = [], 0.0
    backward = not req.forward_only
    all_splits = [silent_prefix(d, req.loss_fn) for d in req.data]
    for chunk in _passes(req.data, all_splits):
        data, splits = [req.data[i] for i in chunk], [all_splits[i] for i in chunk]
        with torch.set_grad_enabled(backward):
            if min(splits) > 0:  # every datum has a prompt that carries no loss: each runs once
                lps = grouped_target_logprobs(net, data, splits, device)
            else:
                lps = batched_target_logprobs(net, data, device)
            per_token = [spec.fn(lp, _tensors(d, device)[1], cfg) for d, lp in zip(data, lps, strict=True)]
            losses = torch.stack([t.sum() for t in per_token])
        values = losses.detach().tolist()
        if not all(math.isfinite(v) for v in values):
            return None
        if backward:
            losses.sum().backward()
            if not math.isfinite(grad_norm(params, torch.float32)):
                return None
        total += sum(values)
        outputs += [_output(lp, t) for lp, t in zip(lps, per_token, strict=True)]
    return outputs, total


def _passes(data: list[DatumIn], splits: list[int]) -> list[list[int]]:
    """The data's indices in order, cut into passes of at most `TOKENS_PER_PASS` tokens of work: a
    pass of the plain kind pads every datum to the longest; one whose data share prompts
    (`splits`, all > 0) runs each distinct prompt once and the rest of each datum. A datum over the
    budget goes alone."""
    passes: list[list[int]] = []
    for i in range(len(data)):
        if passes and _cost(data, splits, [*passes[-1], i]) <= TOKENS_PER_PASS:
            passes[-1].append(i)
        else:
            passes.append([i])
    return passes


def _cost(data: list[DatumIn], splits: list[int], rows: list[int]) -> int:
    if min(splits[i] for i in rows) == 0:
        return max(len(data[i].tokens) for i in rows) * len(rows)
    prompts = {tuple(data[i].tokens[: splits[i]]) for i in rows}
    return sum(map(len, prompts)) + sum(len(data[i].tokens) - splits[i] for i in rows)


def batched_target_logprobs(
    net: torch.nn.Module, data: list[DatumIn], device: torch.device
) -> list[torch.Tensor]:
    """`target_logprobs` of each datum from one right-padded forward: causal attention never lets a
    real token see the padding after it, so each row's log-probs are its own pass's."""
    width = max(len(d.tokens) for d in data)
    ids = torch.zeros((len(data), width), dtype=torch.long, device=device)
    for r, d in enumerate(data):
        ids[r, : len(d.tokens)] = torch.tensor(d.tokens, dtype=torch.long)
    logits = net(input_ids=ids).logits
    out = []
    for r, d in enumerate(data):
        targets = _tensors(d, device)[0]
        logp = torch.log_softmax(logits[r, : len(d.tokens)].float(), dim=-1)
        out.append(logp.gather(-1, targets.reshape(len(d.tokens), -1)).reshape(targets.shape))
    return out


def _one_by_one(
    net: torch.nn.Module,
    device: torch.device,
    req: ForwardBackwardIn,
    spec: LossSpec,
    cfg: dict[str, float],
    params: list[torch.nn.Parameter],
    before: list[torch.Tensor | None],
) -> Outputs:
    """Datum by datum, each loss and the gradient checked as it goes: the first that is not finite is
    refused by its index, with the gradients put back to `before`."""
    outputs, total = [], 0.0
    backward = not req.forward_only
    for i, datum in enumerate(req.data):
        targets, x = _tensors(datum, device)
        with torch.set_grad_enabled(backward):
            lp = target_logprobs(net, datum.tokens, targets)
            per_token = spec.fn(lp, x, cfg)
            loss = per_token.sum()
        value = float(loss.detach())
        if not math.isfinite(value):
            _restore(params, before)
            raise Refusal(f"data[{i}]: the {req.loss_fn} loss is {value} (check its log-probs and advantages); nothing was applied")  # fmt: skip
        if backward:
            loss.backward()
            # a finite loss may still have a gradient whose norm is past float32 (weights of
            # -1e30): optim_step could not report it, and Adam's squared moments overflow
            if not math.isfinite(grad_norm(params, torch.float32)):
                _restore(params, before)
                raise Refusal(f"data[{i}]: the {req.loss_fn} loss ({value:.3g}) has a gradient whose norm is past float32's range (check its weights and advantages); nothing was applied")  # fmt: skip
        total += value
        outputs.append(_output(lp, per_token))
    return outputs, total


def all_finite(tensors: list[torch.Tensor | None]) -> bool:
    """Whether every value of `tensors` (None ones skipped) is finite: one device sync."""
    present = [t for t in tensors if t is not None]
    if not present:
        return True
    return bool(torch.stack([torch.isfinite(t).all() for t in present]).all())


def grad_norm(params: list[torch.nn.Parameter], dtype: torch.dtype) -> float:
    """The norm of the gradients of `params` computed in `dtype` (inf when it overflows there)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    norms = torch.stack([torch.linalg.vector_norm(g, dtype=dtype) for g in grads])
    return float(torch.linalg.vector_norm(norms))


def _restore(params: list[torch.nn.Parameter], grads: list[torch.Tensor | None]) -> None:
    for p, grad in zip(params, grads, strict=True):
        p.grad = grad


def new_optimizer(backbone: Backbone, model: TrainingModel) -> torch.optim.Optimizer:
    """AdamW over the client's adapter only, at the SDK's defaults (each step sets its own)."""
    d = ADAM_DEFAULTS
    return torch.optim.AdamW(
        backbone.parameters(model.adapter),
        lr=d["learning_rate"],
        betas=(d["beta1"], d["beta2"]),
        eps=d["eps"],
        weight_decay=d["weight_decay"],
    )


def check_adam(params: dict[str, Any]) -> dict[str, float]:
    """The SDK's `AdamParams` over its defaults, or a Refusal naming the field."""
    out = dict(ADAM_DEFAULTS)
    for key, value in params.items():
        if key not in out:
            raise unknown_field(f"adam_params.{key}", list(ADAM_DEFAULTS))
        number = _number(value)
        if number is None or not math.isfinite(number):
            raise Refusal(f"adam_params.{key}: must be a finite number, got {short(value)}")
        out[key] = number
    checks = {
        "learning_rate": (0 <= out["learning_rate"] <= MAX_LEARNING_RATE, f"[0, {MAX_LEARNING_RATE:g}]"),
        "beta1": (0 <= out["beta1"] < 1, "[0, 1)"),
        "beta2": (0 <= out["beta2"] < 1, "[0, 1)"),
        "eps": (out["eps"] > 0, "> 0"),
        "weight_decay": (out["weight_decay"] >= 0, ">= 0"),
        "grad_clip_norm": (out["grad_clip_norm"] >= 0, ">= 0 (0: off)"),
    }
    for key, (ok, allowed) in checks.items():
        if not ok:
            raise Refusal(f"adam_params.{key}: {out[key]:g} is out of range; must be {allowed}")
    return out


def _number(value: Any) -> float | None:
    """A JSON number as a float (an integer too large for one is infinite); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _set_adam(opt: torch.optim.Optimizer, adam: dict[str, float]) -> None:
    """The request's AdamW hyperparameters on every parameter group."""
    for group in opt.param_groups:
        group.update(
            lr=adam["learning_rate"],
            betas=(adam["beta1"], adam["beta2"]),
            eps=adam["eps"],
            weight_decay=adam["weight_decay"],
        )


def _clip(grads: list[torch.Tensor], norm: float, clip: float) -> list[torch.Tensor]:
    """Scale `grads` in place to norm `clip` when 0 < clip < norm (as torch's clip_grad_norm_);
    the gradients as they were before (copies when scaled)."""
    if not 0 < clip < norm:
        return grads
    saved = [g.clone() for g in grads]
    with torch.no_grad():
        torch._foreach_mul_(grads, clip / (norm + 1e-6))
    return saved


def _put_back(
    opt: torch.optim.Optimizer, state: dict[str, Any], tensors: list[torch.Tensor], saved: list[torch.Tensor]
) -> None:
    """Undo a refused step: `tensors` (weights, gradients) copied back from `saved`, the optimizer
    state reloaded."""
    with torch.no_grad():
        for t, kept in zip(tensors, saved, strict=True):
            t.copy_(kept)
    opt.load_state_dict(state)


def optim_step(model: TrainingModel, adam: dict[str, float]) -> dict[str, Any]:
    """One AdamW step (decoupled weight decay, as torch.optim.AdamW and Tinker) on the gradients
    accumulated since the last step, clipped to `grad_clip_norm` when it is > 0; then clears them.

    A step is all or nothing: gradients that are not finite, or an update that would leave a weight
    NaN or infinite, fail it as a user error with the weights, the optimizer state and the step
    count as they were."""
    opt = model.optimizer
    params = [p for group in opt.param_groups for p in group["params"]]
    grads = [p.grad for p in params if p.grad is not None]
    norm = grad_norm(params, torch.float64)  # finite float32 gradients always have a finite norm there
    if not math.isfinite(norm):  # forward_backward refuses such gradients: only a defence
        opt.zero_grad(set_to_none=True)
        raise Refusal(f"optim_step: the accumulated gradients' norm is {norm} (NaN or infinite gradients); they were dropped, the weights and optimizer state are unchanged")  # fmt: skip
    saved_weights = [p.detach().clone() for p in params]
    saved_state = copy.deepcopy(opt.state_dict())
    _set_adam(opt, adam)
    # the gradients as they came, kept for a retry at a smaller rate if this step is refused
    saved_grads = _clip(grads, norm, adam["grad_clip_norm"])
    opt.step()
    if not all_finite(list(params)):
        _put_back(opt, saved_state, [*params, *grads], [*saved_weights, *saved_grads])
        raise Refusal(f"adam_params: this step (learning_rate {adam['learning_rate']:g}, weight_decay {adam['weight_decay']:g}, gradient norm {norm:.3g}) would make the adapter's weights NaN or infinite; nothing was applied (the accumulated gradients are kept)")  # fmt: skip
    opt.zero_grad(set_to_none=True)
    model.steps += 1
    # Namespaced: client loops merge these into their own step's metrics (tinker-cookbook's every
    # loop does `metrics.update(optim_result.metrics)`), where a bare `step` or `learning_rate`
    # replaced the loop's own (its metrics.jsonl then counted steps from 1, as floats).
    return {
        "metrics": {
            "turnrl/grad_norm": norm,
            "turnrl/learning_rate": adam["learning_rate"],
            "turnrl/step": float(model.steps),
        }
    }
