"""The real in-process engine, keeping every row it sampled, so a test can compare what a gateway
recorded with what the engine actually generated."""

from __future__ import annotations

from turnrl.rollout.hf import HFEngine


class RecordingEngine(HFEngine):
    """The real engine, keeping every row it sampled: (context, ids, log-probs)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rows: list[tuple[list[int], list[int], list[float]]] = []
        self.seeds: list[int | None] = []

    def generate(self, prompt_ids, params, max_new_tokens_per_row=None, abort=None):
        self.seeds.append(params.seed)
        out = super().generate(prompt_ids, params, max_new_tokens_per_row, abort=abort)
        for r, (ids, lps) in enumerate(zip(out.response_ids, out.log_probs, strict=True)):
            self.rows.append((list(prompt_ids[r // params.n]), list(ids), list(lps)))
        return out
