"""The two supervised losses, as pure tensor functions.

Both are normalised by a count over the whole optimizer step (its assistant tokens, its pairs),
never per micro-batch: summed over micro-batches the loss, and so the gradient, is the full
batch's exactly, however the step is cut. A mean per micro-batch would weigh the tokens of a
short micro-batch up.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sft_loss(log_probs: torch.Tensor, step_tokens: int) -> torch.Tensor:
    """Negative log-likelihood of a micro-batch's assistant tokens (`log_probs`, any shape, masked
    already) summed, over the number of assistant tokens in the whole step."""
    return -log_probs.sum() / step_tokens


def bradley_terry(r_chosen: torch.Tensor, r_rejected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per pair: (loss = -log sigma(r_chosen - r_rejected), margin = r_chosen - r_rejected).

    Bradley & Terry (1952): P(chosen > rejected) = sigma(r_c - r_r); the loss is its negative log
    likelihood, as in Ouyang et al. (2022), eq. 1. `logsigmoid` keeps it finite for large margins.
    """
    margin = r_chosen - r_rejected
    return -F.logsigmoid(margin), margin


def pair_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor, step_pairs: int) -> torch.Tensor:
    """A micro-batch's summed Bradley-Terry loss over the number of pairs in the whole step."""
    return bradley_terry(r_chosen, r_rejected)[0].sum() / step_pairs
