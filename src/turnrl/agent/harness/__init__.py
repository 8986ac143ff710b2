"""Agent harnesses run as they are, as process agents (`rollout.agent.command`), their shell commands
sent to the episode's sandbox session: `session` is a small synchronous client of that session for
any harness; `mini_swe_agent` plugs mini-swe-agent in (an environment class and a launcher).
docs/agent-programs.md, "mini-swe-agent and other harnesses"."""
