"""Build PlanInputs from a loaded SweepSpec: catalog lookups, dtypes, engine limits, assumptions."""

from __future__ import annotations

from dataclasses import replace

from orchestrator.catalog.constants import flatten_constants
from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.catalog.profiles import Profile, spec_profile
from orchestrator.catalog.types import GPUSpec, ModelConfig
from orchestrator.engines import EngineSettings, SettingsRequest, get_engine
from orchestrator.plan.assumptions import Assumptions
from orchestrator.plan.checks import Cluster
from orchestrator.plan.dtypes import kv_bytes_per_value, weight_bytes_per_value
from orchestrator.plan.experts import load_expert_stats
from orchestrator.plan.planner import PlanInputs
from orchestrator.spec.models import SweepSpec
from orchestrator.spec.workload import TokenDistribution

DEFAULT_INT4_GROUP_SIZE = 128


def mean_tokens(value: int | TokenDistribution) -> int:
    return int(value) if isinstance(value, int) else round(value.mean)


def resolved_profile(spec: SweepSpec) -> tuple[Profile | None, str]:
    """The calibration profile the spec's predictions use, and why: 'spec' (named), 'default' (the
    bundled profile of the spec's GPU and engine) or 'none' (the raw preset)."""
    return spec_profile(spec.hardware.calibration, spec.hardware.gpu, spec.engine.name)


def spec_gpu(spec: SweepSpec) -> GPUSpec:
    """The spec's GPU preset with its calibration profile and then its overrides applied."""
    hw = spec.hardware
    prof, why = resolved_profile(spec)
    if prof is None:
        return load_gpu(hw.gpu, dict(hw.overrides))
    gpu = load_gpu(hw.gpu, dict(hw.overrides), profile=prof.constants, profile_name=prof.name)
    if why == "default":  # say it, since the spec did not ask for it
        gpu = replace(gpu, source=f"{gpu.source} (the bundled default for {gpu.name} + {spec.engine.name}; "
                      "hardware.calibration: none for the preset)")
    return gpu


GUESSED_CONSTANTS = ("hbm_efficiency", "compute_efficiency", "moe_compute_efficiency", "step_overhead_s",
                     "request_overhead_s")


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


def settings_request(spec: SweepSpec) -> SettingsRequest:
    """What the spec says about the engine settings (None where it leaves them to the engine)."""
    e = spec.engine
    return SettingsRequest(
        max_num_seqs=e.max_num_seqs, max_num_batched_tokens=e.max_num_batched_tokens,
        gpu_memory_utilization=e.gpu_memory_utilization, block_size=e.block_size,
        enable_chunked_prefill=e.enable_chunked_prefill, enable_prefix_caching=e.enable_prefix_caching,
        max_model_len=spec.model.max_model_len,
    )


def engine_settings(spec: SweepSpec, gpu: GPUSpec | None = None, cfg: ModelConfig | None = None,
                    engine: str | None = None, request: SettingsRequest | None = None) -> EngineSettings:
    """The settings the spec's engine (or `engine`) runs with on the spec's GPU: resolved once here,
    by the engine itself, and then read by the planner, the simulator, compile and the store.
    `request` replaces what the spec asks for (e.g. the settings a run was measured with)."""
    cfg = cfg or load_model(spec.model.name or spec.model.config_path or "")
    return get_engine(engine or spec.engine.name).resolve_settings(
        request or settings_request(spec), gpu or spec_gpu(spec), cfg
    )


def plan_inputs(spec: SweepSpec, settings: EngineSettings | None = None) -> PlanInputs:
    """What the cost model needs from the spec; `settings` replaces the spec's resolved ones (a
    candidate with other settings)."""
    cfg = load_model(spec.model.name or spec.model.config_path or "")
    gpu = spec_gpu(spec)
    gpn = spec.hardware.gpus_per_node or gpu.gpus_per_node
    group = spec.model.quant_group_size or DEFAULT_INT4_GROUP_SIZE
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
        weight_dtype=spec.model.weight_dtype,
        # vLLM runs attention in FP8 only with an FP8 KV cache; fp8 weights alone keep it in bf16.
        fp8_attention=kv_dtype == "fp8" and gpu.fp8_flops_per_s > 0,
        weight_bytes_per_value=weight_bytes_per_value(spec.model.weight_dtype, group),
        quant_group_size=group,
        kv_bytes_per_value=kv_bytes_per_value(kv_dtype if kv_dtype != "auto" else "bf16"),
        assumptions=assumptions,
        expert_popularity=popularity,
        num_redundant_experts=spec.engine.num_redundant_experts,
    )
