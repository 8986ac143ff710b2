"""The critic: a value head on a language-model trunk, trained on GAE returns.

It loads its own trunk (`critic.model.path`, else `model.path`), owns its optimizer and
saves/loads its whole value model (trunk and head).
"""

from __future__ import annotations

from pathlib import Path

import torch

from turnrl.algorithms.core import agg_denominator
from turnrl.algorithms.losses import value_loss
from turnrl.batch import Batch
from turnrl.config.schema import CriticConfig, ModelConfig, RolloutConfig
from turnrl.models.loader import load_model
from turnrl.models.logprobs import response_hidden
from turnrl.models.precision import compute_dtype, computing_in
from turnrl.workers import parallel
from turnrl.workers.group import dp
from turnrl.workers.memory import names_key_on_oom
from turnrl.workers.microbatch import forward_trimmed, seq_args
from turnrl.workers.optim import Optimizer, epochs_of_mini_batches
from turnrl.workers.state import load_role, save_role


class ValueModel(torch.nn.Module):
    """V(s_t) for the state before each response token: trunk hidden state -> scalar."""

    def __init__(self, causal_lm: torch.nn.Module, compute: torch.dtype | None = None):
        """`compute`: the autocast dtype of the forward (None: the parameters' own precision)."""
        super().__init__()
        self.compute = compute
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
        with computing_in(self.compute, input_ids.device):
            h = response_hidden(
                self.trunk, input_ids, attention_mask, position_ids, response_length, share_prompts
            )
            return self.value_head(h).squeeze(-1).float()


class Critic:
    def __init__(
        self,
        cfg: CriticConfig,
        model: ModelConfig,
        rollout: RolloutConfig,
        device: torch.device | str = "cpu",
        seed: int = 1,
    ):
        self.cfg, self.rollout_cfg = cfg, rollout
        self.device = torch.device(device)
        self.source = cfg.model.path or model.path
        causal_lm, _ = load_model(self.source, self.device, model.dtype, model.cache_dir, seed)
        params = next(causal_lm.parameters()).dtype
        compute = compute_dtype(model.compute_dtype, params, self.device)
        self.model = ValueModel(causal_lm, compute).to(self.device)
        self.model = parallel.shard(self.model, self.device.type == "cuda", model.fsdp_offload)
        self.share_prompts = not model.gradient_checkpointing
        self.optim = Optimizer(self.model, cfg.optim, name="critic")

    def _values(self, mb: Batch) -> torch.Tensor:
        mb = mb.to(self.device)
        (v,) = forward_trimmed(mb, lambda b, r: (self.model(*seq_args(b), r, self.share_prompts),))
        return v * mb["response_mask"]

    @dp
    @torch.no_grad()
    @names_key_on_oom(
        "critic's value forward", "critic.ppo_micro_batch_size", lambda self: self.cfg.ppo_micro_batch_size
    )
    def compute_values(self, batch: Batch) -> Batch:
        self.model.eval()
        cfg = self.cfg
        (values,) = parallel.map_micro_batches(
            batch,
            cfg.ppo_micro_batch_size,
            lambda mb: (self._values(mb),),
            cfg.forward_max_token_len_per_gpu if cfg.use_dynamic_bsz else 0,
            "critic.forward_max_token_len_per_gpu",
        )
        return Batch(tensors={"values": values.cpu()})

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        """Epochs over mini-batches of `critic.ppo_mini_batch_size` prompts (times `rollout.n`)."""
        self.model.train()
        mini = self.cfg.ppo_mini_batch_size * self.rollout_cfg.n
        return epochs_of_mini_batches(batch.to(self.device), self.cfg.ppo_epochs, mini, step, self._step)

    @names_key_on_oom(
        "critic update",
        "critic.ppo_micro_batch_size",
        lambda self: self.cfg.ppo_micro_batch_size,
        "set model.gradient_checkpointing=true",
    )
    def _step(self, mini: Batch) -> dict[str, float]:
        cfg = self.cfg
        self.optim.zero_grad()
        denom = agg_denominator(mini["response_mask"], cfg.loss_agg_mode)
        tokens = max(mini["response_mask"].sum().item(), 1.0)
        sums = {"vf_loss": 0.0, "vf_clipfrac": 0.0, "vpred_mean": 0.0}
        finite = True
        budget = cfg.ppo_max_token_len_per_gpu if cfg.use_dynamic_bsz else 0
        key = "critic.ppo_max_token_len_per_gpu"
        for mb, real in parallel.my_micro_batches(mini, cfg.ppo_micro_batch_size, budget, key):
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
            if not real:  # a stand-in so this rank joins the others' collectives; adds nothing
                parallel.backward(loss * 0.0)
                continue
            if not torch.isfinite(loss):
                finite = False
                if parallel.world_size() == 1:
                    break
            parallel.backward(loss)
            share = mb["response_mask"].sum().item() / tokens
            sums["vf_loss"] += loss.item()
            sums["vf_clipfrac"] += float(m["vf_clipfrac"]) * share
            sums["vpred_mean"] += float(m["vpred_mean"]) * share
        sums = dict(zip(sums, parallel.all_reduce(list(sums.values())), strict=True))
        out = self.optim.step(parallel.all_reduce([float(not finite)], "max")[0] == 0.0)
        if "critic/grad_norm" in out:
            out.update({f"critic/{k}": v for k, v in sums.items()})
        return out

    def save(self, directory: Path) -> None:
        """The whole value model (the trunk is trained too), optimizer + schedule, RNG streams."""
        info = {"role": "critic", "model": self.source}
        save_role(directory, info, self.model, self.optim, everything=True)

    def load(self, directory: Path) -> None:
        load_role(directory, "critic", self.model, self.optim, everything=True)

    def close(self) -> None:
        pass
