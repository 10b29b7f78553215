"""`orch experts`: expert popularity, EP imbalance, redundant-expert placement, imbalance vs batch."""

from __future__ import annotations

import json
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from orchestrator.catalog.loader import load_model
from orchestrator.cli import app, make_console
from orchestrator.cli.flags import parse_ints
from orchestrator.disagg import is_disagg_text, parse_disagg
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout
from orchestrator.plan.expert_stats import load_expert_stats, lognormal_popularity, zipf_popularity
from orchestrator.plan.experts import contiguous_placement, imbalance_vs_batch, place_redundant
from orchestrator.plan.moe import touched_fraction


@app.command("experts")
def experts_command(
    stats: Annotated[
        str | None,
        typer.Argument(
            metavar="[STATS]",
            help="Per-expert token counts (CSV/JSON, "
            "docs/expert-stats.md); default: a seeded synthetic popularity.",
        ),
    ] = None,
    model: Annotated[str, typer.Option("--model", help="MoE preset or config.json.")] = "deepseek-v3",
    layout: Annotated[str, typer.Option("--layout", help="An EP layout, e.g. dp8ep or tp2dp4ep.")] = "dp8ep",
    redundant: Annotated[int, typer.Option("--redundant", help="Extra expert slots over all EP ranks.")] = 0,
    batch: Annotated[
        str, typer.Option("--batch", help="Batch sizes (tokens) for the routing curve.")
    ] = "1,8,64,512,4096",
    sigma: Annotated[
        float, typer.Option("--sigma", help="Lognormal sigma of the synthetic popularity.")
    ] = 0.5,
    zipf: Annotated[float | None, typer.Option("--zipf", help="Zipf exponent instead of lognormal.")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the expert placement and the load imbalance (busiest EP rank / mean) of an EP layout."""
    cfg = load_model(model)
    if not cfg.is_moe:
        raise SpecError(f"--model {model}: a dense model has no experts; pick an MoE preset (orch catalog)")
    if is_disagg_text(layout):  # each pool places its own experts (disagg.<role>.num_redundant_experts)
        pd = parse_disagg(layout)
        pools = [(role, pool) for role, pool in (("decode", pd.decode), ("prefill", pd.prefill)) if pool.ep]
        which = (" or ".join(f"--layout {pool} (the {role} pool)" for role, pool in pools) if pools
                 else "one pool's layout with 'ep', e.g. --layout dp8ep")
        raise SpecError(f"--layout {layout}: a prefill/decode pair; orch experts takes one pool's layout: "
                        f"pass {which}")
    lay = parse_layout(layout)
    if not lay.ep:
        raise SpecError(f"--layout {layout}: not expert parallel; add 'ep', e.g. dp{lay.tp * lay.dp}ep")
    ranks, num_experts = lay.ep_size, cfg.num_routed_experts
    if num_experts % ranks:
        raise SpecError(f"--layout {layout}: {num_experts} experts do not divide over {ranks} EP ranks")
    if redundant < 0 or redundant % ranks:
        raise SpecError(f"--redundant {redundant}: must be a non-negative multiple of the {ranks} EP ranks")
    if stats is not None:
        source = stats
        pop = load_expert_stats(stats, num_experts=num_experts).popularity()
    elif zipf is not None:
        source, pop = (
            f"zipf(exponent={zipf}, seed={seed})",
            zipf_popularity(num_experts, exponent=zipf, seed=seed),
        )
    else:
        source, pop = (
            f"lognormal(sigma={sigma}, seed={seed})",
            lognormal_popularity(num_experts, sigma=sigma, seed=seed),
        )
    placed = place_redundant(pop, ep_ranks=ranks, redundant_slots=redundant)
    batches = parse_ints(batch, "--batch") or (1,)
    k = cfg.num_experts_per_token
    before = imbalance_vs_batch(
        pop, top_k=k, batch_sizes=batches, placement=contiguous_placement(num_experts, ranks), seed=seed
    )
    after = imbalance_vs_batch(pop, top_k=k, batch_sizes=batches, placement=placed.ranks, seed=seed)
    curve = [
        {
            "batch_tokens": b.batch_tokens,
            "touched_fraction": touched_fraction(num_experts, k, b.batch_tokens),
            "imbalance_before": b.imbalance_mean,
            "imbalance_after": a.imbalance_mean,
        }
        for b, a in zip(before, after, strict=True)
    ]
    out: dict[str, Any] = {
        "model": cfg.name,
        "layout": str(lay),
        "ep_ranks": ranks,
        "experts": num_experts,
        "top_k": k,
        "popularity": source,
        "redundant_slots": redundant,
        "slots_per_rank": placed.slots_per_rank,
        "imbalance_before": placed.imbalance_before,
        "imbalance_after": placed.imbalance_after,
        "ranks": [
            {"rank": r, "experts": list(e), "load_share": s}
            for r, (e, s) in enumerate(zip(placed.ranks, placed.rank_load_share, strict=True))
        ],
        "curve": curve,
        "vllm_flags": [
            "--enable-expert-parallel",
            "--enable-eplb",
            "--eplb-config",
            json.dumps({"num_redundant_experts": redundant}),
        ]
        if redundant
        else ["--enable-expert-parallel"],
        "sglang_flags": ["--ep-size", str(ranks)]
        + (["--enable-eplb", "--ep-num-redundant-experts", str(redundant)] if redundant else []),
    }
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    console = make_console()
    console.print(
        f"[bold]{cfg.name}[/] {lay}: {num_experts} experts (top-{k}) over {ranks} EP ranks, "
        f"popularity {source}; {redundant} redundant slots -> {placed.slots_per_rank} slots per rank",
        highlight=False,
    )
    console.print(
        f"imbalance (busiest rank / mean): {placed.imbalance_before:.3f} contiguous -> "
        f"{placed.imbalance_after:.3f} with redundant experts",
        highlight=False,
    )
    table = Table(title="routing simulation (seeded, mean over trials)", title_justify="left")
    for col in ("batch tokens", "experts touched", "imbalance contiguous", "imbalance placed"):
        table.add_column(col, justify="right")
    for c in curve:
        table.add_row(
            str(c["batch_tokens"]),
            f"{c['touched_fraction']:.1%}",
            f"{c['imbalance_before']:.3f}",
            f"{c['imbalance_after']:.3f}",
        )
    console.print(table)
    hot = np.argsort(-pop)[:8]
    console.print("hottest experts: " + ", ".join(f"{int(e)} ({pop[e]:.2%})" for e in hot), highlight=False)
    console.print(
        "vLLM: " + " ".join(out["vllm_flags"]) + "   SGLang: " + " ".join(out["sglang_flags"]),
        highlight=False,
    )
