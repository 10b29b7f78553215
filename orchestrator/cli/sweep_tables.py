"""The sweep's result as a table, its summary lines (capacity, objectives, timing) and its JSON:
shared by `orch sweep` and `orch report`."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape

from orchestrator.cli.fit_table import FitTable
from orchestrator.engines import get_engine
from orchestrator.loadgen.metrics import finite
from orchestrator.pipeline.capacity import UNIT, load_label, stored_capacity
from orchestrator.pipeline.side_by_side import placement_lines
from orchestrator.pipeline.sweep import SweepResult
from orchestrator.plan.calls import SESSION_KINDS
from orchestrator.report.pairs import pair_lines
from orchestrator.report.speculative import comparison_lines, comparisons, curve
from orchestrator.spec.models import SweepSpec
from orchestrator.store.db import PointRow, Store
from orchestrator.store.extras import SideRecords


def ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f} ms"


def num(v: float | None, nd: int = 2) -> str:
    return "-" if v is None else f"{v:,.{nd}f}"


def _err(measured: object, predicted: object) -> str:
    if not isinstance(measured, int | float) or not isinstance(predicted, int | float) or not measured:
        return "?"
    return f"{(predicted - measured) / measured:+.0%}"


def _predicted(m: dict[str, Any]) -> str:
    """The simulator's prediction for the same requests, with its error against the measurement."""
    pred = m.get("predicted") or {}
    if not pred or "error" in pred:
        return "-"
    ttft, tpot = (m.get("ttft_ms") or {}).get("p99"), (m.get("tpot_ms") or {}).get("p50")
    return (
        f"{num(pred.get('ttft_p99_ms'), 1)} ({_err(ttft, pred.get('ttft_p99_ms'))}) / "
        f"{num(pred.get('tpot_p50_ms'), 1)} ({_err(tpot, pred.get('tpot_p50_ms'))})"
    )


def _engine(m: dict[str, Any]) -> str:
    """The engines' own view of the point (scraped /metrics): peak KV use, mean running/waiting
    requests, preemptions during the point."""
    e = m.get("engine") or {}
    if not e.get("samples"):
        return "-"
    kv = e.get("kv_usage_peak")
    pre = e.get("preemptions")
    return (
        f"{'-' if kv is None else f'{kv:.0%}'}, {num(e.get('running_mean'), 1)}/"
        f"{num(e.get('waiting_mean'), 1)}, {'-' if pre is None else f'{pre:.0f}'}"
    )


def _load_of(p: PointRow) -> float:
    """Rate or concurrency, for ordering a layout's points."""
    if p.rate is not None:
        return p.rate
    return float(p.label.removeprefix("concurrency=")) if p.label.startswith("concurrency=") else 0.0


def _repeated(m: dict[str, Any]) -> str:
    """' (3 runs)' when the point was repeated because it was close to the SLO (pipeline/repeats.py)."""
    n = (m.get("repeated") or {}).get("measurements")
    return f" ({n} runs)" if n and n > 1 else ""


# Columns of the sweep table and their rank: 0 always shown, higher ranks left out first on a narrow
# terminal (cli/fit_table.py; --wide shows all).
SWEEP_COLUMNS = (("layout", 0), ("GPUs", 1), ("status", 0), ("load point", 0), ("TTFT p99 ms", 0),
                 ("ITL p99 ms", 1), ("TPOT p50 ms", 1), ("out tok/s/GPU", 2), ("goodput/GPU [95%]", 0))


def print_result(result: SweepResult, store: Store, console: Console, *, scale_note: str = "",
                 wide: bool = False) -> None:
    table = FitTable(f"orch sweep {result.run_id}{scale_note}", wide=wide)
    mode = SideRecords(store, result.run_id).sweep()
    virtual = mode is not None and mode.mode == "virtual"
    cols = list(SWEEP_COLUMNS)
    if not virtual:  # in virtual time the prediction is the measurement
        cols.append(("predicted TTFT p99 / TPOT p50 (err)", 3))
    cols += [("engine KV peak, run/wait mean, preempt", 4), ("SLO", 0)]
    for col, keep in cols:
        table.column(col, justify="left" if col in ("layout", "status", "load point", "SLO") else "right",
                     keep=keep, wrap=col == "SLO")  # the verdict text wraps; numbers never do
    for o in result.outcomes:
        if not o.points:
            table.row(o.layout, str(o.gpus), o.status, *["-"] * (len(cols) - 4), o.reason or "")
        for p in sorted(store.points(result.run_id, o.layout), key=_load_of):
            m = p.metrics
            per_gpu = m.get("per_gpu") or {}
            iv = (m.get("intervals") or {}).get("goodput_per_gpu")
            cells = [
                o.layout,
                str(o.gpus),
                o.status,
                p.label + _repeated(m),
                num((m.get("ttft_ms") or {}).get("p99"), 1),
                num((m.get("itl_chunk_ms") or {}).get("p99"), 1),
                num((m.get("tpot_ms") or {}).get("p50"), 1),
                num(per_gpu.get("output_throughput"), 1),
                num(None if m.get("goodput") is None else m["goodput"] / o.gpus, 3)
                + (f" [{iv[0]:.2f}, {iv[1]:.2f}]" if iv else ""),
            ]
            if not virtual:
                cells.append(_predicted(m))
            cells.append(_engine(m))
            table.row(*cells, "pass" if p.passed else f"fail: {p.verdict}")
    table.print(console)
    sessions = _sessions_table(result, store, virtual, wide)
    if sessions is not None:
        sessions.print(console)
    caps = _capacity_lines(result, store)
    if caps:
        console.print(capacity_heading(store, result.run_id))
        for line in caps:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    extras = store.extras(result.run_id)
    lines = _objective_lines(extras) + _timing_lines(extras) + placement_lines(extras)
    for line in lines + pair_lines(store, result.run_id):  # both pools of each prefill/decode pair
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    for line in speculation_lines(result, store):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    sel = result.selection
    for v in sel.verdicts:
        mark = (
            "[bold green]winner[/]"
            if v.layout == sel.winner
            else ("[yellow]tie[/]" if v.layout in sel.tie_with else "[red]loses[/]")
        )
        console.print(f"  {v.layout}: {mark}: {escape(v.reason)}", highlight=False)
    if not sel.sound:
        console.print(f"[bold red]{escape(unsound_message(result))}[/]", highlight=False)
    if sel.winner is None:
        console.print("[bold red]no layout meets the SLO[/]")
    else:
        console.print(
            f"[bold]winner: {sel.winner}[/] (objective {sel.objective}); stored in {store.path} as "
            f"run {result.run_id}",
            highlight=False,
        )


def speculation_lines(result: SweepResult, store: Store) -> list[str]:
    """With and without speculative decoding across load, per pair of candidates (report/speculative.py)."""
    curves = [curve(o.layout, store.points(result.run_id, o.layout)) for o in result.outcomes]
    closed = any(p.label.startswith("concurrency=") for c in result.outcomes
                 for p in store.points(result.run_id, c.layout)[:1])
    lines: list[str] = []
    for c in comparisons(curves):
        lines += comparison_lines(c, "concurrency" if closed else "rate")
    return lines


def infrastructure_failure(result: SweepResult) -> str | None:
    """Why no layout could be judged on its performance, when deployments failed (the engine is not
    installed, the target cannot be reached, the engines died): exit 4, not 3. None when at least the
    layouts that were deployed all failed the SLO on their own, or none failed to deploy."""
    failed = [o for o in result.outcomes if o.status == "failed"]
    if not failed:
        return None
    first = (failed[0].reason or "no reason recorded").splitlines()[0]
    judged = [o.layout for o in result.outcomes if o.status == "measured"]
    rest = f"; {', '.join(judged)} measured but not meeting the SLO" if judged else ""
    return (
        f"{len(failed)} layout(s) could not be deployed or measured ({failed[0].layout}: {first}){rest}: "
        f"an infrastructure failure, not an SLO verdict (run {result.run_id})"
    )


def _pct(v: object) -> str:
    return f"{v:.1%}" if isinstance(v, int | float) else "-"


def _trio(d: dict[str, Any] | None) -> str:
    d = d or {}
    return " / ".join(num(d.get(k), 0) for k in ("p50", "p90", "p99"))


def _sessions_table(result: SweepResult, store: Store, virtual: bool, wide: bool) -> FitTable | None:
    """Session workloads: per candidate, at its highest passing load point (else its lowest), TTFT of
    first and of later turns, the prefix-cache hit rate (the simulator's in virtual time; served: the
    engines' own counters beside the simulator's prediction) and the session time."""
    rows = []
    for o in result.outcomes:
        points = sorted(store.points(result.run_id, o.layout), key=_load_of)
        passing = [p for p in points if p.passed]
        if not points or not (points[0].metrics.get("ttft_first_turn_ms") or {}).get("count"):
            continue
        p = passing[-1] if passing else points[0]
        m = p.metrics
        sim = (m.get("sim") or {}).get("prefix_cache") or {}
        measured = (m.get("engine") or {}).get("prefix_hit_rate")
        hit = _pct(sim.get("hit_rate", m.get("prefix_hit_rate"))) if virtual else (
            f"{_pct(measured)} (predicted {_pct((m.get('predicted') or {}).get('prefix_hit_rate'))})")
        rows.append((o.layout, p.label + ("" if passing else " (fails)"), _trio(m.get("ttft_first_turn_ms")),
                     _trio(m.get("ttft_later_turns_ms")), hit,
                     num((m.get("session_ms") or {}).get("p50", None) and m["session_ms"]["p50"] / 1e3, 1)))
    if not rows:
        return None
    table = FitTable("sessions: TTFT by turn (ms, p50 / p90 / p99) and prefix-cache hits, at each "
                     "candidate's highest passing load", wide=wide)
    hits = "prefix-cache hit rate" + ("" if virtual else " (measured)")
    for col, keep in (("layout", 0), ("load point", 0), ("TTFT first turns", 0), ("TTFT later turns", 0),
                      (hits, 1), ("session p50 s", 2)):
        table.column(col, justify="left" if col in ("layout", "load point") else "right", keep=keep)
    for r in rows:
        table.row(*r)
    return table


def unsound_message(result: SweepResult) -> str:
    bad = result.selection.unjudged
    return (
        f"decision not sound: {len(bad)} load point(s) could not be judged even when measured again "
        f"({', '.join(bad)}); rerun on an idle machine (run {result.run_id})"
    )


def mode_note(spec: SweepSpec, served: bool) -> str:
    if not get_engine(spec.engine.name).simulated:
        return ""
    if not served:
        return (
            " (simulated engine in virtual time: predicted, not measured on GPUs; "
            f"deterministic for workload seed {spec.workload.seed})"
        )
    scale = spec.engine.time_scale
    return " (simulated engine served over HTTP: predicted, not measured on GPUs" + (
        f"; run at time scale {scale:g}, reported in simulated time)" if scale != 1 else ")"
    )


def _capacity_lines(result: SweepResult, store: Store) -> list[str]:
    lines = []
    cap_iv = {v.layout: v.capacity_interval for v in result.selection.verdicts}
    for name, cap in SideRecords(store, result.run_id).capacities().items():
        by, _, _, seed = stored_capacity(cap)
        iv = cap_iv.get(name)
        # the interval's lower end is the highest sure pass; 0 says none was measured, so say it
        low = f"{iv[0]:g}" if iv and iv[0] > 0 else "0 (no sure pass measured)"
        sure = f" [{low}, {'-' if iv[1] is None else f'{iv[1]:g}'}]" if iv else ""
        pts = ", ".join(
            f"{p[by]:g}{'' if p['passed'] else ('?' if not p['judged'] else 'x')}" for p in cap["points"]
        )
        unjudged = cap.get("unjudged") or []
        left = (
            f"; unjudged (unknown, not failures): {', '.join(load_label(by, x) for x in unjudged)}; "
            f"stopped: {cap['stopped_because']}"
            if unjudged else ""
        )
        seed_text = f"{seed:g}/s" if by == "rate" else f"{seed:g}"
        lines.append(
            f"  {name}: {_capacity_text(cap, sure)}; seed {seed_text} "
            f"from {cap['seed_source']}; measured {pts} (x fails, ? unjudged){left}"
        )
    return lines


def capacity_heading(store: Store, run_id: str) -> str:
    caps = SideRecords(store, run_id).capacities().values()
    closed = any(c.get("by") == "concurrency" for c in caps)
    what = "concurrency" if closed else "request rate"
    kind = ((store.spec_json(run_id) or {}).get("workload") or {}).get("kind")
    if kind in SESSION_KINDS:  # the load counts sessions, and so does the capacity
        what = ("sessions in flight" if closed else "rate of sessions") + " (req/s below: sessions/s)"
    return f"SLO capacity (highest {what} meeting the SLO, by bracketing and bisection):"


def _capacity_text(cap: dict[str, Any], sure: str) -> str:
    by, capacity, (lo, hi), _ = stored_capacity(cap)
    unit = UNIT[by]
    if capacity is None:
        if not any(p["judged"] for p in cap["points"]):
            return "capacity unknown: no load point could be judged"
        return f"capacity 0 {unit}: fails the SLO down to the search minimum ({cap['limiting']})"
    if hi is None:
        return f"capacity >= {lo:g} {unit} ({cap['stopped_because']})"
    return f"capacity {lo:g} {unit}{sure}, fails at {hi:g} ({cap['limiting']})"


def _objective_lines(extras: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for layout, obj in (extras.get("objectives") or {}).items():
        parts = []
        cur = obj.get("currency") or ""
        cap = obj.get("at_capacity")
        if cap:
            parts.append(
                f"at capacity {num(cap.get('tokens_per_s_per_gpu'), 1)} tok/s/GPU, "
                f"{num(cap.get('tokens_per_s_per_user'), 1)} tok/s/user"
                + (f", {num(cap.get('cost_per_million_output_tokens'), 3)} {cur}/M output tokens"
                   if "cost_per_million_output_tokens" in cap else "")
            )
        at = obj.get("at_interactivity")
        if at:
            target = f"at >= {at['target_tokens_per_s_per_user']:g} tok/s/user within the SLO"
            parts.append(
                f"{target}: {at['verdict']}" if "verdict" in at else
                f"{target}: {num(at.get('tokens_per_s_per_gpu'), 1)} tok/s/GPU ({at.get('label')})"
                + (f", {num(at.get('cost_per_million_output_tokens'), 3)} {cur}/M output tokens"
                   if "cost_per_million_output_tokens" in at else "")
            )
        if parts:
            lines.append(f"  {layout}: " + "; ".join(parts))
    front = (extras.get("pareto") or {}).get("frontier") or []
    if lines:
        lines.insert(0, "objectives (interactivity = 1000 / TPOT p50 ms):")
    if front:
        lines.append(
            "Pareto frontier (tok/s/user, tok/s/GPU): "
            + ", ".join(
                f"{f['layout']} {f['label']} "
                f"({f['tokens_per_s_per_user']:.1f}, {f['tokens_per_s_per_gpu']:.1f})"
                for f in front
            )
        )
    return lines


def _timing_lines(extras: dict[str, dict[str, Any]]) -> list[str]:
    t = (extras.get("sweep") or {}).get("timing")
    if not t:
        return []
    ratio = f" ({t['exhaustive_s'] / t['wall_s']:.1f}x this sweep's time)" if t["wall_s"] > 0 else ""
    sessions = int(((extras.get("sweep") or {}).get("progress") or {}).get("sessions") or 1)
    over = f" over {sessions} sessions (--resume)" if sessions > 1 else ""
    return [
        f"time to decision: {t['wall_s']:.1f} s{over} for {t['points_measured']} load points on "
        f"{t['layouts_measured']} layouts; an exhaustive grid: {t['exhaustive_points']} points on "
        f"{t['exhaustive_layouts']} layouts, about {t['exhaustive_s']:.0f} s{ratio}"
    ]


def json_out(result: SweepResult, store: Store) -> str:
    records = SideRecords(store, result.run_id)
    return json.dumps(
        finite(
            {
                "run_id": result.run_id,
                "store": str(store.path),
                **records.whole_run(),
                "placement": records.placements(),
                "capacity": records.capacities(),
                "selection": result.selection.to_dict(),
                "layouts": [
                    {
                        "layout": o.layout,
                        "gpus": o.gpus,
                        "status": o.status,
                        "reason": o.reason,
                        "points": [
                            {
                                "label": p.label,
                                "rate": p.rate,
                                "passed": p.passed,
                                "verdict": p.verdict,
                                "metrics": p.metrics,
                            }
                            for p in store.points(result.run_id, o.layout)
                        ],
                    }
                    for o in result.outcomes
                ],
            }
        ),
        indent=2,
    )
