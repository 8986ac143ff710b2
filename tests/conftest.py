"""Shared fixtures: the tiny random model (same family and tokenizer as the embedded one), and
`turnrl` commands run in-process."""

import functools
import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# a batch field that turnrl/fields.py does not declare fails (in this process and in the runs it starts)
os.environ.setdefault("TURNRL_STRICT_FIELDS", "1")
# `auto` precisions are float32, exactly, whatever the processor (in this process and in the runs it
# starts): the recorded numbers do not depend on whether a CPU has bfloat16 instructions. Tests of
# the bfloat16 defaults unset it
os.environ.setdefault("TURNRL_EXACT", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # two workers on two cores: one torch thread each (and in the runs they start), instead of two
    # threads per worker taking turns on every core
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny():
    import torch

    from turnrl.models.loader import load_model

    model, tokenizer = load_model("tiny-random", torch.device("cpu"), seed=0)
    return model, tokenizer


@pytest.fixture
def cli(capsys, monkeypatch):
    """`cli("train", "key=value", ..., cwd=..., env=...)`: a `turnrl` command run in-process through
    `turnrl.cli.main`; returns its exit code, stdout and stderr (tests/support/cli.py)."""
    from tests.support.cli import run_cli

    return functools.partial(run_cli, capsys, monkeypatch)


@pytest.fixture
def keep_torch_threads():
    """Put back torch's thread count and deterministic mode after a test that trains in-process."""
    from tests.support.cli import process_state

    with process_state():
        yield


@pytest.fixture(scope="session")
def server_run(tmp_path_factory):
    """One synchronous 3-step tiny run through a child `turnrl serve`, made once for the session:
    test_train_server checks its server side, test_async compares async with max_staleness=0 to it."""
    from tests.support.cli import process_state
    from tests.support.tiny_runs import server_run as run

    with process_state():
        return run(tmp_path_factory.mktemp("server_run"))


# The files whose tests take longest, longest first (`--durations`): collected first, so that with
# pytest-xdist's two workers (pyproject's addopts) the long runs start early and the short tests
# fill the gaps, instead of one worker finishing a long run alone at the end.
LONGEST_FIRST = (
    "test_numbers_unchanged.py",
    "test_distributed.py",
    "test_exact_resume.py",
    "test_async.py",
    "test_model_sources.py",
    "test_estimators.py",
    "test_export.py",
    "test_resume.py",
    "test_distributed_failures.py",
    "test_train_server.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order kept otherwise
