def summary(passed: int, failed: int, skipped: int) -> str:
    """One line of test results with the share of each outcome."""
    total = passed + failed + skipped
    p = round(100 * passed / total, 1) if total else 0.0
    f = round(100 * failed / total, 1) if total else 0.0
    s = round(100 * skipped / total, 1) if total else 0.0
    return f"passed {p}%, failed {f}%, skipped {s}%"
