"""The ceiling benchmark's parts work: nginx streams the 32-chunk body and logs every request under its
point's prefix, and each built-in client's point is counted alike by the client and by the server's
log (no timing asserted: bench/ prints, never asserts)."""

import shutil
from pathlib import Path

import pytest

from tests.support.bench_scripts import load_bench


def test_each_client_is_counted_by_itself_and_by_the_server_log() -> None:
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        pytest.skip("nginx not installed (apt-get install -y nginx; .ci/setup.d/10-nginx.sh)")
    lc = load_bench("loadgen_ceiling")
    clients = {"orch bench (http1)": lc.orch_client("http1"),
               "orch bench (aiohttp)": lc.orch_client("aiohttp"), "bare aiohttp loop": lc.bare_aiohttp}
    with lc.nginx_server() as srv:
        for name, client in clients.items():
            p = lc.measure(srv, client, 20.0, 1.0)
            assert p.note == "", (name, p.note)
            assert p.n_sent == 20 and p.n_ok == 20 and p.n_failed == 0, (name, p)
            assert p.server_n == 20 and p.server_bad == 0, (name, p)  # the log saw exactly those
            assert p.cpu_s > 0, name


def test_lag_is_measured_against_a_constant_schedule() -> None:
    lc = load_bench("loadgen_ceiling")
    on_time = [i / 100 for i in range(100)]
    assert lc.lag_p99_ms(on_time, 100.0) == pytest.approx(0.0, abs=1e-6)
    late_start = [5 + t for t in on_time]  # starting late is not lag; falling behind is
    assert lc.lag_p99_ms(late_start, 100.0) == pytest.approx(0.0, abs=1e-6)
    drifting = [i / 90 for i in range(100)]  # 90/s against 100/s: 110 ms behind at the end
    assert lc.lag_p99_ms(drifting, 100.0) == pytest.approx(108.9, abs=1.0)
