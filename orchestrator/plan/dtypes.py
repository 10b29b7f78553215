"""Bytes per stored value for weight and KV-cache dtypes (weight formats: catalog/quant.py)."""

from __future__ import annotations

from orchestrator.catalog.quant import weight_bytes_per_value
from orchestrator.errors import SpecError

__all__ = ["kv_bytes_per_value", "weight_bytes_per_value"]

_KV_BYTES = {"auto": 2.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}


def kv_bytes_per_value(dtype: str) -> float:
    if dtype not in _KV_BYTES:
        raise SpecError(f"kv dtype {dtype!r}: expected one of {sorted(_KV_BYTES)}")
    return _KV_BYTES[dtype]
