"""The report's Plotly figures, one function each, from ReportData (no store access here).

Colour says which layout; the marker says the verdict: a filled circle passes the SLO, a cross fails
it, an open diamond was not judged (no SLO, or the simulated clock slipped). Trace names are what the
legend shows, and what tests/integration/test_report_browser.py reads back from the rendered page.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go  # type: ignore[import-untyped, unused-ignore]
from plotly.subplots import make_subplots  # type: ignore[import-untyped, unused-ignore]

from orchestrator.report.data import Judged, PointView, ReportData

PALETTE = ("#1f77b4", "#ff7f0e", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f")
SYMBOL: dict[Judged, str] = {"pass": "circle", "fail": "x", "unjudged": "diamond-open"}
MARKER_COLOUR: dict[Judged, str] = {"pass": "#2ca02c", "fail": "#d62728", "unjudged": "#555555"}
LEGEND_TEXT: dict[Judged, str] = {"pass": "passes the SLO", "fail": "fails the SLO", "unjudged": "not judged"}
LATENCY = (("ttft_ms", "TTFT"), ("itl_chunk_ms", "ITL"), ("tpot_ms", "TPOT"))
SLO_KEY = {"ttft_ms": "ttft", "itl_chunk_ms": "itl", "tpot_ms": "tpot"}
_LAYOUT = {"template": "plotly_white", "height": 420, "margin": {"t": 60, "b": 50}}


def colours(data: ReportData) -> dict[str, str]:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(data.layouts)}


def _by_layout(data: ReportData) -> Iterable[tuple[str, list[PointView]]]:
    for name in data.layouts:
        pts = [p for p in data.points if p.layout == name]
        if pts:
            yield name, pts


def _markers(pts: list[PointView], colour: str, size: int = 10) -> dict[str, Any]:
    return {
        "symbol": [SYMBOL[p.judged] for p in pts],
        "color": [MARKER_COLOUR[p.judged] for p in pts],
        "size": size,
        "line": {"color": colour, "width": 2},
    }


def _hover(p: PointView) -> str:
    verdict = {"pass": "passes", "fail": f"fails: {p.verdict}", "unjudged": f"not judged {p.verdict}"}
    return f"{p.layout} ({p.gpus} GPUs) at {p.label}<br>{verdict[p.judged]}"


def _status_legend(fig: go.Figure, row: int | None = None, col: int | None = None) -> None:
    """Legend entries explaining the marker shapes (no data)."""
    for j in ("pass", "fail", "unjudged"):
        trace = go.Scatter(
            x=[None], y=[None], mode="markers", name=LEGEND_TEXT[j], legendgroup="verdict",
            marker={"symbol": SYMBOL[j], "color": MARKER_COLOUR[j], "size": 10},
        )
        if row is None:
            fig.add_trace(trace)
        else:
            fig.add_trace(trace, row=row, col=col)


def pareto(data: ReportData) -> go.Figure:
    """Output tokens/s per GPU against tokens/s per user, per layout, with its frontier."""
    fig = go.Figure()
    col = colours(data)
    best: list[tuple[float, float]] = []
    for name, pts in _by_layout(data):
        xy = [(p.tokens_per_s_per_user, p.tokens_per_s_per_gpu, p) for p in pts]
        drawn = [(x, y, p) for x, y, p in xy if x is not None and y is not None]
        drawn.sort(key=lambda t: t[0])
        best += [(x, y) for x, y, p in drawn if p.judged == "pass"]
        fig.add_trace(
            go.Scatter(
                x=[x for x, _, _ in drawn], y=[y for _, y, _ in drawn], mode="lines+markers", name=name,
                line={"color": col[name]}, marker=_markers([p for _, _, p in drawn], col[name]),
                text=[_hover(p) for _, _, p in drawn], hoverinfo="text+x+y",
            )
        )
    frontier = _frontier(best)
    if frontier:
        fig.add_trace(
            go.Scatter(
                x=[x for x, _ in frontier], y=[y for _, y in frontier], mode="lines",
                name="Pareto frontier (passing points)", line={"color": "black", "dash": "dot"},
            )
        )
    per_token = ("itl_p99_ms", "tpot_p99_ms", "itl_p50_ms", "tpot_p50_ms")
    key = next((k for k in per_token if k in data.slo_ms), None)
    bound = data.slo_ms[key] if key else None
    if bound:
        # A line, not a shaded band: a point right of it can still fail the SLO (on TTFT, or on an ITL
        # tail its TPOT median does not show), and shading "what the SLO allows" over such points said
        # otherwise. The markers say which points pass.
        fig.add_vline(
            x=1e3 / bound, line_dash="dash", line_color="#2ca02c", line_width=1.5,
            annotation_text=f"{key} {bound:g} as a per-user speed (1000 / {bound:g})",
            annotation_position="top right",
        )
    _mark_winner(fig, data)
    _status_legend(fig)
    fig.update_layout(
        title="Throughput per GPU against speed per user (up and right is better)",
        xaxis_title="output tokens/s per user (1000 / TPOT p50)",
        yaxis_title="output tokens/s per GPU", **_LAYOUT,
    )
    return fig


def _frontier(xy: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both axes, left to right."""
    out: list[tuple[float, float]] = []
    for x, y in sorted(xy, key=lambda t: (-t[0], -t[1])):
        if not out or y > out[-1][1]:
            out.append((x, y))
    return sorted(out)


def _mark_winner(fig: go.Figure, data: ReportData) -> None:
    sel = data.selection
    verdict = next((v for v in sel.verdicts if v.layout == sel.winner), None)
    if verdict is None:
        return
    p = next((p for p in data.points if p.layout == sel.winner and p.label == verdict.best_point), None)
    if p is None or p.tokens_per_s_per_user is None or p.tokens_per_s_per_gpu is None:
        return
    fig.add_trace(
        go.Scatter(
            x=[p.tokens_per_s_per_user], y=[p.tokens_per_s_per_gpu], mode="markers+text",
            name=f"winner: {p.layout} at {p.label}", text=[f"winner {p.layout}"], textposition="top center",
            marker={"symbol": "star", "size": 22, "color": "gold", "line": {"color": "black", "width": 1}},
        )
    )


def _load_axis(data: ReportData) -> str:
    closed = any(p.rate is None and p.load is not None for p in data.points)
    return "offered load (requests in flight, closed loop)" if closed else "offered load (requests/s)"


def latency(data: ReportData) -> go.Figure:
    """TTFT, ITL and TPOT at p50 (dashed) and p99 (solid) against the offered rate, SLO bounds drawn."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=[f"{t} (ms)" for _, t in LATENCY])
    col = colours(data)
    for c, (metric, title) in enumerate(LATENCY, start=1):
        for name, pts in _by_layout(data):
            pts = sorted(pts, key=lambda p: p.load or 0.0)
            for stat, dash in (("p50", "dash"), ("p99", "solid")):
                fig.add_trace(
                    go.Scatter(
                        x=[p.load for p in pts], y=[p.stat(metric, stat) for p in pts], mode="lines+markers",
                        name=f"{name} {title} {stat}", legendgroup=name, showlegend=True,
                        line={"color": col[name], "dash": dash}, marker=_markers(pts, col[name], 8),
                        text=[_hover(p) for p in pts], hoverinfo="text+y",
                    ),
                    row=1, col=c,
                )
        for stat in ("p50", "p90", "p95", "p99"):
            bound = data.slo_ms.get(f"{SLO_KEY[metric]}_{stat}_ms")
            if bound is not None:
                fig.add_hline(
                    y=bound, line={"color": "#d62728", "dash": "dot"}, row=1, col=c,
                    annotation_text=f"SLO {title} {stat} {bound:g} ms", annotation_position="top left",
                )
        fig.update_xaxes(title_text=_load_axis(data), row=1, col=c)
    fig.update_layout(title="Latency against load (p50 dashed, p99 solid; dotted red: SLO)",
                      **{**_LAYOUT, "height": 460})
    return fig


PREDICTED = (
    ("TTFT p99 (ms)", ("ttft_ms", "p99"), "ttft_p99_ms"),
    ("TPOT p50 (ms)", ("tpot_ms", "p50"), "tpot_p50_ms"),
    ("output tokens/s per GPU", None, "output_tokens_per_s_per_gpu"),
)


def _measured(p: PointView, key: tuple[str, str] | None) -> float | None:
    return p.tokens_per_s_per_gpu if key is None else p.stat(*key)


def relative_error(measured: float | None, predicted: float | None) -> float | None:
    """(predicted - measured) / measured, as the text report prints it."""
    if measured is None or predicted is None or measured == 0:
        return None
    return (predicted - measured) / measured


def predicted(data: ReportData) -> go.Figure:
    """Measured and predicted side by side per load point, the relative error written on the bar."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=[t for t, _, _ in PREDICTED])
    names = [p.name for p in data.points]
    for c, (title, key, pkey) in enumerate(PREDICTED, start=1):
        meas = [_measured(p, key) for p in data.points]
        pred = [(p.metrics.get("predicted") or {}).get(pkey) for p in data.points]
        errs = [relative_error(m, q) for m, q in zip(meas, pred, strict=True)]
        fig.add_trace(go.Bar(x=names, y=meas, name="measured", legendgroup="measured", showlegend=c == 1,
                             marker_color="#1f77b4"), row=1, col=c)
        fig.add_trace(
            go.Bar(x=names, y=pred, name="predicted", legendgroup="predicted", showlegend=c == 1,
                   marker_color="#ff7f0e", text=["" if e is None else f"{e:+.0%}" for e in errs],
                   textposition="outside", hovertext=[title] * len(names)),
            row=1, col=c,
        )
    fig.update_layout(title="Measured beside predicted (label: predicted error against measured)",
                      barmode="group", **{**_LAYOUT, "height": 460})
    return fig


def cdfs(data: ReportData) -> go.Figure:
    """Empirical CDFs of TTFT (per request) and ITL (per chunk gap) for every load point."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["TTFT (ms), per request", "ITL (ms), per chunk gap"])
    col = colours(data)
    dashes = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
    for name, pts in _by_layout(data):
        for i, p in enumerate(pts):
            for c, values in ((1, p.ttft_ms), (2, p.itl_ms)):
                if not values:
                    continue
                n = len(values)
                fig.add_trace(
                    go.Scatter(
                        x=list(values), y=[(k + 1) / n for k in range(n)], mode="lines",
                        name=f"{p.name} {'TTFT' if c == 1 else 'ITL'}", legendgroup=p.name,
                        line={"color": col[name], "dash": dashes[i % len(dashes)]},
                    ),
                    row=1, col=c,
                )
    for c, metric in ((1, "ttft"), (2, "itl")):
        fig.update_xaxes(type="log", title_text="ms (log)", row=1, col=c)
        for stat in ("p50", "p90", "p95", "p99"):
            bound = data.slo_ms.get(f"{metric}_{stat}_ms")
            if bound is not None and bound > 0:
                # on a log axis a shape's x is data, an annotation's x is log10 (plotly.js convention)
                fig.add_vline(x=bound, line={"color": "#d62728", "dash": "dot"}, row=1, col=c)
                fig.add_annotation(x=math.log10(bound), y=0.05, text=f"SLO {stat} {bound:g} ms",
                                   showarrow=False, xanchor="left", row=1, col=c)
    fig.update_yaxes(title_text="fraction of samples at or below", range=[0, 1.02])
    fig.update_layout(title="Latency distributions per load point", **{**_LAYOUT, "height": 460})
    return fig


ENGINE_ROWS = (("running", "running requests", sum), ("waiting", "waiting requests", sum),
               ("kv_usage", "KV cache used (%)", max))


def engine_series_xy(series: dict[str, Any], field: str) -> tuple[list[float], list[float]]:
    """One value per scrape time over every endpoint: summed counts, the fullest KV cache."""
    step = series.get("interval_s") or 1.0
    ticks: dict[int, list[tuple[float, float]]] = {}
    for s in series.get("samples") or []:
        if s.get(field) is not None:
            ticks.setdefault(round(s["t_s"] / step), []).append((s["t_s"], float(s[field])))
    how = next(h for f, _, h in ENGINE_ROWS if f == field)
    xs, ys = [], []
    for _, vals in sorted(ticks.items()):
        xs.append(min(t for t, _ in vals))
        y = how(v for _, v in vals)
        ys.append(y * 100 if field == "kv_usage" else y)
    return xs, ys


def engine(data: ReportData) -> go.Figure | None:
    """The engines' own gauges over each load point; None when no point has any."""
    pts = [p for p in data.points if (p.engine_series.get("samples") or [])]
    if not pts:
        return None
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, subplot_titles=[t for _, t, _ in ENGINE_ROWS])
    col = colours(data)
    for i, p in enumerate(pts):
        for r, (field, _, _) in enumerate(ENGINE_ROWS, start=1):
            xs, ys = engine_series_xy(p.engine_series, field)
            if xs:
                fig.add_trace(
                    go.Scatter(x=xs, y=ys, mode="lines", name=f"{p.name} {field}", legendgroup=p.name,
                               line={"color": col[p.layout], "dash": ("solid", "dash", "dot")[i % 3]}),
                    row=r, col=1,
                )
    fig.update_xaxes(title_text="seconds since the load point started", row=3, col=1)
    fig.update_layout(title="Engine metrics during each load point (scraped from /metrics; in virtual time "
                      "sampled from the simulator)",
                      **{**_LAYOUT, "height": 720})
    return fig
