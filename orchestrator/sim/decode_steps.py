"""The simulator's hot path: runs of plain decode steps applied in one loop (virtual time).

Most steps of a busy engine are plain decodes: every running sequence emits one token, nothing is
admitted, continued, finished or preempted. `EngineCore.next_decode` applies one such step; here the
steps that follow are applied too, for as long as nothing outside the engine can happen (the caller
gives the bound: the next arrival, sample or other engine's step) and no request ends or is preempted.
The result is the one the general path gives, step for step: the same step ends (same float
operations: LayoutCost.decode_pricer is round_s for one stage), the same counters, the same cache
(its trims deferred: PrefixCache.trim_later).
"""

from __future__ import annotations

import math

from orchestrator.sim.engine import EngineCore
from orchestrator.sim.seq import StepPlan


def decode_steps(eng: EngineCore, plan: StepPlan, end_s: float, bound_s: float,
                 ends: list[float]) -> tuple[StepPlan, float] | None:
    """`plan` ended at `end_s`: when it and the next step are plain decodes (`eng.next_decode`), apply
    it, and so on for every next step that ends before `bound_s` (the next event that could touch the
    engine). Each applied step's end is appended to `ends`. Returns the step then in flight and its
    end, or None when `plan` needs the general path (nothing applied). Without speculation, and unless
    a subclass prices steps or counts KV itself, the steps are applied in one loop: a plain decode
    keeps its batch (so its step price) and only the decoding context grows, one token per sequence
    per step (integers, so every sum is exact)."""
    if (eng.spec is not None or type(eng).step_time_s is not EngineCore.step_time_s
            or type(eng).kv_used_tokens is not EngineCore.kv_used_tokens):
        return one_by_one(eng, plan, end_s, bound_s, ends)
    decodes = plan.decodes
    step = plan.index
    heap = eng.finish_heap
    finish = heap[0][0] if heap else math.inf  # the first step that ends a request
    cfg = eng.config
    running = len(eng.running)
    if (plan.prefill_chunks or eng.prefilling or not decodes or finish <= step
            or (eng.waiting and running < cfg.max_num_seqs)):
        return None
    price = eng.cost.decode_pricer(decodes)
    ctx = eng.decode_ctx
    # kv_used_tokens() beside the decoding context, and the step's own KV slots (next_decode's sum)
    rest = eng.kv_used_tokens() - ctx + decodes * eng.decode_tokens
    if price is None or type(rest) is not int or type(ctx) is not int:  # floats: sums not exact
        return one_by_one(eng, plan, end_s, bound_s, ends)
    capacity = cfg.kv_capacity_tokens
    used = -1
    while step < finish:
        grown = ctx + decodes
        if grown + rest > capacity:  # the next step preempts: the general path does it
            break
        ctx, used = grown, grown + rest
        step += 1
        ends.append(end_s)
        end_s += price(ctx, float(ctx + decodes))
        if end_s >= bound_s:
            break
    if used < 0:
        return None
    eng.decode_ctx = ctx
    eng.step_index = step
    cache = eng.cache
    if cache is not None:  # one trim for the steps applied: the room only shrinks as the context grows
        cache.trim_later(int((capacity - used) // eng.cache_block))
    return StepPlan(step, decodes, ctx, float(ctx + decodes), decodes, (), running), end_s


def one_by_one(eng: EngineCore, plan: StepPlan, end_s: float, bound_s: float,
               ends: list[float]) -> tuple[StepPlan, float] | None:
    """decode_steps through eng.next_decode and eng.step_time_s, step by step."""
    nxt = eng.next_decode(plan)
    if nxt is None:
        return None
    while True:
        ends.append(end_s)
        plan, end_s = nxt, end_s + eng.step_time_s(nxt)
        if end_s >= bound_s:
            return plan, end_s
        nxt = eng.next_decode(plan)
        if nxt is None:
            return plan, end_s
