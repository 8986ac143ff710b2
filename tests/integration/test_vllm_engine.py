"""The colocated vLLM engine against the trainer's own log-probs (needs vLLM and a CUDA GPU).

Skipped where vLLM is not installed (the CI machines): `pip install 'turnrl[vllm]'` on a GPU box,
then `pytest -m gpu tests/integration/test_vllm_engine.py`."""

import pytest
import torch

pytestmark = pytest.mark.gpu
vllm = pytest.importorskip("vllm")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM needs a CUDA device")
def test_vllm_token_in_token_out_and_weight_sync(tmp_path):
    from turnrl.models.loader import load_model
    from turnrl.rollout.base import SamplingParams
    from turnrl.rollout.hf import eos_ids
    from turnrl.rollout.vllm_engine import VLLMEngine

    model, tok = load_model("tiny-random", torch.device("cuda"), dtype="float32", seed=0)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    engine = VLLMEngine(str(tmp_path / "m"), eos_ids(model, tok), model.state_dict, dtype="float32")
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    out = engine.generate(
        prompts, SamplingParams(max_new_tokens=8, n=2, temperature=1.0, seed=1), [8, 3, 8, 5]
    )
    assert all(len(r) <= b for r, b in zip(out.response_ids, [8, 3, 8, 5], strict=True))
    for row, (ids, lps) in enumerate(zip(out.response_ids, out.log_probs, strict=True)):
        prompt = prompts[row // 2]
        with torch.no_grad():
            logits = (
                model(torch.tensor([prompt + ids], device="cuda")).logits[0, len(prompt) - 1 : -1].float()
            )
        want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids, device="cuda")[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(lps), want.cpu(), atol=1e-3)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    engine.sync_weights(1)
    assert engine.generate(prompts, SamplingParams(max_new_tokens=4, seed=1)).policy_version == 1
