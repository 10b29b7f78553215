"""Naming a stored run (issue 29): an ambiguous prefix is refused with the candidates, never the
newest; the short hash orch prints works wherever a run does; a run whose orch process died shows as
died; `--resume latest` finds a run whose store was deleted from the journal beside it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.store.journal import journal_path
from tests.support.cli import ORCH, Orch
from tests.support.cli import orch as run_orch
from tests.support.paths import LAYOUTS
from tests.support.sim_spec import write_spec


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    tmp = tmp_path_factory.mktemp("refs")
    spec = write_spec(tmp, layouts=["tp2", "tp1x2"])
    db = tmp / "r.db"
    runs = []
    for _ in range(2):
        out = run_orch("sweep", spec, "--store", str(db), "--json")
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout)["run_id"])
    return db, runs


def test_an_ambiguous_prefix_is_refused_with_the_candidates(
    two_runs: tuple[Path, list[str]], orch: Orch
) -> None:
    db, runs = two_runs
    day = runs[0][:8]  # every run of the day shares it
    for args in (["report", day], ["promote", day, "--out", str(db.parent / "p")], ["export", day],
                 ["compare", day, "latest"], ["sweep", "--resume", day]):
        out = orch(*args, "--store", str(db))
        assert out.returncode == 2, (args, out.stderr)
        line = out.stderr.strip()
        assert f"run '{day}' is ambiguous" in line and runs[0] in line and runs[1] in line, (args, line)
        assert len(line.splitlines()) == 1
    assert not (db.parent / "p").exists()


def test_the_short_hash_is_a_run_id_everywhere(
    two_runs: tuple[Path, list[str]], tmp_path: Path, orch: Orch
) -> None:
    db, runs = two_runs
    short = [r.rsplit("-", 1)[1] for r in runs]
    report = orch("report", short[0], "--store", str(db), "--json")
    assert report.returncode == 0 and json.loads(report.stdout)["run_id"] == runs[0], report.stderr
    export = orch("export", short[0], "--store", str(db), "--format", "json")
    assert export.returncode == 0 and json.loads(export.stdout)["run"]["run_id"] == runs[0], export.stderr
    compare = orch("compare", short[0], short[1], "--store", str(db), "--json")
    assert compare.returncode == 0, compare.stderr
    assert (json.loads(compare.stdout)["baseline"], json.loads(compare.stdout)["run"]) == (runs[0], runs[1])
    promote = orch("promote", short[1], "--store", str(db), "--out", str(tmp_path / "p"))
    assert promote.returncode == 0 and f"from run {runs[1]}" in promote.stdout, promote.stderr
    resume = orch("sweep", "--resume", short[0], "--store", str(db), "--json")
    assert resume.returncode == 0 and json.loads(resume.stdout)["run_id"] == runs[0], resume.stderr


def _start_long_sweep(tmp: Path, db: Path) -> subprocess.Popen[str]:
    """The main job's spec in virtual time: some seconds of points, enough to be killed half way."""
    return subprocess.Popen([*ORCH, "sweep", str(LAYOUTS / "qwen72b.yaml"), "--layouts", "tp8,tp4x2",
                             "--store", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp)


def _kill_after_a_point(proc: subprocess.Popen[str], db: Path) -> str:
    """SIGKILL the sweep once its journal holds a measured point; its run id."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        journals = list(db.parent.glob(f"{db.name}.*.journal.jsonl"))
        if journals and '"op":"add_point"' in journals[0].read_text():
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=60)
            return journals[0].name[len(db.name) + 1: -len(".journal.jsonl")]
        time.sleep(0.2)
    raise AssertionError(f"the sweep never stored a point (rc {proc.poll()})")


def test_a_killed_run_shows_as_died_and_resume_latest_finds_it_without_its_store(
    tmp_path: Path, orch: Orch
) -> None:
    db = tmp_path / "r.db"
    run_id = _kill_after_a_point(_start_long_sweep(tmp_path, db), db)
    runs = orch("runs", "--store", str(db), "--json")
    assert runs.returncode == 0 and json.loads(runs.stdout)[0]["status"] == "died", runs.stdout
    table = orch("runs", "--store", str(db))
    assert f"orch sweep --resume {run_id} --store" in table.stdout
    os.unlink(db)  # the store is gone; the journal beside it has the run
    assert journal_path(db, run_id).exists()
    out = orch("sweep", "--resume", "latest", "--store", str(db), "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["run_id"] == run_id
    # Time to decision covers both sessions: every stored point, the first session's wall time too.
    timing, progress = data["sweep"]["timing"], data["sweep"]["progress"]
    assert progress["sessions"] == 2 and "2 sessions (--resume)" in timing["definition"]
    assert timing["points_measured"] == sum(len(x["points"]) for x in data["layouts"])
    assert timing["wall_s"] >= sum(progress["point_s"])
    done = orch("runs", "--store", str(db), "--json")
    assert [(r["run_id"], r["status"]) for r in json.loads(done.stdout)] == [(run_id, "done")]
