"""The base of every spec model: strict (unknown keys refused), frozen, finite floats."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# allow_inf_nan=False: every float of the spec is finite (".inf" and ".nan" are valid YAML floats).
_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SpecModel(BaseModel):
    model_config = _CONFIG


class FieldError(ValueError):
    """A model validator's error about one entry of a field (`layouts[2]` listed twice): the spec loader
    reports it at that entry's line instead of the model's."""

    def __init__(self, message: str, path: tuple[str | int, ...]) -> None:
        super().__init__(message)
        self.path = path
