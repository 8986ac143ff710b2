def parse_bool(text: str) -> bool:
    """A yes/no setting written as text."""
    raise NotImplementedError
