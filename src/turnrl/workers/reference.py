"""The reference policy: the frozen start policy, for KL terms.

With LoRA the reference is the actor itself with its adapters switched off: the base
weights never change, so no second copy of the model is needed.
"""

from __future__ import annotations

import contextlib
import copy

import torch

from turnrl.batch import Batch
from turnrl.models.logprobs import response_log_probs
from turnrl.workers.microbatch import forward_trimmed, seq_args


class Reference:
    def __init__(
        self,
        actor_model: torch.nn.Module,
        temperature: float,
        micro_batch_size: int,
        chunk_size: int = 1024,
        share_prompts: bool = True,
    ):
        self.uses_adapters = hasattr(actor_model, "disable_adapter")
        if self.uses_adapters:
            self.model = actor_model
        else:
            self.model = copy.deepcopy(actor_model).eval()
            self.model.requires_grad_(False)
        self.temperature = temperature
        self.micro_batch_size = micro_batch_size
        self.chunk_size = chunk_size
        self.share_prompts = share_prompts

    @torch.no_grad()
    def compute_ref_log_prob(self, batch: Batch) -> torch.Tensor:
        ctx = self.model.disable_adapter() if self.uses_adapters else contextlib.nullcontext()
        was_training = self.model.training
        self.model.eval()
        parts = []
        with ctx:
            for mb in batch.split(self.micro_batch_size):
                lp, _ = forward_trimmed(
                    mb,
                    lambda b, r: response_log_probs(
                        self.model, *seq_args(b), r, self.temperature, self.chunk_size, self.share_prompts
                    ),
                )
                parts.append(lp)
        self.model.train(was_training)
        return torch.cat(parts)
