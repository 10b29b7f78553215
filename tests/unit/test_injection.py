"""Nothing from a spec or a store reaches a script, a manifest or a path unquoted or unchecked; secrets
appear in artifacts only as references."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from orchestrator.candidate import Candidate
from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.compile import prepare, to_shell
from orchestrator.compile.helm_values import helm_values
from orchestrator.compile.k8s import K8sOptions, build_objects
from orchestrator.compile.shell import command_line, node_script
from orchestrator.engines import resolve_settings
from orchestrator.engines.base import (
    EngineOptions,
    LaunchPlan,
    Placement,
    ProcessSpec,
    ReplicaPlan,
    SecretEnv,
)
from orchestrator.errors import OrchError, SpecError
from orchestrator.layout import parse_layout
from orchestrator.spec import parse_spec
from orchestrator.store.run_ids import checked_run_id

SPEC = """
model: {name: qwen2.5-7b}
hardware: {gpu: h100-sxm, nodes: 2}
engine:
  name: vllm
  env: {ODD_VALUE: "$(touch /tmp/pwned); `id` 'q' \\"d\\""}
  env_from_secret:
    HF_TOKEN: {env: ORCH_HF_TOKEN, secret: hf-creds, key: token}
    WANDB_API_KEY: {secret: wandb}
workload: {rates_per_s: [1], num_requests: 10}
layouts: [tp8, tp8pp2]
"""
REF = SecretEnv("HF_TOKEN", "ORCH_HF_TOKEN", "hf-creds", "token")


SETTINGS = resolve_settings("vllm", load_gpu("h100-sxm"), load_model("qwen2.5-7b"))
CANDIDATE = Candidate(parse_layout("tp1"), SETTINGS)


def _plan(proc: ProcessSpec) -> LaunchPlan:
    return LaunchPlan("vllm", CANDIDATE, (ReplicaPlan((proc,), "http://h:8000/health", "http://h:8000/v1"),))


@pytest.mark.parametrize("key", ["A;touch /tmp/pwned", "$(id)", "A B", "", "1A", "A\nB"])
def test_shell_refuses_a_key_that_is_not_an_identifier(key: str) -> None:
    with pytest.raises(SpecError, match="not a variable name"):
        command_line(ProcessSpec(argv=("vllm",), env=((key, "x"),)))
    with pytest.raises(SpecError, match="not a variable name"):
        EngineOptions(model="m", extra_env=((key, "x"),))


def test_shell_values_round_trip_through_a_real_shell() -> None:
    value = "$(touch /tmp/pwned); `id` 'q' \"d\" \\ \n next"
    line = command_line(ProcessSpec(argv=("printf", "%s|%s", value, "$HOME"), env=(("V", value),)))
    out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=True)
    assert out.stdout == f"{value}|$HOME"
    words = shlex.split(line)
    assert words[0] == f"V={value}"


def test_secret_is_a_reference_in_the_script_and_read_from_the_node_shell() -> None:
    line = command_line(ProcessSpec(argv=("sh", "-c", 'printf %s "$HF_TOKEN"'), secret_env=(REF,)))
    assert line.startswith('HF_TOKEN="${ORCH_HF_TOKEN:?')
    ok = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=False,
                        env={"ORCH_HF_TOKEN": "value-from-node", "PATH": "/usr/bin:/bin"})
    assert ok.returncode == 0 and ok.stdout == "value-from-node"
    missing = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=False,
                             env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode != 0 and "set ORCH_HF_TOKEN on this node" in missing.stderr


def test_comment_with_a_line_break_is_refused() -> None:
    proc = ProcessSpec(argv=("vllm",))
    plan = LaunchPlan("vllm", CANDIDATE, (ReplicaPlan((proc,), "http://h:1/health\ntouch /tmp/x", "http://h/v1"),))
    with pytest.raises(SpecError, match="line break"):
        node_script(plan, 0)


@pytest.mark.parametrize("node", ["a;b", "$(id)", "-rf", "a b", "x\ny", "", "a..b", "-a.b"])
def test_placement_refuses_node_names_that_are_not_hosts(node: str) -> None:
    with pytest.raises(SpecError, match="not a host name"):
        Placement(nodes=("node0", node))


@pytest.mark.parametrize("node", ["node0", "gpu-node-1.example.com", "10.0.0.2", "fe80::1", "127.0.0.1"])
def test_placement_accepts_hosts(node: str) -> None:
    assert Placement(nodes=(node,)).nodes == (node,)


def test_compiled_spec_carries_references_only() -> None:
    spec = parse_spec(SPEC)
    compiled = prepare(spec, parse_layout("tp8pp2"), node_addrs=("10.0.0.1", "10.0.0.2"))
    script = to_shell(compiled.plan, compiled.placement.nodes)
    assert script.count('HF_TOKEN="${ORCH_HF_TOKEN:?') == 2  # both nodes
    assert 'WANDB_API_KEY="${WANDB_API_KEY:?' in script  # env defaults to the variable's own name
    assert "ODD_VALUE='$(touch /tmp/pwned)" in script  # single-quoted: never expanded
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0
    stored = compiled.plan.to_dict()["replicas"][0]["processes"][0]
    assert stored["secret_env"]["HF_TOKEN"] == {"env": "ORCH_HF_TOKEN", "secret": "hf-creds", "key": "token"}
    assert "HF_TOKEN" not in stored["env"]


def _env_of(obj: dict[str, object]) -> list[dict[str, object]]:
    text = repr(obj)
    assert "valueFrom" in text
    found: list[dict[str, object]] = []

    def walk(x: object) -> None:
        if isinstance(x, dict):
            if "env" in x and isinstance(x["env"], list):
                found.extend(x["env"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(obj)
    return found


@pytest.mark.parametrize("layout", ["tp8", "tp8pp2"])
def test_kubernetes_objects_use_secret_key_refs(layout: str) -> None:
    spec = parse_spec(SPEC)
    compiled = prepare(spec, parse_layout(layout), node_addrs=("10.0.0.1", "10.0.0.2"))
    opts = K8sOptions(name="qwen", image="vllm/vllm-openai:v0.32.0")
    for obj in build_objects(compiled.plan, parse_layout(layout), opts):
        if obj["kind"] == "Service":
            continue
        env = _env_of(obj)
        refs = {e["name"]: e["valueFrom"] for e in env if "valueFrom" in e and "secretKeyRef" in str(e)}
        assert refs["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-creds", "key": "token"}}
        assert refs["WANDB_API_KEY"] == {"secretKeyRef": {"name": "wandb", "key": "WANDB_API_KEY"}}
        # One HF_TOKEN per container: the spec's reference replaces the default hf-token Secret.
        names = [e["name"] for e in env]
        assert names.count("HF_TOKEN") == names.count("WANDB_API_KEY")
    values = helm_values(compiled.plan, parse_layout(layout), opts)
    assert values["hfToken"]["secretName"] == ""
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-creds", "key": "token"}}} in (
        values["leader"]["env"]
    )


def test_kubernetes_artifacts_need_the_secret_name() -> None:
    spec = parse_spec(SPEC.replace("WANDB_API_KEY: {secret: wandb}", "WANDB_API_KEY: {}"))
    compiled = prepare(spec, parse_layout("tp8"), node_addrs=("10.0.0.1", "10.0.0.2"))
    with pytest.raises(SpecError, match="WANDB_API_KEY: Kubernetes artifacts need 'secret'"):
        build_objects(compiled.plan, parse_layout("tp8"), K8sOptions(name="qwen", image="img:1"))


@pytest.mark.parametrize("bad", ["../../etc", "a/b", "..", ".hidden", "a\nb", "", "x" * 200, "/abs"])
def test_run_ids_from_a_store_are_checked_before_use_in_paths(bad: str) -> None:
    with pytest.raises(OrchError, match="not a safe name"):
        checked_run_id(bad)


def test_real_run_ids_pass() -> None:
    from orchestrator.pipeline.provenance import new_run_id

    run_id = new_run_id()
    assert checked_run_id(run_id) == run_id


def test_promote_refuses_a_crafted_run_id_in_the_store(tmp_path: object) -> None:
    import sqlite3
    from pathlib import Path

    from orchestrator.promote import resolve_run
    from orchestrator.store.db import Store

    path = Path(str(tmp_path)) / "r.db"
    store = Store(path)
    store.close()
    conn = sqlite3.connect(path)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    values = {c: "x" for c in cols} | {"run_id": "../../escape", "created_at": 1.0, "status": "done"}
    for c in ("spec_json", "hardware_json", "metadata_json", "selection_json"):
        if c in values:
            values[c] = "{}"
    conn.execute(f"INSERT INTO runs ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
                 [values[c] for c in cols])
    conn.commit()
    conn.close()
    with pytest.raises(OrchError, match="not a safe name"):
        resolve_run(Store(path), "latest")
