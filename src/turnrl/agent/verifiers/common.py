"""What the verifiers modules share: the names, the errors, the one-line rule, the import of verifiers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from turnrl.errors import TurnrlInputError

if TYPE_CHECKING:
    pass


PREFIX = "verifiers:"
INSTALL = 'pip install -e ".[verifiers]"'
TASK_KEY = "verifiers_task"
"""`extra_info` key of a row written by `verifiers_rows`: the task's data as verifiers' JSON."""
RELAY_KEY_HEADER = "X-Turnrl-Relay-Key"
MAX_BODY = 64 * 2**20

AgentFn = Callable[[Any, str, dict[str, Any]], Awaitable[dict[str, float]]]


class VerifiersEnvError(TurnrlInputError):
    """A verifiers environment that cannot be loaded, or a row it cannot play; one line naming it."""


class VerifiersEpisodeError(RuntimeError):
    """An episode that verifiers itself recorded as failed (a harness, tool or model-call error)."""


def one_line(err: BaseException | str, limit: int = 400) -> str:
    # pydantic and verifiers errors span lines; what failed is said first, and a traceback that
    # verifiers quotes ends with its cause, so a long one keeps both ends
    text = " ".join(str(err).split()) or type(err).__name__
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head]} ... {text[-(limit - head - 5) :]}"


def import_verifiers(where: str) -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError as err:
        # the package itself missing (or a pre-0.4 one without verifiers.v1), else a broken dependency
        missing = isinstance(err, ModuleNotFoundError) and err.name in ("verifiers", "verifiers.v1")
        why = "is not installed (or is older than 0.4)" if missing else f"does not import ({one_line(err)})"
        raise VerifiersEnvError(f"{where}: the verifiers package {why}; {INSTALL}") from None
    return vf
