"""Single-turn rollout: one response per sample, the same interface as the agent rollout."""

from __future__ import annotations

from turnrl.batch import Batch
from turnrl.rollout.base import RolloutEngine, SamplingParams, Services, assemble


class SingleTurnRollout:
    services = Services()  # no tools
    wants_rows = False

    def __init__(self, engine: RolloutEngine, pad_id: int):
        self.engine = engine
        self.pad_id = pad_id

    def generate(self, gen_batch: Batch, params: SamplingParams) -> tuple[Batch, dict[str, float]]:
        ids, mask = gen_batch["input_ids"], gen_batch["attention_mask"]
        prompt_ids = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
        out = self.engine.generate(prompt_ids, params)
        return assemble(gen_batch, out, params.n, self.pad_id, params.max_new_tokens), {}

    def close(self) -> None:
        pass
