import asyncio

import pytest

from turnrl.agent.tools.calculator import CalcError, Calculator, evaluate, format_number


def test_exact_big_integer_arithmetic():
    assert evaluate("48213 * 7391") == 356342283  # 48213 * 7391 = 356,342,283
    assert evaluate("123456789 * 987654321") == 121932631112635269  # beyond float precision, still exact
    assert evaluate("2 ^ 10") == 1024  # ^ read as power, as people write it
    assert evaluate("1,234 + 1") == 1235
    assert evaluate("(17 + 5) * 3 - 4 // 3 % 5") == 65
    assert evaluate("7 × 6 =") == 42
    assert evaluate("sqrt(16) + abs(-2) + max(1, 9)") == 15.0
    assert format_number(evaluate("10 / 4")) == "2.5"
    assert format_number(evaluate("9 / 3")) == "3"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("9 ** 9 ** 9", "too large"),
        ("10 ** 5000", "too large"),
        ("1 / 0", "division by zero"),
        ("__import__('os').system('true')", "unknown name|unsupported"),
        ("(1).__class__", "unsupported"),
        ("x + 1", "unknown name 'x'"),
        ("lambda: 1", "unsupported"),
        ("[1, 2]", "unsupported"),
        ("'a' * 3", "unsupported"),
        ("1 +", "not an arithmetic expression"),
        ("", "empty expression"),
        ("1+" * 200 + "1", "longer than|more than"),
        ("sqrt(-1)", "sqrt"),
    ],
)
def test_refuses_unsafe_or_bad_expressions(expression, message):
    with pytest.raises(CalcError, match=message):
        evaluate(expression)


def test_tool_call_returns_text_and_flags_errors():
    calc = Calculator()
    ok = asyncio.run(calc.call({"expression": "12 * 34"}))
    assert (ok.text, ok.error) == ("408", False)
    bad = asyncio.run(calc.call({"expression": "12 *"}))
    assert bad.error and bad.text.startswith("error:")
    assert asyncio.run(calc.call({"expression": 5})).error
