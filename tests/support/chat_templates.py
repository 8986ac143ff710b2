"""A minimal chat template that renders tool lists and tool calls (SmolLM2's renders neither)."""

TOOL_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\nTools: ' + (tools | map(attribute='function') "
    "| map(attribute='name') | join(', ')) + '<|im_end|>\\n' }}{% endif %}"
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] }}"
    "{% for c in m.get('tool_calls') or [] %}{{ '<tool_call>' + (c['function'] | tojson) + '</tool_call>' }}{% endfor %}"
    "{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
