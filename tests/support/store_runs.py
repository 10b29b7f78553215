"""A run in a results store with plain test values, for the store's tests (tests/unit/store/)."""

from __future__ import annotations

from typing import Any

from orchestrator.loadgen.records import RequestRecord
from orchestrator.store.db import Store

RUN_ID = "20260101-000000-abcdef"
REC = RequestRecord("q1", 0.0, 0.0, 1.0, (0.1, 0.2), (1, 1), 2, 5)


def add_run(store: Store, run_id: str = RUN_ID, **changes: Any) -> None:
    """store.create_run with these values; `changes` replaces any of them (say, hardware={})."""
    args: dict[str, Any] = {
        "run_id": run_id,
        "spec_path": "x.yaml",
        "spec_json": {"a": 1},
        "spec_hash": "h",
        "engine": "sim",
        "engine_version": "v",
        "model": "m",
        "model_config_hash": "c",
        "orch_version": "o",
        "hardware": {},
        "metadata": {"eval_run_id": "e1"},
    }
    store.create_run(**(args | changes))


def start_journaled_run(store: Store, run_id: str = RUN_ID) -> None:
    """A run as a sweep starts one: journaled, created, and one pending layout (tp2) with its launch."""
    store.journal_run(run_id)
    add_run(store, run_id)
    store.set_layout(run_id, "tp2", 2, "pending", launch={"argv": ["x"]})
