"""Harbor's task format, read and verified for sandbox sessions: `HarborTask` (spec.py), the reader
with its one-line refusals (reader.py, dockerfile.py), the verifier's reward (reward.py), a trusted
task played in a temporary folder (local.py) and scripted demonstrations (demos.py). The built-in
tasks in this format are `turnrl.tasks.harbor`; the episode's session is `turnrl.agent.workspaces`'s."""
