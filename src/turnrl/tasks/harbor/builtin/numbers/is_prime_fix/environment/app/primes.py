def is_prime(n: int) -> bool:
    """True when `n` is a prime number."""
    d = 2
    while d * d <= n:
        if n % d == 0:
            return False
        d += 1
    return True


def primes_below(limit: int) -> list[int]:
    return [n for n in range(limit) if is_prime(n)]
