"""The reward model: a sequence-classification head scoring prompt + response at its last token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from turnrl.batch import Batch
from turnrl.config.schema import RewardModelConfig
from turnrl.data.dataset import _prompt_text
from turnrl.models.loader import TINY, ModelError, load_tokenizer, model_directory, tiny_random_config
from turnrl.tensors import left_pad, position_ids_from_mask
from turnrl.workers.group import dp
from turnrl.workers.memory import names_key_on_oom
from turnrl.workers.state import load_role, save_role


def _head(model: torch.nn.Module) -> torch.nn.Module:
    for name in ("score", "classifier", "v_head"):
        head = getattr(model, name, None)
        if isinstance(head, torch.nn.Module):
            return head
    raise ModelError(f"reward model {type(model).__name__} has no score/classifier head")


def rm_sequence(tokenizer: Any, prompt_text: str, response: str) -> list[int]:
    """What a reward model scores: the rendered prompt (with its generation prompt), the response,
    then EOS, whose position the score is read at. `turnrl rm` trains on exactly this."""
    eos = int(tokenizer.eos_token_id)
    prompt = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    return [*prompt, *ids] if ids and ids[-1] == eos else [*prompt, *ids, eos]


class RewardModel:
    def __init__(
        self,
        cfg: RewardModelConfig,
        policy_tokenizer: Any,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ):
        from transformers import AutoModelForSequenceClassification

        self.cfg = cfg
        device = torch.device(device)
        path = cfg.model.path
        if path == TINY:
            self.tokenizer = policy_tokenizer
            with torch.random.fork_rng():
                torch.manual_seed(seed + 1)
                config = tiny_random_config(len(policy_tokenizer), policy_tokenizer)
                config.num_labels = 1
                self.model = AutoModelForSequenceClassification.from_config(config)
        else:
            directory = model_directory(path)  # a directory, a Hub id, a `turnrl rm` run
            try:
                self.model = AutoModelForSequenceClassification.from_pretrained(directory, num_labels=1)
            except Exception as err:  # missing (OSError), corrupt (SafetensorError) or not a classifier
                lines = str(err).strip().splitlines() or [type(err).__name__]
                raise ModelError(f"reward_model.model.path: cannot load {path}: {lines[0]}") from None
            self.tokenizer = load_tokenizer(str(directory))
        self.model.to(device).eval().requires_grad_(False)
        self.same_vocab = self.tokenizer.get_vocab() == policy_tokenizer.get_vocab()
        self.policy_tokenizer = policy_tokenizer
        self.micro_batch_size = cfg.micro_batch_size
        self.device = device

    def _inputs(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.same_vocab:  # score the exact token ids the policy produced
            return batch["input_ids"], batch["attention_mask"], batch["position_ids"]
        # another tokenizer: the text, re-tokenised the way `turnrl rm` trained on it
        rows = []
        resp = batch["responses"]
        for i in range(len(batch)):
            text = self.policy_tokenizer.decode(
                resp[i][batch["response_mask"][i].bool()].tolist(), skip_special_tokens=True
            )
            prompt = _prompt_text(self.tokenizer, list(batch["raw_prompt"][i]), f"row {i}")
            rows.append(rm_sequence(self.tokenizer, prompt, text))
        ids, mask = left_pad(rows, self.tokenizer.pad_token_id)
        return ids, mask, position_ids_from_mask(mask)

    @dp
    @torch.no_grad()
    @names_key_on_oom(
        "reward model forward", "reward_model.micro_batch_size", lambda self: self.micro_batch_size
    )
    def score(self, batch: Batch) -> Batch:
        """`rm_scores` (B,): the scalar score at each sequence's last attended token."""
        trunk, head = self.model.base_model, _head(self.model)
        out = []
        for mb in batch.split(self.micro_batch_size):
            ids, mask, pos = (t.to(self.device) for t in self._inputs(mb))
            hidden = trunk(input_ids=ids, attention_mask=mask, position_ids=pos).last_hidden_state
            cols = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
            last = torch.where(mask.bool(), cols, torch.zeros_like(cols)).max(dim=1).values
            h = hidden[torch.arange(len(ids), device=ids.device), last]
            out.append(head(h).squeeze(-1).float().cpu())
        return Batch(tensors={"rm_scores": torch.cat(out)})

    def save(self, directory: Path) -> None:
        save_role(directory, {"role": "reward_model", "model": self.cfg.model.path})

    def load(self, directory: Path) -> None:
        load_role(directory, "reward_model")

    def close(self) -> None:
        pass
