"""One episode's sample as the gateway records it: the exact ids the policy read and wrote.

An agent sends whole conversations; the trainer needs one token sequence. Re-rendering each call's
messages and tokenising them would re-tokenise the model's own output (a tokenizer does not give
back the ids it was handed for their text) and train on ids the policy never sampled. So:

- call 1: its messages (+ tools) rendered with the chat template are the sample's **prompt**;
- call k > 1 must **extend** call k-1: its messages start with call k-1's messages and then the
  assistant message call k-1 returned (content and tool calls compared, call ids ignored), and it
  sends the same tools. Only what comes after is new: the end of the assistant message, the new
  (tool, user) messages and the next assistant header. That text is found by rendering the
  conversation without and with the new messages and taking the difference (the template must
  be prefix-preserving there), and only it is tokenised. The engine then generates from
  `prompt + everything recorded + delta`: the model reads exactly what the sample holds;
- the response is, call after call, the delta (`response_mask` 0, log-prob 0) then the sampled
  ids verbatim (mask 1, the engine's log-probs, the version that sampled them).

**The drift rule: a fork.** A call that does not extend the previous one (the agent edited or
dropped history, changed its tools or template variables) or whose delta the template cannot give
(it rewrites earlier messages, e.g. drops an earlier turn's reasoning) **forks** the episode: the
sample so far is kept as it was recorded, and a new sample starts from the call's whole rendering
(its prompt) and records on from there, by the same rule. An episode thus gives one sample per
fork, each with the episode's reward (`agent/template_forks` counts the forks;
`agent/template_drift` the episodes that forked, once each). A fork's prompt and response together
fit `max_prompt_tokens + max_response_tokens`, and each sample's response `max_response_tokens`.
After `max_forks` forks a further drifted call is served whole but not recorded, so never trained
on (`agent/untrained_calls/mean`).

A call whose answer is not delivered (its client left, mid-stream too, or the engine failed) is
**abandoned**: nothing of it is recorded (`abandoned_calls`), and the next call must extend the last
recorded one.

**Limits.** The first call's prompt may have at most `max_prompt_tokens` (else it is refused and
the episode fails: `prompt_too_long`). The recorded response (deltas and sampled ids) may have at
most `max_response_tokens`: each call may sample what is left, and a call whose delta would leave
no token is refused; the episode is then truncated (`finish_reason` "length"). The call after
`max_calls` is refused the same way.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from turnrl.agent.chat_template import appended_text
from turnrl.agent.episode import Episode
from turnrl.servers.chat.template import NOT_JSON, ChatTemplate, json_value, text_of

_SENTINEL = "\x1eTURNRL-GATEWAY\x1e"


class Refused(Exception):
    """A call the episode's limits refuse: HTTP `status`, a one-line message naming the limit."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class EpisodeLimits:
    max_prompt_tokens: int
    """The first call's rendered prompt (`data.max_prompt_length`)."""
    max_response_tokens: int
    """The recorded response: deltas and sampled ids (`data.max_response_length`)."""
    max_calls: int
    """Model calls per episode, recorded or not (`rollout.agent.max_calls`)."""
    max_forks: int = 4
    """New samples one episode may start at drift (`rollout.agent.max_forks`); 0 = none."""


@dataclass
class Plan:
    """What one call samples from, and whether it is recorded."""

    context: list[int]
    """The ids the engine conditions on."""
    max_new_tokens: int
    recorded: bool
    """False after drift with no fork left: served, not trained on."""
    fork: bool = False
    """True: the call starts a new sample whose prompt is `context` (the drift rule)."""
    delta: list[int] = field(default_factory=list)
    """Ids appended to the sample before this call's sampled ids (mask 0)."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    key: str = ""
    """What must stay the same from call to call: the tools and the template variables."""


def message_end(template: ChatTemplate) -> str:
    """The text the template writes after an assistant message's content (`<|im_end|>\\n`), or
    ValueError naming why the template cannot be used for exact trajectories."""
    base = [{"role": "user", "content": "question"}]
    prompt = template.render(base)
    with_answer = template.render(
        [*base, {"role": "assistant", "content": _SENTINEL}], add_generation_prompt=False
    )
    if not with_answer.startswith(prompt) or _SENTINEL not in with_answer[len(prompt) :]:
        raise ValueError(
            "the chat template renders an assistant message differently from its generation prompt"
        )
    return with_answer[with_answer.index(_SENTINEL) + len(_SENTINEL) :]


def renders_tools(template: ChatTemplate) -> bool:
    """Whether the template shows the model the tools it is given (SmolLM2's, for one, does not)."""
    name = "turnrl_probe_tool_9f2c"
    tool = {"type": "function", "function": {"name": name, "description": "", "parameters": {}}}
    try:
        return name in template.render([{"role": "user", "content": "question"}], [tool])
    except ValueError:
        return False


def _arguments(value: Any) -> str:
    """A tool call's arguments in one canonical form: JSON text and a mapping compare equal."""
    if isinstance(value, str):
        parsed = json_value(value) if value.strip() else {}
        if parsed is NOT_JSON:
            return value
        value = parsed
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def comparable(message: dict[str, Any]) -> tuple[Any, ...]:
    """What must be equal for two messages to be the same message: role, text, name, the tool
    call it answers, and its calls' names and arguments (call ids are the client's to keep)."""
    calls = tuple(
        ((c.get("function") or {}).get("name"), _arguments((c.get("function") or {}).get("arguments", {})))
        for c in message.get("tool_calls") or []
    )
    role = "system" if message.get("role") == "developer" else message.get("role")
    return (role, text_of(message.get("content")), message.get("name"), message.get("tool_call_id"), calls)


class Trajectory:
    """One episode's calls, recorded as one sample (see the module docstring)."""

    def __init__(self, template: ChatTemplate, limits: EpisodeLimits, eos_ids: set[int], end: str) -> None:
        self.template, self.limits, self.eos_ids, self.end = template, limits, eos_ids, end
        self.samples: list[Episode] = []
        """One per fork, in order; the last is the one recording."""
        self.forks = 0
        self.expected: list[dict[str, Any]] = []
        """The last recorded call's messages and the assistant message it returned."""
        self.key = ""
        self.eos_text = ""
        self.calls = 0
        """Calls planned (recorded or not, refusals included)."""
        self.untrained_calls = 0
        self.abandoned_calls = 0
        """Planned calls whose answer was never delivered (the client left, the call failed)."""
        self.tool_calls = 0
        self.unparsed_tool_calls = 0
        self.tools_offered = False
        """Some call was read for tool calls (tools given, `tool_choice` not none)."""
        self.drift = ""
        """Why the episode first forked or stopped recording ('' = it did not)."""
        self.recording = True
        """False once a drift found no fork left: later calls are served, not recorded."""
        self.limit = ""
        """The limit that refused a call ('' = none): the episode ended truncated."""
        self.prompt_too_long = ""
        """Why the first call was refused for its length ('' = it was not)."""
        self.closed = False
        self.lock = threading.Lock()  # record() on the gateway's thread, close() on the rollout's

    @property
    def episode(self) -> Episode | None:
        """The sample being recorded (None before the first recorded call)."""
        return self.samples[-1] if self.samples else None

    # -- one call ---------------------------------------------------------------------------------
    def plan(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        asked: int | None,
        variables: dict[str, Any] | None = None,
    ) -> Plan:
        """The call's context and budget, or Refused. Renders and tokenises (real work: off the
        event loop)."""
        lim = self.limits
        if self.closed:  # a late call of an episode that timed out: its record is already read
            raise Refused("episode: already ended (timed out?)", 404)
        self.calls += 1
        if self.calls > lim.max_calls:
            self._stop("max_calls")
            raise Refused(
                f"episode: rollout.agent.max_calls={lim.max_calls} calls reached; the episode ends here"
            )
        if self.limit == "length":
            raise Refused(
                f"episode: its response reached data.max_response_length={lim.max_response_tokens} tokens; "
                "the episode ends here (context_length_exceeded)"
            )
        key = json.dumps([tools, variables], sort_keys=True, ensure_ascii=False, default=str)
        if self.episode is None and self.recording:
            return self._first(messages, tools, asked, variables, key)
        if self.recording:
            delta_text = self._delta_text(messages, tools, variables, key)
            if delta_text is not None:
                return self._extend(self.template.encode(delta_text), messages, tools, asked, key)
        return self._whole(messages, tools, asked, variables, key)

    def _extend(
        self,
        delta: list[int],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        asked: int | None,
        key: str,
    ) -> Plan:
        """A call that extends the sample: its delta, then what the response budget leaves."""
        lim = self.limits
        assert self.episode is not None
        left = lim.max_response_tokens - len(self.episode.ids) - len(delta)
        if left < 1:
            self._stop("length")
            raise Refused(
                f"messages: the {len(delta)} new tokens leave no room in data.max_response_length="
                f"{lim.max_response_tokens}; the episode ends here (context_length_exceeded)"
            )
        budget = left if asked is None else min(asked, left)
        return Plan(self.episode.context + delta, budget, True, False, delta, messages, tools, key)

    def _whole(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        asked: int | None,
        variables: dict[str, Any] | None,
        key: str,
    ) -> Plan:
        """After drift: the call rendered whole, a new sample (a fork) while forks are left."""
        lim = self.limits
        ids = self.template.prompt_ids(messages, tools, variables=variables)
        room = lim.max_prompt_tokens + lim.max_response_tokens
        if len(ids) >= room:
            raise Refused(
                f"messages: {len(ids)} prompt tokens leave no room under data.max_prompt_length + "
                f"data.max_response_length = {room} (context_length_exceeded)"
            )
        cap = min(lim.max_response_tokens, room - len(ids))
        budget = cap if asked is None else min(asked, cap)
        if self.recording and self.forks < lim.max_forks:
            return Plan(ids, budget, True, True, [], messages, tools, key)
        self.recording = False
        return Plan(ids, budget, False, False, [], messages, tools, key)

    def _first(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        asked: int | None,
        variables: dict[str, Any] | None,
        key: str,
    ) -> Plan:
        ids = self.template.prompt_ids(messages, tools, variables=variables)
        if len(ids) > self.limits.max_prompt_tokens:
            self.prompt_too_long = (
                f"its first call's prompt has {len(ids)} tokens, over data.max_prompt_length="
                f"{self.limits.max_prompt_tokens} (raise it, or send a shorter conversation)"
            )
            raise Refused(f"messages: {self.prompt_too_long}")
        budget = self.limits.max_response_tokens
        return Plan(
            ids, budget if asked is None else min(asked, budget), True, False, [], messages, tools, key
        )

    def _delta_text(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        variables: dict[str, Any] | None,
        key: str,
    ) -> str | None:
        """The text after the last recorded sampled ids, or None after marking drift."""
        n = len(self.expected)
        if key != self.key:
            return self._drifted("the tools or template variables changed")
        if len(messages) < n or [comparable(m) for m in messages[:n]] != [
            comparable(m) for m in self.expected
        ]:
            return self._drifted("the messages do not extend the previous call's and its answer")
        before = self.template.render(messages[:n], tools, add_generation_prompt=False, variables=variables)
        after = self.template.render(messages, tools, variables=variables)
        if not before.endswith(self.end):
            return self._drifted("the chat template ends this assistant message unlike its others")
        text = appended_text(before, after, self.end, self.eos_text)
        if text is None:
            return self._drifted("the chat template rewrites earlier messages (it is not prefix-preserving)")
        return text

    def _drifted(self, why: str) -> None:
        self.drift = self.drift or why
        return None

    def _stop(self, limit: str) -> None:
        self.limit = limit
        if self.episode is not None:
            self.episode.end(truncated=True)

    def record(
        self,
        plan: Plan,
        ids: list[int],
        log_probs: list[float],
        version: int,
        answer: dict[str, Any],
        tool_calls: int,
        unparsed: int,
    ) -> None:
        """Append a served call: its delta (mask 0) and its sampled ids (mask 1); `answer` is the
        assistant message returned, which the next call must carry."""
        with self.lock:
            if self.closed:  # the episode timed out or ended while this call ran: nobody trains on it
                return
            if not plan.recorded:
                self.untrained_calls += 1
                return
            if self.episode is None or plan.fork:
                if plan.fork:  # the sample so far stays as recorded; this call starts the next
                    self.forks += 1
                    self.episode.done = True  # type: ignore[union-attr]
                self.samples.append(Episode(list(plan.context)))
            else:
                self.episode.add_observation(plan.delta)
            assert self.episode is not None
            self.episode.add_model(list(ids), list(log_probs), version)
            self.episode.turns += 1
            self.episode.tool_calls += tool_calls
            self.episode.invalid_actions += unparsed
            self.tool_calls += tool_calls
            self.unparsed_tool_calls += unparsed
            self.expected = [*plan.messages, answer]
            self.key = plan.key
            self.eos_text = ""
            if ids and ids[-1] in self.eos_ids:
                self.eos_text = self.template.tokenizer.decode(ids[-1:], skip_special_tokens=False)
            if len(self.episode.ids) >= self.limits.max_response_tokens:
                self._stop("length")  # the budget is spent: the next call is refused

    def abandon(self) -> None:
        """A planned call whose answer was not delivered: not recorded, so the next call extends the
        last recorded one."""
        with self.lock:
            self.abandoned_calls += 1

    def close(self) -> None:
        with self.lock:
            self.closed = True
