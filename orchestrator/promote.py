"""`orch promote`: the winner of a stored run as deployable artifacts with provenance.

Writes, into one directory a platform team can review and merge: the Helm values for the chart in helm/
(compile.helm_values), the same objects as plain Kubernetes manifests (compile.k8s), the per-node shell
launch commands (compile.shell), a Ray Serve LLM config (compile.ray_serve, vLLM only), and
PROVENANCE.json/.md: which run, spec, model, engine, layout, load point, metrics and SLO the artifacts
come from. A run measured on the simulator promotes for a real engine (vllm unless --engine says
otherwise), and the provenance says so.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.candidate import AnyCandidate, Candidate, DisaggCandidate
from orchestrator.compile import model_ref, prepare
from orchestrator.compile.artifacts import (
    FILES,
    FORMATS,
    artifact_options,
    chart_version,
    product_from_seen,
    render,
)
from orchestrator.compile.helm_values import CHART_NAME
from orchestrator.compile.k8s import GPU_PRODUCT_LABEL
from orchestrator.compile.k8s_pd import LONGEST_SUFFIX
from orchestrator.disagg import AnyLayout, DisaggLayout, is_disagg_text, parse_any_layout
from orchestrator.engines import ENGINES, EngineSettings, get_engine
from orchestrator.errors import NoLayoutMeetsSLO, SpecError
from orchestrator.kv_handover import backend_problem, default_backend
from orchestrator.layout import Layout, parse_layout
from orchestrator.outputs import make_out_dir
from orchestrator.pipeline.provenance import orch_version
from orchestrator.plan.candidates import disagg_candidate
from orchestrator.plan.from_spec import engine_settings
from orchestrator.promote_md import provenance_markdown
from orchestrator.spec.load import spec_from_json
from orchestrator.spec.models import SweepSpec
from orchestrator.store.db import Store
from orchestrator.store.extras import SideRecords
from orchestrator.store.run_ids import checked_run_id

DEPLOYABLE = ("vllm", "sglang")


@dataclass(frozen=True)
class PromoteOptions:
    formats: tuple[str, ...] = FORMATS
    engine: str | None = None  # default: the run's engine; vllm when the run measured the simulator
    layout: str | None = None  # default: the winner
    name: str | None = None
    image: str | None = None
    namespace: str | None = None
    overwrite: bool = False  # replace what an existing --out folder holds (else refused)
    router_image: str | None = None  # a vLLM pair's router (orch's): an image with orch in it

    def __post_init__(self) -> None:
        bad = [f for f in self.formats if f not in FORMATS]
        if bad or not self.formats:
            raise SpecError(f"--format {','.join(bad) or '(none)'}: choose from {', '.join(FORMATS)} or all")
        if self.engine is not None and self.engine not in DEPLOYABLE:
            raise SpecError(f"--engine {self.engine}: artifacts are for a real engine; use vllm or sglang")


@dataclass(frozen=True)
class Promoted:
    run_id: str
    layout: str  # the candidate's name: its layout and the settings that varied
    engine: str
    out_dir: Path
    files: tuple[Path, ...]
    notes: tuple[str, ...]
    provenance: dict[str, Any]


def resolve_run(store: Store, ref: str) -> str:
    """A run id, a unique prefix of one (6+ characters), its short hash, or `latest` (the newest run in
    the store); an ambiguous prefix is refused with the candidates (store/run_ids.py)."""
    return checked_run_id(store.resolve(ref))


def check_out_dir(out: Path, overwrite: bool) -> None:
    """An existing folder with anything in it is not silently overwritten: a promoted folder is what a
    platform team deploys from, and its PROVENANCE must describe every file in it."""
    if out.exists() and not out.is_dir():
        raise SpecError(f"--out {out}: not a directory; give a folder to write the artifacts into")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise SpecError(
            f"--out {out}: the folder exists and is not empty (an earlier promotion?); give a new folder, "
            "or --overwrite to replace its artifacts"
        )


def clear_promotion(out: Path) -> list[str]:
    """Before --overwrite writes: remove an earlier promotion's files (the artifacts orch names and its
    PROVENANCE), so none of them outlives the provenance that described it; say what else is left."""
    if not out.is_dir():
        return []
    ours = {*FILES.values(), "PROVENANCE.json", "PROVENANCE.md"}
    for name in ours:
        (out / name).unlink(missing_ok=True)
    left = sorted(p.name for p in out.iterdir())
    if not left:
        return []
    return [f"--out {out} also holds {', '.join(left[:5])}, not written by orch promote; left as is"]


def pin_block(provenance: dict[str, Any]) -> dict[str, Any]:
    """The layout block an eval config carries so evals run under the same sharding as the promoted one."""
    lay = provenance["layout"]
    layout = parse_any_layout(lay["layout"])

    def sizes(one: Layout) -> dict[str, Any]:
        return {"tensor_parallel_size": one.tp, "pipeline_parallel_size": one.pp,
                "data_parallel_size": one.dp,
                "expert_parallel": one.ep, "replicas": one.replicas}

    # a prefill/decode pair: each pool's sizes (evals that pin a layout pin both pools)
    shape = ({"prefill": sizes(layout.prefill), "decode": sizes(layout.decode)}
             if isinstance(layout, DisaggLayout) else sizes(layout))
    return {
        "serving_layout": {
            "layout": lay["layout"],
            "engine": provenance["artifacts"]["engine"],
            "engine_version": provenance["artifacts"]["engine_version"],
            **shape,
            "model": provenance["model"]["name"],
            "model_config_hash": provenance["model"]["config_hash"],
            "promoted_from": {
                "run_id": provenance["run"]["run_id"],
                "spec_hash": provenance["run"]["spec_hash"],
            },
        }
    }


def k8s_name(model: str, layout: str, *, pair: bool = False) -> str:
    """A DNS label for the objects, e.g. qwen2-5-72b-tp4x2 (at most 40 characters; a prefill/decode
    pair's at most 32, leaving room for its pools' -prefill / -decode suffixes)."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"{model}-{layout}".lower()).strip("-")
    if not name or not name[0].isalpha():
        name = "m-" + name
    return name[: 40 - (LONGEST_SUFFIX if pair else 0)].rstrip("-")


def _iso(t: float | None) -> str | None:
    return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _choose(selection: dict[str, Any] | None, run_id: str, wanted: str | None) -> tuple[dict[str, Any], str]:
    verdicts = list((selection or {}).get("verdicts") or [])
    winner = (selection or {}).get("winner")
    if wanted is not None:
        # A candidate's name as the run stored it (`tp4 ngram k=4`, `p:tp4+d:tp4`), else a layout written
        # some other way that reads as one of them.
        known_names = {str(v["layout"]) for v in verdicts}
        name = wanted if wanted in known_names else str(parse_any_layout(wanted))
        found = [v for v in verdicts if v["layout"] == name]
        if not found:
            known = ", ".join(v["layout"] for v in verdicts) or "none"
            raise SpecError(f"--layout {wanted}: not in run {run_id} (layouts: {known})")
        if not found[0]["passed"]:
            raise NoLayoutMeetsSLO(
                f"--layout {name}: it did not meet the SLO in run {run_id} ({found[0]['reason']}); "
                "promote the winner or a layout that passed"
            )
        return found[0], "chosen with --layout" + (" (the winner)" if name == winner else " (not the winner)")
    if not winner:
        why = (
            "; ".join(f"{v['layout']}: {v['reason']}" for v in verdicts[:4]) or "the run stored no selection"
        )
        raise NoLayoutMeetsSLO(
            f"run {run_id} has no winner, nothing to promote ({why}); rerun `orch sweep` with other layouts, "
            "rates or SLO"
        )
    (verdict,) = [v for v in verdicts if v["layout"] == winner]
    return verdict, "the winner"


def measured_served_name(launch: dict[str, Any] | None, spec: SweepSpec, engine: str) -> str:
    """The model name the run's clients asked for: the launch's --served-model-name, else the model ref."""
    for rep in (launch or {}).get("replicas") or []:
        for proc in rep.get("processes") or []:
            argv = [str(a) for a in proc.get("argv") or []]
            for i, tok in enumerate(argv):
                if tok == "--served-model-name" and i + 1 < len(argv):
                    return argv[i + 1]
                if tok.startswith("--served-model-name="):
                    return tok.partition("=")[2]
    return model_ref(spec.model, engine)


def measured_settings(launch: dict[str, Any] | None, spec: SweepSpec, engine: str) -> EngineSettings:
    """The engine settings the run measured with (stored in its launch plan), so the promoted engine
    runs what was measured; for another engine, the same values resolved by that engine. A run stored
    before settings were recorded gets the spec's, resolved now."""
    stored = (launch or {}).get("engine_settings")
    if not stored:
        return engine_settings(spec, engine=engine)
    measured = EngineSettings.from_dict(stored)
    if measured.engine == engine:
        return measured
    return engine_settings(spec, engine=engine, request=measured.request())


def measured_pair(split: dict[str, Any] | None, pd: DisaggLayout, spec: SweepSpec,
                  engine: str) -> DisaggCandidate:
    """The prefill/decode candidate a run measured (its stored split: each pool's settings, redundant
    experts, the transfer and the router), for `engine`: the same values resolved by that engine, over
    its own transfer backend when the run measured another engine's."""
    if not split:
        return disagg_candidate(spec, pd, engine_settings(spec, engine=engine))
    pools = []
    for role in ("prefill", "decode"):
        stored = EngineSettings.from_dict(split[role]["engine_settings"])
        pools.append(stored if stored.engine == engine
                     else engine_settings(spec, engine=engine, request=stored.request()))
    transfer = str(split.get("transfer") or "")
    if backend_problem(engine, transfer) is not None:
        own = spec.disagg.transfer_backend if spec.engine.name == engine else None
        transfer = own or default_backend(engine)
    return DisaggCandidate.of(
        pd, pools[0], pools[1], transfer, bases=(pools[0], pools[1]),
        redundant_experts=(int(split["prefill"].get("num_redundant_experts", 0)),
                           int(split["decode"].get("num_redundant_experts", 0))),
        router_policy=split.get("router_policy") or spec.disagg.router_policy)


def promote(store: Store, run_ref: str, out_dir: str | Path, opts: PromoteOptions | None = None) -> Promoted:
    opts = opts or PromoteOptions()
    run_id = resolve_run(store, run_ref)
    info = store.run_info(run_id)
    verdict, chosen = _choose(info.get("selection"), run_id, opts.layout)
    spec = spec_from_json(info["spec"], f"run {run_id}")
    name_of = str(verdict["layout"])  # the candidate's name, the store's key
    row = next((r for r in store.layouts(run_id) if r.layout == name_of), None)
    split = (row.plan or {}).get("split") if row is not None else None
    # An aggregated candidate's recorded layout and settings (its name may carry settings: `tp8 ngram k=4`).
    recorded = SideRecords(store, run_id).candidates().get(name_of)
    layout: AnyLayout = (parse_any_layout(split["name"] if split else name_of)
                         if split or is_disagg_text(name_of)
                         else parse_layout(recorded[0] if recorded else name_of))
    measured_engine = str(info["engine"])
    engine = opts.engine or (measured_engine if measured_engine in DEPLOYABLE else "vllm")
    notes: list[str] = []
    if measured_engine in ENGINES and get_engine(measured_engine).simulated:
        notes.append(
            f"run {run_id} measured the simulated engine; these artifacts are for {engine}, compiled from "
            "the same spec and layout: measure them on the real engine before relying on the numbers"
        )
    elif engine != measured_engine:
        notes.append(f"run {run_id} measured {measured_engine}; these artifacts are for {engine}")
    launch = row.launch if row is not None else None
    served = measured_served_name(launch, spec, measured_engine)
    candidate: AnyCandidate
    if isinstance(layout, DisaggLayout):
        candidate = measured_pair(split, layout, spec, engine)
    else:
        settings = measured_settings(launch, spec, engine)
        if recorded is not None and not (launch or {}).get("engine_settings"):
            # Measured in virtual time (no launch plan): the candidate's own settings, as `engine`
            # resolves them.
            own = recorded[1]
            settings = (own if own.engine == engine
                        else engine_settings(spec, engine=engine, request=own.request()))
        candidate = Candidate(layout, settings, name_of)
    compiled = prepare(spec, candidate, engine=engine, served_model_name=served)
    notes += [f"compile: {w}" for w in compiled.warnings]
    name = opts.name or k8s_name(str(info["model"]), str(layout), pair=isinstance(layout, DisaggLayout))
    seen = (info.get("hardware") or {}).get("gpus") or []
    k8s_opts, option_notes = artifact_options(
        spec, engine, name, image=opts.image, namespace=opts.namespace, spec_hash=str(info["spec_hash"]),
        product=product_from_seen(seen), router_image=opts.router_image,
    )  # fmt: skip
    notes += option_notes
    out = Path(out_dir)
    check_out_dir(out, opts.overwrite)
    notes += clear_promotion(out)
    make_out_dir(out)
    texts: dict[str, str] = {}
    for fmt in opts.formats:
        text = render(fmt, compiled, spec, k8s_opts)
        if text is None:
            notes.append(f"{fmt}: skipped, Ray Serve LLM runs vLLM, not {engine}")
            continue
        if fmt == "shell":
            shebang, _, body = text.partition("\n")
            text = shebang + "\n" + _header(run_id, "per-node launch commands") + body
        else:
            text = _header(run_id, _HOW[fmt]) + text
        texts[FILES[fmt]] = text
    points = {p.label: p for p in store.points(run_id, name_of)}
    best = points.get(verdict.get("best_point") or "")
    provenance: dict[str, Any] = {
        "promoted_at": _iso(time.time()),
        "orch_version": orch_version(),
        "store": str(store.path.resolve()),
        "run": {
            "run_id": run_id,
            "status": info["status"],
            "created_at": _iso(info["created_at"]),
            "finished_at": _iso(info.get("finished_at")),
            "spec_path": info.get("spec_path"),
            "spec_hash": info["spec_hash"],
            "orch_version": info["orch_version"],
        },
        "model": {
            "name": info["model"],
            "config_hash": info.get("model_config_hash"),
            "path": spec.model.path,
            "revision": spec.model.revision,
            "weight_dtype": spec.model.weight_dtype,
        },
        "measured": {
            "engine": measured_engine,
            "engine_version": info.get("engine_version"),
            "hardware_spec": spec.hardware.model_dump(mode="json"),
            "hardware_seen": info.get("hardware"),
            "target": spec.target.kind,
            "launch": launch,
        },
        "artifacts": {
            "engine": engine,
            "engine_version": spec.engine.version if engine == spec.engine.name else None,
            "image": k8s_opts.image,
            "namespace": k8s_opts.namespace,
            "name": k8s_opts.name,
            "served_model_name": served,
            "gpu_product": k8s_opts.gpu_product or dict(k8s_opts.node_selector).get(GPU_PRODUCT_LABEL),
            "chart": {"name": CHART_NAME, "version": chart_version()},
        },
        "layout": {"layout": str(layout), "gpus": layout.gpus, "chosen": chosen},
        "winning_point": {
            "label": verdict.get("best_point"),
            "rate_per_s": verdict.get("best_rate"),
            "score": verdict.get("score"),
            "verdict": best.verdict if best else None,
            "metrics": best.metrics if best else None,
        },
        "slo": spec.slo.model_dump(mode="json", exclude_none=True),
        "objective": spec.objective,
        "workload": spec.workload.model_dump(mode="json", exclude_none=True),
        "selection": info.get("selection"),
        "eval_metadata": info.get("metadata") or {},
        "notes": notes,
        "files": {},
    }
    written = []
    for fname, text in texts.items():
        path = out / fname
        path.write_text(text)
        if fname.endswith(".sh"):
            path.chmod(0o755)
        provenance["files"][fname] = hashlib.sha256(text.encode()).hexdigest()
        written.append(path)
    for fname, text in (
        ("PROVENANCE.json", json.dumps(provenance, indent=2, default=str) + "\n"),
        ("PROVENANCE.md", provenance_markdown(provenance)),
    ):
        (out / fname).write_text(text)
        written.append(out / fname)
    return Promoted(run_id, candidate.name, engine, out, tuple(written), tuple(notes), provenance)


_HOW = {
    "helm-values": f"helm values for helm/ ({CHART_NAME})",
    "k8s": "kubectl apply -f",
    "ray-serve": "serve run",
}


def _header(run_id: str, how: str) -> str:
    return f"# Generated by `orch promote {run_id}` ({how}); provenance in PROVENANCE.md\n"
