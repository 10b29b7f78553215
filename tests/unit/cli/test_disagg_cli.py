"""`orch plan` with prefill/decode pairs and `--disagg N`: tables, JSON, one-line errors."""

from __future__ import annotations

import json

from tests.support.cli import Orch
from tests.support.paths import LAYOUTS

SPEC = str(LAYOUTS / "qwen72b.yaml")


def test_pairs_beside_aggregated_layouts(orch: Orch) -> None:
    out = orch("plan", SPEC, "--layouts", "tp4x2,p:tp4+d:tp4,p:tp8+d:tp8", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [r["layout"] for r in data["rows"]] == ["tp4x2"]
    pairs = {r["layout"]: r for r in data["disaggregated"]["rows"]}
    ok = pairs["p:tp4+d:tp4"]
    assert ok["fits"] and ok["binds"] in ("prefill", "decode", "transfer")
    assert ok["capacity_rps"] == min(ok["prefill"]["rps"], ok["decode"]["rps"], ok["transfer"]["rps"])
    assert ok["transfer"]["link"] == "nvlink4"  # both pools on the one node
    assert not pairs["p:tp8+d:tp8"]["fits"]
    assert "overlap" in pairs["p:tp8+d:tp8"]["rejected_because"][0]
    table = orch("plan", SPEC, "--layouts", "p:tp4+d:tp4")
    assert table.returncode == 0, table.stderr
    assert "binds" in table.stdout and "P:D replicas" in table.stdout


def test_disagg_n_ranks_both_kinds(orch: Orch) -> None:
    out = orch("plan", SPEC, "--disagg", "16", "--prompt", "8192", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["gpus"] == 16 and data["nodes"] == 2
    kinds = {r["kind"] for r in data["rows"]}
    assert kinds == {"aggregated", "disaggregated"}
    assert all(r["gpus"] == 16 for r in data["rows"])
    table = orch("plan", SPEC, "--disagg", "0")
    assert table.returncode == 0, table.stderr
    assert "plan --disagg 8" in table.stdout


def test_bad_pairs_are_one_line_exit_2(orch: Orch) -> None:
    for args in (("--layouts", "p:tp4+q:tp4"), ("--layouts", "p:tp4"), ("--disagg", "1"), ("--disagg", "-3")):
        out = orch("plan", SPEC, *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_simulate_takes_pairs_beside_layouts(orch: Orch) -> None:
    out = orch("simulate", SPEC, "--layouts", "tp4x2,p:tp4+d:tp4,p:tp1+d:tp4", "--rates", "3",
                "--num-requests", "40", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    points = {p["layout"]: p for p in data["points"]}
    assert set(points) == {"tp4x2", "p:tp4+d:tp4"}
    pd = points["p:tp4+d:tp4"]
    assert pd["gpus"] == 8 and pd["metrics"]["n_completed"] > 0 and pd["metrics"]["n_failed"] == 0
    (rejected,) = data["rejected_layouts"]
    assert rejected["layout"] == "p:tp1+d:tp4" and "prefill pool tp1" in rejected["reason"]
    table = orch("simulate", SPEC, "--layouts", "p:tp4+d:tp4", "--rates", "3", "--num-requests", "20")
    assert table.returncode == 0, table.stderr
    assert "KV transfers" in table.stdout
