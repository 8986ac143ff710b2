def chunk(items: list, size: int) -> list[list]:
    """`items` in consecutive pieces of `size`; the last may be shorter."""
    if size < 1:
        raise ValueError("size must be positive")
    return [items[i : i + size] for i in range(0, len(items) - size + 1, size)]
