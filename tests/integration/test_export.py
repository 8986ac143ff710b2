"""`turnrl export` on real tiny-random runs: the exported directory, loaded with transformers alone,
generates what turnrl's own greedy rollout generates (full fine-tuning and LoRA), and the exported
critic's token-classification logits are turnrl's values."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

from turnrl.batch import Batch
from turnrl.cli import main
from turnrl.config import load_config
from turnrl.data.dataset import load_examples
from turnrl.export import export
from turnrl.models.loader import load_model
from turnrl.rollout.base import Generation, SamplingParams, assemble
from turnrl.tensors import left_pad
from turnrl.trainer import checkpoint
from turnrl.trainer.ppo import Trainer
from turnrl.workers.actor import Actor
from turnrl.workers.critic import Critic

MAX_NEW = 16
RECIPE = Path(__file__).parents[2] / "examples" / "ppo_gae.yaml"

# the share of odd token ids: a random policy sits near 0.5, so groups have non-zero advantages
# and two steps at lr 1e-2 move the weights (the built-in addition task scores 0 for a random model)
REWARD = (
    "from turnrl.models.loader import load_tokenizer\n"
    "_tok = load_tokenizer('tiny-random')\n"
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    ids = _tok(solution_str, add_special_tokens=False)['input_ids']\n"
    "    return sum(1 for i in ids if i % 2 == 1) / max(len(ids), 1)\n"
)


def train(root: Path, recipe: str | None = None, **extra: object) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "even_reward.py").write_text(REWARD)
    overrides = {
        "model.path": "tiny-random",
        "data.train_batch_size": 4,
        "data.max_response_length": 8,
        "rollout.n": 8,
        "actor.ppo_mini_batch_size": 2,
        "actor.optim.lr": 1e-2,
        "trainer.total_training_steps": 2,
        "trainer.test_freq": 0,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.num_threads": 1,  # a tiny model gains nothing from threads; a busy machine loses 10x
        "trainer.default_local_dir": str(root / "run"),
        "reward.custom_function.path": str(root / "even_reward.py"),
        **extra,
    }
    return Trainer(load_config(recipe, [f"{k}={v}" for k, v in overrides.items()])).fit()


@pytest.fixture(scope="module", autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory) -> Path:
    return train(tmp_path_factory.mktemp("full"), **{"trainer.save_freq": 1})


def prompts_of(cfg, tokenizer, k: int = 8) -> list[list[int]]:
    examples = load_examples(cfg.data.train_files, tokenizer, cfg.data.max_prompt_length, cfg.data.prompt_key)
    return [e.prompt_ids for e in examples[:k]]


def up_to_eos(ids: list[int], eos: set[int]) -> list[int]:
    cut = next((i + 1 for i, t in enumerate(ids) if t in eos), len(ids))
    return ids[:cut]


def check_policy_export(run: Path, out: Path) -> None:
    cfg = load_config(run / "config.yaml")
    assert export(run, out) == out

    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        assert (out / name).is_file(), name
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp")]

    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    start, _ = load_model("tiny-random", torch.device("cpu"), seed=cfg.trainer.seed)
    trained = hf.state_dict()
    moved = [k for k, v in start.state_dict().items() if not torch.allclose(v, trained[k], atol=1e-6)]
    assert moved, "training did not change the weights: the comparison below would be trivial"

    # turnrl's own greedy rollout from the checkpoint
    actor = Actor(cfg.actor, cfg.model, cfg.rollout, cfg.ref, "cpu", cfg.trainer.seed)
    actor.load(checkpoint.latest(run) / "actor")
    prompts = prompts_of(cfg, actor.tokenizer)
    ours = actor.engine.generate(prompts, SamplingParams(max_new_tokens=MAX_NEW, temperature=0.0))

    # transformers alone: the exported tokenizer pads on the left, generate decodes greedily
    tok = AutoTokenizer.from_pretrained(out)
    tok.padding_side = "left"
    enc = tok.pad({"input_ids": prompts}, padding=True, return_tensors="pt")
    greedy = {
        "max_new_tokens": MAX_NEW,
        "do_sample": False,
        "output_logits": True,
        "return_dict_in_generate": True,
    }
    with torch.no_grad():
        gen = hf.generate(**enc, **greedy)
        first_at_start = start.generate(**enc, **{**greedy, "max_new_tokens": 1}).logits[0]
    new_ids = gen.sequences[:, enc["input_ids"].shape[1] :]
    theirs = new_ids.tolist()

    eos = set(actor.engine.eos_ids)
    assert [up_to_eos(r, eos) for r in theirs] == [up_to_eos(r, eos) for r in ours.response_ids]
    # the tiny random model greedily repeats a token, so also compare every greedy token's log-prob:
    # the trained (for LoRA: merged) weights, not only the argmax, must be the same
    log_probs = torch.stack(gen.logits, dim=1).log_softmax(-1).gather(-1, new_ids[..., None])
    for row, (ids, lps) in enumerate(zip(ours.response_ids, ours.log_probs, strict=True)):
        n = len(up_to_eos(ids, eos))
        torch.testing.assert_close(log_probs[row, :n, 0], torch.tensor(lps[:n]), atol=1e-4, rtol=0)
    assert not torch.allclose(gen.logits[0], first_at_start, atol=1e-3)  # the trained policy is another


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_full_fine_tuning_export_generates_like_turnrl(full_run, tmp_path):
    check_policy_export(full_run, tmp_path / "exported")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_lora_export_is_merged_and_generates_like_turnrl(tmp_path):
    run = train(tmp_path / "lora", **{"model.lora_rank": 8})
    out = tmp_path / "exported"
    check_policy_export(run, out)
    assert not (out / "adapter_config.json").exists()
    assert not any("lora" in k for k in AutoModelForCausalLM.from_pretrained(out).state_dict())


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_critic_export_logits_are_turnrl_values(tmp_path):
    root = tmp_path / "ppo"
    run = train(root, str(RECIPE), **{"data.train_batch_size": 4, "rollout.n": 4})
    out = tmp_path / "critic"
    export(run, out, critic=True)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForTokenClassification"] and len(config["id2label"]) == 1

    cfg = load_config(run / "config.yaml")
    critic = Critic(cfg.critic, cfg.model, cfg.rollout, "cpu", cfg.trainer.seed)
    critic.load(checkpoint.latest(run) / "critic")
    tok = AutoTokenizer.from_pretrained(out)
    prompts = prompts_of(cfg, tok)
    # responses of different lengths, right-padded: values count only the real ones
    g = torch.Generator().manual_seed(0)
    responses = [torch.randint(3, len(tok), (1 + i % 6,), generator=g).tolist() for i in range(len(prompts))]
    ids, mask = left_pad(prompts, tok.pad_token_id)
    gen = Generation(responses, [[0.0] * len(r) for r in responses], ["length"] * len(responses))
    batch = assemble(Batch(tensors={"input_ids": ids, "attention_mask": mask}), gen, 1, tok.pad_token_id, 8)
    ours = critic.compute_values(batch)["values"]

    hf = AutoModelForTokenClassification.from_pretrained(out).eval()
    assert hf.score.bias.abs().item() > 0  # the trained head, not the zero-initialised one
    with torch.no_grad():
        logits = hf(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],  # counted over real tokens, as TRL passes them
        ).logits[..., 0]
    p, r = ids.shape[1], batch["responses"].shape[1]
    # the value of response token t is read at the position before it, like its log-prob
    theirs = logits[:, p - 1 : p - 1 + r] * batch["response_mask"]
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=0)


def run_cli(capsys, *args: str) -> str:
    code = main(["export", *map(str, args)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("turnrl export:")
    return err[0]


def test_missing_run_dir(tmp_path, capsys):
    line = run_cli(capsys, tmp_path / "nope", "--out", tmp_path / "out")
    assert str(tmp_path / "nope") in line and "does not exist" in line
    assert not (tmp_path / "out").exists()


def test_run_dir_without_config(tmp_path, capsys):
    line = run_cli(capsys, tmp_path, "--out", tmp_path / "out")
    assert str(tmp_path) in line and "config.yaml" in line


def test_run_dir_without_checkpoint(full_run, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text((full_run / "config.yaml").read_text())
    line = run_cli(capsys, run, "--out", tmp_path / "out")
    assert str(run) in line and "no checkpoint" in line
    assert not (tmp_path / "out").exists()


def test_unknown_step_lists_the_steps(full_run, tmp_path, capsys):
    line = run_cli(capsys, full_run, "--step", 7, "--out", tmp_path / "out")
    assert "step_7" in line and str(full_run) in line and "steps: 1, 2" in line


def test_non_empty_out_is_untouched(full_run, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    line = run_cli(capsys, full_run, "--out", out)
    assert str(out) in line and "not an empty directory" in line
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary sibling left behind


def test_critic_on_a_run_without_one(full_run, tmp_path, capsys):
    line = run_cli(capsys, full_run, "--critic", "--out", tmp_path / "out")
    assert str(full_run / "checkpoints") in line and "critic" in line
    assert not (tmp_path / "out").exists()


def test_a_truncated_checkpoint_is_refused_not_loaded(full_run, tmp_path, capsys):
    """Its manifest's size and hash catch it. Before, with every checkpoint corrupt the export fell
    back to the newest one and loaded it: a safetensors traceback; with `--step` it loaded it unchecked."""
    run = tmp_path / "run"
    shutil.copytree(full_run, run)
    for step in ("step_1", "step_2"):
        weights = run / "checkpoints" / step / "actor" / "weights.safetensors"
        weights.write_bytes(weights.read_bytes()[: 1 << 16])
    line = run_cli(capsys, run, "--out", tmp_path / "out")
    assert line == (
        f"turnrl export: checkpoint {run / 'checkpoints' / 'step_2'} is corrupt (actor/weights.safetensors has "
        f"65536 bytes, the manifest says {(full_run / 'checkpoints/step_2/actor/weights.safetensors').stat().st_size}), "
        f"and so is every other checkpoint of {run}"
    )
    line = run_cli(capsys, run, "--step", 1, "--out", tmp_path / "out")
    assert line.startswith(
        f"turnrl export: checkpoint {run / 'checkpoints' / 'step_1'} is corrupt: actor/weights"
    )
    assert not (tmp_path / "out").exists()
