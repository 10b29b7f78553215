"""`orch consistency`: do two layouts give the same outputs? Estimators, client calls, the runner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.consistency.run import ConsistencyOptions as ConsistencyOptions
    from orchestrator.consistency.run import new_run_id as new_run_id
    from orchestrator.consistency.run import run_base_urls as run_base_urls
    from orchestrator.consistency.run import run_layouts as run_layouts
    from orchestrator.consistency.run import store_result as store_result

__getattr__, __all__ = lazy_face(__name__, {
    "run": ("ConsistencyOptions", "new_run_id", "run_base_urls", "run_layouts", "store_result",),
})  # fmt: skip
