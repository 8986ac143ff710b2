def clamp(value: float, low: float, high: float) -> float:
    """`value`, or the nearer bound when it lies outside [low, high]."""
    raise NotImplementedError
