"""A calculator agent written against the OpenAI API, as any agent would be: the tool is a function
schema, its results go back as `tool` messages, and the reward is whether the final answer holds
the right number. Nothing in it knows turnrl.

    turnrl train calculator_agent rollout.multi_turn.enable=false \
        rollout.agent.entrypoint=tests/support/agents/calculator_agent.py:run
"""

from __future__ import annotations

import ast
import json
import operator
import re

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression exactly, e.g. '4821 * 739'.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "+ - * / and parentheses"}},
                "required": ["expression"],
            },
        },
    }
]
MAX_TURNS = 3
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculate(expression: str) -> str:
    """+ - * / over numbers, from the syntax tree (no eval); an error is text the model reads."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError("only numbers and + - * /")

    try:
        return str(value(ast.parse(expression, mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError) as err:
        return f"error: {err}"


def run(client, model, row):
    messages = list(row["prompt"])
    tool_calls = 0
    answer = ""
    for _ in range(MAX_TURNS):
        response = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=16)
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            answer = message.content or ""
            break
        for call in message.tool_calls:
            tool_calls += 1
            try:
                expression = json.loads(call.function.arguments).get("expression", "")
            except (json.JSONDecodeError, AttributeError):
                expression = ""
            messages.append({"role": "tool", "tool_call_id": call.id, "content": calculate(str(expression))})
    numbers = re.findall(r"-?\d+", answer)
    correct = bool(numbers) and numbers[-1] == str(row["ground_truth"])
    return {"reward": 1.0 if correct else 0.0, "tool_calls": tool_calls, "answered": float(bool(answer))}
