"""The simulated engine as an Engine: one `python -m orchestrator.sim.server` process per replica.

A simulated replica is a single process whatever its size (multi-node replicas included): the
hardware exists only in the cost model, so the LaunchPlan has one leader per replica and no GPU ids.
On a multi-node placement that process stands in for the whole replica, so it is reached on the
loopback of the machine that starts it (the Ray target puts in its actor's address instead): the
node names of a multi-node spec are machines the simulator never needs (placeholders, on the local target).
"""

from __future__ import annotations

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
from orchestrator.layout import Layout
from orchestrator.plan.from_spec import effective_constants
from orchestrator.spec.models import SweepSpec

PYTHON = "python"  # the local target runs it with the interpreter orch runs in
LOOPBACK = "127.0.0.1"


def sim_args_from_spec(spec: SweepSpec) -> tuple[str, ...]:
    """The model shapes and hardware the simulated server models, from the spec."""
    hw, model = spec.hardware, spec.model
    args = ["--model", model.name or model.config_path or "", "--gpu", hw.gpu, "--nodes", str(hw.nodes),
            "--weight-dtype", model.weight_dtype, "--kv-cache-dtype", model.kv_cache_dtype,
            "--time-scale", repr(spec.engine.time_scale)]
    if hw.gpus_per_node:
        args += ["--gpus-per-node", str(hw.gpus_per_node)]
    for key, value in sorted(effective_constants(spec).items()):
        args += ["--gpu-override", f"{key}={value!r}"]
    if spec.engine.sim_scheduler != "vllm":
        args += ["--scheduler", spec.engine.sim_scheduler]
    if model.quant_group_size:
        args += ["--quant-group-size", str(model.quant_group_size)]
    if spec.engine.runtime_reserve_bytes is not None:
        args += ["--runtime-reserve-bytes", repr(spec.engine.runtime_reserve_bytes)]
    if spec.engine.startup_s is not None:
        # The simulated load time is a tenth of the time allowed for readiness (at least 0.5 s).
        args += ["--startup-s", repr(min(max(spec.engine.startup_s / 10, 0.5), 5.0))]
    return tuple(args)


class SimEngine:
    name = "sim"
    health_path = "/health"

    def unsupported(self, layout: Layout, placement: Placement) -> list[str]:
        return []  # the cost model can describe any layout; the planner says which ones fit

    def launch_plan(self, layout: Layout, options: EngineOptions, placement: Placement) -> LaunchPlan:
        check_extra_args(options.extra_args)
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
            argv = [PYTHON, "-m", "orchestrator.sim.server", *options.sim_args, "--layout", str(replica),
                    "--served-model-name", options.served_model_name or options.model,
                    "--host", placement.bind_host, "--port", str(port)]
            if "--model" not in options.sim_args:
                argv += ["--model", options.model]
            if options.max_model_len:
                argv += ["--max-model-len", str(options.max_model_len)]
            if options.max_num_seqs:
                argv += ["--max-num-seqs", str(options.max_num_seqs)]
            if options.max_num_batched_tokens:
                argv += ["--max-num-batched-tokens", str(options.max_num_batched_tokens)]
            if options.gpu_memory_utilization:
                argv += ["--gpu-memory-utilization", repr(options.gpu_memory_utilization)]
            argv += list(options.extra_args)
            env, node = options.extra_env, 0
            if slots:
                node = slots[r][0].node_index
                devices = ("CUDA_VISIBLE_DEVICES", ",".join(map(str, slots[r][0].gpu_ids)))
                env = tuple(sorted(dict((devices, *env)).items()))
            proc = ProcessSpec(
                argv=tuple(argv), env=env, node_index=node, ports=(port,), secret_env=options.secret_env
            )
            replicas.append(ReplicaPlan((proc,), f"http://{host}:{port}/health", f"http://{host}:{port}/v1"))
        return LaunchPlan(self.name, str(layout), tuple(replicas))


ENGINE = SimEngine()
