"""A rollout engine over HTTP inference servers: `turnrl serve`, SGLang or vLLM.

    engine = ServerEngine(["http://10.0.0.2:8000", "http://10.0.0.3:8000"], cfg.rollout.server,
                          eos_ids=..., vocab_size=..., weights=actor_state_dict, weights_dir="runs/x/w")
    gen = engine.generate(prompt_ids, params, max_new_tokens_per_row)   # rows A,A,B,B
    engine.sync_weights(version)     # write runs/x/w/v<version>, every server loads it, versions checked

Token in, token out: prompts go as token ids and the sampled ids come back verbatim (vLLM's and
SGLang's `return_token_ids`, or vLLM's "token_id:N" tokens), never as text to re-tokenise.

One `generate` becomes several OpenAI-style `/v1/completions` requests: rows are grouped by their
token budget (an OpenAI request has one `max_tokens`; multi-turn episodes have one budget each),
split so every server gets work, and sent concurrently from a thread pool to the least-loaded
server. A request that meets a connection error, a timeout or a 5xx is retried on the next server.
Each response's `policy_version` must equal the last synced version: a server that lags would
make the trainer learn from another policy's samples without knowing it.

A server that fails is routed around and, where it is the engine's own child, brought back:

- the run's own `turnrl serve` child (no `rollout.server.urls`) that died (SIGKILL, the OOM
  killer) is started again on its port, loaded with the trainer's current weights, and what was in
  flight is sent again: `restarts` counts it. A child that cannot start again stops the run with
  its log's tail;
- an external server that stops answering is marked down: requests go to the others, and a weight
  sync it misses leaves it stale, so it serves nothing until it has loaded the current version
  (tried again at each `generate`, at most every `DOWN_RETRY_S`). Only when every server is gone
  does the run stop.

Every generation row comes from exactly one answered request: a request is sent again only when
no answer of it was read, so nothing is lost or sampled twice (`retried` counts the re-sends, and
`counters()` reports them as `rollout/server/*` metrics).

Every request carries the servers' key (`rollout.server.api_key`, else $TURNRL_API_KEY; the child
server's own key for the child), and requests are cut to fit what each server's /health
advertises under "limits" (rows and tokens per request), so training never trips them. turnrl
serve takes only increasing versions: a re-sync of the version a server already holds (a resume,
an evaluation's version 0) loads under the server's next version, and the engine maps that
server's reports back (`offset`).

The modules, one role each:

- `engine`: `ServerEngine`, the `RolloutEngine`: plans requests, gathers rows, checks versions;
- `router`: `ServerRouter`, which server takes a request, failover, servers down and stale;
- `keeper`: `ChildKeeper`, the run's own server process, started again when it dies;
- `weights`: `WeightSyncer`, the policy version: weights written, loaded everywhere, checked;
- `probe`: `ServerProbe`, start-up checks (health, model, limits) and version reads;
- `wire`: the requests' plan, bodies and answers as pure functions.
"""

from turnrl.rollout.server.engine import ServerEngine
from turnrl.rollout.server.router import DOWN_RETRY_S
from turnrl.rollout.server.wire import Request, ServerError, choice_token_ids, finish_reason, plan_requests

__all__ = [
    "DOWN_RETRY_S",
    "Request",
    "ServerEngine",
    "ServerError",
    "choice_token_ids",
    "finish_reason",
    "plan_requests",
]
