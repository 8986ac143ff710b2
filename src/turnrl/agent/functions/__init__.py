"""Agents written as functions against the OpenAI API (`rollout.agent.entrypoint`, docs/agent-programs.md):
`entrypoint` loads one and reads what it returns; `process` runs an agent as a process, in any
language (`rollout.agent.command`); `configured` picks the one `rollout.agent` names;
`rollout.FunctionAgentRollout` runs its episodes through the gateway (`turnrl.agent.gateway`) and
builds the rollout batch."""
