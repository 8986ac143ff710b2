def shift(text: str, k: int) -> str:
    """`text` with each letter moved `k` places along the alphabet."""
    out = []
    for ch in text:
        if ch.isalpha():
            out.append(chr(ord(ch) + k))
        else:
            out.append(ch)
    return "".join(out)
