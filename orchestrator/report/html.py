"""The interactive HTML report of a stored run (`orch report RUN --html FILE`): one self-contained file.

Plotly draws the figures (report/figures.py): its plotly.js is embedded once, inline, so the page opens
offline and from an e-mail attachment; every figure zooms, pans and shows values on hover, and a
legend click hides a series. Why Plotly rather than Vega-Lite/Altair: one Python package with no
JavaScript build step or renderer to install, log axes, shared-axis subplots and shaded regions built
in, and the same figures work in notebooks on the DataFrames of orchestrator.store.frames.
"""

from __future__ import annotations

import html
from typing import Any

from plotly.offline import get_plotlyjs  # type: ignore[import-untyped, unused-ignore]

from orchestrator.report import figures
from orchestrator.report.data import PointView, ReportData
from orchestrator.report.pairs import pairs_html

_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em 2em;color:#222}
td,th{padding:2px 8px;border-bottom:1px solid #ddd;font-size:13px}th{text-align:left}
.banner{background:#fff3cd;border:1px solid #e0c36a;padding:.6em 1em;margin:1em 0;font-weight:600}
.pass{color:#2ca02c}.fail{color:#d62728}.unjudged{color:#555}.winner{font-weight:700}
.figure{margin:1.5em 0;border:1px solid #eee}"""


def _num(v: Any, nd: int = 1) -> str:
    return "-" if not isinstance(v, int | float) else f"{v:,.{nd}f}"


def _err(measured: float | None, predicted: Any) -> str:
    e = figures.relative_error(measured, predicted if isinstance(predicted, int | float) else None)
    return "" if e is None else f" ({e:+.0%})"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _sessions(data: ReportData) -> bool:
    """Whether the table gets the session columns: a point saw a prefix-cache hit or later turns (a
    random workload's table stays as it was)."""
    return any(p.prefix_hit_rate or (p.metrics.get("ttft_later_turns_ms") or {}).get("count")
               for p in data.points)


def _session_cells(p: PointView) -> list[str]:
    """Prefix-cache hit rate (the served one beside its prediction) and TTFT p50 of first / later turns."""
    hit, pred = p.prefix_hit_rate, p.predicted_prefix_hit_rate
    return [_pct(hit) + ("" if pred is None else f" ({_pct(pred)})"),
            f"{_num(p.stat('ttft_first_turn_ms', 'p50'))} / {_num(p.stat('ttft_later_turns_ms', 'p50'))}"]


def _point_row(p: PointView, status: str, sessions: bool = False) -> str:
    esc = html.escape
    pred = p.metrics.get("predicted") or {}
    eng = p.metrics.get("engine") or {}
    kv = eng.get("kv_usage_peak")
    cells = [
        esc(p.layout), esc(status), esc(p.label),
        _num(p.stat("ttft_ms", "p99")), _num(pred.get("ttft_p99_ms")) + _err(p.stat("ttft_ms", "p99"),
                                                                              pred.get("ttft_p99_ms")),
        _num(p.stat("itl_chunk_ms", "p99")), _num(p.stat("tpot_ms", "p50"), 2),
        _num(pred.get("tpot_p50_ms"), 2) + _err(p.stat("tpot_ms", "p50"), pred.get("tpot_p50_ms")),
        _num(p.tokens_per_s_per_gpu), _num(p.metrics.get("goodput"), 2),
        "-" if kv is None else f"{kv:.0%}",
        f"{_num(eng.get('running_mean'))} / {_num(eng.get('waiting_mean'))}",
        _num(eng.get("preemptions"), 0),
    ] + (_session_cells(p) if sessions else [])
    verdict = {"pass": "pass", "fail": f"fail: {p.verdict}", "unjudged": f"not judged {p.verdict}"}[p.judged]
    return (
        "<tr>" + "".join(f"<td>{c}</td>" for c in cells)
        + f'<td class="{p.judged}">{esc(verdict)}</td></tr>'
    )


_HEAD = (
    "layout", "status", "load point", "TTFT p99 ms", "predicted (err)", "ITL p99 ms", "TPOT p50 ms",
    "predicted (err)", "out tok/s/GPU", "goodput req/s", "KV peak", "running / waiting (mean)",
    "preemptions", "SLO verdict",
)
_SESSION_HEAD = ("prefix-cache hit (predicted)", "TTFT p50 ms first / later turns")


def _table(data: ReportData) -> str:
    esc = html.escape
    sessions = _sessions(data)
    names = _HEAD[:-1] + (_SESSION_HEAD if sessions else ()) + _HEAD[-1:]
    rows = []
    for o in data.outcomes:
        pts = [p for p in data.points if p.layout == o.layout]
        if not pts:
            rows.append(f"<tr><td>{esc(o.layout)}</td><td>{esc(o.status)}</td>"
                        f"<td colspan={len(names) - 2}>{esc(o.reason or '')}</td></tr>")
        rows += [_point_row(p, o.status, sessions) for p in pts]
    head = "".join(f"<th>{h}</th>" for h in names)
    return f'<table id="points"><tr>{head}</tr>{"".join(rows)}</table>'


def _verdicts(data: ReportData) -> str:
    esc, sel = html.escape, data.selection
    items = []
    for v in sel.verdicts:
        mark = "winner" if v.layout == sel.winner else ("tie" if v.layout in sel.tie_with else "loses")
        items.append(f'<li class="{"winner" if mark == "winner" else ""}"><b>{esc(v.layout)}</b> '
                     f"({v.gpus} GPUs): {mark}: {esc(v.reason)}</li>")
    return f'<ul id="verdicts">{"".join(items)}</ul>'


def _banner(data: ReportData) -> str:
    if not data.simulated:
        return ""
    spec = data.run.get("spec") or {}
    scale = (spec.get("engine") or {}).get("time_scale")
    served = f"; served at time scale {scale:g}, reported in simulated time" if scale not in (None, 1) else ""
    return (
        '<div class="banner" id="simulated">Simulated engine: these numbers come from orch\'s simulator '
        "(a continuous-batching model driven by the cost model), not from GPUs"
        + (
            "; run in virtual time (no servers: the same numbers on every machine)"
            if data.virtual_time
            else served
        )
        + ".</div>"
    )


def _figure(fig: Any, div_id: str) -> str:
    body: str = fig.to_html(
        full_html=False, include_plotlyjs=False, div_id=div_id,
        config={"displaylogo": False, "responsive": True},
    )
    return f'<div class="figure">{body}</div>'


def render_html(data: ReportData) -> str:
    esc, run, sel = html.escape, data.run, data.selection
    figs = [
        ("Pareto frontier", figures.pareto(data), "fig-pareto"),
        ("Latency against load", figures.latency(data), "fig-latency"),
        ("Measured beside predicted", figures.predicted(data), "fig-predicted"),
        ("Latency distributions", figures.cdfs(data), "fig-cdf"),
        ("Engine metrics", figures.engine(data), "fig-engine"),
    ]
    sections = []
    for title, fig, div_id in figs:
        body = (_figure(fig, div_id) if fig is not None
                else "<p>no engine metrics were stored for this run (runs from before they were scraped, "
                     "or an engine without /metrics)</p>")
        sections.append(f"<h2>{esc(title)}</h2>{body}")
    meta = "".join(f"<tr><td>{esc(str(k))}</td><td>{esc(str(v))}</td></tr>"
                   for k, v in (run.get("metadata") or {}).items()) or "<tr><td>none recorded</td></tr>"
    slo = ", ".join(f"{k} {v:g}" for k, v in data.slo_ms.items()) or "none"
    winner = esc(sel.winner) if sel.winner else "none: no layout meets the SLO"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>orch run {esc(run["run_id"])}</title>
<style>{_CSS}</style><script type="text/javascript">{get_plotlyjs()}</script></head><body>
<h1>orch run {esc(run["run_id"])}</h1>{_banner(data)}
<p>engine {esc(str(run.get("engine")))} {esc(str(run.get("engine_version") or ""))},
model {esc(str(run.get("model")))}, spec {esc(str(run.get("spec_path") or "-"))}
(hash {esc(str(run.get("spec_hash")))}), orch {esc(str(run.get("orch_version")))}, status
{esc(str(run.get("status")))}. SLO: {esc(slo)}; objective {esc(sel.objective)}.</p>
<h2 id="winner">Winner: {winner}</h2>{_verdicts(data)}
{pairs_html(data.pairs)}
{"".join(sections)}
<h2>Every load point</h2>{_table(data)}
<h2>Eval metadata</h2><table id="metadata">{meta}</table></body></html>
"""
