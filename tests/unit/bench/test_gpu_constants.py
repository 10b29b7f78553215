"""bench/gpu_constants.py `overrides`: a measurement file becomes hardware.overrides against a preset's
datasheet figures, by hand-counted ratios; bandwidth-bound expert points never set the MoE compute
efficiency; a rate above the datasheet moves the datasheet figure; bad files are one line, exit 2.
(`measure` needs PyTorch: tests/integration/bench/test_gpu_constants_cpu.py runs it in the vllm_cpu tier.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.catalog.loader import load_gpu
from tests.support.bench_scripts import load_bench

GC = load_bench("gpu_constants")
H100 = load_gpu("h100-sxm")  # 3.35e12 B/s, 989e12 bf16 FLOP/s, 1979e12 fp8, 85,520,809,984 B


def _doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": "orch-gpu-constants",
        "measured_with": {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85_520_809_984, "torch": "2.x",
                          "date": "2026-12-07"},
        "hbm": {"bytes_per_s": 2.8e12},
        "gemm_bf16": {"flops_per_s": 6.5e14},
        "gemm_fp8": {"flops_per_s": 1.2e15},
        "grouped_gemm": {"experts": 64, "k": 4096, "n": 1536, "points": [
            {"tokens_per_expert": 64, "flops_per_s": 1.0e14},
            {"tokens_per_expert": 256, "flops_per_s": 3.0e14},
            {"tokens_per_expert": 1024, "flops_per_s": 4.5e14}]},
        "attention": {"flops_per_s": 4.0e14},
        "layer_floor": {"time_per_layer_s": 3.2e-5, "graph": True},
    }
    doc.update(changes)
    return doc


def test_efficiencies_are_measured_over_the_datasheet() -> None:
    out, notes = GC.overrides_from(_doc(), H100, "m.json")
    assert out["hbm_efficiency"] == round(2.8e12 / 3.35e12, 4) == 0.8358
    assert out["compute_efficiency"] == round(6.5e14 / 989e12, 4) == 0.6572
    # the ridge: 6.5e14 FLOP/s over 2.8e12 B/s = 232 tokens per expert; 256 is the nearest point above it
    assert out["moe_compute_efficiency"] == round(3.0e14 / 989e12, 4) == 0.3033
    assert out["layer_overhead_s"] == 3.2e-5
    assert "hbm_bytes_per_s" not in out and "bf16_flops_per_s" not in out
    assert any("FP8 GEMM: 0.606 of the FP8 peak" in n for n in notes)  # 1.2e15 / 1.979e15, said, not set
    assert load_gpu("h100-sxm", out).hbm_efficiency == 0.8358  # the preset takes every value


def test_a_bandwidth_bound_expert_point_never_sets_the_moe_efficiency() -> None:
    # 64 tokens per expert lies below the ridge (232): the byte roofline prices it, so the nearest
    # compute-bound point stands in even when asked for 64
    out, _ = GC.overrides_from(_doc(), H100, "m.json", tokens_per_expert=64)
    assert out["moe_compute_efficiency"] == 0.3033
    out, _ = GC.overrides_from(_doc(), H100, "m.json", tokens_per_expert=2000)
    assert out["moe_compute_efficiency"] == round(4.5e14 / 989e12, 4)
    only_low = _doc(grouped_gemm={"experts": 64, "points": [{"tokens_per_expert": 64, "flops_per_s": 1e14}]})
    out, notes = GC.overrides_from(only_low, H100, "m.json")
    assert "moe_compute_efficiency" not in out
    assert any("no compute-bound expert GEMM point" in n for n in notes)


def test_a_rate_above_the_datasheet_moves_the_datasheet_figure() -> None:
    out, notes = GC.overrides_from(_doc(hbm={"bytes_per_s": 4.0e12}), H100, "m.json")
    assert out["hbm_bytes_per_s"] == 4.0e12 and out["hbm_efficiency"] == 1.0
    assert any("exceeds the preset's hbm_bytes_per_s" in n for n in notes)
    # the ridge then uses the measured bandwidth: 6.5e14 / 4e12 = 162 tokens per expert, still below 256
    assert out["moe_compute_efficiency"] == 0.3033


@pytest.mark.parametrize(("change", "says"), [
    ({"kind": "something-else"}, "not a `bench/gpu_constants.py measure` file"),
    ({"hbm": {}}, "hbm.bytes_per_s must be a positive number"),
    ({"gemm_bf16": {"flops_per_s": -1}}, "gemm_bf16.flops_per_s must be a positive number"),
    ({"measured_with": {"name": "NVIDIA H200", "memory_bytes": 150_754_820_096}},
     "but preset h100-sxm has 79.6 GiB"),
])
def test_a_file_orch_cannot_use_is_refused(change: dict[str, Any], says: str) -> None:
    with pytest.raises(GC.InputError) as err:
        GC.overrides_from(_doc(**change), H100, "m.json")
    assert says in str(err.value) and str(err.value).startswith("m.json")


def test_the_command_writes_a_fragment_a_spec_accepts(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "m.json"
    src.write_text(json.dumps(_doc()))
    assert GC.main(["overrides", str(src), "--gpu", "h100-sxm"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# measured by bench/gpu_constants.py on NVIDIA H100 80GB HBM3")
    hw = yaml.safe_load(text)["hardware"]
    assert hw["gpu"] == "h100-sxm"
    gpu = load_gpu(hw["gpu"], hw["overrides"])
    assert (gpu.hbm_efficiency, gpu.compute_efficiency, gpu.layer_overhead_s) == (0.8358, 0.6572, 3.2e-5)


def test_bad_files_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none.json"
    assert GC.main(["overrides", str(missing), "--gpu", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err and str(missing) in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert GC.main(["overrides", str(bad), "--gpu", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not JSON" in err
    good = tmp_path / "m.json"
    good.write_text(json.dumps(_doc()))
    assert GC.main(["overrides", str(good), "--gpu", "no-such-gpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-gpu" in err


def test_measure_without_torch_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is importable here; the vllm_cpu tier runs `measure` (integration/bench)")
    assert GC.main(["measure", "--device", "cpu", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "measure needs PyTorch" in err
