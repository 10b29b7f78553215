"""Three roles over real HTTP: a prefill and a decode simulated server behind orch's router, measured
by orch's own load generator exactly as it measures one engine."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from orchestrator.loadgen.client import ClientConfig, RequestSpec, run_open_loop
from orchestrator.pipeline.timescale import unscale
from tests.support.ports import free_port as _free_port

MODEL = "qwen2.5-72b"
SCALE = 1.0
PD_SERVER = (sys.executable, "-m", "orchestrator.sim.pd_server")
ENGINE = ("--model", MODEL, "--layout", "tp4", "--gpu", "h100-sxm", "--max-model-len", "8192",
          "--time-scale", str(SCALE))


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return -1, ""


def _metrics(url: str) -> dict[str, float]:
    """Unlabelled samples of a Prometheus text page."""
    out = {}
    for line in _get(url + "/metrics")[1].splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            out[name] = float(value)
    return out


def _wait(url: str, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _get(url)[0] == 200:
            return True
        time.sleep(0.1)
    return False


@contextlib.contextmanager
def _processes(*argvs: list[str]) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [subprocess.Popen(argv) for argv in argvs]
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)


@contextlib.contextmanager
def three_roles(*decode_extra: str, protocol: str = "vllm") -> Iterator[tuple[str, str, str]]:
    """(router, prefill, decode) base URLs of running servers; all three end on exit."""
    pp, dp, rp = _free_port(), _free_port(), _free_port()
    prefill = [*PD_SERVER, "--role", "prefill", *ENGINE, "--port", str(pp)]
    decode = [*PD_SERVER, "--role", "decode", *ENGINE, *decode_extra, "--port", str(dp)]
    router = [sys.executable, "-m", "orchestrator.router", "--prefill", f"http://127.0.0.1:{pp}",
              "--decode", f"http://127.0.0.1:{dp}", "--port", str(rp), "--protocol", protocol]
    if protocol == "sglang":  # the simulated prefill server answers the bootstrap on its HTTP port
        router += ["--bootstrap-port", str(pp)]
    with _processes(prefill, decode, router):
        yield f"http://127.0.0.1:{rp}", f"http://127.0.0.1:{pp}", f"http://127.0.0.1:{dp}"


def test_router_health_needs_all_three() -> None:
    pp, rp = _free_port(), _free_port()
    prefill = [*PD_SERVER, "--role", "prefill", *ENGINE, "--port", str(pp)]
    router = [sys.executable, "-m", "orchestrator.router", "--prefill", f"http://127.0.0.1:{pp}",
              "--decode", f"http://127.0.0.1:{_free_port()}", "--port", str(rp)]
    with _processes(prefill, router):
        assert _wait(f"http://127.0.0.1:{pp}/health")
        assert _wait(f"http://127.0.0.1:{rp}/metrics")
        code, text = _get(f"http://127.0.0.1:{rp}/health")
        assert code == 503 and "decode" in text and "prefill" not in text.split("not ready:")[1]


@pytest.mark.parametrize("protocol", ["vllm", "sglang"])
def test_three_roles_serve_what_the_load_generator_asks(protocol: str) -> None:
    n, prompt_words, out = 12, 2000, 16
    with three_roles("--kv-link", "inter_node", protocol=protocol) as (router, prefill, decode):
        assert _wait(router + "/health"), "the three roles did not become healthy in 60 s"
        specs = [RequestSpec(str(i), "word " * prompt_words, max_tokens=out) for i in range(n)]
        offsets = [0.15 * i for i in range(n)]
        records = unscale(asyncio.run(run_open_loop(ClientConfig(router, MODEL), specs, offsets)), SCALE)
        p_metrics, d_metrics, r_metrics = _metrics(prefill), _metrics(decode), _metrics(router)
        too_long = urllib.request.Request(router + "/v1/completions",
                                          data=b'{"prompt": "x", "max_tokens": 99999}',
                                          headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(too_long, timeout=10)
    assert err.value.code == 400  # the prefill server's refusal, passed through by the router
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    assert all(r.output_tokens == out and len(r.chunk_times_s) == out for r in records)
    assert all(r.prompt_tokens == prompt_words for r in records)
    # Every prompt went through prefill, then its KV was pulled by the decode server over the network.
    assert d_metrics["orch_sim_kv_transfers_total"] == n
    assert p_metrics["orch_sim_kv_pulled_total"] == n and p_metrics["orch_sim_kv_held_tokens"] == 0
    assert r_metrics["orch_router_requests_total"] == n and r_metrics["orch_router_failures_total"] == 0
    # 2000 tokens of Qwen2.5-72B KV from TP4 to TP4: 2 KV heads per GPU over 50 GB/s ~ 3.3 ms each.
    per_transfer = d_metrics["orch_sim_kv_transfer_seconds_sum"] / n
    assert 0.003 < per_transfer < 0.004
    # Tokens are never released early: a first token needs a prefill (> 30 ms simulated for 2000 tokens
    # on TP4), the transfer and a decode step.
    assert min(r.ttft_s for r in records if r.ttft_s is not None) > 0.03 + per_transfer
