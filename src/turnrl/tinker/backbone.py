"""The served base model and the LoRA adapters of every training client and sampler on it.

One base model, many adapters, with peft's multi-adapter API (`add_adapter` / `set_adapter` /
`delete_adapter`) rather than a deep copy of the base per client. Why:

- memory: the base is held once (the embedded 135M model is ~540 MB in fp32; ten clients with a copy
  each would hold 5 GB), and a sampler's frozen snapshot costs one adapter, not one model;
- isolation still holds, because every use of an adapter runs on the service's one worker thread
  and selects it first (`active`): peft then marks only that adapter trainable, so a backward pass
  puts gradients on its parameters only, and each client's optimizer holds its own adapter's
  parameters only. One client's step never touches another's adapter.

Adapters are created with lora_B = 0 (peft's default), so a new client's model is the base model,
and without dropout, so a forward pass is deterministic. Everything here runs on the worker thread.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from turnrl.tinker.registry import LoraSpec

LORA_ALPHA = 32
"""lora_alpha of every adapter: the update is scaled by alpha / rank, so the step size a learning
rate gives does not grow with the rank."""

_ATTENTION = re.compile(r"(^|\.)(self_)?attn(\.|$)|attention", re.IGNORECASE)


class Backbone:
    """The base model (frozen, eval mode) and its adapters; see the module docstring."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        name: str,
        tokenizer_dir: str,
        source: str | None = None,
        seed: int = 0,
    ) -> None:
        model.eval().requires_grad_(False)
        self.model, self.tokenizer, self.name, self.tokenizer_dir = model, tokenizer, name, tokenizer_dir
        self.source, self.seed = source or name, seed
        """Where the base came from (`--model`, a path made absolute) and the seed of its initial
        weights (`--seed`, for 'tiny-random'): what `turnrl export` rebuilds the base from."""
        self.peft: Any = None  # the PeftModel, made when the first adapter is added
        self._merged: tuple[str, torch.nn.Module] | None = None  # `merged`'s newest copy
        config = model.config
        self.vocab_size = int(model.get_input_embeddings().weight.shape[0])
        self.max_context: int | None = getattr(config, "max_position_embeddings", None)
        self.arch = str(getattr(config, "model_type", "") or type(model).__name__)
        self.device = next(model.parameters()).device
        self._targets = self._linear_layers()

    def _linear_layers(self) -> dict[str, list[str]]:
        """Names of the Linear layers LoRA may adapt, by the SDK's groups: attention and MLP layers
        inside the decoder blocks, and the unembedding (the output embedding)."""
        out_layer = self.model.get_output_embeddings()
        groups: dict[str, list[str]] = {"attn": [], "mlp": [], "unembed": []}
        for name, module in self.model.named_modules():
            if not isinstance(module, torch.nn.Linear):
                continue
            if module is out_layer:
                groups["unembed"].append(name)
            elif _ATTENTION.search(name):
                groups["attn"].append(name)
            else:
                groups["mlp"].append(name)
        return groups

    def base_info(self) -> dict[str, Any]:
        """The base model as a checkpoint records it (`tinker.json`'s `base`), for `turnrl export`."""
        dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        return {"source": self.source, "seed": self.seed, "dtype": dtype}

    def target_modules(self, lora: LoraSpec) -> list[str]:
        wanted = [("attn", lora.train_attn), ("mlp", lora.train_mlp), ("unembed", lora.train_unembed)]
        return [name for group, on in wanted if on for name in self._targets[group]]

    def lora_config(self, lora: LoraSpec) -> Any:
        from peft import LoraConfig

        return LoraConfig(
            r=lora.rank,
            lora_alpha=LORA_ALPHA,
            lora_dropout=0.0,
            target_modules=self.target_modules(lora),
            bias="none",
            task_type="CAUSAL_LM",
        )

    # -- adapters ---------------------------------------------------------------------------------

    def add_adapter(self, name: str, config: Any, seed: int | None = None) -> None:
        """A new adapter `name` with peft's initialisation (lora_A random, lora_B zero): the model
        with it is the base model. `seed` makes lora_A reproducible (the SDK's `LoraConfig.seed`)."""
        # peft draws lora_A on the CPU before moving it to the base layer's device: the CPU generator
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            with warnings.catch_warnings():
                # tied input/output embeddings: the adapter wraps the output layer only, and
                # nothing here merges adapters into the base weights, which is what the warning is about
                warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
                if self.peft is None:
                    from peft import get_peft_model

                    self.peft = get_peft_model(self.model, config, adapter_name=name)
                else:
                    self.peft.add_adapter(name, config)
        # the base stays frozen whatever peft did; the new adapter is trained once `active`
        self.peft.set_adapter(name)

    def copy_adapter(self, source: str, name: str) -> None:
        """A new adapter `name` holding `source`'s current weights (a sampler's frozen snapshot)."""
        self.add_adapter(name, self.peft.peft_config[source])
        self.load_state(name, self.state(source))

    def merged(self, name: str) -> torch.nn.Module:
        """The base model with adapter `name` merged into its weights, in a module of its own: what
        a sampler samples from. Decoding a few rows is bound by the per-layer work, and an unmerged
        adapter adds two small products and their overhead to every adapted layer at every token.
        Only for a sampler's adapter, which never changes after it is made (the newest is kept: a
        copy of the base each)."""
        if self._merged is not None and self._merged[0] == name:
            return self._merged[1]
        self._merged = None  # the old copy goes before the new one is made
        import copy

        clone = copy.deepcopy(self.peft)
        inner = clone.get_base_model()
        tied = inner.get_input_embeddings().weight
        for module in inner.modules():  # a tied output layer gets its own weight: merging into it
            if isinstance(module, torch.nn.Linear) and module.weight is tied:  # must not move the inputs'
                module.weight = torch.nn.Parameter(tied.detach().clone(), requires_grad=False)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
            model = clone.merge_and_unload(adapter_names=[name])
        model.eval().requires_grad_(False)
        self._merged = (name, model)
        return model

    def remove_adapter(self, name: str) -> None:
        if self._merged is not None and self._merged[0] == name:
            self._merged = None
        if self.peft is not None and name in self.peft.peft_config:
            with warnings.catch_warnings():
                # deleting the adapter last selected: peft says it selects another; every use selects its own
                warnings.filterwarnings("ignore", message=".*was active which is now deleted.*")
                self.peft.delete_adapter(name)

    def config(self, name: str) -> Any:
        return self.peft.peft_config[name]

    def state(self, name: str) -> dict[str, torch.Tensor]:
        """The adapter's weights, keyed as peft saves them (no adapter name in the keys); the base
        embeddings are never included."""
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(self.peft, adapter_name=name, save_embedding_layers=False)
        return {k: v.detach().to("cpu").clone() for k, v in state.items()}

    def load_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        """Set adapter `name`'s weights from `state` (keys as `state` gives them); a key that does
        not fit the adapter raises ValueError."""
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(self.peft, state, adapter_name=name)
        unexpected = list(getattr(result, "unexpected_keys", []) or [])
        if unexpected:
            raise ValueError(f"{len(unexpected)} tensor(s) do not fit the adapter, e.g. {unexpected[0]}")

    def parameters(self, name: str) -> list[torch.nn.Parameter]:
        """The adapter's trainable tensors in name order: an optimizer's state is saved and loaded by
        position, so the order must be the same in every process."""
        marker = f".{name}."
        named = [(n, p) for n, p in self.peft.named_parameters() if marker in n]
        return [p for _, p in sorted(named, key=lambda item: item[0])]

    @contextmanager
    def active(self, name: str | None) -> Iterator[torch.nn.Module]:
        """The model with adapter `name` applied (None: the bare base model), for the duration."""
        if name is None:
            if self.peft is None:
                yield self.model
                return
            with self.peft.disable_adapter():
                yield self.model
            return
        self.peft.set_adapter(name)
        yield self.model
