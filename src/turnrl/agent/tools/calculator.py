"""Exact arithmetic for agents, evaluated from the syntax tree: no `eval`, no names, no attributes.

Integers stay exact (Python big ints), so `48213 * 7391` is right to the last digit: the point of
the tool is arithmetic a small model cannot do in its head. Powers and results are bounded so
that a hostile expression (`9**9**9`) is refused instead of eating the CPU.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from typing import Any

from turnrl.agent.tools.base import ToolResult, text_parameter

MAX_CHARS = 300
MAX_NODES = 100
MAX_RESULT_BITS = 4096  # about 1,233 decimal digits
MAX_EXPONENT = 4096

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "floor": math.floor,
    "ceil": math.ceil,
    "gcd": math.gcd,
}
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d{3}\b)")


class CalcError(ValueError):
    """An expression the calculator refuses or cannot evaluate; the message says why."""


def _normalise(expression: str) -> str:
    text = expression.strip().rstrip("=").strip()
    # the ways people (and models) write operators that Python spells differently
    text = text.replace("×", "*").replace("÷", "/").replace("−", "-").replace("^", "**")
    return _DIGIT_COMMA.sub("", text)  # 1,234,567 -> 1234567


def _check_size(value: Any) -> Any:
    if isinstance(value, int) and value.bit_length() > MAX_RESULT_BITS:
        raise CalcError("result too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalcError("result is not a finite number")
    return value


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise CalcError(f"exponent {right} is too large (limit {MAX_EXPONENT})")
            if (
                isinstance(left, int)
                and isinstance(right, int)
                and left.bit_length() * right > MAX_RESULT_BITS
            ):
                raise CalcError("result too large")
        try:
            return _check_size(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalcError("division by zero") from None
        except OverflowError:
            raise CalcError("result too large") from None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        args = [_eval(a) for a in node.args]
        try:
            return _check_size(_FUNCTIONS[node.func.id](*args))
        except (TypeError, ValueError) as err:
            raise CalcError(f"{node.func.id}: {err}") from None
    raise CalcError(
        f"unsupported syntax: {ast.dump(node)[:40]}"
        if not isinstance(node, ast.Name)
        else f"unknown name '{node.id}'"
    )


def evaluate(expression: str) -> int | float:
    """Value of an arithmetic expression: + - * / // % ** (or ^), parentheses and a few functions."""
    text = _normalise(expression)
    if not text:
        raise CalcError("empty expression")
    if len(text) > MAX_CHARS:
        raise CalcError(f"expression longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalcError(f"not an arithmetic expression: {text[:60]!r}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalcError(f"expression has more than {MAX_NODES} parts")
    return _eval(tree)


def format_number(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.12g}"
    return str(value)


class Calculator:
    """The `calculator` tool."""

    name = "calculator"
    description = "Evaluate an arithmetic expression exactly, e.g. '48213 * 7391' or '(17 + 5) ** 3 / 11'."
    parameters = text_parameter("expression", "arithmetic expression: + - * / // % ** and parentheses")
    xml_argument = "expression"

    def __init__(self, tag: str = "calculator", obs_tag: str = "result"):
        self.tag, self.obs_tag = tag, obs_tag

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        expression = arguments.get("expression")
        if not isinstance(expression, str):
            return ToolResult("error: 'expression' must be a string", error=True)
        try:
            return ToolResult(format_number(evaluate(expression)))
        except CalcError as err:
            return ToolResult(f"error: {err}", error=True)
