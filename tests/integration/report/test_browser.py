"""The HTML report as a person sees it: rendered by headless Chromium (ORCH_CHROMIUM, from
.ci/setup.d/60-chromium.sh), offline (a file:// URL and no network), then read back from the page:
which plots were drawn, their legends, and how many marks each series drew. A small script appended
to a copy of the report writes that into the DOM; Chromium's --dump-dom hands the DOM back."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from orchestrator.pipeline.sweep import outcomes_from_store
from orchestrator.report.data import load_report
from orchestrator.report.html import render_html
from orchestrator.selection import select
from orchestrator.store.db import Store
from tests.support.report_fixtures import build_store

pytestmark = pytest.mark.browser

PROBE = """<script>
window.addEventListener("load", function () {
  var out = {};
  document.querySelectorAll(".js-plotly-plot").forEach(function (gd) {
    out[gd.id] = {
      traces: (gd.data || []).map(function (t) { return t.name; }),
      legend: Array.from(gd.querySelectorAll(".legendtext")).map(function (e) { return e.textContent; }),
      lines: Array.from(gd.querySelectorAll(".scatterlayer .trace")).map(function (t) {
        var p = t.querySelector("path.js-line"); return p ? (p.getAttribute("d") || "").length : 0; }),
      marks: gd.querySelectorAll(".scatterlayer .point, .barlayer .point").length,
      shapes: gd.querySelectorAll(".shapelayer path").length
    };
  });
  var pre = document.createElement("pre");
  pre.id = "orch-rendered";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _chromium() -> str:
    path = os.environ.get("ORCH_CHROMIUM")
    if not path or not Path(path).exists():
        message = "ORCH_CHROMIUM is unset or missing (.ci/setup.d/60-chromium.sh installs Debian chromium)"
        if os.environ.get("ORCH_CI") == "1":
            pytest.fail(f"ORCH_CI=1 but {message}")
        pytest.skip(message)
    return path


def _render(chromium: str, page: Path, profile: Path) -> dict[str, dict[str, list[object]]]:
    argv = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--virtual-time-budget=20000", "--dump-dom", page.as_uri(),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    found = re.search(r'<pre id="orch-rendered">(.*?)</pre>', out.stdout, re.S)
    assert found, f"chromium rc={out.returncode}, no probe output; stderr: {out.stderr[-2000:]}"
    result: dict[str, dict[str, list[object]]] = json.loads(html.unescape(found.group(1)))
    return result


def test_report_plots_render_with_the_expected_series(tmp_path: Path) -> None:
    chromium = _chromium()
    run_id = build_store(tmp_path / "r.db")
    store = Store(tmp_path / "r.db")
    outcomes = outcomes_from_store(store, run_id)
    data = load_report(store, run_id, select(outcomes, "goodput_per_gpu"), outcomes)
    page = tmp_path / "report.html"
    page.write_text(render_html(data).replace("</body>", PROBE + "</body>"), encoding="utf-8")
    drawn = _render(chromium, page, tmp_path / "profile")

    assert set(drawn) == {"fig-pareto", "fig-latency", "fig-predicted", "fig-cdf", "fig-engine"}
    for fig_id, fig in drawn.items():
        assert fig["legend"], f"{fig_id}: no legend drawn"
        assert set(fig["legend"]) <= set(fig["traces"]), fig_id  # the legend names real series
    pareto = drawn["fig-pareto"]
    assert {"tp8", "tp4x2", "passes the SLO", "fails the SLO", "not judged"} <= set(pareto["legend"])
    assert any(str(n).startswith("winner: ") for n in pareto["legend"])
    assert pareto["shapes"], "the ITL bound is not drawn"
    latency = drawn["fig-latency"]
    for name in ("tp8", "tp4x2"):
        for metric in ("TTFT", "ITL", "TPOT"):
            assert {f"{name} {metric} p50", f"{name} {metric} p99"} <= set(latency["legend"])
    assert int(latency["marks"]) >= 12 * 2  # every layout, metric and percentile at both load points
    assert int(latency["shapes"]) >= 2  # the TTFT and ITL SLO lines
    assert {"measured", "predicted"} <= set(drawn["fig-predicted"]["legend"])
    assert int(drawn["fig-predicted"]["marks"]) == 3 * 2 * 4  # 3 panels x (measured, predicted) x 4 points
    cdf = drawn["fig-cdf"]
    assert {"tp8 rate=2/s TTFT", "tp4x2 rate=8/s ITL"} <= set(cdf["legend"])
    assert sum(1 for n in cdf["lines"] if int(n) > 100) >= 8  # 4 points x 2 CDFs actually drawn as lines
    engine = drawn["fig-engine"]
    assert {"tp8 rate=2/s running", "tp4x2 rate=8/s kv_usage"} <= set(engine["legend"])
    # a constant series (no waiting at low load) is simplified to one segment: a short path, but drawn
    assert sum(1 for n in engine["lines"] if int(n) > 10) >= 4 * 3, engine["lines"]
