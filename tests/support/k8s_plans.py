"""Hand-built LaunchPlans shaped like the vLLM/SGLang engines' plans, for the Kubernetes and Helm tests.

Built by hand so these tests do not depend on the engine modules; one test also runs the real engine
when it is registered.
"""

from __future__ import annotations

from orchestrator.candidate import Candidate
from orchestrator.compile.k8s import K8sOptions
from orchestrator.engines.base import PORT_STRIDE, LaunchPlan, ProcessSpec, ReplicaPlan
from orchestrator.layout import Layout, parse_layout
from tests.support.engines import candidate as engine_candidate

MODEL = "/models/Qwen2.5-72B-Instruct"
NODES = ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4")
GPUS_PER_NODE = 8


def candidate(text: str, engine: str = "vllm") -> Candidate:
    """The layout with the engine's own settings for an H100 and Qwen2.5-72B."""
    return engine_candidate(text, engine, model="qwen2.5-72b")


def _vllm_argv(layout: Layout, port: int, nnodes: int, rank: int, leader: str) -> tuple[str, ...]:
    argv = [
        "vllm", "serve", MODEL, "--served-model-name", "qwen2.5-72b",
        "--host", NODES[0] if nnodes == 1 else "0.0.0.0", "--port", str(port),
        "--tensor-parallel-size", str(layout.tp), "--pipeline-parallel-size", str(layout.pp),
        "--gpu-memory-utilization", "0.9", "--max-model-len", "8192",
    ]  # fmt: skip
    if nnodes > 1:
        argv += ["--nnodes", str(nnodes), "--node-rank", str(rank), f"--master-addr={leader}"]
        argv += ["--master-port", str(port + 1), "--distributed-executor-backend", "mp"]
        if rank > 0:
            argv.append("--headless")
    return tuple(argv)


def vllm_plan(text: str, gpus_per_node: int = GPUS_PER_NODE) -> LaunchPlan:
    """A vLLM-like plan: replicas packed on nodes (own GPUs and port block) or spread over whole nodes."""
    layout = parse_layout(text)
    gpr = layout.gpus_per_replica
    replicas = []
    for r in range(layout.replicas):
        if gpr <= gpus_per_node:
            node, slot = divmod(r, gpus_per_node // gpr)
            port = 8000 + PORT_STRIDE * slot
            hosts = [(node, tuple(range(slot * gpr, (slot + 1) * gpr)))]
        else:
            span = gpr // gpus_per_node
            port = 8000
            hosts = [(n, tuple(range(gpus_per_node))) for n in range(r * span, (r + 1) * span)]
        leader = NODES[hosts[0][0]]
        procs = []
        for rank, (node, gpus) in enumerate(hosts):
            env = (
                ("CUDA_VISIBLE_DEVICES", ",".join(map(str, gpus))),
                ("VLLM_HOST_IP", NODES[node]),
                ("VLLM_LOGGING_LEVEL", "INFO"),
            )
            procs.append(
                ProcessSpec(
                    argv=_vllm_argv(layout, port, len(hosts), rank, leader),
                    env=env,
                    node_index=node,
                    gpu_ids=gpus,
                    ports=(port, port + 1),
                    role="leader" if rank == 0 else "headless",
                )
            )
        replicas.append(
            ReplicaPlan(tuple(procs), f"http://{leader}:{port}/health", f"http://{leader}:{port}/v1")
        )
    return LaunchPlan("vllm", candidate(text), tuple(replicas))


def sglang_multi_node_plan(nnodes: int = 3) -> LaunchPlan:
    """An SGLang-like replica over several nodes: the leader named in --dist-init-addr host:port."""
    procs = []
    for rank in range(nnodes):
        argv = (
            "python3", "-m", "sglang.launch_server", "--model-path", MODEL, "--host", "0.0.0.0",
            "--port", "30000", "--tp-size", str(8 * nnodes), "--nnodes", str(nnodes),
            "--node-rank", str(rank), "--dist-init-addr", f"{NODES[0]}:30001",
        )  # fmt: skip
        env = (("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"),)
        procs.append(ProcessSpec(argv, env, node_index=rank, gpu_ids=tuple(range(8)), ports=(30000, 30001)))
    rep = ReplicaPlan(tuple(procs), f"http://{NODES[0]}:30000/health", f"http://{NODES[0]}:30000/v1")
    return LaunchPlan("sglang", candidate(f"tp{8 * nnodes}", "sglang"), (rep,))


def options(**kw: object) -> K8sOptions:
    base: dict[str, object] = {
        "name": "qwen72b",
        "image": "vllm/vllm-openai:v0.32.0",
        "namespace": "llm",
        "gpu_product": "NVIDIA-H100-80GB-HBM3",
        "tolerations": ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
        "spec_hash": "0f" * 32,
    }
    base.update(kw)
    return K8sOptions(**base)  # type: ignore[arg-type]


SETUP_HINT = (
    "run `source .ci/setup.d/40-helm-k8s.sh` (installs kubernetes-validate, jsonschema, fetches helm)"
)


def missing_tool(what: str) -> None:
    """Skip when a tier's tool is missing; in CI (ORCH_CI=1) fail instead, so no tier is skipped silently."""
    import os

    import pytest

    message = f"{what} not available; {SETUP_HINT}"
    if os.environ.get("ORCH_CI") == "1":
        pytest.fail(f"ORCH_CI=1 but {message}")
    pytest.skip(message)


def real_plan(engine_name: str, text: str) -> LaunchPlan | None:
    """The registered engine's plan for a layout on two 8-GPU nodes, or None when it is not registered."""
    import contextlib
    import importlib

    from orchestrator.engines import ENGINES
    from orchestrator.engines.base import EngineOptions, Placement

    with contextlib.suppress(ImportError):
        importlib.import_module(f"orchestrator.engines.{engine_name}")
    engine = ENGINES.get(engine_name)
    if engine is None:
        return None
    placement = Placement(nodes=NODES[:2], gpus_per_node=GPUS_PER_NODE)
    return engine.launch_plan(candidate(text, engine_name), EngineOptions(model=MODEL), placement)


def real_vllm_plan(text: str) -> LaunchPlan | None:
    return real_plan("vllm", text)


def vllm_dp_plan(nnodes: int = 3, local: int = 8) -> LaunchPlan:
    """A vLLM-like data-parallel replica over nodes: each worker's --data-parallel-start-rank differs."""
    procs = []
    for rank in range(nnodes):
        argv = [
            "vllm", "serve", MODEL, "-dp", str(nnodes * local), "--data-parallel-size-local", str(local),
            "--data-parallel-address", NODES[0], "--data-parallel-rpc-port", "8001",
        ]  # fmt: skip
        if rank:
            argv += ["--data-parallel-start-rank", str(rank * local), "--headless"]
        else:
            argv += ["--host", "0.0.0.0", "--port", "8000"]
        env = (("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(local)))),)
        procs.append(
            ProcessSpec(tuple(argv), env, rank, tuple(range(local)), (8000, 8001) if not rank else ())
        )
    rep = ReplicaPlan(tuple(procs), f"http://{NODES[0]}:8000/health", f"http://{NODES[0]}:8000/v1")
    return LaunchPlan("vllm", candidate(f"dp{nnodes * local}"), (rep,))
