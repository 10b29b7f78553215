"""The results store: one SQLite file with runs, layouts, load points, metrics and request records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.store.db import DEFAULT_STORE as DEFAULT_STORE
    from orchestrator.store.db import Store as Store
    from orchestrator.store.export import export_run as export_run
    from orchestrator.store.extras import CLUSTER as CLUSTER
    from orchestrator.store.extras import PLACEMENT as PLACEMENT
    from orchestrator.store.extras import SideRecords as SideRecords
    from orchestrator.store.extras import SweepMode as SweepMode
    from orchestrator.store.extras import named as named
    from orchestrator.store.reads import LayoutRow as LayoutRow
    from orchestrator.store.reads import PointRow as PointRow
    from orchestrator.store.run_ids import checked_run_id as checked_run_id

__getattr__, __all__ = lazy_face(__name__, {
    "db": ("DEFAULT_STORE", "Store",),
    "export": ("export_run",),
    "extras": ("CLUSTER", "PLACEMENT", "SideRecords", "SweepMode", "named",),
    "reads": ("LayoutRow", "PointRow",),
    "run_ids": ("checked_run_id",),
})  # fmt: skip
