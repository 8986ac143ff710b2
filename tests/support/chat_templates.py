"""Minimal chat templates: one that renders tool lists and tool calls, one that renders neither
(SmolLM2's own; the embedded model and tiny-random are loaded with a version that renders tools)."""

TOOL_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\nTools: ' + (tools | map(attribute='function') "
    "| map(attribute='name') | join(', ')) + '<|im_end|>\\n' }}{% endif %}"
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] }}"
    "{% for c in m.get('tool_calls') or [] %}{{ '<tool_call>' + (c['function'] | tojson) + '</tool_call>' }}{% endfor %}"
    "{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

FORGETFUL_TEMPLATE = TOOL_TEMPLATE.replace(
    "'<|im_start|>' + m['role'] + '\\n' + m['content'] }}",
    "'<|im_start|>' + m['role'] + '\\n' }}{% if m['role'] != 'assistant' or loop.last %}{{ m['content'] }}{% endif %}",
)
"""TOOL_TEMPLATE, but an assistant message's content is shown only while it is the last message (as
templates that drop earlier turns' reasoning do): rendering more messages rewrites earlier ones."""
assert FORGETFUL_TEMPLATE != TOOL_TEMPLATE

NO_TOOLS_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""ChatML without tools: a tool list sent with it is refused, not silently dropped."""
