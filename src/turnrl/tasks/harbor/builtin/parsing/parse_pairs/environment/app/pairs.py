def parse_pairs(text: str) -> dict[str, str]:
    """`a=1; b = 2` -> {"a": "1", "b": "2"}."""
    raise NotImplementedError
