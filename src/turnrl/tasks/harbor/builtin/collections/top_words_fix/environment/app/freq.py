from collections import Counter


def top_words(words: list[str], k: int) -> list[tuple[str, int]]:
    """The `k` most frequent words and their counts, ties alphabetical."""
    counts = Counter(words)
    ranked = sorted(counts.items(), key=lambda pair: (pair[1], pair[0]))
    return ranked[:k]
