#!/bin/bash
# Reference solution: a patch of unique strings.
set -euo pipefail
cd "${TURNRL_WORKSPACE:-/app}"
python3 - <<'EOF'
from pathlib import Path

EDITS = [
    ('rle.py', 'def encode(text: str) -> str:\n    """Run-length code of `text`: \'aaab\' -> \'3a1b\'."""\n    raise NotImplementedError\n\n', 'import re\nfrom itertools import groupby\n\n\ndef encode(text: str) -> str:\n    """Run-length code of `text`: \'aaab\' -> \'3a1b\'."""\n    return "".join(f"{len(list(run))}{ch}" for ch, run in groupby(text))\n\n'),
    ('rle.py', '    """The text of a run-length code."""\n    raise NotImplementedError\n', '    """The text of a run-length code."""\n    return "".join(ch * int(n) for n, ch in re.findall(r"(\\d+)(\\D)", code))\n'),
]
for path, old, new in EDITS:
    text = Path(path).read_text()
    assert text.count(old) == 1, f"{path}: the text to replace is not there once"
    Path(path).write_text(text.replace(old, new))
EOF
