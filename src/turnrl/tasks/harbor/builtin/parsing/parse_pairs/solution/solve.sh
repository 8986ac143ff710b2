#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('pairs.py', '    raise NotImplementedError\n', '    out = {}\n    for part in text.split(";"):\n        if not part.strip():\n            continue\n        if "=" not in part:\n            raise ValueError(f"not a key=value pair: {part.strip()!r}")\n        key, value = part.split("=", 1)\n        out[key.strip()] = value.strip()\n    return out\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
