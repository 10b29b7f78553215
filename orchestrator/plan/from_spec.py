"""Build PlanInputs from a loaded SweepSpec: catalog lookups, dtypes, engine limits, assumptions."""

from __future__ import annotations

from dataclasses import replace

from orchestrator.catalog.constants import flatten_constants
from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.catalog.profiles import Profile, family_profile, spec_profile
from orchestrator.catalog.quant import DEFAULT_INT4_GROUP_SIZE, served_weight_dtype
from orchestrator.catalog.types import GPUSpec, ModelConfig
from orchestrator.engines import EngineSettings, SettingsRequest, get_engine
from orchestrator.plan.assumptions import Assumptions
from orchestrator.plan.checks import Cluster
from orchestrator.plan.dtypes import kv_bytes_per_value, weight_bytes_per_value
from orchestrator.plan.expert_stats import load_expert_stats
from orchestrator.plan.inputs import PlanInputs
from orchestrator.plan.memory import WeightFormat, engine_sampler_profile, mxfp4_moe_backend
from orchestrator.plan.settings_grid import base_request
from orchestrator.spec.models import ModelSpec, SweepSpec
from orchestrator.spec.workload import TokenDistribution


def mean_tokens(value: int | TokenDistribution) -> int:
    return int(value) if isinstance(value, int) else round(value.mean)


def resolved_profile(spec: SweepSpec) -> tuple[Profile | None, str]:
    """The calibration profile the spec's predictions use, and why: 'spec' (named), 'default' (the
    bundled profile of the spec's GPU and engine) or 'none' (the raw preset)."""
    return spec_profile(spec.hardware.calibration, spec.hardware.gpu, spec.engine.name,
                        spec.engine.sim_scheduler)


def spec_gpu(spec: SweepSpec) -> GPUSpec:
    """The spec's GPU preset with its calibration profile and then its overrides applied."""
    hw = spec.hardware
    prof, why = resolved_profile(spec)
    if prof is None:
        return load_gpu(hw.gpu, dict(hw.overrides))
    gpu = load_gpu(hw.gpu, dict(hw.overrides), profile=prof.constants, profile_name=prof.name)
    if why in ("default", "fallback"):  # say it, since the spec did not ask for it
        _, note = family_profile(hw.gpu, spec.engine.name, spec.engine.sim_scheduler)
        gpu = replace(gpu, source=f"{gpu.source} (the bundled default for {gpu.name} + {spec.engine.name}"
                      f"{'; ' + note if note else ''}; hardware.calibration: none for the preset)")
    outside = regime_warning(prof, spec)
    if outside:
        gpu = replace(gpu, source=f"{gpu.source}; warning: {outside}")
    return gpu


def regime_warning(prof: Profile, spec: SweepSpec) -> str:
    """A warning when the spec's mean prompt or answer lies outside what the profile was fitted on (a
    profile fitted at 32-token prompts says little about 4,000-token ones); empty otherwise."""
    if not prof.regime:
        return ""
    w = spec.workload
    outside = []
    means = (("input_tokens", mean_tokens(w.input_tokens)), ("output_tokens", mean_tokens(w.output_tokens)))
    for name, value in means:
        lo_hi = prof.regime.get(name)
        if lo_hi and not lo_hi[0] <= value <= lo_hi[1]:
            outside.append(f"{name} {value} (fitted {lo_hi[0]}-{lo_hi[1]})")
    if not outside:
        return ""
    return (f"profile {prof.name} was fitted outside this workload: {', '.join(outside)}; expect larger "
            "errors than docs/fidelity.md reports in-regime")


GUESSED_CONSTANTS = ("hbm_efficiency", "compute_efficiency", "moe_compute_efficiency", "step_overhead_s",
                     "layer_overhead_s", "request_overhead_s")


def constants_used(gpu: GPUSpec) -> dict[str, object]:
    """Which profile and guessed constants a prediction used: printed and stored with every one."""
    return {"gpu": gpu.name, "profile": gpu.profile or None, "source": gpu.source,
            **{k: float(getattr(gpu, k)) for k in GUESSED_CONSTANTS}}


def constants_line(gpu: GPUSpec) -> str:
    used = constants_used(gpu)
    consts = ", ".join(f"{k}={used[k]:g}" for k in GUESSED_CONSTANTS)
    return f"profile {used['profile'] or 'none (preset)'}: {consts}; GPU figures: {gpu.source}"


def effective_constants(spec: SweepSpec) -> dict[str, float]:
    """Calibration constants and overrides as flat dotted keys (what a simulated server is given)."""
    hw = spec.hardware
    prof, _ = resolved_profile(spec)
    out = dict(prof.constants) if prof is not None else {}
    out.update(flatten_constants(dict(hw.overrides), "hardware.overrides"))
    return out


def weight_format(model: ModelSpec, cfg: ModelConfig) -> tuple[str, int, float, WeightFormat]:
    """(served dtype, quantization group size, bytes per quantized weight, bytes per matrix kind).

    A checkpoint that declares its format (quantization_config) sets dtype, group and which matrices
    stay 16-bit; a spec that names another dtype is refused (catalog/quant.py)."""
    quant = cfg.quantization
    dtype = served_weight_dtype(model.weight_dtype, "weight_dtype" in model.model_fields_set, quant)
    group = model.quant_group_size or (quant.group_size if quant and quant.group_size
                                       else DEFAULT_INT4_GROUP_SIZE)
    if quant is not None and quant.weight_dtype == "int4" and quant.group_size == 0:
        per_value = 0.5  # one scale per output channel (GPTQ group_size -1): negligible
    else:
        per_value = weight_bytes_per_value(dtype, group)
    return dtype, group, per_value, WeightFormat.of_checkpoint(per_value, quant)


def settings_request(spec: SweepSpec, cfg: ModelConfig) -> SettingsRequest:
    """What the spec says about the engine settings (None where it leaves them to the engine); where
    it lists values (a sweep's searched settings, plan/settings_grid.py), the first of each."""
    return base_request(spec, cfg)


def engine_settings(spec: SweepSpec, gpu: GPUSpec | None = None, cfg: ModelConfig | None = None,
                    engine: str | None = None, request: SettingsRequest | None = None) -> EngineSettings:
    """The settings the spec's engine (or `engine`) runs with on the spec's GPU: resolved once here,
    by the engine itself, and then read by the planner, the simulator, compile and the store.
    `request` replaces what the spec asks for (e.g. the settings a run was measured with)."""
    cfg = cfg or load_model(spec.model.name or spec.model.config_path or "")
    return get_engine(engine or spec.engine.name).resolve_settings(
        request or settings_request(spec, cfg), gpu or spec_gpu(spec), cfg
    )


def plan_inputs(spec: SweepSpec, settings: EngineSettings | None = None) -> PlanInputs:
    """What the cost model needs from the spec; `settings` replaces the spec's resolved ones (a
    candidate with other settings)."""
    cfg = load_model(spec.model.name or spec.model.config_path or "")
    gpu = spec_gpu(spec)
    gpn = spec.hardware.gpus_per_node or gpu.gpus_per_node
    dtype, group, per_value, fmt = weight_format(spec.model, cfg)
    kv_dtype = spec.model.kv_cache_dtype
    assumptions = Assumptions()
    if spec.engine.runtime_reserve_bytes is not None:
        assumptions = replace(assumptions, runtime_reserve_bytes=spec.engine.runtime_reserve_bytes)
    if spec.model.expert_popularity_sigma is not None:
        assumptions = replace(assumptions, expert_popularity_sigma=spec.model.expert_popularity_sigma)
    popularity = None
    if spec.model.expert_stats_path is not None and cfg.is_moe:
        stats = load_expert_stats(spec.model.expert_stats_path, num_experts=cfg.num_routed_experts)
        popularity = tuple(float(x) for x in stats.popularity())
    return PlanInputs(
        cfg=cfg, gpu=gpu, cluster=Cluster(spec.hardware.nodes, gpn),
        settings=settings or engine_settings(spec, gpu, cfg),
        weight_dtype=dtype,
        # vLLM runs attention in FP8 only with an FP8 KV cache; fp8 weights alone keep it in bf16.
        fp8_attention=kv_dtype == "fp8" and gpu.fp8_flops_per_s > 0,
        weight_bytes_per_value=per_value,
        weight_format=fmt,
        quant_group_size=group,
        kv_bytes_per_value=kv_bytes_per_value(kv_dtype if kv_dtype != "auto" else "bf16"),
        assumptions=assumptions,
        expert_popularity=popularity,
        num_redundant_experts=spec.engine.num_redundant_experts,
        engine=spec.engine.name,
        sampler_profile=engine_sampler_profile(spec.engine.name, spec.engine.sim_scheduler),
        mxfp4_backend=mxfp4_moe_backend(spec.engine.name, spec.engine.sim_scheduler, gpu.compute_capability,
                                        weight_dtype=dtype),
        itl_tail_fraction=itl_tail_fraction(spec),
    )


def itl_tail_fraction(spec: SweepSpec) -> float:
    """1 - percentile/100 of the tightest per-token bound when it is an ITL percentile (itl_p99_ms:
    0.01); 0 when it is on TPOT, which averages a request's gaps (plan/decode.py itl_within)."""
    bounds = [(v, metric, pct) for (metric, pct), v in spec.slo.bounds_ms().items()
              if metric in ("itl", "tpot")]
    if not bounds:
        return 0.0
    _, metric, pct = min(bounds)
    if metric != "itl" or not pct.startswith("p"):
        return 0.0
    return max(0.0, 1.0 - float(pct[1:]) / 100.0)
