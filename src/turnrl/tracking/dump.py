"""Rollout dumps: every sample of a step as one JSON line, to read what the policy actually wrote.

A collapse of the answer format or a reward hack shows in a handful of samples long before it
shows in the mean score, so `trainer.rollout_dump_freq` writes `<run>/rollouts/step_<N>.jsonl`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from turnrl.batch import Batch


def _texts(tokenizer: Any, ids: Any, mask: Any, skip_special: bool) -> list[str]:
    return [
        tokenizer.decode(row[m.bool()].tolist(), skip_special_tokens=skip_special)
        for row, m in zip(ids, mask, strict=True)
    ]


def rollout_records(batch: Batch, tokenizer: Any) -> list[dict[str, Any]]:
    """One dict per sample: prompt, response, score, data_source, uid (and what else the batch knows)."""
    responses = batch["responses"]
    width = responses.shape[1]
    attention = batch["attention_mask"]
    # the prompt keeps its chat-template markers (they are part of what the model saw); the response is
    # decoded as the reward function sees it: real tokens only, special tokens dropped
    prompts = _texts(tokenizer, batch["prompts"], attention[:, :-width], skip_special=False)
    texts = _texts(tokenizer, responses, attention[:, -width:], skip_special=True)
    scores = batch["token_level_scores"].sum(-1).tolist() if "token_level_scores" in batch else None
    rewards = batch["token_level_rewards"].sum(-1).tolist() if "token_level_rewards" in batch else None
    lengths = batch["response_mask"].sum(-1).tolist() if "response_mask" in batch else None
    out = []
    for i in range(len(batch)):
        rec: dict[str, Any] = {"prompt": prompts[i], "response": texts[i]}
        if scores is not None:
            rec["score"] = scores[i]
        if rewards is not None and rewards != scores:
            rec["reward"] = rewards[i]
        for key in ("data_source", "uid", "ground_truth", "finish_reason"):
            if key in batch.non_tensors:
                rec[key] = batch[key][i]
        if lengths is not None:
            rec["response_length"] = int(lengths[i])
        out.append(rec)
    return out


def dump_rollouts(run_dir: Path, step: int, batch: Batch, tokenizer: Any) -> Path:
    """Write `<run_dir>/rollouts/step_<step>.jsonl` (atomically: a reader never sees half a file)."""
    path = Path(run_dir) / "rollouts" / f"step_{step}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r, default=str, ensure_ascii=False) for r in rollout_records(batch, tokenizer)]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    tmp.replace(path)
    return path
