"""API keys of turnrl's servers and clients: where a key comes from, what a client sends, and the
rule that a server reachable beyond this machine must have one. No web stack is imported here,
so clients and child launchers stay light."""

from __future__ import annotations

import ipaddress
import os

from turnrl.errors import TurnrlInputError

API_KEY_ENV = "TURNRL_API_KEY"
"""The environment variable every turnrl server reads its key from when `--api-key` is not given,
and every turnrl client sends when its config names no key."""


def resolve_api_key(flag: str | None) -> str:
    """The key a server or client uses: the explicit one, else $TURNRL_API_KEY, else '' (none)."""
    return flag if flag else os.environ.get(API_KEY_ENV, "")


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The header a turnrl client sends: `Authorization: Bearer <key>`, or nothing without a key."""
    key = resolve_api_key(api_key)
    return {"Authorization": f"Bearer {key}"} if key else {}


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a hostname: it may resolve to anything


def check_bind(host: str, api_key: str) -> None:
    """Refuse, in one line starting with the flag, to serve beyond loopback without a key; the
    command puts its own name in front."""
    if not api_key and not is_loopback(host):
        raise TurnrlInputError(
            f"--host {host}: binding beyond loopback needs a key (--api-key KEY or "
            f"${API_KEY_ENV}); anyone who reaches the port could use the server"
        )
