#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('inventory.py', '        self._stock[item] -= qty\n', '        have = self._stock[item]\n        if qty > have:\n            raise ValueError(f"only {have} of {item}")\n        if qty == have:\n            del self._stock[item]\n        else:\n            self._stock[item] = have - qty\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
