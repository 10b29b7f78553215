"""The base of every spec model: strict (unknown keys refused), frozen, finite floats."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# allow_inf_nan=False: every float of the spec is finite (".inf" and ".nan" are valid YAML floats).
_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SpecModel(BaseModel):
    model_config = _CONFIG
