"""The MXFP4 routed experts as vLLM's backend for the GPU holds them, and the start-up profile peak as
vLLM measures it (plan/memory.py), checked by hand against vLLM's create_weights rules and its logs."""

from __future__ import annotations

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.plan.memory import (
    forward_profile_bytes,
    mxfp4_expert_factor,
    mxfp4_moe_backend,
    startup_peak_bytes,
)
from orchestrator.plan.run import make_plan
from orchestrator.spec.models import SweepSpec

GIB = 1024.0 ** 3
PER_WEIGHT = 0.5 + 1 / 32  # MXFP4: a nibble and one E8M0 scale per 32 weights


@pytest.mark.parametrize(("gpu", "backend"), [("h100-sxm", "triton"), ("h200", "triton"),
                                              ("b200", "flashinfer-trtllm"), ("b300", "flashinfer-trtllm"),
                                              ("a100-sxm-80gb", "marlin"), ("l40s", "marlin"),
                                              ("rtx-pro-6000", "marlin"), ("mi300x", "unpadded")])
def test_vllm_picks_the_backend_by_compute_capability(gpu: str, backend: str) -> None:
    capability = load_gpu(gpu).compute_capability
    assert mxfp4_moe_backend("vllm", "vllm", capability, weight_dtype="mxfp4") == backend


def test_engines_without_vllms_kernels_count_the_checkpoint() -> None:
    assert mxfp4_moe_backend("sglang", "vllm", "9.0", weight_dtype="mxfp4") == "unpadded"
    assert mxfp4_moe_backend("sim", "guaranteed-no-evict", "9.0", weight_dtype="mxfp4") == "unpadded"
    assert mxfp4_moe_backend("sim", "vllm", "9.0", weight_dtype="mxfp4") == "triton"
    # weights in any other format are held as stored, whatever the GPU
    assert mxfp4_moe_backend("vllm", "vllm", "9.0", weight_dtype="bf16") == "unpadded"


def test_padding_and_scale_copies_by_hand() -> None:
    # Marlin: hidden 2,880 -> 3,072 (256), shard 2,880 -> 2,944 (128)
    assert mxfp4_expert_factor("marlin", 2880, 2880) == pytest.approx(3072 * 2944 / 2880 ** 2)
    # FlashInfer TRT-LLM (SM100): both to 256
    assert mxfp4_expert_factor("flashinfer-trtllm", 2880, 1440) == pytest.approx(3072 * 1536 / (2880 * 1440))
    # Triton: the shard to 64 (2,880 already is), the scales held twice
    assert mxfp4_expert_factor("triton", 2880, 2880) == pytest.approx((0.5 + 2 / 32) / PER_WEIGHT)
    triton_tp2 = 1472 / 1440 * (0.5 + 2 / 32) / PER_WEIGHT
    assert mxfp4_expert_factor("triton", 2880, 1440) == pytest.approx(triton_tp2)
    assert mxfp4_expert_factor("unpadded", 2880, 1440) == 1.0


def _spec(gpu: str, engine: str = "vllm") -> SweepSpec:
    return SweepSpec.model_validate({
        "model": {"name": "gpt-oss-120b", "weight_dtype": "mxfp4", "max_model_len": 32768},
        "hardware": {"gpu": gpu}, "engine": {"name": engine},
        "workload": {"input_tokens": 1000, "output_tokens": 100, "rates_per_s": [1], "num_requests": 10},
        "layouts": ["tp1"]})


def test_gpt_oss_weights_on_one_gpu_match_vllms_logs() -> None:
    """vLLM logs "Model loading took 64.38 GiB" with the Triton backend on one H100 (issue #33155,
    v0.14.1) and 65.97 GiB with Marlin (issue #23278, v0.10.1, Marlin on that build)."""
    # 36 MoE layers, 128 experts, gate_up + down (their biases, 0.1% of it, left out of the hand count)
    experts = 36 * 128 * 3 * 2880 * 2880 * PER_WEIGHT
    h100 = make_plan(_spec("h100-sxm"), layouts=[parse_layout("tp1")])
    rest = h100.rows[0].weight_bytes_per_gpu - experts * (0.5 + 2 / 32) / PER_WEIGHT
    assert h100.inputs.mxfp4_backend == "triton"
    assert h100.rows[0].weight_bytes_per_gpu / GIB == pytest.approx(64.38, rel=0.01)
    a100 = make_plan(_spec("a100-sxm-80gb"), layouts=[parse_layout("tp1")])
    marlin = rest + experts * 3072 * 2944 / 2880 ** 2
    assert a100.rows[0].weight_bytes_per_gpu == pytest.approx(marlin, rel=1e-4)
    assert a100.rows[0].weight_bytes_per_gpu / GIB == pytest.approx(65.97, rel=0.01)
    sglang = make_plan(_spec("h100-sxm", "sglang"), layouts=[parse_layout("tp1")])
    assert sglang.rows[0].weight_bytes_per_gpu == pytest.approx(rest + experts, rel=1e-4)


def test_startup_peak_is_the_larger_run_not_the_sum() -> None:
    assert startup_peak_bytes(1.0e9, 2.7e9) == 2.7e9
    assert startup_peak_bytes(1.0e9, 0.0) == 1.0e9
    cfg = load_model("gpt-oss-120b")
    # gpt-oss at TP1 on 8,192 tokens: the routed MoE is the widest block: top-4 x (2 x 2,880 + 2,880
    # + 2,880) caches and 128 router logits, beside the residual and layer input (2 x 2,880), bf16
    forward = forward_profile_bytes(cfg, tp=1, expert_tp=1, tokens=8192, bytes_per_value=2.0)
    assert forward == 8192 * (2 * 2880 + 4 * (3 * 2880 + 2880) + 128) * 2
