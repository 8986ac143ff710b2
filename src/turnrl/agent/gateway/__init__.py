"""The agent gateway: an OpenAI-compatible chat server in front of the run's rollout engine that
records each episode's exact trajectory (`server.Gateway`; the recording and its drift rule:
`trajectory`; docs/agent-programs.md)."""
