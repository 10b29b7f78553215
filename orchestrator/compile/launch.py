"""The one launch plan: a spec and a candidate (or a layout) become the engine's LaunchPlan on a
placement, with the warnings to print. Every caller uses `prepare`: `orch compile`, the sweep (one
layout at a time and side by side), consistency and promote. Pure: no cluster access.

The spec's model and engine sections become the engine-neutral EngineOptions, its hardware and target
the Placement; the engine turns them and the candidate (layout + resolved settings) into argv.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from orchestrator.candidate import AnyCandidate, Candidate, DisaggCandidate
from orchestrator.catalog.checkpoint import launch_quantization
from orchestrator.engines import EngineOptions, LaunchPlan, Placement, SecretEnv, SimOptions, get_engine
from orchestrator.errors import DeployError, SpecError
from orchestrator.layout import Layout
from orchestrator.plan.from_spec import effective_constants, engine_settings
from orchestrator.spec.models import ModelSpec, SweepSpec
from orchestrator.spec.targets import LocalTarget

# Where the weights of each catalog preset live when the spec gives no model.path. The catalog holds
# only config.json files; the ids are the published instruct/base checkpoints those configs come from.
PRESET_WEIGHTS = {
    "deepseek-v2-lite": "deepseek-ai/DeepSeek-V2-Lite",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "llama-3.1-405b": "meta-llama/Llama-3.1-405B-Instruct",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "qwen2.5-72b": "Qwen/Qwen2.5-72B-Instruct",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
}

CPU_NAMES = frozenset({"cpu", "x86-cpu"})  # the catalog's cpu preset and its alias
DEFAULT_BASE_PORT = 8000


def is_cpu(gpu_name: str) -> bool:
    return gpu_name.strip().lower() in CPU_NAMES


def _looks_local(ref: str) -> bool:
    # HF repo ids ("org/name") are relative-looking too; only explicit local forms are checked on disk.
    return ref.startswith(("/", "./", "../", "~"))


def model_ref(model: ModelSpec, engine: str = "vllm") -> str:
    """What the engine loads: model.path, else the config_path's directory, else the preset's HF id.

    The sim loads no weights, so for it any name will do and nothing is checked on disk.
    """
    if get_engine(engine).simulated:
        return model.path or model.name or model.config_path or "model"
    if model.path:
        ref = model.path
        if _looks_local(ref) and not Path(ref).expanduser().exists():
            raise SpecError(f"model.path: {ref} does not exist; fix the path or give an HF repo id")
        return ref
    if model.config_path:
        cfg = Path(model.config_path).expanduser()
        weights = cfg if cfg.is_dir() else cfg.parent
        if not weights.is_dir():
            raise SpecError(f"model.config_path: {model.config_path} does not exist; fix the path")
        return str(weights)
    name = (model.name or "").strip().lower()
    if name in PRESET_WEIGHTS:
        return PRESET_WEIGHTS[name]
    raise SpecError(
        f"model.path: preset {model.name!r} has no known weights; set model.path to an HF repo id or a dir"
    )


def _engine_field(spec: SweepSpec, name: str, default: Any) -> Any:
    # Fields the engine spec may grow (EPLB, executor, all-to-all); until then the defaults apply.
    value = getattr(spec.engine, name, None)
    return default if value is None else value


def sim_options(spec: SweepSpec) -> SimOptions:
    """The model shapes and hardware the simulated server models, from the spec."""
    hw, model, e = spec.hardware, spec.model, spec.engine
    return SimOptions(
        model=model.name or model.config_path or "", gpu=hw.gpu, nodes=hw.nodes,
        gpus_per_node=hw.gpus_per_node,
        weight_dtype=model.weight_dtype, kv_cache_dtype=model.kv_cache_dtype,
        quant_group_size=model.quant_group_size, time_scale=e.time_scale, scheduler=e.sim_scheduler,
        runtime_reserve_bytes=e.runtime_reserve_bytes,
        # The simulated load time is a tenth of the time allowed for readiness (at least 0.5 s, at most 5).
        startup_s=None if e.startup_s is None else min(max(e.startup_s / 10, 0.5), 5.0),
        gpu_overrides=tuple(sorted(effective_constants(spec).items())),
    )


def engine_options(
    spec: SweepSpec,
    *,
    engine: str | None = None,
    num_redundant_experts: int | None = None,
    executor: Literal["mp", "ray"] | None = None,
    a2a_backend: str | None = None,
    extra_env: tuple[tuple[str, str], ...] = (),
    served_model_name: str | None = None,
) -> EngineOptions:
    """EngineOptions from the spec's model and engine sections; keyword arguments override the spec.

    `engine` names the engine that will load the model (default: the spec's engine.name).
    """
    model, engine_spec = spec.model, spec.engine
    name = engine or engine_spec.name
    # The engines' rule, in one place: the flag only for online FP8 of an unquantized checkpoint.
    quantization = launch_quantization(model.weight_dtype, "weight_dtype" in model.model_fields_set,
                                       model.name or model.config_path or "", model.path)
    redundant = _engine_field(spec, "num_redundant_experts", 0)
    if num_redundant_experts is not None:
        redundant = num_redundant_experts
    chosen_executor = executor or _engine_field(spec, "executor", "mp")
    from orchestrator.catalog.loader import load_model

    routed = 0
    with contextlib.suppress(SpecError):
        # Only refines checks and the SGLang dp mapping; an unknown model is the planner's error to report.
        routed = load_model(model.name or model.config_path or "").num_routed_experts
    return EngineOptions(
        model=model_ref(model, name),
        # The name clients ask for: a promoted layout keeps the one its run was measured with.
        served_model_name=served_model_name,
        kv_cache_dtype=None if model.kv_cache_dtype == "auto" else model.kv_cache_dtype,
        quantization=quantization,
        enforce_eager=engine_spec.enforce_eager,
        extra_args=tuple(engine_spec.extra_args),
        num_redundant_experts=int(redundant),
        num_routed_experts=routed,
        executor=cast(Literal["mp", "ray"], chosen_executor),
        a2a_backend=a2a_backend or _engine_field(spec, "a2a_backend", None),
        # The spec's engine.env first; variables given here win.
        extra_env=tuple(sorted((dict(engine_spec.env) | dict(extra_env)).items())),
        secret_env=secret_env(spec),
        sim=sim_options(spec) if get_engine(name).simulated else None,
    )


def secret_env(spec: SweepSpec) -> tuple[SecretEnv, ...]:
    """engine.env_from_secret as references; a reference's defaults are the variable's own name."""
    return tuple(
        SecretEnv(name=name, from_env=ref.env or name, secret=ref.secret, key=ref.key or name)
        for name, ref in sorted(spec.engine.env_from_secret.items())
    )


def _gpus_per_node(spec: SweepSpec) -> int:
    hw = spec.hardware
    if hw.gpus_per_node is not None:
        return hw.gpus_per_node
    from orchestrator.catalog.loader import load_gpu

    # The cpu preset counts ranks (one core each) as its "GPUs".
    return load_gpu(hw.gpu).gpus_per_node


def placement(spec: SweepSpec, node_addrs: tuple[str, ...] | None = None) -> Placement:
    """Where the spec's layouts run. Without node_addrs, several nodes get the placeholder names node0 ..."""
    hw, target = spec.hardware, spec.target
    if node_addrs is not None:
        if len(node_addrs) != hw.nodes:
            raise SpecError(
                f"node addresses: {len(node_addrs)} given but hardware.nodes is {hw.nodes}; give one per node"
            )
        nodes = node_addrs
    elif hw.nodes == 1:
        nodes = (target.host if isinstance(target, LocalTarget) else "127.0.0.1",)
    else:
        nodes = tuple(f"node{i}" for i in range(hw.nodes))
    # One machine, reached at the spec's own host: bind there. Several machines, containers, or a node
    # named by --nodes (`ready at http://gpu1:8000` must be true from another host): bind every address.
    here = isinstance(target, LocalTarget) and hw.nodes == 1 and nodes[0] == target.host
    bind = target.host if here and isinstance(target, LocalTarget) else "0.0.0.0"
    return Placement(
        nodes=nodes,
        gpus_per_node=_gpus_per_node(spec),
        base_port=target.base_port if isinstance(target, LocalTarget) else DEFAULT_BASE_PORT,
        on_cpu=is_cpu(hw.gpu),
        bind_host=bind,
    )


def to_json(
    plan: LaunchPlan, nodes: Sequence[str] | None = None, warnings: Sequence[str] = ()
) -> dict[str, Any]:
    """The plan as a JSON-ready dict (`orch compile --format json`); with the node addresses and any
    warnings when given."""
    out = plan.to_dict()
    if nodes is not None:
        out["nodes"] = list(nodes)
    if warnings:
        out["warnings"] = list(warnings)
    return out


@dataclass(frozen=True)
class Compiled:
    """A candidate's launch plan on its placement, the options it came from and what to warn about."""

    plan: LaunchPlan
    placement: Placement
    options: EngineOptions
    warnings: tuple[str, ...]  # it compiles, but will not serve as expected (printed, not fatal)

    @property
    def candidate(self) -> AnyCandidate:
        return self.plan.candidate

    @property
    def model_name(self) -> str:
        """What the clients ask for."""
        return self.options.served_model_name or self.options.model


def prepare(
    spec: SweepSpec,
    what: AnyCandidate | Layout,
    where: Placement | None = None,
    *,
    engine: str | None = None,
    node_addrs: tuple[str, ...] | None = None,
    num_redundant_experts: int | None = None,
    executor: Literal["mp", "ray"] | None = None,
    a2a_backend: str | None = None,
    served_model_name: str | None = None,
    to_serve: bool = False,
    kv_dir: str | None = None,
) -> Compiled:
    """The launch plan of one candidate of a spec for its engine (or `engine`), on `where` (default: the
    spec's placement, with `node_addrs` when given). A bare layout runs the engine's settings resolved
    from the spec. `to_serve`: refuse (DeployError) what the engine can compile but not serve here.
    `kv_dir`: a pair on vLLM's ExampleConnector keeps its KV there (default /tmp/orch-kv/<name>)."""
    eng = get_engine(engine or spec.engine.name)
    if isinstance(what, DisaggCandidate):
        return _prepare_pair(spec, what, where or placement(spec, node_addrs), eng.name, executor=executor,
                             a2a_backend=a2a_backend, served_model_name=served_model_name, to_serve=to_serve,
                             kv_dir=kv_dir)
    if isinstance(what, Candidate):
        candidate = what
    else:
        candidate = Candidate(what, engine_settings(spec, engine=eng.name))
    if candidate.settings.engine != eng.name:
        raise SpecError(f"{candidate}: its settings are {candidate.settings.engine}'s, not {eng.name}'s; "
                        "resolve them for the engine that runs it")
    where = where or placement(spec, node_addrs)
    layout = candidate.layout
    if to_serve and (reasons := eng.unsupported(layout, where)):
        raise DeployError(f"{eng.name} cannot run {layout}: " + "; ".join(reasons))
    options = engine_options(
        spec, engine=eng.name, num_redundant_experts=num_redundant_experts, executor=executor,
        a2a_backend=a2a_backend, served_model_name=served_model_name,
    )
    plan = eng.launch_plan(candidate, options, where)
    notes = eng.warnings(layout, where)
    notes += [r for r in eng.unsupported(layout, where) if r not in notes]
    return Compiled(plan=plan, placement=where, options=options, warnings=tuple(notes))



def _prepare_pair(spec: SweepSpec, cand: DisaggCandidate, where: Placement, engine: str, *,
                  executor: Literal["mp", "ray"] | None, a2a_backend: str | None,
                  served_model_name: str | None, to_serve: bool, kv_dir: str | None = None) -> Compiled:
    """A prefill/decode candidate's plan (compile/pd_plan.py): each pool with its own options (its
    redundant expert slots), the router in front."""
    from orchestrator.catalog.loader import load_model
    from orchestrator.compile.pd_plan import pair_plan
    from orchestrator.kv_handover import KVShape

    eng = get_engine(engine)
    options = tuple(engine_options(spec, engine=eng.name, num_redundant_experts=pool.num_redundant_experts,
                                   executor=executor, a2a_backend=a2a_backend,
                                   served_model_name=served_model_name) for pool in cand.pools)
    kv = None
    with contextlib.suppress(SpecError):  # the model's KV shape says which handover warnings apply
        cfg = load_model(spec.model.name or spec.model.config_path or "")
        kv = KVShape(cfg.num_kv_heads, cfg.is_mla)
    plan, notes = pair_plan(eng, cand, (options[0], options[1]), where, to_serve=to_serve, kv=kv,
                            kv_dir=kv_dir)
    return Compiled(plan=plan, placement=where, options=options[0], warnings=notes)
