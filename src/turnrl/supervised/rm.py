"""The reward-model objective: a sequence classifier with one output learns preference pairs.

The model is `AutoModelForSequenceClassification(num_labels=1)` on `model.path`'s trunk, with a
new score head; the score of a sequence is the head at its last token, exactly where the RL
trainer's reward model reads it (`turnrl.workers.reward_model`). A micro-batch's chosen and
rejected sequences go through the trunk together, in one forward.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import torch

from turnrl.config.schema import ModelConfig
from turnrl.config.supervised_schema import RMConfig
from turnrl.models.loader import TINY, ModelError, load_model, model_directory, resolve_dtype
from turnrl.supervised.batches import right_pad
from turnrl.supervised.losses import bradley_terry, pair_loss
from turnrl.supervised.rm_data import Pair, load_pairs
from turnrl.workers.reward_model import _head

log = logging.getLogger(__name__)


def build_reward_model(cfg: ModelConfig, device: torch.device, seed: int, pad_id: int) -> torch.nn.Module:
    """The trunk of `cfg.path` under a one-output score head initialised from `seed` (the same head
    on every rebuild: a resumed LoRA run needs its frozen copy to match)."""
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if cfg.path == TINY:  # built from a config: copy the seeded tiny policy's trunk
            lm, _ = load_model(TINY, torch.device("cpu"), cfg.dtype, cfg.cache_dir, seed)
            config = copy.deepcopy(lm.config)
            config.num_labels = 1
            model = AutoModelForSequenceClassification.from_config(config)
            model.base_model.load_state_dict(lm.base_model.state_dict())
        else:
            directory = model_directory(cfg.path, cfg.cache_dir)
            verbosity = hf_logging.get_verbosity()
            hf_logging.set_verbosity_error()  # its load report lists the new head as missing: it is meant to be
            try:
                model = AutoModelForSequenceClassification.from_pretrained(
                    directory, num_labels=1, dtype=resolve_dtype(cfg.dtype, device)
                )
            except Exception as err:  # missing or corrupt weights, an architecture with no classifier
                lines = str(err).strip().splitlines() or [type(err).__name__]
                raise ModelError(f"cannot load {directory} as a sequence classifier: {lines[0]}") from None
            finally:
                hf_logging.set_verbosity(verbosity)
    # the RL trainer and transformers find a sequence's end through the pad id
    model.config.pad_token_id = pad_id
    model = model.to(device=device, dtype=resolve_dtype(cfg.dtype, device))
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if cfg.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        # SEQ_CLS keeps the new score head fully trainable (peft's modules_to_save)
        lora = LoraConfig(
            r=cfg.lora_rank,
            lora_alpha=cfg.lora_alpha,
            target_modules=list(cfg.target_modules),
            task_type="SEQ_CLS",
        )
        try:
            model = get_peft_model(model, lora)
        except ValueError as err:
            raise ModelError(
                f"cannot apply LoRA to model.target_modules={cfg.target_modules}: {err}"
            ) from None
    return model


def sequence_rewards(model: Any, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B,) float32: the score head at each right-padded row's last real token."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft: LoRA inside
    hidden = inner.base_model(input_ids=ids, attention_mask=attention_mask).last_hidden_state
    last = attention_mask.sum(dim=1) - 1
    h = hidden[torch.arange(len(ids), device=ids.device), last]
    return _head(inner)(h).squeeze(-1).float()


def distinct_pad(tokenizer: Any) -> None:
    """Make the tokenizer pad with a token other than EOS, where another special token exists.

    transformers' sequence classifiers (and TRL, pipelines) find a row's last token as its last
    non-pad one; every sequence here ends with EOS, so with pad = EOS they would read the score one
    token early, where this trainer and turnrl's RL reward model do not."""
    eos = tokenizer.eos_token_id
    if tokenizer.pad_token_id != eos:
        return
    for token_id in (tokenizer.unk_token_id, *tokenizer.all_special_ids):
        if token_id is not None and token_id != eos:
            tokenizer.pad_token = tokenizer.convert_ids_to_tokens(token_id)
            return
    log.warning(
        "the tokenizer pads with EOS and has no other special token: the reward model's config keeps it"
    )


class RMObjective:
    name = "rm"

    def __init__(self, cfg: RMConfig, tokenizer: Any):
        self.cfg, self.tokenizer = cfg, tokenizer
        distinct_pad(tokenizer)  # saved with the model: its config's pad_token_id
        self.pad_id = int(tokenizer.pad_token_id)

    def load(self, files: list[str]) -> list[Pair]:
        return load_pairs(files, self.tokenizer, self.cfg.data)

    def length(self, example: Pair) -> int:
        return max(len(example.chosen), len(example.rejected))

    def build(self, device: torch.device, seed: int) -> torch.nn.Module:
        return build_reward_model(self.cfg.model, device, seed, self.pad_id)

    def units(self, examples: list[Pair]) -> int:
        """The step's loss is normalised by its number of pairs."""
        return len(examples)

    def loss(
        self, model: Any, examples: list[Pair], units: int, device: torch.device
    ) -> tuple[torch.Tensor, dict[str, float]]:
        k = len(examples)
        ids, attention = right_pad([p.chosen for p in examples] + [p.rejected for p in examples], self.pad_id)
        rewards = sequence_rewards(model, ids.to(device), attention.to(device))
        chosen, rejected = rewards[:k], rewards[k:]
        per_pair, margin = (t.detach() for t in bradley_terry(chosen, rejected))
        stats = {
            "loss": float(per_pair.sum()),
            "correct": float((margin > 0).sum()),  # a tie is not a correct ranking
            "margin": float(margin.sum()),
            "chosen": float(chosen.detach().sum()),
            "rejected": float(rejected.detach().sum()),
            "real_tokens": float(attention.sum()),
            "padded_tokens": float(attention.numel()),
        }
        return pair_loss(chosen, rejected, units), stats

    def metrics(self, sums: dict[str, float], units: int) -> dict[str, float]:
        return {
            "loss": sums["loss"] / units,
            "accuracy": sums["correct"] / units,
            "margin": sums["margin"] / units,
            "reward_chosen": sums["chosen"] / units,
            "reward_rejected": sums["rejected"] / units,
        }
