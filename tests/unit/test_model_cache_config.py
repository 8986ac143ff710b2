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
