"""Prompts, configs and readers of agent batches, shared by the agent-rollout tests (turn-locked
and streaming schedules)."""

from __future__ import annotations

from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.tensors import left_pad, position_ids_from_mask


def encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def chat_prompt(tok, text: str) -> list[int]:
    return encode(
        tok,
        tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        ),
    )


def gen_batch(tok, texts: list[str]) -> Batch:
    ids, mask = left_pad([chat_prompt(tok, t) for t in texts], tok.pad_token_id)
    return Batch({"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)})


def agent_cfg(tmp_path, **extra):
    base = {
        "rollout.multi_turn.enable": True,
        "rollout.multi_turn.tools": "[calculator]",
        "rollout.multi_turn.max_turns": 2,
        "model.cache_dir": str(tmp_path),
    }
    base.update(extra)
    return load_config(None, [f"{k}={v}" for k, v in base.items()])


def unpadded(batch: Batch, i: int) -> tuple[list[int], list[int], list[float]]:
    r = batch["responses"].shape[1]
    full = batch["input_ids"][i][batch["attention_mask"][i].bool()].tolist()
    k = int(batch["attention_mask"][i, -r:].sum())
    return full, batch["response_mask"][i, :k].tolist(), batch["rollout_log_probs"][i, :k].tolist()


def segments(batch: Batch, i: int) -> list[tuple[int, list[int]]]:
    """The response of row i as runs of (response_mask value, ids): model turns and observations."""
    _, mask, _ = unpadded(batch, i)
    ids = batch["responses"][i, : len(mask)].tolist()
    runs: list[tuple[int, list[int]]] = []
    for m, t in zip(mask, ids, strict=True):
        if runs and runs[-1][0] == int(m):
            runs[-1][1].append(t)
        else:
            runs.append((int(m), [t]))
    return runs
