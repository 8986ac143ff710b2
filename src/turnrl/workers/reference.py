"""The reference policy: the frozen start policy, for KL terms. It loads its own copy of
`model.path`; with LoRA the actor serves reference log-probs instead (adapters off), so the
driver points its reference group at the actor and this class is not built.
"""

from __future__ import annotations

from pathlib import Path

import torch

from turnrl.batch import Batch
from turnrl.config.schema import ModelConfig, RefConfig, RolloutConfig
from turnrl.models.logprobs import attach_log_prob_method
from turnrl.models.policy import frozen_copy_of_start
from turnrl.workers import parallel
from turnrl.workers.group import dp
from turnrl.workers.memory import names_key_on_oom
from turnrl.workers.microbatch import trimmed_log_probs
from turnrl.workers.state import CheckpointError, load_role, save_role


class Reference:
    def __init__(
        self,
        cfg: RefConfig,
        model: ModelConfig,
        rollout: RolloutConfig,
        device: torch.device | str = "cpu",
        seed: int = 1,
    ):
        self.cfg, self.model_cfg = cfg, model
        self.device = torch.device(device)
        self.model = frozen_copy_of_start(model, self.device, seed)
        attach_log_prob_method(self.model)
        self.model = parallel.shard(
            self.model, self.device.type == "cuda", forward_methods=("response_log_probs",)
        )
        self.temperature = rollout.temperature
        self.share_prompts = not model.gradient_checkpointing

    @dp
    @torch.no_grad()
    @names_key_on_oom(
        "reference forward",
        "ref.log_prob_micro_batch_size",
        lambda self: self.cfg.log_prob_micro_batch_size,
        "ref.logprob_chunk_size",
    )
    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        cfg = self.cfg
        lp, _ = parallel.map_micro_batches(
            batch,
            cfg.log_prob_micro_batch_size,
            lambda mb: trimmed_log_probs(
                self.model, mb, self.device, self.temperature, cfg.logprob_chunk_size, self.share_prompts
            ),
            cfg.log_prob_max_token_len_per_gpu if cfg.log_prob_use_dynamic_bsz else 0,
            "ref.log_prob_max_token_len_per_gpu",
        )
        return Batch(tensors={"ref_log_prob": lp.cpu()})

    def save(self, directory: Path) -> None:
        """Nothing trains here: the record of which start policy this is, and the RNG streams."""
        save_role(directory, {"role": "reference", "model": self.model_cfg.path})

    def load(self, directory: Path) -> None:
        info = load_role(directory, "reference")
        if info.get("model") != self.model_cfg.path:
            raise CheckpointError(
                f"{directory}: the checkpoint's reference is '{info.get('model')}' but model.path is "
                f"'{self.model_cfg.path}'; resuming would change the KL anchor"
            )

    def close(self) -> None:
        pass
