"""Reports of stored runs: comparisons between runs (the nightly regression verdict) and HTML pages."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.report.compare import comparability as comparability
    from orchestrator.report.compare import compare_runs as compare_runs
    from orchestrator.report.compare import parse_threshold as parse_threshold
    from orchestrator.report.data import load_report as load_report
    from orchestrator.report.html import render_html as render_html
    from orchestrator.report.pairs import pair_lines as pair_lines

__getattr__, __all__ = lazy_face(__name__, {
    "compare": ("comparability", "compare_runs", "parse_threshold",),
    "data": ("load_report",),
    "html": ("render_html",),
    "pairs": ("pair_lines",),
})  # fmt: skip
