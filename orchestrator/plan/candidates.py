"""A spec's candidates as values: each layout with the settings it runs with (`Candidate`), each
prefill/decode pair with its pools' settings, transfer backend and router (`DisaggCandidate`), checked
before anything is planned, compiled or deployed.

A pair's pool takes the spec's `disagg.<role>` settings over the engine section's and the engine's
own defaults for the rest (engines/settings.py resolves them, once per pool). What no deployment of a
pair can do on this spec is refused here in one line naming the layout and the fix (SpecError, exit
2): pools larger than the cluster or together needing more GPUs than it has (they would overlap), a
transfer backend the engine lacks, a pair on a target or scheduler that cannot run it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from orchestrator.candidate import AnyCandidate, Candidate, DisaggCandidate
from orchestrator.catalog.loader import load_model
from orchestrator.disagg import AnyLayout, DisaggLayout, check_pools, one_node
from orchestrator.engines import EngineSettings
from orchestrator.errors import SpecError
from orchestrator.kv_handover import backend_problem, default_backend
from orchestrator.plan.from_spec import engine_settings, settings_request
from orchestrator.spec.disagg import PoolSpec
from orchestrator.spec.models import SweepSpec
from orchestrator.spec.targets import KubernetesTarget

POOL_SETTINGS = ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "block_size",
                 "enable_prefix_caching")


def _gpus_per_node(spec: SweepSpec) -> int:
    from orchestrator.catalog.loader import load_gpu

    return spec.hardware.gpus_per_node or load_gpu(spec.hardware.gpu).gpus_per_node


def pair_problem(spec: SweepSpec, pd: DisaggLayout) -> str | None:
    """Why no deployment of `pd` can run on this spec (one line naming the layout and the fix)."""
    gpn = _gpus_per_node(spec)
    try:
        check_pools(pd, nodes=spec.hardware.nodes, gpus_per_node=gpn)
    except SpecError as exc:
        return str(exc)
    engine, backend = spec.engine.name, spec.disagg.transfer_backend
    if (why := backend_problem(engine, backend)) is not None:
        return f"layout {pd}: {why}"
    if spec.engine.sim_scheduler != "vllm" and engine == "sim":
        return (f"layout {pd}: the prefill/decode simulator runs vLLM's scheduler, not "
                f"{spec.engine.sim_scheduler}; set engine.sim_scheduler: vllm or drop the pair")
    if (backend or default_backend(engine)) == "ExampleConnector":
        if isinstance(spec.target, KubernetesTarget):
            return (f"layout {pd}: ExampleConnector hands KV over through a directory both servers share, "
                    "which pods do not have; use disagg.transfer_backend: NixlConnector")
        if not one_node(pd, gpn):
            return (f"layout {pd}: ExampleConnector hands KV over through a local directory, so both pools "
                    f"must fit one {gpn}-GPU node; use NixlConnector across nodes")
    return None


def check_pairs(spec: SweepSpec, layouts: Sequence[AnyLayout]) -> None:
    """Raise SpecError (exit 2) for the first pair no deployment can run; nothing is deployed."""
    for x in layouts:
        if isinstance(x, DisaggLayout) and (why := pair_problem(spec, x)) is not None:
            raise SpecError(why)


def pool_settings(spec: SweepSpec, pool: PoolSpec, base: EngineSettings) -> EngineSettings:
    """One pool's settings: `base` (the sweep's) unless the spec's disagg.<role> changes one; then
    resolved again by the engine with that pool's request (the engine's defaults fill the rest)."""
    changes = {k: getattr(pool, k) for k in POOL_SETTINGS if getattr(pool, k) is not None}
    if not changes:
        return base
    cfg = load_model(spec.model.name or spec.model.config_path or "")
    request = settings_request(spec, cfg)  # the first of each value a settings search lists
    try:
        return engine_settings(spec, cfg=cfg, engine=base.engine, request=replace(request, **changes))
    except SpecError as exc:  # name the pool's own section, where the value that fails was set
        role = "prefill" if pool is spec.disagg.prefill else "decode"
        raise SpecError(f"disagg.{role}.{str(exc).removeprefix('engine.')} (the pool's settings over the "
                        "engine section's)") from None


def disagg_candidate(spec: SweepSpec, pd: DisaggLayout, base: EngineSettings) -> DisaggCandidate:
    """The pair as the spec runs it: each pool's settings, redundant experts, transfer and router."""
    d = spec.disagg
    prefill, decode = pool_settings(spec, d.prefill, base), pool_settings(spec, d.decode, base)
    redundant = spec.engine.num_redundant_experts
    return DisaggCandidate.of(
        pd, prefill, decode, d.transfer_backend or default_backend(base.engine), bases=(prefill, decode),
        redundant_experts=(d.prefill.num_redundant_experts if d.prefill.num_redundant_experts is not None
                           else redundant,
                           d.decode.num_redundant_experts if d.decode.num_redundant_experts is not None
                           else redundant),
        router_policy=d.router_policy,
    )


def candidate_of(spec: SweepSpec, layout: AnyLayout, base: EngineSettings) -> AnyCandidate:
    """A layout of the spec (or of --layouts) as the candidate the stages take."""
    if isinstance(layout, DisaggLayout):
        return disagg_candidate(spec, layout, base)
    return Candidate(layout, base)


__all__ = ["candidate_of", "check_pairs", "disagg_candidate", "pair_problem", "pool_settings"]
