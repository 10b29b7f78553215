"""Engine settings as searched axes: the spec's lists expanded into one request per combination.

Any of `engine.max_num_seqs`, `max_num_batched_tokens`, `gpu_memory_utilization`, `block_size`,
`enable_chunked_prefill`, `enable_prefix_caching` may be a list, and so may
`engine.speculative.num_speculative_tokens` (0 in that list: without speculation). A sweep's candidates
are its layouts times these combinations (pipeline/candidates.py); the first combination (every
list's first value) is the sweep's base, what `orch plan`, `compile` and `simulate` use for the spec
as a whole. A candidate's name shows the values of the axes that vary, in this order:
`tp8 max_num_seqs=64 ngram k=4`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from orchestrator.catalog.profiles import spec_profile
from orchestrator.catalog.types import ModelConfig
from orchestrator.engines.settings import SettingsRequest, speculative_label
from orchestrator.plan.speculative import SpeculativeSettings, speculative_choices, with_measured_acceptance
from orchestrator.spec.models import SETTING_LISTS, SweepSpec

SPECULATIVE = "speculative"


@dataclass(frozen=True)
class Axis:
    """One searched setting and its values, in the spec's order."""

    name: str  # a SettingsRequest field, or SPECULATIVE
    values: tuple[Any, ...]

    def label(self, value: Any) -> str:
        if self.name == SPECULATIVE:
            spec: SpeculativeSettings | None = value
            return speculative_label(spec)
        text = ("on" if value else "off") if isinstance(value, bool) else f"{value:g}" if isinstance(
            value, float) else str(value)
        return f"{self.name}={text}"


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) else value


def choices(spec: SweepSpec, cfg: ModelConfig) -> tuple[SpeculativeSettings | None, ...]:
    """The spec's speculative settings, one per k, with the acceptance its calibration profile measured
    for the method in place of the assumed one (orch calibrate; docs/speculative.md)."""
    sp = spec.engine.speculative
    if sp is None:
        return (None,)
    found = speculative_choices(sp, cfg)
    hw = spec.hardware
    profile, _ = spec_profile(hw.calibration, hw.gpu, spec.engine.name)
    measured = profile.acceptance.get(sp.method) if profile is not None else None
    if measured is None:
        return found
    return tuple(None if s is None else with_measured_acceptance(s, measured) for s in found)


def setting_axes(spec: SweepSpec, cfg: ModelConfig) -> tuple[Axis, ...]:
    """The axes the spec searches (lists of more than one value), in a fixed order."""
    axes = [Axis(name, tuple(v)) for name in SETTING_LISTS
            if isinstance(v := getattr(spec.engine, name), list) and len(v) > 1]
    if spec.engine.speculative is not None:
        choices_ = choices(spec, cfg)
        if len(choices_) > 1:
            axes.append(Axis(SPECULATIVE, choices_))
    return tuple(axes)


def settings_requests(spec: SweepSpec, cfg: ModelConfig) -> tuple[tuple[SettingsRequest, str], ...]:
    """(request, the varying axes' labels) per combination; the first is the base."""
    e = spec.engine
    fixed: dict[str, Any] = {name: _first(getattr(e, name)) for name in SETTING_LISTS}
    fixed["max_model_len"] = spec.model.max_model_len
    fixed[SPECULATIVE] = choices(spec, cfg)[0]
    axes = setting_axes(spec, cfg)
    out = []
    for combo in itertools.product(*(a.values for a in axes)):
        values = dict(fixed)
        values.update({a.name: v for a, v in zip(axes, combo, strict=True)})
        label = " ".join(a.label(v) for a, v in zip(axes, combo, strict=True))
        out.append((SettingsRequest(**values), label))
    return tuple(out)


def base_request(spec: SweepSpec, cfg: ModelConfig) -> SettingsRequest:
    """What the spec asks for as one engine: every list's first value."""
    return settings_requests(spec, cfg)[0][0]
