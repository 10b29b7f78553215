"""`orch validate`: everything `orch plan`, `compile` and `sweep` would refuse about a spec, found before
any of them runs: catalog names (with the known ones), config and data files, request lengths against the
context, engine argv, weights, and the plan itself."""

from __future__ import annotations

import stat
from pathlib import Path

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.compile import engine_options, placement
from orchestrator.disagg import DisaggLayout
from orchestrator.engines import check_extra_args
from orchestrator.errors import SpecError
from orchestrator.extras import require_for_target
from orchestrator.plan.expert_stats import load_expert_stats
from orchestrator.plan.from_spec import engine_settings
from orchestrator.plan.speculative import speculative_options, split_field
from orchestrator.spec.load import LoadedSpec, load_spec_lines
from orchestrator.spec.models import SweepSpec
from orchestrator.spec.workload import TokenDistribution

PREFIX_TOKENS_DEFAULT = 512  # what the prefix workload uses when prefix_tokens is unset


def _longest(value: int | TokenDistribution) -> int:
    if isinstance(value, int):
        return value
    return value.max if value.max is not None else round(value.mean)


def _shortest(value: int | TokenDistribution) -> int:
    return value if isinstance(value, int) else value.min


def _first_call(spec: SweepSpec) -> tuple[int, str]:
    """(the fewest tokens a session's first call can take, the field that sets most of them)."""
    w = spec.workload
    if w.kind == "agentic":
        a = w.agentic_or_default()
        answer = min(_shortest(a.tool_call_tokens), _shortest(w.output_tokens))
        shared = a.system_prompt_tokens + a.tool_definitions_tokens
        larger = a.system_prompt_tokens >= a.tool_definitions_tokens
        bigger = "system_prompt" if larger else "tool_definitions"
        field = f"workload.agentic.{bigger}_tokens"
        return shared + _shortest(w.input_tokens) + answer, field
    c = w.conversation_or_default()
    first = c.first_input_tokens if c.first_input_tokens is not None else w.input_tokens
    field = "workload.conversation.first_input_tokens" if c.first_input_tokens is not None \
        else "workload.input_tokens"
    return c.system_prompt_tokens + _shortest(first) + _shortest(w.output_tokens), field


def _check_dataset(loaded: LoadedSpec, must_exist: bool) -> None:
    path = loaded.spec.workload.dataset_path
    if path is None:
        return
    try:
        mode = Path(path).expanduser().stat().st_mode
    except FileNotFoundError:
        if must_exist:
            raise loaded.error("workload.dataset_path", f"{path}: no such file") from None
        return
    except OSError as exc:
        raise loaded.error("workload.dataset_path", f"{path}: cannot read: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        # Reading a FIFO would block the sweep; a directory is a typo.
        raise loaded.error("workload.dataset_path", f"{path}: not a regular file; pass the dataset file")
    w = loaded.spec.workload
    if w.kind == "trace":
        from orchestrator.loadgen.traces import read_trace  # numpy: only for a trace

        # The requests a load point sends, read now (streamed: only as far as those): a bad line is this
        # one line and exit 2 before anything runs, not a layout "rejected" mid-sweep.
        try:
            read_trace(Path(path).expanduser(), fmt=w.trace_format, limit=w.num_requests,
                       until_s=w.duration_s, time_scale=w.time_scale)
        except SpecError as exc:
            raise loaded.error("workload.dataset_path", str(exc).removeprefix("dataset_path: ")) from None


def check_spec(loaded: LoadedSpec, *, full: bool = True) -> list[str]:
    """Raise the first problem as `file:line: field: message` (SpecError, exit code 2); return warnings
    (a candidate layout the planner rejects while others fit).

    full=False skips what only some commands need: the real engine's weights, a dataset that is not
    there yet, the extra a deploy target needs, and the plan (plan and simulate compute it themselves).
    """
    spec = loaded.spec
    model_field = "model.name" if spec.model.name is not None else "model.config_path"
    try:
        cfg = load_model(spec.model.name or spec.model.config_path or "")
    except SpecError as exc:
        raise loaded.error(model_field, str(exc)) from None
    try:
        load_gpu(spec.hardware.gpu)
    except SpecError as exc:
        raise loaded.error("hardware.gpu", str(exc)) from None
    try:
        load_gpu(spec.hardware.gpu, dict(spec.hardware.overrides))
    except SpecError as exc:
        raise loaded.error("hardware.overrides", str(exc)) from None
    if spec.model.expert_stats_path is not None and cfg.is_moe:
        try:
            load_expert_stats(spec.model.expert_stats_path, num_experts=cfg.num_routed_experts)
        except SpecError as exc:
            raise loaded.error("model.expert_stats_path", str(exc)) from None
    if spec.engine.speculative is not None:
        try:
            speculative_options(spec.engine.speculative, cfg)  # MTP layers, the draft's vocabulary
        except SpecError as exc:
            raise loaded.error(*split_field(str(exc))) from None
    w = spec.workload
    context = spec.model.max_model_len or cfg.max_position_embeddings
    prefix = (w.prefix_tokens or PREFIX_TOKENS_DEFAULT) if w.kind == "prefix" else 0
    longest = prefix + _longest(w.input_tokens) + _longest(w.output_tokens)
    if w.kind in ("random", "prefix") and longest > context:
        where = "model.max_model_len" if spec.model.max_model_len else "the model's context"
        raise loaded.error(
            "workload.input_tokens",
            f"requests of up to {longest:,} tokens (prompt and output) exceed {where} of {context:,}; "
            "shorten them or raise model.max_model_len",
        )
    if w.kind in ("conversation", "agentic") and w.dataset_path is None:
        first, where = _first_call(spec)
        if first > context:  # every session would be cut before its first call: nothing to measure
            raise loaded.error(where, f"a session's first call needs at least {first:,} tokens (prompt and "
                               f"answer), more than the context of {context:,}; every session would be cut "
                               "before it starts: shorten it or raise model.max_model_len")
    _check_dataset(loaded, must_exist=full)
    try:
        check_extra_args(tuple(spec.engine.extra_args))
    except SpecError as exc:
        raise loaded.error("engine.extra_args", str(exc)) from None
    try:
        placement(spec)
    except SpecError as exc:
        raise loaded.error("hardware", str(exc)) from None
    try:
        engine_settings(spec)  # what the engine cannot run with is refused before anything runs
    except SpecError as exc:
        field = str(exc).split(":", 1)[0] if str(exc).startswith("engine.") else "engine"
        raise loaded.error(field, str(exc).removeprefix(f"{field}: ")) from None
    # Imported here, as make_plan below: `orch validate` and `orch plan` start fast (bench/cli_speed.py).
    from orchestrator.plan.candidates import pool_settings
    from orchestrator.plan.settings_grid import settings_requests

    if any(isinstance(lay, DisaggLayout) for lay in spec.layouts):
        for role, pool in (("prefill", spec.disagg.prefill), ("decode", spec.disagg.decode)):
            try:
                pool_settings(spec, pool, engine_settings(spec))  # each pool as its engine resolves it
            except SpecError as exc:
                field = str(exc).split(":", 1)[0] if str(exc).startswith("disagg.") else f"disagg.{role}"
                raise loaded.error(field, str(exc).removeprefix(f"{field}: ")) from None
    for request, label in settings_requests(spec, cfg)[1:]:  # each other combination of the lists too
        try:
            engine_settings(spec, cfg=cfg, request=request)
        except SpecError as exc:
            field = str(exc).split(":", 1)[0] if str(exc).startswith("engine.") else "engine"
            raise loaded.error(field, f"in the combination {label}: "
                               + str(exc).removeprefix(f"{field}: ")) from None
    if not full:
        return []
    try:
        require_for_target(spec.target.kind, repr(spec.target.kind))  # sweep deploys through it
    except SpecError as exc:
        raise loaded.error("target.kind", str(exc)) from None
    try:
        engine_options(spec)  # the weights a real engine loads (model.path)
    except SpecError as exc:
        raise loaded.error("model.path", str(exc)) from None
    from orchestrator.plan.run import make_plan  # the whole cost model: only validate needs it here

    try:
        rows = make_plan(spec).rows
    except SpecError as exc:
        raise SpecError(f"{loaded.source}: plan: {exc}") from None
    rejected = [f"{row.layout}: {'; '.join(row.rejected_because)}" for row in rows if row.rejected_because]
    pairs = [lay for lay in spec.layouts if isinstance(lay, DisaggLayout)]
    if pairs:  # prefill/decode pairs are planned apart (overlapping pools, the engine's handover rules)
        from orchestrator.plan.disagg_run import make_disagg_plan

        try:
            pair_rows = make_disagg_plan(spec, pairs).rows
        except SpecError as exc:
            raise SpecError(f"{loaded.source}: plan: {exc}") from None
        rejected += [f"{row.layout}: {'; '.join(row.rejected_because)}"
                     for row in pair_rows if row.rejected_because]
    if rejected and len(rejected) == len(rows) + len(pairs):  # a sweep would deploy nothing
        raise loaded.error("layouts", "the planner rejects every layout (" + " | ".join(rejected) + "); "
                           "orch plan SPEC shows the layouts that fit (sweep --force deploys them anyway)")
    return [f"{loaded.source}: the planner rejects layout {why}" for why in rejected]


def load_checked_spec(path: str | Path) -> SweepSpec:
    """load_spec, then the checks every command needs (check_spec with full=False): catalog and file
    problems name the spec file and line too."""
    loaded = load_spec_lines(path)
    check_spec(loaded, full=False)
    return loaded.spec
