"""One settings value, resolved once: for a vLLM spec on an H100 that leaves the settings to the engine,
`orch plan --json`, `orch compile`'s argv and the simulator (in process and the simulated server started
from its own argv) all run vLLM 0.33's own defaults for that GPU."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.compile import prepare
from orchestrator.layout import parse_layout
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.sim.run import spec_engines
from orchestrator.sim.server import parse_args, server_from_args
from orchestrator.spec import load_spec

SPEC = """
model: {name: qwen2.5-7b}
hardware: {gpu: h100-sxm}
engine: {name: vllm}
workload: {input_tokens: 512, output_tokens: 128, rates_per_s: [1.0], num_requests: 10}
layouts: [tp1]
"""


def _flag(argv: list[str] | tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_plan_compile_and_simulator_run_one_engine(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    runner = CliRunner()
    planned = runner.invoke(app, ["plan", str(path), "--json"])
    assert planned.exit_code == 0, planned.output
    settings = json.loads(planned.output)["engine_settings"]
    # vLLM 0.33 EngineArgs.get_batch_defaults for `vllm serve` on an 80 GB H100; CacheConfig's 0.92.
    assert (settings["max_num_seqs"], settings["max_num_batched_tokens"]) == (1024, 8192)
    assert settings["gpu_memory_utilization"] == 0.92 and settings["sources"]["max_num_seqs"] != "spec"

    compiled = runner.invoke(app, ["compile", str(path), "--layout", "tp1", "--format", "json"])
    assert compiled.exit_code == 0, compiled.output
    argv = json.loads(compiled.output)["replicas"][0]["processes"][0]["argv"]
    assert int(_flag(argv, "--max-num-seqs")) == settings["max_num_seqs"]
    assert int(_flag(argv, "--max-num-batched-tokens")) == settings["max_num_batched_tokens"]
    assert float(_flag(argv, "--gpu-memory-utilization")) == settings["gpu_memory_utilization"]
    assert int(_flag(argv, "--block-size")) == settings["block_size"]

    spec = load_spec(path)
    (engine,) = spec_engines(spec, plan_inputs(spec), parse_layout("tp1"))
    assert engine.config.max_num_seqs == settings["max_num_seqs"]
    assert engine.config.max_num_batched_tokens == settings["max_num_batched_tokens"]

    # The simulated server is told every value in its argv and runs exactly those.
    sim = prepare(spec, parse_layout("tp1"), engine="sim")
    sim_argv = sim.plan.replicas[0].processes[0].argv
    server = server_from_args(parse_args(list(sim_argv[3:])))
    assert server.engines[0].config.max_num_seqs == settings["max_num_seqs"]
    assert server.engines[0].config.max_num_batched_tokens == settings["max_num_batched_tokens"]
    assert server.engines[0].config.block_tokens == settings["block_size"]
