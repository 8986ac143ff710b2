"""Frozen models that score the policy's sampled tokens: the reference and, through the same code,
the on-policy distillation teacher (`workers/teacher.py`).

The reference policy is the frozen start policy, for KL terms. It loads its own copy of
`model.path`; with LoRA the actor serves reference log-probs instead (adapters off), so the
driver points its reference group at the actor and this class is not built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from turnrl.batch import Batch
from turnrl.config.schema import ModelConfig, RefConfig, RolloutConfig
from turnrl.models.logprobs import attach_log_prob_method
from turnrl.models.policy import frozen_copy_of_start
from turnrl.models.precision import compute_dtype
from turnrl.workers import parallel
from turnrl.workers.group import dp
from turnrl.workers.memory import names_key_on_oom
from turnrl.workers.microbatch import trimmed_log_probs
from turnrl.workers.state import CheckpointError, load_role, save_role


class FrozenScorer:
    """A frozen causal LM that scores the batch's sampled tokens: log p(token) at the rollout
    temperature (the temperature of the actor's old log-probs), micro-batch by micro-batch (by rows,
    or by a token budget), FSDP2-sharded over its group's ranks. A subclass names its config section
    (`cfg`: micro-batch sizes), its checkpoint role, and the config key of its model path; its `@dp`
    method wraps `log_probs` in its own batch field.

    Nothing trains here, so a checkpoint records only which model it is (and the RNG streams); a
    resume with another model is refused, naming both."""

    section = ""
    """The config section of the sizes (`ref`, `teacher`): named in errors."""
    role = ""
    """The checkpoint sub-directory and `role.json`'s role."""
    path_key = ""
    """The config key of the model path, named when a resume would change it."""
    anchor = ""
    """What a resume with another model would change."""

    def __init__(
        self,
        cfg: Any,
        model: ModelConfig,
        rollout: RolloutConfig,
        device: torch.device | str = "cpu",
        seed: int = 1,
    ):
        self.cfg, self.model_cfg = cfg, model
        self.device = torch.device(device)
        self.model = frozen_copy_of_start(model, self.device, seed)
        params = next(self.model.parameters()).dtype
        attach_log_prob_method(self.model, compute_dtype(model.compute_dtype, params, self.device))
        self.model = parallel.shard(
            self.model, self.device.type == "cuda", forward_methods=("response_log_probs",)
        )
        self.temperature = rollout.temperature
        self.share_prompts = not model.gradient_checkpointing

    def log_probs(self, batch: Batch) -> torch.Tensor:
        """(B, T_resp) log p(token) of this rank's rows' responses, on the CPU."""
        cfg = self.cfg
        lp, _ = parallel.map_micro_batches(
            batch,
            cfg.log_prob_micro_batch_size,
            lambda mb: trimmed_log_probs(
                self.model, mb, self.device, self.temperature, cfg.logprob_chunk_size, self.share_prompts
            ),
            cfg.log_prob_max_token_len_per_gpu if cfg.log_prob_use_dynamic_bsz else 0,
            f"{self.section}.log_prob_max_token_len_per_gpu",
        )
        return lp.cpu()

    def save(self, directory: Path) -> None:
        """The record of which model this is, and the RNG streams."""
        save_role(directory, {"role": self.role, "model": self.model_cfg.path})

    def load(self, directory: Path) -> None:
        info = load_role(directory, self.role)
        if info.get("model") != self.model_cfg.path:
            raise CheckpointError(
                f"{directory}: the checkpoint's {self.role} is '{info.get('model')}' but {self.path_key} is "
                f"'{self.model_cfg.path}'; resuming would change {self.anchor}"
            )

    def close(self) -> None:
        pass


class Reference(FrozenScorer):
    section, role, path_key, anchor = "ref", "reference", "model.path", "the KL anchor"

    def __init__(
        self,
        cfg: RefConfig,
        model: ModelConfig,
        rollout: RolloutConfig,
        device: torch.device | str = "cpu",
        seed: int = 1,
    ):
        super().__init__(cfg, model, rollout, device, seed)

    @dp
    @torch.no_grad()
    @names_key_on_oom(
        "reference forward",
        "ref.log_prob_micro_batch_size",
        lambda self: self.cfg.log_prob_micro_batch_size,
        "ref.logprob_chunk_size",
    )
    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        return Batch(tensors={"ref_log_prob": self.log_probs(batch)})
