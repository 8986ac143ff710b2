"""The server's protobuf and JSON against the tinker SDK's own codecs and models: what the server
writes, the SDK reads back as written; what the SDK writes, the server decodes; the client flags
are fields the SDK knows. And the losses' per-token values against their formulas."""

from __future__ import annotations

import json
import math

import numpy as np
import pydantic
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
    s = torch.exp((lp - q).mean())  # GSPO's sequence ratio: every weight here is > 0
    expected = {
        "cross_entropy": -w * lp,
        "importance_sampling": -w * r * adv,
        "ppo": -w * torch.minimum(r * adv, r.clamp(0.8, 1.2) * adv),
        "cispo": -w * r.clamp(0.0, 4.0) * adv * lp,
        "dro": -w * (lp * adv - 0.5 * 0.1 * (lp - q) ** 2),
        "gspo": -w * torch.minimum(s * adv, s.clamp(0.8, 1.2) * adv),
    }
    cfgs = {"ppo": ppo_cfg, "cispo": cispo_cfg, "dro": {"beta": 0.1}, "gspo": ppo_cfg}
    assert set(losses.LOSSES) == set(expected)
    for name, spec in losses.LOSSES.items():
        torch.testing.assert_close(spec.fn(lp, x, cfgs.get(name, {})), expected[name], msg=name)
    # CISPO's ratio is a detached weight: the gradient is that of the weighted log-likelihood
    lp_grad = lp.clone().requires_grad_(True)
    losses.cispo(lp_grad, x, cispo_cfg).sum().backward()
    torch.testing.assert_close(lp_grad.grad, -w * r.clamp(0.0, 4.0) * adv)


def test_dro_by_hand():
    # lp = (-1, -2), q = (-1.5, -2), A = (2, -1), w = (1, 0.5), beta = 0.2:
    #   token 0: -1 * (-1 * 2 - 0.1 * 0.5^2) = 2.025;  token 1: -0.5 * (-2 * -1 - 0) = -1
    lp = torch.tensor([-1.0, -2.0], requires_grad=True)
    x = {"logprobs": torch.tensor([-1.5, -2.0]), "advantages": torch.tensor([2.0, -1.0]), "weights": torch.tensor([1.0, 0.5])}  # fmt: skip
    loss = losses.dro(lp, x, {"beta": 0.2})
    torch.testing.assert_close(loss, torch.tensor([2.025, -1.0]))
    # d/dlp of -w (lp A - beta/2 (lp - q)^2) = -w (A - beta (lp - q)): -(2 - 0.2 * 0.5) = -1.9; -0.5 * -1 = 0.5
    loss.sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([-1.9, 0.5]))


def test_gspo_by_hand_and_its_sequence_is_the_weighted_tokens():
    # lp = (-1, -2, -3), q = (-1.5, -2, 0), weights (1, 1, 0): the third token (a prompt token, whose
    # "sampler log-prob" is the 0 Tinker's datums carry) stays out of the sequence ratio:
    #   s = exp(mean(0.5, 0)) = exp(0.25) = 1.2840254; range [0.8, 1.2]
    #   token 0, A = 1:  -min(1.284 * 1, 1.2 * 1) = -1.2 (clipped: no gradient)
    #   token 1, A = -1: -min(-1.284, -1.2) = 1.2840254 (unclipped: gradient s * -A = 1.2840254)
    #   token 2: weight 0, loss 0
    lp = torch.tensor([-1.0, -2.0, -3.0], requires_grad=True)
    x = {"logprobs": torch.tensor([-1.5, -2.0, 0.0]), "advantages": torch.tensor([1.0, -1.0, 5.0]), "weights": torch.tensor([1.0, 1.0, 0.0])}  # fmt: skip
    loss = losses.gspo(lp, x, {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2})
    s = math.exp(0.25)
    torch.testing.assert_close(loss, torch.tensor([-1.2, s, 0.0]))
    loss.sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([0.0, s, 0.0]))


def _sdk_bodies() -> list[tuple[object, type]]:
    """Every JSON body the SDK sends, with every optional field it has set, as its resources dump
    them (`exclude_none`, JSON mode), beside the server's model of it."""
    from datetime import UTC, datetime

    from tinker.types.generic_event import GenericEvent

    from turnrl.tinker import wire

    prompt = types.ModelInput.from_ints([1, 2, 3])
    params = types.SamplingParams(max_tokens=4, seed=3, stop=["\n"], temperature=0.5, top_k=5, top_p=0.9)
    now = datetime.now(UTC)
    events = [
        GenericEvent(
            event="GENERIC_EVENT",
            event_id="e",
            event_name="n",
            event_session_index=0,
            severity="INFO",
            timestamp=now,
            event_data={"a": [1]},
        ),
        types.SessionStartEvent(
            event="SESSION_START", event_id="e", event_session_index=1, severity="INFO", timestamp=now
        ),
        types.SessionEndEvent(
            event="SESSION_END",
            event_id="e",
            event_session_index=2,
            severity="INFO",
            timestamp=now,
            duration="1s",
        ),
        types.UnhandledExceptionEvent(
            event="UNHANDLED_EXCEPTION",
            event_id="e",
            event_session_index=3,
            severity="ERROR",
            timestamp=now,
            error_message="m",
            error_type="T",
            traceback="tb",
        ),
    ]
    lora = types.LoraConfig(rank=8, seed=1, train_unembed=False, train_mlp=True, train_attn=True)
    return [
        (types.ClientConfigRequest(sdk_version="0.38.0"), wire.ClientConfigRequest),
        (
            types.CreateSessionRequest(
                tags=["a"], user_metadata={"k": "v"}, sdk_version="0.38.0", project_id="p", display_name="d"
            ),
            wire.CreateSessionRequest,
        ),
        (types.SessionHeartbeatRequest(session_id="s"), wire.SessionHeartbeatRequest),
        (
            types.CreateModelRequest(
                session_id="s", model_seq_id=0, base_model="m", user_metadata={"k": 1}, lora_config=lora
            ),
            wire.CreateModelRequest,
        ),
        (types.GetInfoRequest(model_id="s:train:0"), wire.GetInfoRequest),
        (
            types.OptimStepRequest(optim_params=types.AdamParams(learning_rate=1e-3), model_id="m", seq_id=2),
            wire.OptimStepRequest,
        ),
        (
            types.SaveWeightsRequest(
                model_id="m", path="a", seq_id=1, ttl_seconds=60, overwrite=True, user_metadata={"k": "v"}
            ),
            wire.SaveWeightsRequest,
        ),
        (
            types.SaveWeightsForSamplerRequest(
                model_id="m",
                path="a",
                sampling_session_seq_id=1,
                seq_id=1,
                ttl_seconds=60,
                user_metadata={"k": "v"},
            ),
            wire.SaveWeightsForSamplerRequest,
        ),
        (
            types.LoadWeightsRequest(model_id="m", path="tinker://r/weights/a", optimizer=True, seq_id=1),
            wire.LoadWeightsRequest,
        ),
        (
            types.CreateSamplingSessionRequest(
                session_id="s",
                sampling_session_seq_id=0,
                base_model="m",
                model_path="tinker://r/sampler_weights/a",
            ),
            wire.CreateSamplingSessionRequest,
        ),
        (
            types.SampleRequest(
                num_samples=2,
                prompt=prompt,
                sampling_params=params,
                sampling_session_id="x",
                seq_id=1,
                prompt_logprobs=True,
                prompt_logprobs_last_n=1,
            ),
            wire.SampleRequest,
        ),
        (types.FutureRetrieveRequest(request_id="r", allow_metadata_only=True), wire.FutureRetrieveRequest),
        (
            types.TelemetrySendRequest(
                events=events, platform="linux", sdk_version="0.38.0", session_id="s", process_uuid="u"
            ),
            wire.TelemetryRequest,
        ),
    ]


@pytest.mark.parametrize(("sent", "model"), _sdk_bodies(), ids=lambda v: getattr(v, "__name__", ""))
def test_every_json_body_the_sdk_sends_is_accepted_with_every_field_set(sent, model):
    from tinker._compat import model_dump

    body = model_dump(sent, exclude_unset=False, exclude_none=True, mode="json")
    parsed = model.model_validate_json(json.dumps(body))
    assert set(body) <= set(type(parsed).model_fields), body


def test_the_close_body_is_accepted():
    from turnrl.tinker.wire import FinishSessionRequest

    for status in ("success", "errored", "interrupted"):  # what ServiceClient.close(status, detail) posts
        FinishSessionRequest.model_validate_json(json.dumps({"reason": {"type": status}, "detail": None}))


def test_an_unknown_nested_field_suggests_a_sibling():
    from turnrl.servers.validation import describe_validation_error, fields_at
    from turnrl.tinker.wire import SampleRequest

    body = '{"prompt": {}, "sampling_params": {"max_tokens": 2, "temprature": 0.5}}'
    with pytest.raises(pydantic.ValidationError) as info:
        SampleRequest.model_validate_json(body)
    errors = info.value.errors()
    message = describe_validation_error(errors, fields_at(SampleRequest, errors[0]["loc"]), "")
    assert message == "sampling_params.temprature: unknown field; did you mean 'temperature'?"
