"""Rollout dumps: one JSON line per sample, texts decoded from the real ids, padding left out."""

import json

import torch

from turnrl.batch import Batch
from turnrl.models.loader import load_tokenizer
from turnrl.tracking.dump import dump_rollouts


def test_dump_writes_one_line_per_sample(tmp_path):
    tok = load_tokenizer("tiny-random")
    pad = tok.pad_token_id
    prompt = tok("Compute 2 + 3.", add_special_tokens=False)["input_ids"]
    answer = tok("<answer>5</answer>", add_special_tokens=False)["input_ids"]
    wrong = tok("7", add_special_tokens=False)["input_ids"]
    p, r = len(prompt) + 1, len(answer) + 2  # one left pad on the prompt, right padding on the responses
    prompts = torch.tensor([[pad, *prompt]] * 2)
    responses = torch.full((2, r), pad)
    responses[0, : len(answer)] = torch.tensor(answer)
    responses[1, : len(wrong)] = torch.tensor(wrong)
    resp_mask = (torch.arange(r) < torch.tensor([[len(answer)], [len(wrong)]])).float()
    attn = torch.cat([torch.tensor([[0] + [1] * (p - 1)] * 2), resp_mask.long()], 1)
    scores = torch.zeros(2, r)
    scores[0, len(answer) - 1] = 1.0  # the score sits on the last model token
    batch = Batch(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "attention_mask": attn,
            "response_mask": resp_mask,
            "token_level_scores": scores,
        },
        non_tensors={"data_source": ["toy", "toy"], "uid": [3, 3], "ground_truth": ["5", "5"]},
    )
    path = dump_rollouts(tmp_path, 12, batch, tok)
    assert path == tmp_path / "rollouts" / "step_12.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["response"] for r in rows] == ["<answer>5</answer>", "7"]
    assert all(r["prompt"] == "Compute 2 + 3." for r in rows)  # the left pad is not part of the text
    assert [r["score"] for r in rows] == [1.0, 0.0]
    assert [(r["uid"], r["data_source"], r["response_length"]) for r in rows] == [
        (3, "toy", len(answer)),
        (3, "toy", len(wrong)),
    ]
    assert not list(path.parent.glob(".*.tmp"))
