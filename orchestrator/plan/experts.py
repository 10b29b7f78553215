"""Expert-load statistics, load imbalance under expert parallelism, routing simulation, redundant experts.

Loads are shares of routed tokens (a popularity vector sums to 1). The imbalance of a placement is the
busiest EP rank's load over the mean rank load; 1.0 is perfect balance. File formats: docs/expert-stats.md.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import SpecError
from orchestrator.spec.files import MAX_DATA_FILE_BYTES, read_user_text

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]
else:  # imported on first use: a dense model's plan never needs it (orchestrator/lazy.py)
    from orchestrator.lazy import lazy_module

    np = lazy_module("numpy")

_ROUTING_CHUNK_TOKENS = 4096


@dataclass(frozen=True)
class ExpertStats:
    """Per-layer, per-expert routed token counts, as read from a statistics file."""

    source: str
    num_experts: int
    layer_ids: tuple[int, ...]
    tokens_per_layer: tuple[tuple[float, ...], ...]  # [layer][expert], same order as layer_ids

    def popularity(self, layer_id: int | None = None) -> FloatArray:
        """Share of routed tokens per expert: one layer's, or all layers summed when layer_id is None."""
        if layer_id is None:
            counts = np.asarray(self.tokens_per_layer, dtype=np.float64).sum(axis=0)
        else:
            if layer_id not in self.layer_ids:
                raise SpecError(f"{self.source}: no layer {layer_id} (layers {list(self.layer_ids)})")
            counts = np.asarray(self.tokens_per_layer[self.layer_ids.index(layer_id)], dtype=np.float64)
        return normalize_popularity(counts, source=self.source)


def normalize_popularity(counts: npt.ArrayLike, *, source: str = "popularity") -> FloatArray:
    """Token counts (or weights) -> shares summing to 1; rejects negative, non-finite or all-zero input."""
    arr = np.asarray(counts, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise SpecError(f"{source}: expected a non-empty vector of per-expert counts")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise SpecError(f"{source}: expert counts must be finite and non-negative")
    total = float(arr.sum())
    if total <= 0:
        raise SpecError(f"{source}: all expert counts are zero")
    return arr / total


def _check_expert_count(source: str, found: int, num_experts: int | None) -> None:
    if num_experts is not None and found != num_experts:
        raise SpecError(f"{source}: statistics have {found} experts per layer, the model has {num_experts}")


def _count(source: str, where: str, value: object) -> float:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SpecError(f"{source}: {where}: token count {value!r} is not a number") from None
    if not math.isfinite(x) or x < 0:
        raise SpecError(f"{source}: {where}: token count {value!r} must be finite and non-negative")
    return x


def _int_field(source: str, where: str, name: str, value: str | None) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise SpecError(f"{source}: {where}: {name} {value!r} is not an integer") from None


def parse_stats_csv(text: str, *, source: str, num_experts: int | None = None) -> ExpertStats:
    """CSV with header layer,expert,tokens; every (layer, expert) pair exactly once, experts 0..E-1."""
    reader = csv.DictReader(io.StringIO(text))
    fields = [f.strip() for f in (reader.fieldnames or [])]
    if fields[:3] != ["layer", "expert", "tokens"] or len(fields) != 3:
        raise SpecError(f"{source}: expected the header 'layer,expert,tokens', found {','.join(fields)!r}")
    reader.fieldnames = fields
    cells: dict[int, dict[int, float]] = {}
    for row_no, row in enumerate(reader, start=2):
        where = f"line {row_no}"
        layer = _int_field(source, where, "layer", row.get("layer"))
        expert = _int_field(source, where, "expert", row.get("expert"))
        if expert < 0:
            raise SpecError(f"{source}: {where}: negative expert id {expert}")
        per_layer = cells.setdefault(layer, {})
        if expert in per_layer:
            raise SpecError(f"{source}: {where}: layer {layer} expert {expert} appears twice")
        per_layer[expert] = _count(source, where, row.get("tokens"))
    if not cells:
        raise SpecError(f"{source}: no data rows")
    found = max(max(per_layer) for per_layer in cells.values()) + 1
    _check_expert_count(source, found, num_experts)
    for layer, per_layer in sorted(cells.items()):
        if len(per_layer) != found:
            missing = sorted(set(range(found)) - set(per_layer))
            raise SpecError(
                f"{source}: layer {layer} has {len(per_layer)} of {found} experts (missing {missing[:8]})"
            )
    layer_ids = tuple(sorted(cells))
    rows = tuple(tuple(cells[layer][e] for e in range(found)) for layer in layer_ids)
    return ExpertStats(source=source, num_experts=found, layer_ids=layer_ids, tokens_per_layer=rows)


def parse_stats_json(text: str, *, source: str, num_experts: int | None = None) -> ExpertStats:
    """JSON {"num_experts": E, "layers": [[counts...], ...]} with optional "layer_ids": [...]."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{source}: not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or "num_experts" not in doc or "layers" not in doc:
        raise SpecError(f"{source}: expected an object with 'num_experts' and 'layers'")
    declared = doc["num_experts"]
    if not isinstance(declared, int) or isinstance(declared, bool) or declared <= 0:
        raise SpecError(f"{source}: num_experts must be a positive integer, found {declared!r}")
    _check_expert_count(source, declared, num_experts)
    layers = doc["layers"]
    if not isinstance(layers, list) or not layers:
        raise SpecError(f"{source}: 'layers' must be a non-empty list of per-expert count lists")
    ids = doc.get("layer_ids", list(range(len(layers))))
    ok = isinstance(ids, list) and all(type(i) is int for i in ids)
    if not ok or {len(set(ids)), len(ids)} != {len(layers)}:
        raise SpecError(f"{source}: 'layer_ids' must be {len(layers)} distinct integers")
    rows: list[tuple[float, ...]] = []
    for i, layer in enumerate(layers):
        where = f"layers[{i}]"
        if not isinstance(layer, list):
            raise SpecError(f"{source}: {where} is not a list")
        if len(layer) != declared:
            raise SpecError(f"{source}: {where} has {len(layer)} counts but num_experts is {declared}")
        rows.append(tuple(_count(source, f"{where}[{e}]", v) for e, v in enumerate(layer)))
    return ExpertStats(
        source=source, num_experts=declared, layer_ids=tuple(ids), tokens_per_layer=tuple(rows)
    )


def load_expert_stats(path: str | Path, *, num_experts: int | None = None) -> ExpertStats:
    """Read a .csv or .json statistics file; num_experts (the model's E) is checked when given."""
    p = Path(path)
    # Bounded and FIFO-safe; statistics of 256 experts x 61 layers are under 200 kB.
    text = read_user_text(p, max_bytes=MAX_DATA_FILE_BYTES, example="expert statistics (.csv or .json)")
    suffix = p.suffix.lower()
    if suffix == ".csv":
        return parse_stats_csv(text, source=str(p), num_experts=num_experts)
    if suffix == ".json":
        return parse_stats_json(text, source=str(p), num_experts=num_experts)
    raise SpecError(f"{p}: expert statistics must be a .csv or .json file")


def stats_to_csv(stats: ExpertStats) -> str:
    """The CSV form of stats (round-trips through parse_stats_csv)."""
    lines = ["layer,expert,tokens"]
    for layer, row in zip(stats.layer_ids, stats.tokens_per_layer, strict=True):
        cells = (int(t) if float(t).is_integer() else float(t) for t in row)
        lines.extend(f"{layer},{e},{t!r}" for e, t in enumerate(cells))
    return "\n".join(lines) + "\n"


def stats_to_json(stats: ExpertStats) -> str:
    """The JSON form of stats (round-trips through parse_stats_json)."""
    layers = [[int(t) if float(t).is_integer() else t for t in row] for row in stats.tokens_per_layer]
    return json.dumps(
        {"num_experts": stats.num_experts, "layer_ids": list(stats.layer_ids), "layers": layers}
    )


def lognormal_popularity(num_experts: int, *, sigma: float, seed: int = 0) -> FloatArray:
    """Seeded lognormal weights exp(sigma * N(0,1)), normalized; sigma=0 is uniform."""
    if num_experts <= 0 or sigma < 0:
        raise SpecError(f"lognormal popularity needs num_experts > 0 and sigma >= 0 ({num_experts}, {sigma})")
    rng = np.random.default_rng(seed)
    return normalize_popularity(np.exp(sigma * rng.standard_normal(num_experts)))


def zipf_popularity(num_experts: int, *, exponent: float, seed: int = 0) -> FloatArray:
    """Zipf weights 1/rank^exponent, ranks shuffled over expert ids by a seeded permutation."""
    if num_experts <= 0 or exponent < 0:
        raise SpecError(f"Zipf popularity needs num_experts > 0, exponent >= 0 ({num_experts}, {exponent})")
    weights = 1.0 / np.arange(1, num_experts + 1, dtype=np.float64) ** exponent
    rng = np.random.default_rng(seed)
    return normalize_popularity(weights[rng.permutation(num_experts)])


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
