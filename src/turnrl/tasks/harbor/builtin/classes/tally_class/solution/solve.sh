#!/bin/bash
# Reference solution: whole files written.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
cat > tally.py <<'EOF'
class Tally:
    """Counts how often each item was added."""

    def __init__(self) -> None:
        self._counts: dict = {}

    def add(self, item, n: int = 1) -> None:
        self._counts[item] = self._counts.get(item, 0) + n

    def count(self, item) -> int:
        return self._counts.get(item, 0)

    def most_common(self):
        if not self._counts:
            return None
        return max(self._counts, key=self._counts.__getitem__)
EOF
