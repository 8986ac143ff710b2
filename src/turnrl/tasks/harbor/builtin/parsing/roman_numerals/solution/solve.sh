#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('roman.py', 'def from_roman(text: str) -> int:\n    """The value of a Roman numeral."""\n    raise NotImplementedError\n', 'VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}\n\n\ndef from_roman(text: str) -> int:\n    """The value of a Roman numeral."""\n    symbols = text.upper()\n    if not symbols or any(ch not in VALUES for ch in symbols):\n        raise ValueError(f"not a Roman numeral: {text!r}")\n    total = 0\n    for here, after in zip(symbols, symbols[1:] + "I", strict=True):\n        value = VALUES[here]\n        total += -value if value < VALUES[after] else value\n    return total\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
