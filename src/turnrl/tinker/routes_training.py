"""The training client's routes. Each checks its request here (a bad one is a one-line 4xx before
anything is queued), then queues the work and answers with the future's id.

    POST /api/v1/create_model             LoRA adapter + AdamW on the served base  -> future
    POST /api/v1/get_info                 model name, tokenizer (a local directory), LoRA rank
    POST /api/v1/forward_backward         protobuf body; forward when `forward_only` -> future
    POST /api/v1/optim_step               AdamParams                                -> future
    POST /api/v1/save_weights             save_state(name)                          -> future
    POST /api/v1/load_weights             load_state / a new client from a state    -> future
    POST /api/v1/save_weights_for_sampler a named sampler checkpoint, or a sampling session -> future
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from turnrl.servers.guard import finite_json
from turnrl.servers.inference.common import PARSE_IN_THREAD, body_of, short
from turnrl.servers.refusal import Refusal
from turnrl.tinker import states, training
from turnrl.tinker.protobuf import decode_forward_backward
from turnrl.tinker.registry import LoraSpec, Sampler, TrainingModel
from turnrl.tinker.service import TinkerService, service_of
from turnrl.tinker.wire import (
    CreateModelRequest,
    GetInfoRequest,
    LoadWeightsRequest,
    OptimizerConfigIn,
    OptimStepRequest,
    SaveWeightsForSamplerRequest,
    SaveWeightsRequest,
    unknown_field,
)

router = APIRouter()

MAX_RANK = 256


def future(request_id: str, model_id: str | None = None) -> Response:
    """The SDK's `UntypedAPIFuture`: what it polls retrieve_future with."""
    body: dict[str, Any] = {"request_id": request_id}
    if model_id is not None:
        body["model_id"] = model_id
    return finite_json(body)


def lora_spec(req: CreateModelRequest) -> LoraSpec:
    if req.lora_config is None:
        raise Refusal("lora_config: required (this server trains LoRA adapters only)")
    c = req.lora_config
    if not 1 <= c.rank <= MAX_RANK:
        raise Refusal(f"lora_config.rank: must be in [1, {MAX_RANK}], got {c.rank}")
    if not (c.train_attn or c.train_mlp or c.train_unembed):
        raise Refusal("lora_config: train_attn, train_mlp and train_unembed are all false; nothing to train")
    return LoraSpec(c.rank, c.seed, c.train_attn, c.train_mlp, c.train_unembed)


def check_optimizer(config: OptimizerConfigIn | None) -> None:
    if config is None:
        return
    if config.type != "adamw":
        raise Refusal(
            f"optimizer_config.type: {short(config.type)} is not supported; this server trains with AdamW ('adamw')"
        )
    for key in config.model_extra or {}:  # AdamW's config is its type alone
        raise unknown_field(f"optimizer_config.{key}", ["type"])


def register(service: TinkerService, session_id: str, model_seq_id: int, user_metadata: Any) -> TrainingModel:
    """A new training client in the registry (its adapter is made by the queued work)."""
    model = TrainingModel(
        model_id=f"{session_id}:train:{model_seq_id}",
        session_id=session_id,
        base_model=service.backbone.name,
        adapter=service.registry.adapter_name("t"),
        user_metadata=user_metadata,
    )
    service.registry.add_model(model)
    return model


def submit_creation(service: TinkerService, kind: str, model: TrainingModel, make: Any) -> str:
    """Queue `make()`, which creates `model`'s adapter; if it fails, the client never existed."""

    def work() -> Any:
        try:
            return make()
        except BaseException:
            service.registry.drop_model(model.model_id)
            service.backbone.remove_adapter(model.adapter)
            raise

    try:
        return service.submit(kind, work, model.session_id)
    except Refusal:
        service.registry.drop_model(model.model_id)
        raise


@router.post("/api/v1/create_model")
async def create_model(request: Request) -> Response:
    service = service_of(request)
    req = await body_of(request, CreateModelRequest, '{"session_id": "...", "model_seq_id": 0, "base_model": "...", "lora_config": {"rank": 8}}')  # fmt: skip
    service.registry.session(req.session_id)
    service.check_base_model(req.base_model)
    lora = lora_spec(req)
    check_optimizer(req.optimizer_config)
    model = register(service, req.session_id, req.model_seq_id, req.user_metadata)

    def make() -> dict[str, Any]:
        states.create_adapter(service.backbone, model, lora)
        return {"model_id": model.model_id, "type": "create_model"}

    return future(submit_creation(service, "create_model", model, make), model.model_id)


@router.post("/api/v1/get_info")
async def get_info(request: Request) -> Response:
    service = service_of(request)
    req = await body_of(request, GetInfoRequest, '{"model_id": "..."}')
    model = service.registry.model(req.model_id)
    backbone = service.backbone
    return finite_json(
        {
            "type": "get_info",
            "model_id": model.model_id,
            "model_data": {
                "arch": backbone.arch,
                "model_name": model.base_model,
                # a local directory: the SDK's get_tokenizer() loads it with no hub access
                "tokenizer_id": backbone.tokenizer_dir,
            },
            "optimizer_config": {"type": "adamw"},
            "is_lora": True,
            "lora_rank": model.lora.rank if model.lora is not None else None,
            "model_name": model.base_model,
        }
    )


@router.post("/api/v1/forward_backward")
async def forward_backward(request: Request) -> Response:
    service = service_of(request)
    if request.headers.get("content-encoding", "identity") != "identity":
        raise Refusal("content-encoding: compressed bodies are not accepted (this server asks the SDK for plain ones)", 415)  # fmt: skip
    body = await request.body()
    large = len(body) > PARSE_IN_THREAD
    req = await asyncio.to_thread(decode_forward_backward, body) if large else decode_forward_backward(body)
    owner = service.registry.model(req.model_id).session_id
    spec = training.loss_spec(req.loss_fn)
    cfg = training.loss_config(spec, req.loss_fn, req.config)
    backbone = service.backbone
    args = (req, spec, backbone.vocab_size, backbone.max_context)
    if large:  # a long batch is checked token by token: off the event loop, as it was parsed
        await asyncio.to_thread(training.check_batch, *args)
    else:
        training.check_batch(*args)

    def work() -> bytes:
        return training.forward_backward(backbone, service.ready_model(req.model_id), req, spec, cfg)

    kind = "forward" if req.forward_only else "forward_backward"
    return future(service.submit(kind, work, owner), req.model_id)


@router.post("/api/v1/optim_step")
async def optim_step(request: Request) -> Response:
    service = service_of(request)
    req = await body_of(request, OptimStepRequest, '{"model_id": "...", "adam_params": {"learning_rate": 1e-4}}')  # fmt: skip
    if req.optimizer_params is not None:
        kind = req.optimizer_params.get("type")
        raise Refusal(f"optimizer_params: {kind!r} steps are not supported; this server trains with AdamW (send AdamParams)")  # fmt: skip
    adam = training.check_adam(req.adam_params or {})
    owner = service.registry.model(req.model_id).session_id

    def work() -> dict[str, Any]:
        return training.optim_step(service.ready_model(req.model_id), adam)

    return future(service.submit("optim_step", work, owner), req.model_id)


@router.post("/api/v1/save_weights")
async def save_weights(request: Request) -> Response:
    service = service_of(request)
    req = await body_of(request, SaveWeightsRequest, '{"model_id": "...", "path": "step-10"}')
    model = service.registry.model(req.model_id)
    if not req.path:
        raise Refusal("path: a checkpoint name is required")
    ref = service.root.new(model.model_id, "weights", req.path, "path")
    if ref.directory.exists() and not req.overwrite:  # at once; the worker checks again when it writes
        raise Refusal(
            f"path: checkpoint {ref.tinker_path} already exists (save with overwrite=True to replace it)"
        )

    def work() -> dict[str, Any]:
        current = service.ready_model(req.model_id)
        return states.save_state(service.backbone, current, ref, req.overwrite, req.user_metadata)

    return future(service.submit("save_weights", work, model.session_id), req.model_id)


@router.post("/api/v1/load_weights")
async def load_weights(request: Request) -> Response:
    service = service_of(request)
    req = await body_of(request, LoadWeightsRequest, '{"model_id": "...", "path": "tinker://RUN/weights/NAME", "optimizer": true}')  # fmt: skip
    if req.weights_access_token is not None:
        raise Refusal("weights_access_token: not supported (this server's checkpoints need no token)")
    ref = service.root.parse(req.path, "path", kinds=("weights",))
    if req.session_id is None:  # load_state into an existing client
        if req.model_id is None:
            raise Refusal("model_id: required (or session_id and model_seq_id for a new client)")
        model_id = req.model_id
        owner = service.registry.model(model_id).session_id

        def load() -> dict[str, Any]:
            return states.load_state(service.backbone, service.ready_model(model_id), ref, req.optimizer)

        return future(service.submit("load_weights", load, owner), model_id)
    # create_training_client_from_state: a new client, its LoRA settings from the checkpoint
    service.registry.session(req.session_id)
    if req.model_seq_id is None:
        raise Refusal("model_seq_id: required with session_id")
    if req.base_model is not None:
        service.check_base_model(req.base_model)
    check_optimizer(req.optimizer_config)
    model = register(service, req.session_id, req.model_seq_id, req.user_metadata)

    def make() -> dict[str, Any]:
        return states.create_from_state(service.backbone, model, ref, req.optimizer)

    return future(submit_creation(service, "load_weights", model, make), model.model_id)


@router.post("/api/v1/save_weights_for_sampler")
async def save_weights_for_sampler(request: Request) -> Response:
    service = service_of(request)
    req = await body_of(request, SaveWeightsForSamplerRequest, '{"model_id": "...", "path": "sampler-1"}')  # fmt: skip
    model = service.registry.model(req.model_id)
    if req.kind != "snapshot":
        raise Refusal(f"kind: {req.kind!r} sampling clients are not supported; use 'snapshot'")
    if req.path is not None:  # save_weights_for_sampler(name): a checkpoint to open later
        ref = service.root.new(model.model_id, "sampler_weights", req.path, "path")

        def save() -> dict[str, Any]:
            states.save_sampler_weights(service.backbone, service.ready_model(req.model_id), ref, req.user_metadata)  # fmt: skip
            return {"path": ref.tinker_path, "type": "save_weights_for_sampler"}

        return future(service.submit("save_weights_for_sampler", save, model.session_id), req.model_id)
    if req.sampling_session_seq_id is None:
        raise Refusal("path: a name, or sampling_session_seq_id for a sampling session, is required")
    # save_weights_and_get_sampling_client(): a snapshot adapter, sampled from until dropped
    sampler_id = f"{model.session_id}:sample:{req.sampling_session_seq_id}"

    def snapshot() -> dict[str, Any]:
        current = service.ready_model(req.model_id)
        adapter = service.registry.adapter_name("s")
        states.snapshot(service.backbone, current, adapter)
        service.add_sampler(Sampler(sampler_id, current.session_id, current.base_model, adapter))
        return {"sampling_session_id": sampler_id, "type": "save_weights_for_sampler"}

    return future(service.submit("save_weights_for_sampler", snapshot, model.session_id), req.model_id)
