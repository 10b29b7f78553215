"""Golden argv of the SGLang engine (0.5.23 flags; the legacy DP-attention spelling on request)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.candidate import Candidate
from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import ENGINES, EngineSettings, SettingsRequest, get_engine, resolve_settings
from orchestrator.engines.base import EngineOptions, LaunchPlan, Placement
from orchestrator.engines.sglang import SGLangEngine
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout

M = "deepseek-ai/DeepSeek-V3"
OPTS = EngineOptions(model=M)
ONE = Placement()
TWO = Placement(nodes=("10.0.0.1", "10.0.0.2"))
HEAD = ("python3", "-m", "sglang.launch_server", "--model-path", M)
GPUS8 = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
H100, DSV3 = load_gpu("h100-sxm"), load_model("deepseek-v3")
SETTINGS = resolve_settings("sglang", H100, DSV3)


def flags(running: int = 2048) -> tuple[str, ...]:
    """SGLang 0.5.23's own defaults on an H100 for DeepSeek-V3, stated: the chunk and the memory fraction
    of handle_gpu_memory_settings (MLA: a 1.5 GiB graph reserve), the running-request floor of
    resolve_max_num_reqs (over all DP-attention ranks), page size 1."""
    return ("--context-length", "163840", "--max-running-requests", str(running), "--chunked-prefill-size",
            "8192", "--mem-fraction-static", "0.799", "--page-size", "1")


def serve(port: int = 8000) -> tuple[str, ...]:
    return ("--host", "0.0.0.0", "--port", str(port), "--enable-metrics")


def plan(layout: str, options: EngineOptions = OPTS, placement: Placement = ONE,
         engine: SGLangEngine | None = None, settings: EngineSettings = SETTINGS) -> LaunchPlan:  # fmt: skip
    return (engine or get_engine("sglang")).launch_plan(Candidate(parse_layout(layout), settings), options,
                                                        placement)


def procs(p: LaunchPlan) -> list[tuple[str, tuple[str, ...], dict[str, str]]]:
    return [(x.role, x.argv, x.env_dict) for r in p.replicas for x in r.processes]


def test_registered() -> None:
    assert isinstance(ENGINES["sglang"], SGLangEngine)


def test_tp8() -> None:
    p = plan("tp8")
    assert procs(p) == [("leader", (*HEAD, "--tp-size", "8", *flags(), *serve()), GPUS8)]
    assert p.replicas[0].health_url == "http://127.0.0.1:8000/health_generate"
    assert p.replicas[0].openai_base_url == "http://127.0.0.1:8000/v1"


def test_tp4x2_disjoint_gpus_and_ports() -> None:
    assert procs(plan("tp4x2")) == [
        ("leader", (*HEAD, "--tp-size", "4", *flags(), *serve(8000)), {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}),
        ("leader", (*HEAD, "--tp-size", "4", *flags(), *serve(8010)), {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}),
    ]


def test_tp8pp2_two_nodes() -> None:
    nodes = ("--nnodes", "2", "--node-rank")
    addr = ("--dist-init-addr", "10.0.0.1:8001")
    p = plan("tp8pp2", placement=TWO)
    assert procs(p) == [
        ("leader", (*HEAD, "--tp-size", "8", "--pp-size", "2", *flags(), *nodes, "0", *addr, *serve()),
         GPUS8),
        ("worker", (*HEAD, "--tp-size", "8", "--pp-size", "2", *flags(), *nodes, "1", *addr, *serve()),
         GPUS8),
    ]
    assert [x.node_index for x in p.replicas[0].processes] == [0, 1]
    # Only the leader answers HTTP, so readiness is asked of node 0 alone.
    assert p.replicas[0].health_url == "http://10.0.0.1:8000/health_generate"
    assert [x.ports for x in p.replicas[0].processes] == [(8000, 8001), ()]


def test_dp8ep_with_eplb_uses_dp_attention_inside_tp() -> None:
    opts = replace(OPTS, num_redundant_experts=8, a2a_backend="deepep_low_latency")
    ((_, argv, env),) = procs(plan("dp8ep", opts))
    assert argv == (
        *HEAD, "--tp-size", "8", "--attn-dp-size", "8", "--ep-size", "8", "--enable-eplb",
        "--ep-num-redundant-experts", "8", "--moe-a2a-backend", "deepep", "--deepep-mode", "low_latency",
        *flags(8 * 2048), *serve(),
    )  # fmt: skip
    assert env == GPUS8  # with DP attention, GPUs = tp-size = 8


def test_tp2dp4ep() -> None:
    ((_, argv, _),) = procs(plan("tp2dp4ep"))
    assert argv == (
        *HEAD, "--tp-size", "8", "--attn-dp-size", "4", "--ep-size", "8", *flags(4 * 2048), *serve()
    )


def test_legacy_dp_attention_spelling() -> None:
    ((_, argv, _),) = procs(plan("dp8ep", replace(OPTS, enforce_eager=True), engine=SGLangEngine(True)))
    assert argv == (
        *HEAD, "--tp-size", "8", "--dp-size", "8", "--enable-dp-attention", "--ep-size", "8",
        *flags(8 * 2048), "--disable-cuda-graph", *serve(),
    )  # fmt: skip


def test_dense_dp_is_independent_workers() -> None:
    # On a dense model vLLM's -dp is dp independent engines; SGLang's equivalent is --dp-size, each worker
    # with its own tp GPUs (DP attention would put all of them in one TP group instead).
    ((_, argv, env),) = procs(plan("tp2dp4"))
    assert argv == (*HEAD, "--tp-size", "2", "--dp-size", "4", *flags(), *serve())
    assert env == GPUS8
    ((_, argv, _),) = procs(plan("tp2dp4", replace(OPTS, num_routed_experts=256)))
    assert argv == (*HEAD, "--tp-size", "8", "--attn-dp-size", "4", *flags(4 * 2048), *serve())


def test_dense_dp_stays_on_one_node() -> None:
    with pytest.raises(SpecError, match=r"dense data parallel .* within one node; use replicas .* tp8x2"):
        plan("tp8dp2", placement=TWO)


def test_dp16_over_two_nodes() -> None:
    p = plan("dp16", replace(OPTS, num_routed_experts=256), placement=TWO)
    assert [(role, argv) for role, argv, _ in procs(p)] == [
        ("leader", (*HEAD, "--tp-size", "16", "--attn-dp-size", "16", *flags(16 * 2048),
                    "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:8001", *serve())),
        ("worker", (*HEAD, "--tp-size", "16", "--attn-dp-size", "16", *flags(16 * 2048),
                    "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:8001", *serve())),
    ]  # fmt: skip


def test_engine_knobs() -> None:
    opts = replace(
        OPTS, served_model_name="dsv3", kv_cache_dtype="fp8", quantization="fp8", enforce_eager=True,
        extra_args=("--trust-remote-code",),
    )  # fmt: skip
    request = SettingsRequest(max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=8192,
                              gpu_memory_utilization=0.88, block_size=64, enable_prefix_caching=False)
    ((_, argv, _),) = procs(plan("tp8", opts, settings=resolve_settings("sglang", H100, DSV3, request)))
    assert argv == (
        *HEAD, "--tp-size", "8", "--served-model-name", "dsv3", "--context-length", "8192",
        "--max-running-requests", "256", "--chunked-prefill-size", "8192", "--mem-fraction-static", "0.88",
        "--page-size", "64", "--disable-radix-cache", "--kv-cache-dtype", "fp8_e4m3", "--quantization", "fp8",
        "--cuda-graph-backend-decode", "disabled",
        "--cuda-graph-backend-prefill", "disabled", *serve(), "--trust-remote-code",
    )  # fmt: skip


@pytest.mark.parametrize(
    "flag", ["--tp-size", "--dp=2", "--attn-dp-size", "--base-gpu-id", "--ep-num-redundant-experts"]
)
def test_reserved_flags_rejected(flag: str) -> None:
    with pytest.raises(SpecError, match=f"extra_args: {flag.split('=')[0]} is set by the layout"):
        plan("tp8", replace(OPTS, extra_args=(flag, "1")))


def test_metrics_flag_not_given_twice() -> None:
    with pytest.raises(SpecError, match="--enable-metrics is already set"):
        plan("tp8", replace(OPTS, extra_args=("--enable-metrics",)))


def test_redundant_experts_must_fit_ep_size() -> None:
    with pytest.raises(SpecError, match="6 redundant experts = 6 physical, not divisible by the EP size 8"):
        plan("dp8ep", replace(OPTS, num_redundant_experts=6))


def test_cpu_is_unsupported_but_compiles_without_device_env() -> None:
    engine = get_engine("sglang")
    cpu = Placement(gpus_per_node=2, on_cpu=True)
    (reason,) = engine.unsupported(parse_layout("tp2"), cpu)
    assert "cannot serve on CPU" in reason
    ((_, _, env),) = procs(plan("tp2", placement=cpu))
    assert env == {}


def test_placement_problems_are_spec_errors() -> None:
    with pytest.raises(SpecError, match="sglang cannot run it: needs 2 nodes of 8 GPUs, placement has 1"):
        plan("dp16")
    assert get_engine("sglang").unsupported(parse_layout("tp8pp2"), TWO) == []


@pytest.mark.parametrize(
    ("gpu", "model", "chunk", "fraction"),
    # handle_gpu_memory_settings: the chunk by GPU memory; the fraction = 1 - reserve / memory with the
    # reserve 512 + 1.5 x chunk + 1024 (8 GPUs) + 2 x 512 decode graphs + prefill graphs (8 MiB each,
    # 1.5 GiB for MLA), at least 10 GiB above 60 GiB. Presets as nvidia-smi reports them: H100 81559 MiB
    # (reserve 16384 MLA; 15312 with 58 prefill graphs), B200 183359 MiB (27728 with 74 graphs),
    # L40S 46068 MiB (4096 chunk, 160 decode graphs: 8400, no 10 GiB floor below 60 GiB).
    [("h100-sxm", "deepseek-v3", 8192, 0.799), ("h100-sxm", "qwen2.5-72b", 8192, 0.812),
     ("b200", "qwen2.5-72b", 16384, 0.849), ("l40s", "qwen2.5-72b", 4096, 0.818)],
)
def test_memory_defaults_by_gpu(gpu: str, model: str, chunk: int, fraction: float) -> None:
    s = resolve_settings("sglang", load_gpu(gpu), load_model(model))
    assert (s.max_num_batched_tokens, s.gpu_memory_utilization) == (chunk, fraction)
    assert "handle_gpu_memory_settings" in s.source("gpu_memory_utilization")


def test_chunking_off_states_minus_one() -> None:
    s = resolve_settings("sglang", H100, DSV3, SettingsRequest(enable_chunked_prefill=False))
    ((_, argv, _),) = procs(plan("tp8", settings=s))
    assert argv[argv.index("--chunked-prefill-size") + 1] == "-1"
