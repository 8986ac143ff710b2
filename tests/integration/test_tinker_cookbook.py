"""tinker-cookbook's own training loops against `turnrl tinker serve` (tiny-random on CPU, a real
server on localhost, the unmodified `tinker` SDK underneath).

The cookbook is not a turnrl dependency: the loop tests are skipped without it. What they pin down is
what broke it: every cookbook loop merges `optim_step`'s metrics into its own step's metrics
(`metrics.update(optim_result.metrics)`), so a metric named like one of the loop's (`step`,
`learning_rate`) replaced the loop's value, and its metrics.jsonl numbered the steps from 1, as
floats, which its resume (`truncate_metrics`, integer steps only) then ignored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

from tests.support.tinker_server import Served, served_under  # noqa: E402
from turnrl.models.loader import model_directory  # noqa: E402

KEY = "tml-" + secrets.token_hex(8)
BASE = "tiny-random"
RENDERER = "qwen3_instruct"  # SmolLM2's ChatML turns; tiny-random has SmolLM2's tokenizer


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served_under(BASE, tmp_path_factory.mktemp("tinker_state"), KEY, poll_wait_s=0.05) as running:
        yield running


def test_optim_step_metrics_leave_a_loops_own_metrics_alone(served: Served) -> None:
    sdk = tinker.ServiceClient(base_url=served.url, api_key=KEY)
    try:
        client = sdk.create_lora_training_client(base_model=BASE, rank=4, seed=0).result(timeout=60)
        ids = [504, 3575, 282, 4649, 314, 7042, 30, 216, 1232]
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(ids[:-1]),
            loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
        )
        fwd = client.forward_backward([datum], "cross_entropy")
        opt = client.optim_step(types.AdamParams(learning_rate=1e-3))
        fwd.result(timeout=60)
        metrics = opt.result(timeout=60).metrics
        assert metrics is not None
        assert set(metrics) == {"turnrl/grad_norm", "turnrl/learning_rate", "turnrl/step"}
        assert metrics["turnrl/step"] == 1.0 and metrics["turnrl/learning_rate"] == pytest.approx(1e-3)
        assert metrics["turnrl/grad_norm"] > 0
        # what every cookbook loop does with them
        loop: dict[str, Any] = {"step": 0, "learning_rate": 5e-4, "optim/lr": 5e-4}
        loop.update(metrics)
        assert loop["step"] == 0 and loop["learning_rate"] == 5e-4 and loop["optim/lr"] == 5e-4
    finally:
        sdk.close("success").result(timeout=30)


@pytest.fixture
def cookbook(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The cookbook, with `tiny-random` resolvable by its tokenizer loader (it only knows Hub names
    and directories) and the SDK keyed for the server."""
    cookbook = pytest.importorskip("tinker_cookbook")
    from tinker_cookbook import tokenizer_utils

    monkeypatch.setenv("TINKER_API_KEY", KEY)
    directory = str(model_directory(BASE))
    tokenizer_utils.register_tokenizer(BASE, lambda: tokenizer_utils.get_tokenizer(directory))
    # the loops replace the root logger's handlers with their own (a file in the run's log
    # directory): put pytest's back, or later tests in this process log into a removed file
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield cookbook
    tokenizer_utils.unregister_tokenizer(BASE)
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def metrics_rows(log_path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines() if line.strip()
    ]


@pytest.mark.slow  # ~15-50 s: the default run stays under 10 minutes on 2 cores
def test_cookbook_supervised_loop_trains_and_logs_its_own_steps(
    served: Served, cookbook: Any, tmp_path: Path
) -> None:
    from tinker_cookbook.renderers import TrainOnWhat
    from tinker_cookbook.supervised import train
    from tinker_cookbook.supervised.data import FromConversationFileBuilder
    from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

    chats = [
        [{"role": "user", "content": f"What is {a} plus {a}?"}, {"role": "assistant", "content": f"{2 * a}."}]
        for a in range(4)
    ]
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"messages": m}) + "\n" for m in chats))
    common = ChatDatasetBuilderCommonConfig(
        model_name_for_tokenizer=BASE,
        renderer_name=RENDERER,
        max_length=64,
        batch_size=2,
        train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES,
    )
    log_path = tmp_path / "sl"
    config = train.Config(
        log_path=str(log_path),
        model_name=BASE,
        recipe_name="test_sl",
        renderer_name=RENDERER,
        dataset_builder=FromConversationFileBuilder(common_config=common, file_path=str(data)),
        learning_rate=1e-3,
        lora_rank=4,
        eval_every=0,
        save_every=0,
        base_url=served.url,
    )
    asyncio.run(train.main(config))
    steps = [r for r in metrics_rows(log_path) if "train_mean_nll" in r]
    assert [r["step"] for r in steps] == [0, 1]
    assert all(isinstance(r["step"], int) for r in steps)
    assert [r["turnrl/step"] for r in steps] == [1.0, 2.0]
    assert all(r["learning_rate"] > 0 and r["train_mean_nll"] > 0 for r in steps)
    saved = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
    final = saved[-1]["state_path"]
    assert (served.root / final.removeprefix("tinker://") / "adapter_model.safetensors").is_file()


def test_cookbook_rl_loop_samples_trains_and_logs_its_own_steps(
    served: Served, cookbook: Any, tmp_path: Path
) -> None:
    import chz
    from tinker_cookbook import renderers
    from tinker_cookbook.rl import train
    from tinker_cookbook.rl.types import Env, EnvGroupBuilder, RLDataset, RLDatasetBuilder, StepResult
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    renderer = renderers.get_renderer(RENDERER, get_tokenizer(BASE))

    class LengthEnv(Env):
        """Any response; the reward is its length (so a group's rewards differ)."""

        async def initial_observation(self):  # type: ignore[no-untyped-def]
            prompt = renderer.build_generation_prompt([{"role": "user", "content": "Count to three."}])
            return prompt, renderer.get_stop_sequences()

        async def step(self, action, *, extra=None):  # type: ignore[no-untyped-def]
            return StepResult(
                reward=len(action) / 4,
                episode_done=True,
                next_observation=tinker.ModelInput.empty(),
                next_stop_condition=renderer.get_stop_sequences(),
            )

    @dataclass(frozen=True)
    class Group(EnvGroupBuilder):
        async def make_envs(self) -> Sequence[Env]:
            return [LengthEnv() for _ in range(2)]

    class Batches(RLDataset):
        def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
            return [Group(), Group()]

        def __len__(self) -> int:
            return 1

    @chz.chz
    class Builder(RLDatasetBuilder):
        async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
            return Batches(), None

    log_path = tmp_path / "rl"
    config = train.Config(
        learning_rate=1e-3,
        dataset_builder=Builder(),
        model_name=BASE,
        recipe_name="test_rl",
        renderer_name=RENDERER,
        max_tokens=4,
        log_path=str(log_path),
        eval_every=0,
        save_every=0,
        lora_rank=4,
        loss_fn="importance_sampling",
        base_url=served.url,
        num_groups_to_log=0,
    )
    asyncio.run(train.main(config))
    steps = [r for r in metrics_rows(log_path) if "env/all/reward/total" in r]
    assert [r["step"] for r in steps] == [0]
    assert steps[0]["turnrl/step"] == 1.0 and steps[0]["turnrl/grad_norm"] >= 0
    # the sampler's log-probs are the trainer's: the loop's own estimate of their KL is ~0
    assert abs(steps[0]["optim/kl_sample_train_v1"]) < 1e-3
