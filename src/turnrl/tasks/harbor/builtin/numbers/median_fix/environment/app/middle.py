def median(values: list[float]) -> float:
    """The middle value of `values`."""
    if not values:
        raise ValueError("median of no values")
    return values[len(values) // 2]
