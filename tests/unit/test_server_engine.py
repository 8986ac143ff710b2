"""The pure parts of the server engine: request planning, reading choices, the weights directory."""

from __future__ import annotations

import os
import re

import pytest
import torch

from turnrl.models.weights_dir import (
    WeightsError,
    WeightsOutsideRoot,
    _read_dir,
    load_weights_dir,
    resolve_in_root,
    write_weights_dir,
)
from turnrl.rollout.server import Request, ServerError, choice_token_ids, finish_reason, plan_requests


def test_plan_groups_rows_by_budget_and_keeps_prompt_major_rows():
    # prompts A, B, C with n=2 -> rows A0 A1 B0 B1 C0 C1 = 0..5; budgets per row:
    # A: 8, 8 -> one unit (A, n=2, 8); B: 8, 3 -> two units (B, n=1, 8) and (B, n=1, 3); C: 3, 3
    a, b, c = [1], [2], [3]
    plan = plan_requests([a, b, c], 2, [8, 8, 8, 3, 3, 3], rows_per_request=64, servers=1, seed=10)
    assert plan == [
        Request([a], 2, 8, [0, 1], seed=10),
        Request([b], 1, 8, [2], seed=11),
        Request([b], 1, 3, [3], seed=12),
        Request([c], 2, 3, [4, 5], seed=13),
    ]


def test_plan_splits_for_the_row_cap_and_for_every_server():
    prompts = [[i] for i in range(6)]
    # 6 prompts x n=4 = 24 rows, cap 8 rows -> 2 prompts per request -> 3 requests
    plan = plan_requests(prompts, 4, [5] * 24, rows_per_request=8, servers=1)
    assert [r.prompts for r in plan] == [[[0], [1]], [[2], [3]], [[4], [5]]]
    assert plan[1].rows == [8, 9, 10, 11, 12, 13, 14, 15] and plan[0].seed is None
    # no cap worth speaking of, but 4 servers: ceil(6 / 4) = 2 prompts per request
    plan = plan_requests(prompts, 1, [5] * 6, rows_per_request=64, servers=4)
    assert [len(r.prompts) for r in plan] == [2, 2, 2]
    # a group larger than the cap still gets one prompt per request
    plan = plan_requests(prompts[:2], 16, [5] * 32, rows_per_request=8, servers=1)
    assert [len(r.rows) for r in plan] == [16, 16]


def test_token_ids_from_either_field():
    assert choice_token_ids({"token_ids": [5, 6]}) == [5, 6]
    lp = {"tokens": ["token_id:5", "token_id:60001"], "token_logprobs": [-1.0, -2.0]}
    assert choice_token_ids({"logprobs": lp}) == [5, 60001]
    # text tokens cannot be turned back into ids without re-tokenising: refuse
    assert choice_token_ids({"logprobs": {"tokens": ["Hello", " world"]}}) is None
    assert choice_token_ids({"text": "Hello"}) is None


def test_finish_reasons():
    assert finish_reason("length", "u") == "length"
    assert finish_reason("stop", "u") == "stop"
    with pytest.raises(ServerError, match="http://s ended a completion with finish_reason 'abort'"):
        finish_reason("abort", "http://s")


@pytest.fixture
def small():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=32,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def test_tied_embeddings_are_written_once_and_load(small, tmp_path):
    from safetensors.torch import load_file

    state = {k: v + 1 for k, v in small.state_dict().items() if k != "lm_head.weight"}
    state["lm_head.weight"] = state["model.embed_tokens.weight"]  # tied, like the actor's state dict
    path = write_weights_dir(state, tmp_path / "v1", small.config)
    saved = load_file(str(path / "model.safetensors"))
    assert "lm_head.weight" not in saved and "model.embed_tokens.weight" in saved
    assert (path / "config.json").is_file() and not list(tmp_path.glob(".tmp-*"))
    assert load_weights_dir(small, path) == len(saved)
    assert torch.equal(small.lm_head.weight, state["model.embed_tokens.weight"])


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.update({"extra.weight": torch.zeros(1)}), "unexpected key extra.weight"),
        (lambda s: s.pop("model.norm.weight"), "missing key model.norm.weight"),
        (lambda s: s.update({"model.norm.weight": torch.zeros(3)}), "model.norm.weight has shape [3]"),
        (
            lambda s: s.update({"lm_head.weight": torch.zeros(32, 8)}),
            "model.embed_tokens.weight and lm_head.weight are tied in the served model but differ",
        ),
    ],
)
def test_a_bad_directory_names_the_key_and_changes_nothing(small, tmp_path, edit, message):
    before = {k: v.clone() for k, v in small.state_dict().items()}
    state = {k: v + 1 for k, v in small.state_dict().items() if k != "lm_head.weight"}
    edit(state)
    path = write_weights_dir({k: v.clone() for k, v in state.items()}, tmp_path / "bad")
    with pytest.raises(WeightsError, match=re.escape(message)):
        load_weights_dir(small, path)
    assert all(torch.equal(before[k], v) for k, v in small.state_dict().items())


def test_a_directory_without_weights(small, tmp_path):
    with pytest.raises(WeightsError, match=re.escape("no *.safetensors files")):
        load_weights_dir(small, tmp_path)


def test_plan_cuts_requests_at_the_servers_token_limit():
    prompts = [[1] * 10 for _ in range(6)]
    # each prompt: 10 prompt tokens + 2 rows x 5 = 20 tokens; a cap of 45 fits two per request
    plan = plan_requests(prompts, 2, [5] * 12, rows_per_request=64, servers=1, max_tokens=45)
    assert [len(r.prompts) for r in plan] == [2, 2, 2]
    # a prompt larger than the cap still goes, alone (the server then says which limit it passed)
    plan = plan_requests(prompts[:2], 2, [5] * 4, rows_per_request=64, servers=1, max_tokens=15)
    assert [len(r.prompts) for r in plan] == [1, 1]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda s: s.update({"model.norm.weight": torch.ones(8, dtype=torch.int8)}),
            "model.norm.weight has dtype int8, the served model has float32",
        ),
        (
            lambda s: s.update({"model.norm.weight": torch.ones(8, dtype=torch.bool)}),
            "model.norm.weight has dtype bool, the served model has float32",
        ),
        (
            lambda s: s["model.norm.weight"].__setitem__(3, float("nan")),
            "model.norm.weight has NaN or infinite values",
        ),
        (
            lambda s: s["model.norm.weight"].__setitem__(0, float("-inf")),
            "model.norm.weight has NaN or infinite values",
        ),
        (  # finite in float64, infinite once cast to the model's float32
            lambda s: s.update({"model.norm.weight": torch.full((8,), 1e300, dtype=torch.float64)}),
            "model.norm.weight has NaN or infinite values (in float32)",
        ),
    ],
)
def test_wrong_dtypes_and_non_finite_values_are_refused(small, tmp_path, edit, message):
    before = {k: v.clone() for k, v in small.state_dict().items()}
    state = {k: v + 1 for k, v in small.state_dict().items() if k != "lm_head.weight"}
    edit(state)
    path = write_weights_dir(state, tmp_path / "bad")
    with pytest.raises(WeightsError, match=re.escape(message)):
        load_weights_dir(small, path)
    assert all(torch.equal(before[k], v) for k, v in small.state_dict().items())


def test_another_float_width_is_cast(small, tmp_path):
    # a trainer holding fp32 master weights for a bf16 server: here fp64 for an fp32 model
    state = {k: (v + 1).double() for k, v in small.state_dict().items() if k != "lm_head.weight"}
    load_weights_dir(small, write_weights_dir(state, tmp_path / "v1"))
    assert small.model.norm.weight.dtype == torch.float32
    assert torch.equal(small.model.norm.weight, state["model.norm.weight"].float())


def test_only_regular_files_inside_the_root_are_read(small, tmp_path):
    root = tmp_path / "root"
    state = {k: v + 1 for k, v in small.state_dict().items() if k != "lm_head.weight"}
    good = write_weights_dir(state, root / "v1")
    elsewhere = write_weights_dir(state, tmp_path / "elsewhere")
    assert load_weights_dir(small, "v1", root=root) == len(state)  # relative: under the root
    (root / "link").symlink_to(elsewhere, target_is_directory=True)
    escapes = [str(elsewhere), "../elsewhere", str(root / "v1" / ".." / ".." / "elsewhere"), "link"]
    for path in escapes:
        with pytest.raises(WeightsOutsideRoot, match=re.escape(f"model_path {path!r}: outside")):
            load_weights_dir(small, path, root=root)
    linked = root / "v2"
    linked.mkdir()
    (linked / "model.safetensors").symlink_to(elsewhere / "model.safetensors")
    with pytest.raises(WeightsOutsideRoot, match="a link to a file outside the server's weights root"):
        load_weights_dir(small, linked, root=root)
    fifo = root / "v3"
    fifo.mkdir()
    os.mkfifo(fifo / "model.safetensors")  # opening it would block until a writer came
    with pytest.raises(WeightsError, match=r"model.safetensors: not a regular file \(a FIFO"):
        load_weights_dir(small, fifo, root=root)
    assert load_weights_dir(small, good, root=root) == len(state)


def test_a_link_swapped_in_after_the_check_is_refused_not_followed(small, tmp_path):
    """The window between the root check and the read: a directory or a file of the checked path
    replaced by a link to outside the root is refused (the old loader opened it by name and read
    the outside file), and the weights stay as they were."""
    root = tmp_path / "root"
    state = {k: v + 1 for k, v in small.state_dict().items() if k != "lm_head.weight"}
    outside = {k: v + 2 for k, v in small.state_dict().items() if k != "lm_head.weight"}
    write_weights_dir(state, root / "v1")
    elsewhere = write_weights_dir(outside, tmp_path / "elsewhere")
    checked = resolve_in_root("v1", root)  # what the server checked
    (root / "v1").rename(root / "v1-old")
    (root / "v1").symlink_to(elsewhere, target_is_directory=True)  # swapped after the check
    before = small.model.norm.weight.detach().clone()
    with pytest.raises(WeightsOutsideRoot, match="became a link while it was loaded"):
        _read_dir(checked, str(root.resolve()))
    (root / "v1").unlink()
    (root / "v1-old").rename(root / "v1")
    file = root / "v1" / "model.safetensors"
    file.unlink()
    file.symlink_to(elsewhere / "model.safetensors")  # the file itself swapped for a link
    with pytest.raises(WeightsOutsideRoot, match="a link to a file outside"):
        _read_dir(checked, str(root.resolve()))
    assert torch.equal(small.model.norm.weight, before)


def test_a_fifo_swapped_in_is_refused_without_blocking(small, tmp_path):
    """Opened non-blocking and refused by fstat on the descriptor: no writer ever comes, and the
    load returns at once (before, the name was checked by stat and then opened by name)."""
    root = tmp_path / "root"
    write_weights_dir({k: v for k, v in small.state_dict().items() if k != "lm_head.weight"}, root / "v1")
    file = root / "v1" / "model.safetensors"
    file.unlink()
    os.mkfifo(file)
    with pytest.raises(WeightsError, match=r"not a regular file \(a FIFO"):
        _read_dir(resolve_in_root("v1", root), str(root.resolve()))
