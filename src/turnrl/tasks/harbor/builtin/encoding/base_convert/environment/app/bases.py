def to_base(n: int, base: int) -> str:
    """`n` written in `base`."""
    raise NotImplementedError
