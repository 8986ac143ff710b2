#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('shorten.py', '    raise NotImplementedError\n', '    if width < 3:\n        raise ValueError("width must be at least 3")\n    if len(text) <= width:\n        return text\n    return text[: width - 3] + "..."\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
