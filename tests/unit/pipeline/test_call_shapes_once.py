"""A sweep prices a session workload's mean call once per engine shape, not each time a step asks.
The plan row, the planner seed and (served) the prune prediction of every candidate, in every routing
pass, ask for it; each ask used to draw 400 sessions again and price them (35-90 ms on the example
session specs). Now the sweep's context holds one `CallShapes`: the sessions drawn once, each
(engine spread, block size, caching) priced once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import orchestrator.loadgen.spec_workload as spec_workload
from orchestrator.layout import parse_layout
from orchestrator.loadgen.spec_workload import CallShapes, call_shape, same_engine_share
from orchestrator.pipeline import points
from orchestrator.pipeline.sweep import Sweep, SweepOptions
from orchestrator.plan.from_spec import engine_settings
from orchestrator.spec.load import load_spec
from orchestrator.store.db import Store
from tests.support.observers import QuietObserver
from tests.support.paths import ROOT

CHAT = ROOT / "layouts" / "chat-multiturn.yaml"


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls = [0]
    real = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_session_sweep_draws_its_sessions_once_and_prices_each_engine_spread_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_spec(CHAT)
    # a short search: the seed and the plan row of every candidate are still asked for
    spec = spec.model_copy(update={"workload": spec.workload.model_copy(update={
        "search": spec.workload.search.model_copy(update={"max_points": 2}), "duration_s": None,
        "num_requests": 12})})
    drawn = _counting(monkeypatch, spec_workload, "draw_sessions")
    priced = _counting(monkeypatch, spec_workload, "price_sessions")
    asked = _counting(monkeypatch, points, "call_tokens")
    sweep = Sweep(spec, Store(tmp_path / "r.db"), QuietObserver(), options=SweepOptions(num_requests=12))
    result = sweep.run()
    # tp8, tp4x2, tp2x4 under round robin, then tp4x2 and tp2x4 under prefix-aware routing
    assert len(result.outcomes) == 5
    assert asked[0] >= 2 * 5  # each candidate's plan row and planner seed
    assert drawn[0] == 1  # one max_model_len: the sessions are drawn once for the whole sweep
    # a session's calls reach the engine holding its history with 1 (tp8; every prefix-aware
    # candidate: one DP rank per replica), 1/2 (tp4x2) or 1/4 (tp2x4 under round robin)
    assert priced[0] == 3


def test_the_memo_gives_what_call_shape_computes() -> None:
    spec = load_spec(CHAT)
    shapes, settings = CallShapes(spec.workload), engine_settings(spec)
    for name in ("tp8", "tp4x2", "tp2x4"):
        layout = parse_layout(name)
        for affine in (False, True):
            want = call_shape(spec.workload, same_engine=same_engine_share(layout, prefix_aware=affine),
                              block_size=settings.block_size, prefix_caching=settings.enable_prefix_caching,
                              max_model_len=settings.max_model_len)
            assert shapes.of(layout, settings, prefix_aware=affine) == want
    # a request workload's call is its prompt, whatever the layout
    qwen = load_spec(ROOT / "layouts" / "qwen72b.yaml")
    shape = CallShapes(qwen.workload).of(parse_layout("tp4x2"), engine_settings(qwen), prefix_aware=False)
    assert (shape.calls, shape.prompt_tokens, shape.cached_tokens) == (1, 1024, 0)
