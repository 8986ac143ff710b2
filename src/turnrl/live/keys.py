"""The clients a live server lets in (`live.keys_file`): a name and a key each, some of them admins."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from turnrl.errors import TurnrlInputError

MIN_KEY_LENGTH = 16


class KeysError(TurnrlInputError):
    """The keys file cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class Client:
    name: str
    admin: bool = False


def load_keys(path: str) -> dict[bytes, Client]:
    """`{key: Client}` from `{"clients": [{"name", "key", "admin"?}, ...]}`; every fault is one line
    naming the file and the entry."""
    if not path:
        raise KeysError("live.keys_file: not set; name a JSON file of clients (docs/live.md)")
    file = Path(path)
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise KeysError(f"live.keys_file: file not found: {file}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise KeysError(f"live.keys_file {file}: not readable JSON ({err})") from None
    entries = data.get("clients") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise KeysError(f'live.keys_file {file}: want {{"clients": [{{"name": ..., "key": ...}}, ...]}}')
    out: dict[bytes, Client] = {}
    names: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"live.keys_file {file}: clients[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"name", "key", "admin"}:
            raise KeysError(f"{where}: want an object with name, key and optionally admin")
        name, key, admin = entry.get("name"), entry.get("key"), entry.get("admin", False)
        if not isinstance(name, str) or not name or not name.isprintable():
            raise KeysError(f"{where}: name must be a non-empty printable string")
        if (
            not isinstance(key, str)
            or len(key) < MIN_KEY_LENGTH
            or not key.isascii()
            or not key.isprintable()
        ):
            raise KeysError(
                f"{where} ({name}): key must be printable ASCII of at least {MIN_KEY_LENGTH} characters"
            )
        if not isinstance(admin, bool):
            raise KeysError(f"{where} ({name}): admin must be true or false")
        if name in names or key.encode() in out:
            raise KeysError(f"{where} ({name}): a name or key given twice")
        names.add(name)
        out[key.encode()] = Client(name, admin)
    return out
