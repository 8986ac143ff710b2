def parse_duration(text: str) -> int:
    """Seconds in a duration like '1h30m'."""
    raise NotImplementedError
