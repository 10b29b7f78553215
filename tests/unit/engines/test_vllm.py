"""Golden argv of the vLLM engine: what `orch compile` tells a serving engineer to type on each node."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from orchestrator.candidate import Candidate
from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import ENGINES, EngineSettings, SettingsRequest, get_engine, resolve_settings
from orchestrator.engines.base import EngineOptions, LaunchPlan, Placement
from orchestrator.engines.vllm import VLLMEngine
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout

M = "Qwen/Qwen2.5-72B-Instruct"
OPTS = EngineOptions(model=M)
ONE = Placement()
TWO = Placement(nodes=("10.0.0.1", "10.0.0.2"))
SERVE = ("vllm", "serve", M)
H100, QWEN = load_gpu("h100-sxm"), load_model("qwen2.5-72b")
SETTINGS = resolve_settings("vllm", H100, QWEN)
# vLLM 0.33's own defaults for an H100 (EngineArgs.get_batch_defaults, CacheConfig), stated as flags.
FLAGS = ("--max-model-len", "32768", "--max-num-seqs", "1024", "--max-num-batched-tokens", "8192",
         "--gpu-memory-utilization", "0.92", "--block-size", "16", "--enable-chunked-prefill",
         "--enable-prefix-caching")


def plan(layout: str, options: EngineOptions = OPTS, placement: Placement = ONE,
         settings: EngineSettings = SETTINGS) -> LaunchPlan:
    return get_engine("vllm").launch_plan(Candidate(parse_layout(layout), settings), options, placement)


def procs(p: LaunchPlan) -> list[tuple[str, tuple[str, ...], dict[str, str]]]:
    return [(x.role, x.argv, x.env_dict) for r in p.replicas for x in r.processes]


def test_registered() -> None:
    assert isinstance(ENGINES["vllm"], VLLMEngine)


def test_tp8() -> None:
    p = plan("tp8")
    assert procs(p) == [
        ("leader", (*SERVE, "-tp", "8", *FLAGS, "--host", "0.0.0.0", "--port", "8000"),
         {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}),
    ]  # fmt: skip
    (rep,) = p.replicas
    assert rep.health_url == "http://127.0.0.1:8000/health"
    assert rep.openai_base_url == "http://127.0.0.1:8000/v1"


def test_tp4x2_disjoint_gpus_and_ports() -> None:
    p = plan("tp4x2")
    assert procs(p) == [
        ("leader", (*SERVE, "-tp", "4", *FLAGS, "--host", "0.0.0.0", "--port", "8000"),
         {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}),
        ("leader", (*SERVE, "-tp", "4", *FLAGS, "--host", "0.0.0.0", "--port", "8010"),
         {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}),
    ]  # fmt: skip
    assert [r.health_url for r in p.replicas] == ["http://127.0.0.1:8000/health", "http://127.0.0.1:8010/health"]


def test_tp8pp2_two_nodes_mp() -> None:
    head = (*SERVE, "-tp", "8", "-pp", "2", *FLAGS, "--distributed-executor-backend", "mp", "--nnodes", "2")
    master = ("--master-addr", "10.0.0.1", "--master-port", "8001")
    gpus = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    p = plan("tp8pp2", placement=TWO)
    assert procs(p) == [
        ("leader", (*head, "--node-rank", "0", *master, "--host", "0.0.0.0", "--port", "8000"), gpus),
        ("headless", (*head, "--node-rank", "1", *master, "--headless"), gpus),
    ]
    assert [x.node_index for x in p.replicas[0].processes] == [0, 1]
    assert p.replicas[0].health_url == "http://10.0.0.1:8000/health"


def test_tp8pp2_two_nodes_ray() -> None:
    p = plan("tp8pp2", replace(OPTS, executor="ray"), TWO)
    assert [(role, argv) for role, argv, _ in procs(p)] == [
        ("worker", ("ray", "start", "--head", "--node-ip-address", "10.0.0.1", "--port", "8002")),
        ("worker", ("ray", "start", "--address", "10.0.0.1:8002", "--node-ip-address", "10.0.0.2",
                    "--block")),
        ("leader", (*SERVE, "-tp", "8", "-pp", "2", *FLAGS, "--distributed-executor-backend", "ray",
                    "--host", "0.0.0.0", "--port", "8000")),
    ]  # fmt: skip


def test_dp8ep_with_eplb() -> None:
    opts = replace(OPTS, num_redundant_experts=8, a2a_backend="deepep_low_latency")
    ((_, argv, _),) = procs(plan("dp8ep", opts))
    assert argv == (
        *SERVE, "-dp", "8", "--enable-expert-parallel", "--enable-eplb",
        "--eplb-config", '{"num_redundant_experts": 8}', "--all2all-backend", "deepep_low_latency",
        *FLAGS, "--host", "0.0.0.0", "--port", "8000",
    )  # fmt: skip
    assert json.loads(argv[argv.index("--eplb-config") + 1]) == {"num_redundant_experts": 8}


def test_tp2dp4ep() -> None:
    ((_, argv, env),) = procs(plan("tp2dp4ep"))
    assert argv == (
        *SERVE, "-tp", "2", "-dp", "4", "--enable-expert-parallel", *FLAGS, "--host", "0.0.0.0", "--port",
        "8000",
    )
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}


def test_dp16_over_two_nodes() -> None:
    dp = ("--data-parallel-size-local", "8", "--data-parallel-address", "10.0.0.1",
          "--data-parallel-rpc-port", "8001")
    p = plan("dp16", placement=TWO)
    assert [(role, argv) for role, argv, _ in procs(p)] == [
        ("leader", (*SERVE, "-dp", "16", *FLAGS, *dp, "--host", "0.0.0.0", "--port", "8000")),
        ("headless", (*SERVE, "-dp", "16", *FLAGS, *dp, "--data-parallel-start-rank", "8", "--headless")),
    ]
    assert [x.ports for x in p.replicas[0].processes] == [(8000, 8001), ()]


def test_tp2dp8_over_two_nodes_counts_local_ranks() -> None:
    p = plan("tp2dp8", placement=TWO)
    leader, worker = p.replicas[0].processes
    assert "--data-parallel-size-local" in leader.argv
    assert leader.argv[leader.argv.index("--data-parallel-size-local") + 1] == "4"
    assert worker.argv[worker.argv.index("--data-parallel-start-rank") + 1] == "4"


def test_engine_knobs() -> None:
    opts = replace(
        OPTS, served_model_name="qwen", kv_cache_dtype="fp8", quantization="fp8", enforce_eager=True,
        extra_args=("--trust-remote-code",), extra_env=(("VLLM_LOGGING_LEVEL", "DEBUG"),),
    )  # fmt: skip
    request = SettingsRequest(max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=16384,
                              gpu_memory_utilization=0.9, block_size=32, enable_chunked_prefill=False,
                              enable_prefix_caching=False)
    ((_, argv, env),) = procs(plan("tp8", opts, settings=resolve_settings("vllm", H100, QWEN, request)))
    assert argv == (
        *SERVE, "-tp", "8", "--served-model-name", "qwen", "--max-model-len", "8192", "--max-num-seqs", "256",
        "--max-num-batched-tokens", "16384", "--gpu-memory-utilization", "0.9", "--block-size", "32",
        "--no-enable-chunked-prefill", "--no-enable-prefix-caching", "--kv-cache-dtype", "fp8",
        "--quantization", "fp8", "--enforce-eager", "--host", "0.0.0.0", "--port", "8000",
        "--trust-remote-code",
    )  # fmt: skip
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "VLLM_LOGGING_LEVEL": "DEBUG"}


def test_cpu_binding_one_core_per_rank() -> None:
    cpu = Placement(gpus_per_node=4, on_cpu=True, bind_host="127.0.0.1")
    p = plan("tp2x2", placement=cpu)
    assert [x.env_dict for r in p.replicas for x in r.processes] == [
        {"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
        {"VLLM_CPU_OMP_THREADS_BIND": "2|3"},
    ]
    assert "--gpu-memory-utilization" not in p.replicas[0].processes[0].argv


def test_cpu_binding_oversubscribed_and_pp_drops_enforce_eager() -> None:
    # tp2pp2 on two cores: four ranks ordered DP, PP, TP share the cores round-robin.
    cpu = Placement(gpus_per_node=4, on_cpu=True, cpu_cores_per_node=2, bind_host="127.0.0.1")
    ((_, argv, env),) = procs(plan("tp2pp2", replace(OPTS, enforce_eager=True), cpu))
    assert env == {"VLLM_CPU_OMP_THREADS_BIND": "0|1|0|1"}
    cpu_flags = [f for f in FLAGS if f not in ("--gpu-memory-utilization", "0.92")]
    assert argv == (*SERVE, "-tp", "2", "-pp", "2", *cpu_flags, "--host", "127.0.0.1", "--port", "8000")
    ((_, argv, _),) = procs(plan("tp2", replace(OPTS, enforce_eager=True), cpu))
    assert "--enforce-eager" in argv


def test_cpu_binding_with_core_ranges() -> None:
    cpu = Placement(gpus_per_node=2, on_cpu=True, cpu_cores_per_node=8)
    ((_, _, env),) = procs(plan("tp2", placement=cpu))
    assert env == {"VLLM_CPU_OMP_THREADS_BIND": "0-3|4-7"}


@pytest.mark.parametrize("flag", ["-tp", "--tensor-parallel-size=4", "--port", "--headless", "--enable-eplb"])
def test_reserved_flags_rejected(flag: str) -> None:
    with pytest.raises(SpecError, match=f"extra_args: {flag.split('=')[0]} is set by the layout"):
        plan("tp8", replace(OPTS, extra_args=(flag, "1")))


def test_extra_arg_duplicating_a_knob_rejected() -> None:
    with pytest.raises(SpecError, match="--max-model-len is already set"):
        plan("tp8", replace(OPTS, extra_args=("--max-model-len=8192",)))


@pytest.mark.parametrize(("layout", "redundant"), [("dp8ep", 3), ("dp8ep", 4), ("tp2dp4ep", 12)])
def test_redundant_experts_must_fit_ep_size(layout: str, redundant: int) -> None:
    with pytest.raises(SpecError, match="not divisible by the EP size 8"):
        plan(layout, replace(OPTS, num_redundant_experts=redundant))


@pytest.mark.parametrize(
    ("experts", "redundant", "ok"),
    # vLLM's EPLB rule counts physical experts: (routed + redundant) % EP == 0, not redundant alone.
    [(256, 8, True), (256, 4, False), (60, 4, True), (60, 8, False)],
)
def test_eplb_counts_physical_experts(experts: int, redundant: int, ok: bool) -> None:
    opts = replace(OPTS, num_routed_experts=experts, num_redundant_experts=redundant)
    if ok:
        plan("dp8ep", opts)
        return
    fit = redundant + (-(experts + redundant)) % 8
    with pytest.raises(SpecError, match=f"= {experts + redundant} physical.*use num_redundant_experts {fit}"):
        plan("dp8ep", opts)


def test_moe_options_ignored_without_ep() -> None:
    # A sweep sets EPLB and the all-to-all backend once; its non-EP layouts simply do not use them.
    ((_, argv, _),) = procs(plan("tp8", replace(OPTS, num_redundant_experts=8, a2a_backend="naive")))
    assert argv == (*SERVE, "-tp", "8", *FLAGS, "--host", "0.0.0.0", "--port", "8000")


def test_unsupported_reasons() -> None:
    engine = get_engine("vllm")
    assert engine.unsupported(parse_layout("tp8pp2"), ONE) == ["needs 2 nodes of 8 GPUs, placement has 1"]
    assert engine.unsupported(parse_layout("tp16dp2"), TWO) == ["needs 4 nodes of 8 GPUs, placement has 2"]
    four = Placement(nodes=("a", "b", "c", "d"))
    assert "inside one node" in engine.unsupported(parse_layout("tp16dp2"), four)[0]
    three = Placement(nodes=("a", "b", "c"))
    assert "whole number of DP ranks" in engine.unsupported(parse_layout("tp3dp8"), three)[0]
    with pytest.raises(SpecError, match="vllm cannot run it: needs 2 nodes"):
        plan("tp8pp2")


def test_cpu_ep_is_a_warning_not_an_error() -> None:
    engine = VLLMEngine()
    cpu = Placement(gpus_per_node=2, on_cpu=True)
    assert engine.unsupported(parse_layout("tp2ep"), cpu) == []
    assert "compile only" in engine.warnings(parse_layout("tp2ep"), cpu)[0]
    assert engine.warnings(parse_layout("tp2ep"), ONE) == []


def test_ray_executor_with_multi_node_dp_refused() -> None:
    with pytest.raises(SpecError, match="'ray' with DP across nodes"):
        plan("dp16", replace(OPTS, executor="ray"), TWO)
    ((_, argv, _),) = procs(plan("dp8", replace(OPTS, executor="ray")))
    assert argv[-6:-4] == ("--distributed-executor-backend", "ray")


@pytest.mark.parametrize(
    ("gpu", "seqs", "tokens"),
    # vLLM 0.33 EngineArgs.get_batch_defaults for `vllm serve`: by device memory, A100s excepted.
    [("h100-sxm", 1024, 8192), ("h200", 1024, 8192), ("b200", 1024, 16384), ("a100-sxm-80gb", 256, 2048),
     ("l40s", 256, 2048), ("cpu", 128, 2048)],
)
def test_batch_defaults_by_gpu(gpu: str, seqs: int, tokens: int) -> None:
    s = resolve_settings("vllm", load_gpu(gpu), QWEN)
    assert (s.max_num_seqs, s.max_num_batched_tokens) == (seqs, tokens)
    assert "get_batch_defaults" in s.source("max_num_seqs")


def test_spec_values_win_and_are_marked_as_the_spec() -> None:
    s = resolve_settings("vllm", H100, QWEN, SettingsRequest(max_num_seqs=64, gpu_memory_utilization=0.8))
    assert (s.max_num_seqs, s.gpu_memory_utilization, s.max_num_batched_tokens) == (64, 0.8, 8192)
    assert s.source("max_num_seqs") == "spec" and "vllm 0.33.0" in s.source("max_num_batched_tokens")


def test_without_chunked_prefill_the_budget_holds_a_whole_prompt() -> None:
    request = SettingsRequest(enable_chunked_prefill=False, max_model_len=20000)
    s = resolve_settings("vllm", H100, QWEN, request)
    assert s.max_num_batched_tokens == 20000


def test_cpu_block_size() -> None:
    assert resolve_settings("vllm", load_gpu("cpu"), QWEN).block_size == 128
    assert resolve_settings("vllm", load_gpu("cpu"), load_model("deepseek-v2-lite")).block_size == 16
