#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('caesar.py', '        if ch.isalpha():\n            out.append(chr(ord(ch) + k))\n', '        if ch.isascii() and ch.isalpha():\n            base = ord("a") if ch.islower() else ord("A")\n            out.append(chr(base + (ord(ch) - base + k) % 26))\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
