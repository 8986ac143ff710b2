"""A plain two-call OpenAI-SDK agent: a short first call with tools, its reply appended as the SDK
returns it, a user message, a second call. Nothing in it knows turnrl."""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


def run(client, model, row):
    messages = [{"role": "user", "content": "What is 12 * 7?"}]
    first = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=12)
    messages.append(first.choices[0].message)
    messages.append({"role": "user", "content": "Are you sure? Answer with the number."})
    second = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=12)
    return 1.0 if "84" in (second.choices[0].message.content or "") else 0.0
