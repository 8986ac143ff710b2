#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('durations.py', 'def parse_duration(text: str) -> int:\n    """Seconds in a duration like \'1h30m\'."""\n    raise NotImplementedError\n', 'import re\n\nUNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}\n\n\ndef parse_duration(text: str) -> int:\n    """Seconds in a duration like \'1h30m\'."""\n    parts = re.findall(r"(\\d+)([dhms])", text)\n    if not parts or "".join(n + u for n, u in parts) != text:\n        raise ValueError(f"not a duration: {text!r}")\n    units = [u for _, u in parts]\n    if len(set(units)) != len(units):\n        raise ValueError(f"a unit repeats in {text!r}")\n    return sum(int(n) * UNITS[u] for n, u in parts)\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
