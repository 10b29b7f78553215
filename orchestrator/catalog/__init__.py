"""Model presets (HF config.json files) and GPU/interconnect presets, as data plus a loader."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.catalog.constants import flatten_constants as flatten_constants
    from orchestrator.catalog.loader import canonical_gpu as canonical_gpu
    from orchestrator.catalog.loader import gpu_names as gpu_names
    from orchestrator.catalog.loader import load_gpu as load_gpu
    from orchestrator.catalog.loader import load_model as load_model
    from orchestrator.catalog.loader import model_names as model_names
    from orchestrator.catalog.profiles import Profile as Profile
    from orchestrator.catalog.profiles import spec_profile as spec_profile
    from orchestrator.catalog.profiles import write_profile as write_profile
    from orchestrator.catalog.types import GPUSpec as GPUSpec
    from orchestrator.catalog.types import LinkSpec as LinkSpec
    from orchestrator.catalog.types import ModelConfig as ModelConfig

__getattr__, __all__ = lazy_face(__name__, {
    "constants": ("flatten_constants",),
    "loader": ("canonical_gpu", "gpu_names", "load_gpu", "load_model", "model_names",),
    "profiles": ("Profile", "spec_profile", "write_profile",),
    "types": ("GPUSpec", "LinkSpec", "ModelConfig",),
})  # fmt: skip
