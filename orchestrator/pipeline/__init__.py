"""The sweep pipeline: plan, compile, deploy, measure, store and select, one layout at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.pipeline.capacity import UNIT as UNIT
    from orchestrator.pipeline.capacity import load_label as load_label
    from orchestrator.pipeline.capacity import stored_capacity as stored_capacity
    from orchestrator.pipeline.context import DEFAULT_READY_TIMEOUT_S as DEFAULT_READY_TIMEOUT_S
    from orchestrator.pipeline.context import SweepContext as SweepContext
    from orchestrator.pipeline.context import open_context as open_context
    from orchestrator.pipeline.provenance import hardware_seen as hardware_seen
    from orchestrator.pipeline.provenance import new_run_id as new_run_id
    from orchestrator.pipeline.provenance import orch_version as orch_version
    from orchestrator.pipeline.serving import Cancel as Cancel
    from orchestrator.pipeline.serving import Cancelled as Cancelled
    from orchestrator.pipeline.serving import Served as Served
    from orchestrator.pipeline.serving import serve as serve
    from orchestrator.pipeline.side_by_side import placement_lines as placement_lines
    from orchestrator.pipeline.sweep import Observer as Observer
    from orchestrator.pipeline.sweep import Sweep as Sweep
    from orchestrator.pipeline.sweep import SweepOptions as SweepOptions
    from orchestrator.pipeline.sweep import SweepResult as SweepResult
    from orchestrator.pipeline.sweep import outcomes_from_store as outcomes_from_store
    from orchestrator.pipeline.sweep import run_sweep as run_sweep
    from orchestrator.pipeline.validate import check_spec as check_spec
    from orchestrator.pipeline.validate import load_checked_spec as load_checked_spec

__getattr__, __all__ = lazy_face(__name__, {
    "capacity": ("UNIT", "load_label", "stored_capacity",),
    "context": ("DEFAULT_READY_TIMEOUT_S", "SweepContext", "open_context",),
    "provenance": ("hardware_seen", "new_run_id", "orch_version",),
    "serving": ("Cancel", "Cancelled", "Served", "serve",),
    "side_by_side": ("placement_lines",),
    "sweep": ("Observer", "Sweep", "SweepOptions", "SweepResult", "outcomes_from_store", "run_sweep",),
    "validate": ("check_spec", "load_checked_spec",),
})  # fmt: skip
