#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('cache.py', 'class LRUCache:\n', 'from collections import OrderedDict\n\n\nclass LRUCache:\n'),
    ('cache.py', '    def __init__(self, capacity: int) -> None:\n        raise NotImplementedError\n', '    def __init__(self, capacity: int) -> None:\n        if capacity < 1:\n            raise ValueError("capacity must be at least 1")\n        self.capacity = capacity\n        self._data: OrderedDict = OrderedDict()\n\n    def get(self, key):\n        if key not in self._data:\n            return None\n        self._data.move_to_end(key)\n        return self._data[key]\n\n    def put(self, key, value) -> None:\n        if key in self._data:\n            self._data.move_to_end(key)\n        elif len(self._data) >= self.capacity:\n            self._data.popitem(last=False)\n        self._data[key] = value\n\n    def __len__(self) -> int:\n        return len(self._data)\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
