"""Checks and helpers shared by the vLLM and SGLang engines (both see the same EngineOptions)."""

from __future__ import annotations

from orchestrator.engines.base import EngineOptions
from orchestrator.errors import SpecError
from orchestrator.layout import Layout


def url(host: str, port: int, path: str) -> str:
    return f"http://{host}:{port}{path}"


def check_moe_options(layout: Layout, options: EngineOptions) -> None:
    """Redundant experts must spread evenly over the EP ranks of an expert-parallel layout.

    Without EP the MoE options are ignored, not refused: a sweep sets them once for all its layouts.
    """
    redundant = options.num_redundant_experts
    # Every EP rank must hold the same number of physical experts, so the extra slots must spread evenly.
    if layout.ep and redundant % layout.ep_size:
        raise SpecError(
            f"engine num_redundant_experts: {redundant} is not a multiple of the EP size {layout.ep_size} "
            f"of {layout}; use a multiple of {layout.ep_size}"
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
