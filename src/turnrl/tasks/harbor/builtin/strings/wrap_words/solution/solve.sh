#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('wrapping.py', '    raise NotImplementedError\n', '    lines: list[str] = []\n    current = ""\n    for word in text.split():\n        if current and len(current) + 1 + len(word) <= width:\n            current += " " + word\n            continue\n        if current:\n            lines.append(current)\n        current = word\n    if current:\n        lines.append(current)\n    return lines\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
