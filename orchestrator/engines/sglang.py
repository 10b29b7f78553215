"""SGLang: a Layout plus EngineOptions and a Placement become `python3 -m sglang.launch_server` argv.

Layout mapping (GPU counts follow SGLang's rules): on a MoE model the layout's dp is DP attention, which
SGLang counts inside the TP group, so ``--tp-size`` is tp*dp and ``--attn-dp-size`` is dp (0.5.23; older
releases spell it ``--dp-size dp --enable-dp-attention``); on a dense model it is dp independent workers
(``--tp-size tp --dp-size dp``), as vLLM's ``-dp`` is. ``ep`` spreads experts over all tp*dp ranks
(``--ep-size``). Flags were checked against SGLang 0.5.23's own parser (tests/integration).
"""

from __future__ import annotations

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
from orchestrator.errors import SpecError
from orchestrator.layout import Layout

PROGRAM = ("python3", "-m", "sglang.launch_server")

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


class SGLangEngine:
    """The Engine protocol for SGLang. `legacy_dp_attention` targets releases before --attn-dp-size."""

    name = "sglang"

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

    def launch_plan(self, layout: Layout, options: EngineOptions, placement: Placement) -> LaunchPlan:
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
        base = self._head(layout, options)
        check_extra_duplicates((*base, "--enable-metrics"), options.extra_args)
        replicas = tuple(
            _replica(options, placement, base, slots) for slots in assign_slots(layout, placement)
        )
        return LaunchPlan(engine=self.name, layout_str=str(layout), replicas=replicas)

    def _head(self, layout: Layout, options: EngineOptions) -> tuple[str, ...]:
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
        if options.max_model_len is not None:
            argv += ["--context-length", str(options.max_model_len)]
        if options.max_num_seqs is not None:
            argv += ["--max-running-requests", str(options.max_num_seqs)]
        if options.max_num_batched_tokens is not None:
            # The closest SGLang knob to vLLM's per-step token budget: the chunked-prefill chunk size.
            argv += ["--chunked-prefill-size", str(options.max_num_batched_tokens)]
        if options.gpu_memory_utilization is not None:
            # SGLang's fraction covers weights + KV pool, like vLLM's; activations live outside it.
            argv += ["--mem-fraction-static", str(options.gpu_memory_utilization)]
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
