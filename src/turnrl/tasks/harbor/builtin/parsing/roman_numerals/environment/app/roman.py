def from_roman(text: str) -> int:
    """The value of a Roman numeral."""
    raise NotImplementedError
