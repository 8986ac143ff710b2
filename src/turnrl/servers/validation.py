"""One-line 4xx messages from pydantic validation errors, and the base of the request bodies they
describe, shared by turnrl's HTTP services."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict


class StrictRequest(BaseModel):
    """A request body of a turnrl server (`/retrieve`, `/run_code`, `/v1/completions`, ...).

    An unknown field is refused (a misspelt `max_token` is never silently ignored), and so is a
    value of another JSON type than the field's (pydantic's strict mode): `"2"`, `true` or `2.0`
    where an integer is expected, `"1"` or `true` where a number is, `"yes"` or `1` where a boolean
    is; each is a 4xx naming the field (`topk: Input should be a valid integer`). A JSON integer
    where a float is expected is a number all the same and is taken (`"temperature": 1`), as the
    OpenAI SDK sends it. A subclass adds to `model_config` (`allow_inf_nan=False`)."""

    model_config = ConfigDict(extra="forbid", strict=True)


def field_path(loc: tuple[Any, ...]) -> str:
    """pydantic's error location as `a.b[2]`, without the leading `body`."""
    out = ""
    for part in loc:
        if part == "body" and not out:
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def fields_at(model: Any, loc: Sequence[Any]) -> list[str]:
    """The fields of the pydantic model that holds the field at `loc` (an error's location): the
    nested model's own for a nested field, so "did you mean" suggests a sibling, not a top-level name."""
    current = model
    for part in loc[:-1]:
        if isinstance(part, int) or part == "body":
            continue
        field = getattr(current, "model_fields", {}).get(part)
        inner = _model_in(field.annotation) if field is not None else None
        if inner is None:
            break
        current = inner
    return list(getattr(current, "model_fields", {}))


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside an annotation (`M`, `M | None`, `list[M]`, ...), or None."""
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def describe_validation_error(errors: list[dict[str, Any]], fields: Sequence[str], example: str) -> str:
    """pydantic's error list as one line that names the offending field.

    `fields` are the request's known top-level fields (for "did you mean"); `example` is a
    JSON body shown when the body is missing.
    """
    if not errors:
        return "request: invalid"
    first = errors[0]
    kind, where = first.get("type", ""), field_path(tuple(first.get("loc", ())))
    if kind == "json_invalid":
        reason = (first.get("ctx") or {}).get("error", first.get("msg", ""))
        line = f"request body: not valid JSON ({reason})"
    elif kind == "missing" and not where:
        line = f"request body: missing; expected a JSON object like {example}"
    elif kind == "extra_forbidden":
        close = difflib.get_close_matches(where.split(".")[-1], list(fields), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known fields: {', '.join(fields)}"
        line = f"{where}: unknown field{hint}"
    elif not where and (kind.endswith("_type") or kind == "model_attributes_type"):
        line = f"request body: must be a JSON object, got {type(first.get('input')).__name__}"
    else:
        line = f"{where or 'request'}: {first.get('msg', 'invalid value')}"
    if len(errors) > 1:
        line += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return line
