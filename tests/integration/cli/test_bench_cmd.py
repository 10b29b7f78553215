"""`orch bench` as a subprocess against the test server (in a thread) and hostile raw servers.

Timings are bounded only from below (a client cannot see a token before the server wrote it); exit
codes and counts are exact.
"""

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import orch
from tests.support.hostile_server import RawServer, forever
from tests.support.streaming_server import ServerConfig, serve_in_thread


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """The test streaming server on its own event loop in a thread (the CLI runs in a subprocess)."""
    with serve_in_thread(ServerConfig(ttft_ms=20, itl_ms=4)) as url:
        yield url


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    """`orch bench ARGS`."""
    return orch("bench", *args)


def test_bench_json_and_save(server_url: str, tmp_path: Path) -> None:
    save = tmp_path / "r.jsonl"
    res = _bench("--base-url", f"{server_url},{server_url}/v1", "--model", "m", "--rate", "50,100",
                "--arrival", "constant", "--num-requests", "20", "--input-len", "uniform:8-32",
                "--output-len", "6", "--slo", "ttft_p99_ms=500,itl_p99_ms=100", "--json", "--save", str(save))
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [p["label"] for p in data["points"]] == ["rate=50/s", "rate=100/s"]
    for p in data["points"]:
        m = p["metrics"]
        assert m["n_completed"] == 20 and m["n_failed"] == 0 and p["passed"] is True
        assert m["total_output_tokens"] == 120 and m["ttft_ms"]["p50"] >= 20
        assert m["goodput"] > 0
    assert len(save.read_text().splitlines()) == 40
    assert len(data["config"]["targets"]) == 2


def test_bench_vllm_format(server_url: str) -> None:
    res = _bench("--base-url", server_url, "--model", "m", "--rate", "80", "--num-requests", "10",
                "--input-len", "8", "--output-len", "5", "--json", "--format", "vllm")
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout)
    assert r["completed"] == 10 and r["failed"] == 0 and r["total_output_tokens"] == 50
    assert r["request_rate"] == 80 and r["backend"] == "orch" and r["endpoint_type"] == "openai"
    assert len(r["ttfts"]) == len(r["itls"]) == len(r["latencies"]) == 10
    assert all(len(g) == 4 for g in r["itls"])
    ttfts_ms = sorted(t * 1e3 for t in r["ttfts"])
    assert r["median_ttft_ms"] == pytest.approx((ttfts_ms[4] + ttfts_ms[5]) / 2)
    assert r["std_ttft_ms"] >= 0 and r["median_ttft_ms"] >= 20
    # the server writes token i at >= 20 + 4 i ms after the request arrived: the last (i = 4) at >= 36 ms
    assert all(e >= 0.020 + 4 * 0.004 for e in r["latencies"])
    assert r["mean_e2el_ms"] > r["mean_ttft_ms"]


def test_bench_table_concurrency_chat(server_url: str) -> None:
    res = _bench("--base-url", server_url, "--model", "m", "--endpoint", "chat", "--concurrency", "2",
                "--num-requests", "6", "--input-len", "16", "--output-len", "4")
    assert res.returncode == 0, res.stderr
    assert "concurrency=2" in res.stdout and "TTFT" in res.stdout
    # 6 requests from 2 clients: the first wave is the closed loop's default warm-up, the rest are measured
    (row,) = [x for x in res.stdout.splitlines() if "requests ok / failed" in x]
    ok, failed = (int(v) for v in row.split("│")[2].split("/"))
    assert failed == 0 and 1 <= ok <= 4


def test_bench_search(server_url: str) -> None:
    res = _bench("--base-url", server_url, "--model", "m", "--search", "--search-start", "50", "--search-max",
                "200", "--num-requests", "10", "--input-len", "8", "--output-len", "3", "--slo",
                "ttft_p99_ms=1000", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    # TTFT is ~20 ms at these rates: every point passes and the search stops at its cap
    assert [p["rate"] for p in data["points"]] == [50, 100, 200]
    assert data["search"]["best_rate"] == 200 and "max_rate" in data["search"]["stopped_because"]
    assert all(p["passed"] is True for p in data["points"])


def test_unreachable_server_counts_failures_and_exits_6() -> None:
    res = _bench("--base-url", "http://127.0.0.1:9", "--model", "m", "--rate", "100", "--num-requests", "3",
                "--input-len", "4", "--output-len", "2")
    assert res.returncode == 6, res.stderr
    assert "connection=3" in res.stdout and "every request of rate=100/s failed" in res.stdout
    assert "Traceback" not in res.stderr and "--max-error-rate" in res.stderr.splitlines()[-1]


def test_slo_missed_exits_7_and_error_rate_is_checked_first(server_url: str) -> None:
    # The server waits 20 ms before the first token: a 1 ms TTFT bound cannot hold on any machine.
    args = ["--base-url", server_url, "--model", "m", "--rate", "50", "--num-requests", "4",
            "--input-len", "4", "--output-len", "2", "--slo", "ttft_p99_ms=1"]
    res = _bench(*args, "--json")
    assert res.returncode == 7, res.stderr
    (p,) = json.loads(res.stdout)["points"]
    assert p["passed"] is False and "ttft_p99_ms" in res.stderr and "Traceback" not in res.stderr
    # the same SLO missed, and every request timed out (1 ms, against a 20 ms TTFT): 6 wins over 7
    res = _bench(*args, "--timeout-s", "0.001", "--max-error-rate", "0.5")
    assert res.returncode == 6, res.stderr


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize(
    ("pieces", "kind", "flags"),
    [
        ([SSE_HEAD, b"-6\r\nab\r\n"], "protocol", []),  # looped forever in the old parser
        ([SSE_HEAD, b"1", forever(b"0" * 4096)], "protocol", []),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n"], "protocol", []),
        ([SSE_HEAD, forever(b"10000\r\n" + b"x" * 0x10000 + b"\r\n")], "too_large", []),  # the 64 MiB default
        ([b"HTTP/1.0 200 OK\r\n\r\n", forever(b"data: {}\n\n" * 1000)], "too_large",
         ["--max-response-bytes", "100000"]),
    ],
    ids=["negative-chunk-size", "endless-chunk-size-line", "negative-length", "endless-body-default-cap",
         "endless-body-flag"],
)
def test_hostile_server_ends_in_a_classified_failure(
    pieces: list[object], kind: str, flags: list[str]
) -> None:
    with RawServer(lambda _: (pieces, False)) as srv:  # type: ignore[arg-type]
        # --timeout-s is the default 600 s: each must end by the client's limits, long before that
        res = _bench("--base-url", srv.base_url, "--model", "m", "--rate", "100", "--num-requests", "2",
                    "--input-len", "4", "--output-len", "2", "--json", *flags)
    assert res.returncode == 6, res.stderr
    (p,) = json.loads(res.stdout)["points"]
    assert p["metrics"]["failures"] == {kind: 2}
    assert "Traceback" not in res.stderr


def test_exit_reasons_of_a_search() -> None:
    from orchestrator.cli.bench_cmd import _failure
    from orchestrator.errors import RequestsFailed, SLONotMet
    from orchestrator.loadgen.bench import BenchConfig, BenchRun, LoadPoint
    from orchestrator.loadgen.client import ClientConfig
    from orchestrator.loadgen.records import RequestRecord

    def point(run: BenchRun, rate: float, ttft_s: float, error: str | None) -> None:
        recs = [RequestRecord(f"{rate}-{i}", i * 0.1, i * 0.1, i * 0.1 + ttft_s + 0.01,
                              (i * 0.1 + ttft_s,), (1,), 1, 4, error=error) for i in range(4)]
        run.points.append(run.measure(LoadPoint(rate=rate), recs))

    cfg = BenchConfig((ClientConfig("http://x", "m"),), num_requests=4, slo={"ttft_p99_ms": 100.0})
    slow, broken, mixed = BenchRun(cfg), BenchRun(cfg), BenchRun(cfg)
    for run in (slow, broken, mixed):
        run.search_stopped_because = "fails down to min_rate"
    point(slow, 1.0, 0.5, None)
    point(broken, 1.0, 0.01, "connection")
    point(mixed, 2.0, 0.01, "connection")
    point(mixed, 1.0, 0.5, None)
    assert isinstance(_failure(slow, 0.01), SLONotMet)
    assert isinstance(_failure(broken, 0.01), RequestsFailed)
    assert isinstance(_failure(mixed, 0.01), SLONotMet)  # a rate that served everything, too slowly
    mixed.best_rate = 1.0
    assert _failure(mixed, 0.01) is None  # a search that found a rate passes, whatever it probed


def test_cli_choices_match_the_load_generator() -> None:
    from orchestrator.cli import bench_cmd
    from orchestrator.loadgen.balance import BALANCE_KINDS
    from orchestrator.loadgen.workloads import WORKLOAD_KINDS

    assert bench_cmd.WORKLOAD_KINDS == WORKLOAD_KINDS and bench_cmd.BALANCE_KINDS == BALANCE_KINDS


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--rate", "4", "--num-requests", "1", "--slo", "ttft=5"], "--slo"),
        (["--rate", "4", "--num-requests", "1", "--slo", "latency_p99_ms=5"], "--slo"),
        (["--rate", "four", "--num-requests", "1"], "--rate"),
        (["--rate", "4"], "--num-requests"),
        (["--rate", "4", "--concurrency", "2", "--num-requests", "1"], "exactly one"),
        (["--search", "--num-requests", "1"], "--search needs --slo"),
        (["--search", "--num-requests", "1", "--slo", "ttft_p99_ms=5", "--search-max", "0.5"],
         "--search-max"),
        (["--rate", "4", "--num-requests", "1", "--input-len", "big"], "--input-len"),
        (["--rate", "4", "--num-requests", "1", "--workload", "sharegpt"], "--dataset"),
        (["--rate", "4", "--num-requests", "1", "--workload", "bogus"], "--workload"),
        (["--rate", "4", "--num-requests", "1", "--endpoint", "embeddings"], "--endpoint"),
        (["--rate", "4", "--num-requests", "1", "--tokenizer", "/nonexistent"], "--tokenizer"),
        (["--rate", "4", "--num-requests", "0"], "--num-requests"),
        (["--rate", "4", "--num-requests", "1", "--format", "csv"], "--format"),
        (["--rate", "4", "--num-requests", "1", "--base-url", "localhost:8000"], "--base-url"),
        (["--rate", "4", "--num-requests", "1", "--max-response-bytes", "0"], "--max-response-bytes"),
        (["--rate", "4", "--num-requests", "1", "--max-error-rate", "2"], "--max-error-rate"),
        (["--rate", "4", "--num-requests", "1", "--max-error-rate", "nan"], "--max-error-rate"),
    ],
)
def test_bad_input_one_line(
    args: list[str], needle: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli import main

    argv = ["orch", "bench", "--base-url", "http://127.0.0.1:9", "--model", "m", *args]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_bench_tables_are_not_cut_off_a_terminal(server_url: str) -> None:
    # Off a terminal (a pipe, a CI log) the table is PIPE_WIDTH wide, as every other command's: it was 80
    # columns, and the five-point table came out as "rat…", "ach…", "goo…". The title is one line.
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    code = "from orchestrator.cli import main; main()"
    for rates, heads in (("50,60,70,80,90", ("achieved req/s", "TTFT p50/p99", "out tok/s", "goodput")),
                         ("50", ("achieved / scheduled req/s", "request throughput req/s"))):
        res = subprocess.run(
            [sys.executable, "-c", code, "bench", "--base-url", server_url, "--model", "m", "--rate", rates,
             "--num-requests", "6", "--input-len", "8", "--output-len", "4"],
            capture_output=True, text=True, timeout=120, check=False, env=env)
        assert res.returncode == 0, res.stderr
        assert "…" not in res.stdout, res.stdout
        for head in heads:
            assert head in res.stdout, (head, res.stdout)
        for rate in rates.split(","):
            assert f"rate={rate}/s" in res.stdout
        first = res.stdout.splitlines()[0]
        assert first.startswith("orch bench (") and first.rstrip().endswith(")"), first


STALLS = {  # a fresh script per request: its generators are its own
    "byte-per-second-body": lambda: [SSE_HEAD, forever(b"d", every_s=1.0)],  # bytes, never an event
    # a head that never ends: a header line a second
    "line-per-second-head": lambda: [b"HTTP/1.1 200 OK\r\n", forever(b"X-Wait: 1\r\n", every_s=1.0)],
    "silent": lambda: [threading.Event()],  # reads the request, says nothing (a gate nobody opens)
}


@pytest.mark.parametrize("transport", ["http1", "aiohttp"])
@pytest.mark.parametrize("stall", list(STALLS))
def test_a_stalling_server_ends_within_the_idle_timeout(stall: str, transport: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # --timeout-s is the default 600 s; the idle timeout (2 s here, 60 s by default) ends each request.
    monkeypatch.setenv("ORCH_LOADGEN_TRANSPORT", transport)
    with RawServer(lambda _: (STALLS[stall](), False)) as srv:
        res = _bench("--base-url", srv.base_url, "--model", "m", "--rate", "100", "--num-requests", "2",
                     "--input-len", "4", "--output-len", "2", "--json", "--idle-timeout-s", "2")
    assert res.returncode == 6, res.stderr
    (p,) = json.loads(res.stdout)["points"]
    assert p["metrics"]["failures"] == {"stalled": 2}
    assert "Traceback" not in res.stderr


def test_the_idle_timeout_default_is_stated_once() -> None:
    from orchestrator.cli import bench_cmd
    from orchestrator.loadgen import client

    assert bench_cmd.DEFAULT_IDLE_TIMEOUT_S == client.DEFAULT_IDLE_TIMEOUT_S == 60.0
    res = orch("bench", "--help", env={**os.environ, "COLUMNS": "200"})
    assert "--idle-timeout-s" in res.stdout and "[default: 60.0]" in res.stdout, res.stdout
