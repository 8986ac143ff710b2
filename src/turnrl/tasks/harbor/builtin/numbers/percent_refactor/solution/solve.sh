#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('report.py', 'def summary(passed: int, failed: int, skipped: int) -> str:\n', 'def percent(part: float, whole: float, digits: int = 1) -> float:\n    """`part` as a percentage of `whole`, rounded to `digits` places; 0.0 when `whole` is 0."""\n    return round(100 * part / whole, digits) if whole else 0.0\n\n\ndef summary(passed: int, failed: int, skipped: int) -> str:\n'),
    ('report.py', '    total = passed + failed + skipped\n    p = round(100 * passed / total, 1) if total else 0.0\n    f = round(100 * failed / total, 1) if total else 0.0\n    s = round(100 * skipped / total, 1) if total else 0.0\n    return f"passed {p}%, failed {f}%, skipped {s}%"\n', '    total = passed + failed + skipped\n    p = percent(passed, total)\n    f = percent(failed, total)\n    s = percent(skipped, total)\n    return f"passed {p}%, failed {f}%, skipped {s}%"\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
