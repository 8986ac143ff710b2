#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('vector.py', 'class Vector:\n', 'import math\n\n\nclass Vector:\n'),
    ('vector.py', '        self.y = y\n', '        self.y = y\n\n    def __add__(self, other: "Vector") -> "Vector":\n        return Vector(self.x + other.x, self.y + other.y)\n\n    def __mul__(self, k: float) -> "Vector":\n        return Vector(self.x * k, self.y * k)\n\n    def __eq__(self, other: object) -> bool:\n        return isinstance(other, Vector) and (self.x, self.y) == (other.x, other.y)\n\n    def __hash__(self) -> int:\n        return hash((self.x, self.y))\n\n    def __repr__(self) -> str:\n        return f"Vector({self.x}, {self.y})"\n\n    def length(self) -> float:\n        return math.hypot(self.x, self.y)\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
