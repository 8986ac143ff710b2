"""Stage views -> a Markdown summary of the traced step (fits in a terminal, a PR or an issue)."""

from __future__ import annotations

from typing import Any

from turnrl.inspector.page import fmt
from turnrl.inspector.view import RowView, StageView, Tok

SAMPLES_IN_MARKDOWN = 2
VALUES_IN_MARKDOWN = 16


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def response_text(toks: list[Tok]) -> str:
    """The response as text, observations fenced and turns numbered, padding left out."""
    out, kind = [], ""
    multi = any(t.kind == "obs" for t in toks)
    for t in toks:
        if t.kind == "pad":
            continue
        if t.kind != kind:
            if kind == "obs":
                out.append(" »")
            if t.kind == "obs":
                out.append("« observation: ")
            elif multi and t.turn_start:
                out.append(f"[turn {t.turn}] ")
            kind = t.kind
        out.append(t.text)
    if kind == "obs":
        out.append(" »")
    return "".join(out)


def _fence(text: str) -> list[str]:
    fence = "````" if "```" in text else "```"
    return [f"{fence}text", text, fence]


def sample_md(view: StageView, row: RowView) -> list[str]:
    lines = [f"Sample {row.row}" + (f" (uid {row.info['uid']})" if "uid" in row.info else "") + ":"]
    fresh = {f.name for f in view.fields if f.status != "same"}
    keys = [k for k in row.info if k in fresh and k not in ("uid", "raw_prompt", "extra_info")]
    if keys:
        lines.append("; ".join(f"{k} = `{_cell(row.info[k])}`" for k in keys))
    if row.response:
        lines.extend(_fence(response_text(row.response)))
        if view.focus:
            vals = [fmt(t.values[view.focus]) for t in row.response if t.kind == "model"]
            more = " …" if len(vals) > VALUES_IN_MARKDOWN else ""
            lines.append(f"`{view.focus}` on model tokens: {', '.join(vals[:VALUES_IN_MARKDOWN])}{more}")
    elif row.prompt:
        lines.extend(_fence("".join(t.text for t in row.prompt if t.kind != "pad")))
    lines.append("")
    return lines


def stage_md(view: StageView) -> list[str]:
    doc = view.doc
    lines = [f"## {view.number}. {doc.title} (`{view.name}`)", "", doc.why, ""]
    if view.name == "metrics":
        lines += ["| metric | value |", "|---|---|"]
        for k, v in view.metrics.items():
            lines.append(f"| `{k}` | {fmt(v) if isinstance(v, float | int) else _cell(str(v))} |")
        return [*lines, ""]
    lines.append(f"Input: {doc.inputs}. Time: {view.elapsed_s * 1000:.1f} ms. Rows: {view.size}.")
    lines += ["", "| field | kind | shape | dtype | vs previous stage |", "|---|---|---|---|---|"]
    for f in view.fields:
        lines.append(f"| `{f.name}` | {f.kind} | {f.shape} | {f.dtype} | {f.status} |")
    if view.dropped:
        lines += ["", "Not in this stage's output: " + ", ".join(f"`{d}`" for d in view.dropped) + "."]
    lines.append("")
    for row in view.rows[:SAMPLES_IN_MARKDOWN]:
        lines.extend(sample_md(view, row))
    return lines


def render_markdown(views: list[StageView], header: dict[str, Any]) -> str:
    lines = [f"# turnrl trace · step {header.get('step', '?')}", "", f"`{header.get('command', '')}`", ""]
    summary = header.get("summary", {})
    if summary:
        lines += ["| setting | value |", "|---|---|"]
        lines += [f"| {k} | {_cell(str(v))} |" for k, v in summary.items()]
        lines.append("")
    lines += ["| # | stage | time (ms) | rows | new fields |", "|---|---|---|---|---|"]
    for v in views:
        new = ", ".join(f"`{f.name}`" for f in v.fields if f.status == "new")
        ms = f"{v.elapsed_s * 1000:.1f}" + (" (whole step)" if v.name == "metrics" else "")
        lines.append(f"| {v.number} | `{v.name}` | {ms} | {v.size or '-'} | {new} |")
    lines.append("")
    for v in views:
        lines.extend(stage_md(v))
    return "\n".join(lines).rstrip() + "\n"
