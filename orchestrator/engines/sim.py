"""The simulated engine as an Engine: one `python -m orchestrator.sim.server` process per replica.

A simulated replica is a single process whatever its size (multi-node replicas included): the
hardware exists only in the cost model, so the LaunchPlan has one leader per replica and no GPU ids.
On a multi-node placement that process stands in for the whole replica, so it is reached on the
loopback of the machine that starts it (the Ray target puts in its actor's address instead): the
node names of a multi-node spec are machines the simulator never needs (placeholders, on the local target).

The simulated scheduler is vLLM v1's, so its settings default to vLLM's for the GPU (engines/vllm.py);
it models chunked prefill only, and refuses a candidate without it. Like every engine it states each
resolved setting in its argv, and the server runs exactly those.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.catalog.types import GPUSpec, ModelConfig
from orchestrator.engines.base import (
    PORT_STRIDE,
    EngineOptions,
    LaunchPlan,
    Placement,
    ProcessSpec,
    ReplicaPlan,
    Slot,
    assign_slots,
    check_extra_args,
    placement_problems,
)
from orchestrator.engines.settings import EngineSettings, SettingsRequest
from orchestrator.engines.speculative_args import sim_speculative_args
from orchestrator.engines.vllm import METRICS as VLLM_METRICS
from orchestrator.engines.vllm import VERSION as VLLM_VERSION
from orchestrator.engines.vllm import resolve_vllm
from orchestrator.errors import SpecError
from orchestrator.layout import Layout

if TYPE_CHECKING:
    from orchestrator.candidate import Candidate

PYTHON = "python"  # the local target runs it with the interpreter orch runs in
LOOPBACK = "127.0.0.1"
VERSION = f"orch-sim (vllm {VLLM_VERSION} scheduler and defaults)"


@dataclass(frozen=True)
class SimOptions:
    """What the simulated server models besides the candidate: the model's shapes and the hardware."""

    model: str  # catalog preset or config.json path (the shapes; no weights are loaded)
    gpu: str
    nodes: int = 1
    gpus_per_node: int | None = None
    weight_dtype: str = "bf16"
    kv_cache_dtype: str = "auto"
    quant_group_size: int | None = None
    time_scale: float = 1.0
    scheduler: str = "vllm"
    runtime_reserve_bytes: float | None = None
    startup_s: float | None = None  # wall seconds before the simulated server reports healthy
    gpu_overrides: tuple[tuple[str, float], ...] = ()  # calibration constants and overrides, dotted keys

    def argv(self) -> list[str]:
        args = ["--model", self.model, "--gpu", self.gpu, "--nodes", str(self.nodes),
                "--weight-dtype", self.weight_dtype, "--kv-cache-dtype", self.kv_cache_dtype,
                "--time-scale", repr(self.time_scale)]
        if self.gpus_per_node:
            args += ["--gpus-per-node", str(self.gpus_per_node)]
        for key, value in self.gpu_overrides:
            args += ["--gpu-override", f"{key}={value!r}"]
        if self.scheduler != "vllm":
            args += ["--scheduler", self.scheduler]
        if self.quant_group_size:
            args += ["--quant-group-size", str(self.quant_group_size)]
        if self.runtime_reserve_bytes is not None:
            args += ["--runtime-reserve-bytes", repr(self.runtime_reserve_bytes)]
        if self.startup_s is not None:
            args += ["--startup-s", repr(self.startup_s)]
        return args


def resolve_sim(request: SettingsRequest, gpu: GPUSpec, model: ModelConfig) -> EngineSettings:
    if request.enable_chunked_prefill is False:
        raise SpecError("engine.enable_chunked_prefill: false is not modelled by the simulator (its "
                        "scheduler always chunks prompts within the token budget); leave it unset for "
                        "engine: sim")
    return resolve_vllm(request, gpu, model, engine="sim", version=VERSION)


def settings_flags(settings: EngineSettings) -> list[str]:
    """Every resolved setting as a flag of the simulated server (sim/server_flags.py parses them)."""
    return ["--max-model-len", str(settings.max_model_len),
            "--max-num-seqs", str(settings.max_num_seqs),
            "--max-num-batched-tokens", str(settings.max_num_batched_tokens),
            "--gpu-memory-utilization", repr(settings.gpu_memory_utilization),
            "--block-size", str(settings.block_size),
            "--enable-prefix-caching" if settings.enable_prefix_caching else "--no-enable-prefix-caching",
            *(sim_speculative_args(settings.speculative) if settings.speculative else ())]


class SimEngine:
    name = "sim"
    version = VERSION
    # the simulated server speaks vLLM's names (sim/serving.py); its PD roles count their KV handovers
    metrics: Mapping[str, str] = {**VLLM_METRICS, "orch_sim_kv_transfers_total": "kv_transfers",
                                  "orch_sim_kv_transfer_seconds_sum": "kv_transfer_s"}
    simulated = True  # its hardware exists only in the cost model

    def resolve_settings(
        self, request: SettingsRequest, gpu: GPUSpec, model: ModelConfig
    ) -> EngineSettings:
        return resolve_sim(request, gpu, model)

    def unsupported(self, layout: Layout, placement: Placement) -> list[str]:
        return []  # the cost model can describe any layout; the planner says which ones fit

    def compile_problems(self, layout: Layout, placement: Placement) -> list[str]:
        return []

    def warnings(self, layout: Layout, placement: Placement) -> list[str]:
        return []

    def launch_plan(self, candidate: Candidate, options: EngineOptions, placement: Placement) -> LaunchPlan:
        if options.sim is None:
            raise SpecError("engine sim: no model or hardware to simulate (EngineOptions.sim is unset)")
        check_extra_args(options.extra_args)
        layout = candidate.layout
        replica = Layout(tp=layout.tp, pp=layout.pp, dp=layout.dp, ep=layout.ep)
        # Side by side (placement.usable_gpus), each replica records the GPUs it stands for (its leader
        # node's) in CUDA_VISIBLE_DEVICES, as a real engine's; the simulator uses none. Not as gpu_ids:
        # those are what a pod or a Ray bundle asks for, and a simulated replica holds no device.
        slots: list[list[Slot]] = []
        if placement.usable_gpus and not placement_problems(layout, placement):
            slots = assign_slots(layout, placement)
        replicas = []
        for r in range(layout.replicas):
            host = placement.nodes[0] if len(placement.nodes) == 1 else LOOPBACK
            port = placement.base_port + PORT_STRIDE * r
            argv = [PYTHON, "-m", "orchestrator.sim.server", *options.sim.argv(), "--layout", str(replica),
                    "--served-model-name", options.served_model_name or options.model,
                    "--host", placement.bind_host, "--port", str(port),
                    *settings_flags(candidate.settings), *options.extra_args]
            env, node = options.extra_env, 0
            if slots:
                node = slots[r][0].node_index
                devices = ("CUDA_VISIBLE_DEVICES", ",".join(map(str, slots[r][0].gpu_ids)))
                env = tuple(sorted(dict((devices, *env)).items()))
            proc = ProcessSpec(
                argv=tuple(argv), env=env, node_index=node, ports=(port,), secret_env=options.secret_env
            )
            replicas.append(ReplicaPlan((proc,), f"http://{host}:{port}/health", f"http://{host}:{port}/v1"))
        return LaunchPlan(self.name, candidate, tuple(replicas))


ENGINE = SimEngine()
