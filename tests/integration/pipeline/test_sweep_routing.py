"""A sweep comparing routing policies on the multi-turn chat example, in virtual time: each
multi-replica layout is measured under each policy, the one-replica layout once, and prefix-aware
routing wins on its prefix-cache hit rate and its capacity."""

from __future__ import annotations

from pathlib import Path

from orchestrator.layout import parse_layout
from orchestrator.pipeline.sweep import Sweep, SweepOptions
from orchestrator.spec.load import load_spec
from orchestrator.store.db import Store
from tests.support.observers import QuietObserver

LAYOUTS = Path(__file__).resolve().parents[3] / "layouts"



def test_the_sweep_compares_routing_policies_and_prefix_aware_wins(tmp_path: Path) -> None:
    spec = load_spec(LAYOUTS / "chat-multiturn.yaml")
    w = spec.workload.model_copy(update={"duration_s": 40.0, "warmup_s": 5.0, "rates_per_s": [2.0]})
    spec = spec.model_copy(update={"workload": w})
    store = Store(str(tmp_path / "runs.db"))
    opts = SweepOptions(layouts=(parse_layout("tp8"), parse_layout("tp2x4")), workdir=str(tmp_path))
    result = Sweep(spec, store, QuietObserver(), options=opts).run()
    names = [o.layout for o in result.outcomes]
    assert names == ["tp8", "tp2x4 routing=round_robin", "tp2x4 routing=prefix_aware"]
    point = {o.layout: store.points(result.run_id, o.layout)[0] for o in result.outcomes}
    hit = {k: p.metrics["sim"]["prefix_cache"]["hit_rate"] for k, p in point.items()}
    assert hit["tp2x4 routing=prefix_aware"] > hit["tp2x4 routing=round_robin"] + 0.2
    later = {k: p.metrics["ttft_later_turns_ms"]["p50"] for k, p in point.items()}
    first = {k: p.metrics["ttft_first_turn_ms"]["p50"] for k, p in point.items()}
    assert later["tp2x4 routing=prefix_aware"] < later["tp2x4 routing=round_robin"]
    assert later["tp2x4 routing=prefix_aware"] < first["tp2x4 routing=prefix_aware"]
    goodput = {o.layout: o.points[0].goodput_per_gpu for o in result.outcomes}
    assert goodput["tp2x4 routing=prefix_aware"] > goodput["tp2x4 routing=round_robin"]
    assert result.selection.winner != "tp2x4 routing=round_robin"
    stored = store.spec_json(result.run_id)
    assert stored["routing"] == ["round_robin", "prefix_aware"]  # the policy is part of the stored run
    store.close()
