"""The step inspector's pieces on hand-built batches: snapshots, token kinds, turns, field diffs, pages."""

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from turnrl.batch import Batch
from turnrl.config.schema import Config
from turnrl.inspector.markdown import render_markdown, response_text
from turnrl.inspector.page import heat, render_html
from turnrl.inspector.trace import (
    TRACE_DEFAULTS,
    Record,
    TraceRecorder,
    after_update,
    build_views,
    snapshot,
    trace_overrides,
)
from turnrl.inspector.view import Decoder, field_infos, layout, row_tokens


def agent_batch() -> Batch:
    """One prompt (2 tokens + 1 left pad) and a 2-turn response: model, observation, model, padding.

    response:       11 12 | 90 91 | 13 | pad pad
    response_mask:   1  1 |  0  0 |  1 |  0   0
    attention(resp): 1  1 |  1  1 |  1 |  0   0
    """
    prompts = torch.tensor([[0, 5, 6]])
    responses = torch.tensor([[11, 12, 90, 91, 13, 0, 0]])
    rmask = torch.tensor([[1, 1, 0, 0, 1, 0, 0]], dtype=torch.float32)
    attn = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 0, 0]])
    return Batch(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": attn,
            "position_ids": (attn.cumsum(-1) - 1).clamp(min=0) * attn,
            "response_mask": rmask,
            "advantages": torch.tensor([[0.5, 0.5, 0.0, 0.0, 0.5, 0.0, 0.0]]),
        },
        non_tensors={"uid": [7], "data_source": ["toy"]},
    )


def test_snapshot_is_immune_to_later_changes_of_the_batch():
    batch = agent_batch()
    rec = TraceRecorder()
    rec.record("gen", batch, 0.1)
    batch.pop(["prompts"])  # the next stages pop fields ...
    batch["advantages"].add_(1.0)  # ... and write into tensors in place
    batch.non_tensors["uid"][0] = 99
    snap = rec.records[0].batch
    assert "prompts" in snap
    assert snap["advantages"][0, 0].item() == 0.5
    assert snap["uid"][0] == 7


def test_a_stage_recorded_twice_keeps_both():
    rec = TraceRecorder()
    rec.record("update_actor", agent_batch(), 0.0)
    rec.record("update_actor", agent_batch(), 0.0)
    assert [r.stage for r in rec.records] == ["update_actor", "update_actor#2"]


def test_trace_overrides_put_the_users_last_and_skip_defaults_they_set():
    out = trace_overrides(["rollout.n=4", "data.max_response_length=8", "trainer.logger=[wandb]"], "/tmp/x")
    assert "rollout.n=2" not in out and out.index("rollout.n=4") > out.index("data.train_batch_size=2")
    assert "trainer.default_local_dir=/tmp/x" in out
    from turnrl.config.loader import valid_keys

    defaults = [k for k in TRACE_DEFAULTS if k in valid_keys()]  # sections a build lacks are skipped
    assert len(out) == len(defaults) - 1 + 1 + 3 + 2
    assert out[-2:] == ["trainer.logger=[]", "trainer.rollout_dump_freq=0"]  # never logs, whatever it is told


def test_tokens_are_classified_model_observation_padding_with_turns():
    batch = agent_batch()
    lay = layout(batch)
    assert (lay.width, lay.resp) == (10, 7)
    assert set(lay.response_fields) == {"response_mask", "advantages"}
    prompt, response = row_tokens(batch, 0, lay, Decoder(None))
    assert [t.kind for t in prompt] == ["pad", "prompt", "prompt"]
    assert [t.kind for t in response] == ["model", "model", "obs", "obs", "model", "pad", "pad"]
    assert [t.turn for t in response] == [1, 1, 0, 0, 2, 0, 0]
    assert [t.turn_start for t in response] == [True, False, False, False, True, False, False]
    # every per-token field is attached to its token: full-width fields at prompt offset + column
    assert response[4].values["position_ids"] == 6 and response[4].values["advantages"] == 0.5
    assert response_text(response) == "[turn 1] <11><12>« observation: <90><91> »[turn 2] <13>"


def test_field_status_against_the_previous_stage():
    prev = agent_batch()
    cur = agent_batch()
    cur["advantages"] = cur["advantages"] * 2
    cur["returns"] = torch.zeros(1, 7)
    cur.pop(["data_source"])
    status = {f.name: f.status for f in field_infos(cur, prev)}
    assert status["advantages"] == "changed" and status["returns"] == "new"
    assert status["responses"] == "same" and status["uid"] == "same"
    assert "data_source" not in status


def test_heat_colours_sign_and_zero():
    assert "26,127,55" in heat("advantages", 1.0, -1.0, 1.0)  # positive: green
    assert "207,34,46" in heat("advantages", -1.0, -1.0, 1.0)  # negative: red
    assert heat("advantages", 0.0, -1.0, 1.0) == ""  # zero carries no colour
    assert heat("ratio", 1.0, 0.5, 2.0) == ""  # ratio 1 = unchanged
    assert "26,127,55" in heat("ratio", 2.0, 0.5, 2.0)


def update_diagnostics_batch() -> Batch:
    """What `actor.update` returns for its first micro-batch (the loop records it under
    `update_actor`): ratio, clipping, per-token loss."""
    b = agent_batch()
    old = torch.tensor([[-1.0, -2.0, 0.0, 0.0, -0.5, 0.0, 0.0]])
    ratio = torch.tensor([[1.5, 0.9, 0.0, 0.0, 1.0, 0.0, 0.0]])
    no = [False] * 7
    return Batch(
        tensors={
            "responses": b["responses"],
            "response_mask": b["response_mask"],
            "attention_mask": b["attention_mask"],
            "old_log_probs": old,
            "advantages": b["advantages"],
            "log_probs": old + torch.log(ratio.clamp(min=1e-9)) * b["response_mask"],
            "ratio": ratio,
            "clipped": torch.tensor([[True, *no[1:]]]),
            "dual_clipped": torch.tensor([no]),
            # A=+0.5, ratio 1.5 > 1.2 -> the clipped term decides: loss = -0.5 * 1.2 = -0.6
            "pg_loss": torch.tensor([[-0.6, -0.45, 0.0, 0.0, -0.5, 0.0, 0.0]]),
        },
        non_tensors={"uid": np.array([7], dtype=object)},
    )


def test_page_shows_every_stage_turns_observations_and_clipping():
    records = [
        Record("gen", snapshot(agent_batch()), 0.25),
        Record("update_actor", update_diagnostics_batch(), 0.125),
    ]
    views = build_views(records, None, {"actor/pg_loss": -0.5, "timing_s/update_actor": 0.125}, 8)
    assert [v.name for v in views] == ["gen", "update_actor", "metrics"]
    assert views[1].elapsed_s == 0.125  # the update's real time, recorded by the loop
    assert views[1].focus == "ratio"
    html = render_html(views, {"command": "turnrl trace", "step": 1, "summary": {"model": "toy"}})
    for name in ("gen", "update_actor", "metrics"):
        assert f'id="stage-{name}"' in html
    assert html.count('<span class="t obs"') == 2 * 2  # two observation tokens, in both stages
    assert '<span class="turn">turn 2</span>' in html
    # the clipped token is outlined, and its hover text carries ratio and loss
    clipped = re.findall(r'<span class="t model mark"[^>]*title="([^"]*)"', html)
    assert len(clipped) == 1 and "ratio=1.5" in clipped[0] and "pg_loss=-0.6" in clipped[0]
    # self-contained: nothing is fetched from anywhere
    assert not re.search(r'(src|href)="(https?:)?//', html) and "<link" not in html
    md = render_markdown(views, {"command": "turnrl trace", "step": 1})
    assert "(`update_actor`)" in md and "`ratio` on model tokens: 1.5, 0.9, 1" in md
    assert "« observation: " in md


class FakeActorGroup:
    """The actor's worker group as the driver sees it: `compute_log_prob` returns a CPU Batch."""

    def __init__(self, log_probs: torch.Tensor):
        self.log_probs = log_probs
        self.seen: Batch | None = None

    def compute_log_prob(self, batch: Batch) -> Batch:
        self.seen = batch
        return Batch(tensors={"log_probs": self.log_probs, "entropys": torch.zeros_like(self.log_probs)})


def test_after_update_scores_the_responses_with_the_updated_actor():
    batch = agent_batch()
    batch["old_log_probs"] = torch.tensor([[-1.0, -2.0, 0.0, 0.0, -0.5, 0.0, 0.0]])
    # new - old per model token: +0.5, -0.1, +0.25 -> ratio e^0.5=1.6487 > 1.2 (outside the clip range),
    # e^-0.1=0.9048 and e^0.25=1.2840 > 1.2 (outside); observation and padding stay 0
    new = torch.tensor([[-0.5, -2.1, -3.0, -3.0, -0.25, -3.0, -3.0]])
    actor = FakeActorGroup(new)
    trainer = SimpleNamespace(actor=actor, cfg=Config())
    after = after_update(trainer, batch)
    assert after is not None and actor.seen is not None
    assert {"input_ids", "position_ids", "uid"} <= set(actor.seen.keys())  # uid: whole groups per rank
    ratio = after["ratio_after"][0].tolist()
    assert ratio == pytest.approx([math.exp(0.5), math.exp(-0.1), 0.0, 0.0, math.exp(0.25), 0.0, 0.0])
    assert after["outside_clip"][0].tolist() == [True, False, False, False, True, False, False]
    assert after["log_probs_after"][0, 2].item() == 0.0  # not a model token
    # the actor's update diagnostics hold old log-probs but no prompt: nothing to score
    assert after_update(trainer, update_diagnostics_batch()) is None
