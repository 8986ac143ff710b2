#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('shapes.py', '\n    def describe(self) -> str:\n        return (\n            f"{self.width}x{self.height} rectangle: area {self.width * self.height}, "\n            f"perimeter {2 * (self.width + self.height)}"\n        )\n', '\n    @property\n    def area(self) -> float:\n        return self.width * self.height\n\n    @property\n    def perimeter(self) -> float:\n        return 2 * (self.width + self.height)\n\n    def describe(self) -> str:\n        return f"{self.width}x{self.height} rectangle: area {self.area}, perimeter {self.perimeter}"\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
