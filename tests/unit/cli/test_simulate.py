"""`orch simulate`: a layout that cannot be simulated is rejected with its reason and the others go on;
--json stays valid JSON; exit code 6 when no request completed in the measurement window."""

import json

from tests.support.cli import Orch
from tests.support.paths import ROOT

SPEC = str(ROOT / "layouts" / "qwen72b.yaml")


def test_a_layout_that_does_not_fit_is_rejected_and_the_rest_simulated(orch: Orch) -> None:
    out = orch("simulate", SPEC, "--layouts", "tp1x8,tp8", "--rates", "2", "--num-requests", "12", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [p["layout"] for p in data["points"]] == ["tp8"]
    assert data["points"][0]["metrics"]["n_completed"] > 0
    (rej,) = data["rejected_layouts"]
    assert rej["layout"] == "tp1x8" and rej["gpus"] == 8 and "no room for KV" in rej["reason"]
    table = orch("simulate", SPEC, "--layouts", "tp1x8,tp8", "--rates", "2", "--num-requests", "12")
    assert table.returncode == 0, table.stderr
    assert "tp1x8 (8 GPUs): rejected: layout tp1: weights" in table.stdout
    assert "orch simulate tp8 (8 GPUs)" in table.stdout
    assert "Traceback" not in table.stderr


def test_no_completed_request_exits_6_with_one_line(orch: Orch) -> None:
    # Every layout rejected: valid JSON still, then the exit code a CI job can act on.
    out = orch("simulate", SPEC, "--layouts", "tp1x8", "--rates", "2", "--num-requests", "20", "--json")
    assert out.returncode == 6, out.stderr
    assert json.loads(out.stdout)["points"] == []
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no simulated request completed" in lines[0]
    assert "1 layout(s) rejected" in lines[0]
    # The spec's 5 s warm-up would swallow a 2-request run at 2 req/s: refused up front, as in a spec file.
    short = orch("simulate", SPEC, "--layouts", "tp8", "--rates", "2", "--num-requests", "2")
    assert short.returncode == 2, short.stderr
    assert "warmup_s" in short.stderr and "Traceback" not in short.stderr


def test_heading_is_one_line_and_a_spec_without_rates_says_both_ways(orch: Orch) -> None:
    # It was the table's title, wrapped to the one-point table's width ("...in virtual time,\n not measured").
    out = orch("simulate", SPEC, "--layouts", "tp8", "--rates", "2", "--num-requests", "12")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "orch simulate tp8 (8 GPUs): predicted in virtual time, not measured"
    none = orch("simulate", SPEC, "--layouts", "tp8")  # the example specs search capacity: no rates_per_s
    assert none.returncode == 2
    (line,) = none.stderr.strip().splitlines()
    assert "give --rates" in line and "--concurrency" in line
