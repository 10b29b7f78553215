"""Model presets (HF config.json files) and GPU/interconnect presets, as data plus a loader."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.catalog.checkpoint import launch_quantization as launch_quantization
    from orchestrator.catalog.constants import flatten_constants as flatten_constants
    from orchestrator.catalog.loader import canonical_gpu as canonical_gpu
    from orchestrator.catalog.loader import gpu_names as gpu_names
    from orchestrator.catalog.loader import load_gpu as load_gpu
    from orchestrator.catalog.loader import load_model as load_model
    from orchestrator.catalog.loader import model_names as model_names
    from orchestrator.catalog.profiles import Profile as Profile
    from orchestrator.catalog.profiles import family_profile as family_profile
    from orchestrator.catalog.profiles import spec_profile as spec_profile
    from orchestrator.catalog.profiles import write_profile as write_profile
    from orchestrator.catalog.quant import DEFAULT_INT4_GROUP_SIZE as DEFAULT_INT4_GROUP_SIZE
    from orchestrator.catalog.quant import served_weight_dtype as served_weight_dtype
    from orchestrator.catalog.quant import weight_bytes_per_value as weight_bytes_per_value
    from orchestrator.catalog.types import ATTENTION_KINDS as ATTENTION_KINDS
    from orchestrator.catalog.types import CHUNKED as CHUNKED
    from orchestrator.catalog.types import FULL as FULL
    from orchestrator.catalog.types import LINEAR as LINEAR
    from orchestrator.catalog.types import MAMBA as MAMBA
    from orchestrator.catalog.types import SLIDING as SLIDING
    from orchestrator.catalog.types import CheckpointQuant as CheckpointQuant
    from orchestrator.catalog.types import GPUSpec as GPUSpec
    from orchestrator.catalog.types import LinkSpec as LinkSpec
    from orchestrator.catalog.types import ModelConfig as ModelConfig

__getattr__, __all__ = lazy_face(__name__, {
    "checkpoint": ("launch_quantization",),
    "constants": ("flatten_constants",),
    "loader": ("canonical_gpu", "gpu_names", "load_gpu", "load_model", "model_names",),
    "profiles": ("Profile", "family_profile", "spec_profile", "write_profile",),
    "quant": ("DEFAULT_INT4_GROUP_SIZE", "served_weight_dtype", "weight_bytes_per_value",),
    "types": ("ATTENTION_KINDS", "CHUNKED", "FULL", "LINEAR", "MAMBA", "SLIDING", "CheckpointQuant",
              "GPUSpec", "LinkSpec", "ModelConfig",),
})  # fmt: skip
