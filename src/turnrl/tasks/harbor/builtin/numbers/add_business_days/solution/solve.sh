#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('workdays.py', 'def add_business_days(start: str, days: int) -> str:\n    """The ISO date `days` working days after `start`."""\n    raise NotImplementedError\n', 'from datetime import date, timedelta\n\n\ndef add_business_days(start: str, days: int) -> str:\n    """The ISO date `days` working days after `start`."""\n    day = date.fromisoformat(start)\n    while day.weekday() >= 5:\n        day += timedelta(days=1)\n    while days > 0:\n        day += timedelta(days=1)\n        if day.weekday() < 5:\n            days -= 1\n    return day.isoformat()\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
