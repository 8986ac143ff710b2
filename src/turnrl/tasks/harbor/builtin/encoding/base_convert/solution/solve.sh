#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('bases.py', 'def to_base(n: int, base: int) -> str:\n    """`n` written in `base`."""\n    raise NotImplementedError\n', 'DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"\n\n\ndef to_base(n: int, base: int) -> str:\n    """`n` written in `base`."""\n    if not 2 <= base <= 36:\n        raise ValueError("base must be from 2 to 36")\n    if n == 0:\n        return "0"\n    sign, n = ("-", -n) if n < 0 else ("", n)\n    out = []\n    while n:\n        n, d = divmod(n, base)\n        out.append(DIGITS[d])\n    return sign + "".join(reversed(out))\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
