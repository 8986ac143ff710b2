"""The agent gateway: an OpenAI-compatible server in front of the run's rollout engine that records
each episode's exact trajectory (`server.Gateway`; the APIs it speaks, one module each:
`dialects`; what every call does: `calls`; the recording and its drift rule: `trajectory`;
docs/agent-programs.md)."""
