"""Validation of hardware constants (GPU preset fields, `hardware.overrides`, calibration profiles).

Kept apart from the loader so that the spec models can check overrides without importing the
catalog's file loading (which imports the spec's file helpers).
"""

from __future__ import annotations

import difflib
from typing import Any

from orchestrator.catalog.types import EFFICIENCIES, LINKS, MAY_BE_ZERO, override_keys
from orchestrator.errors import SpecError


def check_number(value: Any, where: str, *, allow_zero: bool = True) -> float:
    if isinstance(value, bool):
        raise SpecError(f"{where}: expected a number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise SpecError(f"{where}: expected a number, got {value!r}") from None
    if x != x or x in (float("inf"), float("-inf")) or x < 0 or (x == 0 and not allow_zero):
        raise SpecError(f"{where}: must be {'non-negative' if allow_zero else 'positive'}, got {value!r}")
    return x


def check_constant(key: str, value: Any, where: str) -> float:
    """One hardware constant, validated: efficiencies in (0, 1], latencies/overheads >= 0, rest > 0."""
    name = key.rsplit(".", 1)[-1]
    x = check_number(value, where, allow_zero=name in MAY_BE_ZERO)
    if name in EFFICIENCIES and not 0 < x <= 1:
        raise SpecError(f"{where}: must be in (0, 1], got {value!r}")
    if name == "gpus_per_node" and x != int(x):
        raise SpecError(f"{where}: must be a positive integer, got {value!r}")
    return x


def flatten_constants(values: dict[str, Any], where: str) -> dict[str, float]:
    """Hardware constants as flat dotted keys (`intra_node.bandwidth_bytes_per_s`), validated.

    Links may be given nested (`intra_node: {bandwidth_bytes_per_s: 25e9}`) or dotted. An unknown key is
    one error line listing the valid ones.
    """
    if not isinstance(values, dict):
        raise SpecError(f"{where}: expected a mapping of hardware constants, got {values!r}")
    valid = override_keys()
    out: dict[str, float] = {}
    for key, value in values.items():
        key = str(key)
        if key in LINKS and isinstance(value, dict):
            for sub, v in value.items():
                dotted = f"{key}.{sub}"
                if dotted not in valid:
                    raise SpecError(f"{where}: unknown key {dotted!r}; valid keys: {', '.join(valid)}")
                out[dotted] = check_constant(dotted, v, f"{where}.{dotted}")
            continue
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(f"{where}: unknown key {key!r}{hint}; valid keys: {', '.join(valid)}")
        out[key] = check_constant(key, value, f"{where}.{key}")
    return out
