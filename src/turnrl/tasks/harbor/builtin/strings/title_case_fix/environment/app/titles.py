SMALL_WORDS = {"a", "an", "and", "of", "the", "in", "on", "to"}


def title_case(title: str) -> str:
    """`title` with its words capitalised, small words kept lower case."""
    words = title.lower().split()
    out = [w if w in SMALL_WORDS else w.capitalize() for w in words]
    return " ".join(out)
