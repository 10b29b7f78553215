"""The `--quantization` a launch command carries, from the checkpoint the engine will load.

One function for every engine module (engines/from_spec.py calls it): the engine reads the weights'
own config.json, so orch reads the same one where it can (a local model.path, else the spec's config),
and passes the flag only to quantize an unquantized checkpoint online (catalog/quant.py has the rule
and its sources).
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.catalog.loader import load_model
from orchestrator.catalog.quant import engine_quantization_flag, read_quantization, served_weight_dtype
from orchestrator.catalog.types import CheckpointQuant
from orchestrator.errors import SpecError


def _local_checkpoint(weights_path: str | None) -> tuple[bool, CheckpointQuant | None]:
    """(found, the quantization_config) of a local weights directory's config.json; not found for an HF
    repo id or a directory without config.json."""
    if not weights_path or not weights_path.startswith(("/", "./", "../", "~")):
        return False, None
    config = Path(weights_path).expanduser() / "config.json"
    if not config.is_file():
        return False, None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"{config}: cannot read: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{config}: config must be a JSON object")
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else None
    return True, read_quantization({**data, **(text or {})}, str(config))


def launch_quantization(weight_dtype: str, weight_dtype_explicit: bool, model_ref: str,
                        weights_path: str | None = None) -> str | None:
    """`--quantization` for vLLM and SGLang, or None. `model_ref` is the spec's preset name or config
    path; `weights_path` its model.path (a local directory's config.json wins: that is what loads)."""
    found, checkpoint = _local_checkpoint(weights_path)
    if not found:
        try:
            checkpoint = load_model(model_ref).quantization
        except SpecError:
            checkpoint = None  # an unknown model is the planner's error to report
    dtype = served_weight_dtype(weight_dtype, weight_dtype_explicit, checkpoint)
    return engine_quantization_flag(dtype, checkpoint)
