#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('bank.py', '    def withdraw(self, amount: int) -> None:\n        self.balance -= amount\n', '    def withdraw(self, amount: int) -> None:\n        if amount <= 0:\n            raise ValueError("amount must be positive")\n        if amount > self.balance:\n            raise ValueError("insufficient funds")\n        self.balance -= amount\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
