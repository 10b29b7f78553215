"""Every example spec in layouts/ loads, and its candidates plan (the CPU one needs its tiny model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.disagg import DisaggLayout
from orchestrator.plan.disagg_run import make_disagg_plan
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
    pairs = [x for x in spec.layouts if isinstance(x, DisaggLayout)]
    if pairs:  # prefill/decode pairs plan too (both pools fit, with the spec's disagg section)
        rows = make_disagg_plan(spec, pairs).rows
        assert all(r.fits for r in rows), [r.rejected_because for r in rows]
    if len(pairs) == len(spec.layouts):
        return
    result = make_plan(spec, batches=(1, 16))
    fitting = [r for r in result.rows if r.fits]
    assert fitting, [r.rejected_because for r in result.rows]
    if spec.model.name in ("mixtral-8x7b", "deepseek-v3"):
        assert any(r.expert_imbalance is not None for r in fitting)  # EP candidates are planned


def test_deepseek_v3_prefill_decode_units_plan_and_simulate() -> None:
    """The DeepSeek-V3 report's units: EP32 prefill with 32 redundant experts, EP320 decode with 64 (one
    expert per GPU), both fit and hand KV over; the simulator runs the pair."""
    from orchestrator.plan.candidates import disagg_candidate
    from orchestrator.plan.from_spec import plan_inputs
    from orchestrator.sim.pd_run import simulate_pair_point

    spec = load_spec(ROOT / "layouts" / "deepseek-v3-pd.yaml")
    (pd,) = spec.layouts
    assert isinstance(pd, DisaggLayout) and (pd.prefill.ep_size, pd.decode.ep_size) == (32, 320)
    (row,) = make_disagg_plan(spec, [pd]).rows
    assert row.fits and row.prefill is not None and row.decode is not None
    inputs = plan_inputs(spec)
    cand = disagg_candidate(spec, pd, inputs.settings)
    assert (cand.prefill.num_redundant_experts, cand.decode.num_redundant_experts) == (32, 64)
    sp = simulate_pair_point(spec, inputs, cand, 2.0, num_requests=60)
    assert sp.result.metrics.n_completed > 0 and sp.summary.transfers == 60
