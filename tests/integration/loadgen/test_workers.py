import itertools
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from orchestrator.loadgen.client import ClientConfig, RequestSpec, arrival_offsets
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.workers import run_open_loop_workers
from tests.support.paths import ROOT

SERVER = ROOT / "tests" / "support" / "streaming_server.py"


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, str(SERVER), "--ttft-ms", "10", "--itl-ms", "2"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    yield url
    proc.terminate()
    proc.wait(10)


def test_two_workers_share_one_schedule(server_url: str) -> None:
    specs = [RequestSpec(str(i), "hi", 4) for i in range(40)]
    offsets = arrival_offsets(40, 100.0, "constant")
    cfgs = [ClientConfig(server_url, "m")]
    recs = run_open_loop_workers(cfgs, specs, offsets, workers=2, max_concurrency=8)
    assert [r.request_id for r in recs] == [str(i) for i in range(40)]
    assert all(r.ok and r.output_tokens == 4 for r in recs)
    # one absolute start for both processes: the merged schedule is exactly the asked one
    gaps = [b.scheduled_s - a.scheduled_s for a, b in itertools.pairwise(recs)]
    assert all(abs(g - 0.01) < 1e-6 for g in gaps)
    m = compute_metrics(recs)
    assert m.n_completed == 40 and m.total_output_tokens == 160 and m.n_failed == 0
    assert all(r.scheduling_lag_s >= 0 for r in recs)  # neither process sends before its time


def test_workers_argument_checks(server_url: str) -> None:
    with pytest.raises(ValueError):
        run_open_loop_workers([ClientConfig(server_url, "m")], [], [], workers=0)
    with pytest.raises(ValueError):
        run_open_loop_workers([ClientConfig(server_url, "m")], [RequestSpec("a", "hi", 1)], [], workers=1)


def test_cli_workers(server_url: str) -> None:
    code = "from orchestrator.cli import main; main()"
    res = subprocess.run(
        [sys.executable, "-c", code, "bench", "--base-url", server_url, "--model", "m", "--rate", "200",
         "--num-requests", "30", "--input-len", "4", "--output-len", "3", "--workers", "2", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert res.returncode == 0, res.stderr
    (p,) = json.loads(res.stdout)["points"]
    assert p["metrics"]["n_completed"] == 30 and p["metrics"]["total_output_tokens"] == 90
