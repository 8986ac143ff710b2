def inv(mapping: dict) -> dict:
    """Each value of `mapping` -> the sorted list of keys that map to it."""
    out: dict = {}
    for key, value in mapping.items():
        out.setdefault(value, []).append(key)
    return {value: sorted(keys) for value, keys in out.items()}
