#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('luhn.py', '    raise NotImplementedError\n', '    digits = number.replace(" ", "")\n    if len(digits) < 2 or not digits.isdigit():\n        return False\n    total = 0\n    for i, ch in enumerate(reversed(digits)):\n        d = int(ch)\n        if i % 2:\n            d = d * 2 - 9 if d * 2 > 9 else d * 2\n        total += d\n    return total % 10 == 0\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
