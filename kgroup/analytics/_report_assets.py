"""The report's stylesheet and script, inlined into every page (no network, no CDN).

Both are constants: nothing from the data ever goes into them. The page's
Content-Security-Policy (built by :func:`csp`) allows exactly these two blocks by their
SHA-256 hashes and nothing else: no other script, no inline event handler, no style
attribute, no request to any server. So even a string that slipped past escaping could not
run code or fetch anything, and the browser test's "no console errors" also checks that
the hashes match.
"""

from __future__ import annotations

import base64
import hashlib

__all__ = ["CSS", "JS", "csp"]

CSS = """
:root { --fg:#1d2430; --muted:#5b6575; --line:#d6dbe3; --bg:#ffffff; --panel:#f5f7fa;
  --bad:#b3261e; --bad-bg:#fdecea; --ok:#1e6b35; --ok-bg:#e8f5ec; --accent:#2f5fa7; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--fg); background: var(--bg); }
header { padding: 18px 28px 8px; border-bottom: 1px solid var(--line); }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 0; color: var(--muted); }
nav { position: sticky; top: 0; z-index: 2; background: var(--bg); padding: 6px 28px;
  border-bottom: 1px solid var(--line); }
nav a { margin-right: 16px; color: var(--accent); text-decoration: none; }
main { padding: 8px 28px 40px; max-width: 1280px; }
section { margin-top: 22px; }
h2 { font-size: 18px; border-bottom: 2px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 10px 3px 0; text-align: left;
  vertical-align: top; }
th { color: var(--muted); font-weight: 600; }
td { overflow-wrap: break-word; max-width: 420px; }
.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv th { padding-right: 18px; }
table.overlaps td:nth-child(-n+2), table.overlaps td:nth-child(4),
table.overlaps td:nth-child(n+6) { white-space: nowrap; }
.verdict { padding: 10px 14px; border-radius: 6px; font-weight: 600; margin: 8px 0; }
.verdict.bad { background: var(--bad-bg); color: var(--bad); border: 1px solid var(--bad); }
.verdict.ok { background: var(--ok-bg); color: var(--ok); border: 1px solid var(--ok); }
.verdict.warn { background: #fff4e0; color: #7a4a00; border: 1px solid #c77800;
  font-weight: 400; }
.note, .cap { color: var(--muted); font-size: 13px; margin: 4px 0; }
.empty { color: var(--muted); font-style: italic; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px;
  background: var(--panel); border: 1px solid var(--line); margin-left: 6px;
  font-weight: 400; }
.badge.bad { background: var(--bad-bg); color: var(--bad); border-color: var(--bad); }
details.group { border: 1px solid var(--line); border-radius: 6px; margin: 8px 0;
  padding: 0 12px; }
details.group[open] { padding-bottom: 10px; }
details.group > summary { cursor: pointer; padding: 8px 0; font-weight: 600; }
.tools { margin: 8px 0; }
.tools input { padding: 4px 8px; width: 260px; }
.tools button { margin-left: 6px; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
.plots figure { margin: 0; flex: 1 1 420px; max-width: 560px; }
.plots figure.wide { flex-basis: 640px; max-width: 760px; }
figure figcaption { font-size: 13px; color: var(--muted); }
svg.plot { width: 100%; height: auto; display: block; background: var(--bg); }
svg.plot text { font-size: 10px; fill: var(--muted); }
svg.plot .lanel { text-anchor: end; fill: var(--fg); }
svg.plot .vall { text-anchor: end; }
svg.plot .vall.start { text-anchor: start; }
svg.plot .tickl, svg.plot .axisl { text-anchor: middle; }
svg.plot .genl { fill: var(--accent); }
.lane { fill: #fbfcfd; }
.lane.alt { fill: #f1f3f7; }
.rb { fill: #8a94a6; fill-opacity: 0.22; }
.rb.open { fill: #c77800; fill-opacity: 0.25; }
.gen { stroke: var(--accent); stroke-width: 0.8; stroke-dasharray: 3 2; }
.ov { fill: var(--bad); fill-opacity: 0.18; stroke: var(--bad); stroke-width: 1.6; }
.axis { stroke: #7d8796; stroke-width: 1; }
.tick { stroke: #7d8796; }
.grid { stroke: var(--line); stroke-width: 0.6; }
.hbar { fill: #4f7cc4; }
.vbar { fill: #c46a4f; }
.legend { font-size: 12px; color: var(--muted); margin: 2px 0 4px; }
.legend svg { width: 14px; height: 10px; margin: 0 4px 0 12px; vertical-align: -1px; }
@media print { nav, .tools { display: none; } details.group { break-inside: avoid; } }
"""

# Opens a group's <details> when the address names it (#group-3, from the overview's links),
# filters the groups by name, and expands or collapses them all. The page works without it.
JS = """
(function () {
  "use strict";
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id ? document.getElementById(id) : null;
    if (el && el.tagName === "DETAILS") { el.open = true; el.scrollIntoView(); }
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();
  var groups = Array.prototype.slice.call(document.querySelectorAll("details.group"));
  var filter = document.getElementById("group-filter");
  if (filter) {
    filter.addEventListener("input", function () {
      var want = filter.value.trim().toLowerCase();
      groups.forEach(function (d) {
        d.hidden = want !== "" && d.dataset.name.toLowerCase().indexOf(want) < 0;
      });
    });
  }
  function setAll(open) {
    groups.forEach(function (d) { if (!d.hidden) { d.open = open; } });
  }
  var expand = document.getElementById("expand-all");
  var collapse = document.getElementById("collapse-all");
  if (expand) { expand.addEventListener("click", function () { setAll(true); }); }
  if (collapse) { collapse.addEventListener("click", function () { setAll(false); }); }
})();
"""


def _sha256(source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def csp() -> str:
    """The page's Content-Security-Policy: only :data:`CSS` and :data:`JS`, by hash."""
    return (
        f"default-src 'none'; style-src {_sha256(CSS)}; script-src {_sha256(JS)}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
