"""The actor: the policy's log-probs and its PPO update. One role, one class."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch

from turnrl.algorithms.core import agg_denominator, masked_mean
from turnrl.algorithms.losses import policy_loss
from turnrl.batch import Batch
from turnrl.config.schema import ActorConfig
from turnrl.models.logprobs import response_log_probs, shared_prefix_log_probs
from turnrl.workers.microbatch import pad_right, trim

log = logging.getLogger(__name__)


def warmup_then_constant(warmup_steps: int) -> Any:
    def factor(step: int) -> float:
        return min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0

    return factor


def group_permutation(uids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Shuffle whole groups, keeping each prompt's samples adjacent (they share one prompt pass)."""
    groups: dict[object, list[int]] = {}
    for i, u in enumerate(uids):
        groups.setdefault(u, []).append(i)
    blocks = list(groups.values())
    return np.concatenate([blocks[j] for j in rng.permutation(len(blocks))])


class Actor:
    def __init__(self, model: torch.nn.Module, cfg: ActorConfig, temperature: float, share_prompts: bool = True):
        self.model = model
        # one prompt pass per group; off with gradient checkpointing, which disables the KV cache
        self.share_prompts = share_prompts
        self.cfg = cfg
        self.temperature = temperature
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=cfg.lr, betas=(cfg.betas[0], cfg.betas[1]), weight_decay=cfg.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, warmup_then_constant(cfg.lr_warmup_steps)
        )
        self.skipped_steps = 0

    def _log_probs(self, mb: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        trimmed, r = trim(mb)
        fn = shared_prefix_log_probs if self.share_prompts else response_log_probs
        lp, ent = fn(
            self.model,
            trimmed["input_ids"],
            trimmed["attention_mask"],
            trimmed["position_ids"],
            r,
            self.temperature,
            self.cfg.logprob_chunk_size,
        )
        width = mb["responses"].shape[1]
        return pad_right(lp, width), pad_right(ent, width)

    @torch.no_grad()
    def compute_log_prob(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(log_probs, entropy) of the responses at the rollout temperature."""
        self.model.eval()
        parts = [self._log_probs(mb) for mb in batch.split(self.cfg.log_prob_micro_batch_size)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def update(self, batch: Batch, mini_batch_responses: int, seed: int) -> dict[str, float]:
        """PPO epochs over shuffled mini-batches; one optimizer step per mini-batch."""
        self.model.train()
        metrics: dict[str, list[float]] = {}
        rng = np.random.default_rng(seed)
        for _ in range(self.cfg.ppo_epochs):
            order = group_permutation(batch["uid"], rng)
            for mini in batch.reorder(order).split(mini_batch_responses):
                for k, v in self._step(mini).items():
                    metrics.setdefault(k, []).append(v)
        return {k: float(np.mean(v)) for k, v in metrics.items()}

    def _step(self, mini: Batch) -> dict[str, float]:
        cfg = self.cfg
        self.optimizer.zero_grad(set_to_none=True)
        # the summed denominator makes micro-batch losses add up to the mini-batch loss exactly
        denom = agg_denominator(mini["response_mask"], cfg.loss_agg_mode)
        width = mini["responses"].shape[1]
        sums: dict[str, float] = {
            "pg_loss": 0.0,
            "pg_clipfrac": 0.0,
            "ppo_kl": 0.0,
            "pg_clipfrac_lower": 0.0,
            "entropy": 0.0,
        }
        tokens = mini["response_mask"].sum().item()
        finite = True
        for mb in mini.split(cfg.ppo_micro_batch_size):
            log_prob, entropy = self._log_probs(mb)
            mask = mb["response_mask"]
            loss, m = policy_loss(
                old_log_prob=mb["old_log_probs"],
                log_prob=log_prob,
                advantages=mb["advantages"],
                response_mask=mask,
                clip_ratio_low=cfg.clip_ratio_low,
                clip_ratio_high=cfg.clip_ratio_high,
                clip_ratio_c=cfg.clip_ratio_c,
                loss_agg_mode=cfg.loss_agg_mode,
                loss_denominator=denom,
                loss_norm_length=width,
            )
            if cfg.entropy_coeff:
                ent_term = (entropy * mask).sum() / max(tokens, 1)
                loss = loss - cfg.entropy_coeff * ent_term
            if not torch.isfinite(loss):
                finite = False
                break
            loss.backward()
            share = mask.sum().item() / max(tokens, 1)  # token-weighted metric averages
            sums["pg_loss"] += loss.item()
            for k in ("pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"):
                sums[k] += float(m[k]) * share
            sums["entropy"] += float(masked_mean(entropy.detach(), mask)) * share
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for p in self.model.parameters() if p.requires_grad],
            cfg.grad_clip if cfg.grad_clip > 0 else math.inf,
        )
        if not finite or not torch.isfinite(grad_norm):
            # a NaN/inf never reaches the weights: drop this mini-batch's gradient and say so
            self.skipped_steps += 1
            log.warning("non-finite loss or gradient: optimizer step skipped (%d so far)", self.skipped_steps)
            self.optimizer.zero_grad(set_to_none=True)
            return {"actor/skipped_steps": float(self.skipped_steps)}
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.scheduler.step()
        out = {f"actor/{k}": v for k, v in sums.items()}
        out.update(
            {
                "actor/grad_norm": float(grad_norm),
                "actor/lr": lr,
                "actor/skipped_steps": float(self.skipped_steps),
            }
        )
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "skipped_steps": self.skipped_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.skipped_steps = int(state["skipped_steps"])
