"""SFT episode rows: the ids and the loss mask of an XML agent episode, built by hand from its pieces,
and bad episodes refused in one line naming the row."""

from __future__ import annotations

import json
import logging

import pytest

from turnrl.config.supervised_schema import SFTDataConfig
from turnrl.data.dataset import DataError
from turnrl.models.loader import load_tokenizer
from turnrl.supervised.sft_data import load_conversations

PROMPT = [{"role": "user", "content": "Who founded Grizo Brewing? Search first."}]
OBS1 = "Doc 1(Title: Zegreth Foundry) Zegreth Foundry is a company that makes rope."
OBS2 = "Doc 1(Title: Grizo Brewing) Grizo Brewing was founded by Jougrath Zizoumaes."
TURN1 = "<think> I need the founder. </think>\n<search> company founder </search>"
TURN2 = "<think> Not this company. </think>\n<search> Grizo Brewing founder </search>"
TURN3 = "<think> Doc 1 says it. </think>\n<answer> Jougrath Zizoumaes </answer>"


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


def enc(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def load(tok, tmp_path, rows, **data):
    f = write(tmp_path / "ep.jsonl", rows)
    return load_conversations([f], tok, SFTDataConfig(train_files=[f], **data), {tok.eos_token_id})


def obs(content: str, tag: str = "information") -> dict:
    return {"role": "observation", "tag": tag, "content": content}


def turn(content: str) -> dict:
    return {"role": "assistant", "content": content}


def test_two_search_episode_ids_and_mask_built_by_hand(tok, tmp_path):
    row = {
        "prompt": PROMPT,
        "episode": [turn(TURN1), obs(OBS1), turn(TURN2), obs(OBS2), turn(TURN3), obs("after the end")],
    }
    (got,) = load(tok, tmp_path, [row])
    prompt = enc(tok, tok.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False))

    def wrapped(text: str) -> list[int]:  # ObservationBuilder.xml: three pieces, each tokenised alone
        return enc(tok, "\n\n<information>") + enc(tok, text) + enc(tok, "</information>\n\n")

    # (ids, trained?) in order; the model's turns end at their closing tag (a stop string): no EOS.
    # The observation after the last model turn predicts nothing trained and is left out.
    pieces = [
        (prompt, 0),
        (enc(tok, TURN1), 1),
        (wrapped(OBS1), 0),
        (enc(tok, TURN2), 1),
        (wrapped(OBS2), 0),
        (enc(tok, TURN3), 1),
    ]
    assert got.ids == [t for ids, _ in pieces for t in ids]
    assert got.mask == [m for ids, m in pieces for _ in ids]
    assert tok.eos_token_id not in got.ids[len(prompt) :]
    assert sum(got.mask) == len(enc(tok, TURN1)) + len(enc(tok, TURN2)) + len(enc(tok, TURN3))


def test_a_turn_without_a_stop_string_ends_with_a_trained_eos(tok, tmp_path):
    row = {"prompt": "Say hi.", "episode": [turn("hi there")]}  # a text prompt, as `turnrl train` takes
    (got,) = load(tok, tmp_path, [row])
    prompt = enc(
        tok,
        tok.apply_chat_template(
            [{"role": "user", "content": "Say hi."}], add_generation_prompt=True, tokenize=False
        ),
    )
    assert got.ids == prompt + enc(tok, "hi there") + [tok.eos_token_id]
    assert got.mask == [0] * len(prompt) + [1] * (len(enc(tok, "hi there")) + 1)


def test_untagged_observation_is_verbatim_and_long_outputs_are_cut_as_the_loop_cuts(tok, tmp_path):
    long = " ".join(f"word{i}" for i in range(200))
    corrective = "\nTry again.\n"  # what the loop shows after an invalid action: its text as is
    row = {
        "prompt": PROMPT,
        "episode": [turn("I am not sure."), {"role": "observation", "content": corrective}, turn(TURN1), obs(long), turn(TURN3)],
    }  # fmt: skip
    (got,) = load(tok, tmp_path, [row], max_obs_length=16, obs_truncation_marker="...[cut]")
    marker = enc(tok, "...[cut]")
    cut = enc(tok, long)[: 16 - len(marker)] + marker  # exactly max_obs_length tokens, marker last
    pieces = [
        (enc(tok, "I am not sure."), 1),
        ([tok.eos_token_id], 1),  # no stop string: the model ended the turn with EOS
        (enc(tok, corrective), 0),
        (enc(tok, TURN1), 1),
        (enc(tok, "\n\n<information>"), 0),
        (cut, 0),
        (enc(tok, "</information>\n\n"), 0),  # the closing tag survives the cut
        (enc(tok, TURN3), 1),
    ]
    n = sum(len(ids) for ids, _ in pieces)
    assert got.ids[-n:] == [t for ids, _ in pieces for t in ids]
    assert got.mask[-n:] == [m for ids, m in pieces for _ in ids]
    assert not any(got.mask[:-n])  # the prompt


def test_episodes_and_chat_rows_mix_in_one_file(tok, tmp_path):
    chat = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    got = load(tok, tmp_path, [chat, {"prompt": PROMPT, "episode": [turn(TURN3)]}])
    assert len(got) == 2 and all(any(e.mask) for e in got)


@pytest.mark.parametrize(
    ("episode", "expected"),
    [
        ([obs(OBS1)], r"row 1: the episode has no assistant segment \(roles: observation\)"),
        ([turn(TURN1), {"role": "tool", "content": "x"}], r"row 1: episode segment 1 needs a 'role' of assistant, observation; got"),
        ([turn("a"), turn("b")], r"row 1: segments 0 and 1 are both assistant turns"),
        ([obs(OBS1), turn(TURN3)], r"row 1: segment 0 is an observation; an episode starts with the model's turn"),
        ([turn("<search> q </search> more")], r"row 1: episode segment 0: the agent loop stops a model turn at '</search>'"),
        ([turn("")], r"row 1: episode segment 0 \('assistant'\) needs 'content' text"),
        ([{"role": "assistant", "tag": "information", "content": "x"}], r"row 1: episode segment 0: 'tag' .* is for observations"),
        ([], r"row 1: 'episode' \(data.episode_key\) must be a non-empty list"),
        ("text", r"row 1: 'episode' \(data.episode_key\) must be a non-empty list"),
    ],
    ids=["no-assistant", "unknown-role", "two-turns-in-a-row", "starts-with-observation", "text-after-stop",
         "empty-turn", "tag-on-assistant", "empty", "not-a-list"],
)  # fmt: skip
def test_bad_episodes_are_named(tok, tmp_path, episode, expected):
    good = {"prompt": PROMPT, "episode": [turn(TURN3)]}
    with pytest.raises(DataError, match=expected):
        load(tok, tmp_path, [good, {"prompt": PROMPT, "episode": episode}])


def test_an_episode_without_a_prompt_names_the_setting(tok, tmp_path):
    with pytest.raises(DataError, match=r"row 0: row has no 'prompt' field \(data.prompt_key\)"):
        load(tok, tmp_path, [{"episode": [turn(TURN3)]}])


def test_overlong_episodes_are_dropped_or_cut_and_counted(tok, tmp_path, caplog):
    short = {"prompt": "hi", "episode": [turn(TURN3)]}
    long = {"prompt": PROMPT, "episode": [turn(TURN1), obs(OBS1 * 8), turn(TURN3)]}
    with caplog.at_level(logging.WARNING):
        kept = load(tok, tmp_path, [short, long], max_length=100)
    assert len(kept) == 1 and "dropped 1 of 2 conversations longer than data.max_length=100" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        cut = load(tok, tmp_path, [short, long], max_length=100, truncation="right")
    assert len(cut) == 2 and max(len(e.ids) for e in cut) == 100 and "cut 1 of 2" in caplog.text
    with pytest.raises(
        DataError, match=r"every conversation in .*ep.jsonl is longer than data.max_length=10"
    ):
        load(tok, tmp_path, [short, long], max_length=10)
