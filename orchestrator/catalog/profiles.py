"""Calibration profiles: fitted hardware constants (efficiencies, per-step overhead ...) for one GPU and
engine, written by `orch calibrate` and named by a spec's `hardware.calibration`.

A profile is YAML: `kind: orch-calibration-profile`, `gpu`, `engine`, `constants` (keys of
`hardware.overrides`), plus what it was fitted from (`fitted_from`, `fit`), which loading ignores.
Bundled profiles live in catalog/profiles/<name>.yaml and are named without the suffix.

Defaults: a spec without `hardware.calibration` gets the bundled profile fitted for its GPU and its
engine's family (`engine_family`): vLLM's for `vllm`; for `sim`, the family whose scheduler it runs
(vLLM's by default, TensorRT-LLM's with `sim_scheduler: guaranteed-no-evict`); for `sglang`, SGLang's,
and where none is bundled, vLLM's (the nearest engine), said in the prediction's constants line.
`calibration: none` keeps the raw preset. A profile records the regime it was fitted in (`regime`:
prompt and output lengths); a spec outside it gets a warning (plan/from_spec.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from orchestrator.catalog.constants import flatten_constants
from orchestrator.catalog.loader import canonical_gpu
from orchestrator.errors import SpecError

PROFILE_KIND = "orch-calibration-profile"
NO_PROFILE = "none"  # hardware.calibration: none = the preset as it is, no default profile
_PROFILES_DIR = Path(__file__).resolve().parent / "profiles"


@dataclass(frozen=True)
class Profile:
    name: str  # file stem, or the bundled name
    gpu: str  # canonical preset name
    engine: str
    constants: dict[str, float]  # flat dotted keys
    source: str
    regime: dict[str, tuple[int, int]] | None = None  # {input_tokens: (min, max), output_tokens: (...)}
    # Speculative decoding's acceptance per position as measured (orch calibrate), by method; what a spec
    # of the same method predicts with instead of its assumed acceptance_rate (docs/speculative.md).
    acceptance: dict[str, tuple[float, ...]] = field(default_factory=dict)


def profile_names() -> list[str]:
    return sorted(p.stem for p in _PROFILES_DIR.glob("*.yaml"))


def _path_of(ref: str) -> Path:
    if ref in profile_names():
        return _PROFILES_DIR / f"{ref}.yaml"
    path = Path(ref).expanduser()
    if not path.is_file():
        known = ", ".join(profile_names()) or "none"
        raise SpecError(f"hardware.calibration {ref!r}: no such file (bundled profiles: {known}); "
                        "write one with orch calibrate RUN --out FILE")
    return path


def load_profile(ref: str) -> Profile:
    """A bundled profile name or a profile YAML file; every problem is one SpecError line."""
    path = _path_of(ref)
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's when there: faster
        data: Any = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError(f"{path}: not a calibration profile (invalid YAML: {first})") from None
    if not isinstance(data, dict) or data.get("kind") != PROFILE_KIND:
        raise SpecError(f"{path}: not a calibration profile (expected 'kind: {PROFILE_KIND}'); "
                        "write one with orch calibrate RUN --out FILE")
    for key in ("gpu", "engine", "constants"):
        if key not in data:
            raise SpecError(f"{path}: calibration profile misses {key!r}")
    constants = flatten_constants(data["constants"] or {}, f"{path}: constants")
    regime = None
    raw = data.get("regime")
    if isinstance(raw, dict):
        regime = {str(k): (int(v[0]), int(v[1])) for k, v in raw.items()
                  if isinstance(v, list | tuple) and len(v) == 2}
    return Profile(name=path.stem, gpu=canonical_gpu(str(data["gpu"])), engine=str(data["engine"]),
                   constants=constants, source=str(data.get("source", str(path))), regime=regime,
                   acceptance=_acceptance(data.get("acceptance"), path))


def _acceptance(raw: Any, path: Path) -> dict[str, tuple[float, ...]]:
    """The profile's measured acceptance: {method: [rate per position]}, each rate in [0, 1]."""
    if raw is None:
        return {}
    bad = SpecError(f"{path}: acceptance: a mapping of method to rates per position in [0, 1], e.g. "
                    "{ngram: [0.3, 0.85]}")
    if not isinstance(raw, dict):
        raise bad
    out = {}
    for method, rates in raw.items():
        if (not isinstance(rates, list) or not rates
                or not all(isinstance(a, (int, float)) and not isinstance(a, bool) and 0 <= a <= 1
                           for a in rates)):
            raise bad
        out[str(method)] = tuple(float(a) for a in rates)
    return out


# Bundled profiles are named <engine>-<GPU preset> (bench/fit_profiles.py --write names them so), with
# these engines' shorter names; a default is found by its name, so a command reads that one file only.
BUNDLED_ENGINE_NAMES = {"tensorrt-llm": "trtllm"}


def bundled_profile_name(gpu: str, engine: str) -> str:
    """The name of the bundled profile for this GPU (preset name or alias) and engine, bundled or not."""
    return f"{BUNDLED_ENGINE_NAMES.get(engine, engine)}-{canonical_gpu(gpu)}"


def default_profile(gpu: str, engine: str) -> Profile | None:
    """The bundled profile fitted on this GPU for this engine, or None. Engines match exactly (a
    profile fitted on TensorRT-LLM measurements is not a vLLM one)."""
    name = bundled_profile_name(gpu, engine)
    if not (_PROFILES_DIR / f"{name}.yaml").is_file():
        return None
    prof = _bundled(name)
    if (prof.gpu, prof.engine) != (canonical_gpu(gpu), engine):  # a packaging bug, pinned by a test
        raise SpecError(f"bundled profile {name} was fitted on {prof.gpu} + {prof.engine}, not what its name "
                        f"says; name it {bundled_profile_name(prof.gpu, prof.engine)}")
    return prof


@cache
def _bundled(name: str) -> Profile:
    """A bundled profile, read once per process (every prediction looks its default up)."""
    return load_profile(name)


# The engine whose profile stands in where an engine has none bundled (said where it is used).
FALLBACK_FAMILY = {"sglang": "vllm"}


def engine_family(engine: str, sim_scheduler: str = "vllm") -> str:
    """The engine a spec's predictions are calibrated as: the simulator as the engine whose scheduler
    it runs (engine.sim_scheduler)."""
    if engine == "sim":
        return "tensorrt-llm" if sim_scheduler == "guaranteed-no-evict" else "vllm"
    return engine


def family_profile(gpu: str, engine: str, sim_scheduler: str = "vllm") -> tuple[Profile | None, str]:
    """The bundled profile for this GPU and engine family, else the fallback family's; and a note
    saying which (empty when the engine's own family matched)."""
    family = engine_family(engine, sim_scheduler)
    prof = default_profile(gpu, family)
    if prof is not None:
        note = "" if family == engine else f"the {engine} engine runs {family}'s scheduler"
        return prof, note
    fallback = FALLBACK_FAMILY.get(family)
    if fallback is not None and (prof := default_profile(gpu, fallback)) is not None:
        return prof, f"no {family} profile for {canonical_gpu(gpu)}: the {fallback} one, the nearest engine"
    return None, f"no {family} profile for {canonical_gpu(gpu)}"


def spec_profile(calibration: str | None, gpu: str, engine: str,
                 sim_scheduler: str = "vllm") -> tuple[Profile | None, str]:
    """The profile a spec's hardware uses and why: ('spec') named by `hardware.calibration`,
    ('default') the bundled one of its GPU + engine family, ('fallback') another family's
    (family_profile), ('none') the raw preset."""
    if calibration is None:
        prof, note = family_profile(gpu, engine, sim_scheduler)
        if prof is None:
            return None, "none"
        return prof, ("fallback" if note.startswith("no ") else "default")
    if calibration.strip().lower() == NO_PROFILE:
        return None, "none"
    return profile_for(calibration, gpu), "spec"


def profile_for(ref: str, gpu: str) -> Profile:
    """The profile `ref`, checked against the spec's GPU (a profile of another GPU is an error)."""
    prof = load_profile(ref)
    if prof.gpu != canonical_gpu(gpu):
        raise SpecError(f"hardware.calibration {ref!r}: the profile was fitted on {prof.gpu}, the spec's GPU "
                        f"is {canonical_gpu(gpu)}; calibrate from runs on {canonical_gpu(gpu)}")
    return prof


def write_profile(path: str | Path, *, gpu: str, engine: str, constants: dict[str, float],
                  source: str, extra: dict[str, Any]) -> None:
    body = {"kind": PROFILE_KIND, "gpu": gpu, "engine": engine, "source": source,
            "constants": {k: float(v) for k, v in sorted(constants.items())}, **extra}
    Path(path).write_text(yaml.safe_dump(body, sort_keys=False, width=110), encoding="utf-8")
