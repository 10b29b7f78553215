"""Shared by the vllm_cpu tier: the vLLM venv's Python (skip, or fail in CI, without it), the tiny model."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import orch as run_orch
from tests.support.paths import ROOT

BUILD = Path(__file__).resolve().parent / "parsers" / "build_tiny_model.py"


def vllm_python() -> str:
    path = os.environ.get("ORCH_VLLM_PYTHON")
    if path:
        return path
    how = "ORCH_VLLM_PYTHON is not set; run `source .ci/setup.d/20-vllm-cpu.sh` (builds a cached venv)"
    if os.environ.get("ORCH_CI") == "1":
        pytest.fail(f"CI must not skip this tier: {how}")
    pytest.skip(how)


def build_tiny_model(out: Path) -> Path:
    proc = subprocess.run(
        [vllm_python(), str(BUILD), str(out)], capture_output=True, text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def orch_env() -> dict[str, str]:
    """orch's environment with the vLLM CLI of the venv (ORCH_VLLM_BIN)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    if os.environ.get("ORCH_VLLM_PYTHON"):
        env["ORCH_VLLM_BIN"] = str(Path(os.environ["ORCH_VLLM_PYTHON"]).parent / "vllm")
    return env


def orch(*args: str, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    """`orch ARGS` from the repository root with the venv's vLLM CLI; real engines start slowly."""
    return run_orch(*args, timeout=timeout, env=orch_env(), cwd=ROOT)
