#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('checks.py', '    kept = [ch for ch in text if ch.isalnum()]\n', '    kept = [ch.lower() for ch in text if ch.isalnum()]\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
