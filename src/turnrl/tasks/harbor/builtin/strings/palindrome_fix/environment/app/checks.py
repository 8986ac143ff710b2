def is_palindrome(text: str) -> bool:
    """True when `text` reads the same backwards, ignoring case and punctuation."""
    kept = [ch for ch in text if ch.isalnum()]
    return kept == kept[::-1]
