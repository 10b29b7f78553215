"""A self-contained HTML report of a stored run: verdicts, measured beside predicted, and a
latency-versus-throughput plot drawn as inline SVG (no plotting library needed)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from orchestrator.selection import Selection
from orchestrator.store.db import PointRow

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
W, H, PAD = 640, 360, 50


def _num(v: Any, nd: int = 1) -> str:
    return "-" if not isinstance(v, int | float) else f"{v:,.{nd}f}"


def _plot(points: dict[str, list[PointRow]]) -> str:
    series: list[tuple[str, list[tuple[float, float]]]] = []
    for layout, rows in points.items():
        xy: list[tuple[float, float]] = []
        for r in rows:
            x = (r.metrics.get("per_gpu") or {}).get("output_throughput")
            y = (r.metrics.get("ttft_ms") or {}).get("p99")
            if isinstance(x, int | float) and isinstance(y, int | float):
                xy.append((float(x), float(y)))
        if xy:
            series.append((layout, sorted(xy)))
    if not series:
        return "<p>no measured points to plot</p>"
    xmax = max(x for _, s in series for x, _ in s) * 1.1 or 1.0
    ymax = max(y for _, s in series for _, y in s) * 1.1 or 1.0

    def sx(x: float) -> float:
        return PAD + x / xmax * (W - 2 * PAD)

    def sy(y: float) -> float:
        return H - PAD - y / ymax * (H - 2 * PAD)

    parts = [
        f'<svg width="{W}" height="{H}" xmlns="http://www.w3.org/2000/svg" font-size="11">',
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="black"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="black"/>',
        f'<text x="{W / 2}" y="{H - 12}" text-anchor="middle">output tokens/s per GPU</text>',
        f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})" '
        'text-anchor="middle">TTFT p99 (ms)</text>',
        f'<text x="{PAD}" y="{H - PAD + 14}">0</text>',
        f'<text x="{W - PAD}" y="{H - PAD + 14}" text-anchor="end">{xmax:,.0f}</text>',
        f'<text x="{PAD - 4}" y="{PAD}" text-anchor="end">{ymax:,.0f}</text>',
    ]
    for i, (layout, xy) in enumerate(series):
        colour = _COLOURS[i % len(_COLOURS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in xy)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>' for x, y in xy]
        parts.append(
            f'<text x="{W - PAD + 4}" y="{PAD + 14 * i}" fill="{colour}">{html.escape(layout)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def render_html(
    run: dict[str, Any],
    selection: Selection,
    points: dict[str, list[PointRow]],
    layouts: Mapping[str, tuple[str, str | None]],
) -> str:
    esc = html.escape
    rows = []
    for layout, pts in points.items():
        status, reason = layouts.get(layout, ("?", None))
        if not pts:
            rows.append(
                f"<tr><td>{esc(layout)}</td><td>{esc(status)}</td><td colspan=8>{esc(reason or '')}</td></tr>"
            )
        for p in pts:
            m, pred = p.metrics, p.metrics.get("predicted") or {}
            verdict = "pass" if p.passed else f"fail: {p.verdict}"
            rows.append(
                "<tr>"
                + "".join(
                    f"<td>{esc(str(c))}</td>"
                    for c in (
                        layout,
                        status,
                        p.label,
                        _num((m.get("ttft_ms") or {}).get("p99")),
                        _num(pred.get("ttft_p99_ms")),
                        _num((m.get("tpot_ms") or {}).get("p50"), 2),
                        _num(pred.get("tpot_p50_ms"), 2),
                        _num((m.get("per_gpu") or {}).get("output_throughput")),
                        _num(pred.get("output_tokens_per_s_per_gpu")),
                        verdict,
                    )
                )
                + "</tr>"
            )
    verdicts = "".join(f"<li><b>{esc(v.layout)}</b>: {esc(v.reason)}</li>" for v in selection.verdicts)
    meta = "".join(f"<li>{esc(str(k))}: {esc(str(v))}</li>" for k, v in (run.get("metadata") or {}).items())
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>orch run {esc(run["run_id"])}</title>
<style>body{{font-family:sans-serif;margin:2em}} td,th{{padding:2px 8px;border-bottom:1px solid #ddd}}
th{{text-align:left}}</style></head><body>
<h1>orch run {esc(run["run_id"])}</h1>
<p>engine {esc(str(run.get("engine")))} {esc(str(run.get("engine_version") or ""))},
model {esc(str(run.get("model")))},
spec hash {esc(str(run.get("spec_hash")))}, orch {esc(str(run.get("orch_version")))}</p>
<h2>Winner: {esc(selection.winner or "none: no layout meets the SLO")}</h2><ul>{verdicts}</ul>
<h2>Measured beside predicted</h2>
<table><tr><th>layout</th><th>status</th><th>load point</th><th>TTFT p99 ms</th><th>predicted</th>
<th>TPOT p50 ms</th><th>predicted</th><th>out tok/s/GPU</th><th>predicted</th><th>SLO</th></tr>
{"".join(rows)}</table>
<h2>Latency versus throughput</h2>{_plot(points)}
<h2>Eval metadata</h2><ul>{meta}</ul></body></html>
"""
