"""Load imbalance under expert parallelism, routing simulation, redundant experts.

Loads are shares of routed tokens (a popularity vector sums to 1; plan/expert_stats.py reads one from
a statistics file or draws a synthetic one). The imbalance of a placement is the busiest EP rank's load
over the mean rank load; 1.0 is perfect balance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.errors import SpecError

# The statistics and popularity names, also importable from here (their home is plan/expert_stats.py).
from orchestrator.plan.expert_stats import (
    ExpertStats,
    load_expert_stats,
    lognormal_popularity,
    normalize_popularity,
    parse_stats_csv,
    parse_stats_json,
    stats_to_csv,
    stats_to_json,
    zipf_popularity,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]
else:  # imported on first use: a dense model's plan never needs it (orchestrator/lazy.py)
    from orchestrator.lazy import lazy_module

    np = lazy_module("numpy")


__all__ = [
    "ExpertPlacement", "ExpertStats", "ImbalancePoint", "Placement", "contiguous_placement", "imbalance",
    "imbalance_vs_batch", "load_expert_stats", "lognormal_popularity", "normalize_popularity",
    "parse_stats_csv", "parse_stats_json", "place_redundant", "rank_loads", "simulate_routing",
    "stats_to_csv", "stats_to_json", "zipf_popularity",
]

_ROUTING_CHUNK_TOKENS = 4096


Placement = tuple[tuple[int, ...], ...]  # rank -> expert ids held (one slot each)


def contiguous_placement(num_experts: int, ep_ranks: int) -> Placement:
    """Default EP placement: rank r holds experts [r*E/ep, (r+1)*E/ep)."""
    if ep_ranks <= 0 or num_experts <= 0 or num_experts % ep_ranks:
        raise SpecError(f"{num_experts} experts do not divide evenly over {ep_ranks} EP ranks")
    per = num_experts // ep_ranks
    return tuple(tuple(range(r * per, (r + 1) * per)) for r in range(ep_ranks))


def _split_placement(num_experts: int, ep_ranks: int) -> Placement:
    """Each expert once, in order: the first E % ep ranks one more than the rest (vLLM's uneven
    split, expert_map_manager.py determine_expert_map; contiguous when ep divides E)."""
    base, extra = divmod(num_experts, ep_ranks)
    out, start = [], 0
    for r in range(ep_ranks):
        n = base + (1 if r < extra else 0)
        out.append(tuple(range(start, start + n)))
        start += n
    return tuple(out)


def rank_loads(popularity: npt.ArrayLike, placement: Placement) -> FloatArray:
    """Load per rank; an expert held on c ranks sends load/c to each copy."""
    pop = np.asarray(popularity, dtype=np.float64)
    copies = np.zeros(pop.size, dtype=np.int64)
    for experts in placement:
        for e in experts:
            copies[e] += 1
    if np.any(copies == 0):
        raise SpecError(f"placement does not hold experts {np.flatnonzero(copies == 0).tolist()[:8]}")
    share = pop / copies
    return np.array([float(share[list(experts)].sum()) for experts in placement], dtype=np.float64)


def imbalance(popularity: npt.ArrayLike, placement: Placement | None = None, *, ep_ranks: int = 1) -> float:
    """Busiest rank's load / mean rank load; placement defaults to contiguous over ep_ranks."""
    pop = np.asarray(popularity, dtype=np.float64)
    if placement is None:
        placement = contiguous_placement(pop.size, ep_ranks)
    loads = rank_loads(pop, placement)
    mean = float(loads.mean())
    return float(loads.max()) / mean if mean > 0 else 1.0


def simulate_routing(
    popularity: npt.ArrayLike, *, batch_tokens: int, top_k: int, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """Route batch_tokens tokens, each to the top_k experts of log(popularity) + Gumbel noise.

    Returns the token count per expert (sums to batch_tokens * top_k). For top_k = 1 the expected
    share of each expert is its popularity; for top_k > 1 it is the top-k inclusion probability, which
    is flatter than the popularity vector.
    """
    pop = np.asarray(popularity, dtype=np.float64)
    num_experts = pop.size
    if not 1 <= top_k <= num_experts or batch_tokens < 0:
        raise SpecError(f"routing needs 1 <= top_k <= {num_experts} and batch >= 0 (top_k={top_k})")
    with np.errstate(divide="ignore"):
        log_pop = np.log(pop)
    counts = np.zeros(num_experts, dtype=np.int64)
    remaining = batch_tokens
    while remaining > 0:
        n = min(remaining, _ROUTING_CHUNK_TOKENS)
        scores = log_pop + rng.gumbel(size=(n, num_experts))
        chosen = np.argpartition(-scores, top_k - 1, axis=1)[:, :top_k]
        counts += np.bincount(chosen.ravel(), minlength=num_experts)
        remaining -= n
    return counts


@dataclass(frozen=True)
class ImbalancePoint:
    batch_tokens: int
    imbalance_mean: float  # over trials
    imbalance_max: float


def imbalance_vs_batch(
    popularity: npt.ArrayLike,
    *,
    top_k: int,
    batch_sizes: Sequence[int],
    placement: Placement | None = None,
    ep_ranks: int = 1,
    trials: int = 8,
    seed: int = 0,
) -> tuple[ImbalancePoint, ...]:
    """Imbalance of simulated routed load per batch size (mean and max over seeded trials)."""
    pop = np.asarray(popularity, dtype=np.float64)
    if placement is None:
        placement = contiguous_placement(pop.size, ep_ranks)
    if trials <= 0:
        raise SpecError(f"trials must be positive, got {trials}")
    rng = np.random.default_rng(seed)
    points = []
    for batch in batch_sizes:
        if batch <= 0:
            raise SpecError(f"batch sizes must be positive, got {batch}")
        values = [
            imbalance(simulate_routing(pop, batch_tokens=batch, top_k=top_k, rng=rng), placement)
            for _ in range(trials)
        ]
        points.append(ImbalancePoint(batch, float(np.mean(values)), float(np.max(values))))
    return tuple(points)


@dataclass(frozen=True)
class ExpertPlacement:
    ranks: Placement  # rank -> expert ids, slots_per_rank each
    copies: tuple[int, ...]  # expert -> number of copies (>= 1)
    rank_load_share: tuple[float, ...]  # rank -> share of routed tokens
    imbalance_before: float  # contiguous placement, no redundancy
    imbalance_after: float

    @property
    def ep_ranks(self) -> int:
        return len(self.ranks)

    @property
    def slots_per_rank(self) -> int:
        return len(self.ranks[0])

    @property
    def redundant_slots(self) -> int:
        return sum(self.copies) - len(self.copies)


def _choose_copies(pop: FloatArray, redundant_slots: int, ep_ranks: int) -> npt.NDArray[np.int64]:
    copies = np.ones(pop.size, dtype=np.int64)
    for _ in range(redundant_slots):
        per_copy = np.where(copies < ep_ranks, pop / copies, -1.0)
        copies[int(np.argmax(per_copy))] += 1
    return copies


def place_redundant(popularity: npt.ArrayLike, *, ep_ranks: int, redundant_slots: int) -> ExpertPlacement:
    """Greedy placement with redundant_slots extra expert slots spread evenly over ep_ranks.

    Copies go, one at a time, to the expert with the highest load per copy; then all copies, largest
    per-copy load first, go to the least-loaded rank that has a free slot and no copy of that expert
    (a swap with a full rank makes room when every free rank already holds it); finally pairwise swaps
    with the busiest rank while they lower it.
    """
    pop = np.asarray(popularity, dtype=np.float64)
    num_experts = pop.size
    # EPLB's rule (deepseek-ai/EPLB eplb.py, vLLM distributed/eplb, SGLang eplb): the physical experts,
    # routed + redundant, divide over the EP ranks (`num_physical_experts % num_gpus == 0`). The
    # routed ones alone need not: DeepSeek-V3's decode unit holds 256 + 64 on 320 ranks, one each.
    if ep_ranks <= 0 or redundant_slots < 0 or (num_experts + redundant_slots) % ep_ranks:
        raise SpecError(f"{num_experts} routed + {redundant_slots} redundant experts do not divide evenly "
                        f"over {ep_ranks} EP ranks (EPLB places routed + redundant slots evenly)")
    before = imbalance(pop, _split_placement(num_experts, ep_ranks))
    slots = (num_experts + redundant_slots) // ep_ranks
    if slots > num_experts:
        raise SpecError(
            f"{redundant_slots} redundant experts need {slots} slots per rank, more than the "
            f"{num_experts} distinct experts a rank can hold"
        )
    copies = _choose_copies(pop, redundant_slots, ep_ranks)
    share = pop / copies
    order = sorted(
        ((float(share[e]), e) for e in range(num_experts) for _ in range(int(copies[e]))),
        key=lambda t: (-t[0], t[1]),
    )
    held: list[list[int]] = [[] for _ in range(ep_ranks)]
    load = [0.0] * ep_ranks
    for s, e in order:
        free = [r for r in range(ep_ranks) if len(held[r]) < slots]
        ok = [r for r in free if e not in held[r]]
        r = min(ok, key=lambda q: (load[q], q)) if ok else _make_room(held, load, share, free, e)
        held[r].append(e)
        load[r] += s
    _refine(held, load, share)
    ranks = tuple(tuple(sorted(h)) for h in held)
    loads = rank_loads(pop, ranks)
    return ExpertPlacement(
        ranks=ranks,
        copies=tuple(int(c) for c in copies),
        rank_load_share=tuple(float(x) for x in loads),
        imbalance_before=before,
        imbalance_after=float(loads.max() / loads.mean()),
    )


def _make_room(held: list[list[int]], load: list[float], share: FloatArray, free: list[int], e: int) -> int:
    """All free ranks hold e: move f from a full rank s without e to free rank r; e takes f's slot on s."""
    r = min(free, key=lambda q: (load[q], q))
    candidates = [q for q in range(len(held)) if e not in held[q]]
    s = min(candidates, key=lambda q: (load[q], q))
    f = min((x for x in held[s] if x not in held[r]), key=lambda x: (float(share[x]), x))
    held[s].remove(f)
    load[s] -= float(share[f])
    held[r].append(f)
    load[r] += float(share[f])
    return s


def _refine(held: list[list[int]], load: list[float], share: FloatArray, max_rounds: int = 1000) -> None:
    """Swap one copy between the busiest rank and another while that lowers the pair's maximum.

    Every rank is full (the same number of slots), so a round scores every (rank q, x on the busiest
    rank, y on q) swap at once as one array; the first best swap in (q, x, y) order wins, as a loop over
    them in that order would pick it."""
    ranks, experts = len(held), share.size
    for _ in range(max_rounds):
        b = max(range(ranks), key=lambda q: (load[q], -q))
        h = np.asarray(held, dtype=np.int64)  # (ranks, slots), in each rank's list order
        on = np.zeros((ranks, experts), dtype=bool)
        on[np.arange(ranks)[:, None], h] = True
        xs = h[b]
        loads = np.asarray(load, dtype=np.float64)
        d = share[xs][None, :, None] - share[h][:, None, :]  # (q, x, y)
        pair_max = np.maximum(loads[b] - d, loads[:, None, None] + d)
        # a swap may not put a second copy of an expert on a rank, nor swap the busiest with itself
        allowed = ~on[:, xs][:, :, None] & ~on[b][h][:, None, :]
        allowed[b] = False
        pair_max = np.where(allowed & (pair_max < loads[b] - 1e-12), pair_max, np.inf)
        k = int(np.argmin(pair_max))
        if not pair_max.flat[k] < math.inf:
            return
        q, i, j = np.unravel_index(k, pair_max.shape)
        x, y, dx = int(xs[i]), int(h[q, j]), float(d[q, i, j])
        held[b][int(i)] = y
        held[int(q)][int(j)] = x
        load[b] -= dx
        load[int(q)] += dx
