"""Observation tokens: tool output cut to `max_obs_length` tokens, wrapped, tokenised on its own.

Observations are the environment's words, not the policy's: they are appended after the model's
exact ids with response_mask 0 and log-prob 0, and never merged with the model's text before
tokenising (that is where multi-turn ids drift, verl #3720).

In XML mode the pieces `\\n\\n<information>`, the cut output, the marker and `</information>\\n\\n`
are tokenised separately and concatenated, so the cut is exact in tokens and the closing tag always
survives (Search-R1 cut the wrapped ids and could drop it).

Only the start of a very long output is tokenised: tokenising costs about a second per megabyte, and
no token past `max_obs_length` is shown. No token spans more characters than the vocabulary's longest
entry, so a text longer than `max_obs_length` times that is cut whatever its tail; the head kept is
four times longer still, and the full text is tokenised after all if the head somehow was not enough.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from turnrl.agent.chat_template import ToolMessages
from turnrl.agent.tools.base import ToolError

log = logging.getLogger(__name__)


@dataclass
class Observation:
    ids: list[int]
    cut: int = 0
    """How many tool outputs in it were cut to `max_obs_length`."""


def longest_token_chars(tokenizer: Any) -> int | None:
    """Characters of the vocabulary's longest entry (byte-level and SentencePiece pieces spell each byte
    or character with one character, so no token stands for more text); None if there is no vocabulary."""
    try:
        return max((len(t) for t in tokenizer.get_vocab()), default=None)
    except (AttributeError, TypeError, NotImplementedError):
        return None


class ObservationBuilder:
    def __init__(
        self,
        tokenizer: Any,
        max_obs_length: int,
        marker: str,
        invalid_text: str,
        template: ToolMessages | None = None,
    ):
        if max_obs_length < 1:
            raise ToolError(f"rollout.multi_turn.max_obs_length must be >= 1, got {max_obs_length}")
        self.tokenizer, self.max_obs_length = tokenizer, max_obs_length
        self.marker_ids = self.encode(marker)
        if len(self.marker_ids) >= max_obs_length:
            raise ToolError(
                f"rollout.multi_turn.obs_truncation_marker is {len(self.marker_ids)} tokens, "
                f"not shorter than max_obs_length={max_obs_length}"
            )
        self.marker = marker
        self.invalid_text = invalid_text
        self.template = template
        longest = longest_token_chars(tokenizer)
        self.head_chars = 4 * max_obs_length * longest if longest else None

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def encode_head(self, text: str) -> list[int]:
        """The ids of `text`, or of enough of its start to cut it to `max_obs_length` tokens."""
        if self.head_chars is not None and len(text) > self.head_chars:
            ids = self.encode(text[: self.head_chars])
            if len(ids) > self.max_obs_length:
                return ids
        return self.encode(text)

    def cut_ids(self, text: str) -> tuple[list[int], bool]:
        ids = self.encode_head(text)
        if len(ids) <= self.max_obs_length:
            return ids, False
        return ids[: self.max_obs_length - len(self.marker_ids)] + self.marker_ids, True

    def cut_text(self, text: str) -> tuple[str, bool]:
        """Cut in tokens, returned as text: chat templates take message text, not ids."""
        ids = self.encode_head(text)
        if len(ids) <= self.max_obs_length:
            return text, False
        keep = ids[: self.max_obs_length - len(self.marker_ids)]
        return self.tokenizer.decode(keep, skip_special_tokens=False) + self.marker, True

    # -- XML tags -------------------------------------------------------------------------------
    def xml(self, obs_tag: str, text: str) -> Observation:
        body, cut = self.cut_ids(text.strip())
        ids = self.encode(f"\n\n<{obs_tag}>") + body + self.encode(f"</{obs_tag}>\n\n")
        return Observation(ids, int(cut))

    def invalid_text_for(self, reason: str, **tags: str) -> str:
        """The configured corrective text with `{reason}`, `{tool_tag}`, `{answer_tag}` filled in."""
        try:
            return self.invalid_text.format(reason=reason, **tags)
        except (KeyError, IndexError, ValueError):  # a user text with other braces is shown as written
            return self.invalid_text

    def invalid(self, reason: str, **tags: str) -> Observation:
        """The corrective observation after an unusable action (empty when none is configured)."""
        return Observation(self.encode(self.invalid_text_for(reason, **tags)) if self.invalid_text else [])

    # -- chat-template tool messages --------------------------------------------------------------
    def tool_messages(self, texts: list[str], eos_text: str) -> Observation:
        assert self.template is not None, "tool_messages needs a chat template"
        pieces = [self.cut_text(t) for t in texts]
        rendered = self.template.render([p[0] for p in pieces], eos_text)
        return Observation(self.encode(rendered), sum(int(p[1]) for p in pieces))
