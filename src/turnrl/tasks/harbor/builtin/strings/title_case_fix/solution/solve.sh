#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('titles.py', '    out = [w if w in SMALL_WORDS else w.capitalize() for w in words]\n', '    out = [w if w in SMALL_WORDS and i > 0 else w.capitalize() for i, w in enumerate(words)]\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
