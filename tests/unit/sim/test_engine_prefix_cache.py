"""The simulated engine with prefix caching: what a hit saves, what it costs in memory, what eviction and
preemption do to it. Timings come from the same cost model the engine calls, so the assertions compare
the engine with itself (caching on against off), never with hard-coded numbers."""

from __future__ import annotations

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.loadgen.content import Content
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.sim.engine import EngineConfig, EngineCore, Seq
from orchestrator.sim.loops import simulate
from orchestrator.sim.virtual import SimRequest
from tests.support.engines import LIMITS, fixed_settings

INPUTS = PlanInputs(cfg=load_model("qwen2.5-72b"), gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8),
                    settings=fixed_settings(32768))
COST = layout_cost(INPUTS, parse_layout("tp8"))


def _engine(caching: bool = True, kv: int = 500_000, **cfg: object) -> EngineCore:
    config = EngineConfig(kv_capacity_tokens=kv, prefix_caching=caching, **(LIMITS | cfg))  # type: ignore[arg-type]
    return EngineCore(COST, config)


def _req(rid: str, t: float, content: Content, out: int = 4) -> SimRequest:
    return SimRequest(rid, t, content.end, out, content)


def test_a_repeated_prefix_is_not_computed_again() -> None:
    shared = Content.of([(1, 4000)])
    a, b = shared.then(2, 100), shared.then(3, 100)
    eng = _engine()
    recs, summary = simulate([eng], [_req("a", 0.0, a), _req("b", 10.0, b)])
    assert recs[0].extra["cached_tokens"] == "0" and recs[1].extra["cached_tokens"] == "4000"
    assert recs[1].ttft_s is not None and recs[0].ttft_s is not None
    assert recs[1].ttft_s < recs[0].ttft_s / 5  # 100 new tokens instead of 4,100
    stats = summary.prefix_cache
    assert stats is not None and stats.queries == 8200 and stats.hits == 4000
    off, _ = simulate([_engine(caching=False)], [_req("a", 0.0, a), _req("b", 10.0, b)])
    assert off[1].ttft_s == off[0].ttft_s or abs(off[1].ttft_s - off[0].ttft_s) < 1e-9  # type: ignore[operator]
    assert "cached_tokens" not in off[1].extra


def test_a_running_request_shares_its_prompt_and_an_answer_is_cached_for_the_next_turn() -> None:
    first = Content.of([(1, 3000)])
    eng = _engine()
    # b arrives while a decodes (a's prompt blocks are cached once computed)
    recs, _ = simulate([eng], [_req("a", 0.0, first.then(2, 50), out=500), _req("b", 1.0, first.then(3, 50))])
    assert recs[1].extra["cached_tokens"] == "2992"  # the whole blocks of the shared 3,000 tokens
    # the next turn quotes a's answer: its blocks (the simulated engine's text) are cached too
    from orchestrator.loadgen.content import sim_answer_key
    turn2 = first.then(2, 50).then(sim_answer_key(500), 500).then(4, 30)
    recs2, _ = simulate([eng], [_req("c", 100.0, turn2)])
    # (the answer's last token was never fed back, so its KV was not computed)
    assert int(recs2[0].extra["cached_tokens"]) == (3549 // 16) * 16


def test_shared_blocks_take_memory_once() -> None:
    shared = Content.of([(1, 8000)])
    seqs = [Seq(f"r{i}", 8100, 1000, 0.0, content=shared.then(10 + i, 100)) for i in range(8)]
    eng = _engine()
    eng.add(seqs[0])
    while seqs[0].decode_start_step < 0:  # the first computes the prefix
        eng.complete(eng.schedule())
    for s in seqs[1:]:
        eng.add(s)
    for _ in range(3):
        eng.complete(eng.schedule())
    assert all(s.decode_start_step >= 0 for s in seqs)
    used = eng.kv_used_tokens()
    assert used < 8 * 8100 / 2  # without sharing it would be about 8 x 8,100
    assert used > 8000 + 8 * 100


def test_eviction_makes_room_and_the_cache_never_exceeds_the_free_memory() -> None:
    eng = _engine(kv=20_000)
    reqs = [_req(f"r{i}", float(i), Content.of([(100 + i, 6000)])) for i in range(10)]
    recs, summary = simulate([eng], reqs)
    assert all(r.ok for r in recs)
    stats = summary.prefix_cache
    assert stats is not None and stats.evicted_blocks > 0 and stats.hits == 0
    assert eng.cache is not None and eng.cache.free_blocks * 16 <= 20_000


def test_a_preempted_request_reuses_its_computed_blocks() -> None:
    # two long answers into a small cache: the newer one is preempted, and its recompute finds its
    # prompt (and what it generated) still cached
    eng = _engine(kv=9_000)
    a, b = Content.of([(1, 3000)]), Content.of([(2, 3000)])
    recs, summary = simulate([eng], [_req("a", 0.0, a, out=2500), _req("b", 0.0, b, out=2500)])
    assert all(r.ok for r in recs) and summary.preemptions > 0
    stats = summary.prefix_cache
    assert stats is not None and stats.preempted_hits > 0 and stats.preempted_queries > 0
    off_recs, off = simulate([_engine(caching=False, kv=9_000)],
                             [_req("a", 0.0, a, out=2500), _req("b", 0.0, b, out=2500)])
    assert off.preemptions > 0
    assert max(r.done_s or 0 for r in recs) < max(r.done_s or 0 for r in off_recs)


def test_guaranteed_no_evict_reuses_partial_blocks() -> None:
    # TensorRT-LLM's rule: a block whose leading tokens match is reused up to the match (a copy)
    first, second = Content.of([(1, 1000), (2, 8)]), Content.of([(1, 1000), (3, 40)])
    vllm, trt = _engine(), _engine(reserve_whole_kv=True)
    r_vllm, _ = simulate([vllm], [_req("a", 0.0, first), _req("b", 5.0, second)])
    r_trt, _ = simulate([trt], [_req("a", 0.0, first), _req("b", 5.0, second)])
    assert r_vllm[1].extra["cached_tokens"] == "992"  # whole blocks only
    assert r_trt[1].extra["cached_tokens"] == "1000"  # up to where the prompts differ


def test_a_token_granular_cache_hits_to_the_token() -> None:
    # SGLang's radix cache (page size 1): blocks of 16 are hashed, and partial reuse finds the rest
    first, second = Content.of([(1, 1000), (2, 8)]), Content.of([(1, 1000), (3, 40)])
    sglang_like = _engine(block_tokens=1)
    recs, _ = simulate([sglang_like], [_req("a", 0.0, first), _req("b", 5.0, second)])
    assert recs[1].extra["cached_tokens"] == "1000"


def _drive(fast: bool, caching: bool, seed: int) -> tuple[list[tuple[object, ...]], int, object]:
    """One engine stepped through a random arrival pattern of shared-prefix requests (small KV: it
    preempts and evicts), with `next_decode` taken where it applies or never."""
    import random

    rng = random.Random(seed)
    eng = _engine(caching=caching, kv=12_000, max_num_seqs=24)
    shared = Content.of([(1, 600)])
    arrivals: dict[int, list[Seq]] = {}
    for k in range(80):
        content = shared.then(2 + k % 9, rng.randint(20, 900))
        seq = Seq(str(k), content.end, rng.randint(1, 800), 0.0, content=content)
        arrivals.setdefault(rng.randrange(1500), []).append(seq)
    trace: list[tuple[object, ...]] = []
    fast_steps = 0
    plan = eng.schedule()
    for tick in range(20_000):
        for seq in arrivals.pop(tick, ()):
            eng.add(seq)
        nxt = eng.next_decode(plan) if fast else None
        if nxt is None:
            eng.complete(plan)
            plan = eng.schedule()
        else:
            fast_steps += 1
            plan = nxt
        trace.append((plan.index, plan.tokens, plan.kv_tokens, plan.attn_pairs, plan.decodes, plan.sequences,
                      tuple((s.request_id, c) for s, c in plan.prefill_chunks), eng.kv_used_tokens()))
        if not arrivals and not eng.has_work():
            break
    stats = (eng.preemptions, eng.cache.stats() if eng.cache is not None else None)
    return trace, fast_steps, stats


def test_the_decode_fast_path_steps_exactly_as_the_general_one() -> None:
    for seed in (1, 2):
        for caching in (True, False):
            plain, none, plain_stats = _drive(False, caching, seed)
            fast, taken, fast_stats = _drive(True, caching, seed)
            assert none == 0 and 0 < taken < len(fast)  # both paths ran
            assert fast == plain and fast_stats == plain_stats
            assert plain_stats[0] > 0  # the small cache preempted: the fast path declined those steps
