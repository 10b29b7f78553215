"""Expert popularity: per-layer expert statistics files (read, checked, written back) and seeded
synthetic popularity vectors.

Loads are shares of routed tokens (a popularity vector sums to 1). File formats: docs/expert-stats.md.
How a popularity spreads over EP ranks is plan/experts.py.
"""

from __future__ import annotations

import csv
import io
import json
import math
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
