"""Every example spec in layouts/ loads, and its candidates plan (the CPU one needs its tiny model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.plan.run import make_plan
from orchestrator.spec.load import load_spec
from tests.support.paths import ROOT

LAYOUTS = sorted((ROOT / "layouts").glob("*.yaml"))


def test_the_examples_the_readme_promises_exist() -> None:
    names = {p.stem for p in LAYOUTS}
    assert {"qwen72b", "llama70b-h200", "mixtral", "deepseek-v3", "tiny-cpu", "chat-multiturn",
            "agentic"} <= names


@pytest.mark.parametrize("path", LAYOUTS, ids=lambda p: p.stem)
def test_example_spec_loads_and_plans(path: Path) -> None:
    spec = load_spec(path)
    assert spec.layouts and (spec.workload.rates_per_s or spec.workload.search.max_points >= 2)
    if spec.model.config_path is not None and not Path(spec.model.config_path).exists():
        pytest.skip(f"{path.name}: its tiny model is built by scripts/build-tiny-model.sh (vllm_cpu tier)")
    result = make_plan(spec, batches=(1, 16))
    fitting = [r for r in result.rows if r.fits]
    assert fitting, [r.rejected_because for r in result.rows]
    if spec.model.name in ("mixtral-8x7b", "deepseek-v3"):
        assert any(r.expert_imbalance is not None for r in fitting)  # EP candidates are planned
