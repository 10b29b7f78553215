"""The sweep's stored plan charges prefill as `orch plan` does, and the capacity search's seed is that
plan's throughput within the ITL bound in requests/s, over the measured PLANNER_OVERESTIMATE
(bench/planner_seed.py measures where the seeds land against the searched capacity)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.layout import parse_layout
from orchestrator.pipeline.capacity import GROWTH_FROM_PLANNER
from orchestrator.pipeline.points import plan_row, planner_seed
from orchestrator.pipeline.predict import PLANNER_CONCURRENCY_OVERESTIMATE, PLANNER_OVERESTIMATE
from orchestrator.pipeline.sweep import Sweep
from orchestrator.plan.run import make_plan
from orchestrator.spec.load import load_spec
from orchestrator.store.db import Store
from tests.support.observers import QuietObserver
from tests.support.paths import ROOT


def test_the_sweeps_plan_is_orch_plans_and_seeds_the_search(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "layouts" / "qwen72b.yaml")
    sweep = Sweep(spec, Store(tmp_path / "r.db"), QuietObserver())
    layout = parse_layout("tp8")
    row = plan_row(sweep.ctx, sweep.ctx.candidate(layout))
    (planned,) = make_plan(spec, layouts=[layout]).rows
    assert row.best is not None and planned.best is not None
    assert row.best == planned.best  # same batch, same prefill-charged throughput and ITL
    assert row.best.prefill_chunk_tokens > 0 and row.best.chunk_step_fraction > 0
    # Decode alone would claim more: the stored plan is not the decode-only one any more.
    (alone,) = make_plan(spec, layouts=[layout], charge_prefill=False).rows
    assert alone.best is not None
    assert alone.best.output_tokens_per_s_per_gpu > row.best.output_tokens_per_s_per_gpu
    seed, source, growth = planner_seed(sweep.ctx, sweep.ctx.candidate(layout), row)
    # Requests/s: tokens/s per GPU x 8 GPUs / 256 mean output tokens (qwen72b.yaml), / 1.25.
    assert PLANNER_OVERESTIMATE == 1.25 and growth == GROWTH_FROM_PLANNER
    assert seed == pytest.approx(row.best.output_tokens_per_s_per_gpu * 8 / 256 / 1.25)
    assert source.startswith("planner") and "prefill charged" in source


def test_a_closed_loops_seed_is_the_planners_best_batch_on_every_engine(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "layouts" / "qwen72b.yaml")
    w = spec.workload
    closed = spec.model_copy(update={"workload": w.model_copy(update={"loop": "closed", "arrival": None})})
    sweep = Sweep(closed, Store(tmp_path / "c.db"), QuietObserver())
    # the measured divisor (bench/planner_seed.py --closed): capacity / best batch x engines, median 1.02
    assert PLANNER_CONCURRENCY_OVERESTIMATE == 1.0
    for name, engines in (("tp8", 1), ("tp4x2", 2)):
        layout = parse_layout(name)
        row = plan_row(sweep.ctx, sweep.ctx.candidate(layout))
        assert row.best is not None
        seed, source, growth = planner_seed(sweep.ctx, sweep.ctx.candidate(layout), row)
        assert seed == row.best.batch * engines and growth == GROWTH_FROM_PLANNER
        assert source.startswith("planner (best batch")
