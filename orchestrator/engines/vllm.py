"""vLLM: a candidate (layout + resolved settings), EngineOptions and a Placement become `vllm serve`
argv per node and replica, with every resolved setting stated as a flag.

Flags were checked against vLLM 0.32's own parser and 0.33's (tests/integration/test_engine_parsers.py).
The defaults `resolve_settings` takes where the spec is silent are vLLM 0.33.0's, read from its source
(docs/compile.md lists each rule with the file and function it comes from).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from orchestrator.catalog.types import GPUSpec, ModelConfig
from orchestrator.engines.base import (
    EngineOptions,
    LaunchPlan,
    Placement,
    ProcessSpec,
    ReplicaPlan,
    Role,
    Slot,
    assign_slots,
    check_extra_args,
    device_env,
    merge_env,
    placement_problems,
)
from orchestrator.engines.checks import check_extra_duplicates, check_moe_options, url
from orchestrator.engines.settings import EngineSettings, SettingsRequest, chosen
from orchestrator.engines.speculative_args import vllm_speculative_args
from orchestrator.errors import SpecError
from orchestrator.layout import Layout

if TYPE_CHECKING:
    from orchestrator.candidate import Candidate

PROGRAM = ("vllm", "serve")
VERSION = "0.33.0"
GIB = 2**30

# vllm/config/cache.py, CacheConfig: the field default of gpu_memory_utilization, and DEFAULT_BLOCK_SIZE.
GPU_MEMORY_UTILIZATION = 0.92
# Its Prometheus names (/metrics) -> the fields orch reads (loadgen/engine_metrics.py); older names too.
METRICS: Mapping[str, str] = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:num_preemptions": "preemptions",
    "vllm:gpu_prefix_cache_hit_rate": "prefix_hit_rate",
    "vllm:prefix_cache_hits_total": "prefix_hits",
    "vllm:prefix_cache_queries_total": "prefix_queries",
    # a prefill/decode pair's NIXL reads (nixl metrics: histogram of each transfer's duration)
    "vllm:nixl_xfer_time_seconds_count": "kv_transfers",
    "vllm:nixl_xfer_time_seconds_sum": "kv_transfer_s",
}
BLOCK_SIZE = 16
# vllm/platforms/cpu.py, CpuPlatform.update_block_size_for_backend: 128 on CPU; its MLA backend needs 16.
CPU_BLOCK_SIZE = 128


def batch_defaults(gpu: GPUSpec) -> tuple[int, int, str]:
    """(max_num_seqs, max_num_batched_tokens, the rule) `vllm serve` picks for this GPU.

    vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults (usage context OPENAI_API_SERVER, the API
    server's): >= 160 GiB of device memory (B200, MI300X) 1024 and 16384; >= 70 GiB and not an A100
    (H100, H200) 1024 and 8192; anything else 256 and 2048. On CPU 128 and 2048 per worker of the
    TP x PP group; orch states the one-worker values for every layout, so that they do not change
    with the layout (and the engine runs what was predicted)."""
    where = "vllm/engine/arg_utils.py EngineArgs.get_batch_defaults"
    if gpu.name == "cpu":
        return 128, 2048, f"vllm {VERSION} default on CPU for one worker ({where})"
    memory = gpu.memory_bytes
    if memory >= 160 * GIB:
        seqs, tokens, band = 1024, 16384, ">= 160 GiB"
    elif memory >= 70 * GIB and "a100" not in gpu.name.lower():
        seqs, tokens, band = 1024, 8192, ">= 70 GiB, not A100"
    else:
        seqs, tokens, band = 256, 2048, "< 70 GiB or A100"
    return seqs, tokens, f"vllm {VERSION} default for {gpu.name} ({band}; {where})"


def check_scheduler(seqs: int, tokens: int, max_len: int, chunked: bool) -> None:
    """What vLLM refuses to start with (SchedulerConfig.verify_max_model_len, vllm/config/scheduler.py,
    the same in 0.32 and 0.33): refused here in one line rather than as an engine that never came up."""
    if tokens < seqs:
        raise SpecError(f"engine.max_num_batched_tokens: {tokens} is below max_num_seqs {seqs}; vLLM "
                        "refuses it (a step must hold one token per running sequence): raise "
                        "max_num_batched_tokens or lower max_num_seqs")
    if tokens < max_len and not chunked:
        raise SpecError(f"engine.max_num_batched_tokens: {tokens} is below max_model_len {max_len} without "
                        "chunked prefill; vLLM refuses it (a whole prompt is one step): raise it, lower "
                        "model.max_model_len, or enable chunked prefill")


def resolve_vllm(request: SettingsRequest, gpu: GPUSpec, model: ModelConfig,
                 engine: str = "vllm", version: str = VERSION) -> EngineSettings:
    """vLLM's own values where the request is silent (module docstring; docs/compile.md)."""
    src: list[tuple[str, str]] = []
    seqs, tokens, rule = batch_defaults(gpu)
    cache = f"vllm {VERSION} default (vllm/config/cache.py CacheConfig)"
    on_cpu = gpu.name == "cpu"
    block = (16 if model.is_mla else CPU_BLOCK_SIZE) if on_cpu else BLOCK_SIZE
    block_rule = (f"vllm {VERSION} default on CPU (vllm/platforms/cpu.py)" if on_cpu else cache)
    max_len = chosen(request, "max_model_len", model.max_position_embeddings,
                     "the model's max_position_embeddings (as vLLM derives it from config.json)", src)
    chunked = chosen(request, "enable_chunked_prefill", True,
                     f"vllm {VERSION} default for generative models "
                     "(ModelConfig.is_chunked_prefill_supported)", src)
    if request.max_num_batched_tokens is None and not chunked:
        # _set_default_max_num_seqs_and_batched_tokens_args: without chunking a whole prompt is one step.
        tokens, rule = max(max_len, tokens), rule + ", raised to max_model_len without chunked prefill"
    seqs = chosen(request, "max_num_seqs", seqs, rule, src)
    tokens = chosen(request, "max_num_batched_tokens", tokens, rule, src)
    check_scheduler(seqs, tokens, max_len, chunked)
    return EngineSettings(
        engine=engine,
        engine_version=version,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        gpu_memory_utilization=chosen(request, "gpu_memory_utilization", GPU_MEMORY_UTILIZATION, cache, src),
        block_size=chosen(request, "block_size", block, block_rule, src),
        enable_chunked_prefill=chunked,
        enable_prefix_caching=chosen(
            request, "enable_prefix_caching", True,
            f"vllm {VERSION} default for generative models (ModelConfig.is_prefix_caching_supported)", src),
        max_model_len=max_len,
        sources=tuple(src),
        speculative=request.speculative,
    )

# vLLM's --kv-cache-dtype spells the spec's dtypes its own way; "auto" means: leave the flag out.
_KV_DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3",
              "fp8_e5m2": "fp8_e5m2"}


class VLLMEngine:
    """The Engine protocol for vLLM (`vllm serve`), GPU builds and the CPU build alike."""

    name = "vllm"
    version = VERSION
    metrics = METRICS
    simulated = False

    def resolve_settings(
        self, request: SettingsRequest, gpu: GPUSpec, model: ModelConfig
    ) -> EngineSettings:
        return resolve_vllm(request, gpu, model)

    def unsupported(self, layout: Layout, placement: Placement) -> list[str]:
        """Reasons vLLM cannot run this layout on this placement (empty when it can)."""
        reasons = placement_problems(layout, placement)
        if reasons:
            return reasons
        gpn = placement.gpus_per_node
        inner = layout.tp * layout.pp
        if layout.gpus_per_replica > gpn and layout.dp > 1:
            # Multi-node DP places whole DP ranks (tp*pp workers each) on a node; a rank cannot straddle.
            if inner > gpn:
                reasons.append(
                    f"multi-node DP needs each DP rank (tp*pp = {inner} GPUs) inside one node of {gpn}"
                )
            elif gpn % inner:
                reasons.append(f"{gpn} GPUs per node do not hold a whole number of DP ranks of {inner} GPUs")
        return reasons

    def compile_problems(self, layout: Layout, placement: Placement) -> list[str]:
        """Reasons no valid argv exists; for vLLM the same as unsupported (CPU limits are warnings)."""
        return self.unsupported(layout, placement)

    def warnings(self, layout: Layout, placement: Placement) -> list[str]:
        """Things that compile but will not serve as expected; the CLI prints them, deploy may refuse."""
        out: list[str] = []
        if placement.on_cpu and layout.ep:
            out.append("vLLM on CPU starts with expert parallel but fails on the first request: compile only")
        return out

    def launch_plan(self, candidate: Candidate, options: EngineOptions, placement: Placement) -> LaunchPlan:
        layout = candidate.layout
        problems = self.unsupported(layout, placement)
        if problems:
            raise SpecError(f"layout {layout}: vllm cannot run it: " + "; ".join(problems))
        check_extra_args(options.extra_args)
        check_moe_options(layout, options)
        if options.executor == "ray" and layout.dp > 1 and layout.gpus_per_replica > placement.gpus_per_node:
            # vLLM's Ray DP backend places DP ranks itself; orch compiles multi-node DP with mp only.
            raise SpecError(
                f"engine executor: 'ray' with DP across nodes ({layout}) is not compiled by orch; use 'mp'"
            )
        base = _serve_head(candidate, options, placement)
        check_extra_duplicates(base, options.extra_args)
        replicas = tuple(
            _replica(layout, options, placement, base, slots) for slots in assign_slots(layout, placement)
        )
        return LaunchPlan(engine=self.name, candidate=candidate, replicas=replicas)


def settings_flags(settings: EngineSettings, placement: Placement) -> list[str]:
    """Every resolved setting as a `vllm serve` flag, so the engine runs what orch predicted."""
    argv = ["--max-model-len", str(settings.max_model_len),
            "--max-num-seqs", str(settings.max_num_seqs),
            "--max-num-batched-tokens", str(settings.max_num_batched_tokens)]
    # The CPU build has no GPU memory to budget; its KV space comes from VLLM_CPU_KVCACHE_SPACE.
    if not placement.on_cpu:
        argv += ["--gpu-memory-utilization", repr(settings.gpu_memory_utilization)]
    argv += ["--block-size", str(settings.block_size)]
    argv.append(("--" if settings.enable_chunked_prefill else "--no-") + "enable-chunked-prefill")
    argv.append(("--" if settings.enable_prefix_caching else "--no-") + "enable-prefix-caching")
    return argv


def _serve_head(candidate: Candidate, options: EngineOptions, placement: Placement) -> tuple[str, ...]:
    """The argv shared by every node of a replica: model, parallel sizes, MoE and engine knobs."""
    layout = candidate.layout
    argv: list[str] = [*PROGRAM, options.model]
    if layout.tp > 1:
        argv += ["-tp", str(layout.tp)]
    if layout.pp > 1:
        argv += ["-pp", str(layout.pp)]
    if layout.dp > 1:
        argv += ["-dp", str(layout.dp)]
    if layout.ep:
        argv.append("--enable-expert-parallel")
        if options.num_redundant_experts:
            config = json.dumps({"num_redundant_experts": options.num_redundant_experts})
            argv += ["--enable-eplb", "--eplb-config", config]
        if options.a2a_backend:
            argv += ["--all2all-backend", options.a2a_backend]
    if options.served_model_name:
        argv += ["--served-model-name", options.served_model_name]
    argv += settings_flags(candidate.settings, placement)
    if candidate.settings.speculative is not None:
        argv += vllm_speculative_args(candidate.settings.speculative, tp=layout.tp)
    if options.kv_cache_dtype and options.kv_cache_dtype != "auto":
        dtype = _KV_DTYPES.get(options.kv_cache_dtype)
        if dtype is None:
            known = ", ".join(sorted(_KV_DTYPES))
            raise SpecError(f"engine kv_cache_dtype: {options.kv_cache_dtype!r} unknown to vllm; use {known}")
        argv += ["--kv-cache-dtype", dtype]
    if options.quantization:
        argv += ["--quantization", options.quantization]
    # On CPU, pipeline parallel with eager mode kills the engine on its first request (see shared notes).
    if options.enforce_eager and not (placement.on_cpu and layout.pp > 1):
        argv.append("--enforce-eager")
    return tuple(argv)


def _replica(
    layout: Layout, options: EngineOptions, placement: Placement, base: tuple[str, ...], slots: list[Slot]
) -> ReplicaPlan:
    leader = slots[0]
    serve = ("--host", placement.bind_host, "--port", str(leader.port))
    if len(slots) == 1:
        flags = ("--distributed-executor-backend", "ray") if options.executor == "ray" else ()
        procs = [_proc((*base, *flags, *serve, *options.extra_args), leader, placement, options, "leader")]
    elif layout.dp > 1:
        procs = _multi_node_dp(layout, options, placement, base, slots, serve)
    elif options.executor == "ray":
        procs = _multi_node_ray(options, placement, base, slots, serve)
    else:
        procs = _multi_node_mp(options, placement, base, slots, serve)
    return ReplicaPlan(
        processes=tuple(procs),
        health_url=url(leader.host, leader.port, "/health"),
        openai_base_url=url(leader.host, leader.port, "/v1"),
    )


def _proc(
    argv: tuple[str, ...], slot: Slot, placement: Placement, options: EngineOptions, role: Role,
    ports: tuple[int, ...] | None = None,
) -> ProcessSpec:
    env = merge_env(_device_env(slot, placement), options)
    return ProcessSpec(
        argv=argv, env=env, node_index=slot.node_index, gpu_ids=slot.gpu_ids,
        ports=ports if ports is not None else (slot.port,), role=role, secret_env=options.secret_env,
    )


def _device_env(slot: Slot, placement: Placement) -> list[tuple[str, str]]:
    ranks = len(slot.gpu_ids)
    cores = placement.cpu_cores_per_node or placement.gpus_per_node
    if not placement.on_cpu or cores >= placement.gpus_per_node:
        return device_env(slot, placement, ranks)
    # More worker slots than cores (e.g. tp2pp2 on two cores): ranks share cores round-robin. It is
    # slow but starts, whereas naming a core that does not exist fails at start.
    first = slot.gpu_ids[0] if slot.gpu_ids else 0
    return [("VLLM_CPU_OMP_THREADS_BIND", "|".join(str((first + r) % cores) for r in range(ranks)))]


def _multi_node_dp(
    layout: Layout, options: EngineOptions, placement: Placement, base: tuple[str, ...],
    slots: list[Slot], serve: tuple[str, ...],
) -> list[ProcessSpec]:
    """One `vllm serve` per node; node 0 runs the API server, the others only engine cores (--headless)."""
    leader = slots[0]
    local = placement.gpus_per_node // (layout.tp * layout.pp)
    rpc_port = leader.port + 1
    procs = []
    for i, slot in enumerate(slots):
        dp_flags = ("--data-parallel-size-local", str(local), "--data-parallel-address", leader.host,
                    "--data-parallel-rpc-port", str(rpc_port))
        if i == 0:
            argv = (*base, *dp_flags, *serve, *options.extra_args)
            procs.append(_proc(argv, slot, placement, options, "leader", (slot.port, rpc_port)))
        else:
            start = ("--data-parallel-start-rank", str(i * local), "--headless")
            argv = (*base, *dp_flags, *start, *options.extra_args)
            procs.append(_proc(argv, slot, placement, options, "headless", ()))
    return procs


def _multi_node_mp(
    options: EngineOptions, placement: Placement, base: tuple[str, ...], slots: list[Slot],
    serve: tuple[str, ...],
) -> list[ProcessSpec]:
    """TP/PP across nodes with the multiprocessing executor: same argv per node, node rank 0 serves HTTP."""
    leader = slots[0]
    master_port = leader.port + 1
    procs = []
    for i, slot in enumerate(slots):
        node_flags = ("--distributed-executor-backend", "mp", "--nnodes", str(len(slots)), "--node-rank",
                      str(i), "--master-addr", leader.host, "--master-port", str(master_port))
        if i == 0:
            argv = (*base, *node_flags, *serve, *options.extra_args)
            procs.append(_proc(argv, slot, placement, options, "leader", (slot.port, master_port)))
        else:
            argv = (*base, *node_flags, "--headless", *options.extra_args)
            procs.append(_proc(argv, slot, placement, options, "headless", ()))
    return procs


def _multi_node_ray(
    options: EngineOptions, placement: Placement, base: tuple[str, ...], slots: list[Slot],
    serve: tuple[str, ...],
) -> list[ProcessSpec]:
    """TP/PP across nodes on Ray: a Ray head on node 0, Ray workers joining it, then one `vllm serve`."""
    leader = slots[0]
    ray_port = leader.port + 2
    procs = [
        _proc(("ray", "start", "--head", "--node-ip-address", leader.host, "--port", str(ray_port)),
              leader, placement, options, "worker", (ray_port,))
    ]
    for slot in slots[1:]:
        argv = ("ray", "start", "--address", f"{leader.host}:{ray_port}", "--node-ip-address", slot.host,
                "--block")
        procs.append(_proc(argv, slot, placement, options, "worker", ()))
    serve_argv = (*base, "--distributed-executor-backend", "ray", *serve, *options.extra_args)
    procs.append(_proc(serve_argv, leader, placement, options, "leader"))
    return procs


ENGINE = VLLMEngine()
