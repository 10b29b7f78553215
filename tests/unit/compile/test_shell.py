"""Shell and JSON output of `orch compile`, the spec -> options/placement conversion, and the command."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.candidate import Candidate
from orchestrator.cli import app
from orchestrator.compile import engine_options, placement, prepare, to_json, to_shell
from orchestrator.compile.shell import command_line, node_script
from orchestrator.engines import get_engine
from orchestrator.engines.base import EngineOptions, LaunchPlan, Placement, ProcessSpec
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout
from orchestrator.plan.from_spec import engine_settings
from orchestrator.spec import SweepSpec, parse_spec
from tests.support.paths import ROOT

SPEC = """
model: {name: qwen2.5-72b, max_model_len: 8192, kv_cache_dtype: fp8}
hardware: {gpu: h100-sxm, nodes: NODES}
engine: {name: vllm, max_num_seqs: 128, extra_args: [--trust-remote-code]}
workload: {rates_per_s: [1], num_requests: 10}
layouts: [tp8]
"""


def spec(nodes: int = 1, model: str = "name: qwen2.5-72b") -> SweepSpec:
    return parse_spec(SPEC.replace("NODES", str(nodes)).replace("name: qwen2.5-72b", model))


# The spec's settings, and vLLM 0.33's defaults for the rest, stated as flags.
FLAGS = ("--max-model-len 8192 --max-num-seqs 128 --max-num-batched-tokens 8192 "
         "--gpu-memory-utilization 0.92 --block-size 16 --enable-chunked-prefill --enable-prefix-caching")


def launch(engine: str, layout: str, where: Placement | None = None) -> LaunchPlan:
    candidate = Candidate(parse_layout(layout), engine_settings(spec(), engine=engine))
    return get_engine(engine).launch_plan(candidate, EngineOptions(model="m"), where or Placement())


def test_command_line_quotes_env_and_argv() -> None:
    proc = ProcessSpec(argv=("vllm", "serve", "m", "--eplb-config", '{"a": 1}'),
                       env=(("VLLM_CPU_OMP_THREADS_BIND", "0|1"), ("X", "a b")))  # fmt: skip
    line = command_line(proc)
    assert line == "VLLM_CPU_OMP_THREADS_BIND='0|1' X='a b' vllm serve m --eplb-config '{\"a\": 1}'"
    assert shlex.split(line)[2:] == list(proc.argv)


def test_single_process_node_runs_in_foreground() -> None:
    plan = launch("vllm", "tp8")
    assert node_script(plan, 0, ("127.0.0.1",)) == (
        "# === vllm tp8: node 0 (127.0.0.1) ===\n"
        "# replica 0, leader: ready at http://127.0.0.1:8000/health, "
        "OpenAI API at http://127.0.0.1:8000/v1\n"
        f"CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 vllm serve m -tp 8 {FLAGS} --host 0.0.0.0 --port 8000\n"
    )


def test_replicas_on_one_node_run_side_by_side() -> None:
    plan = launch("vllm", "tp4x2")
    lines = node_script(plan, 0).splitlines()
    assert lines[0] == "# === vllm tp4x2: node 0 ==="
    assert lines[2].startswith("CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve") and lines[2].endswith(" &")
    assert lines[3].startswith("# replica 1, leader")
    assert lines[4].startswith("CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve")
    assert lines[4].endswith("--port 8010 &")
    assert lines[-1] == "wait"


def test_multi_node_script_has_one_block_per_node() -> None:
    nodes = ("10.0.0.1", "10.0.0.2")
    plan = launch("vllm", "tp8pp2", Placement(nodes))
    text = to_shell(plan, nodes)
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "# === vllm tp8pp2: node 0 (10.0.0.1) ===" in text
    assert "# === vllm tp8pp2: node 1 (10.0.0.2) ===\n# replica 0, headless\n" in text
    commands = [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]
    assert [c[c.index("--node-rank") + 1] for c in commands] == ["0", "1"]


def test_to_json_round_trips_argv() -> None:
    plan = launch("sglang", "dp8ep")
    data = json.loads(json.dumps(to_json(plan, ("127.0.0.1",), ["a warning"])))
    assert data["engine"] == "sglang" and data["layout"] == "dp8ep"
    assert data["nodes"] == ["127.0.0.1"] and data["warnings"] == ["a warning"]
    (rep,) = data["replicas"]
    assert tuple(rep["processes"][0]["argv"]) == plan.replicas[0].processes[0].argv
    assert rep["health_url"].endswith("/health_generate")


def test_engine_options_from_spec() -> None:
    opts = engine_options(spec(), num_redundant_experts=0)
    assert opts == EngineOptions(
        model="Qwen/Qwen2.5-72B-Instruct", kv_cache_dtype="fp8", extra_args=("--trust-remote-code",),
    )  # fmt: skip


def test_model_path_checks(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"model.path: .*nope does not exist"):
        engine_options(spec(model=f"name: qwen2.5-72b, path: {tmp_path / 'nope'}"))
    (tmp_path / "config.json").write_text("{}")
    assert engine_options(spec(model=f"config_path: {tmp_path / 'config.json'}")).model == str(tmp_path)
    assert engine_options(spec(model="name: qwen2.5-72b, path: org/repo")).model == "org/repo"
    with pytest.raises(SpecError, match=r"model.config_path: .*missing/config.json does not exist"):
        engine_options(spec(model=f"config_path: {tmp_path / 'missing' / 'config.json'}"))
    with pytest.raises(SpecError, match=r"preset 'my-own-model' has no known weights; set model\.path"):
        engine_options(spec(model="name: my-own-model"))


def test_placement_from_spec() -> None:
    assert placement(spec()) == Placement(nodes=("127.0.0.1",), gpus_per_node=8, bind_host="127.0.0.1")
    two = placement(spec(2))
    assert two.nodes == ("node0", "node1") and two.bind_host == "0.0.0.0"
    assert placement(spec(2), ("a", "b")).nodes == ("a", "b")
    with pytest.raises(SpecError, match=r"2 given but hardware\.nodes is 1"):
        placement(spec(), ("a", "b"))


def test_placement_on_cpu() -> None:
    text = SPEC.replace("gpu: h100-sxm", "gpu: cpu").replace("NODES", "1")
    cpu = placement(parse_spec(text))
    assert cpu.on_cpu and cpu.gpus_per_node == 2  # the cpu preset's ranks per node
    cpu = placement(parse_spec(text.replace("nodes: 1", "nodes: 1, gpus_per_node: 4")))
    assert cpu.on_cpu and cpu.gpus_per_node == 4
    with pytest.raises(SpecError, match="unknown GPU 'tpu9'"):
        placement(parse_spec(SPEC.replace("gpu: h100-sxm", "gpu: tpu9").replace("NODES", "1")))


def test_engine_env_and_sim_model() -> None:
    text = SPEC.replace("NODES", "1").replace("extra_args:", "env: {A: '1', B: '2'}, extra_args:")
    opts = engine_options(parse_spec(text), extra_env=(("B", "3"),))
    assert opts.extra_env == (("A", "1"), ("B", "3"))
    assert engine_options(spec(model="name: my-own-model"), engine="sim").model == "my-own-model"


def test_prepare_warns_for_sglang_on_cpu() -> None:
    text = SPEC.replace("gpu: h100-sxm", "gpu: cpu").replace("NODES", "1, gpus_per_node: 2")
    out = prepare(parse_spec(text), parse_layout("tp2"), engine="sglang")
    assert out.plan.engine == "sglang"
    assert any("cannot serve on CPU" in w for w in out.warnings)


def test_cli_compile_shell_and_json() -> None:
    runner = CliRunner()
    spec_file = str(ROOT / "layouts" / "qwen72b.yaml")
    res = runner.invoke(app, ["compile", spec_file, "--layout", "tp4x2", "--engine", "vllm"])
    assert res.exit_code == 0, res.output
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve Qwen/Qwen2.5-72B-Instruct -tp 4" in res.output
    # dp8ep on a dense model is one the planner rejects: --force emits it anyway.
    args = ["compile", spec_file, "--layout", "dp8ep", "--engine", "sglang", "--format", "json", "--force"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    argv = json.loads(res.stdout)["replicas"][0]["processes"][0]["argv"]
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]


def test_cli_compile_bad_layout_is_one_line_error() -> None:
    res = CliRunner().invoke(
        app, ["compile", str(ROOT / "layouts" / "qwen72b.yaml"), "--layout", "tp8pp2", "--engine", "vllm"]
    )
    assert res.exit_code != 0
    assert isinstance(res.exception, SpecError)
    assert "the planner rejects it: needs 16 GPUs, the cluster has 8" in str(res.exception)


def test_options_replace_keeps_frozen() -> None:
    opts = EngineOptions(model="m")
    with pytest.raises(AttributeError):
        opts.model = "x"  # type: ignore[misc]
    assert replace(opts, model="x").model == "x"
