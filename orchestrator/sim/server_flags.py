"""The simulated server's command line: its flags, and the SimServer they build (sim/serving.py).

The flags are vLLM's where vLLM has one (`--max-num-seqs`, `--block-size`, `--speculative-config` ...);
an unset engine setting takes the simulated engine's default for the GPU (engines/sim.py), as a sweep
resolves it. Prefix caching is on by default, as in vLLM v1 (`--no-enable-prefix-caching` turns it
off). `--time-scale` is wall seconds per simulated second; `--startup-s` delays a healthy /health.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import SettingsRequest, get_engine
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout
from orchestrator.plan.checks import Cluster
from orchestrator.plan.dtypes import kv_bytes_per_value, weight_bytes_per_value
from orchestrator.plan.inputs import PlanInputs
from orchestrator.plan.memory import engine_sampler_profile, mxfp4_moe_backend
from orchestrator.sim.build import replica_engines
from orchestrator.sim.serving import SimServer
from orchestrator.sim.speculative import speculative_from_flags

# `orch sim serve --help`'s first line (the server's process is sim/server.py).
DESCRIPTION = ("`python -m orchestrator.sim.server`: an OpenAI-compatible streaming server backed by "
               "EngineCore.")


class _OneLineParser(argparse.ArgumentParser):
    """Bad flags as one line, as every orch command reports bad input (argparse prints its usage too)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}; see {self.prog} --help\n")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is outside 1-65535")
    return port


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = _OneLineParser(prog="orch sim serve", description=DESCRIPTION)
    p.add_argument("--model", required=True, help="catalog preset or path to a config.json")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--layout", required=True, help="one replica's layout, e.g. tp4 (no x<R>)")
    p.add_argument("--gpu", required=True)
    p.add_argument("--gpu-override", action="append", default=[], metavar="FIELD=VALUE")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--gpus-per-node", type=int, default=None)
    p.add_argument("--weight-dtype", default="bf16")
    p.add_argument("--quant-group-size", type=int, default=128)
    p.add_argument("--kv-cache-dtype", default="auto")
    # Engine settings: unset ones take the simulated engine's defaults for the GPU (engines/sim.py), as
    # a sweep resolves them; a sweep states every one of them.
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--scheduler", choices=("vllm", "guaranteed-no-evict"), default="vllm",
                   help="admission: vLLM v1's (preempt and recompute) or TensorRT-LLM's guaranteed-no-evict")
    p.add_argument("--runtime-reserve-bytes", type=float, default=None)
    p.add_argument("--speculative-config", default=None, metavar="JSON",
                   help='speculative decoding as vLLM takes it, e.g. '
                        '{"method":"ngram","num_speculative_tokens":4}')
    p.add_argument("--speculative-acceptance", default=None, metavar="RATES",
                   help="per-position acceptance: one rate, or one per position comma-separated")
    p.add_argument("--time-scale", type=float, default=1.0, help="wall seconds per simulated second")
    p.add_argument("--startup-s", type=float, default=0.0, help="wall seconds before /health is 200")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_port, required=True)
    p.add_argument("--exit-after-requests", type=int, default=None, metavar="N",
                   help="fault injection for tests: the process dies (exit 1) when request N+1 arrives")
    return p.parse_args(argv)


def server_from_args(args: argparse.Namespace) -> SimServer:
    from dataclasses import replace

    from orchestrator.plan.assumptions import Assumptions

    cfg = load_model(args.model)
    overrides: dict[str, Any] = {}
    for item in args.gpu_override:
        key, eq, value = item.partition("=")
        bad = SpecError(f"--gpu-override {item!r}: expected FIELD=NUMBER, e.g. hbm_efficiency=0.7")
        try:
            overrides[key] = float(value)
        except ValueError:
            raise bad from None
        if not eq or not key:
            raise bad
    gpu = load_gpu(args.gpu, overrides)
    layout = parse_layout(args.layout)
    if layout.replicas != 1:
        raise SpecError(f"--layout {args.layout}: one server is one replica; start {layout.replicas} servers")
    assumptions = Assumptions()
    if args.runtime_reserve_bytes is not None:
        assumptions = replace(assumptions, runtime_reserve_bytes=args.runtime_reserve_bytes)
    request = SettingsRequest(
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization, block_size=args.block_size,
        enable_prefix_caching=args.enable_prefix_caching, max_model_len=args.max_model_len,
        speculative=speculative_from_flags(args.speculative_config, args.speculative_acceptance, cfg),
    )
    settings = get_engine("sim").resolve_settings(request, gpu, cfg)
    max_len = settings.max_model_len
    inputs = PlanInputs(
        cfg=cfg, gpu=gpu, cluster=Cluster(args.nodes, args.gpus_per_node or gpu.gpus_per_node),
        settings=settings,
        weight_dtype=args.weight_dtype,
        weight_bytes_per_value=weight_bytes_per_value(args.weight_dtype, args.quant_group_size),
        quant_group_size=args.quant_group_size,
        kv_bytes_per_value=kv_bytes_per_value(
            "bf16" if args.kv_cache_dtype == "auto" else args.kv_cache_dtype),
        assumptions=assumptions,
        fp8_attention=args.kv_cache_dtype == "fp8" and gpu.fp8_flops_per_s > 0,
        sampler_profile=engine_sampler_profile("sim", args.scheduler),
        mxfp4_backend=mxfp4_moe_backend("sim", args.scheduler, gpu.compute_capability,
                                        weight_dtype=args.weight_dtype),
    )
    engines = replica_engines(inputs, layout, reserve_whole_kv=args.scheduler == "guaranteed-no-evict")
    if args.time_scale <= 0:
        raise SpecError("--time-scale must be > 0")
    server = SimServer(engines, model_name=args.served_model_name or args.model, time_scale=args.time_scale,
                       startup_s=args.startup_s, max_model_len=max_len)
    server.exit_after = args.exit_after_requests
    return server
