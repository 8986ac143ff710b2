"""On-policy distillation's pure functions: the per-token advantage (`algorithm.adv_estimator=opd`, or
`algorithm.distill_coef` times it added to another estimator's) and the reverse-KL metrics."""

from __future__ import annotations

import torch
from torch import Tensor

from turnrl.algorithms.core import check_same_shape, masked_fill_zero, masked_mean


def opd_advantage(
    student_log_prob: Tensor, teacher_log_prob: Tensor, response_mask: Tensor
) -> tuple[Tensor, Tensor]:
    """On-policy distillation (Agarwal et al. 2024, GKD; Lu & Thinking Machines Lab 2025): the per-token
    negative reverse KL, ``A_t = -(log p_student(y_t) - log p_teacher(y_t))`` on the student's own sampled
    tokens, exactly 0 where ``response_mask`` is 0 (observation tokens, padding). Each token is its own
    one-step return: no discounting, no whitening, no baseline. Returns are the advantages.

    ``student_log_prob`` is the sampling policy's log-prob (the batch's ``old_log_probs``). A token the
    teacher finds likelier than the student does gets a positive advantage; a token the teacher would not
    have written, a negative one. Detached: the gradient flows through the policy loss's ratio only.
    """
    check_same_shape(
        {
            "student_log_prob": student_log_prob,
            "teacher_log_prob": teacher_log_prob,
            "response_mask": response_mask,
        },
        "opd_advantage",
    )
    with torch.no_grad():
        advantages = masked_fill_zero(teacher_log_prob.detach() - student_log_prob.detach(), response_mask)
    return advantages, advantages.clone()


def distill_metrics(
    student_log_prob: Tensor, teacher_log_prob: Tensor, response_mask: Tensor
) -> dict[str, float]:
    """`distill/reverse_kl/mean` (the mean over model tokens of log p_student - log p_teacher, the
    single-sample estimate of KL(student || teacher) per token) and `distill/reverse_kl/max` (its largest
    token); both 0.0 when no token has mask 1."""
    check_same_shape(
        {
            "student_log_prob": student_log_prob,
            "teacher_log_prob": teacher_log_prob,
            "response_mask": response_mask,
        },
        "distill_metrics",
    )
    with torch.no_grad():
        gap = (student_log_prob - teacher_log_prob).double()
        mask = response_mask != 0
        top = gap[mask].max().item() if mask.any() else 0.0
        return {"distill/reverse_kl/mean": masked_mean(gap, mask).item(), "distill/reverse_kl/max": top}
