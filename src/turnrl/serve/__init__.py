"""`turnrl serve`: a model behind an OpenAI-style HTTP API, usable as a rollout engine.

- `app`: the FastAPI app (`/v1/completions` over token ids, `/update_weights_from_disk`, `/health`).
- `cli`: the `turnrl serve` command.
- `launcher`: `ServeProcess`, a child server for one training run.
- `weights`: the on-disk form of a policy version, written by the trainer and loaded by the server.

The client side is `turnrl.rollout.server.ServerEngine`.
"""
