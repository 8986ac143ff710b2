def wrap(text: str, width: int) -> list[str]:
    """The lines of `text` wrapped at `width` characters."""
    raise NotImplementedError
