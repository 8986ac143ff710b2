def evaluate(expr: str) -> int:
    """The value of `expr`: integers with + - *, * binding tighter."""
    tokens, number = [], ""
    for ch in expr:
        if ch.isdigit():
            number += ch
            continue
        if number:
            tokens.append(number)
            number = ""
        if ch in "+-*":
            tokens.append(ch)
        elif not ch.isspace():
            raise ValueError(f"unexpected {ch!r}")
    if number:
        tokens.append(number)
    terms, sign, product = [], 1, None
    for token in tokens:
        if token in "+-":
            terms.append(sign * product)
            sign, product = (1 if token == "+" else -1), None
        elif token == "*":
            continue
        else:
            product = int(token) if product is None else product * int(token)
    terms.append(sign * product)
    return sum(terms)
