def encode(text: str) -> str:
    """Run-length code of `text`: 'aaab' -> '3a1b'."""
    raise NotImplementedError


def decode(code: str) -> str:
    """The text of a run-length code."""
    raise NotImplementedError
