#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('names.py', 'def camel_to_snake(name: str) -> str:\n    """`name` in camelCase or PascalCase, in snake_case."""\n    raise NotImplementedError\n', 'import re\n\n\ndef camel_to_snake(name: str) -> str:\n    """`name` in camelCase or PascalCase, in snake_case."""\n    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\\1_\\2", name)\n    name = re.sub(r"([a-z0-9])([A-Z])", r"\\1_\\2", name)\n    return name.lower()\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
