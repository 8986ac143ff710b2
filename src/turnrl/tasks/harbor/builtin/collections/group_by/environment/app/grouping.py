from collections.abc import Callable, Hashable, Iterable


def group_by(items: Iterable, key: Callable[[object], Hashable]) -> dict:
    """`items` grouped by `key`."""
    raise NotImplementedError
