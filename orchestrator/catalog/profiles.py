"""Calibration profiles: fitted hardware constants (efficiencies, per-step overhead ...) for one GPU and
engine, written by `orch calibrate` and named by a spec's `hardware.calibration`.

A profile is YAML: `kind: orch-calibration-profile`, `gpu`, `engine`, `constants` (keys of
`hardware.overrides`), plus what it was fitted from (`fitted_from`, `fit`), which loading ignores.
Bundled profiles live in catalog/profiles/<name>.yaml and are named without the suffix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestrator.catalog.constants import flatten_constants
from orchestrator.catalog.loader import canonical_gpu
from orchestrator.errors import SpecError

PROFILE_KIND = "orch-calibration-profile"
_PROFILES_DIR = Path(__file__).resolve().parent / "profiles"


@dataclass(frozen=True)
class Profile:
    name: str  # file stem, or the bundled name
    gpu: str  # canonical preset name
    engine: str
    constants: dict[str, float]  # flat dotted keys
    source: str


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
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
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
    return Profile(name=path.stem, gpu=canonical_gpu(str(data["gpu"])), engine=str(data["engine"]),
                   constants=constants, source=str(data.get("source", str(path))))


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
