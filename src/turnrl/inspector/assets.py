"""The trace page's inline style sheet and script: the page loads nothing from anywhere."""

CSS = """
:root { --fg:#1f2328; --muted:#656d76; --line:#d0d7de; --bg:#ffffff; --panel:#f6f8fa;
  --prompt:#eef2f7; --model:#fff7d6; --obs:#dbeafe; --pad:#eceff1; --accent:#0969da; --clip:#f97316; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
  background: var(--bg); }
header { padding: 20px 32px 12px; border-bottom: 1px solid var(--line); background: var(--panel); }
h1 { margin: 0 0 4px; font-size: 22px; }
h2 { margin: 0 0 6px; font-size: 18px; }
h2 .num { display: inline-block; min-width: 28px; padding: 0 6px; margin-right: 8px; border-radius: 6px;
  background: var(--accent); color: #fff; text-align: center; }
h2 code { font-size: 15px; color: var(--muted); }
main { padding: 8px 32px 48px; max-width: 1400px; }
section.stage { margin: 24px 0; padding: 16px 20px; border: 1px solid var(--line); border-radius: 10px; }
p.why { margin: 4px 0 8px; max-width: 980px; }
p.meta, .note { color: var(--muted); margin: 4px 0; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
pre.cmd { background: #fff; border: 1px solid var(--line); padding: 6px 10px; border-radius: 6px;
  overflow-x: auto; margin: 6px 0; }
dl.summary { display: grid; grid-template-columns: max-content 1fr max-content 1fr; gap: 2px 16px;
  margin: 8px 0; }
dl.summary dt { color: var(--muted); } dl.summary dd { margin: 0; }
.timeline { display: flex; height: 26px; margin: 10px 0 4px; border-radius: 6px; overflow: hidden;
  border: 1px solid var(--line); }
.timeline a { display: block; min-width: 3px; color: #fff; font-size: 11px; line-height: 26px;
  padding: 0 4px; white-space: nowrap; overflow: hidden; text-decoration: none; }
nav.stages { display: flex; flex-wrap: wrap; gap: 6px; margin: 6px 0; }
nav.stages a { padding: 2px 8px; border: 1px solid var(--line); border-radius: 12px; background: #fff;
  color: var(--accent); text-decoration: none; font-size: 13px; }
.legend { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin-top: 8px; font-size: 13px; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border: 1px solid var(--line); padding: 2px 8px; text-align: left; vertical-align: top; }
th { background: var(--panel); font-weight: 600; }
table.fields td:nth-child(3), table.fields td:nth-child(4) { font-family: ui-monospace, monospace; }
.st { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px; }
.st.new { background: #dafbe1; color: #116329; } .st.changed { background: #fff1c2; color: #7a4d00; }
.st.same { background: var(--panel); color: var(--muted); }
.sample { margin: 12px 0; padding: 8px 12px; border-left: 3px solid var(--line); background: #fcfcfd; }
.rowhead { font-weight: 600; }
.info { color: var(--muted); font-size: 12.5px; word-break: break-word; }
.info b { color: var(--fg); font-weight: 500; }
.toks { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px;
  line-height: 1.9; white-space: pre-wrap; word-break: break-all; margin: 4px 0; }
.t { border-radius: 3px; padding: 1px 0; margin: 0 1px 0 0; box-shadow: inset 0 0 0 1px rgba(0,0,0,.13);
  cursor: default; }
.t.prompt { background: var(--prompt); }
.t.model { background: var(--model); }
.t.obs { background: var(--obs); font-style: italic; color: #1e3a8a; }
.t.pad { background: var(--pad); color: #8c959f; font-size: 11px; padding: 1px 3px; }
.t.mark { outline: 2px solid var(--clip); outline-offset: -1px; }
.t:hover { outline: 2px solid var(--accent); }
.turn { display: inline-block; font: 600 10.5px/1.3 system-ui, sans-serif; color: #fff; background: #6e40c9;
  border-radius: 3px; padding: 0 4px; margin: 0 3px; vertical-align: 2px; }
.sw { display: inline-block; width: 14px; height: 14px; border-radius: 3px; vertical-align: -2px;
  margin-right: 4px; box-shadow: inset 0 0 0 1px rgba(0,0,0,.15); }
details { margin: 4px 0; }
details > summary { cursor: pointer; color: var(--accent); }
.scroll { overflow-x: auto; max-width: 100%; }
table.pt td, table.pt th { padding: 1px 5px; font-family: ui-monospace, monospace; font-size: 12px;
  white-space: nowrap; text-align: right; }
table.pt th:first-child { text-align: left; position: sticky; left: 0; }
table.pt tr.tokrow td { text-align: center; background: var(--panel); }
table.groups td { font-family: ui-monospace, monospace; font-size: 12.5px; }
table.metrics td:nth-child(2) { font-family: ui-monospace, monospace; text-align: right; }
.metric-groups { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
#tip { position: fixed; left: 0; right: 0; bottom: 0; padding: 6px 32px; background: #1f2328; color: #fff;
  font: 12.5px/1.4 ui-monospace, monospace; white-space: pre-wrap; display: none; z-index: 10; }
.tools { float: right; }
.tools button { font-size: 12px; margin-left: 6px; }
"""

# hover shows the token's full details in a bar at the bottom (instant, unlike native tooltips);
# the title attribute stays as the fallback when scripts are off
JS = """
(function () {
  var tip = document.getElementById('tip');
  document.addEventListener('mouseover', function (e) {
    var t = e.target.closest ? e.target.closest('[title]') : null;
    if (t && t.classList.contains('t')) { tip.textContent = t.getAttribute('title'); tip.style.display = 'block'; }
  });
  document.addEventListener('mouseout', function (e) {
    if (e.target.classList && e.target.classList.contains('t')) { tip.style.display = 'none'; }
  });
  function setAll(open) {
    document.querySelectorAll('details').forEach(function (d) { d.open = open; });
  }
  document.getElementById('expand').addEventListener('click', function () { setAll(true); });
  document.getElementById('collapse').addEventListener('click', function () { setAll(false); });
  document.body.setAttribute('data-ready', '1');  // lets a headless test see the script ran through
})();
"""
