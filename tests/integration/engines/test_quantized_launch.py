"""The fp8 launch command against vLLM's own config step, on tiny local checkpoints (vllm_cpu tier).

A spec asking for fp8 weights compiles to `--quantization fp8` only for an unquantized checkpoint
(online FP8). For a checkpoint already stored as FP8 in the compressed-tensors format, vLLM reads the
method from its config.json and refuses a `--quantization fp8` that differs from it; orch's command
leaves the flag out, and the config step (EngineArgs.create_engine_config) accepts it. The refusal is
shown too, so the test proves the step can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import orch as run_orch
from tests.support.cpu_vllm_helpers import BUILD, vllm_python

PARSERS = BUILD.parent


def _build(kind: str, out: Path) -> Path:
    proc = subprocess.run([vllm_python(), str(BUILD), str(out), kind], capture_output=True, text=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _compiled_argv(model_dir: Path, tmp: Path) -> list[str]:
    spec = tmp / f"{model_dir.name}.yaml"
    config = model_dir / "config.json"
    spec.write_text(f"model: {{config_path: {config}, weight_dtype: fp8, max_model_len: 512}}\n"
                    "hardware: {gpu: cpu}\nengine: {name: vllm}\n"
                    "workload: {input_tokens: 32, output_tokens: 16, rates_per_s: [1], num_requests: 4}\n"
                    "layouts: [tp1]\n")
    out = run_orch("compile", str(spec), "--layout", "tp1", "--format", "json")
    assert out.returncode == 0, out.stderr
    argv: list[str] = json.loads(out.stdout)["replicas"][0]["processes"][0]["argv"]
    assert argv[:2] == ["vllm", "serve"]
    return argv[2:]  # as vllm_full_config.py takes it: the model first (it puts the checkpoint there)


def _config_step(cases: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    out = tmp / "results.json"
    proc = subprocess.run([vllm_python(), str(PARSERS / "vllm_full_config.py"), str(out)],
                          input=json.dumps(cases), text=True, capture_output=True, timeout=600, check=False,
                          env=dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", HF_HUB_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: list[dict[str, Any]] = json.loads(out.read_text())
    return results


@pytest.mark.vllm_cpu
def test_fp8_command_passes_vllms_config_step_on_a_compressed_tensors_checkpoint(tmp_path: Path) -> None:
    fp8_ct = _build("fp8-ct", tmp_path / "tiny-fp8-ct")
    plain = _build("llama", tmp_path / "tiny-bf16")
    ct_argv = _compiled_argv(fp8_ct, tmp_path)
    plain_argv = _compiled_argv(plain, tmp_path)
    assert "--quantization" not in ct_argv  # the checkpoint says compressed-tensors; vLLM reads it
    assert plain_argv[plain_argv.index("--quantization") + 1] == "fp8"  # online FP8 of bf16 weights
    forced = [*ct_argv, "--quantization", "fp8"]  # what orch emitted before it read the checkpoint
    results = _config_step([{"argv": ct_argv, "model": str(fp8_ct)},
                            {"argv": plain_argv, "model": str(plain)},
                            {"argv": forced, "model": str(fp8_ct)}], tmp_path)
    assert results[0]["ok"], results[0]["error"]
    assert results[1]["ok"], results[1]["error"]
    assert not results[2]["ok"] and "does not match" in results[2]["error"]
