"""Pydantic v2 models of a sweep spec (the YAML a user writes). Units are in the field names.

The engine models live in spec/engine.py, the target models in spec/targets.py and the workload models
in spec/workload.py; this module names them too (see __all__), as the one place that holds the whole spec.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from orchestrator.catalog.constants import flatten_constants
from orchestrator.disagg import AnyLayout, DisaggLayout, is_disagg_text, parse_disagg
from orchestrator.errors import SpecError
from orchestrator.kv_handover import backend_problem
from orchestrator.layout import Layout, parse_layout
from orchestrator.spec.base import FieldError, SpecModel
from orchestrator.spec.checks import (
    MAX_DURATION_S,
    MAX_NODES,
    MAX_TOKENS,
    json_metadata,
)
from orchestrator.spec.disagg import DisaggSpec, PoolSpec
from orchestrator.spec.engine import SETTING_LISTS, EngineSpec, SecretRef
from orchestrator.spec.speculative import SpeculativeSpec
from orchestrator.spec.targets import KubernetesTarget, LocalTarget, RayTarget, TargetSpec
from orchestrator.spec.workload import SearchSpec, TokenCount, TokenDistribution, WorkloadSpec

__all__ = [
    "SETTING_LISTS",
    "AnyLayoutField",
    "DisaggSpec",
    "EngineSpec",
    "HardwareSpec",
    "KubernetesTarget",
    "LayoutField",
    "LocalTarget",
    "ModelSpec",
    "Objective",
    "PoolSpec",
    "RayTarget",
    "SLOSpec",
    "SearchSpec",
    "SecretRef",
    "SpeculativeSpec",
    "SweepSpec",
    "TargetSpec",
    "TokenCount",
    "TokenDistribution",
    "WorkloadSpec",
]


def _to_layout(value: object) -> Layout:
    if isinstance(value, Layout):
        return value
    if not isinstance(value, str):
        raise ValueError(f"layout must be a string such as 'tp8' or 'tp4x2', got {value!r}")
    try:
        return parse_layout(value)
    except SpecError as exc:
        raise ValueError(str(exc)) from None


LayoutField = Annotated[
    Layout,
    PlainValidator(_to_layout),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "pattern": r"^((tp|pp|dp)\d+|ep\d*)+(x\d+)?$", "examples": ["tp4x2"]}),
]
"""A layout written as a string (``tp4x2``), held as Layout, serialised back to its canonical string."""


def _to_any_layout(value: object) -> AnyLayout:
    if isinstance(value, Layout | DisaggLayout):
        return value
    if isinstance(value, str) and is_disagg_text(value):
        try:
            return parse_disagg(value)
        except SpecError as exc:
            raise ValueError(str(exc)) from None
    return _to_layout(value)


AnyLayoutField = Annotated[
    AnyLayout,
    PlainValidator(_to_any_layout),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "examples": ["tp4x2", "p:tp4+d:tp4"]}),
]
"""An aggregated layout (``tp4x2``) or a prefill/decode pair (``p:tp4+d:tp4``), as a string."""


class ModelSpec(SpecModel):
    """Which model to serve: a catalog preset name or a local HF ``config.json``."""

    name: str | None = Field(None, description="Catalog preset name, e.g. 'qwen2.5-72b'.")
    config_path: str | None = Field(
        None, description="Path to a local HF config.json, instead of a preset name."
    )
    path: str | None = Field(
        None, description="Weights (HF repo id or local directory) for real engines; the sim needs none."
    )
    revision: str | None = Field(None, description="Checkpoint revision (git sha or tag) of the weights.")
    weight_dtype: Literal["bf16", "fp16", "fp8", "int4", "mxfp4", "nvfp4"] = Field(
        "bf16", description="Data type the weights are served in. A checkpoint whose config.json has a "
        "quantization_config is served in that format (a different weight_dtype is refused); int4, mxfp4 "
        "and nvfp4 need such a checkpoint.",
    )
    quant_group_size: int | None = Field(
        None, gt=0, le=1 << 20,
        description="int4 quantization group size along the input dimension (default: the checkpoint's, "
        "else 128). MXFP4 and NVFP4 have fixed groups (32, 16).",
    )
    kv_cache_dtype: Literal["auto", "bf16", "fp8"] = Field(
        "auto", description="KV cache data type; 'auto' follows the activations."
    )
    max_model_len: int | None = Field(
        None, gt=0, le=MAX_TOKENS, description="Maximum context length in tokens; default: the model's own."
    )
    expert_stats_path: str | None = Field(
        None, description="MoE only: per-expert token counts (CSV or JSON, docs/expert-stats.md)."
    )
    expert_popularity_sigma: float | None = Field(
        None, ge=0, le=10,
        description="MoE only: lognormal sigma of the assumed expert popularity (0 = uniform)."
    )

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        if (self.name is None) == (self.config_path is None):
            raise ValueError("give exactly one of 'name' (a preset) or 'config_path' (a config.json)")
        return self


class HardwareSpec(SpecModel):
    """The GPUs the layouts are placed on."""

    gpu: str = Field(description="GPU preset name, e.g. 'h100-sxm'.")
    nodes: int = Field(1, gt=0, le=MAX_NODES, description="Number of nodes.")
    gpus_per_node: int | None = Field(
        None, gt=0, le=256, description="Override of the preset's GPUs per node."
    )
    overrides: dict[str, float | dict[str, float]] = Field(
        default_factory=dict,
        description="GPU preset constants to override (docs/calibration.md lists them), e.g. "
        "{hbm_efficiency: 0.6, step_overhead_s: 2e-3, intra_node: {bandwidth_bytes_per_s: 25e9, "
        "allreduce_latency_s: 8e-6}}. Applied after the calibration profile.",
    )
    calibration: str | None = Field(
        None, description="Calibration profile (orch calibrate --out FILE): a YAML path, relative to the "
        "spec file, or a catalog profile name; its constants apply on top of the GPU preset. Unset: the "
        "bundled profile fitted for this GPU and engine, if any; 'none': the raw preset.",
    )

    @field_validator("overrides")
    @classmethod
    def _known_overrides(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            flatten_constants(dict(value), "overrides")
        except SpecError as exc:
            raise ValueError(str(exc).removeprefix("overrides.").removeprefix("overrides: ")) from None
        return value


def _ms(metric: str, pct: str) -> Any:
    return Field(
        None, gt=0, le=MAX_DURATION_S * 1000,
        description=f"Upper bound on the {pct} of {metric}, in milliseconds.",
    )


class SLOSpec(SpecModel):
    """Service-level objectives, each a bound on a percentile; unset bounds are not checked."""

    ttft_p50_ms: float | None = _ms("time to first token", "p50")
    ttft_p90_ms: float | None = _ms("time to first token", "p90")
    ttft_p95_ms: float | None = _ms("time to first token", "p95")
    ttft_p99_ms: float | None = _ms("time to first token", "p99")
    itl_p50_ms: float | None = _ms("inter-token latency", "p50")
    itl_p90_ms: float | None = _ms("inter-token latency", "p90")
    itl_p95_ms: float | None = _ms("inter-token latency", "p95")
    itl_p99_ms: float | None = _ms("inter-token latency", "p99")
    tpot_p50_ms: float | None = _ms("time per output token", "p50")
    tpot_p90_ms: float | None = _ms("time per output token", "p90")
    tpot_p95_ms: float | None = _ms("time per output token", "p95")
    tpot_p99_ms: float | None = _ms("time per output token", "p99")
    e2e_p50_ms: float | None = _ms("end-to-end latency", "p50")
    e2e_p90_ms: float | None = _ms("end-to-end latency", "p90")
    e2e_p95_ms: float | None = _ms("end-to-end latency", "p95")
    e2e_p99_ms: float | None = _ms("end-to-end latency", "p99")
    # Session workloads: bounds on one turn class (first turns, or the later turns of a session).
    ttft_first_turn_p50_ms: float | None = _ms("time to first token of first turns", "p50")
    ttft_first_turn_p90_ms: float | None = _ms("time to first token of first turns", "p90")
    ttft_first_turn_p99_ms: float | None = _ms("time to first token of first turns", "p99")
    ttft_later_turns_p50_ms: float | None = _ms("time to first token of later turns", "p50")
    ttft_later_turns_p90_ms: float | None = _ms("time to first token of later turns", "p90")
    ttft_later_turns_p99_ms: float | None = _ms("time to first token of later turns", "p99")
    max_error_rate: float = Field(
        0.01, ge=0, le=1, description="Largest fraction of failed requests a passing load point may have."
    )

    def bounds_ms(self) -> dict[tuple[str, str], float]:
        """The set bounds as {(metric, percentile): ms}, e.g. {('ttft', 'p99'): 2000.0}."""
        out: dict[tuple[str, str], float] = {}
        for key, value in self.model_dump().items():
            if key.endswith("_ms") and value is not None:
                metric, pct = key.removesuffix("_ms").rsplit("_", 1)
                out[(metric, pct)] = float(value)
        return out


Objective = Literal["goodput_per_gpu", "throughput_per_gpu", "min_latency"]
RoutingPolicy = Literal["round_robin", "least_outstanding", "prefix_aware"]


class SweepSpec(SpecModel):
    """One sweep: a model on some hardware, candidate layouts, the load to measure them at, the SLO."""

    model: ModelSpec = Field(description="The model to serve.")
    hardware: HardwareSpec = Field(description="The GPUs to place layouts on.")
    engine: EngineSpec = Field(default_factory=EngineSpec, description="The serving engine.")
    target: TargetSpec = Field(default_factory=LocalTarget, description="Where to deploy.")
    workload: WorkloadSpec = Field(description="The requests and their arrival.")
    slo: SLOSpec = Field(default_factory=SLOSpec, description="Bounds a layout must meet.")
    objective: Objective = Field("goodput_per_gpu", description="What the winner maximises.")
    layouts: list[AnyLayoutField] = Field(
        min_length=1,
        description="Candidate layouts, e.g. [tp8, tp4x2, p:tp4+d:tp4] (prefill/decode pairs too).")
    disagg: DisaggSpec = Field(
        default_factory=DisaggSpec, description="How prefill/decode pairs run: KV transfer backend, router, "
        "per-pool settings.")
    routing: RoutingPolicy | list[RoutingPolicy] = Field(
        "least_outstanding",
        description="How requests are spread over a layout's replicas (orch's balancer, in the simulator "
        "and in front of served replicas): round_robin, least_outstanding, or prefix_aware (to the "
        "replica that holds the prompt's longest prefix, so a session stays with its history). A list "
        "compares them: each layout is measured under each policy.",
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="Free-form eval metadata: eval run id, dataset, checkpoint ... JSON values only; "
        "YAML dates and timestamps become ISO 8601 strings.",
    )
    cost_per_gpu_hour: float | None = Field(
        None, gt=0, description="Price of one GPU for an hour; gives cost per million output tokens."
    )
    currency: str | None = Field(None, min_length=1, description="Currency of cost_per_gpu_hour, e.g. USD.")
    interactivity_tokens_per_s_per_user: float | None = Field(
        None, gt=0, description="Interactivity target: output tokens/s each user sees (1000 / TPOT ms); "
        "the sweep reports throughput per GPU at the highest load that still gives it."
    )

    @field_validator("routing")
    @classmethod
    def _routing(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise ValueError("give at least one policy")
            if len(set(value)) != len(value):
                raise ValueError("a policy is listed twice")
        return value

    def routing_policies(self) -> list[RoutingPolicy]:
        return list(self.routing) if isinstance(self.routing, list) else [self.routing]

    @model_validator(mode="after")
    def _priced(self) -> SweepSpec:
        if self.cost_per_gpu_hour is not None and self.currency is None:
            raise ValueError("cost_per_gpu_hour needs a currency, e.g. currency: USD")
        return self

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> Any:
        return json_metadata(value) if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _disagg(self) -> SweepSpec:
        d, engine = self.disagg, self.engine.name
        for role, pool in (("prefill", d.prefill), ("decode", d.decode)):
            if pool.engine is not None and pool.engine != engine:
                raise ValueError(
                    f"disagg.{role}.engine: {pool.engine}, but engine.name is {engine}; a KV handover needs "
                    f"one engine on both pools (each has its own KV layout and transfer protocol): set it to "
                    f"{engine} or remove it")
        if any(isinstance(x, DisaggLayout) for x in self.layouts) or d.transfer_backend is not None:
            problem = backend_problem(engine, d.transfer_backend)
            if problem is not None:
                raise ValueError(f"disagg.transfer_backend: {problem}")
        return self

    @model_validator(mode="after")
    def _unique_layouts(self) -> SweepSpec:
        seen: dict[AnyLayout, int] = {}
        for index, layout in enumerate(self.layouts):
            if layout in seen:
                raise FieldError(f"layout {layout} is listed twice (first as layouts[{seen[layout]}]); "
                                 "keep one", ("layouts", index))
            seen[layout] = index
        if isinstance(self.target, KubernetesTarget):
            for name, ref in self.engine.env_from_secret.items():
                if ref.secret is None:
                    raise ValueError(
                        f"engine.env_from_secret.{name}: the kubernetes target needs 'secret' "
                        "(the name of the Secret holding the value)"
                    )
        return self
