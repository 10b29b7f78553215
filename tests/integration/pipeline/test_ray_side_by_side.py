"""Layouts side by side on a real Ray cluster (a `ray start --head` on loopback with 16 fake GPUs), the
simulated engine served over HTTP as the process each actor starts: tp8 and tp4x2 are placed and
measured at the same time, their placement groups are live together and hold disjoint GPUs (what Ray
reports, and the CUDA_VISIBLE_DEVICES each running engine got from Ray), both are measured, the store
says they shared the cluster, and nothing is left on the cluster afterwards."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import ORCH
from tests.support.ray_cluster import LEFTOVERS_SCRIPT, ray_head, token_env
from tests.support.side_by_side import side_by_side_spec
from tests.support.sweep_procs import sim_pids, store_rows

pytestmark = pytest.mark.ray

GPUS = 16
TOKEN = secrets.token_hex(32)  # the head runs with token authentication, Ray 2.60's default
# A second driver that watches the cluster while the sweep runs: every placement group orch holds,
# with its bundles and the nodes Ray put them on: the most groups live at once, until they hold every GPU.
WATCH = """
import json, sys, time
from tests.support.ray_cluster import ray_or_skip
ray = ray_or_skip()
from ray.util.placement_group import placement_group_table
ray.init(address=sys.argv[1], logging_level="WARNING", log_to_driver=False)
deadline = time.monotonic() + float(sys.argv[2])
seen = []
while time.monotonic() < deadline:
    live = [
        {"name": pg["name"], "bundles": [pg["bundles"][i] for i in sorted(pg["bundles"])],
         "nodes": [pg["bundles_to_node_id"].get(i) for i in sorted(pg["bundles"])]}
        for pg in placement_group_table().values()
        if pg["state"] == "CREATED" and pg["name"].startswith("orch-")
    ]
    # Both layouts' groups alone are not the end: Ray may create tp4x2's second replica's group a poll
    # later, so wait until the groups live together reserve every GPU (or all are gone, or time is up).
    if len(live) > len(seen):
        seen = live
    if sum(b.get("GPU", 0) for g in seen for b in g["bundles"]) >= float(sys.argv[3]) or (seen and not live):
        break
    time.sleep(0.2)
print(json.dumps({"live_together": seen, "available_gpus": ray.available_resources().get("GPU", 0.0)}))
"""


def _env() -> dict[str, str]:
    return token_env(TOKEN)


def _spec(address: str) -> dict[str, Any]:
    return {**side_by_side_spec(num_requests=40), "target": {"kind": "ray", "address": address}}


@pytest.fixture(scope="module")
def head() -> Iterator[str]:
    yield from ray_head(GPUS, TOKEN)


def _devices(pid: int) -> str | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"CUDA_VISIBLE_DEVICES="):
            return item.split(b"=", 1)[1].decode()
    return None


def _engine_devices(db: Path) -> dict[int, str]:
    """Per port of a running simulated engine of this run, the CUDA_VISIBLE_DEVICES Ray gave it."""
    rows = store_rows(db, "SELECT launch_json FROM layouts WHERE launch_json IS NOT NULL")
    out = {}
    for (launch,) in rows:
        assert isinstance(launch, str)
        for replica in json.loads(launch)["replicas"]:
            port = replica["processes"][0]["ports"][0]
            for pid in sim_pids(f"--port {port} "):
                devices = _devices(pid)
                if devices:
                    out[port] = devices
    return out


def test_tp8_and_tp4x2_run_at_once_on_disjoint_ray_gpus_and_leave_nothing(head: str, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec(head)))
    db = tmp_path / "r.db"
    watch = subprocess.Popen(
        [sys.executable, "-c", WATCH, head, "400", str(GPUS)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    sweep = subprocess.Popen(
        [*ORCH, "sweep", str(spec), "--served", "--side-by-side", "--store", str(db), "--json",
         "--measure-all", "--workdir", str(tmp_path / "w")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    running: dict[int, str] = {}  # port -> devices, of engines seen running at the same time
    try:
        deadline = time.monotonic() + 400
        while sweep.poll() is None and time.monotonic() < deadline and len(running) < 3:
            now = _engine_devices(db)
            running = now if len(now) > len(running) else running
            time.sleep(0.3)
        out, err = sweep.communicate(timeout=max(10.0, deadline - time.monotonic()))
        seen, werr = watch.communicate(timeout=120)
    finally:
        for p in (sweep, watch):
            if p.poll() is None:
                p.kill()
    # 8: a point stayed unjudged on a busy machine (the clocks of two served layouts share its CPU).
    assert sweep.returncode in (0, 8) and out, err[-3000:]
    data = json.loads(out)
    assert {x["layout"]: x["status"] for x in data["layouts"]} == {"tp8": "measured", "tp4x2": "measured"}
    for layout in data["layouts"]:
        other = "tp4x2" if layout["layout"] == "tp8" else "tp8"
        for p in layout["points"]:
            assert p["metrics"]["side_by_side_with"] == [other]
            assert p["metrics"]["n_failed"] == 0 and p["metrics"]["n_completed"] == 40
    place = data["placement"]
    assert place["tp8"]["shared_cluster_with"] == ["tp4x2"]
    assert place["tp4x2"]["shared_cluster_with"] == ["tp8"]
    assert place["tp8"]["wave"] == place["tp4x2"]["wave"] == 1

    # What Ray reported while both ran: three groups live at once (one per replica), 8 + 4 + 4 GPUs,
    # so the whole cluster was reserved and no two groups could hold the same GPU.
    assert watch.returncode == 0, werr[-2000:]
    report = json.loads(seen.splitlines()[-1])
    groups = report["live_together"]
    assert sorted(g["name"].split("-", 2)[2] for g in groups) == ["tp4x2-r0", "tp4x2-r1", "tp8-r0"]
    assert sorted(sum(b.get("GPU", 0) for b in g["bundles"]) for g in groups) == [4, 4, 8]
    assert all(node for g in groups for node in g["nodes"])  # every bundle was placed on a node
    # The engines as they ran: each got its own GPUs from Ray, none shared.
    assert len(running) == 3, running
    ids = [set(d.split(",")) for d in running.values()]
    assert sorted(len(x) for x in ids) == [4, 4, 8]
    assert len(set().union(*ids)) == GPUS  # disjoint: 16 distinct GPU ids over the three engines

    check = subprocess.run(
        [sys.executable, "-c", LEFTOVERS_SCRIPT, head, str(GPUS)],
        capture_output=True, text=True, timeout=120, check=False, env=_env(),
    )  # fmt: skip
    assert check.returncode == 0, check.stderr[-2000:]
    assert json.loads(check.stdout.splitlines()[-1]) == {"actors": [], "groups": [], "gpus": GPUS}


def test_waves_are_sized_from_what_the_ray_cluster_has(head: str, tmp_path: Path) -> None:
    # The spec claims 3 nodes of 8 GPUs; the cluster has 16: tp4 waits for tp8 and tp4x2 instead of
    # pending for GPUs that are not there, and the sweep says so in one line.
    spec = tmp_path / "spec.yaml"
    spec_d = _spec(head)
    spec_d["hardware"]["nodes"] = 3
    spec_d["layouts"] = ["tp8", "tp4x2", "tp4"]
    spec_d["workload"]["num_requests"] = 12
    spec.write_text(yaml.safe_dump(spec_d))
    out = subprocess.run(
        [*ORCH, "sweep", str(spec), "--served", "--side-by-side", "--store", str(tmp_path / "r.db"),
         "--json", "--measure-all", "--workdir", str(tmp_path / "w")],
        capture_output=True, text=True, timeout=600, check=False, env=_env(),
    )  # fmt: skip
    assert out.returncode in (0, 3, 8) and out.stdout, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert {x["layout"]: x["status"] for x in data["layouts"]} == {
        "tp8": "measured", "tp4x2": "measured", "tp4": "measured"
    }
    assert data["cluster"]["packed_nodes"] == 2 and data["cluster"]["ray_node_gpus"] == [GPUS]
    assert "the spec claims 3 x 8 GPUs" in data["cluster"]["note"]
    assert sorted(data["placement"]) == ["tp4x2", "tp8"]  # tp4 ran in a wave of its own
    for layout in data["layouts"]:
        if layout["layout"] == "tp4":
            assert all("side_by_side_with" not in p["metrics"] for p in layout["points"])
    check = subprocess.run(
        [sys.executable, "-c", LEFTOVERS_SCRIPT, head, str(GPUS)],
        capture_output=True, text=True, timeout=120, check=False, env=_env(),
    )  # fmt: skip
    assert json.loads(check.stdout.splitlines()[-1]) == {"actors": [], "groups": [], "gpus": GPUS}
