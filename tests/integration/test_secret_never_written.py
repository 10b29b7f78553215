"""A secret given by reference (engine.env_from_secret) reaches the engine process and nothing else: a
planted value is searched for in every file a sim sweep, compile, promote, export and report produce,
in the SQLite store's bytes and in every command's output."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import yaml

from orchestrator.deploy.local import LocalProcessTarget
from orchestrator.engines.base import LaunchPlan, ProcessSpec, ReplicaPlan, SecretEnv
from tests.support.cli import orch
from tests.support.engines import candidate

SECRET_VAR = "ORCH_TEST_PLANTED_SECRET"

SPEC = {
    "model": {"name": "qwen2.5-7b", "max_model_len": 4096},
    "hardware": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 2},
    "engine": {
        "name": "sim", "time_scale": 1.0, "startup_s": 60, "env": {"ORCH_HARMLESS": "1"},
        "env_from_secret": {"HF_TOKEN": {"env": SECRET_VAR, "secret": "hf-token", "key": "token"}},
    },
    "workload": {"input_tokens": 64, "output_tokens": 8, "rates_per_s": [4], "num_requests": 8, "seed": 1},
    "slo": {"ttft_p99_ms": 5000},
    "layouts": ["tp1", "tp2"],
    "metadata": {"eval_run_id": "secret-test"},
}



def _orch(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return orch(*args, env=env)


def test_planted_secret_appears_in_no_artifact(tmp_path: Path) -> None:
    secret = "planted-" + secrets.token_hex(16)
    env = {**os.environ, SECRET_VAR: secret}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    db = str(tmp_path / "results.db")
    outputs: dict[str, str] = {}

    def run(name: str, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        out = _orch(env, *args)
        outputs[name] = out.stdout + out.stderr
        assert out.returncode in ok, (name, out.stderr[-3000:])
        return out

    # Served: real engine processes get the secret in their environment (and write logs). A busy
    # machine may leave a point unjudged (exit 8); the artifacts are written either way.
    sweep = run("sweep", "sweep", str(spec), "--served", "--store", db, "--json",
                "--workdir", str(tmp_path / "work"), ok=(0, 8))
    run_id = json.loads(sweep.stdout)["run_id"]
    shell = run("compile-shell", "compile", str(spec), "--layout", "tp2", "--engine", "vllm")
    run("compile-json", "compile", str(spec), "--layout", "tp2", "--format", "json")
    run("promote", "promote", "latest", "--store", db, "--out", str(tmp_path / "promoted"),
        "--format", "all", "--image", "vllm/vllm-openai:v0.32.0")
    run("promote-json", "promote", run_id, "--store", db, "--json", "--out", str(tmp_path / "promoted2"))
    run("export-json", "export", run_id, "--store", db, "--out", str(tmp_path / "export.json"))
    run("export-csv", "export", run_id, "--store", db, "--format", "csv", "--requests",
        "--out", str(tmp_path / "export.csv"))
    run("report", "report", run_id, "--store", db, "--html", str(tmp_path / "report.html"))
    run("runs", "runs", "--store", db, "--json")
    for name, text in outputs.items():
        (tmp_path / f"output-{name}.txt").write_text(text)

    # The references are there, so the test would notice if the secret were simply dropped.
    assert f'HF_TOKEN="${{{SECRET_VAR}:?' in shell.stdout
    promoted = tmp_path / "promoted"
    manifests = "".join(p.read_text() for p in promoted.iterdir() if p.suffix in (".yaml", ".yml"))
    assert "secretKeyRef" in manifests and "hf-token" in manifests
    script = next(p for p in promoted.iterdir() if p.suffix == ".sh")
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0

    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "results.db" for p in files) and any(p.suffix == ".log" for p in files)
    leaked = [str(p) for p in files if secret.encode() in p.read_bytes()]
    assert leaked == []


def test_sweep_without_the_variable_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != SECRET_VAR}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = _orch(env, "sweep", str(spec), "--store", str(tmp_path / "r.db"), "--workdir", str(tmp_path / "w"))
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert f"has no {SECRET_VAR}" in out.stderr


def test_local_target_gives_the_engine_the_value(tmp_path: Path) -> None:
    """The process started by the local target sees the value (it writes only its hash back)."""
    secret = "planted-" + secrets.token_hex(16)
    os.environ[SECRET_VAR] = secret
    try:
        proof = tmp_path / "proof"
        code = (
            "import hashlib, os, sys; "
            "open(sys.argv[1], 'w').write(hashlib.sha256(os.environ['HF_TOKEN'].encode()).hexdigest())"
        )
        proc = ProcessSpec(argv=("python", "-c", code, str(proof)),
                           secret_env=(SecretEnv("HF_TOKEN", SECRET_VAR, "hf-token", "token"),))
        plan = LaunchPlan("sim", candidate("tp1", "sim"), (ReplicaPlan((proc,), "http://127.0.0.1:9/health", "http://x/v1"),))
        target = LocalProcessTarget(tmp_path / "work", term_grace_s=5)
        dep = target.deploy(plan)
        try:
            deadline = time.monotonic() + 60
            while not proof.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            target.teardown(dep)
        assert proof.read_text() == hashlib.sha256(secret.encode()).hexdigest()
        logs = [p.read_bytes() for p in (tmp_path / "work").iterdir()]
        assert logs and not any(secret.encode() in b for b in logs)
    finally:
        del os.environ[SECRET_VAR]
