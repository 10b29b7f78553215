"""Calibration: fit the cost model's guessed constants to stored measurements (orch calibrate)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.calibrate.fitting import METRICS as METRICS
    from orchestrator.calibrate.fitting import Calibration as Calibration
    from orchestrator.calibrate.fitting import fit as fit
    from orchestrator.calibrate.fitting import points_from_store as points_from_store
    from orchestrator.calibrate.fitting import profile_extra as profile_extra
    from orchestrator.calibrate.fitting import simulated_runs as simulated_runs

__getattr__, __all__ = lazy_face(__name__, {
    "fitting": ("Calibration", "METRICS", "fit", "points_from_store", "profile_extra", "simulated_runs",),
})  # fmt: skip
