"""Recorded stage batches -> plain views (fields, tokens, groups) that the HTML and Markdown writers render.

Nothing here knows a recipe: a view shows whatever fields a stage's batch holds. Per-token fields
are recognised by shape: a 2-D tensor as wide as `responses` is a response field, one as wide as
`input_ids` covers prompt and response.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from turnrl.batch import Batch
from turnrl.inspector.docs import StageDoc, focus_fields, stage_doc

# fields shown as the token itself, never as a per-token value
ID_FIELDS = ("input_ids", "prompts", "responses")
# boolean per-token fields drawn as an outline around the token
MARK_FIELDS = ("clipped", "dual_clipped", "outside_clip")


@dataclass
class FieldInfo:
    name: str
    kind: str  # "tensor" or "non-tensor"
    shape: str
    dtype: str
    status: str  # "new", "changed" or "same" relative to the previous stage


@dataclass
class Tok:
    id: int
    text: str
    kind: str  # "prompt", "model", "obs" or "pad"
    values: dict[str, float]
    turn: int = 0  # 1-based turn of a model token, 0 elsewhere
    turn_start: bool = False
    marked: bool = False


@dataclass
class RowView:
    row: int
    info: dict[str, str]
    prompt: list[Tok]
    response: list[Tok]
    turns: int


@dataclass
class GroupRow:
    uid: str
    rows: list[int]
    cells: dict[str, list[str]]  # column -> one cell per row
    summary: str


@dataclass
class StageView:
    number: int
    name: str
    doc: StageDoc
    elapsed_s: float
    size: int
    fields: list[FieldInfo]
    inputs: list[str]
    dropped: list[str]
    rows: list[RowView] = field(default_factory=list)
    hidden_rows: int = 0
    focus: str | None = None
    focus_range: tuple[float, float] = (0.0, 0.0)
    response_fields: list[str] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# -- fields ------------------------------------------------------------------------------------------
def _same_values(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if len(a) != len(b):
            return False
        try:
            return all(bool(np.all(x == y)) for x, y in zip(a, b, strict=True))
        except (ValueError, TypeError):
            return False
    return False


def field_infos(batch: Batch, prev: Batch | None) -> list[FieldInfo]:
    out = []
    for name, t in batch.tensors.items():
        status = "new" if prev is None or name not in prev else "changed"
        if status == "changed" and _same_values(t, prev[name] if prev is not None else None):
            status = "same"
        out.append(FieldInfo(name, "tensor", str(tuple(t.shape)), str(t.dtype).replace("torch.", ""), status))
    for name, arr in batch.non_tensors.items():
        status = "new" if prev is None or name not in prev else "changed"
        if status == "changed" and _same_values(arr, prev[name] if prev is not None else None):
            status = "same"
        kinds = sorted({type(v).__name__ for v in arr})
        out.append(FieldInfo(name, "non-tensor", f"[{len(arr)}]", "/".join(kinds) or "-", status))
    return out


def short(value: Any, limit: int = 160) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, default=str, ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- tokens ------------------------------------------------------------------------------------------
class Decoder:
    """Per-id text, cached: the same ids recur in every stage."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self.cache.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id]) if self.tokenizer is not None else f"<{token_id}>"
            self.cache[token_id] = text
        return text


@dataclass
class Layout:
    """Where prompt and response sit in a stage's tensors."""

    width: int  # full sequence width (prompt + response), 0 when the batch has no input_ids
    resp: int  # response width, 0 before the rollout
    response_fields: list[str]
    full_fields: list[str]


def layout(batch: Batch) -> Layout:
    t = batch.tensors
    resp = int(t["responses"].shape[1]) if "responses" in t and t["responses"].dim() == 2 else 0
    width = int(t["input_ids"].shape[1]) if "input_ids" in t and t["input_ids"].dim() == 2 else 0
    if not width and resp and "prompts" in t:
        width = int(t["prompts"].shape[1]) + resp
    if not width and resp and "attention_mask" in t and t["attention_mask"].dim() == 2:
        # a batch without prompt ids (an update micro-batch) still knows padding from its attention mask
        width = max(int(t["attention_mask"].shape[1]), resp)
    per_token = [k for k, v in t.items() if v.dim() == 2 and k not in ID_FIELDS]
    response_fields = [k for k in per_token if resp and v_width(t[k]) == resp and v_width(t[k]) != width]
    full_fields = [k for k in per_token if width and v_width(t[k]) == width]
    return Layout(width, resp, response_fields, full_fields)


def v_width(t: torch.Tensor) -> int:
    return int(t.shape[1])


def _num(x: torch.Tensor) -> float:
    return float(x.item()) if x.dtype != torch.bool else float(bool(x.item()))


def row_tokens(batch: Batch, i: int, lay: Layout, decode: Decoder) -> tuple[list[Tok], list[Tok]]:
    t = batch.tensors
    prompt_w = lay.width - lay.resp if lay.width else 0
    if "prompts" in t:
        prompt_ids = t["prompts"][i].tolist()
    elif "input_ids" in t:
        prompt_ids = t["input_ids"][i, :prompt_w].tolist()
    else:
        prompt_ids = []
    attn = t["attention_mask"][i] if "attention_mask" in lay.full_fields else None
    prompt = []
    for c, tid in enumerate(prompt_ids):
        values = {k: _num(t[k][i, c]) for k in lay.full_fields}
        real = attn is None or bool(attn[c])
        prompt.append(Tok(tid, decode(tid), "prompt" if real else "pad", values))
    response: list[Tok] = []
    if not lay.resp:
        return prompt, response
    rmask = t["response_mask"][i] if "response_mask" in lay.response_fields else None
    turn, prev_kind = 0, ""
    for c, tid in enumerate(t["responses"][i].tolist()):
        values = {k: _num(t[k][i, prompt_w + c]) for k in lay.full_fields}
        values.update({k: _num(t[k][i, c]) for k in lay.response_fields})
        real = attn is None or bool(attn[prompt_w + c])
        if rmask is not None and rmask[c] > 0:
            kind = "model"
        elif rmask is not None:
            kind = "obs" if real else "pad"
        else:
            kind = "model" if real else "pad"
        tok = Tok(tid, decode(tid), kind, values)
        if kind == "model":
            if prev_kind != "model":
                turn += 1
                tok.turn_start = True
            tok.turn = turn
        if kind != "pad":
            prev_kind = kind
        tok.marked = any(values.get(k, 0.0) != 0.0 for k in MARK_FIELDS)
        response.append(tok)
    return prompt, response


def row_info(batch: Batch, i: int) -> dict[str, str]:
    info = {k: short(v[i]) for k, v in batch.non_tensors.items()}
    for k, v in batch.tensors.items():
        if v.dim() == 1:
            info[k] = short(_num(v[i]))
    return info


# -- groups ------------------------------------------------------------------------------------------
def _first_model(row: torch.Tensor, mask: torch.Tensor) -> float | None:
    idx = torch.nonzero(mask > 0)
    return float(row[int(idx[0])]) if len(idx) else None


def group_rows(batch: Batch) -> list[GroupRow]:
    """Rows grouped by `uid` with their sequence-level numbers: what group estimators compare."""
    if "uid" not in batch:
        return []
    t = batch.tensors
    mask = t.get("response_mask")
    groups: dict[str, list[int]] = {}
    for r, u in enumerate(batch["uid"]):
        groups.setdefault(short(u), []).append(r)
    out = []
    for uid, rows in groups.items():
        cells: dict[str, list[str]] = {}
        scores = []
        for r in rows:
            if "token_level_scores" in t:
                s = float(t["token_level_scores"][r].sum())
                scores.append(s)
                cells.setdefault("score", []).append(f"{s:.4g}")
            if "token_level_rewards" in t:
                cells.setdefault("reward (sum)", []).append(f"{float(t['token_level_rewards'][r].sum()):.4g}")
            for key in ("advantages", "returns"):
                if key in t and mask is not None:
                    v = _first_model(t[key][r], mask[r])
                    cells.setdefault(f"{key} (1st token)", []).append("-" if v is None else f"{v:.4g}")
            if mask is not None:
                cells.setdefault("model tokens", []).append(str(int(mask[r].sum())))
            if "finish_reason" in batch.non_tensors:
                cells.setdefault("finish", []).append(short(batch["finish_reason"][r]))
        summary = ""
        if scores:
            arr = np.asarray(scores)
            std = float(arr.std(ddof=1)) if len(arr) > 1 else 0.0
            summary = f"score mean {arr.mean():.4g}, std {std:.4g}"
        out.append(GroupRow(uid, rows, cells, summary))
    return out


# -- stages ------------------------------------------------------------------------------------------
def focus_of(name: str, fields: list[str]) -> str | None:
    return next((key for key in focus_fields(name) if key in fields), None)


def stage_view(
    number: int,
    name: str,
    batch: Batch,
    elapsed_s: float,
    prev: Batch | None,
    decode: Decoder,
    max_rows: int,
) -> StageView:
    lay = layout(batch)
    view = StageView(
        number=number,
        name=name,
        doc=stage_doc(name),
        elapsed_s=elapsed_s,
        size=len(batch),
        fields=field_infos(batch, prev),
        inputs=list(prev.keys()) if prev is not None else [],
        dropped=[k for k in (prev.keys() if prev is not None else []) if k not in batch],
        response_fields=lay.response_fields,
        focus=focus_of(name, lay.response_fields),
        groups=group_rows(batch),
    )
    shown = min(len(batch), max_rows)
    view.hidden_rows = len(batch) - shown
    for i in range(shown):
        prompt, response = row_tokens(batch, i, lay, decode)
        turns = max((t.turn for t in response), default=0)
        view.rows.append(RowView(i, row_info(batch, i), prompt, response, turns))
    if view.focus:
        vals = [t.values[view.focus] for r in view.rows for t in r.response if t.kind == "model"]
        if vals:
            view.focus_range = (min(vals), max(vals))
    return view


def metrics_view(number: int, metrics: dict[str, Any], elapsed_s: float) -> StageView:
    view = StageView(number, "metrics", stage_doc("metrics"), elapsed_s, 0, [], [], [])
    view.metrics = dict(metrics)
    return view
