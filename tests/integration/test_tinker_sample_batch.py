"""`turnrl tinker serve` batches the sample requests that wait together: driven by the unmodified
`tinker` SDK, concurrent samples are answered by fewer engine calls than requests, and every answer is
still its own prompt's (each token's log-prob equals a plain forward pass of the adapted model over
that prompt), with a seeded request drawn alone, as reproducible as before."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import torch

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

from tests.support.tinker_server import Served, plain_logprobs, served_under  # noqa: E402
from turnrl.models.loader import load_model  # noqa: E402

KEY = "tml-" + secrets.token_hex(8)
BASE = "tiny-random"
PROMPTS = [[504 + 7 * i, 3575, 282, 4649 - i, 314][: 3 + i % 3] for i in range(8)]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served_under(BASE, tmp_path_factory.mktemp("tinker_state"), KEY, poll_wait_s=0.01) as running:
        yield running


def health(served: Served) -> dict:
    return httpx.get(f"{served.url}/health", headers={"X-API-Key": KEY}, timeout=10).json()


def test_waiting_samples_run_together_and_each_answer_is_its_own(served):
    sdk = tinker.ServiceClient(base_url=served.url, api_key=KEY)
    try:
        client = sdk.create_lora_training_client(base_model=BASE, rank=4, seed=0).result(timeout=60)
        sampler = client.save_weights_and_get_sampling_client().result(timeout=60)
        before = health(served)
        # the worker is busy with a forward pass while the samples arrive, so they wait together
        busy = client.forward(
            [types.Datum(model_input=types.ModelInput.from_ints(list(range(5, 300))),
                         loss_fn_inputs={"target_tokens": list(range(6, 301))})],
            "cross_entropy",
        )  # fmt: skip
        budgets = [4, 6] * 4  # rows of one engine call keep their own budgets
        futures = [
            sampler.sample(
                types.ModelInput.from_ints(p), 2, types.SamplingParams(max_tokens=m, temperature=1.0)
            )
            for p, m in zip(PROMPTS, budgets, strict=True)
        ]
        seeded = types.SamplingParams(max_tokens=5, temperature=1.0, seed=3)
        alone = sampler.sample(types.ModelInput.from_ints(PROMPTS[0]), 2, seeded)
        busy.result(timeout=60)
        results = [f.result(timeout=120) for f in futures]
        first_seeded = alone.result(timeout=60)
        after = health(served)
        requests = after["sample_requests"] - before["sample_requests"]
        calls = after["sample_engine_calls"] - before["sample_engine_calls"]
        assert requests == 9 and calls < requests  # batched, the seeded one among the calls
        # every answer is its own prompt's continuation under the adapted model
        base, _ = load_model(BASE, torch.device("cpu"), seed=0)
        base.eval()
        for prompt, budget, result in zip(PROMPTS, budgets, results, strict=True):
            assert len(result.sequences) == 2
            for seq in result.sequences:
                assert 1 <= len(seq.tokens) <= budget
                np.testing.assert_allclose(seq.logprobs, plain_logprobs(base, prompt, seq.tokens), atol=1e-4)
        # a seeded request draws alone: the same seed again gives the same tokens
        again = sampler.sample(types.ModelInput.from_ints(PROMPTS[0]), 2, seeded).result(timeout=60)
        assert [s.tokens for s in again.sequences] == [s.tokens for s in first_seeded.sequences]
    finally:
        sdk.close("success").result(timeout=30)
