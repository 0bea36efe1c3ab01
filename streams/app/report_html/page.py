"""The demo report as one self-contained HTML file: a summary table and the figures of
:mod:`.plots` as inline base64 PNGs (no network, no side files: it can be mailed or archived).

A small inline script writes, once the page has loaded, each figure's natural and laid-out size
and its share of drawn (non-white, opaque) pixels into ``data-*`` attributes, so a headless
browser's DOM dump shows whether every plot really rendered (see :mod:`.browser`); the page
reads the same without JavaScript.
"""

from __future__ import annotations

import base64
import html
import io
import time
from pathlib import Path
from typing import Any

Summary = dict[str, Any]

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
.meta { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 1em 0 2em; }
td, th { border-bottom: 1px solid #ddd; padding: 3px 12px; text-align: right; }
td:first-child, th:first-child { text-align: left; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 1.2em; }
figure { margin: 0; border: 1px solid #e3e3e3; border-radius: 6px; padding: 8px; }
figure img { width: 100%; height: auto; display: block; }
figcaption { color: #444; font-size: 0.92em; margin-top: 4px; }
"""

#: records each figure's decoded (natural) and laid-out size for headless checks
SIZE_PROBE = """
function inkShare(img) {
  var canvas = document.createElement("canvas");
  canvas.width = img.naturalWidth;
  canvas.height = img.naturalHeight;
  if (!canvas.width || !canvas.height) { return 0; }
  var ctx = canvas.getContext("2d");
  ctx.drawImage(img, 0, 0);
  var px = ctx.getImageData(0, 0, canvas.width, canvas.height).data, ink = 0;
  for (var i = 0; i < px.length; i += 4) {
    if (px[i + 3] > 0 && (px[i] < 235 || px[i + 1] < 235 || px[i + 2] < 235)) { ink++; }
  }
  return ink / (px.length / 4);
}
window.addEventListener("load", function () {
  document.querySelectorAll("figure img").forEach(function (img) {
    var box = img.getBoundingClientRect();
    img.dataset.natural = img.naturalWidth + "x" + img.naturalHeight;
    img.dataset.rendered = Math.round(box.width) + "x" + Math.round(box.height);
    try { img.dataset.ink = inkShare(img).toFixed(4); }
    catch (e) { img.dataset.ink = "error " + e.name; }
  });
  document.body.dataset.probed = "yes";
});
"""


def png_data_uri(fig: Any, dpi: int = 100) -> str:
    """``fig`` as a ``data:image/png;base64,...`` URI (the figure is closed afterwards)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _rows(summary: Summary) -> list[tuple[str, ...]]:
    """(metric, live, offline lockstep, offline at the live latency) rows of the summary table."""
    from streams.app.report_html.plots import CUMULATIVE

    offs = [summary.get("offline") or {}, summary.get("offline_at_latency") or {}]
    rows: list[tuple[str, ...]] = [
        (
            f"coverage {label}",
            _fmt(summary["cumulative"].get(key)),  # older summaries lack "with_state"
            *(_fmt((o.get("cumulative") or {}).get(key)) for o in offs),
        )
        for key, label in CUMULATIVE
    ]
    for key, label, spec in (
        ("fm_pairs_per_request", "FM pairs per request", ".2f"),
        ("speculation_precision", "speculation precision", ".3f"),
    ):
        rows.append((label, format(summary[key], spec), *(_fmt(o.get(key), spec) for o in offs)))
    ms = summary.get("read_ms") or {}
    behind = summary.get("pipeline_behind_s") or {}
    rows += [
        ("read latency p50 / p99 (ms)", f"{ms.get('p50', 0):.2f} / {ms.get('p99', 0):.2f}"),
        ("max consumer lag (messages)", f"{summary.get('max_consumer_lag', 0):,}"),
        ("FM behind the replay, p50 (event-time s)", _fmt(behind.get("p50"), ",.0f")),
        ("dead letters", str(sum((summary.get("dead_letters") or {}).values()))),
    ]
    return rows


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "" if value is None else format(value, spec)


def _header(summary: Summary) -> str:
    replay = summary.get("replay") or {}
    parts = [
        f"{summary.get('requests', 0):,} requests ranked",
        f"replay: {summary.get('mode', '?')}",
        f"{replay.get('messages', 0):,} messages in {replay.get('seconds', 0):.0f} s",
    ]
    if "wall_seconds" in summary:
        parts.append(f"demo wall time {summary['wall_seconds']:.0f} s")
    if "traffic" in summary:
        parts.append(f"traffic {Path(summary['traffic']).name}")
    return " · ".join(html.escape(p) for p in parts)


def render(summary: Summary) -> str:
    """The report's HTML for a demo summary (pure: no I/O but matplotlib's drawing)."""
    from streams.app.report_html.plots import FIGURES

    table = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in (*row, "", "", "")[:4]) + "</tr>"
        for row in _rows(summary)
    )
    figures = "".join(
        f'<figure id="{anchor}"><img alt="{html.escape(caption)}" src="{png_data_uri(draw(summary))}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for anchor, caption, draw in FIGURES
    )
    generated = time.strftime("%Y-%m-%d %H:%M:%S")
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>SOLARIS demo report</title><style>{STYLE}</style></head><body>"
        f"<h1>SOLARIS demo report</h1><p class=meta>{_header(summary)} · generated {generated}</p>"
        "<table><tr><th>metric</th><th>live</th><th>offline, lockstep</th>"
        "<th>offline at the live latency</th></tr>"
        f'{table}</table><div class="grid">{figures}</div>'
        f"<script>{SIZE_PROBE}</script></body></html>"
    )


def write_report(summary: Summary, path: Path) -> Path:
    """Render ``summary`` to ``path`` (parents created); returns the absolute path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(summary), encoding="utf-8")
    return path.resolve()
