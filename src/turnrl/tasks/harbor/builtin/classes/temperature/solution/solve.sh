#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('temperature.py', 'class Temperature:\n    """A temperature, stored in degrees Celsius."""\n', 'ABSOLUTE_ZERO = -273.15\n\n\nclass Temperature:\n    """A temperature, stored in degrees Celsius."""\n\n    def __init__(self, celsius: float) -> None:\n        if celsius < ABSOLUTE_ZERO:\n            raise ValueError("below absolute zero")\n        self.celsius = celsius\n\n    @property\n    def fahrenheit(self) -> float:\n        return self.celsius * 9 / 5 + 32\n\n    @classmethod\n    def from_fahrenheit(cls, fahrenheit: float) -> "Temperature":\n        return cls((fahrenheit - 32) * 5 / 9)\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
