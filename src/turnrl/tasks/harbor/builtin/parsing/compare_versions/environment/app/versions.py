def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1 as version `a` is older than, equal to or newer than `b`."""
    raise NotImplementedError
