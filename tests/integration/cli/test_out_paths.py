"""Where orch writes (issue 29): a layout name read from a store cannot make `orch export --format vllm
--out DIR` write outside DIR, and `orch promote --out` does not silently overwrite an existing folder."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.support.cli import Orch
from tests.support.sim_spec import SimSpec


@pytest.fixture
def run(tmp_path: Path, orch: Orch, sim_spec: SimSpec) -> tuple[Path, str]:
    db = tmp_path / "r.db"
    out = orch("sweep", sim_spec(layouts=["tp2"]), "--store", str(db), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    return db, json.loads(out.stdout)["run_id"]


def test_a_stored_layout_name_cannot_lead_export_out_of_its_folder(run: tuple[Path, str], orch: Orch) -> None:
    db, run_id = run
    hostile = "../../escaped"
    with sqlite3.connect(db) as conn:  # a store handed over by someone else
        for table in ("layouts", "points", "records"):
            conn.execute(f"UPDATE {table} SET layout=? WHERE layout='tp2'", (hostile,))
    out_dir = db.parent / "a" / "b" / "out"
    out = orch("export", run_id, "--store", str(db), "--format", "vllm", "--out", str(out_dir))
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == ["_.._escaped_rate4pers.json"]
    assert not (db.parent / "a" / "escaped_rate4pers.json").exists()  # where ../../ would have led
    assert [p.name for p in db.parent.rglob("*escaped*")] == ["_.._escaped_rate4pers.json"]
    saved = json.loads((out_dir / "_.._escaped_rate4pers.json").read_text())
    assert saved["layout"] == hostile  # the content keeps the name as stored


def test_promote_does_not_overwrite_an_existing_folder(run: tuple[Path, str], orch: Orch) -> None:
    db, run_id = run
    target = db.parent / "promoted"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    refused = orch("promote", run_id, "--store", str(db), "--out", str(target))
    assert refused.returncode == 2, refused.stderr
    assert "the folder exists and is not empty" in refused.stderr and "--overwrite" in refused.stderr
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    first = orch("promote", run_id, "--store", str(db), "--out", str(db.parent / "fresh"))
    assert first.returncode == 0, first.stderr
    again = orch("promote", run_id, "--store", str(db), "--out", str(db.parent / "fresh"))
    assert again.returncode == 2, again.stderr  # the same folder a second time: refused too
    forced = orch("promote", run_id, "--store", str(db), "--out", str(target), "--overwrite")
    assert forced.returncode == 0, forced.stderr
    assert "also holds notes.txt, not written by orch promote; left as is" in forced.stderr
    assert (target / "PROVENANCE.json").exists() and (target / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(("args", "needle"), [
    (["export", "--out", "DIR"], "--out DIR: is a directory; give a file path inside it"),
    (["export", "--out", "FILE/x.csv"], "--out FILE/x.csv: a part of the path is a file, not a folder"),
    (["export", "--format", "vllm", "--out", "FILE"], "--out FILE: exists and is not a folder"),
    (["promote", "--out", "FILE/p"], "--out FILE/p: a part of the path is a file, not a folder"),
    (["report", "--html", "DIR"], "--html DIR: is a directory; give a file path inside it"),
    (["report", "--html", "FILE/r.html"], "--html FILE/r.html: a part of the path is a file, not a folder"),
], ids=["export-into-dir", "export-under-file", "export-vllm-onto-file", "promote-under-file",
        "report-html-into-dir", "report-html-under-file"])
def test_an_output_path_that_cannot_be_written_is_one_line(
    run: tuple[Path, str], orch: Orch, args: list[str], needle: str
) -> None:
    # Before: IsADirectoryError / NotADirectoryError / FileExistsError tracebacks (exit 1).
    db, run_id = run
    folder, afile = db.parent / "adir", db.parent / "afile"
    folder.mkdir()
    afile.write_text("mine")
    real = [a.replace("DIR", str(folder)).replace("FILE", str(afile)) for a in args]
    out = orch(real[0], run_id, "--store", str(db), *real[1:])
    expected = needle.replace("DIR", str(folder)).replace("FILE", str(afile))
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and expected in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].startswith("error: ")
    assert afile.read_text() == "mine" and not any(folder.iterdir())  # nothing written or replaced
