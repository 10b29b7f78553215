"""Exit codes a CI job can rely on (issue 29): the README's table is what the code raises, an
infrastructure failure is never 3 ("no layout meets the SLO"), a missing run is bad input (2), never
the regression code 1, and a `--threshold` without its unit is refused. Through the real entry point."""

from __future__ import annotations

import inspect
import json
import os
import sys
from pathlib import Path

import orchestrator.errors as errors
from tests.support.cli import Orch
from tests.support.paths import ROOT
from tests.support.sim_spec import SimSpec


def readme_exit_codes() -> dict[int, str]:
    """code -> the meaning column(s) of README.md's "Exit codes" table."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Exit codes"):].split("\n## ", 1)[0]
    out: dict[int, str] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 3 and cells[0].isdigit():
            out[int(cells[0])] = (out.get(int(cells[0]), "") + " " + cells[1]).strip()
    return out


def test_the_readme_exit_code_table_is_what_the_errors_carry() -> None:
    table = readme_exit_codes()
    assert sorted(table) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 130]
    raised = {cls.__name__: cls.exit_code for _, cls in inspect.getmembers(errors, inspect.isclass)
              if issubclass(cls, errors.OrchError)}
    assert set(raised.values()) <= set(table)
    assert raised["InfrastructureError"] == raised["DeployError"] == raised["EngineDied"] == 4
    assert raised["UnknownRun"] == 2 and raised["NoLayoutMeetsSLO"] == 3 and raised["DecisionNotSound"] == 8
    assert "infrastructure failure" in table[4] and "orch sweep" in table[4]
    assert "deploy" not in table[3]  # 3 is a performance verdict only
    assert "a run that is not in the store" in table[2] and "--threshold" in table[2]
    assert "not deliver" in table[8]


def test_an_engine_that_is_not_installed_exits_4_not_3(tmp_path: Path, orch: Orch, sim_spec: SimSpec) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("ORCH_VLLM_BIN", "ORCH_SGLANG_BIN")}
    env["PATH"] = str(Path(sys.executable).parent)  # no vllm on it
    spec = sim_spec(layouts=["tp1"], engine={"name": "vllm"})
    out = orch("sweep", spec, "--store", str(tmp_path / "r.db"), "--workdir", str(tmp_path / "w"), env=env)
    assert out.returncode == 4, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 layout(s) could not be deployed or measured (tp1: vllm: not found")
    assert "infrastructure failure, not an SLO verdict" in last and "Traceback" not in out.stderr


def test_an_impossible_slo_is_still_3(tmp_path: Path, orch: Orch, sim_spec: SimSpec) -> None:
    spec = sim_spec(slo={"ttft_p99_ms": 0.001}, layouts=["tp2"])
    out = orch("sweep", spec, "--store", str(tmp_path / "r.db"))
    assert out.returncode == 3, out.stderr[-2000:]


def test_compare_a_missing_run_is_bad_input_and_a_threshold_needs_its_unit(
    tmp_path: Path, orch: Orch, sim_spec: SimSpec
) -> None:
    db = str(tmp_path / "r.db")
    spec = sim_spec(layouts=["tp2", "tp1x2"])
    runs = [json.loads(orch("sweep", spec, "--store", db, "--json").stdout)["run_id"] for _ in range(2)]
    missing = orch("compare", "20990101-000000-abcdef", runs[0], "--store", db)
    assert missing.returncode == 2 and "is not in" in missing.stderr, missing.stderr
    bare = orch("compare", runs[0], runs[1], "--store", db, "--threshold", "5")
    assert bare.returncode == 2 and "--threshold '5': give the unit, e.g. --threshold 5%" in bare.stderr
    same = orch("compare", runs[1], "latest", "--store", db)  # the newest run, twice
    assert same.returncode == 2 and "are the same run" in same.stderr, same.stderr
    ok = orch("compare", runs[0], runs[1], "--store", db, "--threshold", "5%")
    assert ok.returncode == 0 and "no regression" in ok.stdout, ok.stderr
