"""The small simulated-engine sweep spec the sweep and CLI integration tests start from, and its writer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

SPEC: dict[str, Any] = {
    "model": {"name": "qwen2.5-7b", "max_model_len": 4096},
    "hardware": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 2},
    "engine": {"name": "sim", "time_scale": 1.0, "startup_s": 60},
    "workload": {"input_tokens": 256, "output_tokens": 16, "rates_per_s": [4], "num_requests": 16, "seed": 1},
    "slo": {"ttft_p99_ms": 2000, "itl_p99_ms": 200},
    "layouts": ["tp2", "tp1x2", "tp4"],
    "metadata": {"eval_run_id": "ci-1"},
}


def write_spec(tmp_path: Path, **changes: object) -> str:
    """SPEC with top-level sections replaced by `changes`, written to tmp_path/spec.yaml; its path."""
    spec = json.loads(json.dumps(SPEC))
    spec.update(changes)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


# The type of the `sim_spec` fixture (tests/conftest.py): write_spec bound to the test's tmp_path.
SimSpec = Callable[..., str]
