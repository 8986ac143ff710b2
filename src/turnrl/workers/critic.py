"""The critic: a value head on a language-model trunk, trained on GAE returns."""

from __future__ import annotations

from typing import Any

import torch

from turnrl.algorithms.core import agg_denominator
from turnrl.algorithms.losses import value_loss
from turnrl.batch import Batch
from turnrl.config.schema import CriticConfig
from turnrl.models.logprobs import response_hidden
from turnrl.workers.microbatch import forward_trimmed, seq_args
from turnrl.workers.optim import Optimizer, epochs_of_mini_batches


class ValueModel(torch.nn.Module):
    """V(s_t) for the state before each response token: trunk hidden state -> scalar."""

    def __init__(self, causal_lm: torch.nn.Module):
        super().__init__()
        self.trunk = causal_lm.get_decoder()
        hidden = causal_lm.config.hidden_size
        self.value_head = torch.nn.Linear(hidden, 1, dtype=next(self.trunk.parameters()).dtype)
        torch.nn.init.normal_(self.value_head.weight, std=1.0 / (hidden + 1))
        torch.nn.init.zeros_(self.value_head.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        response_length: int,
        share_prompts: bool = True,
    ) -> torch.Tensor:
        h = response_hidden(
            self.trunk, input_ids, attention_mask, position_ids, response_length, share_prompts
        )
        return self.value_head(h).squeeze(-1).float()


class Critic:
    def __init__(self, causal_lm: torch.nn.Module, cfg: CriticConfig, share_prompts: bool = True):
        self.model = ValueModel(causal_lm).to(next(causal_lm.parameters()).device)
        self.cfg = cfg
        self.share_prompts = share_prompts
        self.optim = Optimizer(
            [p for p in self.model.parameters() if p.requires_grad],
            cfg.lr,
            cfg.lr_warmup_steps,
            cfg.weight_decay,
            cfg.grad_clip,
            name="critic",
        )

    def _values(self, mb: Batch) -> torch.Tensor:
        (v,) = forward_trimmed(mb, lambda b, r: (self.model(*seq_args(b), r, self.share_prompts),))
        return v * mb["response_mask"]

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        self.model.eval()
        return torch.cat([self._values(mb) for mb in batch.split(self.cfg.ppo_micro_batch_size)])

    def update(self, batch: Batch, mini_batch_responses: int, seed: int) -> dict[str, float]:
        self.model.train()
        return epochs_of_mini_batches(batch, self.cfg.ppo_epochs, mini_batch_responses, seed, self._step)

    def _step(self, mini: Batch) -> dict[str, float]:
        cfg = self.cfg
        self.optim.zero_grad()
        denom = agg_denominator(mini["response_mask"], cfg.loss_agg_mode)
        tokens = max(mini["response_mask"].sum().item(), 1.0)
        sums = {"vf_loss": 0.0, "vf_clipfrac": 0.0, "vpred_mean": 0.0}
        finite = True
        for mb in mini.split(cfg.ppo_micro_batch_size):
            vpreds = self._values(mb)
            loss, m = value_loss(
                vpreds=vpreds,
                values=mb["values"],
                returns=mb["returns"],
                response_mask=mb["response_mask"],
                cliprange_value=cfg.cliprange_value or None,
                loss_agg_mode=cfg.loss_agg_mode,
                loss_denominator=denom,
                loss_norm_length=mb["responses"].shape[1],
            )
            if not torch.isfinite(loss):
                finite = False
                break
            loss.backward()
            share = mb["response_mask"].sum().item() / tokens
            sums["vf_loss"] += loss.item()
            sums["vf_clipfrac"] += float(m["vf_clipfrac"]) * share
            sums["vpred_mean"] += float(m["vpred_mean"]) * share
        out = self.optim.step(finite)
        if "critic/grad_norm" in out:
            out.update({f"critic/{k}": v for k, v in sums.items()})
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "optim": self.optim.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optim.load_state_dict(state["optim"])
