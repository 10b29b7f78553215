import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from streaming_server import ServerConfig, start_server


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """The test streaming server on its own event loop in a thread (the CLI runs in a subprocess)."""
    loop = asyncio.new_event_loop()
    ready: list[str] = []
    started = threading.Event()

    async def boot() -> None:
        runner, url = await start_server(ServerConfig(ttft_ms=20, itl_ms=4))
        ready.append(url)
        started.set()
        stop = asyncio.Event()
        loop_stop.append(stop)
        await stop.wait()
        await runner.cleanup()

    loop_stop: list[asyncio.Event] = []
    t = threading.Thread(target=lambda: loop.run_until_complete(boot()), daemon=True)
    t.start()
    assert started.wait(10)
    yield ready[0]
    loop.call_soon_threadsafe(loop_stop[0].set)
    t.join(5)


def _orch(*args: str) -> subprocess.CompletedProcess[str]:
    code = "from orchestrator.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, "bench", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_bench_json_and_save(server_url: str, tmp_path: Path) -> None:
    save = tmp_path / "r.jsonl"
    res = _orch("--base-url", f"{server_url},{server_url}/v1", "--model", "m", "--rate", "50,100",
                "--arrival", "constant", "--num-requests", "20", "--input-len", "uniform:8-32",
                "--output-len", "6", "--slo", "ttft_p99_ms=500,itl_p99_ms=100", "--json", "--save", str(save))
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [p["label"] for p in data["points"]] == ["rate=50/s", "rate=100/s"]
    for p in data["points"]:
        m = p["metrics"]
        assert m["n_completed"] == 20 and m["n_failed"] == 0 and p["passed"] is True
        assert m["total_output_tokens"] == 120 and 20 <= m["ttft_ms"]["p50"] <= 40
        assert m["goodput"] > 0
    assert len(save.read_text().splitlines()) == 40
    assert len(data["config"]["targets"]) == 2


def test_bench_vllm_format(server_url: str) -> None:
    res = _orch("--base-url", server_url, "--model", "m", "--rate", "80", "--num-requests", "10",
                "--input-len", "8", "--output-len", "5", "--json", "--format", "vllm")
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout)
    assert r["completed"] == 10 and r["failed"] == 0 and r["total_output_tokens"] == 50
    assert r["request_rate"] == 80 and r["backend"] == "orch" and r["endpoint_type"] == "openai"
    assert len(r["ttfts"]) == len(r["itls"]) == len(r["latencies"]) == 10
    assert all(len(g) == 4 for g in r["itls"])
    ttfts_ms = sorted(t * 1e3 for t in r["ttfts"])
    assert r["median_ttft_ms"] == pytest.approx((ttfts_ms[4] + ttfts_ms[5]) / 2)
    assert r["std_ttft_ms"] >= 0 and 20 <= r["median_ttft_ms"] <= 40 and 3 <= r["median_itl_ms"] <= 8
    assert r["mean_e2el_ms"] > r["mean_ttft_ms"]


def test_bench_table_concurrency_chat(server_url: str) -> None:
    res = _orch("--base-url", server_url, "--model", "m", "--endpoint", "chat", "--concurrency", "2",
                "--num-requests", "6", "--input-len", "16", "--output-len", "4")
    assert res.returncode == 0, res.stderr
    assert "concurrency=2" in res.stdout and "TTFT" in res.stdout and "6 / 0" in res.stdout


def test_bench_search(server_url: str) -> None:
    res = _orch("--base-url", server_url, "--model", "m", "--search", "--search-start", "50", "--search-max",
                "200", "--num-requests", "10", "--input-len", "8", "--output-len", "3", "--slo",
                "ttft_p99_ms=1000", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    # TTFT is ~20 ms at these rates: every point passes and the search stops at its cap
    assert [p["rate"] for p in data["points"]] == [50, 100, 200]
    assert data["search"]["best_rate"] == 200 and "max_rate" in data["search"]["stopped_because"]
    assert all(p["passed"] is True for p in data["points"])


def test_unreachable_server_counts_failures() -> None:
    res = _orch("--base-url", "http://127.0.0.1:9", "--model", "m", "--rate", "100", "--num-requests", "3",
                "--input-len", "4", "--output-len", "2")
    assert res.returncode == 0, res.stderr
    assert "connection=3" in res.stdout and "every request of rate=100/s failed" in res.stdout


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
