"""What a report says about each prefill/decode pair of a run: its split (both pools, the transfer
backend, the router), what the planner expected of it (which pool binds, the KV transfer time), and per
load point each pool's engine gauges and the KV transfer time measured (scraped from the pool servers,
or simulated). Read from the store only: `orch report` and the HTML report show the same lines."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from orchestrator.store.db import Store


@dataclass(frozen=True)
class PairPoint:
    label: str
    transfer: dict[str, Any]  # transfers, transfer_ms_mean (, wait_ms_mean), source
    pools: dict[str, dict[str, Any]]  # role -> engine summary (KV peak, running/waiting means ...)


@dataclass(frozen=True)
class PairView:
    layout: str
    split: dict[str, Any]  # DisaggCandidate.to_dict()
    plan: dict[str, Any]  # the planner's row (binds, transfer, capacity)
    points: tuple[PairPoint, ...]

    def describe(self) -> str:
        s, plan = self.split, self.plan
        pools = " + ".join(f"{role} {s[role]['layout']} ({_gpus(s[role]['gpus'])})"
                           for role in ("prefill", "decode"))
        transfer = plan.get("transfer") or {}
        planned = ""
        if plan.get("binds"):
            planned = (f"; planned: the {plan['binds']} pool binds at {plan.get('capacity_rps', 0):.2f} "
                       f"req/s, KV transfer {transfer.get('ms', 0):.2f} ms per request over "
                       f"{transfer.get('link', '?')}")
        return (f"{self.layout}: {pools} = {s['gpus']} GPUs, KV over {s['transfer']}, router "
                f"{s['router_policy']}{planned}")


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _pct(v: Any) -> str:
    return "-" if not isinstance(v, int | float) else f"{v:.0%}"


def _num(v: Any, nd: int = 1) -> str:
    return "-" if not isinstance(v, int | float) else f"{v:.{nd}f}"


def point_line(p: PairPoint) -> str:
    t = p.transfer
    parts = []
    if t:
        wait = f", {_num(t.get('wait_ms_mean'), 2)} ms waiting for decode KV or the link" \
            if t.get("wait_ms_mean") is not None else ""
        parts.append(f"KV transfer {_num(t.get('transfer_ms_mean'), 2)} ms mean over "
                     f"{_num(t.get('transfers'), 0)} transfers ({t.get('source', '?')}){wait}")
    for role in ("prefill", "decode"):
        e = p.pools.get(role)
        if e and e.get("samples"):
            parts.append(f"{role} KV peak {_pct(e.get('kv_usage_peak'))}, running/waiting "
                         f"{_num(e.get('running_mean'))}/{_num(e.get('waiting_mean'))}")
    return f"  {p.label}: " + ("; ".join(parts) if parts else "no pool metrics stored")


def pair_views(store: Store, run_id: str) -> list[PairView]:
    out = []
    for row in store.layouts(run_id):
        split = (row.plan or {}).get("split")
        if not split:
            continue
        stored = sorted(store.points(run_id, row.layout),
                        key=lambda p: (p.rate is None, p.rate or 0.0, p.label))
        points = tuple(
            PairPoint(p.label, p.metrics.get("kv_transfer") or {},
                      ((p.metrics.get("engine") or {}).get("pools") or {}))
            for p in stored)
        out.append(PairView(row.layout, split, row.plan or {}, points))
    return out


def pair_lines(store: Store, run_id: str) -> list[str]:
    """Text lines for `orch sweep` / `orch report`: one block per pair (empty without pairs)."""
    views = pair_views(store, run_id)
    if not views:
        return []
    lines = ["prefill/decode pairs (per GPU counts both pools):"]
    for v in views:
        lines.append(v.describe())
        lines += [point_line(p) for p in v.points]
    return lines


def pairs_html(views: list[PairView] | tuple[PairView, ...]) -> str:
    """The same as an HTML section ('' without pairs)."""
    if not views:
        return ""
    esc = html.escape
    items = []
    for v in views:
        pts = "".join(f"<li>{esc(point_line(p).strip())}</li>" for p in v.points)
        items.append(f"<li><b>{esc(v.describe())}</b><ul>{pts}</ul></li>")
    return f'<h2>Prefill/decode pairs</h2><ul id="pairs">{"".join(items)}</ul>'


__all__ = ["PairPoint", "PairView", "pair_lines", "pair_views", "pairs_html", "point_line"]
