"""`turnrl serve`: a model behind an OpenAI-style HTTP API, usable as a rollout engine.

- `app`: the FastAPI app (`/v1/completions` over token ids, `/update_weights_from_disk`, `/health`).
- `chat_route`: `/v1/chat/completions`, registered by `app` (`top_logprobs`: its alternatives).
- `common`: what both generation routes share (limits, one-line refusals, sampling checks).
- `batcher`: the worker thread that owns the engine and merges concurrent requests.
- `cli`: the `turnrl serve` command.
- `launcher`: `ServeProcess`, a child server for one training run (`turnrl.servers.child`).

The on-disk form of a policy version, written by the trainer and loaded by the server, is
`turnrl.models.weights_dir`: both sides use it, and the trainer side must not import a server.
The client side is `turnrl.rollout.server.ServerEngine`.
"""
