"""How often a plain OpenAI-SDK agent's episodes drift from what the gateway recorded, on a real
model, and what the fork rule then keeps for training.

    python benchmarks/agent_drift.py --model smollm2-135m-instruct --episodes 32
    python benchmarks/agent_drift.py --model tiny-random --episodes 64

The agent (tests/support/agents/two_calls.py) is the issue's reproduction: a first call with tools
and `max_tokens=12`, the reply appended as the SDK returns it, a user message, a second call. A
second agent (`--strip`) does what many agents do to a reply, `content.strip()`, which rewrites
the history whenever the model ended its reply with whitespace. Printed per agent: episodes that
drifted, forks, calls served untrained, rows trained on, and the reasons the gateway gave.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the test agents live in tests/support/agents

from agent_proxy import rows_batch  # noqa: E402

from turnrl.agent.functions.rollout import FunctionAgentRollout  # noqa: E402
from turnrl.config import load_config  # noqa: E402
from turnrl.models.loader import load_model  # noqa: E402
from turnrl.rollout.base import SamplingParams  # noqa: E402
from turnrl.rollout.hf import HFEngine  # noqa: E402

AGENT = HERE.parent / "tests" / "support" / "agents" / "two_calls.py"
STRIP_AGENT = HERE / "_strip_agent.py"


def measure(model: Any, tok: Any, agent: str, episodes: int, budget: int, seed: int) -> dict[str, Any]:
    cfg = load_config(
        None,
        [
            f"rollout.agent.entrypoint={agent}",
            f"data.max_response_length={budget}",
            "rollout.agent.timeout_s=600",
        ],
    )
    torch.manual_seed(seed)
    with FunctionAgentRollout(HFEngine(model, tok), tok, cfg, tok.pad_token_id) as rollout:
        batch, metrics = rollout.generate(
            rows_batch(tok, episodes), SamplingParams(max_new_tokens=budget, n=1, temperature=1.0)
        )
        reasons = dict(rollout.drift_reasons)
    return {
        "episodes": episodes,
        "drifted": metrics["agent/template_drift"],
        "forks": metrics["agent/template_forks"],
        "untrained_calls": metrics["agent/untrained_calls/mean"] * episodes,
        "calls": metrics["agent/calls/mean"] * episodes,
        "rows": len(batch),
        "reasons": reasons,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--episodes", type=int, default=32)
    p.add_argument("--budget", type=int, default=64, help="data.max_response_length")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    model, tok = load_model(a.model, torch.device("cpu"), "float32", "", 0)
    print(f"model {a.model}, {a.episodes} episodes per agent, response budget {a.budget}")
    for name, agent in (("two_calls", f"{AGENT}:run"), ("two_calls + strip()", f"{STRIP_AGENT}:run")):
        print(name, json.dumps(measure(model, tok, agent, a.episodes, a.budget, a.seed)))


if __name__ == "__main__":
    main()
