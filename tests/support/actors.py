"""A tiny-random actor and a small agent-like batch (two prompts, two samples each, responses of
different lengths with advantages), for tests of the actor's passes."""

import numpy as np
import torch

from turnrl.batch import Batch
from turnrl.config.schema import ActorConfig, ModelConfig, RolloutConfig
from turnrl.rollout.base import Generation, assemble
from turnrl.tensors import left_pad
from turnrl.workers.actor import Actor


def make_actor(**actor_kw) -> Actor:
    return Actor(ActorConfig(**actor_kw), ModelConfig(path="tiny-random"), RolloutConfig(n=2), seed=0)


def agent_like_batch(tokenizer, n=2):
    prompts = [tokenizer("What is 2 + 2?")["input_ids"], tokenizer("Hi")["input_ids"]]
    ids, mask = left_pad(prompts, tokenizer.pad_token_id)
    g = torch.Generator().manual_seed(1)
    responses = [torch.randint(5, 1000, (k,), generator=g).tolist() for k in (4, 6, 3, 5)]
    out = assemble(
        Batch(tensors={"input_ids": ids, "attention_mask": mask}),
        Generation(responses, [[0.0] * len(r) for r in responses], ["stop"] * 4),
        n,
        tokenizer.pad_token_id,
        6,
    )
    out["uid"] = np.array(["a", "a", "b", "b"], dtype=object)
    out["advantages"] = torch.tensor([[1.0] * 6, [-1.0] * 6, [0.5] * 6, [-0.5] * 6]) * out["response_mask"]
    return out
