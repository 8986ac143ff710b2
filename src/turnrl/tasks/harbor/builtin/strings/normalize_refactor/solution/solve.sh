#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('cleaning.py', 'def clean_name(name: str) -> str:\n    """A person\'s name with single spaces, each word capitalised."""\n    text = " ".join(name.split())\n    return text.title()\n\n', 'def normalize_space(text: str) -> str:\n    """`text` with each run of whitespace made one space and the ends stripped."""\n    return " ".join(text.split())\n\n\ndef clean_name(name: str) -> str:\n    """A person\'s name with single spaces, each word capitalised."""\n    return normalize_space(name).title()\n\n'),
    ('cleaning.py', '    """A sentence with single spaces, its first letter capitalised and a final full stop."""\n    text = " ".join(sentence.split())\n    if not text:\n', '    """A sentence with single spaces, its first letter capitalised and a final full stop."""\n    text = normalize_space(sentence)\n    if not text:\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
