"""Small text helpers."""

import re


def slugify(text: str) -> str:
    """A URL slug of `text`."""
    return re.sub(r"[^a-z0-9]", "-", text.lower())
