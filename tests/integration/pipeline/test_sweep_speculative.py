"""Speculative decoding through a served sweep: the engine's acceptance counted per point, stored beside
the assumed one, fitted, and predicted with by a second sweep that names the fitted profile."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from orchestrator.calibrate.acceptance import fit_acceptance, stored_records
from orchestrator.catalog.profiles import write_profile
from orchestrator.plan.from_spec import engine_settings
from orchestrator.spec.load import load_spec
from orchestrator.store.db import Store
from tests.support.cli import Orch
from tests.support.paths import LAYOUTS
from tests.support.sim_spec import SimSpec

ASSUMED, TRUE = 0.4, 0.8  # the spec assumes 0.4; the served engine accepts 0.8 per position


def test_measured_acceptance_is_stored_fitted_and_used(tmp_path: Path, orch: Orch, sim_spec: SimSpec) -> None:
    engine = {"name": "sim", "time_scale": 0.5, "startup_s": 60,
              "speculative": {"method": "ngram", "num_speculative_tokens": 4, "acceptance_rate": ASSUMED},
              # What the engine really does on this traffic (a later flag wins in the server's parser).
              "extra_args": ["--speculative-acceptance", str(TRUE)]}
    spec_path = sim_spec(engine=engine, layouts=["tp1"])
    db = str(tmp_path / "r.db")
    out = orch("sweep", spec_path, "--served", "--store", db, "--json", "--workdir", str(tmp_path / "w"))
    assert out.returncode in (0, 3, 8), out.stderr[-3000:]
    data = json.loads(out.stdout)
    (layout,) = data["layouts"]
    assert layout["layout"] == "tp1" and layout["status"] == "measured"
    # At time scale 0.5 the server is sent twice the rate; the progress lines still name the point measured.
    started = set(re.findall(r"rate=([0-9.]+)/s: started", out.stderr))
    assert started and started <= {f"{p['rate']:g}" for p in layout["points"]}, out.stderr[-2000:]
    record = layout["points"][-1]["metrics"]["speculative"]
    assert record["assumed"] == [ASSUMED] * 4
    assert abs(record["assumed_tokens_per_step"] - (1 + 0.4 + 0.16 + 0.064 + 0.0256)) < 1e-9
    measured = record["measured"]
    assert measured["tokens_per_step"] > record["assumed_tokens_per_step"] + 1.0  # 3.36 against 1.65
    store = Store(db, readonly=True)
    try:
        fits = fit_acceptance(stored_records(store, [data["run_id"]]))
    finally:
        store.close()
    fit = fits["ngram"]
    assert abs(fit.tokens_per_step - measured["tokens_per_step"]) < 1e-9 and fit.form == "per position"
    # A profile with the measured acceptance; the same spec naming it predicts with it.
    profile = tmp_path / "measured.yaml"
    write_profile(profile, gpu="h100-sxm", engine="sim", constants={}, source="test",
                  extra={"acceptance": {"ngram": list(fit.per_position)}})
    raw = yaml.safe_load(Path(spec_path).read_text())
    raw["hardware"]["calibration"] = str(profile)
    second = tmp_path / "second.yaml"
    second.write_text(yaml.safe_dump(raw))
    settings = engine_settings(load_spec(second))
    assert settings.speculative is not None
    assert settings.speculative.acceptance == fit.per_position
    assert abs(settings.speculative.tokens_per_step - fit.tokens_per_step) < 1e-9  # 3.0, not 1.65


def test_a_settings_sweep_names_promotes_and_compares_its_winner(tmp_path: Path, orch: Orch) -> None:
    db = str(tmp_path / "r.db")
    spec = str(LAYOUTS / "speculative-70b.yaml")
    out = orch("sweep", spec, "--store", db, "--num-requests", "256")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2 candidates (1 layout x 2 settings)" in out.stderr
    assert "winner: tp4 ngram k=4 (objective goodput_per_gpu)" in out.stdout
    assert "tp4 no-spec: loses: no load point met the SLO" in out.stdout
    assert "speculation stops paying at concurrency=" in out.stdout  # the crossover, with and without
    promoted = orch("promote", "latest", "--store", db, "--out", str(tmp_path / "p"), "--format", "shell")
    assert promoted.returncode == 0, promoted.stderr[-2000:]
    assert "promoted tp4 ngram k=4" in promoted.stdout
    script = (tmp_path / "p" / "launch.sh").read_text()
    assert '"method":"ngram"' in script and '"num_speculative_tokens":4' in script
    # --layout takes a candidate's name, settings and all
    chosen = orch("promote", "latest", "--store", db, "--out", str(tmp_path / "q"), "--format", "shell",
                  "--layout", "tp4 ngram k=4")
    assert chosen.returncode == 0 and "promoted tp4 ngram k=4" in chosen.stdout, chosen.stderr[-2000:]
    failed = orch("promote", "latest", "--store", db, "--out", str(tmp_path / "r"), "--layout", "tp4 no-spec")
    assert failed.returncode == 3 and "did not meet the SLO" in failed.stderr, failed.stderr[-2000:]
