#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('rotation.py', '    raise NotImplementedError\n', '    if not items:\n        return []\n    k %= len(items)\n    return items[-k:] + items[:-k] if k else list(items)\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
