"""The engine settings a candidate runs with, resolved once per engine from the spec and the GPU.

`EngineSettings` is the one value the planner, the simulator (in process and the simulated server's
argv), the launch command of every engine, the store and `orch plan --json` read. Each engine fills
what the spec leaves unset with its own default for that GPU and version (engines/vllm.py,
engines/sglang.py, engines/sim.py: `resolve_settings`), and records where every value came from, so
a prediction and a deployment describe the same engine. No other module holds these numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from orchestrator.errors import SpecError

#: The settings, in the order they are printed and stored.
SETTINGS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "block_size",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "max_model_len",
)
FROM_SPEC = "spec"


@dataclass(frozen=True)
class SettingsRequest:
    """What the spec (or a caller, e.g. one entry of a settings list) asks for; None: the engine's
    default for the GPU and version."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    block_size: int | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    max_model_len: int | None = None


@dataclass(frozen=True)
class EngineSettings:
    """What one engine runs with; `sources` says, per setting, whether the spec set it or which rule of
    which engine version chose it."""

    engine: str
    engine_version: str  # the release whose defaults and flags these are (vLLM 0.33.0, SGLang 0.5.23)
    max_num_seqs: int  # sequences one engine (one DP rank) schedules at once
    max_num_batched_tokens: int  # tokens one engine step computes (the chunked-prefill budget)
    gpu_memory_utilization: float  # fraction of each GPU's memory for weights and KV cache (and more)
    block_size: int  # tokens per paged-KV block
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    max_model_len: int  # longest request (prompt + output) in tokens
    sources: tuple[tuple[str, str], ...] = ()  # (setting, where its value came from)

    def __post_init__(self) -> None:
        # One spelling of the same sources: in SETTINGS order, the spec's own values left implicit.
        given = dict(self.sources)
        object.__setattr__(self, "sources", tuple(
            (name, given[name]) for name in SETTINGS if given.get(name, FROM_SPEC) != FROM_SPEC
        ))
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "max_model_len"):
            if getattr(self, name) < 1:
                raise SpecError(f"engine {name}: must be >= 1, got {getattr(self, name)}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise SpecError(
                f"engine gpu_memory_utilization: must be in (0, 1], got {self.gpu_memory_utilization}"
            )

    def source(self, name: str) -> str:
        return dict(self.sources).get(name, FROM_SPEC)

    def values(self) -> dict[str, int | float | bool]:
        """{setting: value}, in SETTINGS order."""
        return {name: getattr(self, name) for name in SETTINGS}

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "engine_version": self.engine_version, **self.values(),
                "sources": {name: self.source(name) for name in SETTINGS}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineSettings:
        """The inverse of to_dict (a stored run's settings)."""
        known = {f.name for f in fields(cls)} - {"sources"}
        sources = tuple((k, str(v)) for k, v in (d.get("sources") or {}).items())
        return cls(**{k: v for k, v in d.items() if k in known}, sources=sources)

    def request(self) -> SettingsRequest:
        """These values as a request: another engine resolving it keeps every one of them."""
        return SettingsRequest(**{name: getattr(self, name) for name in SETTINGS})

    def differences(self, other: EngineSettings) -> tuple[str, ...]:
        """`name=value` of each setting that differs from `other`'s (a candidate's name shows them)."""
        return tuple(f"{name}={_text(getattr(self, name))}" for name in SETTINGS
                     if getattr(self, name) != getattr(other, name))


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def chosen(request: SettingsRequest, name: str, default: Any, rule: str,
           sources: list[tuple[str, str]]) -> Any:
    """The request's value for `name` if it has one, else `default`; the source goes into `sources`."""
    value = getattr(request, name)
    if value is not None:
        return value
    sources.append((name, rule))
    return default
