"""`orch consistency` without the printing: deploy layout A, collect; deploy layout B, collect (scoring
A's outputs too); compare; store. One layout runs at a time, so the two never share cores or GPUs."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from orchestrator.compile import placement, prepare
from orchestrator.consistency.client import served_models
from orchestrator.consistency.compare import ConsistencyResult, Side, collect, compare
from orchestrator.deploy.base import free_base_port
from orchestrator.deploy.targets import make_target
from orchestrator.errors import OrchError, SpecError
from orchestrator.layout import Layout
from orchestrator.pipeline.context import DEFAULT_READY_TIMEOUT_S
from orchestrator.pipeline.provenance import hardware_seen, new_run_id, orch_version
from orchestrator.pipeline.serving import serve
from orchestrator.spec.load import spec_hash
from orchestrator.spec.models import SweepSpec
from orchestrator.spec.targets import LocalTarget
from orchestrator.store.db import Store
from orchestrator.store.run_ids import checked_run_id

_WORDS = [
    "the",
    "layout",
    "of",
    "a",
    "model",
    "across",
    "devices",
    "changes",
    "the",
    "order",
    "of",
    "floating",
    "point",
    "sums",
    "so",
    "that",
    "greedy",
    "outputs",
    "can",
    "drift",
    "apart",
    "after",
    "a",
    "near",
    "tie",
    "between",
    "two",
    "tokens",
    "while",
    "the",
    "distributions",
    "barely",
    "move",
    "tensor",
    "pipeline",
    "expert",
    "data",
    "parallel",
    "serve",
    "batch",
    "token",
    "cache",
    "prefill",
    "decode",
    "alpha",
    "beta",
    "gamma",
    "delta",
]


def builtin_prompts(n: int) -> list[str]:
    """n deterministic short prompts (8 to 23 words) drawn from a fixed word list."""
    out = []
    for i in range(n):
        length = 8 + (i * 5) % 16
        out.append(" ".join(_WORDS[(i * 7 + j * (3 + i % 5)) % len(_WORDS)] for j in range(length)))
    return out


def load_prompts(source: str, n: int) -> list[str]:
    """'builtin', or a text file with one prompt per line (blank lines skipped); the first n."""
    if source == "builtin":
        return builtin_prompts(n)
    try:
        lines = [ln.strip() for ln in Path(source).read_text(encoding="utf-8").splitlines()]
    except OSError as exc:
        raise SpecError(f"--prompts {source}: cannot read it: {exc.strerror or exc}") from None
    prompts = [ln for ln in lines if ln]
    if not prompts:
        raise SpecError(f"--prompts {source}: no prompts in it (one per line)")
    return prompts[:n]


class Observer(Protocol):
    def phase(self, label: str, phase: str) -> None: ...


@dataclass(frozen=True)
class ConsistencyOptions:
    n: int = 60
    max_tokens: int = 96
    top_k: int = 10
    prompts: str = "builtin"
    workdir: str | None = None
    ready_timeout_s: float | None = None


def _model_root(base_url: str, model: str | None) -> tuple[str, str]:
    models = served_models(base_url)
    if not models:
        raise OrchError(f"{base_url}/models lists no model")
    for mid, root in models:
        if model is None or mid == model:
            return mid, root
    raise OrchError(f"{base_url} does not serve {model!r} (it serves {', '.join(m for m, _ in models)})")


@contextmanager
def serve_layout(
    spec: SweepSpec, layout: Layout, workdir: Path, timeout_s: float
) -> Iterator[tuple[str, str]]:
    """The serve step for one layout on the local target; yields (OpenAI base URL, model name)."""
    if not isinstance(spec.target, LocalTarget):
        raise SpecError(
            f"target.kind: '{spec.target.kind}': consistency deploys on kind: local only "
            "(or give --base-urls of servers you started)"
        )
    where = placement(spec)
    where = replace(where, base_port=free_base_port(max(layout.replicas, 1), where.nodes[0]))
    compiled = prepare(spec, layout, where, to_serve=True)
    target = make_target(spec.target, workdir / str(layout), compiled.placement)
    with serve(target, compiled, timeout_s) as served:
        # replicas are identical servers: one is enough
        yield served.deployment.endpoints[0].openai_base_url, compiled.model_name


def _labels(layouts: Sequence[Layout]) -> tuple[str, str]:
    a, b = str(layouts[0]), str(layouts[1])
    return (a, b) if a != b else (f"{a} (1st)", f"{b} (2nd)")


def run_layouts(
    spec: SweepSpec,
    layouts: Sequence[Layout],
    opts: ConsistencyOptions,
    obs: Observer,
    run_id: str,
) -> ConsistencyResult:
    if len(layouts) != 2:
        raise SpecError(f"--layouts: give exactly two layouts to compare (got {len(layouts)})")
    prompts = load_prompts(opts.prompts, opts.n)
    spec_workdir = spec.target.workdir if isinstance(spec.target, LocalTarget) else None
    workdir = Path(opts.workdir or spec_workdir or tempfile.mkdtemp(prefix="orch-consistency-"))
    base = workdir / checked_run_id(run_id)
    timeout = opts.ready_timeout_s or spec.engine.startup_s or DEFAULT_READY_TIMEOUT_S
    label_a, label_b = _labels(layouts)
    sides: list[Side] = []
    for i, (layout, label) in enumerate(zip(layouts, (label_a, label_b), strict=True)):
        obs.phase(label, "deploy")
        with serve_layout(spec, layout, base / f"{i}", timeout) as (url, model):
            _, root = _model_root(url, model)
            obs.phase(label, f"generate {len(prompts)} prompts")
            ref = sides[0].generations if sides else None
            sides.append(collect(url, model, label, root, prompts, opts.max_tokens, opts.top_k, ref))
            obs.phase(label, "teardown")
    return compare(sides[0], sides[1], max_tokens=opts.max_tokens, top_k=opts.top_k)


def run_base_urls(urls: Sequence[str], opts: ConsistencyOptions, obs: Observer) -> ConsistencyResult:
    if len(urls) != 2:
        raise SpecError(
            f"--base-urls: give exactly two OpenAI base URLs, e.g. http://h:8000/v1 (got {len(urls)})"
        )
    prompts = load_prompts(opts.prompts, opts.n)
    found = [_model_root(u.rstrip("/"), None) for u in urls]
    if found[0][1] != found[1][1]:
        raise OrchError(
            f"layouts serve different models: {urls[0]} serves {found[0][1]!r}, {urls[1]} serves "
            f"{found[1][1]!r}; compare layouts of one model"
        )
    label_a, label_b = (u.rstrip("/") for u in urls)
    obs.phase(label_a, f"generate {len(prompts)} prompts")
    a = collect(label_a, found[0][0], label_a, found[0][1], prompts, opts.max_tokens, opts.top_k)
    obs.phase(label_b, f"generate {len(prompts)} prompts")
    b = collect(
        label_b, found[1][0], label_b, found[1][1], prompts, opts.max_tokens, opts.top_k, a.generations
    )
    return compare(a, b, max_tokens=opts.max_tokens, top_k=opts.top_k)


def store_result(
    store: Store,
    result: ConsistencyResult,
    *,
    spec: SweepSpec | None,
    spec_path: str | None,
    run_id: str,
    attach: bool,
    max_divergence: float | None,
) -> bool | None:
    """Store the comparison under run_id (a new run unless attach); returns the threshold's verdict."""
    passed = None if max_divergence is None else result.divergence_rate <= max_divergence
    if not attach:
        store.create_run(
            run_id=run_id,
            spec_path=spec_path,
            spec_json=spec.model_dump(mode="json") if spec else {},
            spec_hash=spec_hash(spec) if spec else "",
            engine=spec.engine.name if spec else "external",
            engine_version=spec.engine.version if spec else None,
            model=result.model,
            model_config_hash=None,
            orch_version=orch_version(),
            hardware=hardware_seen(),
            metadata={**(dict(spec.metadata) if spec else {}), "kind": "consistency"},
        )
    store.add_consistency(
        run_id,
        result.layout_a,
        result.layout_b,
        result.to_dict(),
        passed=passed,
        max_divergence=max_divergence,
    )
    if not attach:
        store.finish_run(run_id, "done", None)
    return passed


__all__ = [
    "ConsistencyOptions",
    "builtin_prompts",
    "new_run_id",
    "run_base_urls",
    "run_layouts",
    "store_result",
]
