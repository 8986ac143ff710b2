"""Agents written against the OpenAI API, as `rollout.agent.entrypoint` takes them."""
