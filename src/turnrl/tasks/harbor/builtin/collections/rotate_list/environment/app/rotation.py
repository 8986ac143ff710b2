def rotate(items: list, k: int) -> list:
    """`items` rotated right by `k`."""
    raise NotImplementedError
