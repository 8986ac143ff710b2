#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('query.py', 'def parse_query(query: str) -> dict[str, list[str]]:\n', 'from urllib.parse import unquote_plus\n\n\ndef parse_query(query: str) -> dict[str, list[str]]:\n'),
    ('query.py', '        name, _, value = part.partition("=")\n        out[name] = [value]\n    return out\n', '        name, _, value = part.partition("=")\n        out.setdefault(unquote_plus(name), []).append(unquote_plus(value))\n    return out\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
