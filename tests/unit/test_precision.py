"""`model.compute_dtype`: float32 master weights with bfloat16 compute, within a stated tolerance of
the exact float32 pass; the names and the devices it is refused on."""

import pytest
import torch

from tests.support.actors import agent_like_batch, make_actor
from turnrl.config import load_config
from turnrl.config.checks import ConfigError
from turnrl.models.precision import PrecisionError, bf16_supported, compute_dtype, computing_in
from turnrl.workers.microbatch import trimmed_log_probs

CPU = torch.device("cpu")


def test_auto_is_exact_under_turnrl_exact_and_for_parameters_already_low():
    assert compute_dtype("auto", torch.float32, CPU) is None  # the suite runs with TURNRL_EXACT=1
    assert compute_dtype("float32", torch.float32, CPU) is None
    # bfloat16 parameters compute in bfloat16 anyway: no autocast over them
    assert compute_dtype("bfloat16", torch.bfloat16, CPU) is None


def test_an_explicit_bfloat16_request_names_the_key_where_the_device_lacks_it():
    if bf16_supported(CPU):
        assert compute_dtype("bfloat16", torch.float32, CPU) is torch.bfloat16
    else:
        with pytest.raises(PrecisionError, match=r"model\.compute_dtype=bfloat16"):
            compute_dtype("bfloat16", torch.float32, CPU)


def test_an_unknown_name_is_one_line_before_any_model_loads():
    with pytest.raises(ConfigError, match=r"'model\.compute_dtype' must be one of auto, float32, bfloat16"):
        load_config(None, ["model.path=tiny-random", "model.compute_dtype=fp8"])


def test_bfloat16_compute_stays_within_tolerance_of_float32_and_keeps_float32_gradients():
    """The actor's log-probs and the gradient of a policy-gradient surrogate, tiny-random, float32
    parameters: once exactly, once under bfloat16 autocast. bfloat16 keeps 8 bits of mantissa
    (relative rounding 2^-9 = 0.002 per product); through two layers and a 49k-way log-softmax the
    log-probs (about -3 to -12 here) move by a few hundredths (measured: at most 0.031, mean 0.012) and
    the gradient by half a percent of its norm (measured 0.005)."""
    actor = make_actor()
    batch = agent_like_batch(actor.tokenizer)
    mask = batch["response_mask"].bool()

    def surrogate(compute: torch.dtype | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        actor.model.zero_grad()
        with computing_in(compute, CPU):
            lp, _ = trimmed_log_probs(actor.model, batch, CPU, 1.0, 1024, True)
        loss = -(lp * batch["advantages"])[mask].mean()
        loss.backward()
        return lp.detach(), [p.grad.clone() for p in actor.model.parameters() if p.grad is not None]

    exact_lp, exact_g = surrogate(None)
    bf16_lp, bf16_g = surrogate(torch.bfloat16)
    assert bf16_lp.dtype == torch.float32  # the log-softmax ran in float32
    assert all(g.dtype == torch.float32 for g in bf16_g)  # master weights' gradients
    diff = (exact_lp - bf16_lp)[mask].abs()
    assert diff.max() < 0.1 and diff.mean() < 0.03, (diff.max(), diff.mean())
    assert diff.max() > 0  # it did compute in a lower precision
    flat_e, flat_b = torch.cat([g.flatten() for g in exact_g]), torch.cat([g.flatten() for g in bf16_g])
    cosine = torch.nn.functional.cosine_similarity(flat_e, flat_b, dim=0)
    rel = (flat_e - flat_b).norm() / flat_e.norm()
    assert cosine > 0.999 and rel < 0.03, (cosine, rel)
