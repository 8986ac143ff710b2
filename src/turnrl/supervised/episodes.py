"""XML agent episodes -> token ids and a loss mask equal to what an RL rollout of them holds.

A row (docs/sft.md):

    {"prompt": [{"role": "user", "content": "...Question: ..."}],
     "episode": [{"role": "assistant", "content": "<think> ... </think>\\n<search> q </search>"},
                 {"role": "observation", "tag": "information", "content": "Doc 1(Title: t) ..."},
                 {"role": "assistant", "content": "<think> ... </think>\\n<answer> a </answer>"}]}

The ids are the ones the agent loop (`turnrl.agent.loop`) holds after playing these turns, so what
SFT trains on is what RL later samples and scores, token for token:

- prompt: the chat template with the generation prompt, tokenised as `turnrl train` loads prompts;
- model turn: its text tokenised on its own (the ids a model that learnt it samples back); the loop
  stops generating at `data.episode_stops`, so a turn ending in one ends there, and any other turn
  ends with the EOS the model stopped at; mask 1, as `response_mask`;
- observation with a `tag`: `ObservationBuilder.xml`, the loop's own code: `\\n\\n<tag>`, the output
  cut to `data.max_obs_length`, `</tag>\\n\\n`, each tokenised on its own; mask 0;
- observation without a tag: its text as is (the corrective text after an invalid action); mask 0.

Observations after the last model turn predict nothing trained and are left out.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from turnrl.agent.observation import ObservationBuilder
from turnrl.agent.tools.base import ToolError
from turnrl.config.checks import ConfigError
from turnrl.config.supervised_schema import SFTDataConfig
from turnrl.data.dataset import DataError, _messages, _prompt_text
from turnrl.supervised.chat import Tokenized

ROLES = ("assistant", "observation")


class EpisodeEncoder:
    def __init__(self, tokenizer: Any, data: SFTDataConfig):
        self.tokenizer, self.data = tokenizer, data

    @cached_property
    def observations(self) -> ObservationBuilder:
        d = self.data
        try:
            return ObservationBuilder(self.tokenizer, d.max_obs_length, d.obs_truncation_marker, "")
        except ToolError:  # its message names the RL keys; these are SFT's
            raise ConfigError(
                f"'data.obs_truncation_marker' is not shorter than data.max_obs_length={d.max_obs_length} tokens"
            ) from None

    def encode(self, row: dict[str, Any], where: str) -> Tokenized:
        """The ids of prompt + episode through its last model turn, and the model-token mask."""
        segments = self.segments(row[self.data.episode_key], where)
        prompt = _prompt_text(self.tokenizer, _messages(row, self.data.prompt_key, where), where)
        ids = self._encode(prompt)
        mask = [0] * len(ids)
        for seg in segments:
            if seg["role"] == "assistant":
                piece = self._model_turn(seg["content"], where)
            elif "tag" in seg:
                piece = self.observations.xml(seg["tag"], seg["content"]).ids
            else:
                piece = self._encode(seg["content"])
            ids += piece
            mask += [int(seg["role"] == "assistant")] * len(piece)
        end = max(j for j, m in enumerate(mask) if m) + 1
        return Tokenized(ids[:end], mask[:end])

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def _model_turn(self, text: str, where: str) -> list[int]:
        ids = self._encode(text)
        if text.endswith(tuple(self.data.episode_stops)):
            return ids  # generation stopped at the tag: no EOS follows it
        eos = self.tokenizer.eos_token_id
        if eos is None:
            raise DataError(
                f"{where}: a model turn that does not end in one of data.episode_stops ends with EOS, "
                "but the tokenizer has no EOS token"
            )
        return [*ids, int(eos)]

    def segments(self, raw: Any, where: str) -> list[dict[str, str]]:
        """The episode's segments, checked against what the agent loop can produce."""
        key = self.data.episode_key
        if not isinstance(raw, list) or not raw:
            raise DataError(
                f"{where}: '{key}' (data.episode_key) must be a non-empty list of "
                '{"role": "assistant" | "observation", "content"} segments'
            )
        out = [self._segment(s, j, where) for j, s in enumerate(raw)]
        roles = [s["role"] for s in out]
        if "assistant" not in roles:
            raise DataError(
                f"{where}: the episode has no assistant segment (roles: {', '.join(dict.fromkeys(roles))}); "
                "SFT trains on the model's turns, so an episode needs at least one"
            )
        if roles[0] != "assistant":
            raise DataError(f"{where}: segment 0 is an observation; an episode starts with the model's turn")
        for j in range(1, len(roles)):
            if roles[j - 1] == roles[j] == "assistant":
                raise DataError(
                    f"{where}: segments {j - 1} and {j} are both assistant turns; the agent loop puts an "
                    "observation between two model turns (merge them, or add the observation)"
                )
        return out

    def _segment(self, seg: Any, j: int, where: str) -> dict[str, str]:
        if not isinstance(seg, dict) or seg.get("role") not in ROLES:
            raise DataError(
                f"{where}: episode segment {j} needs a 'role' of {', '.join(ROLES)}; got {seg!r:.80}"
            )
        role, content = seg["role"], seg.get("content")
        if not isinstance(content, str) or (role == "assistant" and not content):
            raise DataError(f"{where}: episode segment {j} ('{role}') needs 'content' text")
        out = {"role": role, "content": content}
        tag = seg.get("tag")
        if tag is not None:
            if role != "observation" or not isinstance(tag, str) or not tag:
                raise DataError(
                    f"{where}: episode segment {j}: 'tag' (the observation's XML tag) is for observations, as text"
                )
            out["tag"] = tag
        if role == "assistant":
            for stop in self.data.episode_stops:
                at = content.find(stop)
                if at != -1 and at + len(stop) < len(content):
                    raise DataError(
                        f"{where}: episode segment {j}: the agent loop stops a model turn at '{stop}', which "
                        "this turn holds before its end; end the turn there (data.episode_stops)"
                    )
        return out
