"""Long commands say what they are doing on stderr when it is not a terminal (a CI log, a pipe):
bench and sweep a line per point and phase and a count every 10 s, calibrate a line per iteration."""

from __future__ import annotations

import io
import re
from pathlib import Path

from orchestrator.cli.progress import RequestLines
from orchestrator.loadgen.records import RequestRecord
from tests.support.cli import Orch
from tests.support.paths import ROOT


def test_request_counts_are_written_at_most_every_interval() -> None:
    now = [0.0]
    out = io.StringIO()
    lines = RequestLines("bench ", out=out, clock=lambda: now[0], interval_s=10.0)
    lines.begin("rate=8/s", 100)
    for i in range(100):
        now[0] = i * 0.5  # 50 s in all
        lines.append(RequestRecord(str(i), 0.0, 0.0, error="timeout" if i % 10 == 0 else None))
    text = out.getvalue().splitlines()
    assert text[0].endswith("bench rate=8/s: started, 100 requests")
    counts = text[1:]
    assert 4 <= len(counts) <= 6, text  # one every 10 s, not one per request
    assert counts[-1].endswith("requests ended, 10 failed") or "failed" in counts[-1]


def test_a_sweep_off_a_terminal_prints_its_phases_and_points(tmp_path: Path, orch: Orch) -> None:
    spec = str(ROOT / "layouts" / "qwen72b.yaml")
    # stderr is a pipe here, as in a CI log
    out = orch("sweep", spec, "--layouts", "tp8", "--rates", "4", "--num-requests", "60",
               "--store", str(tmp_path / "r.db"))
    assert out.returncode in (0, 3), out.stderr
    assert "tp8: plan" in out.stderr and re.search(r"tp8 rate=4/s: \d+ ok / 0 failed", out.stderr), out.stderr
    assert all(line.startswith("[") for line in out.stderr.splitlines() if "tp8" in line), out.stderr
