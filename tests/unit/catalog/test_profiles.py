"""A spec without `hardware.calibration` uses the bundled profile fitted for its GPU and engine family
(a TensorRT-LLM profile never applies to a vLLM spec; the simulator is calibrated as the engine whose
scheduler it runs; SGLang falls back to vLLM's, said so); `calibration: none` keeps the raw preset;
every prediction names the profile it used and warns outside the regime the profile was fitted in."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.catalog.loader import load_gpu
from orchestrator.catalog.profiles import bundled_profile_name, default_profile, load_profile, profile_names
from orchestrator.compile import sim_options
from orchestrator.plan.from_spec import constants_line, effective_constants, plan_inputs, resolved_profile
from orchestrator.plan.run import make_plan
from orchestrator.spec.models import SweepSpec


def _spec(engine: str, gpu: str = "h100-sxm", **hardware: Any) -> SweepSpec:
    return SweepSpec.model_validate({
        "model": {"name": "llama-3.1-8b"}, "hardware": {"gpu": gpu, **hardware},
        "engine": {"name": engine},
        "workload": {"input_tokens": 128, "output_tokens": 64, "rates_per_s": [1.0], "num_requests": 4},
        "layouts": ["tp1"],
    })


def test_a_vllm_spec_gets_the_vllm_profile_of_its_gpu() -> None:
    spec = _spec("vllm")
    prof, why = resolved_profile(spec)
    assert prof is not None and why == "default"
    assert prof.name == "vllm-h100-sxm" and prof.engine == "vllm" and prof.gpu == "h100-sxm"
    gpu = plan_inputs(spec).gpu
    assert gpu.profile == "vllm-h100-sxm"
    for key, value in prof.constants.items():
        assert getattr(gpu, key) == value
    assert gpu.hbm_efficiency != load_gpu("h100-sxm").hbm_efficiency
    # Said in every prediction: the plan's JSON and the constants line of orch simulate.
    assert make_plan(spec, batches=(1,)).to_dict()["gpu_profile"] == "vllm-h100-sxm"
    line = constants_line(gpu)
    assert "profile vllm-h100-sxm" in line and "bundled default for h100-sxm + vllm" in line
    assert f"hbm_efficiency={gpu.hbm_efficiency:g}" in line


@pytest.mark.parametrize("gpu,name", [("h200", "vllm-h200"), ("a100", "vllm-a100-sxm-80gb")])
def test_each_gpu_gets_its_own_profile(gpu: str, name: str) -> None:
    assert plan_inputs(_spec("vllm", gpu)).gpu.profile == name


def test_calibration_none_keeps_the_preset() -> None:
    spec = _spec("vllm", calibration="none")
    assert resolved_profile(spec) == (None, "none")
    gpu = plan_inputs(spec).gpu
    preset = load_gpu("h100-sxm")
    assert gpu.profile == "" and gpu.hbm_efficiency == preset.hbm_efficiency
    assert gpu.step_overhead_s == preset.step_overhead_s
    assert "profile none (preset)" in constants_line(gpu)


@pytest.mark.parametrize(("engine", "scheduler", "name", "why"), [
    ("sim", "vllm", "vllm-h100-sxm", "default"),  # the simulator runs vLLM's scheduler by default
    ("sim", "guaranteed-no-evict", "trtllm-h100-sxm", "default"),  # ... or TensorRT-LLM's
    ("sglang", "vllm", "vllm-h100-sxm", "fallback"),  # no SGLang profile: vLLM's, said so
])
def test_profiles_match_by_engine_family_and_say_the_fallback(engine: str, scheduler: str, name: str,
                                                               why: str) -> None:
    spec = _spec(engine)
    spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"sim_scheduler": scheduler})})
    prof, got = resolved_profile(spec)
    assert prof is not None and prof.name == name and got == why
    gpu = plan_inputs(spec).gpu
    assert gpu.profile == name
    if why == "fallback":
        assert "no sglang profile for h100-sxm: the vllm one, the nearest engine" in constants_line(gpu)
    if engine == "sim":
        assert effective_constants(spec) == prof.constants  # what the simulated server is given
        assert any("hbm_efficiency" in a for a in sim_options(spec).argv())


def test_a_profile_warns_outside_the_regime_it_was_fitted_in() -> None:
    prof = load_profile("vllm-h100-sxm")
    assert prof.regime is not None
    lo, hi = prof.regime["input_tokens"]
    inside = _spec("vllm").model_copy(update={"workload": _spec("vllm").workload.model_copy(
        update={"input_tokens": lo, "output_tokens": prof.regime["output_tokens"][0]})})
    assert "warning" not in plan_inputs(inside).gpu.source
    longer = inside.workload.model_copy(update={"input_tokens": hi * 4})
    outside = inside.model_copy(update={"workload": longer})
    line = constants_line(plan_inputs(outside).gpu)
    assert f"input_tokens {hi * 4} (fitted {lo}-{hi})" in line


def test_a_named_profile_wins_over_the_default() -> None:
    spec = _spec("vllm", calibration="trtllm-h100-sxm")  # named, so not silent
    prof, why = resolved_profile(spec)
    assert prof is not None and prof.name == "trtllm-h100-sxm" and why == "spec"
    assert plan_inputs(spec).gpu.hbm_efficiency == load_profile("trtllm-h100-sxm").constants["hbm_efficiency"]


def test_bundled_profiles_are_unique_per_gpu_and_engine_and_sourced() -> None:
    seen: set[tuple[str, str]] = set()
    for name in profile_names():
        prof = load_profile(name)
        assert (prof.gpu, prof.engine) not in seen, name
        seen.add((prof.gpu, prof.engine))
        assert name == bundled_profile_name(prof.gpu, prof.engine)  # a default is found by its name
        assert default_profile(prof.gpu, prof.engine) == prof
        assert "fidelity_cases.yaml" in prof.source, name  # fitted to published, cited cases
    assert default_profile("h100-sxm", "vllm") != default_profile("h100-sxm", "tensorrt-llm")
