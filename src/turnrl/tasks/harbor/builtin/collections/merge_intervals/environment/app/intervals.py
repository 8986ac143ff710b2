def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of `intervals` as sorted, disjoint intervals."""
    raise NotImplementedError
