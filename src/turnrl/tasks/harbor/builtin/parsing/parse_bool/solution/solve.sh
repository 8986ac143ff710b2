#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('flags.py', 'def parse_bool(text: str) -> bool:\n    """A yes/no setting written as text."""\n    raise NotImplementedError\n', 'TRUE = {"true", "yes", "on", "1"}\nFALSE = {"false", "no", "off", "0"}\n\n\ndef parse_bool(text: str) -> bool:\n    """A yes/no setting written as text."""\n    word = text.strip().lower()\n    if word in TRUE:\n        return True\n    if word in FALSE:\n        return False\n    raise ValueError(f"not a boolean: {text!r}")\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
