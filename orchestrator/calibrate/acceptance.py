"""Speculative decoding's acceptance as measured: the counters every served load point stored
(loadgen/spec_decode_metrics.py `acceptance_record`), combined per method over stored runs, in the
per-position form `engine.speculative.acceptance_rate` takes. `orch calibrate` prints it beside the
assumed one and writes it into the profile (`acceptance:`), so a spec naming that profile predicts with
the acceptance the model really has on that traffic (plan/settings_grid.py `choices`).

vLLM's points give per-position counts over every decode step: they are added up, then converted
(`combined_acceptance`). SGLang's give tokens per step only: their mean over points and the largest k
fit one rate for every position (`uniform_acceptance`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.loadgen.spec_decode_metrics import MeasuredAcceptance, combined_acceptance
from orchestrator.plan.speculative import uniform_acceptance


@dataclass(frozen=True)
class AcceptanceFit:
    method: str
    per_position: tuple[float, ...]  # conditional, as acceptance_rate
    tokens_per_step: float  # measured
    assumed_tokens_per_step: float  # what the runs' specs assumed (mean over points)
    points: int
    form: str  # "per position" (vLLM counters) | "tokens per step" (SGLang's accept length)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "per_position": list(self.per_position),
                "tokens_per_step": self.tokens_per_step,
                "assumed_tokens_per_step": self.assumed_tokens_per_step, "points": self.points,
                "form": self.form}


def _measured(d: dict[str, Any]) -> MeasuredAcceptance | None:
    if "accepted_at" not in d or "decode_steps" not in d:
        return None
    return MeasuredAcceptance(
        decode_steps=float(d["decode_steps"]), drafts=float(d["drafts"]),
        draft_tokens=float(d["draft_tokens"]), accepted_tokens=float(d["accepted_tokens"]),
        per_position=tuple(d["per_position"]),
        tokens_per_step=float(d["tokens_per_step"]), accepted_at=tuple(float(x) for x in d["accepted_at"]),
    )


def fit_acceptance(records: Sequence[dict[str, Any]]) -> dict[str, AcceptanceFit]:
    """One fit per method from points' `speculative` records (acceptance_record); methods whose points
    carry no measurement are left out."""
    by_method: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if isinstance(r, dict) and isinstance(r.get("measured"), dict):
            by_method.setdefault(str(r.get("method")), []).append(r)
    out = {}
    for method, rs in by_method.items():
        assumed = sum(float(r.get("assumed_tokens_per_step", 1.0)) for r in rs) / len(rs)
        counted = [m for r in rs if (m := _measured(r["measured"])) is not None]
        combined = combined_acceptance(counted) if counted else None
        if combined is not None:
            out[method] = AcceptanceFit(method, combined.per_position, combined.tokens_per_step, assumed,
                                        len(counted), "per position")
            continue
        k = max(int(r.get("k", 1)) for r in rs)
        length = sum(float(r["measured"]["tokens_per_step"]) for r in rs) / len(rs)
        rate = uniform_acceptance(length, k)
        out[method] = AcceptanceFit(method, (rate,) * k, length, assumed, len(rs), "tokens per step")
    return out


def stored_records(store: Any, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Every stored point's `speculative` record of these runs."""
    out = []
    for ref in run_ids:
        for p in store.points(store.run(ref).run_id):
            record = p.metrics.get("speculative") if isinstance(p.metrics, dict) else None
            if isinstance(record, dict):
                out.append(record)
    return out
