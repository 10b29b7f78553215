"""SGLang: a Layout plus EngineOptions and a Placement become `python3 -m sglang.launch_server` argv.

Layout mapping (GPU counts follow SGLang's rules): on a MoE model the layout's dp is DP attention, which
SGLang counts inside the TP group, so ``--tp-size`` is tp*dp and ``--attn-dp-size`` is dp (0.5.23; older
releases spell it ``--dp-size dp --enable-dp-attention``); on a dense model it is dp independent workers
(``--tp-size tp --dp-size dp``), as vLLM's ``-dp`` is. ``ep`` spreads experts over all tp*dp ranks
(``--ep-size``). Flags were checked against SGLang 0.5.23's own parser (tests/integration).

Every resolved setting is stated in the argv; where the spec is silent `resolve_settings` takes
SGLang 0.5.23's own default for the GPU, read from its source (docs/compile.md): the chunked-prefill
size and the static memory fraction by GPU memory (sglang/srt/arg_groups/memory_hook.py,
handle_gpu_memory_settings), the running-request cap (sglang/srt/mem_cache/kv_cache_configurator.py,
resolve_max_num_reqs), the page size and the radix cache (sglang/srt/arg_groups/fields/).
"""

from __future__ import annotations

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
from orchestrator.errors import SpecError
from orchestrator.layout import Layout

if TYPE_CHECKING:
    from orchestrator.candidate import Candidate

PROGRAM = ("python3", "-m", "sglang.launch_server")
VERSION = "0.5.23"
MIB = 2**20
_MEMORY_HOOK = "sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings"
# Its Prometheus names (/metrics) -> the fields orch reads (loadgen/engine_metrics.py).
METRICS: Mapping[str, str] = {
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "waiting",
    "sglang:token_usage": "kv_usage",
    "sglang:num_retracted_requests_total": "preemptions",  # the counter; num_retracted_reqs is a gauge
    "sglang:cache_hit_rate": "prefix_hit_rate",
}
MAX_PREFILL_TOKENS = 16384  # ServerArgs max_prefill_tokens (sglang/srt/arg_groups/fields/schedule.py)

# The spec names all-to-all backends as vLLM does; SGLang splits DeepEP's two modes into a second flag.
_A2A_FROM_VLLM = {
    "deepep_low_latency": ("deepep", "low_latency"),
    "deepep_high_throughput": ("deepep", "normal"),
}

# SGLang 0.5.23's /health and /health_generate wait at least 1 s before they answer (they run a real
# decode step behind queued requests), so a probe with Kubernetes' default 1 s timeout never passes.
HEALTH_TIMEOUT_S = 10.0

_KV_DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3",
              "fp8_e5m2": "fp8_e5m2"}


def _by_memory(gpu: GPUSpec) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA-graph max batch) SGLang picks by GPU memory (_MEMORY_HOOK),
    for a TP group of four or more GPUs (below four it captures smaller decode graphs)."""
    mem_mib = gpu.memory_bytes / MIB
    for below_gib, chunk, decode_bs in ((20, 2048, 8), (35, 4096, 160), (60, 4096, 160), (90, 8192, 512),
                                        (160, 8192, 512)):
        if mem_mib < below_gib * 1024:
            return chunk, decode_bs
    return 16384, 512


def _prefill_graph_sizes(max_tokens: int) -> int:
    """How many prefill CUDA graphs SGLang captures up to max_tokens tokens
    (sglang/srt/arg_groups/cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes)."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_tokens + 1, 512)]
    return sum(1 for s in sizes if s <= max_tokens)


def mem_fraction_static(gpu: GPUSpec, model: ModelConfig, chunk: int | None) -> float:
    """SGLang's default --mem-fraction-static (_MEMORY_HOOK): what is left of the GPU after a reserve
    (MiB) of 512 + 1.5 per token of the prefill chunk (at least 2048) + 1024 per 8 GPUs of TP x PP + the
    CUDA graphs (2 per decode batch size, 8 per prefill graph; 1.5 GiB for MLA), at least 10 GiB on GPUs
    over 60 GiB. SGLang sizes the TP x PP term by the layout; orch takes a whole node's GPUs, the most
    any single-node layout reserves, so every layout of a sweep runs with one memory budget. DP
    attention and DeepEP reserve more in SGLang; set engine.gpu_memory_utilization for those."""
    mem_mib = gpu.memory_bytes / MIB
    _, decode_bs = _by_memory(gpu)
    # Chunking off (chunk None): activations scale with max_prefill_tokens, and no prefill graph is taken.
    activation = chunk if chunk is not None else MAX_PREFILL_TOKENS
    graphs = 1536.0 if model.is_mla else 8.0 * _prefill_graph_sizes(chunk or 0)
    reserved = 512 + max(activation, 2048) * 1.5 + gpu.gpus_per_node / 8 * 1024 + decode_bs * 2 + graphs
    if mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mem_mib - reserved) / mem_mib, 3)


def resolve_sglang(request: SettingsRequest, gpu: GPUSpec, model: ModelConfig) -> EngineSettings:
    """SGLang's own values where the request is silent (module docstring)."""
    src: list[tuple[str, str]] = []
    on_cpu = gpu.name == "cpu"
    where = f"sglang {VERSION} default for {gpu.name} ({_MEMORY_HOOK})"
    # On CPU SGLang finds no GPU memory and falls back to a 4096-token chunk and a 0.95 fraction.
    chunk_default = 4096 if on_cpu else _by_memory(gpu)[0]
    chunked = chosen(request, "enable_chunked_prefill", True,
                     f"sglang {VERSION} default (chunked_prefill_size > 0)", src)
    max_len = chosen(request, "max_model_len", model.max_position_embeddings,
                     "the model's max_position_embeddings (as SGLang's context_len)", src)
    chunk = chosen(request, "max_num_batched_tokens", chunk_default if chunked else max_len, where, src)
    fraction = 0.95 if on_cpu else mem_fraction_static(gpu, model, chunk if chunked else None)
    return EngineSettings(
        engine="sglang",
        engine_version=VERSION,
        # resolve_max_num_reqs: clamp(KV tokens / context * 512, 2048, 4096), at most KV tokens / 2. The
        # KV pool is known only at start, so orch states the floor of that clamp: SGLang still caps it
        # at half its pool, and no SLO-bound batch reaches 2048 sequences per worker.
        max_num_seqs=chosen(request, "max_num_seqs", 2048,
                            f"sglang {VERSION} default floor (sglang/srt/mem_cache/kv_cache_configurator.py "
                            "resolve_max_num_reqs)", src),
        max_num_batched_tokens=chunk,
        gpu_memory_utilization=chosen(request, "gpu_memory_utilization", fraction, where, src),
        block_size=chosen(request, "block_size", 1,
                          f"sglang {VERSION} default page_size "
                          "(sglang/srt/arg_groups/fields/schedule.py)", src),
        enable_chunked_prefill=chunked,
        enable_prefix_caching=chosen(
            request, "enable_prefix_caching", True,
            f"sglang {VERSION} default: radix cache on (sglang/srt/arg_groups/fields/memory.py)", src),
        max_model_len=max_len,
        sources=tuple(src),
    )


class SGLangEngine:
    """The Engine protocol for SGLang. `legacy_dp_attention` targets releases before --attn-dp-size."""

    name = "sglang"
    version = VERSION
    metrics = METRICS
    simulated = False

    def resolve_settings(
        self, request: SettingsRequest, gpu: GPUSpec, model: ModelConfig
    ) -> EngineSettings:
        return resolve_sglang(request, gpu, model)

    def __init__(self, legacy_dp_attention: bool = False) -> None:
        self.legacy_dp_attention = legacy_dp_attention

    def compile_problems(self, layout: Layout, placement: Placement) -> list[str]:
        """Reasons no valid argv exists for this layout on this placement."""
        return placement_problems(layout, placement)

    def unsupported(self, layout: Layout, placement: Placement) -> list[str]:
        """Reasons SGLang cannot run this layout here (compiling may still work, see compile_problems)."""
        reasons = self.compile_problems(layout, placement)
        if placement.on_cpu:
            # The registry's sglang-kernel wheel is CUDA-only; a CPU build needs source no registry ships.
            reasons.append("SGLang cannot serve on CPU (its kernels are CUDA-only); use vllm or sim here")
        return reasons

    def warnings(self, layout: Layout, placement: Placement) -> list[str]:
        return []

    def launch_plan(self, candidate: Candidate, options: EngineOptions, placement: Placement) -> LaunchPlan:
        layout = candidate.layout
        problems = self.compile_problems(layout, placement)
        if problems:
            raise SpecError(f"layout {layout}: sglang cannot run it: " + "; ".join(problems))
        check_extra_args(options.extra_args)
        check_moe_options(layout, options)
        spans_nodes = layout.gpus_per_replica > placement.gpus_per_node
        if layout.dp > 1 and not dp_attention(layout, options) and spans_nodes:
            # SGLang's DP controller places independent DP workers on the GPUs of one node only.
            raise SpecError(
                f"layout {layout}: sglang runs dense data parallel (--dp-size) within one node; use replicas "
                f"instead, e.g. tp{layout.tp}x{layout.dp * layout.replicas}"
            )
        base = self._head(layout, options, candidate.settings)
        check_extra_duplicates((*base, "--enable-metrics"), options.extra_args)
        replicas = tuple(
            _replica(options, placement, base, slots) for slots in assign_slots(layout, placement)
        )
        return LaunchPlan(engine=self.name, candidate=candidate, replicas=replicas)

    def _head(self, layout: Layout, options: EngineOptions, settings: EngineSettings) -> tuple[str, ...]:
        """Argv shared by every node of a replica: model, parallel sizes, MoE flags, engine knobs."""
        argv: list[str] = [*PROGRAM, "--model-path", options.model]
        attention_dp = dp_attention(layout, options)
        # DP attention ranks live inside SGLang's TP group; independent DP workers each have their own.
        tp_size = layout.tp * layout.dp if attention_dp else layout.tp
        if tp_size > 1:
            argv += ["--tp-size", str(tp_size)]
        if layout.pp > 1:
            argv += ["--pp-size", str(layout.pp)]
        if attention_dp:
            if self.legacy_dp_attention:
                argv += ["--dp-size", str(layout.dp), "--enable-dp-attention"]
            else:
                argv += ["--attn-dp-size", str(layout.dp)]
        elif layout.dp > 1:
            argv += ["--dp-size", str(layout.dp)]
        if layout.ep:
            argv += ["--ep-size", str(layout.ep_size)]
            if options.num_redundant_experts:
                argv += ["--enable-eplb", "--ep-num-redundant-experts", str(options.num_redundant_experts)]
            if options.a2a_backend:
                backend, mode = _A2A_FROM_VLLM.get(options.a2a_backend, (options.a2a_backend, ""))
                argv += ["--moe-a2a-backend", backend]
                if mode:
                    argv += ["--deepep-mode", mode]
        if options.served_model_name:
            argv += ["--served-model-name", options.served_model_name]
        argv += settings_flags(settings, layout, options)
        if options.kv_cache_dtype and options.kv_cache_dtype != "auto":
            dtype = _KV_DTYPES.get(options.kv_cache_dtype)
            if dtype is None:
                known = ", ".join(sorted(_KV_DTYPES))
                raise SpecError(
                    f"engine kv_cache_dtype: {options.kv_cache_dtype!r} unknown to sglang; use {known}"
                )
            argv += ["--kv-cache-dtype", dtype]
        if options.quantization:
            argv += ["--quantization", options.quantization]
        if options.enforce_eager:
            if self.legacy_dp_attention:
                argv.append("--disable-cuda-graph")
            else:
                argv += ["--cuda-graph-backend-decode", "disabled"]
                argv += ["--cuda-graph-backend-prefill", "disabled"]
        return tuple(argv)


def settings_flags(settings: EngineSettings, layout: Layout, options: EngineOptions) -> list[str]:
    """Every resolved setting as an SGLang flag, so the engine runs what orch predicted."""
    # SGLang splits --max-running-requests over its DP-attention ranks (resolve_max_num_reqs); the
    # setting is per engine rank, as vLLM's is.
    running = settings.max_num_seqs * (layout.dp if dp_attention(layout, options) else 1)
    # The closest SGLang knob to vLLM's per-step token budget is the chunked-prefill size; -1 turns
    # chunking off. SGLang's fraction covers weights + KV pool; activations live outside it.
    chunk = settings.max_num_batched_tokens if settings.enable_chunked_prefill else -1
    argv = ["--context-length", str(settings.max_model_len), "--max-running-requests", str(running),
            "--chunked-prefill-size", str(chunk),
            "--mem-fraction-static", repr(settings.gpu_memory_utilization),
            "--page-size", str(settings.block_size)]
    if not settings.enable_prefix_caching:
        argv.append("--disable-radix-cache")  # on by default; SGLang has no flag that says so
    return argv


def dp_attention(layout: Layout, options: EngineOptions) -> bool:
    """Whether the layout's dp is SGLang's DP attention (MoE) or independent DP workers (dense).

    vLLM's -dp means independent engines for a dense model, and for a MoE model DP attention with the
    experts shared over all ranks; SGLang spells the two as --dp-size and --attn-dp-size.
    """
    return layout.dp > 1 and (layout.ep or options.num_routed_experts > 0)


def _replica(
    options: EngineOptions, placement: Placement, base: tuple[str, ...], slots: list[Slot]
) -> ReplicaPlan:
    leader = slots[0]
    serve = ("--host", placement.bind_host, "--port", str(leader.port), "--enable-metrics")
    dist_port = leader.port + 1
    procs: list[ProcessSpec] = []
    for i, slot in enumerate(slots):
        nodes: tuple[str, ...] = ()
        if len(slots) > 1:
            # Every node runs the same server argv with its own rank; only rank 0 answers HTTP.
            nodes = ("--nnodes", str(len(slots)), "--node-rank", str(i),
                     "--dist-init-addr", f"{leader.host}:{dist_port}")
        role: Role = "leader" if i == 0 else "worker"
        ports = ((slot.port, dist_port) if nodes else (slot.port,)) if i == 0 else ()
        # On CPU nothing serves (see unsupported); the argv is still compiled, without a device env.
        env = [] if placement.on_cpu else device_env(slot, placement, len(slot.gpu_ids))
        procs.append(
            ProcessSpec(
                argv=(*base, *nodes, *serve, *options.extra_args),
                env=merge_env(env, options), node_index=slot.node_index, gpu_ids=slot.gpu_ids,
                ports=ports, role=role, secret_env=options.secret_env,
            )
        )
    return ReplicaPlan(
        processes=tuple(procs),
        # /health answers before the model can generate; /health_generate runs a real decode step.
        health_url=url(leader.host, leader.port, "/health_generate"),
        openai_base_url=url(leader.host, leader.port, "/v1"),
        health_timeout_s=HEALTH_TIMEOUT_S,
    )


ENGINE = SGLangEngine()
