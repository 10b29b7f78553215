"""The spec takes prefill/decode pairs among its layouts and a `disagg` section; a transfer backend the
engine lacks and a split across engines are spec errors naming the field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.disagg import DisaggLayout
from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.spec.load import load_spec


def _write(tmp_path: Path, **changes: Any) -> Path:
    data: dict[str, Any] = {
        "model": {"name": "qwen2.5-7b"},
        "hardware": {"gpu": "h100-sxm"},
        "engine": {"name": "vllm"},
        "workload": {"rates_per_s": [1], "num_requests": 4},
        "layouts": ["tp8", "p:tp4+d:tp4"],
    }
    data.update(changes)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_layouts_mix_both_kinds_and_round_trip(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path))
    assert isinstance(spec.layouts[0], Layout) and isinstance(spec.layouts[1], DisaggLayout)
    assert spec.model_dump(mode="json")["layouts"] == ["tp8", "p:tp4+d:tp4"]
    assert spec.disagg.transfer_backend is None and spec.disagg.router_policy == "least_outstanding"


@pytest.mark.parametrize(("changes", "words"), [
    ({"disagg": {"transfer_backend": "mooncake"}},
     "disagg.transfer_backend: vllm has no KV connector 'mooncake'; use one of NixlConnector, "
     "ExampleConnector"),
    ({"engine": {"name": "sglang"}, "disagg": {"transfer_backend": "fake"}},
     "a prefill server refuses transfer backend 'fake'"),
    ({"engine": {"name": "sim"}, "disagg": {"transfer_backend": "ExampleConnector"}},
     "the simulator models NIXL reads over the GPUs' links, not ExampleConnector"),
    ({"disagg": {"prefill": {"engine": "sglang"}}}, "disagg.prefill.engine: sglang, but engine.name is vllm"),
    ({"layouts": ["p:tp4+x:tp4"]}, "must start with 'p:' (prefill) or 'd:' (decode)"),
    ({"disagg": {"decode": {"max_num_seqs": 0}}}, "disagg.decode.max_num_seqs"),
])
def test_bad_disagg_input_is_a_spec_error(tmp_path: Path, changes: dict[str, Any], words: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec(_write(tmp_path, **changes))
    assert words in str(err.value)
    assert "\n" not in str(err.value)
