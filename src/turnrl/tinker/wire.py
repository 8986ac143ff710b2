"""The JSON bodies the tinker SDK (0.38) sends, as pydantic models.

The SDK dumps its request models with every default included and `None`s left out, so each model
here lists exactly the fields it sends (including its constant `type` tag); a field it does not
send is refused rather than ignored (`extra="forbid"`), so a misunderstanding shows as a one-line
4xx naming the field instead of a silently different computation. `forward_backward`'s body is
protobuf, not JSON (`protobuf.decode_forward_backward`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, protected_namespaces=())


class ClientConfigRequest(Wire):
    sdk_version: str = ""


class CreateSessionRequest(Wire):
    tags: list[str] = Field(default_factory=list)
    user_metadata: dict[str, Any] | None = None
    sdk_version: str = ""
    project_id: str | None = None
    display_name: str | None = None
    type: str = "create_session"


class SessionHeartbeatRequest(Wire):
    session_id: str
    type: str = "session_heartbeat"


class LoraConfigIn(Wire):
    rank: int
    seed: int | None = None
    train_unembed: bool = True
    train_mlp: bool = True
    train_attn: bool = True


class OptimizerConfigIn(BaseModel):
    # other optimizer families carry their own fields: read `type`, keep the rest to name it
    model_config = ConfigDict(extra="allow")
    type: str = "adamw"


class CreateModelRequest(Wire):
    session_id: str
    model_seq_id: int
    base_model: str
    user_metadata: dict[str, Any] | None = None
    lora_config: LoraConfigIn | None = None
    optimizer_config: OptimizerConfigIn = Field(default_factory=OptimizerConfigIn)
    type: str = "create_model"


class GetInfoRequest(Wire):
    model_id: str
    type: str = "get_info"


class OptimStepRequest(Wire):
    adam_params: dict[str, Any] | None = None
    optimizer_params: dict[str, Any] | None = None
    """Another optimizer family's step (Dimuon): refused, this server trains with AdamW only."""
    model_id: str
    seq_id: int | None = None
    type: str = "optim_step"


class SaveWeightsRequest(Wire):
    model_id: str
    path: str | None = None
    seq_id: int | None = None
    ttl_seconds: int | None = None
    overwrite: bool = False
    user_metadata: dict[str, str] | None = None
    type: str = "save_weights"


class SaveWeightsForSamplerRequest(Wire):
    model_id: str
    path: str | None = None
    sampling_session_seq_id: int | None = None
    kind: str = "snapshot"
    seq_id: int | None = None
    ttl_seconds: int | None = None
    user_metadata: dict[str, str] | None = None
    type: str = "save_weights_for_sampler"


class LoadWeightsRequest(Wire):
    model_id: str | None = None
    seq_id: int | None = None
    session_id: str | None = None
    model_seq_id: int | None = None
    base_model: str | None = None
    user_metadata: dict[str, Any] | None = None
    path: str
    optimizer: bool
    optimizer_config: OptimizerConfigIn | None = None
    weights_access_token: str | None = None
    type: str = "load_weights"


class CreateSamplingSessionRequest(Wire):
    session_id: str
    sampling_session_seq_id: int
    base_model: str | None = None
    model_path: str | None = None
    type: str = "create_sampling_session"


class SamplingParamsIn(Wire):
    max_tokens: int | None = None
    seed: int | None = None
    stop: str | list[str] | list[int] | None = None
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0


class SampleRequest(Wire):
    num_samples: int = 1
    prompt: dict[str, Any]
    sampling_params: SamplingParamsIn
    base_model: str | None = None
    model_path: str | None = None
    sampling_session_id: str | None = None
    seq_id: int | None = None
    prompt_logprobs: bool | None = None
    topk_prompt_logprobs: int = 0
    topk_sample_logprobs: int = 0
    target_prompt_logprobs: dict[str, Any] | None = None
    prompt_alt_tokens_k: int = 0
    prompt_logprobs_last_n: int | None = None
    record_stability_info: bool | None = None
    type: str = "sample"


class FutureRetrieveRequest(Wire):
    request_id: str
    allow_metadata_only: bool = False
