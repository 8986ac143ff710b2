"""tinker-cookbook's RL loop asks each sample of a group as its own request: the service's batched
sampling (`tinker/sampling.py`) prefills each distinct prompt once for all its requests, and every
request still gets its own prompt's samples, in its own budget."""

from __future__ import annotations

import copy

import numpy as np
import torch

from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.tinker.backbone import Backbone
from turnrl.tinker.protobuf import pb
from turnrl.tinker.sampling import SamplePlan, sample_many, shared_prompts

A, B = [504, 3575, 282, 4649], [511, 3575, 282, 4648, 77]


def plan(prompt: list[int], budget: int = 6, n: int = 1) -> SamplePlan:
    params = SamplingParams(n=n, max_new_tokens=budget, temperature=1.0)
    return SamplePlan(prompt, params, None, False, None)


def decoded(answer: bytes) -> list[tuple[list[int], list[float]]]:
    """A `SampleResponse`'s sequences: (tokens, log-probs) each."""
    msg = pb().SampleResponse.FromString(answer)
    return [
        (np.frombuffer(s.tokens, np.int32).tolist(), np.frombuffer(s.logprobs, np.float32).tolist())
        for s in msg.sequences
    ]


def test_the_jobs_of_one_prompt_are_put_together_by_how_many_share_it():
    assert shared_prompts([plan(A), plan(B), plan(A), plan(B)]) == [([0, 2, 1, 3], 2)]
    assert shared_prompts([plan(A), plan(A), plan(B)]) == [([0, 1], 2), ([2], 1)]
    assert shared_prompts([plan(A), plan(B)]) == [([0, 1], 1)]


def test_each_distinct_prompt_is_prefilled_once_and_each_request_gets_its_own(tiny):
    model, tok = tiny
    base = Backbone(copy.deepcopy(model), tok, "tiny-random", "")
    engine = HFEngine(base.model, tok, batch_size=64, share_prefix=False)
    budgets = [3, 5, 4, 6, 2, 7, 5]  # A asked 4 times, B 3 times: two engine calls
    jobs = [plan(p, m, n=2) for p, m in zip([A, B, A, B, A, B, A], budgets, strict=True)]
    engine.work.take()
    answers = [decoded(a) for a in sample_many(base, engine, None, jobs)]
    work = engine.work.take()
    assert work["engine/prefill_new_tokens"] == len(A) + len(B)  # not 4 and 3 times
    for job, answer, budget in zip(jobs, answers, budgets, strict=True):
        assert len(answer) == 2
        for tokens, logprobs in answer:
            assert 1 <= len(tokens) <= budget
            ids = torch.tensor([job.prompt + tokens])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(job.prompt) - 1 : -1]
            want = logits.log_softmax(-1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)
            torch.testing.assert_close(torch.tensor(logprobs), want, atol=1e-4, rtol=0)
