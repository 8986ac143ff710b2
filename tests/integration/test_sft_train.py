"""`turnrl sft` end to end on tiny-random: the command works with nothing but a model and a file, its
model directory starts RL, a stopped run resumes exactly, LoRA is merged, and the report plots it."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.support.chat_templates import TOOL_TEMPLATE
from tests.support.tiny_runs import VARYING, metrics
from turnrl.cli import main
from turnrl.config import load_config
from turnrl.config.supervised_schema import SFTConfig
from turnrl.models.precision import bf16_supported
from turnrl.supervised.checks import check_sft
from turnrl.supervised.sft_data import load_conversations
from turnrl.supervised.trainer import SupervisedTrainer
from turnrl.tracking.report import make_report
from turnrl.trainer.ppo import Trainer


def chat_rows(n: int = 24) -> list[dict]:
    """Plain answers and calculator episodes (a tool call, its result, the answer), of varied length."""
    rows = []
    for i in range(n):
        q = f"What is {i} + {2 * i}?"
        if i % 3:
            rows.append(
                {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": str(3 * i)}]}
            )
            continue
        call = {
            "type": "function",
            "function": {"name": "calculator", "arguments": json.dumps({"expr": f"{i}+{2 * i}"})},
        }
        rows.append(
            {
                "messages": [
                    {"role": "system", "content": "Use the calculator. " * (i % 4)},
                    {"role": "user", "content": q},
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "content": str(3 * i)},
                    {"role": "assistant", "content": f"The answer is {3 * i}."},
                ]
            }
        )
    return rows


def write(path: Path, rows: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def overrides(root: Path, **extra: object) -> list[str]:
    base = {
        "model.path": "tiny-random",
        "data.train_files": f"[{write(root / 'chat.jsonl', chat_rows())}]",
        "data.tool_calls": "inline",  # SmolLM2's template has no tool calls
        "trainer.train_batch_size": 4,
        "trainer.micro_batch_size": 2,
        "trainer.logger": "[jsonl]",
        "trainer.num_threads": 1,
        "trainer.default_local_dir": str(root / "run"),
        "optim.lr": 1e-3,
        **extra,
    }
    return [f"{k}={v}" for k, v in base.items()]


def run(root: Path, **extra: object) -> SupervisedTrainer:
    trainer = SupervisedTrainer(
        load_config(None, overrides(root, **extra), schema=SFTConfig, check=check_sft)
    )
    trainer.fit()
    return trainer


pytestmark = pytest.mark.usefixtures("keep_torch_threads")  # the runs set their own thread count


@pytest.mark.timeout(300)
def test_sft_command_just_works_and_its_model_starts_rl(tmp_path, capsys):
    plain = [r for r in chat_rows(6) if "tool_calls" not in json.dumps(r)]
    data = write(tmp_path / "chat.jsonl", plain)
    run_dir = tmp_path / "sft"
    assert (
        main(
            [
                "sft",
                "model.path=tiny-random",
                f"data.train_files=[{data}]",
                f"trainer.default_local_dir={run_dir}",
            ]
        )
        == 0
    )
    assert f"model: {run_dir / 'model'}" in capsys.readouterr().out

    # three more steps with a template that renders tool calls itself, then RL from the model directory
    template = tmp_path / "tools.jinja"
    template.write_text(TOOL_TEMPLATE)
    extra = {"trainer.total_training_steps": 3, "data.chat_template": template, "data.tool_calls": "template"}
    sft = run(tmp_path / "three", **extra)
    rows = metrics(sft.run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in ("sft/loss", "sft/tokens", "sft/grad_norm", "sft/lr"):
        assert all(isinstance(r[key], float) for r in rows), key
    model_dir = sft.run_dir / "model"
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    assert (model_dir / "generation_config.json").is_file()
    # RL renders its prompts with the run's template
    assert AutoTokenizer.from_pretrained(model_dir).chat_template == TOOL_TEMPLATE
    saved = load_file(str(model_dir / "model.safetensors"))

    rl_dir = tmp_path / "rl"
    rl = [
        f"model.path={model_dir}",
        "data.train_batch_size=2",
        "rollout.n=2",
        "actor.ppo_mini_batch_size=2",
        "data.max_response_length=8",
        "data.val_batch_size=100",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "trainer.logger=[jsonl]",
        "trainer.num_threads=1",
        f"trainer.default_local_dir={rl_dir}",
    ]
    trainer = Trainer(load_config(None, rl))
    policy = trainer.actor.group.workers[0].model  # the RL actor holds exactly the SFT weights
    for name, p in policy.named_parameters():
        torch.testing.assert_close(p.detach(), saved[name], rtol=0, atol=0, msg=name)
    trainer.close()
    assert main(["train", *rl]) == 0
    assert any("actor/pg_loss" in r for r in metrics(rl_dir))


@pytest.mark.timeout(300)
def test_a_stopped_run_resumes_exactly(tmp_path):
    # 24 rows, batch 4: 6 steps an epoch; stopped at 6 (an epoch's end, verl PR #5725's trap) and resumed to 8
    common = {"trainer.save_freq": 3, "optim.lr_warmup_steps": 4}
    straight = run(tmp_path / "a", **common, **{"trainer.total_training_steps": 8})
    run(tmp_path / "b", **common, **{"trainer.total_training_steps": 6})
    resumed = SupervisedTrainer(
        load_config(
            None, overrides(tmp_path / "b", **common, **{"trainer.total_training_steps": 8}), schema=SFTConfig,
            check=check_sft,
        )
    )  # fmt: skip
    # saved at the very end of epoch 0: resuming must move on to epoch 1, not stop
    assert resumed.global_step == 6 and (resumed.loader.epoch, resumed.loader.position) == (0, 6)
    resumed.fit()
    a, b = metrics(straight.run_dir), metrics(resumed.run_dir)
    assert [r["step"] for r in b] == list(range(1, 9))  # each step once
    for ra, rb in zip(a, b, strict=True):
        keys = {k for k in ra if not k.startswith(VARYING)}
        assert {k: ra[k] for k in keys} == {k: rb[k] for k in keys}, ra["step"]  # identical, not close
    wa = load_file(str(straight.run_dir / "model" / "model.safetensors"))
    wb = load_file(str(resumed.run_dir / "model" / "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.timeout(300)
def test_a_final_validation_that_dies_loses_no_training(tmp_path, monkeypatch):
    val = write(tmp_path / "val.jsonl", chat_rows(4))
    extra = {"trainer.total_training_steps": 2, "data.val_files": f"[{val}]"}

    def make() -> SupervisedTrainer:
        return SupervisedTrainer(
            load_config(None, overrides(tmp_path, **extra), schema=SFTConfig, check=check_sft)
        )

    trainer = make()

    def dies() -> dict[str, float]:
        raise MemoryError("the final validation ran out of memory")

    monkeypatch.setattr(trainer, "validate", dies)
    with pytest.raises(MemoryError):
        trainer.fit()
    resumed = make()
    assert resumed.global_step == 2 and resumed.validated_step != 2  # the training was saved first
    resumed.fit()  # validates step 2 and writes the model, training nothing more
    rows = metrics(resumed.run_dir)
    assert [r["step"] for r in rows if "val/sft/loss" not in r] == [1, 2]
    assert [r["step"] for r in rows if "val/sft/loss" in r] == [2]
    assert (resumed.run_dir / "model" / "model.safetensors").is_file()
    assert make().validated_step == 2  # and recorded that it did


@pytest.mark.timeout(300)
def test_lora_is_merged_into_the_model_directory_and_the_report_plots_the_run(tmp_path):
    val = write(tmp_path / "val.jsonl", chat_rows(6))
    sft = run(
        tmp_path, **{"model.lora_rank": 4, "trainer.total_training_steps": 3, "data.val_files": f"[{val}]"}
    )
    rows = metrics(sft.run_dir)
    final_val = [r["val/sft/loss"] for r in rows if "val/sft/loss" in r][-1]

    # the merged model, loaded by transformers alone, gives the loss the run validated with
    model = AutoModelForCausalLM.from_pretrained(sft.run_dir / "model").eval()
    assert not any("lora" in k for k in model.state_dict())
    cfg = load_config(None, overrides(tmp_path), schema=SFTConfig, check=check_sft)
    examples = load_conversations([val], sft.tokenizer, cfg.data, {sft.tokenizer.eos_token_id})
    nll, count = 0.0, 0
    with torch.no_grad():
        for e in examples:
            ids = torch.tensor([e.ids])
            logp = model(input_ids=ids).logits.log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]
            mask = torch.tensor(e.mask[1:], dtype=torch.bool)
            nll, count = nll - logp[mask].sum().item(), count + int(mask.sum())
    assert nll / count == pytest.approx(final_val, rel=1e-4)

    report = make_report(sft.run_dir)
    drawn = {k for keys in report.plots.values() for k in keys}
    assert {"sft/loss", "val/sft/loss", "sft/tokens", "sft/grad_norm", "sft/lr"} <= drawn


@pytest.mark.timeout(300)
def test_a_linear_decay_reaches_each_step_at_its_rate(tmp_path):
    # 24 rows, batch 4, 5 steps: lr 1e-3 x (1 - s / 5) for s = 0..4, as tinker-cookbook's `linear`
    trainer = run(tmp_path, **{"trainer.total_training_steps": 5, "optim.lr_decay": "linear"})
    rates = [r["sft/lr"] for r in metrics(trainer.run_dir) if "sft/lr" in r]
    assert rates == pytest.approx([1e-3, 8e-4, 6e-4, 4e-4, 2e-4])


@pytest.mark.timeout(300)
def test_sft_computes_in_model_compute_dtype(tmp_path, capsys):
    """`model.compute_dtype=bfloat16`: the micro-batches' passes run under bfloat16 autocast over float32
    master weights, the loss within a percent of the exact run's; where the processor lacks bfloat16
    instructions, one line naming the key before any model loads or anything is written."""
    cpu = torch.device("cpu")
    if not bf16_supported(cpu):
        argv = overrides(tmp_path, **{"model.compute_dtype": "bfloat16"})
        assert main(["sft", *argv]) == 2
        assert "model.compute_dtype=bfloat16" in capsys.readouterr().err
        assert not (tmp_path / "run").exists()
        return
    steps = {"trainer.total_training_steps": 2}
    exact = run(tmp_path / "exact", **steps, **{"model.compute_dtype": "float32"})
    low = run(tmp_path / "low", **steps, **{"model.compute_dtype": "bfloat16"})
    assert exact.learner.compute is None and low.learner.compute is torch.bfloat16
    assert all(p.dtype == torch.float32 for p in low.learner.model.parameters())  # master weights
    first_exact, first_low = metrics(exact.run_dir)[0]["sft/loss"], metrics(low.run_dir)[0]["sft/loss"]
    assert first_low != first_exact  # it did compute in a lower precision
    assert abs(first_low - first_exact) < 0.01 * first_exact, (first_low, first_exact)
