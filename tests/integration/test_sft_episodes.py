"""SFT on agent episodes trains on exactly the ids and mask an RL rollout of the same episode holds.

Demonstrations come from `turnrl data search_sft` (built in-process over the built-in corpus); the
same model turns are then played through the real agent loop (`AgentRollout`, a scripted engine that
emits their ids, the real search tool querying turnrl's retriever child over the built-in index). The
SFT encoding of each demonstration must equal the rollout's prompt + response ids token for token,
and its loss mask the rollout's `response_mask` (0 over the prompt).
"""

from __future__ import annotations

import json

import pytest

from tests.support.scripted_engine import ScriptedEngine
from turnrl.agent.rollout import AgentRollout
from turnrl.batch import Batch
from turnrl.config import load_config
from turnrl.config.agent_schema import MultiTurnConfig
from turnrl.config.supervised_schema import SFTDataConfig
from turnrl.data.dataset import load_examples
from turnrl.models.loader import load_tokenizer
from turnrl.rollout.base import SamplingParams
from turnrl.supervised.sft_data import load_conversations
from turnrl.tasks.search import demos as search_demos
from turnrl.tasks.search.corpus import builtin_index
from turnrl.tensors import left_pad, position_ids_from_mask

BUDGET = 600


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    rows, report = search_demos.build(40, seed=3, topk=3, retry_fraction=0.5, cache=cache)
    assert report.searches[1] and report.searches[2]  # both kinds present
    one = next(r for r in rows if r["extra_info"]["searches"] == 1)
    two = next(r for r in rows if r["extra_info"]["searches"] == 2)
    return cache, one, two


def variant(row: dict, episode: list[dict]) -> dict:
    """`row` with another episode, and a prompt of its own (the script tells rows by their prompts)."""
    prompt = [{"role": "user", "content": row["prompt"][0]["content"] + "(variant)\n"}]
    return {**row, "prompt": prompt, "episode": episode}


def cases(one: dict, two: dict, eos_ends_episode: bool) -> list[dict]:
    """The two generated demonstrations, and one that exercises the loop's EOS handling."""
    first = one["episode"][:2]
    if eos_ends_episode:  # a last turn without an action, ended by EOS: the episode ends there
        last = {"role": "assistant", "content": "<think> I cannot tell. </think>\nNo answer."}
        return [one, two, variant(one, [*first, last])]
    # an EOS without an action is invalid: the loop shows its corrective text (an untagged observation)
    text = MultiTurnConfig().invalid_action_observation
    corrective = text.format(reason="no action", tool_tag="search", answer_tag="answer")
    episode = [
        {"role": "assistant", "content": "<think> Let me think first. </think>"},
        {"role": "observation", "content": corrective},
        *one["episode"],
    ]
    return [one, two, variant(one, episode)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("eos_ends_episode", [True, False], ids=["eos-ends", "eos-invalid"])
def test_sft_encoding_equals_the_agent_rollout(demos, tmp_path, eos_ends_episode):
    cache, one, two = demos
    rows = cases(one, two, eos_ends_episode)
    data = tmp_path / "episodes.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok = load_tokenizer("tiny-random")
    eos = tok.eos_token_id

    # SFT: the real loader (episode rows go through `EpisodeEncoder`)
    sft = load_conversations([str(data)], tok, SFTDataConfig(train_files=[str(data)]), {eos})

    # RL: the trainer's prompt loader, then the agent loop playing the same model turns
    prompts = [e.prompt_ids for e in load_examples([str(data)], tok, 1024)]
    turns = [
        [
            tok(s["content"], add_special_tokens=False)["input_ids"]
            for s in r["episode"]
            if s["role"] == "assistant"
        ]
        for r in rows
    ]
    for r, t in zip(rows, turns, strict=True):  # what a model samples: ids up to the stop string, or EOS
        for s, ids in zip([s for s in r["episode"] if s["role"] == "assistant"], t, strict=True):
            if not s["content"].endswith(("</search>", "</answer>")):
                ids.append(eos)
    played = [0] * len(rows)

    def script(context: list[int]) -> list[int]:
        row = next(i for i, p in enumerate(prompts) if context[: len(p)] == p)
        played[row] += 1
        return turns[row][played[row] - 1]

    cfg = load_config(
        None,
        [
            "rollout.multi_turn.enable=true",
            "rollout.multi_turn.tools=[search]",
            f"rollout.multi_turn.eos_ends_episode={str(eos_ends_episode).lower()}",
            f"model.cache_dir={cache}",  # the index the demonstrations were searched in
        ],
    )
    ids, mask = left_pad(prompts, tok.pad_token_id)
    gen = Batch({"input_ids": ids, "attention_mask": mask, "position_ids": position_ids_from_mask(mask)})
    engine = ScriptedEngine(script, eos_ids={eos})
    with AgentRollout(engine, tok, cfg, tok.pad_token_id, default_index=builtin_index) as agent:
        batch, metrics = agent.generate(
            gen, SamplingParams(max_new_tokens=BUDGET, n=1, temperature=0.0, seed=1)
        )
    assert played == [len(t) for t in turns]  # every scripted turn was asked for, no more
    assert metrics["agent/tool_error_ratio"] == 0.0

    r = batch["responses"].shape[1]
    for i, example in enumerate(sft):
        full = batch["input_ids"][i][batch["attention_mask"][i].bool()].tolist()
        k = int(batch["attention_mask"][i, -r:].sum())
        response_mask = batch["response_mask"][i, :k].tolist()
        assert example.ids == full, f"row {i}: ids differ"
        assert example.mask == [0] * (len(full) - k) + response_mask, f"row {i}: masks differ"
        assert 0 < sum(response_mask) < k  # model tokens and observation tokens both present
    assert list(batch["agent_tool_calls"]) == [1, 2, 1]
    assert metrics["agent/answered_ratio"] == (2 / 3 if eos_ends_episode else 1.0)
