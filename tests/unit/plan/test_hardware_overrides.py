"""`hardware.overrides` takes every hardware constant, links included (issue 14 item 6)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.catalog.loader import load_gpu
from orchestrator.catalog.types import override_keys
from orchestrator.compile import sim_options
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.inputs import layout_cost
from orchestrator.sim.server import parse_args, server_from_args
from orchestrator.spec.load import parse_spec
from tests.support.paths import ROOT

BASE = (ROOT / "layouts" / "qwen72b.yaml").read_text()


def _spec(overrides: str):  # type: ignore[no-untyped-def]
    return parse_spec(BASE.replace("  nodes: 1\n", f"  nodes: 1\n  overrides: {overrides}\n"), "s.yaml")


def test_a_slow_intra_node_link_and_a_per_collective_latency() -> None:
    nested = _spec("{intra_node: {bandwidth_bytes_per_s: 25.0e+9, allreduce_latency_s: 8.0e-6}}")
    dotted = _spec("{intra_node.bandwidth_bytes_per_s: 25.0e+9, intra_node.allreduce_latency_s: 8.0e-6}")
    gpu = plan_inputs(nested).gpu
    assert gpu == plan_inputs(dotted).gpu
    assert gpu.intra_node.bandwidth_bytes_per_s == 25e9 and gpu.intra_node.allreduce_latency_s == 8e-6
    assert gpu.intra_node.latency_s == load_gpu("h100-sxm").intra_node.latency_s  # the rest is kept
    cost = layout_cost(plan_inputs(nested), parse_layout("tp8"))
    # tp8, 16 tokens: 160 all-reduces of 16*8192*2 B, each 8 us + 14/8 * 262,144 B / 25 GB/s = 26.35 us.
    assert cost.step(16, 0, 0).tp_comm_s * 1e3 == pytest.approx(160 * (8e-6 + 14 / 8 * 262144 / 25e9) * 1e3)
    assert cost.step(16, 0, 0).tp_comm_s * 1e3 == pytest.approx(4.22, abs=0.01)


def test_every_constant_is_settable() -> None:
    values = {k: 0.5 if "efficiency" in k else (4 if k == "gpus_per_node" else 1e-6 if "latency" in k
                                                 else 2e-3 if k == "step_overhead_s" else 1e12)
              for k in override_keys()}
    gpu = load_gpu("h100-sxm", values)
    for key, value in values.items():
        obj = gpu
        for part in key.split("."):
            obj = getattr(obj, part)
        assert obj == value, key


def test_the_simulated_server_gets_the_same_hardware() -> None:
    spec = _spec("{intra_node: {bandwidth_bytes_per_s: 25.0e+9}, step_overhead_s: 3.0e-3}")
    args = list(sim_options(spec).argv())
    assert "intra_node.bandwidth_bytes_per_s=25000000000.0" in args and "step_overhead_s=0.003" in args
    server = server_from_args(parse_args([*args, "--layout", "tp8", "--port", "1"]))
    gpu = server.engines[0].cost.gpu
    # The same numbers (the sim spec's default profile arrives as overrides; only the labels differ)
    assert replace(gpu, source="", profile="") == replace(plan_inputs(spec).gpu, source="", profile="")


@pytest.mark.parametrize(("overrides", "needle"), [
    ("{hbm_eff: 0.5}", "unknown key 'hbm_eff' (did you mean 'hbm_efficiency'?); valid keys: memory_bytes"),
    ("{intra_node: {bandwith: 3}}", "unknown key 'intra_node.bandwith'; valid keys:"),
    ("{hbm_efficiency: 0}", "hbm_efficiency: must be positive"),
    ("{hbm_efficiency: 1.5}", "must be in (0, 1]"),
    ("{inter_node.bandwidth_bytes_per_s: -1}", "must be positive"),
    ("{step_overhead_s: -1.0e-3}", "must be non-negative"),
])
def test_bad_overrides_are_one_line_errors(overrides: str, needle: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"hardware\.overrides") as exc:
        _spec(overrides)
    assert needle in str(exc.value) and "\n" not in str(exc.value)
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("  nodes: 1\n", f"  nodes: 1\n  overrides: {overrides}\n"))
    code = "from orchestrator.cli import main; main()"
    out = subprocess.run([sys.executable, "-c", code, "plan", str(path)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
