def luhn_valid(number: str) -> bool:
    """True when `number` passes the Luhn checksum."""
    raise NotImplementedError
