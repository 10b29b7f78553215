"""Bytes per stored value for weight and KV-cache dtypes."""

from __future__ import annotations

from orchestrator.errors import SpecError

_WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int4": 0.5}
_KV_BYTES = {"auto": 2.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
SCALE_BYTES_PER_GROUP = 2.0  # one fp16 scale per quantization group


def weight_bytes_per_value(dtype: str, group_size: int = 128) -> float:
    """Bytes per weight; int4 is group-wise, adding one 2-byte scale per `group_size` values."""
    if dtype not in _WEIGHT_BYTES:
        raise SpecError(f"weight dtype {dtype!r}: expected one of {sorted(_WEIGHT_BYTES)}")
    if dtype == "int4":
        return _WEIGHT_BYTES[dtype] + SCALE_BYTES_PER_GROUP / group_size
    return _WEIGHT_BYTES[dtype]


def kv_bytes_per_value(dtype: str) -> float:
    if dtype not in _KV_BYTES:
        raise SpecError(f"kv dtype {dtype!r}: expected one of {sorted(_KV_BYTES)}")
    return _KV_BYTES[dtype]
