"""A stage-clock hook for tests that read what a stage wrote."""

from turnrl.batch import Batch


class KeepStages:
    """Keeps the last batch each stage of the loop recorded (`batches[stage]`)."""

    wants_batches = True

    def __init__(self) -> None:
        self.batches: dict[str, Batch] = {}

    def record(self, stage: str, batch: Batch | None, elapsed_s: float) -> None:
        if batch is not None:
            self.batches[stage] = batch
