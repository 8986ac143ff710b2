def count_vowels(text: str) -> int:
    """How many of the letters of `text` are vowels."""
    raise NotImplementedError
