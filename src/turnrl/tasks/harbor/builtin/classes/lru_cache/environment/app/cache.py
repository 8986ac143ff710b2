class LRUCache:
    """A mapping of bounded size that forgets the least recently used entry first."""

    def __init__(self, capacity: int) -> None:
        raise NotImplementedError
