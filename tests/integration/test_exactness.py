"""Exactness in the real loop: an on-policy update starts at ratio 1, and the log-probs the trainer
computes do not depend on how the batch is cut into micro-batches or padded, nor on whether
responses to one prompt share its forward pass."""

from pathlib import Path

import pytest
import torch

from tests.support.keep_stages import KeepStages
from tests.support.scripted_engine import ScriptedEngine
from tests.support.tiny_runs import tiny_overrides
from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_first_on_policy_mini_batch_has_ratio_exactly_one(tmp_path):
    # several mini-batches, and micro-batches of other sizes than the old-log-prob pass's and
    # cut differently: the first micro-batch of the first mini-batch still sees ratio == 1 exactly
    over = {
        "trainer.total_training_steps": 1,
        "actor.ppo_mini_batch_size": 2,
        "actor.ppo_micro_batch_size": 3,
        "actor.log_prob_micro_batch_size": 5,
        "rollout.n": 2,
        "data.max_response_length": 16,
        "algorithm.rollout_correction.bypass": "false",  # the trainer's own old log-probs
    }
    keep = KeepStages()
    trainer = Trainer(load_config(None, tiny_overrides(tmp_path, **over)), hooks=[keep])
    trainer.fit()
    diag = keep.batches["update_actor"]
    mask = diag["response_mask"].bool()
    assert len(diag) == 3 and len(set(diag["uid"])) == 2  # a micro-batch that cuts a group
    assert torch.equal(diag["ratio"][mask], torch.ones(int(mask.sum())))
    assert not diag["clipped"][mask].any()


@pytest.mark.timeout(300)
def test_log_probs_do_not_depend_on_micro_batch_size_padding_or_prefix_sharing(tmp_path):
    keep = KeepStages()
    over = {
        "trainer.total_training_steps": 1,
        "data.max_response_length": 16,
        "algorithm.rollout_correction.bypass": "false",  # the trainer's old_log_prob pass is the subject
    }
    trainer = Trainer(load_config(None, tiny_overrides(tmp_path, **over)), hooks=[keep])
    trainer.fit()
    batch = keep.batches["old_log_prob"]
    actor = trainer.actor.group.workers[0]
    mask = batch["response_mask"].bool()

    def log_probs(b: Batch, micro: int, share: bool) -> torch.Tensor:
        actor.cfg.log_prob_micro_batch_size, actor.share_prompts = micro, share
        return actor.compute_log_prob(b)["log_probs"]

    reference = log_probs(batch, 1, False)  # the updated policy, one row at a time, no sharing
    assert not torch.allclose(reference[mask], batch["old_log_probs"][mask], atol=1e-3)  # it moved

    for micro in (2, 3, 7, len(batch)):
        for share in (False, True):
            got = log_probs(batch, micro, share)
            assert torch.allclose(got[mask], reference[mask], atol=1e-5, rtol=0), (micro, share)

    # 5 more pad tokens on the left of every prompt (positions follow the mask)
    pad = 5
    padded = Batch(tensors=dict(batch.tensors), non_tensors=dict(batch.non_tensors))
    left = torch.full((len(batch), pad), trainer.pad_id, dtype=batch["input_ids"].dtype)
    padded["input_ids"] = torch.cat([left, batch["input_ids"]], 1)
    padded["attention_mask"] = torch.cat([torch.zeros_like(left), batch["attention_mask"]], 1)
    padded["position_ids"] = torch.cat([torch.zeros_like(left), batch["position_ids"]], 1)
    padded["prompts"] = torch.cat([left, batch["prompts"]], 1)
    got = log_probs(padded, 4, False)
    assert torch.allclose(got[mask], reference[mask], atol=1e-5, rtol=0)


class TeacherForced(ScriptedEngine):
    """Scripted turns with their true log-probs under `model` (a forward pass over context + turn),
    so a multi-turn episode with real tool calls can be checked token for token."""

    def __init__(self, script, inner, model: torch.nn.Module):
        super().__init__(script, inner=inner)
        self.model = model

    def _fill(self, contexts, forced, params, max_new_tokens_per_row, version):
        out = super()._fill(contexts, forced, params, max_new_tokens_per_row, version)
        for i, ids in enumerate(forced):
            if ids is not None:
                ids = out.response_ids[i]
                with torch.no_grad():
                    logits = self.model(torch.tensor([contexts[i] + ids])).logits[0].float()
                lp = torch.log_softmax(logits[len(contexts[i]) - 1 : -1] / params.temperature, -1)
                out.log_probs[i] = lp.gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()
        return out


@pytest.mark.timeout(300)
def test_multi_turn_rollout_log_probs_equal_the_trainers(tmp_path):
    """Calculator episodes (a tool call, its observation, then sampled tokens): the log-probs the
    engine reported equal the trainer's recomputation over the assembled sequence (1e-4, fp32)."""
    recipe = str(ROOT / "examples" / "calculator_agent.yaml")
    overrides = [
        "model.path=tiny-random", "trainer.total_training_steps=1", "trainer.test_freq=0",
        "trainer.val_before_train=false", "trainer.rollout_dump_freq=0", "trainer.logger=[jsonl]",
        "data.train_batch_size=4", "rollout.n=2", f"trainer.default_local_dir={tmp_path}",
        "algorithm.rollout_correction.bypass=false",  # recompute, to compare with the engine's
    ]  # fmt: skip
    keep = KeepStages()
    trainer = Trainer(load_config(recipe, overrides), hooks=[keep])
    tok, loop = trainer.tokenizer, trainer.rollout.loop  # type: ignore[attr-defined]

    def first_turn(context: list[int]) -> list[int] | None:
        if not tok.decode(context[-3:]).endswith("assistant\n"):
            return None
        return tok(f"<calculator>{len(context)} + 7</calculator>", add_special_tokens=False)["input_ids"]

    loop.engine = TeacherForced(first_turn, loop.engine, trainer.actor.group.workers[0].model)
    trainer.fit()
    batch = keep.batches["old_log_prob"]
    mask = batch["response_mask"].bool()
    assert (~mask & batch["attention_mask"][:, -mask.shape[1] :].bool()).any()  # observation tokens
    gap = (batch["rollout_log_probs"] - batch["old_log_probs"]).abs()[mask]
    assert gap.max() < 1e-4, gap.max()
