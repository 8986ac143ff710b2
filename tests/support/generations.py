"""Two engine `Generation`s compared: the same ids and finish reasons, log-probs to rounding."""

import torch


def same(a, b, atol: float = 1e-5) -> None:  # type: ignore[no-untyped-def]
    assert (a.response_ids, a.finish_reasons) == (b.response_ids, b.finish_reasons)
    for x, y in zip(a.log_probs, b.log_probs, strict=True):
        assert torch.allclose(torch.tensor(x), torch.tensor(y), atol=atol)
