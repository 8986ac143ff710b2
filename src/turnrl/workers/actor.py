"""The actor: the policy's log-probs and its PPO update. One role, one class."""

from __future__ import annotations

from typing import Any

import torch

from turnrl.algorithms.core import agg_denominator, masked_mean
from turnrl.algorithms.kl import kl_loss
from turnrl.algorithms.losses import policy_loss
from turnrl.batch import Batch
from turnrl.config.schema import ActorConfig
from turnrl.models.logprobs import response_log_probs
from turnrl.workers.microbatch import forward_trimmed, seq_args
from turnrl.workers.optim import Optimizer, epochs_of_mini_batches


class Actor:
    def __init__(
        self, model: torch.nn.Module, cfg: ActorConfig, temperature: float, share_prompts: bool = True
    ):
        self.model = model
        self.cfg = cfg
        self.temperature = temperature
        # one prompt pass per group; off with gradient checkpointing, which disables the KV cache
        self.share_prompts = share_prompts
        params = [p for p in model.parameters() if p.requires_grad]
        self.optim = Optimizer(
            params,
            cfg.lr,
            cfg.lr_warmup_steps,
            cfg.weight_decay,
            cfg.grad_clip,
            (cfg.betas[0], cfg.betas[1]),
            name="actor",
        )

    def _log_probs(self, mb: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        def fn(b: Batch, r: int) -> tuple[torch.Tensor, ...]:
            return response_log_probs(
                self.model, *seq_args(b), r, self.temperature, self.cfg.logprob_chunk_size, self.share_prompts
            )

        lp, ent = forward_trimmed(mb, fn)
        return lp, ent

    @torch.no_grad()
    def compute_log_prob(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(log_probs, entropy) of the responses at the rollout temperature."""
        self.model.eval()
        parts = [self._log_probs(mb) for mb in batch.split(self.cfg.log_prob_micro_batch_size)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def update(
        self, batch: Batch, mini_batch_responses: int, seed: int, recorder: Any = None
    ) -> dict[str, float]:
        """PPO epochs over shuffled mini-batches; one optimizer step per mini-batch.

        A recorder (the step inspector) receives the first micro-batch's per-token ratio,
        clipping and loss.
        """
        self.model.train()
        self._recorder = recorder
        return epochs_of_mini_batches(batch, self.cfg.ppo_epochs, mini_batch_responses, seed, self._step)

    def _record(self, mb: Batch, log_prob: torch.Tensor, m: dict[str, torch.Tensor]) -> None:
        fields = {
            k: mb[k] for k in ("responses", "response_mask", "attention_mask", "old_log_probs", "advantages")
        }
        fields.update(
            log_prob=log_prob.detach(),
            ratio=m["ratio"],
            clipped=m["clip_active"],
            dual_clipped=m["dual_active"],
            pg_loss=m["loss_mat"],
        )
        self._recorder.record("update_actor", Batch(tensors=fields, non_tensors={"uid": mb["uid"]}), 0.0)
        self._recorder = None

    def _step(self, mini: Batch) -> dict[str, float]:
        cfg = self.cfg
        self.optim.zero_grad()
        # the summed denominator makes micro-batch losses add up to the mini-batch loss exactly
        denom = agg_denominator(mini["response_mask"], cfg.loss_agg_mode)
        width = mini["responses"].shape[1]
        tokens = max(mini["response_mask"].sum().item(), 1.0)
        sums = dict.fromkeys(
            ("pg_loss", "pg_clipfrac", "ppo_kl", "pg_clipfrac_lower", "entropy", "kl_loss"), 0.0
        )
        finite = True
        for mb in mini.split(cfg.ppo_micro_batch_size):
            log_prob, entropy = self._log_probs(mb)
            mask = mb["response_mask"]
            pg, m = policy_loss(
                old_log_prob=mb["old_log_probs"],
                log_prob=log_prob,
                advantages=mb["advantages"],
                response_mask=mask,
                clip_ratio_low=cfg.clip_ratio_low,
                clip_ratio_high=cfg.clip_ratio_high,
                clip_ratio_c=cfg.clip_ratio_c,
                loss_agg_mode=cfg.loss_agg_mode,
                mode=cfg.policy_loss_mode,
                loss_denominator=denom,
                loss_norm_length=width,
                per_token=self._recorder is not None,
            )
            if self._recorder is not None:
                self._record(mb, log_prob, m)
            loss = pg
            if cfg.entropy_coeff:
                loss = loss - cfg.entropy_coeff * (entropy * mask).sum() / tokens
            if cfg.use_kl_loss:
                kl = kl_loss(
                    log_prob,
                    mb["ref_log_prob"],
                    mask,
                    cfg.kl_loss_type,
                    cfg.loss_agg_mode,
                    loss_denominator=denom,
                    loss_norm_length=width,
                )
                loss = loss + cfg.kl_loss_coef * kl
                sums["kl_loss"] += kl.item()
            if not torch.isfinite(loss):
                finite = False
                break
            loss.backward()
            share = mask.sum().item() / tokens  # token-weighted metric averages
            sums["pg_loss"] += pg.item()
            for k in ("pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"):
                sums[k] += float(m[k]) * share
            sums["entropy"] += float(masked_mean(entropy.detach(), mask)) * share
        out = self.optim.step(finite)
        if "actor/grad_norm" in out:
            out.update({f"actor/{k}": v for k, v in sums.items() if k != "kl_loss" or cfg.use_kl_loss})
            if cfg.use_kl_loss:
                out["actor/kl_coef"] = cfg.kl_loss_coef
        return out

    def state_dict(self) -> dict[str, Any]:
        return self.optim.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optim.load_state_dict(state)
