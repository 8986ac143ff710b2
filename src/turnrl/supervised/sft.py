"""The SFT objective: a causal LM learns the assistant's tokens of chat conversations.

The vocabulary head runs only on the positions that predict an assistant token, in checkpointed
chunks (`turnrl.models.logprobs.head_log_probs`): no (tokens x vocab) float32 logits for the whole
micro-batch, and no vocabulary compute for prompt, tool and padding positions.
"""

from __future__ import annotations

from typing import Any

import torch

from turnrl.config.supervised_schema import SFTConfig
from turnrl.models.logprobs import head_log_probs
from turnrl.models.policy import build_policy
from turnrl.supervised.batches import right_pad
from turnrl.supervised.chat import Tokenized, require_template
from turnrl.supervised.losses import sft_loss
from turnrl.supervised.sft_data import load_conversations


def assistant_log_probs(
    model: Any, ids: torch.Tensor, attention_mask: torch.Tensor, loss_mask: torch.Tensor, chunk_size: int
) -> torch.Tensor:
    """log p of every token with `loss_mask` 1 (right-padded rows), flattened in row order."""
    # PeftModel forwards these to the wrapped model; the LoRA layers live inside the trunk
    trunk, head = model.get_decoder(), model.get_output_embeddings()
    hidden = trunk(input_ids=ids, attention_mask=attention_mask).last_hidden_state
    target = loss_mask[:, 1:].bool()  # the hidden state at t predicts token t + 1
    h, labels = hidden[:, :-1][target], ids[:, 1:][target]
    return head_log_probs(head, h.unsqueeze(0), labels.unsqueeze(0), 1.0, chunk_size)[0].squeeze(0)


class SFTObjective:
    name = "sft"

    def __init__(self, cfg: SFTConfig, tokenizer: Any):
        self.cfg, self.tokenizer = cfg, tokenizer
        self.pad_id = int(tokenizer.pad_token_id)
        self.eos_ids = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()

    def load(self, files: list[str]) -> list[Tokenized]:
        require_template(self.tokenizer, self.cfg.model.path)
        return load_conversations(files, self.tokenizer, self.cfg.data, self.eos_ids)

    def length(self, example: Tokenized) -> int:
        return len(example.ids)

    def build(self, device: torch.device, seed: int) -> torch.nn.Module:
        """The policy exactly as `turnrl train` builds it (gradient checkpointing, LoRA)."""
        return build_policy(self.cfg.model, device, seed)[0]

    def units(self, examples: list[Tokenized]) -> int:
        """The step's loss is normalised by its number of assistant tokens."""
        return sum(sum(e.mask) for e in examples)

    def loss(
        self, model: Any, examples: list[Tokenized], units: int, device: torch.device
    ) -> tuple[torch.Tensor, dict[str, float]]:
        ids, attention = right_pad([e.ids for e in examples], self.pad_id)
        loss_mask, _ = right_pad([e.mask for e in examples], 0)
        ids, attention, loss_mask = ids.to(device), attention.to(device), loss_mask.to(device)
        log_probs = assistant_log_probs(model, ids, attention, loss_mask, self.cfg.trainer.logprob_chunk_size)
        stats = {
            "nll": -float(log_probs.detach().sum()),
            "real_tokens": float(attention.sum()),
            "padded_tokens": float(attention.numel()),
        }
        return sft_loss(log_probs, units), stats

    def metrics(self, sums: dict[str, float], units: int) -> dict[str, float]:
        return {"loss": sums["nll"] / units, "tokens": float(units)}
