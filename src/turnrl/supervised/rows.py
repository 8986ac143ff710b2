"""What SFT and RM rows share: a required field, and the report on rows over `data.max_length`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from turnrl.data.dataset import DataError

log = logging.getLogger(__name__)


def required(row: dict[str, Any], key: str, setting: str, where: str, what: str) -> Any:
    """`row[key]`; a missing or null field is one line naming the row, the setting and the fields it has."""
    value = row.get(key)
    if value is None:
        fields = ", ".join(sorted(map(str, row))) or "none"
        raise DataError(f"{where}: {what} has no '{key}' field ({setting}); its fields: {fields}")
    return value


@dataclass
class Overlong:
    """Examples of one file longer than `data.max_length`: dropped, or cut on the right."""

    file: str
    rows: int = 0
    dropped: list[int] = field(default_factory=list)
    """Token counts of the examples dropped."""
    cut: int = 0
    emptied: int = 0
    """Examples cut so short that nothing trainable was left (dropped as well)."""

    def warn(self, what: str, max_length: int) -> None:
        """One warning line per file that lost or cut examples, saying which and how many."""
        if self.cut:
            left = (
                f"; {self.emptied} of them kept no assistant token and were dropped" if self.emptied else ""
            )
            log.warning(
                "cut %d of %d %s longer than data.max_length=%d tokens on the right in %s "
                "(data.truncation=right: the loss covers the assistant tokens that fit)%s",
                self.cut, self.rows, what, max_length, self.file, left,
            )  # fmt: skip
        elif self.dropped:
            log.warning(
                "dropped %d of %d %s longer than data.max_length=%d tokens in %s (data.truncation=drop; longest %d)",
                len(self.dropped), self.rows, what, max_length, self.file, max(self.dropped),
            )  # fmt: skip


def none_left(reports: list[Overlong], what: str, max_length: int, hint: str) -> DataError:
    """The error when every example of every file was dropped for its length."""
    files = ", ".join(r.file for r in reports)
    lengths = [n for r in reports for n in r.dropped]
    longest = f", longest {max(lengths)}" if lengths else ""
    count = sum(len(r.dropped) + r.emptied for r in reports)
    return DataError(
        f"every {what[:-1]} in {files} is longer than data.max_length={max_length} tokens "
        f"({count} dropped{longest}); raise data.max_length{hint}"
    )
