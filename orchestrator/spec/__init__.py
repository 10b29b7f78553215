"""The sweep spec: pydantic models of the YAML and a loader with file:line errors."""

from orchestrator.spec.load import load_spec, parse_spec, spec_hash, spec_json_schema
from orchestrator.spec.models import (
    EngineSpec,
    HardwareSpec,
    KubernetesTarget,
    LocalTarget,
    ModelSpec,
    RayTarget,
    SLOSpec,
    SweepSpec,
    WorkloadSpec,
)

__all__ = [
    "EngineSpec",
    "HardwareSpec",
    "KubernetesTarget",
    "LocalTarget",
    "ModelSpec",
    "RayTarget",
    "SLOSpec",
    "SweepSpec",
    "WorkloadSpec",
    "load_spec",
    "parse_spec",
    "spec_hash",
    "spec_json_schema",
]
