"""The protobuf bodies of the tinker protocol, read and written with the SDK's own generated module
(`tinker.proto.tinker_public_pb2`): the SDK is the library made for this wire format, so the
server decodes exactly what the SDK encodes and answers in the layout its decoder reads.

- in: `/api/v1/forward_backward`'s body (`ForwardBackwardRequest`: datums as token chunks and
  loss-input tensors), decoded into plain `DatumIn`s of numpy arrays;
- out: `ForwardBackwardOutput` (per-datum tensors as `ArrayRecord`s of `BatchedTensor`s, plus
  metrics) and `SampleResponse` (sampled tokens and log-probs, prompt log-probs), which this SDK
  version reads only as protobuf from `/api/v1/retrieve_future`.

The SDK is imported here and only here, when a body is first decoded or encoded: it is an optional
extra (`pip install 'turnrl[tinker]'`), and nothing else of turnrl needs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from turnrl.servers.refusal import Refusal

PROTOBUF = "application/x-protobuf"

SDK_MISSING = "the tinker SDK is not installed; pip install 'turnrl[tinker]'"

MAX_TENSOR = 1 << 24
"""Entries of one loss input (N tokens x K candidates): a sparse tensor is densified, so its shape,
not its bytes, is what it costs."""


@cache
def pb() -> Any:
    """The SDK's generated protobuf module, or ImportError with the line to install it."""
    try:
        from tinker.proto import tinker_public_pb2
    except ImportError as err:
        raise ImportError(SDK_MISSING) from err
    return tinker_public_pb2


@dataclass
class DatumIn:
    """One datum as the loss reads it: the input tokens and the named loss inputs."""

    tokens: list[int]
    inputs: dict[str, np.ndarray]


@dataclass
class ForwardBackwardIn:
    model_id: str
    seq_id: int
    loss_fn: str
    config: dict[str, float | str]
    forward_only: bool
    data: list[DatumIn]


def _numpy_dtypes() -> dict[int, np.dtype]:
    m = pb()
    return {
        m.DTYPE_FLOAT32: np.dtype(np.float32),
        m.DTYPE_INT64: np.dtype(np.int64),
        m.DTYPE_INT32: np.dtype(np.int32),
    }


def _tensor(msg: Any, where: str) -> np.ndarray:
    """A `Tensor` message as a numpy array of its shape (a sparse CSR tensor densified with 0, the
    SDK's own default fill)."""
    dtype = _numpy_dtypes().get(msg.dtype)
    if dtype is None:
        raise Refusal(f"{where}: tensor dtype {msg.dtype} is not float32, int64 or int32")
    shape = [int(s) for s in msg.shape]
    if len(shape) > 2 or any(s < 0 for s in shape) or math.prod(shape) > MAX_TENSOR:
        raise Refusal(f"{where}: shape {shape[:8]} is not a loss input's (N,) or (N, K) of at most {MAX_TENSOR} entries")  # fmt: skip
    try:
        if msg.WhichOneof("encoding") == "sparse_csr":
            return _sparse(msg.sparse_csr, shape, dtype, where)
        flat = np.frombuffer(msg.dense, dtype=dtype).copy()  # writable: torch warns on views of bytes
    except (ValueError, IndexError) as err:
        raise Refusal(f"{where}: malformed tensor bytes ({' '.join(str(err).split())[:200]})") from None
    if not shape:
        return flat
    if math.prod(shape) != flat.size:
        raise Refusal(f"{where}: {flat.size} values do not fill its shape {shape}")
    return flat.reshape(shape)


def _sparse(csr: Any, shape: list[int], dtype: np.dtype, where: str) -> np.ndarray:
    """A sparse CSR tensor densified with 0, the SDK's own default fill."""
    if len(shape) != 2:
        raise Refusal(f"{where}: a sparse tensor needs a 2-D shape, got {shape}")
    values = np.frombuffer(csr.values, dtype=dtype)
    crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
    col = np.frombuffer(csr.col_indices, dtype=np.int64)
    if (
        len(crow) != shape[0] + 1
        or len(col) != len(values)
        or (len(crow) and (crow[0] != 0 or crow[-1] != len(values)))
        or (len(crow) and (np.diff(crow) < 0).any())
        or (len(col) and (col.min() < 0 or col.max() >= shape[1]))
    ):
        raise Refusal(f"{where}: sparse CSR indices do not match its shape {shape}")
    dense = np.zeros(shape, dtype=dtype)
    rows = np.repeat(np.arange(shape[0]), np.diff(crow))
    dense[rows, col] = values
    return dense


def _tokens(datum: Any, where: str) -> list[int]:
    tokens: list[int] = []
    for j, chunk in enumerate(datum.model_input):
        kind = chunk.WhichOneof("chunk")
        if kind != "encoded_text":
            raise Refusal(
                f"{where}.model_input.chunks[{j}]: {kind} chunks are not supported (token chunks only)"
            )
        raw = chunk.encoded_text.tokens
        if len(raw) % 4:
            raise Refusal(f"{where}.model_input.chunks[{j}]: token bytes are not int32s")
        tokens.extend(np.frombuffer(raw, dtype=np.int32).tolist())
    return tokens


def _config(msg: Any) -> dict[str, float | str]:
    """`loss_fn_config`: the tagged v2 map when the SDK sent it (it always does), else the legacy
    float map."""
    if msg.loss_fn_config_v2:
        out: dict[str, float | str] = {}
        for key, value in msg.loss_fn_config_v2.items():
            out[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
        return out
    return {key: float(value) for key, value in msg.loss_fn_config.items()}


def decode_forward_backward(body: bytes) -> ForwardBackwardIn:
    """`/api/v1/forward_backward`'s body, or a Refusal naming what is wrong with it."""
    msg = pb().ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as err:  # google.protobuf.message.DecodeError and friends
        raise Refusal(f"request body: not a ForwardBackwardRequest protobuf ({type(err).__name__})") from None
    data = []
    for i, datum in enumerate(msg.data):
        where = f"data[{i}]"
        inputs = {
            name: _tensor(t, f"{where}.loss_fn_inputs.{name}") for name, t in datum.loss_fn_inputs.items()
        }
        data.append(DatumIn(_tokens(datum, where), inputs))
    return ForwardBackwardIn(
        msg.model_id, int(msg.seq_id), msg.loss_fn, _config(msg), bool(msg.forward_only), data
    )


def encode_forward_backward(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """A `ForwardBackwardOutput`: per-datum float32 tensors (each field's leading dimension is the
    datum's tokens) and the metrics. Consecutive datums whose fields have the same trailing shape
    share one `ArrayRecord`; the SDK's decoder reads any number of them in order."""
    m = pb()
    msg = m.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", metrics=metrics)
    runs: list[list[dict[str, np.ndarray]]] = []
    for out in outputs:
        key = {name: a.shape[1:] for name, a in out.items()}
        if runs and {name: a.shape[1:] for name, a in runs[-1][0].items()} == key:
            runs[-1].append(out)
        else:
            runs.append([out])
    for run in runs:
        record = msg.loss_fn_outputs.add(type_tag="ArrayRecord", num_datums=len(run))
        for name in run[0]:
            arrays = [np.ascontiguousarray(out[name], dtype=np.float32) for out in run]
            offsets = np.cumsum([0] + [a.nbytes for a in arrays], dtype=np.int64)
            tensor = record.fields[name]
            tensor.data = b"".join(a.tobytes() for a in arrays)
            tensor.offsets = offsets.tobytes()
            tensor.dtype = m.DTYPE_FLOAT32
            tensor.trailing_shape.extend(arrays[0].shape[1:])
    return msg.SerializeToString()


def encode_sample(
    sequences: list[tuple[list[int], list[float], str]], prompt_logprobs: list[float] | None
) -> bytes:
    """A `SampleResponse`: per sequence its tokens, their log-probs and why it stopped ('stop' or
    'length'); `prompt_logprobs` (NaN where none was computed) when they were asked for."""
    m = pb()
    reasons = {"stop": m.STOP_REASON_STOP, "length": m.STOP_REASON_LENGTH}
    msg = m.SampleResponse()
    for tokens, logprobs, reason in sequences:
        msg.sequences.add(
            stop_reason=reasons.get(reason, m.STOP_REASON_STOP),
            tokens=np.asarray(tokens, dtype=np.int32).tobytes(),
            logprobs=np.asarray(logprobs, dtype=np.float32).tobytes(),
        )
    if prompt_logprobs is not None:
        msg.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    return msg.SerializeToString()
