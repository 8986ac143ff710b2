"""The JSON bodies the tinker SDK (0.38) sends, as pydantic models.

The SDK dumps its request models with every default included and `None`s left out, so each model
here lists exactly the fields it sends (including its constant `type` tag); a field it does not
send is refused rather than ignored (`extra="forbid"`), so a misunderstanding shows as a one-line
4xx naming the field instead of a silently different computation. A value of another JSON type
than its field's is refused too, as every turnrl server refuses it (`StrictRequest`): `"5"` or
`true` for `max_tokens`, `"yes"` for `optimizer`; a JSON integer for a float field is a number all
the same. `forward_backward`'s body is protobuf, not JSON (`protobuf.decode_forward_backward`).

Numbers are bounded where they are read: a counter is a non-negative 64-bit integer, any other
integer fits 64 bits (an integer of thousands of digits cannot even be printed in the refusal that
names it), and an id or a path is at most `MAX_ID` characters. A free-form `user_metadata` holds no
NaN or infinity (JSON has neither; the checkpoint's tinker.json could not be read back).
"""

from __future__ import annotations

import difflib
import math
from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from turnrl.servers.inference.common import SEED_MAX, SEED_MIN
from turnrl.servers.refusal import Refusal
from turnrl.servers.validation import StrictRequest

MAX_ID = 1024
SeqId = Annotated[int, Field(ge=0, lt=2**63)]
"""A counter the SDK numbers its clients and requests with."""
Int = Annotated[int, Field(ge=-(2**63), lt=2**64)]
Seed = Annotated[int, Field(ge=SEED_MIN, le=SEED_MAX)]
"""What `torch.manual_seed` accepts."""
Id = Annotated[str, Field(max_length=MAX_ID)]
Ttl = Annotated[int, Field(gt=0, lt=2**63)]
"""A checkpoint's time to live in seconds (accepted, never applied: see docs/tinker.md)."""


def _finite(value: Any, where: str = "") -> Any:
    """`value` (a free-form JSON value) unchanged, or a validation error naming its first NaN or
    infinity (`at ['k'][0]`)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise PydanticCustomError("finite_number", "{value} at {where} is not a finite number", {"value": repr(value), "where": where})  # fmt: skip
    if isinstance(value, dict):
        for key, item in value.items():
            _finite(item, f"{where}[{key!r}]")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _finite(item, f"{where}[{i}]")
    return value


Metadata = Annotated[dict[str, Any], AfterValidator(_finite)]
"""A free-form `user_metadata`: any JSON, but finite numbers only."""


class Wire(StrictRequest):
    # StrictRequest: unknown fields and values of another JSON type are refused, naming the field
    model_config = ConfigDict(allow_inf_nan=False, protected_namespaces=())


class ClientConfigRequest(Wire):
    sdk_version: Id = ""


class CreateSessionRequest(Wire):
    tags: list[Id] = Field(default_factory=list)
    user_metadata: Metadata | None = None
    sdk_version: Id = ""
    project_id: Id | None = None
    display_name: Id | None = None
    type: str = "create_session"


class SessionHeartbeatRequest(Wire):
    session_id: Id
    type: str = "session_heartbeat"


class FinishReason(Wire):
    type: Id


class FinishSessionRequest(Wire):
    """`ServiceClient.close(status, detail)`."""

    reason: FinishReason | None = None
    detail: str | None = None


class TelemetryRequest(Wire):
    """The SDK's telemetry batch: its envelope checked, its events (free-form) dropped."""

    events: list[dict[str, Any]]
    platform: str
    sdk_version: Id
    session_id: Id
    process_uuid: Id


class LoraConfigIn(Wire):
    rank: Int
    seed: Seed | None = None
    train_unembed: bool = True
    train_mlp: bool = True
    train_attn: bool = True


class OptimizerConfigIn(StrictRequest):
    # other optimizer families carry their own fields: read `type`, keep the rest to name it
    model_config = ConfigDict(extra="allow")
    type: Id = "adamw"


class CreateModelRequest(Wire):
    session_id: Id
    model_seq_id: SeqId
    base_model: Id
    user_metadata: Metadata | None = None
    lora_config: LoraConfigIn | None = None
    optimizer_config: OptimizerConfigIn = Field(default_factory=OptimizerConfigIn)
    type: str = "create_model"


class GetInfoRequest(Wire):
    model_id: Id
    type: str = "get_info"


class OptimStepRequest(Wire):
    adam_params: dict[str, Any] | None = None
    optimizer_params: dict[str, Any] | None = None
    """Another optimizer family's step (Dimuon): refused, this server trains with AdamW only."""
    model_id: Id
    seq_id: SeqId | None = None
    type: str = "optim_step"


class SaveWeightsRequest(Wire):
    model_id: Id
    path: Id | None = None
    seq_id: SeqId | None = None
    ttl_seconds: Ttl | None = None
    overwrite: bool = False
    user_metadata: dict[str, str] | None = None
    type: str = "save_weights"


class SaveWeightsForSamplerRequest(Wire):
    model_id: Id
    path: Id | None = None
    sampling_session_seq_id: SeqId | None = None
    kind: Id = "snapshot"
    seq_id: SeqId | None = None
    ttl_seconds: Ttl | None = None
    user_metadata: dict[str, str] | None = None
    type: str = "save_weights_for_sampler"


class LoadWeightsRequest(Wire):
    model_id: Id | None = None
    seq_id: SeqId | None = None
    session_id: Id | None = None
    model_seq_id: SeqId | None = None
    base_model: Id | None = None
    user_metadata: Metadata | None = None
    path: Id
    optimizer: bool
    optimizer_config: OptimizerConfigIn | None = None
    weights_access_token: str | None = None
    type: str = "load_weights"


class CreateSamplingSessionRequest(Wire):
    session_id: Id
    sampling_session_seq_id: SeqId
    base_model: Id | None = None
    model_path: Id | None = None
    type: str = "create_sampling_session"


class SamplingParamsIn(Wire):
    max_tokens: int | None = None
    seed: int | None = None
    stop: str | list[str] | list[int] | None = None
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0


class SampleRequest(Wire):
    num_samples: Int = 1
    prompt: dict[str, Any]
    """The SDK's `ModelInput`, read by `sampling.prompt_tokens` (which refuses other chunk kinds by name)."""
    sampling_params: SamplingParamsIn
    base_model: Id | None = None
    model_path: Id | None = None
    sampling_session_id: Id | None = None
    seq_id: SeqId | None = None
    prompt_logprobs: bool | None = None
    topk_prompt_logprobs: Int = 0
    topk_sample_logprobs: Int = 0
    target_prompt_logprobs: dict[str, Any] | None = None
    prompt_alt_tokens_k: Int = 0
    prompt_logprobs_last_n: Int | None = None
    record_stability_info: bool | None = None
    type: str = "sample"


class FutureRetrieveRequest(Wire):
    request_id: Id
    allow_metadata_only: bool = False


def unknown_field(where: str, known: list[str] | tuple[str, ...]) -> Refusal:
    """The refusal of an unknown key in a free-form part of a body (`where` is its full path), in
    the words pydantic's refusals use: `a.b: unknown field; did you mean 'c'?`."""
    where = where if len(where) <= 200 else where[:200] + "..."  # a name, not an echo of a megabyte
    key = where.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known fields: {', '.join(known) or 'none'}"
    return Refusal(f"{where}: unknown field{hint}")
