#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('stack.py', '    def pop(self):\n        return self._items.pop()\n', '    def pop(self):\n        if not self._items:\n            raise IndexError("empty stack")\n        return self._items.pop()\n'),
    ('stack.py', '    def peek(self):\n        return self._items.pop()\n\n', '    def peek(self):\n        if not self._items:\n            raise IndexError("empty stack")\n        return self._items[-1]\n\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
