def dedupe(items: list) -> list:
    """`items` without repeats, in order of first appearance."""
    raise NotImplementedError
