"""One bad-input family (TurnrlInputError), and bad input met at start-up raised as a member of it."""

import json

import pytest
import torch

from turnrl.agent.tools.base import ToolError
from turnrl.config import ConfigError
from turnrl.data.dataset import DataError, load_examples
from turnrl.errors import TurnrlInputError
from turnrl.models.loader import ModelError, load_model, load_tokenizer
from turnrl.rewards.registry import RewardError
from turnrl.servers.retriever.errors import (
    CorpusError,
    IndexLoadError,
    MissingExtraError,
    RetrieverError,
    RetrieverRequestError,
    RetrieverUnavailable,
)
from turnrl.servers.sandbox import SandboxError, SandboxUnavailable


@pytest.mark.parametrize(
    "cls",
    [
        ConfigError,
        DataError,
        ModelError,
        RewardError,
        ToolError,
        RetrieverError,
        CorpusError,
        IndexLoadError,
        MissingExtraError,
        RetrieverUnavailable,
        RetrieverRequestError,
        SandboxUnavailable,
    ],
)
def test_bad_input_errors_share_one_base(cls):
    assert issubclass(cls, TurnrlInputError) and issubclass(cls, ValueError)


def test_sandbox_unavailable_is_still_a_sandbox_error():
    assert issubclass(SandboxUnavailable, SandboxError) and issubclass(SandboxUnavailable, RuntimeError)
    assert not issubclass(SandboxError, TurnrlInputError)  # a garbled answer mid-run is not bad input


def test_model_directory_without_a_tokenizer_is_a_model_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelError, match=rf"cannot load a tokenizer from {tmp_path}") as err:
        load_model(str(tmp_path), torch.device("cpu"))
    assert "\n" not in str(err.value)


def test_tokenizer_without_a_chat_template_is_a_data_error(tmp_path):
    tok = load_tokenizer("tiny-random")
    tok.chat_template = None  # a base model's tokenizer
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": "1+1?", "reward_model": {"ground_truth": "2"}}) + "\n")
    with pytest.raises(DataError, match=r"rows\.jsonl row 0: cannot apply the tokenizer's chat template"):
        load_examples([str(rows)], tok, 64)
