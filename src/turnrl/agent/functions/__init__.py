"""Agents written as functions against the OpenAI API (`rollout.agent.entrypoint`, docs/agent-programs.md):
`entrypoint` loads one and reads what it returns; `rollout.FunctionAgentRollout` runs its episodes
through the gateway (`turnrl.agent.gateway`) and builds the rollout batch."""
