"""`model.path` as users name models: a Hugging Face Hub id (through the standard cache, offline
here), a turnrl run directory and a checkpoint directory."""

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from turnrl.models import sources
from turnrl.models.loader import ModelError, load_model, model_directory

ROOT = Path(__file__).resolve().parents[2]
REPO = "acme/tiny-llama"


def write_hub_cache(hub: Path, model_dir: Path, repo_id: str) -> str:
    """The cache layout `hf download` leaves (blobs named by hash, a snapshot of symlinks, a ref),
    written with huggingface_hub's own naming and linking functions; returns the commit."""
    from huggingface_hub.file_download import _create_symlink, repo_folder_name

    repo = hub / repo_folder_name(repo_id=repo_id, repo_type="model")
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    for f in sorted(model_dir.iterdir()):
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        snap = repo / "snapshots" / commit / f.name
        snap.parent.mkdir(parents=True, exist_ok=True)
        _create_symlink(str(blob), str(snap), new_blob=False)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return commit


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    """tiny-random saved as a plain Hugging Face directory."""
    out = tmp_path_factory.mktemp("tiny")
    model, tok = load_model("tiny-random", torch.device("cpu"), seed=3)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


LOAD = """
import sys, torch
from turnrl.models.loader import load_model, ModelError
try:
    model, tok = load_model(sys.argv[1], torch.device("cpu"))
except ModelError as e:
    print("ERROR:", e); sys.exit(2)
print("LOADED", model.config.hidden_size, sum(p.sum().item() for p in model.parameters()))
"""


def load_in(home: Path, path: str, offline: bool = True) -> subprocess.CompletedProcess:
    # a fresh interpreter: huggingface_hub reads HF_HOME when it is imported
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1" if offline else "0"}
    return subprocess.run(
        [sys.executable, "-c", LOAD, path], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )


def test_a_hub_id_loads_from_the_standard_cache_offline(tmp_path, tiny_dir):
    from huggingface_hub import scan_cache_dir

    home = tmp_path / "hf"
    write_hub_cache(home / "hub", tiny_dir, REPO)
    info = scan_cache_dir(home / "hub")  # huggingface_hub reads the layout back as a valid repo
    assert [r.repo_id for r in info.repos] == [REPO] and not info.warnings
    done = load_in(home, REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    want = sum(p.sum().item() for p in load_model(str(tiny_dir), torch.device("cpu"))[0].parameters())
    _, hidden, total = done.stdout.split()
    assert int(hidden) == 64 and float(total) == pytest.approx(want, rel=1e-6)


def test_a_hub_id_not_cached_offline_is_one_line_saying_how_to_fetch_it(tmp_path):
    done = load_in(tmp_path / "empty", "acme/not-here")
    assert done.returncode == 2
    line = done.stdout.strip()
    assert line == (
        "ERROR: model 'acme/not-here' is not in the Hugging Face cache and HF_HUB_OFFLINE is set; fetch it "
        "where the Hub is reachable with `hf download acme/not-here` (same HF_HOME)"
    )


@pytest.mark.parametrize(
    ("path", "hub"),
    [("Qwen/Qwen2.5-0.5B-Instruct", True), ("./a/b", False), ("a/b/c", False), ("~/x", False), ("x", False)],
)
def test_what_counts_as_a_hub_id(path, hub):
    assert sources.looks_like_hub_id(path) is hub


@pytest.mark.slow  # ~30-50 s: the default run stays under 10 minutes on 2 cores
@pytest.mark.timeout(300)
def test_a_run_directory_and_a_checkpoint_directory_load_the_trained_policy(tmp_path):
    """Resolved where a run is assembled (`turnrl.trainer.run_dirs`), not by the loader: the loader
    names the way instead of exporting."""
    from tests.support.tiny_runs import tiny_overrides
    from turnrl.cli import resolve_served_model
    from turnrl.config import load_config
    from turnrl.trainer.ppo import Trainer
    from turnrl.trainer.run_dirs import ExportError, resolve_model_path, resolve_model_paths

    cache = str(tmp_path / "cache")
    over = {"trainer.total_training_steps": 2, "trainer.save_freq": 1, "model.cache_dir": cache}
    trainer = Trainer(load_config(None, tiny_overrides(tmp_path, **over)))
    trainer.val_examples = trainer.val_examples[:4]
    run = trainer.fit()
    exports = {}
    for path, step in ((run, 2), (run / "checkpoints" / "step_1", 1)):
        with pytest.raises(ModelError, match=r"training run or checkpoint directory.*turnrl export"):
            model_directory(str(path), cache)
        directory = exports[step] = resolve_model_path(str(path), cache)
        config = json.loads((Path(directory) / "config.json").read_text())
        assert config["architectures"] == ["LlamaForCausalLM"]
        model, _ = load_model(directory, torch.device("cpu"), cache_dir=cache)
        saved = load_file(str(run / "checkpoints" / f"step_{step}" / "actor" / "weights.safetensors"))
        params = dict(model.named_parameters())
        assert all(torch.equal(params[k], v) for k, v in saved.items() if k in params), path
        assert resolve_model_path(str(path), cache) == directory  # exported once, cached
    cfg = load_config(None, [f"model.path={run}", f"model.cache_dir={cache}"])
    resolved = resolve_model_paths(cfg)
    assert resolved.model.path == exports[2] != exports[1] and cfg.model.path == str(run)
    served = argparse.Namespace(model=str(run), cache_dir=cache, served_model_name="")
    assert resolve_served_model(served) is None  # `turnrl serve --model RUN`
    assert served.model == exports[2] and served.served_model_name == str(run)
    assert resolve_model_path("tiny-random", cache) == "tiny-random"  # other forms: untouched
    assert resolve_model_path(str(tmp_path / "nowhere"), cache) == str(tmp_path / "nowhere")
    with pytest.raises(ModelError, match=r"has no config\.json"):
        model_directory(str(run / "checkpoints"), "")
    bare = tmp_path / "bare"
    (bare / "checkpoints").mkdir(parents=True)
    (bare / "config.yaml").write_text((run / "config.yaml").read_text())
    with pytest.raises(ExportError, match="has no usable checkpoint"):
        resolve_model_path(str(bare), cache)
