"""The two-call agent of tests/support/agents/two_calls.py, keeping the first reply as
`content.strip()`: an edit to the history many agents make (benchmarks/agent_drift.py)."""

from tests.support.agents.two_calls import TOOLS  # the same agent, but for the strip()


def run(client, model, row):
    messages = [{"role": "user", "content": "What is 12 * 7?"}]
    first = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=12)
    messages.append({"role": "assistant", "content": (first.choices[0].message.content or "").strip()})
    messages.append({"role": "user", "content": "Are you sure? Answer with the number."})
    second = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=12)
    return 1.0 if "84" in (second.choices[0].message.content or "") else 0.0
