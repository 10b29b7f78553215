"""The sweep spec: pydantic models of the YAML and a loader with file:line errors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.spec.checks import ENV_NAME as ENV_NAME
    from orchestrator.spec.checks import MAX_COUNT as MAX_COUNT
    from orchestrator.spec.checks import MAX_DURATION_S as MAX_DURATION_S
    from orchestrator.spec.checks import MAX_TOKENS as MAX_TOKENS
    from orchestrator.spec.checks import is_host as is_host
    from orchestrator.spec.disagg import PoolSpec as PoolSpec
    from orchestrator.spec.engine import SETTING_LISTS as SETTING_LISTS
    from orchestrator.spec.engine import EngineSpec as EngineSpec
    from orchestrator.spec.files import MAX_DATA_FILE_BYTES as MAX_DATA_FILE_BYTES
    from orchestrator.spec.files import read_user_text as read_user_text
    from orchestrator.spec.load import LoadedSpec as LoadedSpec
    from orchestrator.spec.load import load_spec as load_spec
    from orchestrator.spec.load import load_spec_lines as load_spec_lines
    from orchestrator.spec.load import parse_spec as parse_spec
    from orchestrator.spec.load import revalidated as revalidated
    from orchestrator.spec.load import spec_from_json as spec_from_json
    from orchestrator.spec.load import spec_hash as spec_hash
    from orchestrator.spec.load import spec_json_schema as spec_json_schema
    from orchestrator.spec.load import with_workload as with_workload
    from orchestrator.spec.models import HardwareSpec as HardwareSpec
    from orchestrator.spec.models import ModelSpec as ModelSpec
    from orchestrator.spec.models import SLOSpec as SLOSpec
    from orchestrator.spec.models import SweepSpec as SweepSpec
    from orchestrator.spec.speculative import SpeculativeSpec as SpeculativeSpec
    from orchestrator.spec.targets import KubernetesTarget as KubernetesTarget
    from orchestrator.spec.targets import LocalTarget as LocalTarget
    from orchestrator.spec.targets import RayTarget as RayTarget
    from orchestrator.spec.targets import TargetSpec as TargetSpec
    from orchestrator.spec.workload import AgenticSpec as AgenticSpec
    from orchestrator.spec.workload import ConversationSpec as ConversationSpec
    from orchestrator.spec.workload import Count as Count
    from orchestrator.spec.workload import SearchSpec as SearchSpec
    from orchestrator.spec.workload import Seconds as Seconds
    from orchestrator.spec.workload import SecondsDistribution as SecondsDistribution
    from orchestrator.spec.workload import TokenDistribution as TokenDistribution
    from orchestrator.spec.workload import WorkloadSpec as WorkloadSpec

__getattr__, __all__ = lazy_face(__name__, {
    "checks": ("ENV_NAME", "MAX_COUNT", "MAX_DURATION_S", "MAX_TOKENS", "is_host",),
    "files": ("MAX_DATA_FILE_BYTES", "read_user_text",),
    "load": (
        "LoadedSpec", "load_spec", "load_spec_lines", "parse_spec", "revalidated", "spec_from_json",
        "spec_hash", "spec_json_schema", "with_workload",
    ),
    "engine": ("EngineSpec", "SETTING_LISTS",),
    "models": ("HardwareSpec", "ModelSpec", "SLOSpec", "SweepSpec",),
    "targets": ("KubernetesTarget", "LocalTarget", "RayTarget", "TargetSpec",),
    "workload": (
        "AgenticSpec", "ConversationSpec", "Count", "SearchSpec", "Seconds", "SecondsDistribution",
        "TokenDistribution", "WorkloadSpec",
    ),
    "speculative": ("SpeculativeSpec",),
    "disagg": ("PoolSpec",),
})  # fmt: skip
