"""The argv cases the engine parser and config tests share (tests/integration/engines/): layouts with
placements and options, the example specs' layouts, their compiled launch plans, and running a parser
script of parsers/ in an engine's venv."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from orchestrator.candidate import Candidate
from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.compile import prepare
from orchestrator.disagg import DisaggLayout
from orchestrator.engines import SettingsRequest, get_engine, resolve_settings
from orchestrator.engines.base import EngineOptions, LaunchPlan, Placement
from orchestrator.engines.sglang import SGLangEngine
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout
from orchestrator.spec import load_spec
from tests.support.paths import LAYOUTS

# Scripts run with an engine's own venv Python (not importable from orch's venv).
PARSERS = Path(__file__).resolve().parent / "parsers"
LAYOUTS_DIR = LAYOUTS
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
MODEL = load_model("qwen2.5-7b")
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
    # SGLang keeps dense DP workers on one node (the engine refuses the layout; unit/engines/test_sglang.py).
    and not (parse_layout(c.layout).dp > 1 and not parse_layout(c.layout).ep and len(c.placement.nodes) > 1)
]  # fmt: skip


def venv_python(var: str, script: str) -> str:
    """The engine venv's Python from `var` (set by .ci/setup.d/`script`); skip without it, fail in CI."""
    path = os.environ.get(var)
    if path:
        return path
    how = f"{var} is not set; run `source .ci/setup.d/{script}` (builds a cached venv) and rerun"
    if os.environ.get("ORCH_CI") == "1":
        pytest.fail(f"CI must not skip this tier: {how}")
    pytest.skip(how)


def engine_argvs(plan: LaunchPlan, program: tuple[str, ...]) -> list[list[str]]:
    """The engine argv of every process, without the program part (Ray's own `ray start` is skipped)."""
    out = []
    for replica in plan.replicas:
        for proc in replica.processes:
            if proc.argv[: len(program)] == program:
                out.append(list(proc.argv[len(program) :]))
    return out


def run_parser(python: str, script: str, argvs: list[list[str]], tmp: Path) -> list[dict[str, Any]]:
    """parsers/`script` over every argv at once in the engine's venv; one result per argv."""
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


def spec_layouts(pairs: bool = False) -> list[str]:
    """`<spec stem>/<layout>` for every aggregated layout of every example spec in layouts/ (`pairs`:
    every prefill/decode pair instead; tests/integration/engines/test_pd_flags_parsers.py parses them)."""
    out = []
    for path in sorted(LAYOUTS_DIR.glob("*.yaml")):
        try:
            out += [f"{path.stem}/{layout}" for layout in load_spec(path).layouts
                    if isinstance(layout, DisaggLayout) == pairs]
        except SpecError:
            out.append(f"{path.stem}/<spec does not load>")
    return out


SPEC_LAYOUTS = spec_layouts()


def spec_plan(key: str, engine: str) -> LaunchPlan:
    """The launch plan of `<spec stem>/<layout>` from layouts/ for `engine`."""
    stem, layout = key.split("/")
    spec = load_spec(LAYOUTS_DIR / f"{stem}.yaml")
    if spec.model.path and not (LAYOUTS_DIR.parent / spec.model.path).exists():
        # The parsers never load the model; weights that another tier builds (tiny-cpu) need not exist.
        model = spec.model.model_copy(update={"path": "placeholder/model"})
        spec = spec.model_copy(update={"model": model})
    nodes = tuple(f"10.0.0.{i + 1}" for i in range(spec.hardware.nodes))
    return prepare(spec, parse_layout(layout), engine=engine, node_addrs=nodes).plan


@cache
def vllm_plans() -> dict[str, LaunchPlan]:
    """vLLM launch plans: every case, and every example spec's layout as `spec:<key>`."""
    engine = get_engine("vllm")
    plans = {c.name: engine.launch_plan(c.candidate("vllm"), c.options, c.placement) for c in CASES}
    # A spec that fails to compile fails its own test below, not the whole tier.
    for key in SPEC_LAYOUTS:
        with contextlib.suppress(SpecError):
            plans[f"spec:{key}"] = spec_plan(key, "vllm")
    return plans


@cache
def sglang_plans() -> dict[tuple[str, str], LaunchPlan]:
    """SGLang launch plans by (flavour, case), and the example specs' layouts as ("sglang", `spec:<key>`)."""
    plans = {
        (flavour, c.name): engine.launch_plan(c.candidate("sglang"), c.options, c.placement)
        for flavour, engine in SGLANG_ENGINES.items()
        for c in SGLANG_CASES
    }
    for key in SPEC_LAYOUTS:
        with contextlib.suppress(SpecError):
            plans[("sglang", f"spec:{key}")] = spec_plan(key, "sglang")
    return plans
