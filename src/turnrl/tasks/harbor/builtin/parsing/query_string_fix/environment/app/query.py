def parse_query(query: str) -> dict[str, list[str]]:
    """`a=1&b=2&a=3` -> {"a": ["1", "3"], "b": ["2"]}."""
    out: dict[str, list[str]] = {}
    for part in query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        out[name] = [value]
    return out
