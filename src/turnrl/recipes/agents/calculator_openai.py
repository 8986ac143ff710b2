"""The calculator agent written as any OpenAI-API agent would be, and trained by turnrl as it is.

    turnrl train calculator_agent model.path=smollm2-135m-instruct \
        rollout.agent.entrypoint=examples/agents/calculator_openai.py:run \
        rollout.agent.chat_template=examples/templates/chatml_tools.jinja

The tool is a function schema; the model calls it in its own tool-call format, the SDK hands back
`tool_calls`, the result goes back as a `tool` message, and the episode ends when the model answers
without a call. The reward is the built-in calculator task's rule, on the OpenAI path: 1 for the
right product in the final answer, 0.5 for a right tool call without it (a GRPO group then differs
before the model has learned to copy the result), 0 otherwise. Nothing here knows turnrl: the row
is the task's (`extra_info` holds the two factors and the worked example's product).
"""

from __future__ import annotations

import ast
import json
import operator
import re
from typing import Any

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
SYSTEM = "You multiply with the calculator tool, then give the product alone as the answer."
MAX_CALLS = 3
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
        result = value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError) as err:
        return f"error: {err}"
    return str(int(result)) if float(result).is_integer() else str(result)


def worked_example(x: int, y: int) -> list[dict[str, Any]]:
    """One exchange shown in the tool format: a 135M model follows a shown turn far more often
    than a described one."""
    call = {"id": "call_0", "type": "function",
            "function": {"name": "calculator", "arguments": json.dumps({"expression": f"{x} * {y}"})}}  # fmt: skip
    return [
        {"role": "user", "content": f"Compute {x} * {y}."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": str(x * y)},
        {"role": "assistant", "content": str(x * y)},
    ]


ANSWER_ALONE = re.compile(r"\s*-?\d+\s*\.?\s*")


def score(answer: str, called_right: bool, calls: int, truth: str) -> dict[str, float]:
    """The episode's reward and the numbers validation reports apart from it:

    acc          the answer's last number is the product (the skill);
    formatted    the answer is one number and nothing else, as the system prompt asks (the form:
                 an echoed expression '4821 * 739' holds numbers but is not formatted);
    called_right some calculator call returned the product;
    calls        calculator calls made.

    Reward: 1 for the right product, 0.5 for a right call without it, else 0. Worked example: the
    answer "4821 * 739" after no call scores acc 0 (last number 739), formatted 0, reward 0."""
    numbers = re.findall(r"-?\d+", answer)
    correct = bool(numbers) and numbers[-1] == truth
    reward = 1.0 if correct else 0.5 if called_right else 0.0
    # every number shows in the training metrics as agent/fn/<name> and in validation as val/<name>/mean
    return {"reward": reward, "acc": float(correct), "formatted": float(bool(ANSWER_ALONE.fullmatch(answer))),
            "called_right": float(called_right), "calls": float(calls)}  # fmt: skip


def run(client: Any, model: str, row: dict[str, Any]) -> dict[str, float]:
    info = row["extra_info"]
    x, y = (int(v) for v in info["example"].split("*"))
    truth = str(row["ground_truth"])
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        *worked_example(x, y),
        {"role": "user", "content": f"Compute {info['a']} * {info['b']}."},
    ]
    called_right, answer, calls = False, "", 0
    for _ in range(MAX_CALLS):
        reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=40)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            answer = message.content or ""
            break
        for call in message.tool_calls:
            try:
                expression = str(json.loads(call.function.arguments).get("expression", ""))
            except (json.JSONDecodeError, AttributeError):
                expression = ""
            result = calculate(expression)
            calls += 1
            called_right = called_right or result == truth
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return score(answer, called_right, calls, truth)


def scripted(row: dict[str, Any]) -> dict[str, float]:
    """The scripted baseline, no model: the tool called with the question's two numbers, its result
    given as the answer. What a policy that learned the protocol perfectly scores."""
    info = row["extra_info"]
    result = calculate(f"{info['a']} * {info['b']}")
    truth = str(row["ground_truth"])
    return score(result, result == truth, 1, truth)


def echo(row: dict[str, Any]) -> dict[str, float]:
    """A shortcut baseline: no call, the question's expression echoed as the answer (what most of the
    untrained model's wrong episodes do)."""
    info = row["extra_info"]
    return score(f"{info['a']} * {info['b']}", False, 0, str(row["ground_truth"]))
