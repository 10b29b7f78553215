"""Consistency estimators between two layouts' outputs: pure functions on token ids and top-k logprobs.

A top-k list is a mapping token id -> natural-log probability, as an engine reports it for one position.
KL and total variation are estimated on a coarse-grained distribution: one bucket per token that BOTH
layouts list in their top-k at that position, plus one tail bucket holding the rest of each side's mass
(1 - the listed mass; the tail is floored at TAIL_FLOOR and each side renormalised to 1). Merging tokens
into buckets never increases KL or TV (data-processing inequality), so the estimates are lower bounds of
the per-token divergences, and exact when the top-k lists cover almost all the mass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TopK = Mapping[int, float]
TAIL_FLOOR = 1e-12


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first position where the token sequences differ (a length difference counts at the
    end of the shorter one); None when they are identical."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


def exact_match_rate(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> float:
    """Fraction of pairs whose token sequences are identical (1.0 for no pairs: nothing differs)."""
    if not pairs:
        return 1.0
    return sum(1 for a, b in pairs if list(a) == list(b)) / len(pairs)


def argmax(topk: TopK) -> int | None:
    """The most likely listed token (ties: the smaller id, so both sides break ties alike)."""
    if not topk:
        return None
    return min(topk, key=lambda t: (-topk[t], t))


def argmax_agreement(a: Sequence[TopK], b: Sequence[TopK], upto: int | None = None) -> tuple[int, int]:
    """(agreeing positions, compared positions) of the per-position argmax over the first `upto`
    positions (default: all positions both sides have)."""
    n = min(len(a), len(b)) if upto is None else min(upto, len(a), len(b))
    agree = sum(1 for i in range(n) if argmax(a[i]) is not None and argmax(a[i]) == argmax(b[i]))
    return agree, n


def top2_margin(topk: TopK) -> float | None:
    """Logprob gap between the best and second-best listed tokens (a near-tie has a small margin)."""
    if len(topk) < 2:
        return None
    first, second = sorted(topk.values(), reverse=True)[:2]
    return first - second


def coarse_pair(p: TopK, q: TopK) -> tuple[list[float], list[float]]:
    """Both sides' probabilities on the shared buckets: tokens listed by both, then the tail."""
    shared = sorted(set(p) & set(q))
    ps = [math.exp(p[t]) for t in shared]
    qs = [math.exp(q[t]) for t in shared]
    ps.append(max(TAIL_FLOOR, 1.0 - sum(ps)))
    qs.append(max(TAIL_FLOOR, 1.0 - sum(qs)))
    sp, sq = sum(ps), sum(qs)
    return [x / sp for x in ps], [x / sq for x in qs]


def kl_divergence(p: TopK, q: TopK) -> float:
    """KL(P || Q) in nats on the coarse buckets (a lower bound of the full-vocabulary KL)."""
    ps, qs = coarse_pair(p, q)
    return max(0.0, sum(x * math.log(x / y) for x, y in zip(ps, qs, strict=True) if x > 0))


def total_variation(p: TopK, q: TopK) -> float:
    """TV(P, Q) = half the L1 distance on the coarse buckets (a lower bound of the full TV)."""
    ps, qs = coarse_pair(p, q)
    return 0.5 * sum(abs(x - y) for x, y in zip(ps, qs, strict=True))


@dataclass(frozen=True)
class Summary:
    """mean, p50, p90, p99 and max of a list of values (all None when empty)."""

    n: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "n": self.n,
            "mean": self.mean,
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
            "max": self.max,
        }


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    # linear interpolation between closest ranks (numpy's default)
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(values: Sequence[float]) -> Summary:
    if not values:
        return Summary(0, None, None, None, None, None)
    s = sorted(values)
    return Summary(len(s), sum(s) / len(s), _quantile(s, 0.5), _quantile(s, 0.9), _quantile(s, 0.99), s[-1])


def divergence_histogram(
    positions: Sequence[int | None], max_tokens: int, bins: int = 8
) -> list[dict[str, int]]:
    """How many pairs first diverge in each equal-width range of output positions; identical pairs are
    not counted here (they have no divergence)."""
    width = max(1, math.ceil(max_tokens / bins))
    out = []
    for lo in range(0, max_tokens, width):
        hi = min(lo + width, max_tokens)
        count = sum(1 for p in positions if p is not None and lo <= p < hi)
        out.append({"from": lo, "to": hi, "count": count})
    beyond = sum(1 for p in positions if p is not None and p >= max_tokens)
    if beyond:
        out.append({"from": max_tokens, "to": max_tokens + 1, "count": beyond})
    return out
