"""`openenv:<server>[#options]`, read: the server's URLs and the episode's options (pure)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from turnrl.agent.openenv.common import PREFIX, OpenEnvError

REWARD_MODES = ("sum", "last")
OPTIONS = ("action", "reward", "max_turns", "max_tokens")
FORM = "openenv:<server URL>[#action=<field>|json&reward=sum|last&max_turns=<n>&max_tokens=<n>]"


@dataclass(frozen=True)
class Spec:
    where: str
    """`openenv:<spec>` as configured, for messages."""
    url: str
    """The server's HTTP base URL (`/health`, `/schema`, `/mcp`), without a trailing slash."""
    action: str = ""
    """The action field a reply's text fills; `json` = the reply is the action's JSON object; '' =
    read off the env's action schema."""
    reward: str = "sum"
    """The episode's reward: the `sum` of its steps' rewards, or the `last` step's."""
    max_turns: int = 0
    """Model calls per episode (0 = `rollout.agent.max_calls`)."""
    max_tokens: int = 0
    """Tokens one reply may have (0 = what the episode's response budget leaves), so that several
    turns fit in `data.max_response_length`."""

    @property
    def ws_url(self) -> str:
        """The session endpoint: one WebSocket per episode, its own env instance on the server."""
        scheme, rest = self.url.split("://", 1)
        return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/ws"

    @property
    def loopback(self) -> bool:
        """A server on this machine: reached without the environment's proxy settings."""
        host = urlsplit(self.url).hostname or ""
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False


def parse_spec(text: str) -> Spec:
    """The spec `text` names (with or without `openenv:`); OpenEnvError (one line) for a bad one.
    `host:port` means `http://host:port`; `ws://` and `wss://` name the same server as `http(s)://`."""
    spec = text.strip().removeprefix(PREFIX)
    where = f"{PREFIX}{spec}"
    server, _, fragment = spec.partition("#")
    if not server:
        raise OpenEnvError(f"{where}: name the environment's server: {FORM}")
    if "://" not in server:
        server = f"http://{server}"
    scheme, rest = server.split("://", 1)
    scheme = {"ws": "http", "wss": "https"}.get(scheme.lower(), scheme.lower())
    parts = urlsplit(f"{scheme}://{rest}")
    if scheme not in ("http", "https") or not parts.hostname:
        raise OpenEnvError(f"{where}: {server!r} is not a server URL (http://host:port); {FORM}")
    try:
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as err:
        raise OpenEnvError(f"{where}: {server!r}: {err}") from None
    url = f"{scheme}://{rest}".split("?")[0].rstrip("/")
    return Spec(where, url, **_options(fragment, where))


def _options(fragment: str, where: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in parse_qsl(fragment, keep_blank_values=True):
        if key not in OPTIONS:
            raise OpenEnvError(f"{where}: unknown option {key!r}; the options are {', '.join(OPTIONS)}")
        if key == "action":
            if not value:
                raise OpenEnvError(f"{where}: action= names the action field the reply fills, or json")
            out[key] = value
        elif key == "reward":
            if value not in REWARD_MODES:
                raise OpenEnvError(f"{where}: reward={value!r}; use reward=sum or reward=last")
            out[key] = value
        else:
            if not value.isdigit() or int(value) < 1:
                raise OpenEnvError(f"{where}: {key}={value!r}; use a whole number >= 1")
            out[key] = int(value)
    return out
