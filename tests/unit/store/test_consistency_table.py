"""The store's consistency table, and `orch report` of a consistency-only run."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.consistency.client import Generation
from orchestrator.consistency.compare import Side, compare
from orchestrator.consistency.run import builtin_prompts, load_prompts, store_result
from orchestrator.store.db import SCHEMA_VERSION, Store


def test_consistency_rows_round_trip_and_report(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    g = Generation((0, 1), (2, 3), ({2: -0.1}, {3: -0.2}))
    result = compare(Side("tp1", "tiny", (g, g)), Side("tp2", "tiny", (g, g)), max_tokens=2, top_k=1)
    store = Store(db)
    passed = store_result(store, result, spec=None, spec_path=None, run_id="20260101-000000-abcdef",
                          attach=False, max_divergence=0.0)  # fmt: skip
    assert passed is True and SCHEMA_VERSION == 1
    (row,) = store.consistency("20260101-000000-abcdef")
    assert (row.layout_a, row.layout_b, row.passed, row.max_divergence) == ("tp1", "tp2", True, 0.0)
    assert row.result["exact_match_rate"] == 1.0 and row.result["n_prompts"] == 2
    assert store.run("20260101-000000-abcdef").metadata == {"kind": "consistency"}
    store.close()
    runner = CliRunner()
    out = runner.invoke(app, ["report", "20260101-000000-abcdef", "--store", str(db)])
    assert out.exit_code == 0, out.output
    assert "consistency tp1 vs tp2" in out.output and "exact match: 100.0% (2/2)" in out.output
    out = runner.invoke(app, ["report", "20260101-000000-abcdef", "--store", str(db), "--json"])
    assert json.loads(out.output)["consistency"][0]["kl_per_token"]["max"] == 0.0


def test_divergent_result_fails_the_threshold(tmp_path: Path) -> None:
    g = Generation((0, 1), (2, 3), ({2: -0.1, 4: -2.5}, {3: -0.2}))
    h = Generation((0, 1), (2, 4), ({2: -0.1, 4: -2.5}, {4: -0.3}))
    result = compare(Side("tp1", "tiny", (g,)), Side("tp2", "tiny", (h,)), max_tokens=2, top_k=2)
    assert result.exact_match_rate == 0.0 and result.prompts[0].first_divergence == 1
    store = Store(tmp_path / "r.db")
    passed = store_result(store, result, spec=None, spec_path=None, run_id="20260101-000000-fedcba",
                          attach=False, max_divergence=0.5)  # fmt: skip
    assert passed is False and store.consistency("20260101-000000-fedcba")[0].passed is False


def test_prompts_builtin_and_file(tmp_path: Path) -> None:
    assert len(builtin_prompts(60)) == 60 and len(set(builtin_prompts(60))) == 60
    assert builtin_prompts(3) == builtin_prompts(60)[:3]
    f = tmp_path / "p.txt"
    f.write_text("one\n\ntwo\nthree\n")
    assert load_prompts(str(f), 2) == ["one", "two"]
