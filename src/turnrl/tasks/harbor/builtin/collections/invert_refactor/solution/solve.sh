#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('mapping.py', 'def inv(mapping: dict) -> dict:\n    """Each value of `mapping` -> the sorted list of keys that map to it."""\n', 'def invert_mapping(mapping: dict) -> dict:\n    """Each value of `mapping` -> the sorted list of keys that map to it."""\n'),
    ('mapping.py', '    return {value: sorted(keys) for value, keys in out.items()}\n', '    return {value: sorted(keys) for value, keys in out.items()}\n\n\ninv = invert_mapping\n'),
    ('report.py', 'from mapping import inv\n', 'from mapping import invert_mapping\n'),
    ('report.py', '    return inv(file_owner)\n', '    return invert_mapping(file_owner)\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
