def days_between(a: str, b: str) -> int:
    """Days between two ISO dates, order ignored."""
    raise NotImplementedError
