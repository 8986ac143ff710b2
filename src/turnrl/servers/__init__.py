"""turnrl's HTTP services and how a run starts them as child processes.

- `child`: the child-process base (free port, log file, /health, restart once, stop).
- `inference/`: `turnrl serve`, a model as a rollout engine over HTTP.
- `sandbox/`: `turnrl sandbox serve`, code execution for tools and rewards.
- `retriever/`: `turnrl retriever serve`, search over a corpus index.
- `validation`: one-line 4xx messages shared by the services.
"""
