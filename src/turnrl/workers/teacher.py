"""The on-policy distillation teacher: a frozen model (`teacher.model.path`, another model than the
policy's but with its tokenizer) scoring the tokens the policy sampled, `teacher_log_prob`.

It is the reference's code with another model (`FrozenScorer`): the same micro-batches, token
budgets, temperature and sharding over its group's ranks, and a checkpoint that records which
teacher it is, so a resume with another teacher is refused.
"""

from __future__ import annotations

import torch

from turnrl.batch import Batch
from turnrl.config.schema import ModelConfig, RolloutConfig, TeacherConfig
from turnrl.workers.group import dp
from turnrl.workers.memory import names_key_on_oom
from turnrl.workers.reference import FrozenScorer


class Teacher(FrozenScorer):
    """`model`: the teacher's model section (its path, the policy's dtype and cache directory)."""

    section, role, path_key, anchor = "teacher", "teacher", "teacher.model.path", "the distillation target"

    def __init__(
        self,
        cfg: TeacherConfig,
        model: ModelConfig,
        rollout: RolloutConfig,
        device: torch.device | str = "cpu",
        seed: int = 1,
    ):
        super().__init__(cfg, model, rollout, device, seed)

    @dp
    @torch.no_grad()
    @names_key_on_oom(
        "teacher forward",
        "teacher.log_prob_micro_batch_size",
        lambda self: self.cfg.log_prob_micro_batch_size,
        "teacher.logprob_chunk_size",
    )
    def compute_teacher_log_prob(self, batch: Batch) -> Batch:
        return Batch(tensors={"teacher_log_prob": self.log_probs(batch)})
