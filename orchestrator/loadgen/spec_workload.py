"""A sweep spec's workload and SLO in the load generator's terms (shared by sweep and simulate)."""

from __future__ import annotations

from functools import partial

from orchestrator.loadgen.bench import WorkloadFactory
from orchestrator.loadgen.workloads import (
    prefix_workload,
    random_workload,
    sharegpt_workload,
    trace_workload,
)
from orchestrator.spec.models import SLOSpec
from orchestrator.spec.workload import WorkloadSpec


def workload_factory(w: WorkloadSpec, *, text: bool = True) -> WorkloadFactory:
    """text=False: token counts without prompt text, for the simulator in virtual time (the same
    lengths; a served run sends text)."""
    if w.kind == "random":
        return partial(random_workload, input_len=w.input_tokens, output_len=w.output_tokens, seed=w.seed,
                       text=text)
    if w.kind == "prefix":
        return partial(prefix_workload, prefix_len=w.prefix_tokens or 512, input_len=w.input_tokens,
                       output_len=w.output_tokens, seed=w.seed, text=text)
    assert w.dataset_path is not None  # WorkloadSpec guarantees it for sharegpt and trace
    if w.kind == "sharegpt":
        return partial(sharegpt_workload, w.dataset_path, seed=w.seed)
    trace = trace_workload(w.dataset_path, seed=w.seed, text=text)
    return lambda n: trace


def slo_bounds(slo: SLOSpec) -> dict[str, float]:
    """{"ttft_p99_ms": 2000.0, ...}: the spec's bounds in loadgen.metrics' SLO keys."""
    return {f"{metric}_{pct}_ms": bound for (metric, pct), bound in slo.bounds_ms().items()}
