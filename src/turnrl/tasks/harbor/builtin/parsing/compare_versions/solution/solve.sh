#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('versions.py', '    raise NotImplementedError\n', '    left = [int(p) for p in a.split(".")]\n    right = [int(p) for p in b.split(".")]\n    width = max(len(left), len(right))\n    left += [0] * (width - len(left))\n    right += [0] * (width - len(right))\n    return (left > right) - (left < right)\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
