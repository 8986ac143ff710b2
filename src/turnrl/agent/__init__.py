"""Agent mode: multi-turn episodes in which the model calls tools (docs/agent-loop.md).

`rollout.AgentRollout` is the entry point; `loop` runs the turns, `actions` parses what the
model wrote, `observation` / `chat_template` turn tool output into tokens, `executor` runs a
turn's tool calls concurrently, `assemble` builds the rollout Batch, `tools/` holds the tools.
"""
