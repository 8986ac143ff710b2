"""The prompt prefix every row of a batch shares, prefilled once.

An agent's prompts all begin with the same system prompt and worked example, and every later turn
of an episode re-sends them: on the search task about 250 of a turn's 280-1,300 prompt tokens. The
engine runs that prefix for one row, copies its keys and values to every row, then prefills only
each row's own remainder. For the copy to serve every row, the prefix must sit at the same columns
in each: the batch is laid out as [prefix | left padding | the row's remainder], the padding masked
out in the middle. Positions count real tokens only (`position_ids_from_mask`), so every token keeps
the position it has in the plain left-padded layout and the model computes the same function.
"""

from __future__ import annotations

import torch

from turnrl.tensors import left_pad

MIN_SHARED = 16
"""Below this many tokens the extra one-row forward costs more than the prefill it saves."""


def shared_prefix_length(rows: list[list[int]], min_shared: int = MIN_SHARED) -> int:
    """The longest prefix all `rows` share, leaving each at least one token of its own (the prefill
    needs each row's last position); 0 when that is under `min_shared` or there is one row."""
    if len(rows) < 2:
        return 0
    first, limit = rows[0], min(len(r) for r in rows) - 1
    k = 0
    while k < limit and all(r[k] == first[k] for r in rows):
        k += 1
    return k if k >= min_shared else 0


def prefix_layout(rows: list[list[int]], shared: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention_mask): the first `shared` tokens (the same in every row) in the first columns,
    then each row's remainder left-padded so that every row ends at the last column."""
    rest, rest_mask = left_pad([r[shared:] for r in rows], pad_id)
    head = torch.tensor(rows[0][:shared], dtype=torch.long).expand(len(rows), shared)
    ids = torch.cat([head, rest], dim=1)
    mask = torch.cat([torch.ones((len(rows), shared), dtype=torch.long), rest_mask], dim=1)
    return ids, mask
