def add_business_days(start: str, days: int) -> str:
    """The ISO date `days` working days after `start`."""
    raise NotImplementedError
