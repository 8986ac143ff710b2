#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('dates.py', 'def days_between(a: str, b: str) -> int:\n    """Days between two ISO dates, order ignored."""\n    raise NotImplementedError\n', 'from datetime import date\n\n\ndef days_between(a: str, b: str) -> int:\n    """Days between two ISO dates, order ignored."""\n    return abs((date.fromisoformat(b) - date.fromisoformat(a)).days)\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
