class Tally:
    """Counts how often each item was added."""

    def add(self, item, n: int = 1) -> None:
        raise NotImplementedError

    def count(self, item) -> int:
        raise NotImplementedError

    def most_common(self):
        raise NotImplementedError
