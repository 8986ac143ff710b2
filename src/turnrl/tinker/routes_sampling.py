"""The sampling client's routes.

    POST /api/v1/create_sampling_session  from a tinker:// checkpoint, or the bare base model
    POST /api/v1/asample                  sample / compute_logprobs               -> future
    GET  /api/v1/samplers/{id}            the session's base model (and checkpoint path)

A sampling session made by `save_weights_and_get_sampling_client()` comes from
`/api/v1/save_weights_for_sampler` (`routes_training`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from turnrl.servers.guard import finite_json
from turnrl.servers.inference.common import body_of
from turnrl.servers.refusal import Refusal
from turnrl.tinker import sampling, states
from turnrl.tinker.registry import Sampler
from turnrl.tinker.service import service_of
from turnrl.tinker.wire import CreateSamplingSessionRequest, SampleRequest

router = APIRouter()

UNSUPPORTED = {
    "topk_prompt_logprobs": 0,
    "topk_sample_logprobs": 0,
    "target_prompt_logprobs": None,
    "prompt_alt_tokens_k": 0,
    "record_stability_info": None,
}
"""SampleRequest fields whose effect this server does not implement: any other value is refused,
not ignored (a caller asking for top-k log-probs must not get a response without them)."""


@router.post("/api/v1/create_sampling_session")
async def create_sampling_session(request: Request) -> Response:
    service = service_of(request)
    req = await body_of(request, CreateSamplingSessionRequest, '{"session_id": "...", "sampling_session_seq_id": 0, "model_path": "tinker://RUN/sampler_weights/NAME"}')  # fmt: skip
    service.registry.session(req.session_id)
    sampler_id = f"{req.session_id}:sample:{req.sampling_session_seq_id}"
    if req.model_path is not None:
        ref = service.root.parse(req.model_path, "model_path")

        def open_checkpoint() -> None:
            adapter = service.registry.adapter_name("s")
            states.open_checkpoint(service.backbone, ref, adapter, "model_path")
            sampler = Sampler(sampler_id, req.session_id, service.backbone.name, adapter, ref.tinker_path)
            service.add_sampler(sampler)

        await service.call(open_checkpoint, req.session_id)
    else:
        if req.base_model is None:
            raise Refusal("base_model: required when no model_path is given")
        service.check_base_model(req.base_model)
        base = Sampler(sampler_id, req.session_id, req.base_model, None)
        await service.call(lambda: service.add_sampler(base), req.session_id)
    return finite_json({"type": "create_sampling_session", "sampling_session_id": sampler_id})


@router.post("/api/v1/asample")
async def asample(request: Request) -> Response:
    service = service_of(request)
    req = await body_of(request, SampleRequest, '{"sampling_session_id": "...", "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2]}]}, "sampling_params": {"max_tokens": 16}}')  # fmt: skip
    for name, default in UNSUPPORTED.items():
        if getattr(req, name) not in (default, False):
            raise Refusal(f"{name}: not supported by this server")
    if req.sampling_session_id is None:
        raise Refusal("sampling_session_id: required (create a sampling client first)")
    sampler_id = req.sampling_session_id
    owner = service.registry.sampler(sampler_id).session_id
    backbone = service.backbone
    prompt = sampling.prompt_tokens(req.prompt, backbone.vocab_size)
    plan = sampling.plan(
        prompt,
        req.num_samples,
        req.sampling_params,
        bool(req.prompt_logprobs),
        req.prompt_logprobs_last_n,
        backbone.max_context,
        service.limits.sample,
        backbone.vocab_size,
    )

    request_id = service.submit_sample(sampler_id, plan, owner)  # batched with the samples queued beside it
    # one id per sample, in the response's order: the SDK stamps them on its SampledSequences
    ids = [f"{request_id}:{i}" for i in range(req.num_samples)]
    return finite_json({"request_id": request_id, "sample_sequence_ids": ids})


@router.get("/api/v1/samplers/{sampler_id}")
async def get_sampler(sampler_id: str, request: Request) -> Response:
    sampler = service_of(request).registry.sampler(sampler_id, "sampler_id")
    body = {"sampler_id": sampler.sampler_id, "base_model": sampler.base_model}
    if sampler.model_path is not None:
        body["model_path"] = sampler.model_path
    return finite_json(body)
