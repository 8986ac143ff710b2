#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('calc.py', 'def evaluate(expr: str) -> int:\n    """The value of `expr`: integers with + - *, * binding tighter."""\n    tokens, number = [], ""\n', 'def tokenize(expr: str) -> list[str]:\n    """The numbers and operators of `expr`, spaces dropped."""\n    tokens, number = [], ""\n'),
    ('calc.py', '        tokens.append(number)\n    terms, sign, product = [], 1, None\n    for token in tokens:\n        if token in "+-":\n', '        tokens.append(number)\n    return tokens\n\n\ndef evaluate(expr: str) -> int:\n    """The value of `expr`: integers with + - *, * binding tighter."""\n    terms, sign, product = [], 1, None\n    for token in tokenize(expr):\n        if token in "+-":\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
