def truncate(text: str, width: int) -> str:
    """`text` cut to at most `width` characters, ending in '...' when cut."""
    raise NotImplementedError
