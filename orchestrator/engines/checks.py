"""Checks and helpers shared by the vLLM and SGLang engines (both see the same EngineOptions)."""

from __future__ import annotations

from orchestrator.engines.base import EngineOptions
from orchestrator.errors import SpecError
from orchestrator.layout import Layout


def url(host: str, port: int, path: str) -> str:
    return f"http://{host}:{port}{path}"


def check_moe_options(layout: Layout, options: EngineOptions) -> None:
    """With EPLB, every EP rank must hold the same number of physical experts.

    vLLM (EPLB config) and SGLang (expert location) both require (routed + redundant experts) % EP == 0.
    Without EP, or without redundant experts (EPLB off), the MoE options are ignored, not refused: a sweep
    sets them once for all its layouts, and the engines spread an uneven expert count themselves.
    """
    redundant = options.num_redundant_experts
    if not layout.ep or not redundant:
        return
    ep = layout.ep_size
    physical = options.num_routed_experts + redundant
    if physical % ep:
        fit = redundant + (-physical) % ep
        known = f"{options.num_routed_experts} routed + " if options.num_routed_experts else ""
        raise SpecError(
            f"engine num_redundant_experts: {known}{redundant} redundant experts = {physical} physical, not "
            f"divisible by the EP size {ep} of {layout}; the engines need (experts + redundant) % EP == 0: "
            f"use num_redundant_experts {fit}"
        )


def check_extra_duplicates(emitted_argv: tuple[str, ...], extra: tuple[str, ...]) -> None:
    """A passthrough flag that orch already sets from a spec field would be given twice."""
    emitted = {tok for tok in emitted_argv if tok.startswith("-")}
    for token in extra:
        flag = token.split("=", 1)[0]
        if flag in emitted:
            raise SpecError(
                f"engine extra_args: {flag} is already set from the spec's engine/model fields; "
                "remove it from extra_args and set the field instead"
            )
