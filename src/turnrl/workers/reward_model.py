"""The reward model: a sequence-classification head scoring prompt + response at its last token."""

from __future__ import annotations

from typing import Any

import torch

from turnrl.batch import Batch
from turnrl.data.dataset import left_pad, position_ids_from_mask
from turnrl.models.loader import TINY, ModelError, load_tokenizer, tiny_random_config


def _head(model: torch.nn.Module) -> torch.nn.Module:
    for name in ("score", "classifier", "v_head"):
        head = getattr(model, name, None)
        if isinstance(head, torch.nn.Module):
            return head
    raise ModelError(f"reward model {type(model).__name__} has no score/classifier head")


class RewardModel:
    def __init__(
        self, path: str, policy_tokenizer: Any, device: torch.device, micro_batch_size: int, seed: int = 0
    ):
        from transformers import AutoModelForSequenceClassification

        if path == TINY:
            self.tokenizer = policy_tokenizer
            with torch.random.fork_rng():
                torch.manual_seed(seed + 1)
                config = tiny_random_config(len(policy_tokenizer), policy_tokenizer)
                config.num_labels = 1
                self.model = AutoModelForSequenceClassification.from_config(config)
        else:
            try:
                self.model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
            except (OSError, ValueError) as err:
                raise ModelError(
                    f"reward_model.model.path: cannot load {path}: {str(err).splitlines()[0]}"
                ) from None
            self.tokenizer = load_tokenizer(path)
        self.model.to(device).eval().requires_grad_(False)
        self.same_vocab = self.tokenizer.get_vocab() == policy_tokenizer.get_vocab()
        self.policy_tokenizer = policy_tokenizer
        self.micro_batch_size = micro_batch_size
        self.device = device

    def _inputs(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.same_vocab:  # score the exact token ids the policy produced
            return batch["input_ids"], batch["attention_mask"], batch["position_ids"]
        rows = []
        resp = batch["responses"]
        for i in range(len(batch)):
            text = self.policy_tokenizer.decode(
                resp[i][batch["response_mask"][i].bool()].tolist(), skip_special_tokens=True
            )
            messages = [*batch["raw_prompt"][i], {"role": "assistant", "content": text}]
            rows.append(self.tokenizer.apply_chat_template(messages, tokenize=True))
        ids, mask = left_pad(rows, self.tokenizer.pad_token_id)
        return ids, mask, position_ids_from_mask(mask)

    @torch.no_grad()
    def score(self, batch: Batch) -> torch.Tensor:
        """(B,) scalar scores at each sequence's last attended token."""
        trunk, head = self.model.base_model, _head(self.model)
        out = []
        for mb in batch.split(self.micro_batch_size):
            ids, mask, pos = (t.to(self.device) for t in self._inputs(mb))
            hidden = trunk(input_ids=ids, attention_mask=mask, position_ids=pos).last_hidden_state
            cols = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
            last = torch.where(mask.bool(), cols, torch.zeros_like(cols)).max(dim=1).values
            h = hidden[torch.arange(len(ids), device=ids.device), last]
            out.append(head(h).squeeze(-1).float().cpu())
        return torch.cat(out)
