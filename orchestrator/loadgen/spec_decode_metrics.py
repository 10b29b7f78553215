"""Speculative-decoding acceptance as the engines count it, from two scrapes of their /metrics.

vLLM 0.33 (vllm/v1/spec_decode/metrics.py, SpecDecodingProm), counters per engine:
  vllm:spec_decode_num_drafts_total            steps in which a request had drafts to verify
  vllm:spec_decode_num_draft_tokens_total      drafted tokens
  vllm:spec_decode_num_accepted_tokens_total   accepted drafted tokens
  vllm:spec_decode_num_accepted_tokens_per_pos_total{position=i}   drafts whose token i was accepted
A step without drafts (an n-gram lookup that found nothing) is not a draft: vLLM's own rates leave
those steps out. orch's cost model charges every decode step, so `per_position` here is over all
decode steps: steps = generated tokens - finished requests (each one's first token comes from its
prefill) - accepted tokens; position 0's acceptance is accepted-at-0 / steps, position i's is
accepted-at-i / accepted-at-(i-1), the conditional form engine.speculative.acceptance_rate takes.
SGLang 0.5.23 (sglang/srt/observability/metrics_collector.py) exports gauges over its last logging
window: sglang:spec_accept_length (accepted drafts + the bonus token per verify step, i.e. tokens per
step) and sglang:spec_accept_rate; per-position counts are not exported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from orchestrator.loadgen.engine_metrics import fetch_text
from orchestrator.plan.speculative import SpeculativeSettings

_COUNTERS = {
    "vllm:spec_decode_num_drafts_total": "drafts",
    "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "accepted",
    "vllm:generation_tokens_total": "generated",
    "vllm:request_success_total": "finished",
}
_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_SGLANG_LENGTH = "sglang:spec_accept_length"


@dataclass(frozen=True)
class SpecDecodeCounters:
    """One scrape, summed over engines (DP ranks)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    generated: float = 0.0
    finished: float = 0.0
    accepted_per_position: tuple[float, ...] = ()
    sglang_accept_length: float | None = None  # tokens per verify step, last window (a gauge)


def _labels(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        out[key.strip()] = value.strip().strip('"')
    return out


def parse_spec_decode(page: str) -> SpecDecodeCounters | None:
    """The counters of one /metrics page; None when the engine exports no speculative decoding."""
    sums: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    length: list[float] = []
    for line in page.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        name = line[:brace] if brace >= 0 else line.partition(" ")[0]
        labels = _labels(line[brace + 1: line.rfind("}")]) if brace >= 0 else {}
        try:
            value = float(line[line.rfind("}") + 1:].split()[0] if brace >= 0 else line.split()[1])
        except (ValueError, IndexError):
            continue
        if math.isnan(value):
            continue
        if name in _COUNTERS:
            sums[_COUNTERS[name]] = sums.get(_COUNTERS[name], 0.0) + value
        elif name == _PER_POSITION and labels.get("position", "").isdigit():
            pos = int(labels["position"])
            per_pos[pos] = per_pos.get(pos, 0.0) + value
        elif name == _SGLANG_LENGTH:
            length.append(value)
    if "drafts" not in sums and not length:
        return None
    positions = tuple(per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)) if per_pos else ()
    return SpecDecodeCounters(
        drafts=sums.get("drafts", 0.0), draft_tokens=sums.get("draft_tokens", 0.0),
        accepted=sums.get("accepted", 0.0), generated=sums.get("generated", 0.0),
        finished=sums.get("finished", 0.0), accepted_per_position=positions,
        sglang_accept_length=sum(length) / len(length) if length else None,
    )


@dataclass(frozen=True)
class MeasuredAcceptance:
    """Acceptance over one load point (the difference of two scrapes)."""

    decode_steps: float  # verify steps over all decoding requests (with or without drafts)
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    per_position: tuple[float, ...]  # conditional, over all decode steps (engine.speculative.acceptance_rate)
    tokens_per_step: float  # 1 + accepted / decode steps
    accepted_at: tuple[float, ...] = ()  # steps whose drafted token i was accepted (the raw counts)

    @property
    def draft_acceptance_rate(self) -> float:
        """vLLM's own "draft acceptance rate": accepted / drafted tokens (no-draft steps left out)."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "decode_steps": self.decode_steps, "drafts": self.drafts, "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens, "per_position": list(self.per_position),
            "tokens_per_step": self.tokens_per_step, "draft_acceptance_rate": self.draft_acceptance_rate,
            "accepted_at": list(self.accepted_at),
        }


def _acceptance(steps: float, drafts: float, draft_tokens: float, accepted: float,
                hits: list[float]) -> MeasuredAcceptance:
    per_position = []
    prev = steps
    for h in hits:
        per_position.append(h / prev if prev > 0 else 0.0)
        prev = h
    return MeasuredAcceptance(
        decode_steps=steps, drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
        per_position=tuple(per_position), tokens_per_step=1.0 + accepted / steps, accepted_at=tuple(hits),
    )


def combined_acceptance(parts: list[MeasuredAcceptance]) -> MeasuredAcceptance | None:
    """One acceptance over several load points (repetitions): their counts added, then converted."""
    steps = sum(p.decode_steps for p in parts)
    if not parts or steps <= 0:
        return None
    n = max(len(p.accepted_at) for p in parts)
    hits = [sum(p.accepted_at[i] for p in parts if i < len(p.accepted_at)) for i in range(n)]
    return _acceptance(steps, sum(p.drafts for p in parts), sum(p.draft_tokens for p in parts),
                       sum(p.accepted_tokens for p in parts), hits)


def measured_acceptance(before: SpecDecodeCounters, after: SpecDecodeCounters) -> MeasuredAcceptance | None:
    """Acceptance between two vLLM scrapes; None when nothing was decoded in between (or for SGLang,
    whose window gauge gives only tokens per step: `after.sglang_accept_length`)."""
    drafts = after.drafts - before.drafts
    accepted = after.accepted - before.accepted
    steps = (after.generated - before.generated) - (after.finished - before.finished) - accepted
    if steps <= 0 or drafts < 0:
        return None
    n = max(len(after.accepted_per_position), len(before.accepted_per_position))
    hits = [
        (after.accepted_per_position[i] if i < len(after.accepted_per_position) else 0.0)
        - (before.accepted_per_position[i] if i < len(before.accepted_per_position) else 0.0)
        for i in range(n)
    ]
    return _acceptance(steps, drafts, after.draft_tokens - before.draft_tokens, accepted, hits)


def summed(parts: list[SpecDecodeCounters]) -> SpecDecodeCounters | None:
    """Several endpoints' counters (replicas) as one."""
    if not parts:
        return None
    n = max(len(p.accepted_per_position) for p in parts)
    lengths = [p.sglang_accept_length for p in parts if p.sglang_accept_length is not None]
    return SpecDecodeCounters(
        drafts=sum(p.drafts for p in parts), draft_tokens=sum(p.draft_tokens for p in parts),
        accepted=sum(p.accepted for p in parts), generated=sum(p.generated for p in parts),
        finished=sum(p.finished for p in parts),
        accepted_per_position=tuple(sum(p.accepted_per_position[i] for p in parts
                                        if i < len(p.accepted_per_position)) for i in range(n)),
        sglang_accept_length=sum(lengths) / len(lengths) if lengths else None,
    )


async def scrape_counters(metrics_urls: list[str]) -> SpecDecodeCounters | None:
    """Every endpoint's /metrics page read and summed; None when none exports speculative decoding
    or none answers (a point is never lost to its acceptance)."""
    parts = []
    for url in metrics_urls:
        try:
            found = parse_spec_decode(await fetch_text(url))
        except OSError:
            continue
        if found is not None:
            parts.append(found)
    return summed(parts)


def acceptance_record(assumed: SpeculativeSettings, before: SpecDecodeCounters | None,
                      after: SpecDecodeCounters | None) -> dict[str, Any]:
    """What a load point stores about acceptance: the setting's assumed per-position rates and what the
    engine counted over the point (vLLM: per position; SGLang: tokens per step only)."""
    out: dict[str, Any] = {"method": assumed.method, "k": assumed.num_speculative_tokens,
                           "assumed": list(assumed.acceptance),
                           "assumed_tokens_per_step": assumed.tokens_per_step}
    if before is not None and after is not None:
        measured = measured_acceptance(before, after)
        if measured is not None:
            out["measured"] = measured.to_dict()
        elif after.sglang_accept_length is not None:
            out["measured"] = {"tokens_per_step": after.sglang_accept_length}
    return out
