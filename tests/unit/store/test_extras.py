"""A run's side records, typed: written and read back through the real store."""

from __future__ import annotations

from pathlib import Path

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import resolve_settings
from orchestrator.store.db import Store
from orchestrator.store.extras import SideRecords, SweepMode


def _run(store: Store) -> str:
    store.create_run(run_id="r1", spec_path=None, spec_json={}, spec_hash="h", engine="sim",
                     engine_version=None, model="m", model_config_hash=None, orch_version="t", hardware={},
                     metadata={})
    return "r1"


def test_records_round_trip(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    records = SideRecords(store, _run(store))
    assert records.sweep() is None and records.engine_settings() is None and records.capacities() == {}
    records.set_sweep(SweepMode("virtual", "off"))
    settings = resolve_settings("sim", load_gpu("h100-sxm"), load_model("qwen2.5-7b"))
    records.set_engine_settings(settings)
    records.set_capacity("tp8", {"layout": "tp8", "capacity_per_s": 4.0})
    records.set_capacity("tp4x2", {"layout": "tp4x2", "capacity_per_s": 2.0})
    records.set_placement("tp8", {"wave": 1})
    assert records.sweep() == SweepMode("virtual", "off")
    assert records.engine_settings() == settings
    assert list(records.capacities()) == ["tp8", "tp4x2"] and records.placements() == {"tp8": {"wave": 1}}
    assert records.whole_run() == {"sweep": {"mode": "virtual", "side_by_side": "off"}}
