"""Stage 6: turn decoded responses into `token_level_scores` (score at the last model token)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from turnrl.batch import Batch
from turnrl.rewards.registry import ScoreFn, load_custom, registered, resolve, split_score


def last_token_index(response_mask: torch.Tensor) -> torch.Tensor:
    """Column of the last model token per row (0 for an empty response)."""
    cols = torch.arange(response_mask.shape[1], device=response_mask.device).expand_as(response_mask)
    return torch.where(response_mask > 0, cols, torch.zeros_like(cols)).max(dim=1).values


class RuleReward:
    """Calls the reward function of each row's data source on its decoded response.

    `sandbox_url`: where code rewards run programs (an agent run passes the sandbox its python
    tool uses); None = `$TURNRL_SANDBOX_URL`, else a child sandbox started on first use.
    """

    def __init__(
        self,
        tokenizer: Any,
        custom_path: str = "",
        custom_name: str = "compute_score",
        missing_ok: bool = False,
        sandbox_url: str | None = None,
    ):
        self.tokenizer = tokenizer
        # with a reward model, a data source may have no rule: it then scores 0 here
        self.missing_ok = missing_ok
        self.custom: ScoreFn | None = load_custom(custom_path, custom_name) if custom_path else None
        self.table = registered(sandbox_url)

    def check(self, data_sources: set[str]) -> None:
        """Fail at start-up, not mid-run, when a data source has no scorer."""
        if self.missing_ok:
            return
        for source in data_sources:
            resolve(source, self.custom, self.table)

    def decode(self, batch: Batch) -> list[str]:
        # only model tokens and observations within the response, never padding
        texts = []
        for ids, mask in zip(
            batch["responses"], batch["attention_mask"][:, -batch["responses"].shape[1] :], strict=True
        ):
            texts.append(self.tokenizer.decode(ids[mask.bool()].tolist(), skip_special_tokens=True))
        return texts

    def __call__(self, batch: Batch) -> tuple[torch.Tensor, dict[str, list[float]]]:
        texts = self.decode(batch)
        scores = torch.zeros(len(batch))
        extras: dict[str, list[float]] = defaultdict(list)
        for i, text in enumerate(texts):
            source = batch["data_source"][i]
            if self.missing_ok and self.custom is None and source not in self.table:
                continue
            fn = resolve(source, self.custom, self.table)
            result = fn(source, text, batch["ground_truth"][i], batch["extra_info"][i])
            score, extra = split_score(result, f"reward function for '{source}'")
            scores[i] = score
            for k, v in extra.items():
                extras[k].append(v)
        mask = batch["response_mask"]
        token_level = torch.zeros_like(mask, dtype=torch.float32)
        rows = torch.arange(len(batch))
        token_level[rows, last_token_index(mask)] = scores * (mask.sum(1) > 0).float()
        return token_level, dict(extras)
