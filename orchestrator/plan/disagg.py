"""The planner for prefill/decode pairs: each pool's fit and rate, the KV transfer, TTFT, and which binds.

Per engine (one DP rank of one replica), from the same cost model as aggregated layouts:
- prefill engine: holds weights and the KV of the prompts in flight (computing, or waiting for their
  transfer). Saturated, each step computes `max_num_batched_tokens` prompt tokens (chunked prefill
  mixes prompts to fill the budget); its rate is budget / prompt prompts per step, and no more than
  its KV lets it hold: (KV tokens / prompt) prompts per (prefill + transfer) seconds (Little's law);
- decode engine: weights and the KV of its running sequences; decode steps carry no prefill chunks
  (only the one token per new request that recomputes the last prompt token), so its ITL is the
  aggregated planner's decode estimate without the prefill charge; its rate in requests/s is its
  output tokens/s within the ITL bound over the output length;
- transfer: plan/kv_transfer.py, over NVLink when both pools fit one node, the network otherwise.

The system's capacity is the smallest of the prefill pool's, the decode pool's and the links'; the
row says which binds and which split of the same replica shapes and GPUs would balance them.
TTFT = request overhead + prefill queue + prefill + transfer + first decode step; the queue is that of
an M/D/1 server per prefill engine (a stated approximation: the simulator gives percentiles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.candidate import DisaggCandidate, Pool
from orchestrator.catalog.types import LinkSpec
from orchestrator.disagg import DisaggLayout, pool_problems
from orchestrator.errors import SpecError
from orchestrator.kv_handover import Handover, KVShape, handover
from orchestrator.layout import Layout
from orchestrator.plan.capacity import kv_capacity_tokens
from orchestrator.plan.checks import layout_problems
from orchestrator.plan.decode import DecodeEstimate, decode_estimate
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.plan.kv_transfer import kv_transfer_time_s, transfer_link, transfers_per_s
from orchestrator.plan.planner import GB, search_batches

LOAD_FOR_TTFT = 0.8  # TTFT is also reported at this fraction of the system's capacity


@dataclass(frozen=True)
class PrefillEngine:
    """One prefill engine (one DP rank) of a replica shape, before its transfer is known."""

    shape: Layout
    rejected_because: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    kv_tokens: int = 0
    weight_bytes_per_gpu: float = 0.0
    alone_s: float = 0.0  # one prompt alone on an idle engine
    step_s: float = 0.0  # one saturated step of the token budget
    compute_rps: float = 0.0  # prompts/s the engine computes when saturated

    def rate_rps(self, prompt_tokens: int, transfer_s: float) -> tuple[float, bool]:
        """(prompts/s, whether the KV held until transfer is what limits it)."""
        held = self.kv_tokens / max(prompt_tokens, 1) / (self.alone_s + transfer_s)
        return (held, True) if held < self.compute_rps else (self.compute_rps, False)


@dataclass(frozen=True)
class DecodeEngine:
    """One decode replica shape: its best batch within the ITL bound."""

    shape: Layout
    rejected_because: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    kv_tokens: int = 0
    weight_bytes_per_gpu: float = 0.0
    max_batch: int = 0
    best: DecodeEstimate | None = None
    first_step_s: float = 0.0  # a new request's first step on an idle engine
    replica_rps: float = 0.0  # requests/s of one replica (all its DP ranks) within the ITL bound


def _fit(inputs: PlanInputs, role: str, shape: Layout) -> tuple[list[str], list[str], int, float, Any]:
    """(rejections, warnings, KV tokens per engine, weight bytes per GPU, cost model) of one pool's
    replica shape. Placement on the nodes is the pair's (disagg.pool_problems), not the shape's."""
    reject, warn = layout_problems(inputs.cfg, shape, inputs.cluster, weight_dtype=inputs.weight_dtype,
                                   group_size=inputs.quant_group_size, quant=inputs.checkpoint_quant,
                                   engine=inputs.engine,
                                   redundant_experts=inputs.num_redundant_experts if shape.ep else 0)
    reject = [f"{role} pool: {r}" for r in reject if not r.startswith("needs ") and "spans nodes" not in r]
    warn = [f"{role} pool: {w}" for w in warn if "idle" not in w]
    if any("pipeline stages" in r or "EP ranks" in r or "EP on a dense" in r for r in reject):
        return reject, warn, 0, 0.0, None
    try:
        cost = layout_cost(inputs, shape)
    except SpecError as exc:  # a spec setting this shape cannot honour (e.g. redundant expert slots)
        return [*reject, f"{role} pool: {exc}"], warn, 0, 0.0, None
    kv_tokens, weights, usable = kv_capacity_tokens(inputs, cost)
    if kv_tokens < 0:
        reject.append(f"{role} pool: weights {weights / GB:.1f} GB per GPU + reserve exceed the usable "
                      f"{(usable + inputs.assumptions.runtime_reserve_bytes) / GB:.1f} GB")
    elif kv_tokens < inputs.max_model_len:
        reject.append(f"{role} pool: KV cache holds {kv_tokens} tokens per engine, less than max_model_len "
                      f"{inputs.max_model_len}")
    return reject, warn, max(kv_tokens, 0), weights, cost


def prefill_engine(inputs: PlanInputs, shape: Layout, prompt_tokens: int) -> PrefillEngine:
    reject, warn, kv_tokens, weights, cost = _fit(inputs, "prefill", shape)
    if cost is None or reject:
        return PrefillEngine(shape, tuple(reject), tuple(warn), kv_tokens, weights)
    budget = inputs.max_num_batched_tokens
    prompt = max(prompt_tokens, 1)
    # Averaged over a prompt, a token attends to (prompt + 1) / 2 tokens however the budget chunks it;
    # a chunk after a prompt's first reads the KV before it (on average half of what is left).
    pairs = budget * (prompt + 1) / 2
    step_s = cost.round_s(budget, max(0, prompt - budget) / 2, pairs, max(1, math.ceil(budget / prompt)),
                          prefill_pairs=pairs)
    return PrefillEngine(shape, (), tuple(warn), kv_tokens, weights, alone_s=cost.prefill(prompt).total_s,
                         step_s=step_s, compute_rps=budget / prompt / step_s)


def decode_engine(inputs: PlanInputs, shape: Layout, prompt_tokens: int, output_tokens: int,
                  itl_bound_ms: float | None) -> DecodeEngine:
    reject, warn, kv_tokens, weights, cost = _fit(inputs, "decode", shape)
    if cost is None or reject:
        return DecodeEngine(shape, tuple(reject), tuple(warn), kv_tokens, weights)
    context = prompt_tokens + output_tokens // 2  # as the aggregated planner: prompt and half the answer
    max_batch = min(inputs.max_num_seqs, kv_tokens // max(context, 1))
    best = None
    for b in search_batches(max(max_batch, 1)):
        est = decode_estimate(cost, shape, b, context, kv_tokens,
                              step_budget_tokens=inputs.max_num_batched_tokens)
        if itl_bound_ms is not None and est.itl_ms > itl_bound_ms:
            break
        if best is None or est.output_tokens_per_s_per_gpu > best.output_tokens_per_s_per_gpu:
            best = est
    if best is None and itl_bound_ms is not None:
        warn.append(f"decode pool: predicted ITL at batch 1 exceeds the SLO bound {itl_bound_ms:g} ms")
    first = cost.step(1, prompt_tokens, prompt_tokens).total_s
    rps = best.output_tokens_per_s_per_replica / max(output_tokens, 1) if best else 0.0
    return DecodeEngine(shape, (), tuple(warn), kv_tokens, weights, max(max_batch, 0), best, first, rps)


@dataclass(frozen=True)
class DisaggRow:
    """What the cost model predicts for one prefill/decode pair."""

    layout: DisaggLayout
    gpus: int
    rejected_because: tuple[str, ...]
    warnings: tuple[str, ...]
    prefill: PrefillEngine | None = None
    decode: DecodeEngine | None = None
    link: str = ""
    transfer_ms: float = 0.0
    prefill_rps: float = 0.0  # whole pools, requests/s
    decode_rps: float = 0.0
    transfer_rps: float = 0.0
    prefill_kv_limited: bool = False
    capacity_rps: float = 0.0
    binds: str = ""  # "prefill", "decode" or "transfer"
    ttft_ms: float = 0.0  # unloaded: no prefill queue
    ttft_loaded_ms: float = 0.0  # at LOAD_FOR_TTFT of capacity (M/D/1 queue per prefill engine)
    itl_ms: float = 0.0
    output_tokens_per_s_per_gpu: float = 0.0
    balanced: DisaggLayout | None = None  # the best split of the same shapes on the same GPUs
    balanced_rps: float = 0.0
    decode_per_prefill_replica: float = 0.0  # prefill replicas one decode replica keeps busy

    @property
    def fits(self) -> bool:
        return not self.rejected_because

    def to_dict(self) -> dict[str, Any]:
        best = self.decode.best if self.decode else None
        return {
            "layout": str(self.layout), "kind": "disaggregated", "gpus": self.gpus, "fits": self.fits,
            "rejected_because": list(self.rejected_because), "warnings": list(self.warnings),
            "prefill": {"layout": str(self.layout.prefill), "rps": self.prefill_rps,
                        "kv_limited": self.prefill_kv_limited,
                        "kv_tokens_per_engine": self.prefill.kv_tokens if self.prefill else 0,
                        "weight_bytes_per_gpu": self.prefill.weight_bytes_per_gpu if self.prefill else 0.0,
                        "prefill_ms": self.prefill.alone_s * 1e3 if self.prefill else None,
                        "step_ms": self.prefill.step_s * 1e3 if self.prefill else None},
            "decode": {"layout": str(self.layout.decode), "rps": self.decode_rps,
                       "kv_tokens_per_engine": self.decode.kv_tokens if self.decode else 0,
                       "weight_bytes_per_gpu": self.decode.weight_bytes_per_gpu if self.decode else 0.0,
                       "max_batch": self.decode.max_batch if self.decode else 0,
                       "best": best.to_dict() if best else None},
            "transfer": {"link": self.link, "ms": self.transfer_ms, "rps": self.transfer_rps},
            "capacity_rps": self.capacity_rps, "binds": self.binds, "ttft_ms": self.ttft_ms,
            "ttft_loaded_ms": self.ttft_loaded_ms, "ttft_load_fraction": LOAD_FOR_TTFT,
            "itl_ms": self.itl_ms, "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
            "balanced": str(self.balanced) if self.balanced else None, "balanced_rps": self.balanced_rps,
            "decode_per_prefill_replica": self.decode_per_prefill_replica,
        }


def _pool_rates(pf: PrefillEngine, dec: DecodeEngine, n_p: int, n_d: int, prompt: int,
                transfer_s: float) -> tuple[float, float, float, bool]:
    """(prefill, decode, transfer) requests/s of n_p prefill and n_d decode replicas, and whether the
    prefill engines are held back by the KV they keep until each transfer."""
    per_engine, kv_limited = pf.rate_rps(prompt, transfer_s)
    p_engines, d_engines = n_p * pf.shape.dp, n_d * dec.shape.dp
    return (p_engines * per_engine, n_d * dec.replica_rps, transfers_per_s(transfer_s, p_engines, d_engines),
            kv_limited)


def balance(pf: PrefillEngine, dec: DecodeEngine, gpus: int, prompt: int,
            transfer_s: float) -> tuple[DisaggLayout | None, float]:
    """The split of `gpus` into these prefill and decode replica shapes with the highest capacity."""
    best: tuple[DisaggLayout | None, float] = (None, 0.0)
    g_p, g_d = pf.shape.gpus_per_replica, dec.shape.gpus_per_replica
    for n_p in range(1, gpus // g_p + 1):
        rest = gpus - n_p * g_p
        if rest < g_d or rest % g_d:
            continue
        n_d = rest // g_d
        cap = min(_pool_rates(pf, dec, n_p, n_d, prompt, transfer_s)[:3])
        if cap > best[1]:
            best = (DisaggLayout(_with(pf.shape, n_p), _with(dec.shape, n_d)), cap)
    return best


def _with(shape: Layout, replicas: int) -> Layout:
    return Layout(tp=shape.tp, pp=shape.pp, dp=shape.dp, ep=shape.ep, replicas=replicas)


def shape_of(layout: Layout) -> Layout:
    """One replica of a layout."""
    return _with(layout, 1)


@dataclass(frozen=True)
class PairFacts:
    """What a pair of replica shapes shares across every split of the same GPUs: the engine's handover
    rules, the link and transfer time, and the best split."""

    rules: Handover
    link: LinkSpec
    transfer_s: float
    balanced: DisaggLayout | None
    balanced_rps: float


def pair_facts(inputs: PlanInputs, pf: PrefillEngine, dec: DecodeEngine, *, gpus: int, engine: str,
               prompt_tokens: int, connector: str | None = None) -> PairFacts:
    cfg = inputs.cfg
    rules = handover(engine, pf.shape, dec.shape, KVShape(cfg.num_kv_heads, cfg.is_mla), connector=connector)
    link = transfer_link(inputs.gpu.intra_node, inputs.gpu.inter_node,
                         same_node=gpus <= inputs.cluster.gpus_per_node)
    transfer_s = kv_transfer_time_s(cfg, inputs.kv_bytes_per_value, pf.shape, dec.shape, prompt_tokens, link)
    balanced, balanced_rps = (None, 0.0)
    # A pair larger than the cluster is rejected (pool_problems); balancing its GPUs would only cost
    # time, one step per prefill replica count (`p:tp1x99999999999+d:tp1` would never finish).
    fits = gpus <= inputs.cluster.gpus
    if fits and not (rules.rejections or pf.rejected_because or dec.rejected_because):
        balanced, balanced_rps = balance(pf, dec, gpus, prompt_tokens, transfer_s)
    return PairFacts(rules, link, transfer_s, balanced, balanced_rps)


def combine(inputs: PlanInputs, pd: DisaggLayout, pf: PrefillEngine, dec: DecodeEngine, facts: PairFacts, *,
            prompt_tokens: int, output_tokens: int, structural: list[str] | None = None) -> DisaggRow:
    """The row of `pd` from its engines' estimates and its pair's facts (both cached by the enumerator)."""
    cluster = inputs.cluster
    reject = list(structural if structural is not None
                  else pool_problems(pd, nodes=cluster.nodes, gpus_per_node=cluster.gpus_per_node))
    reject += facts.rules.rejections
    reject += pf.rejected_because + dec.rejected_because
    warn = list(facts.rules.warnings) + list(pf.warnings) + list(dec.warnings)
    if reject:
        return DisaggRow(pd, pd.gpus, tuple(reject), tuple(warn), pf, dec)
    transfer_s = facts.transfer_s
    p_rps, d_rps, t_rps, kv_limited = _pool_rates(pf, dec, pd.prefill.replicas, pd.decode.replicas,
                                                  prompt_tokens, transfer_s)
    capacity = min(p_rps, d_rps, t_rps)
    binds = "prefill" if capacity == p_rps else "decode" if capacity == d_rps else "transfer"
    best = dec.best
    overhead = inputs.gpu.request_overhead_s
    ttft = overhead + pf.alone_s + transfer_s + dec.first_step_s
    # M/D/1 wait at the prefill engines at LOAD_FOR_TTFT of capacity: rho / (2 mu (1 - rho)).
    p_engines = pd.prefill.replicas * pd.prefill.dp
    mu = p_rps / p_engines if p_engines else 0.0
    rho = min(LOAD_FOR_TTFT * capacity / p_rps, 0.999) if p_rps else 0.999
    queue = rho / (2 * mu * (1 - rho)) if mu else math.inf
    loaded = overhead + queue + pf.alone_s + transfer_s + (best.itl_ms / 1e3 if best else dec.first_step_s)
    if kv_limited:
        warn.append(f"prefill pool: its KV ({pf.kv_tokens} tokens per engine) holds too few prompts of "
                    f"{prompt_tokens} tokens through prefill and transfer; the KV it keeps, not compute, "
                    "sets its rate")
    per_p = pf.rate_rps(prompt_tokens, transfer_s)[0] * pd.prefill.dp
    return DisaggRow(
        layout=pd, gpus=pd.gpus, rejected_because=(), warnings=tuple(warn), prefill=pf, decode=dec,
        link=facts.link.name, transfer_ms=transfer_s * 1e3, prefill_rps=p_rps, decode_rps=d_rps,
        transfer_rps=t_rps, prefill_kv_limited=kv_limited, capacity_rps=capacity, binds=binds,
        ttft_ms=ttft * 1e3, ttft_loaded_ms=loaded * 1e3, itl_ms=best.itl_ms if best else 0.0,
        output_tokens_per_s_per_gpu=capacity * output_tokens / pd.gpus,
        balanced=facts.balanced if facts.balanced != pd else None, balanced_rps=facts.balanced_rps,
        decode_per_prefill_replica=dec.replica_rps / per_p if per_p else 0.0,
    )


def plan_disagg(inputs: PlanInputs, pd: DisaggLayout, *, engine: str, prompt_tokens: int, output_tokens: int,
                itl_bound_ms: float | None = None, connector: str | None = None,
                pool_inputs: tuple[PlanInputs, PlanInputs] | None = None) -> DisaggRow:
    """Score one prefill/decode pair; `pool_inputs`: each pool's own (its settings and redundant
    experts), else `inputs` for both."""
    p_in, d_in = pool_inputs or (inputs, inputs)
    pf = prefill_engine(p_in, shape_of(pd.prefill), prompt_tokens)
    dec = decode_engine(d_in, shape_of(pd.decode), prompt_tokens, output_tokens, itl_bound_ms)
    facts = pair_facts(inputs, pf, dec, gpus=pd.gpus, engine=engine, prompt_tokens=prompt_tokens,
                       connector=connector)
    return combine(inputs, pd, pf, dec, facts, prompt_tokens=prompt_tokens, output_tokens=output_tokens)


def inputs_of(inputs: PlanInputs, pool: Pool) -> PlanInputs:
    """The cost model's inputs for one pool: its settings and its redundant expert slots."""
    out = inputs.with_settings(pool.settings)
    return out if out.num_redundant_experts == pool.num_redundant_experts else replace(
        out, num_redundant_experts=pool.num_redundant_experts)


def plan_pair(inputs: PlanInputs, cand: DisaggCandidate, *, prompt_tokens: int, output_tokens: int,
              itl_bound_ms: float | None = None) -> DisaggRow:
    """Score a disaggregated candidate: each pool with its own settings, over its transfer backend."""
    return plan_disagg(inputs, cand.layout, engine=cand.engine, prompt_tokens=prompt_tokens,
                       output_tokens=output_tokens, itl_bound_ms=itl_bound_ms, connector=cand.transfer,
                       pool_inputs=(inputs_of(inputs, cand.prefill), inputs_of(inputs, cand.decode)))
