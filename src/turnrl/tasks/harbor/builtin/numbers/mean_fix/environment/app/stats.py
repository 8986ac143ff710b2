def mean(values: list[float]) -> float:
    """The arithmetic mean of `values`."""
    return sum(values) // len(values)
