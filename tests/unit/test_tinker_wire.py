"""The server's protobuf and JSON against the tinker SDK's own codecs and models: what the server
writes, the SDK reads back as written; what the SDK writes, the server decodes; the client flags
are fields the SDK knows. And the losses' per-token values against their formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402
from tinker.proto.request_conv import forward_backward_request_to_proto  # noqa: E402
from tinker.proto.response_conv import (  # noqa: E402
    deserialize_forward_backward_output,
    deserialize_sample_response,
)

from turnrl.servers.refusal import Refusal  # noqa: E402
from turnrl.tinker import losses  # noqa: E402
from turnrl.tinker.protobuf import decode_forward_backward, encode_forward_backward, encode_sample  # noqa: E402


def test_forward_backward_outputs_read_back_as_written_ragged_ones_too():
    outputs = [
        {
            "logprobs": np.array([-1.0, -2.0], np.float32),
            "elementwise_loss": np.array([1.0, 2.0], np.float32),
        },
        {"logprobs": np.array([-3.0], np.float32), "elementwise_loss": np.array([3.0], np.float32)},
        {
            "logprobs": np.arange(6, dtype=np.float32).reshape(3, 2),
            "elementwise_loss": np.ones((3, 2), np.float32),
        },
    ]
    back = deserialize_forward_backward_output(encode_forward_backward(outputs, {"loss:sum": 6.5}))
    assert back.metrics == {"loss:sum": 6.5} and len(back.loss_fn_outputs) == 3
    for sent, got in zip(outputs, back.loss_fn_outputs, strict=True):
        for name, array in sent.items():
            assert got[name].shape == list(array.shape)
            np.testing.assert_array_equal(got[name].to_numpy(), array)


def test_sample_responses_read_back_as_written():
    back = deserialize_sample_response(
        encode_sample(
            [([5, 6, 7], [-0.5, -1.5, -2.5], "stop"), ([8], [-0.25], "length")], [math.nan, -1.0, -2.0]
        )
    )
    assert [(s.tokens, s.logprobs, s.stop_reason) for s in back.sequences] == [
        ([5, 6, 7], [-0.5, -1.5, -2.5], "stop"),
        ([8], [-0.25], "length"),
    ]
    assert back.prompt_logprobs == [None, -1.0, -2.0]
    assert deserialize_sample_response(encode_sample([([1], [-1.0], "stop")], None)).prompt_logprobs is None


def test_the_sdks_forward_backward_body_decodes_sparse_tensors_and_config_included():
    topk = torch.tensor([[3, -1], [-1, 4], [5, 6]])
    data = [
        types.Datum(
            model_input=types.ModelInput(
                chunks=[types.EncodedTextChunk(tokens=[1, 2]), types.EncodedTextChunk(tokens=[9])]
            ),
            loss_fn_inputs={
                "target_tokens": types.TensorData.from_torch_sparse(topk.clamp(min=0)),
                "weights": np.array([[1.0, 0.0], [0.0, 0.5], [0.25, 0.25]], np.float32),
            },
        )
    ]
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=data, loss_fn="ppo", loss_fn_config={"clip_low_threshold": 0.7}
        ),
        model_id="s:train:0",
        seq_id=3,
    )
    msg = forward_backward_request_to_proto(request)
    msg.forward_only = True
    got = decode_forward_backward(msg.SerializeToString())
    assert (got.model_id, got.seq_id, got.loss_fn, got.forward_only) == ("s:train:0", 3, "ppo", True)
    assert got.config == {"clip_low_threshold": 0.7}
    (datum,) = got.data
    assert datum.tokens == [1, 2, 9]
    np.testing.assert_array_equal(datum.inputs["target_tokens"], topk.clamp(min=0).numpy())
    np.testing.assert_array_equal(datum.inputs["weights"], data[0].loss_fn_inputs["weights"].to_numpy())


def test_a_body_that_is_no_protobuf_is_a_one_line_refusal():
    with pytest.raises(Refusal, match="request body: not a ForwardBackwardRequest protobuf"):
        decode_forward_backward(b"\xff\xff\xff\xff")


def test_the_client_flags_are_fields_the_sdk_knows():
    from turnrl.tinker.routes_session import client_flags
    from turnrl.tinker.service import ServiceLimits

    class Fake:
        limits = ServiceLimits()

    flags = client_flags(Fake())  # type: ignore[arg-type]
    assert set(flags) <= set(types.ClientConfigResponse.model_fields)
    parsed = types.ClientConfigResponse.model_validate(flags)
    assert (
        not parsed.pjwt_auth_enabled
        and not parsed.proto_compress_fwdbwd
        and not parsed.parallel_fwdbwd_chunks
    )


def test_the_losses_per_token_values_follow_their_formulas():
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(12, generator=g) * 3
    q = lp + torch.tensor([0.5, -0.5, -1.6, 0.05] * 3)
    adv = torch.randn(12, generator=g)
    w = torch.rand(12, generator=g)
    x = {"logprobs": q, "advantages": adv, "weights": w}
    r = torch.exp(lp - q)
    ppo_cfg = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    cispo_cfg = {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}
    expected = {
        "cross_entropy": -w * lp,
        "importance_sampling": -w * r * adv,
        "ppo": -w * torch.minimum(r * adv, r.clamp(0.8, 1.2) * adv),
        "cispo": -w * r.clamp(0.0, 4.0) * adv * lp,
    }
    cfgs = {"ppo": ppo_cfg, "cispo": cispo_cfg}
    for name, spec in losses.LOSSES.items():
        torch.testing.assert_close(spec.fn(lp, x, cfgs.get(name, {})), expected[name], msg=name)
    # CISPO's ratio is a detached weight: the gradient is that of the weighted log-likelihood
    lp_grad = lp.clone().requires_grad_(True)
    losses.cispo(lp_grad, x, cispo_cfg).sum().backward()
    torch.testing.assert_close(lp_grad.grad, -w * r.clamp(0.0, 4.0) * adv)
