"""`orch catalog`: the bundled model and GPU presets, with parameter counts derived from each config."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from orchestrator.catalog.loader import gpu_names, load_gpu, load_model, model_names
from orchestrator.cli import app, make_console
from orchestrator.plan.params import count_params


def _model_rows() -> list[dict[str, Any]]:
    rows = []
    for name in model_names():
        cfg = load_model(name)
        counts = count_params(cfg)
        rows.append(
            {
                "name": name,
                "layers": cfg.num_layers,
                "hidden_size": cfg.hidden_size,
                "heads": cfg.num_heads,
                "kv_heads": cfg.num_kv_heads,
                "routed_experts": cfg.num_routed_experts,
                "experts_per_token": cfg.num_experts_per_token,
                "total_params": counts.total,
                "active_params": counts.active,
            }
        )
    return rows


def _gpu_rows() -> list[dict[str, Any]]:
    rows = []
    for name in gpu_names():
        gpu = load_gpu(name)
        rows.append(
            {
                "name": name,
                "memory_bytes": gpu.memory_bytes,
                "hbm_bytes_per_s": gpu.hbm_bytes_per_s,
                "bf16_flops_per_s": gpu.bf16_flops_per_s,
                "fp8_flops_per_s": gpu.fp8_flops_per_s,
                "gpus_per_node": gpu.gpus_per_node,
                "intra_node_bytes_per_s": gpu.intra_node.bandwidth_bytes_per_s,
                "inter_node_bytes_per_s": gpu.inter_node.bandwidth_bytes_per_s,
                "source": gpu.source,
            }
        )
    return rows


@app.command()
def catalog(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List the model presets (with parameter counts from their config.json) and the GPU presets."""
    models, gpus = _model_rows(), _gpu_rows()
    if as_json:
        typer.echo(json.dumps({"models": models, "gpus": gpus}, indent=2))
        return
    console = make_console()
    mt = Table(title="Models (parameters counted from each config.json)")
    for col in ("model", "layers", "hidden", "heads/kv", "experts (top-k)", "total", "active"):
        mt.add_column(col, justify="left" if col == "model" else "right", no_wrap=col == "model")
    for r in models:
        experts = f"{r['routed_experts']} ({r['experts_per_token']})" if r["routed_experts"] else "-"
        mt.add_row(
            r["name"], str(r["layers"]), str(r["hidden_size"]), f"{r['heads']}/{r['kv_heads']}", experts,
            f"{r['total_params'] / 1e9:.1f}B", f"{r['active_params'] / 1e9:.1f}B",
        )
    console.print(mt)
    gt = Table(title="GPUs")
    for col in ("gpu", "memory", "HBM", "bf16 dense", "fp8 dense", "per node", "intra-node", "inter-node"):
        gt.add_column(col, justify="left" if col == "gpu" else "right", no_wrap=col == "gpu")
    for r in gpus:
        gt.add_row(
            r["name"], f"{r['memory_bytes'] / 1e9:.0f} GB", f"{r['hbm_bytes_per_s'] / 1e12:.2f} TB/s",
            f"{r['bf16_flops_per_s'] / 1e12:.0f} TF/s", f"{r['fp8_flops_per_s'] / 1e12:.0f} TF/s",
            str(r["gpus_per_node"]), f"{r['intra_node_bytes_per_s'] / 1e9:.0f} GB/s",
            f"{r['inter_node_bytes_per_s'] / 1e9:.0f} GB/s",
        )
    console.print(gt)
    console.print("GPU figures are vendor datasheet numbers; efficiencies are guesses until calibrated.")
