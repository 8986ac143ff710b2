"""Stage views -> one self-contained HTML page (inline style and script, no network)."""

from __future__ import annotations

import math
import re
from html import escape
from typing import Any

from turnrl.inspector.assets import CSS, JS
from turnrl.inspector.view import RowView, StageView, Tok

PALETTE = ("#0969da", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#cf222e", "#0a3069", "#57606a")
KIND_LABEL = {
    "prompt": "prompt token",
    "model": "model token (response_mask 1)",
    "obs": "observation token (response_mask 0, attention 1)",
    "pad": "padding (attention 0)",
}
# fields where a stage's scalar per sequence sits on one token: the rest of the row is 0
SPARSE_FIELDS = ("token_level_scores",)


def fmt(v: float) -> str:
    if float(v).is_integer() and abs(v) < 1e9:
        return str(int(v))
    return f"{v:.4g}"


def shown_text(text: str) -> str:
    # make invisible characters visible without losing the line structure of the text
    return text.replace("\t", "⇥").replace("\r", "").replace("\n", "↵\n") if text else "∅"


def inline_code(text: str) -> str:
    """Escape, then show `name` spans as code (the stage texts mark field names that way)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text))


# -- colour ------------------------------------------------------------------------------------------
def heat(name: str, v: float, lo: float, hi: float) -> str:
    """Background colour of a token for the stage's focus field ('' when it carries no information)."""
    if not math.isfinite(v):
        return "background:#fecaca"
    if "ratio" in name:  # around 1, on a log scale: ratio 2 and 0.5 are equally far
        span = max(abs(math.log(max(lo, 1e-9))), abs(math.log(max(hi, 1e-9))))
        x = math.log(max(v, 1e-9)) / span if span > 1e-7 else 0.0
    elif "log_prob" in name:  # 0 = certain; the less likely, the darker
        x = v / lo if lo < 0 else 0.0
        return f"background:rgba(130,80,223,{0.08 + 0.62 * max(0.0, min(1.0, x)):.2f})"
    else:
        span = max(abs(lo), abs(hi))
        x = v / span if span > 0 else 0.0
    if abs(x) < 1e-9:
        return ""
    rgb = "26,127,55" if x > 0 else "207,34,46"
    return f"background:rgba({rgb},{0.12 + 0.6 * min(1.0, abs(x)):.2f})"


# -- tokens ------------------------------------------------------------------------------------------
def tok_title(col: int, tok: Tok) -> str:
    head = f"#{col} {tok.text!r} id={tok.id} · {KIND_LABEL[tok.kind]}"
    if tok.turn:
        head += f" · turn {tok.turn}"
    vals = "  ".join(f"{k}={fmt(v)}" for k, v in tok.values.items())
    return f"{head}\n{vals}" if vals else head


def tokens_html(toks: list[Tok], view: StageView, turns: bool, last_model: int = -1) -> str:
    out: list[str] = []
    i = 0
    lo, hi = view.focus_range
    while i < len(toks):
        tok = toks[i]
        if tok.kind == "pad":
            j = i
            while j < len(toks) and toks[j].kind == "pad":
                j += 1
            title = f"#{i}..#{j - 1}: {j - i} padding token(s), id={tok.id} {tok.text!r} (attention 0)"
            out.append(f'<span class="t pad" title="{escape(title)}">pad×{j - i}</span>')
            i = j
            continue
        if turns and tok.turn_start:
            out.append(f'<span class="turn">turn {tok.turn}</span>')
        classes = ["t", tok.kind]
        if tok.marked:
            classes.append("mark")
        style = ""
        if view.focus and tok.kind == "model" and view.focus in tok.values:
            style = heat(view.focus, tok.values[view.focus], lo, hi)
        if i == last_model:
            style += ";box-shadow:inset 0 -3px 0 #1a7f37"
        attr = f' style="{style}"' if style else ""
        out.append(
            f'<span class="{" ".join(classes)}"{attr} title="{escape(tok_title(i, tok))}">'
            f"{escape(shown_text(tok.text))}</span>"
        )
        i += 1
    return "".join(out)


def token_table(toks: list[Tok], view: StageView, label: str) -> str:
    """Every per-token field of a row as a table: one column per position."""
    keep = len(toks)
    while keep > 1 and toks[keep - 1].kind == "pad" and toks[keep - 2].kind == "pad":
        keep -= 1  # trailing padding adds nothing but width; one pad column is left to show it
    toks = toks[:keep]
    if not toks:
        return ""
    # rows: what this stage adds or changes, with the masks for context (hover shows the rest)
    fresh = {f.name for f in view.fields if f.status != "same"} | {"response_mask", "attention_mask"}
    fields = [f for f in toks[0].values if f in fresh]
    head = "".join(f"<th>{c}</th>" for c in range(len(toks)))
    text = "".join(f"<td>{escape(shown_text(t.text).replace(chr(10), ''))}</td>" for t in toks)
    ids = "".join(f"<td>{t.id}</td>" for t in toks)
    kinds = "".join(f'<td class="t {t.kind}">{t.kind}</td>' for t in toks)
    rows = [
        f"<tr><th>position</th>{head}</tr>",
        f'<tr class="tokrow"><th>token</th>{text}</tr>',
        f"<tr><th>id</th>{ids}</tr>",
        f"<tr><th>kind</th>{kinds}</tr>",
    ]
    lo, hi = view.focus_range
    for f in fields:
        cells = []
        for t in toks:
            v = t.values.get(f, float("nan"))
            style = heat(f, v, lo, hi) if f == view.focus and t.kind == "model" else ""
            cells.append(f'<td style="{style}">{fmt(v)}</td>' if style else f"<td>{fmt(v)}</td>")
        rows.append(f"<tr><th>{escape(f)}</th>{''.join(cells)}</tr>")
    body = "\n".join(rows)
    return (
        f"<details><summary>{escape(label)}</summary>"
        f'<div class="scroll"><table class="pt">{body}</table></div></details>'
    )


def sample_html(view: StageView, row: RowView) -> str:
    fresh = {f.name for f in view.fields if f.status != "same"}
    # a field is shown where it appears or changes, not again in every later stage
    info = {k: v for k, v in row.info.items() if k in fresh}
    uid = row.info.get("uid")
    info.pop("uid", None)
    head = f"sample {row.row}" + (f" · uid {escape(uid)}" if uid is not None else "")
    model = [c for c, t in enumerate(row.response) if t.kind == "model"]
    if row.response:
        obs = sum(t.kind == "obs" for t in row.response)
        head += f" · {len(model)} model tokens"
        head += f" · {obs} observation tokens · {row.turns} turns" if obs else ""
    last = model[-1] if model and view.focus in SPARSE_FIELDS else -1
    if last >= 0:
        score = row.response[last].values.get(view.focus or "", 0.0)
        head += f" · score {fmt(score)} on token #{last}"
    info_html = " · ".join(
        f'<span title="{escape(v)}"><b>{escape(k)}</b>: {escape(v)}</span>' for k, v in info.items()
    )
    parts = [f'<div class="sample"><div class="rowhead">{head}</div>']
    if info_html:
        parts.append(f'<div class="info">{info_html}</div>')
    if row.response:
        if row.prompt and fresh & {"prompts", "input_ids", "attention_mask", "position_ids"}:
            n_pad = sum(t.kind == "pad" for t in row.prompt)
            parts.append(
                f"<details><summary>prompt: {len(row.prompt) - n_pad} tokens + {n_pad} padding</summary>"
                f'<div class="toks">{tokens_html(row.prompt, view, False)}</div></details>'
            )
        multi = row.turns > 1 or any(t.kind == "obs" for t in row.response)
        parts.append(f'<div class="toks">{tokens_html(row.response, view, multi, last)}</div>')
        parts.append(token_table(row.response, view, "per-token values of the response"))
    else:
        parts.append(f'<div class="toks">{tokens_html(row.prompt, view, False)}</div>')
        parts.append(token_table(row.prompt, view, "per-token values of the prompt"))
    parts.append("</div>")
    return "\n".join(parts)


# -- stage parts -------------------------------------------------------------------------------------
def fields_html(view: StageView) -> str:
    fresh = [f for f in view.fields if f.status != "same"]
    same = [f for f in view.fields if f.status == "same"]
    out = ""
    if fresh:
        rows = "".join(
            f"<tr><td><code>{escape(f.name)}</code></td><td>{f.kind}</td><td>{escape(f.shape)}</td>"
            f'<td>{escape(f.dtype)}</td><td><span class="st {f.status}">{f.status}</span></td></tr>'
            for f in fresh
        )
        out += (
            "<table class=fields><tr><th>output field</th><th>kind</th><th>shape</th><th>dtype</th>"
            f"<th>vs previous stage</th></tr>{rows}</table>"
        )
    if same:
        names = ", ".join(
            f'<code title="{escape(f.kind)} {escape(f.shape)} {escape(f.dtype)}">{escape(f.name)}</code>'
            f" {escape(f.shape)}"
            for f in same
        )
        out += f'<p class="note">Passed on unchanged: {names}.</p>'
    if view.dropped:
        names = ", ".join(f"<code>{escape(d)}</code>" for d in view.dropped)
        out += f'<p class="note">Not in this stage\'s output: {names}.</p>'
    return out


GROUP_TRIGGERS = ("token_level_scores", "token_level_rewards", "advantages", "returns")


def groups_html(view: StageView) -> str:
    new = {f.name for f in view.fields if f.status in ("new", "changed")}
    if not view.groups or not (view.name.startswith("group") or new & set(GROUP_TRIGGERS)):
        return ""
    cols = list(view.groups[0].cells)
    with_summary = any(g.summary for g in view.groups)
    head = "".join(
        f"<th>{escape(c)}</th>" for c in ["uid", "row", *cols, *(["group"] if with_summary else [])]
    )
    body = []
    for g in view.groups:
        for k, r in enumerate(g.rows):
            cells = "".join(f"<td>{escape(g.cells[c][k])}</td>" for c in cols)
            first = f'<td rowspan="{len(g.rows)}">{escape(g.uid)}</td>' if k == 0 else ""
            summary = (
                f'<td rowspan="{len(g.rows)}">{escape(g.summary)}</td>' if k == 0 and with_summary else ""
            )
            body.append(f"<tr>{first}<td>{r}</td>{cells}{summary}</tr>")
    return (
        f"<p class=note>Samples grouped by <code>uid</code> ({len(view.groups)} groups):</p>"
        f'<table class="groups"><tr>{head}</tr>{"".join(body)}</table>'
    )


def metrics_html(metrics: dict[str, Any]) -> str:
    groups: dict[str, list[tuple[str, Any]]] = {}
    for k, v in metrics.items():
        groups.setdefault(k.split("/", 1)[0] if "/" in k else "other", []).append((k, v))
    tables = []
    for g, items in groups.items():
        rows = "".join(
            f"<tr><td><code>{escape(k)}</code></td><td>{escape(fmt(v) if isinstance(v, float | int) else str(v))}</td></tr>"
            for k, v in items
        )
        tables.append(f'<table class="metrics"><tr><th>{escape(g)}</th><th>value</th></tr>{rows}</table>')
    return f'<div class="metric-groups">{"".join(tables)}</div>'


def focus_note(view: StageView) -> str:
    if not view.focus:
        return ""
    lo, hi = view.focus_range
    return (
        f'<p class="note">Model tokens are coloured by <code>{escape(view.focus)}</code> '
        f"(range {fmt(lo)} … {fmt(hi)} over the samples shown). Hover a token for every value.</p>"
    )


def stage_html(view: StageView) -> str:
    doc = view.doc
    parts = [
        f'<section class="stage" id="stage-{escape(view.name)}">',
        f'<h2><span class="num">{view.number}</span>{escape(doc.title)} <code>{escape(view.name)}</code></h2>',
        f'<p class="why">{inline_code(doc.why)}</p>',
    ]
    if view.name == "metrics":
        parts.append(f'<p class="meta">Step time {view.elapsed_s:.3f} s.</p>')
        parts.append(metrics_html(view.metrics))
        parts.append("</section>")
        return "\n".join(parts)
    parts.append(
        f'<p class="meta">Input: {escape(doc.inputs)}. Time {view.elapsed_s * 1000:.1f} ms. '
        f"Rows: {view.size}.</p>"
    )
    parts.append(fields_html(view))
    parts.append(groups_html(view))
    parts.append(focus_note(view))
    parts.extend(sample_html(view, row) for row in view.rows)
    if view.hidden_rows:
        parts.append(f'<p class="note">{view.hidden_rows} more rows not shown (raise --samples).</p>')
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


# -- page --------------------------------------------------------------------------------------------
def stage_times(views: list[StageView]) -> list[tuple[str, float]]:
    """The step's own stage timings (`timing_s/*`, the update included); recorded times otherwise."""
    metrics = next((v.metrics for v in views if v.name == "metrics"), {})
    timed = [
        (k.split("/", 1)[1], float(v))
        for k, v in metrics.items()
        if k.startswith("timing_s/") and k != "timing_s/step" and isinstance(v, int | float)
    ]
    return timed or [(v.name, v.elapsed_s) for v in views if v.name != "metrics"]


def header_html(views: list[StageView], header: dict[str, Any]) -> str:
    times = stage_times(views)
    total = sum(t for _, t in times) or 1.0
    present = {v.name for v in views}
    bars = "".join(
        f'<a href="#stage-{escape(name) if name in present else ""}" style="flex:{max(t / total, 0.004):.4f};'
        f'background:{PALETTE[i % len(PALETTE)]}" title="{escape(name)}: {t * 1000:.1f} ms">'
        f"{escape(name)}</a>"
        for i, (name, t) in enumerate(times)
    )
    nav = "".join(f'<a href="#stage-{escape(v.name)}">{v.number}. {escape(v.name)}</a>' for v in views)
    summary = "".join(
        f"<dt>{escape(k)}</dt><dd>{escape(str(v))}</dd>" for k, v in header.get("summary", {}).items()
    )
    legend = (
        '<span><span class="sw" style="background:var(--prompt)"></span>prompt</span>'
        '<span><span class="sw" style="background:var(--model)"></span>model token</span>'
        '<span><span class="sw" style="background:var(--obs)"></span>observation (response_mask 0)</span>'
        '<span><span class="sw" style="background:var(--pad)"></span>padding</span>'
        '<span><span class="turn">turn 2</span>turn start</span>'
        '<span><span class="sw" style="outline:2px solid var(--clip)"></span>clipped / outside clip range</span>'
        '<span><span class="sw" style="box-shadow:inset 0 -3px 0 #1a7f37"></span>score token</span>'
    )
    return (
        '<header><span class="tools"><button id="expand">expand all</button>'
        '<button id="collapse">collapse all</button></span>'
        f"<h1>turnrl trace · step {header.get('step', '?')}</h1>"
        f'<pre class="cmd">{escape(header.get("command", ""))}</pre>'
        f'<dl class="summary">{summary}</dl>'
        f'<div class="timeline">{bars}</div>'
        f'<p class="note">Stage times of this step ({total:.2f} s in all; loading the model and data '
        f"took {header.get('setup_s', 0.0):.1f} s). Hover a bar for its time; click a name to jump.</p>"
        f'<nav class="stages">{nav}</nav><div class="legend">{legend}</div></header>'
    )


def render_html(views: list[StageView], header: dict[str, Any]) -> str:
    body = "\n".join(stage_html(v) for v in views)
    config = header.get("config", "")
    cfg_html = (
        f'<details><summary>resolved config</summary><pre class="cmd">{escape(config)}</pre></details>'
        if config
        else ""
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>turnrl trace · step {header.get('step', '?')}</title><style>{CSS}</style></head>\n<body>\n"
        f"{header_html(views, header)}\n<main>\n{body}\n{cfg_html}\n</main>\n"
        f'<div id="tip"></div><script>{JS}</script>\n</body></html>\n'
    )
