"""`turnrl rm` end to end on tiny-random: it learns pairs whose chosen side differs systematically, its
model directory is a transformers sequence classifier, and a PPO step of `turnrl train` scores with it."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from tests.support.tiny_runs import VARYING, metrics
from turnrl.batch import Batch
from turnrl.cli import main
from turnrl.config.schema import RewardModelConfig, RewardModelSubConfig
from turnrl.config.supervised_schema import RMDataConfig
from turnrl.models.loader import load_tokenizer
from turnrl.supervised.batches import right_pad
from turnrl.supervised.rm import sequence_rewards
from turnrl.supervised.rm_data import load_pairs
from turnrl.tensors import left_pad, position_ids_from_mask
from turnrl.workers.reward_model import RewardModel

RECIPE = Path(__file__).parents[2] / "examples" / "ppo_gae.yaml"
pytestmark = pytest.mark.usefixtures("keep_torch_threads")  # the runs set their own thread count


def pairs(lo: int, hi: int) -> list[dict]:
    """Chosen answers say yes, rejected ones no, with lengths that do not give it away."""
    rows = []
    for i in range(lo, hi):
        chosen = " ".join(["yes"] * (1 + i % 4)) + "."
        rejected = " ".join(["no"] * (1 + (i * 7 + 1) % 4)) + "."
        prompt = f"Question {i}: is it good?" if i % 2 else [{"role": "user", "content": f"Is {i} good?"}]
        rows.append(
            {"prompt": prompt, "chosen": chosen, "rejected": {"role": "assistant", "content": rejected}}
        )
    return rows


def write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.slow  # a one-step run; its lighter siblings stay in the default run
@pytest.mark.timeout(400)
def test_rm_learns_preferences_and_scores_a_ppo_step(tmp_path):
    train, val = write(tmp_path / "train.jsonl", pairs(0, 32)), write(tmp_path / "val.jsonl", pairs(32, 48))
    rm_dir = tmp_path / "rm"
    argv = [
        "rm",
        "model.path=tiny-random",
        f"data.train_files=[{train}]",
        f"data.val_files=[{val}]",
        "trainer.train_batch_size=8",
        "trainer.micro_batch_size=4",
        "trainer.total_epochs=2",
        "trainer.test_freq=4",
        "optim.lr=1e-3",
        "trainer.logger=[jsonl]",
        "trainer.num_threads=1",
        f"trainer.default_local_dir={rm_dir}",
    ]
    assert main(argv) == 0
    rows = metrics(rm_dir)
    train_rows = [r for r in rows if "rm/loss" in r]
    assert len(train_rows) == 8
    assert {"rm/accuracy", "rm/margin", "rm/grad_norm", "rm/lr"} <= set(train_rows[0])
    assert train_rows[0]["rm/accuracy"] <= 0.5  # the untrained head: chance or worse
    assert train_rows[-1]["rm/accuracy"] > 0.5 and train_rows[-1]["rm/loss"] < train_rows[0]["rm/loss"]
    final = [r for r in rows if "val/rm/accuracy" in r][-1]
    assert final["val/rm/accuracy"] > 0.5 and final["val/rm/margin"] > 0  # held-out pairs, ranked right

    # a transformers sequence classifier; the RL reward model, transformers and the trainer agree on the scores
    model_dir = rm_dir / "model"
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForSequenceClassification"] and len(config["id2label"]) == 1
    policy_tok = load_tokenizer("tiny-random")
    assert config["pad_token_id"] is not None and config["pad_token_id"] != policy_tok.eos_token_id
    hf = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    assert hf.config.num_labels == 1
    val_pairs = load_pairs([val], policy_tok, RMDataConfig())[:3]
    seqs = [s for p in val_pairs for s in (p.chosen, p.rejected)]
    ids, mask = left_pad(seqs, policy_tok.pad_token_id)
    batch = Batch(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)}
    )
    rl_rm = RewardModel(
        RewardModelConfig(enable=True, model=RewardModelSubConfig(path=str(model_dir))), policy_tok
    )
    assert rl_rm.same_vocab
    rl_scores = rl_rm.score(batch)["rm_scores"]
    ids_r, mask_r = right_pad(seqs, int(config["pad_token_id"]))
    with torch.no_grad():
        ours = sequence_rewards(hf, ids_r, mask_r)
        theirs = hf(input_ids=ids_r, attention_mask=mask_r).logits[:, 0]
    torch.testing.assert_close(rl_scores, ours, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-6)

    # one PPO step (critic, GAE) whose reward includes the trained reward model's score
    rl_dir = tmp_path / "ppo"
    ppo = [
        "train",
        str(RECIPE),
        "model.path=tiny-random",
        "reward_model.enable=true",
        f"reward_model.model.path={model_dir}",
        "data.train_batch_size=2",
        "data.max_response_length=8",
        "data.val_batch_size=100",
        "actor.ppo_mini_batch_size=2",
        "critic.ppo_mini_batch_size=2",
        "trainer.critic_warmup=0",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=0",
        "trainer.logger=[jsonl]",
        "trainer.num_threads=1",
        f"trainer.default_local_dir={rl_dir}",
    ]
    assert main(ppo) == 0
    step = next(r for r in metrics(rl_dir) if r["step"] == 1 and "critic/vf_loss" in r)
    assert isinstance(step["reward_extra/reward_model_score/mean"], float)
    assert "actor/pg_loss" in step


@pytest.mark.timeout(300)
def test_rm_with_lora_resumes_exactly_and_merges_its_head(tmp_path):
    train, val = write(tmp_path / "train.jsonl", pairs(0, 16)), write(tmp_path / "val.jsonl", pairs(16, 24))

    def rm(where: str, steps: int) -> Path:
        argv = [
            "rm",
            "model.path=tiny-random",
            "model.lora_rank=4",
            f"data.train_files=[{train}]",
            f"data.val_files=[{val}]",
            "trainer.train_batch_size=4",
            "trainer.micro_batch_size=2",
            f"trainer.total_training_steps={steps}",
            "trainer.save_freq=2",
            "optim.lr=1e-2",
            "trainer.logger=[jsonl]",
            "trainer.num_threads=1",
            f"trainer.default_local_dir={tmp_path / where}",
        ]
        assert main(argv) == 0
        return tmp_path / where

    straight = rm("a", 4)
    rm("b", 2)
    resumed = rm("b", 4)
    a, b = metrics(straight), metrics(resumed)
    assert [r["step"] for r in b] == [1, 2, 2, 3, 4, 4]  # train rows, and the validation at each run's end
    for ra, rb in zip(a, [r for r in b if r["step"] != 2 or "rm/loss" in r], strict=True):
        keys = {k for k in ra if not k.startswith(VARYING)}
        assert {k: ra[k] for k in keys} == {k: rb[k] for k in keys}, ra["step"]

    # merged: transformers alone reproduces the margin the run validated with (the head trained, not reset)
    tok = load_tokenizer("tiny-random")
    hf = AutoModelForSequenceClassification.from_pretrained(resumed / "model").eval()
    assert not any("lora" in k or "modules_to_save" in k for k in hf.state_dict())
    val_pairs = load_pairs([val], tok, RMDataConfig())
    with torch.no_grad():
        margins = [
            sequence_rewards(hf, *right_pad([p.chosen], 0))
            - sequence_rewards(hf, *right_pad([p.rejected], 0))
            for p in val_pairs
        ]
    assert torch.cat(margins).mean().item() == pytest.approx(b[-1]["val/rm/margin"], rel=1e-4, abs=1e-6)
