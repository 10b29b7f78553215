"""The prefill/decode simulator in virtual time: stages in order, KV held and reserved, links serialised."""

from __future__ import annotations

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import Layout
from orchestrator.loadgen.content import Content
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.sim.engine import EngineConfig, Seq
from orchestrator.sim.pd_engines import DecodeCore, PrefillCore, pool_engines
from orchestrator.sim.pd_virtual import closed_loop_disagg, simulate_disagg
from orchestrator.sim.virtual import SimRequest
from tests.support.engines import LIMITS, fixed_settings

INPUTS = PlanInputs(cfg=load_model("qwen2.5-72b"), gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8),
                    settings=fixed_settings(8192))
COST = layout_cost(INPUTS, Layout(tp=4))


def _pools(n_p: int = 1, n_d: int = 1, p_kv: int = 200_000, d_kv: int = 200_000,
           seqs: int = 256) -> tuple[list[PrefillCore], list[DecodeCore]]:
    limits = LIMITS | {"max_num_seqs": seqs}
    return ([PrefillCore(COST, EngineConfig(kv_capacity_tokens=p_kv, **limits)) for _ in range(n_p)],
            [DecodeCore(COST, EngineConfig(kv_capacity_tokens=d_kv, **limits)) for _ in range(n_d)])


def _reqs(n: int, gap_s: float, prompt: int = 1000, out: int = 20) -> list[SimRequest]:
    return [SimRequest(f"r{i}", i * gap_s, prompt, out) for i in range(n)]


def test_one_request_runs_prefill_transfer_then_decode() -> None:
    prefill, decode = _pools()
    records, summary = simulate_disagg(prefill, decode, _reqs(1, 0.0), lambda n: 0.25)
    (rec,) = records
    assert rec.ok and rec.output_tokens == 20 and len(rec.chunk_times_s) == 20
    prefill_s = COST.round_s(1000, 0, 1000 * 1001 / 2, 1, prefill_pairs=1000 * 1001 / 2)
    first_decode_s = COST.round_s(1, 999, 1000, 1, prefill_pairs=1000)  # the last prompt token, KV loaded
    assert rec.chunk_times_s[0] == pytest.approx(prefill_s + 0.25 + first_decode_s)
    assert summary.transfers == 1 and summary.transfer_s_sum == pytest.approx(0.25)
    assert summary.prefill_steps == 1 and summary.decode_steps == 20
    # Both pools end empty: the prefill KV was released at the transfer, the decode KV at the finish.
    assert prefill[0].kv_used_tokens() == 0 and decode[0].kv_used_tokens() == 0


def test_links_carry_one_transfer_at_a_time() -> None:
    prefill, decode = _pools(n_p=2, n_d=1)
    records, summary = simulate_disagg(prefill, decode, _reqs(2, 0.0), lambda n: 1.0)
    firsts = sorted(r.chunk_times_s[0] for r in records)
    # Two prefill engines finish together, but the decode engine receives one KV at a time.
    assert firsts[1] - firsts[0] >= 1.0 - 1e-9
    assert summary.kv_wait_s_sum == pytest.approx(1.0, abs=1e-6)


def test_decode_waits_for_free_kv() -> None:
    # Room for one 1000-token request (+ its 20 outputs) at a time on the decode engine.
    prefill, decode = _pools(n_p=2, d_kv=1100)
    records, summary = simulate_disagg(prefill, decode, _reqs(2, 0.0), lambda n: 0.01)
    assert all(r.ok and r.output_tokens == 20 for r in records)
    first, second = sorted(records, key=lambda r: r.chunk_times_s[0])
    assert second.chunk_times_s[0] > first.done_s  # its transfer waited for the first to finish
    assert summary.kv_wait_s_sum > 0 and summary.preemptions == 0


def test_prefill_keeps_kv_until_transfer_ends() -> None:
    # The prefill engine holds one prompt; the second prompt cannot start before the first's KV leaves.
    prefill, decode = _pools(n_p=1, p_kv=1500)
    records, _ = simulate_disagg(prefill, decode, _reqs(2, 0.0), lambda n: 2.0)
    first, second = sorted(records, key=lambda r: r.chunk_times_s[0])
    assert second.chunk_times_s[0] - first.chunk_times_s[0] >= 2.0


@pytest.mark.parametrize("caching", [False, True])
def test_prefill_counts_the_kv_it_holds_for_the_handover(caching: bool) -> None:
    # With prefix caching on, the engine's own cached-block bookkeeping must not swallow the handover KV.
    config = EngineConfig(kv_capacity_tokens=200_000, prefix_caching=caching, **LIMITS)
    prefill, decode = PrefillCore(COST, config), DecodeCore(COST, config)
    held: list[float] = []
    hold = prefill.hold

    def watch(tokens: int) -> None:
        hold(tokens)
        held.append(prefill.kv_used_tokens())

    prefill.hold = watch  # type: ignore[method-assign]
    reqs = [SimRequest(f"r{i}", 0.0, 1000, 20, Content.of([(i + 1, 1000)])) for i in range(3)]
    simulate_disagg([prefill], [decode], reqs, lambda n: 0.5)
    # The three prompts finish in one step; the link hands them over one at a time, so all three are held.
    assert held[-1] >= 3000 and held == sorted(held)
    assert prefill.kv_used_tokens() == 0 and prefill.handover_kv == 0


def test_decode_core_reservation_accounting() -> None:
    dec = DecodeCore(COST, EngineConfig(kv_capacity_tokens=2000, **(LIMITS | {"max_num_seqs": 2})))
    assert dec.has_room(1000)
    dec.reserve(1000)
    assert dec.outstanding == 1 and not dec.has_room(1000)  # 1008 + 1008 > 2000
    seq = Seq("a", 1000, 5, 0.0)
    dec.arrive(seq)
    assert dec.incoming == 0 and dec.incoming_kv == 0
    assert seq.computed == 999 and dec.kv_used_tokens() == 999 + 8
    plan = dec.schedule()
    assert plan.tokens == 1 and plan.prefill_pairs == 1000  # the last prompt token attends to all 1000
    started, _ = dec.complete(plan)
    assert started == [seq] and seq.generated == 1


def test_policies_spread_requests() -> None:
    prefill, decode = _pools(n_p=2, n_d=2)
    records, _ = simulate_disagg(prefill, decode, _reqs(8, 0.0), lambda n: 0.001, policy="round_robin")
    assert sorted(r.extra["prefill_engine"] for r in records) == ["0"] * 4 + ["1"] * 4
    assert sorted(r.extra["decode_engine"] for r in records) == ["0"] * 4 + ["1"] * 4
    prefill, decode = _pools(n_p=2, n_d=2)
    records, _ = simulate_disagg(prefill, decode, _reqs(8, 0.0), lambda n: 0.001)
    assert {r.extra["prefill_engine"] for r in records} == {"0", "1"}


def test_too_long_is_refused_and_others_go_on() -> None:
    prefill, decode = _pools(p_kv=5000, d_kv=5000)
    reqs = [SimRequest("long", 0.0, 6000, 10), SimRequest("ok", 0.0, 100, 10)]
    records, summary = simulate_disagg(prefill, decode, reqs, lambda n: 0.0)
    assert [r.request_id for r in records] == ["long", "ok"]
    assert records[0].error == "http_400" and records[1].ok and summary.rejected == 1


def test_closed_loop_keeps_concurrency() -> None:
    prefill, decode = _pools(n_p=2, n_d=1)
    records, _ = closed_loop_disagg(prefill, decode, _reqs(10, 0.0, prompt=500), lambda n: 0.01, 3,
                                    duration_s=5.0)
    assert len(records) > 10  # cycled for the duration
    events = sorted([(r.sent_s, 1) for r in records] + [(r.done_s or r.sent_s, -1) for r in records])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak <= 3
    assert all(r.sent_s < 5.0 for r in records)


def test_pool_engines_follow_the_planner() -> None:
    engines = pool_engines(INPUTS, Layout(tp=4, dp=1), "decode", 3)
    assert len(engines) == 3 and all(isinstance(e, DecodeCore) for e in engines)
    from orchestrator.plan.capacity import kv_capacity_tokens

    assert engines[0].config.kv_capacity_tokens == kv_capacity_tokens(INPUTS, COST)[0]
    from orchestrator.errors import SpecError

    with pytest.raises(SpecError, match="prefill pool tp1"):
        pool_engines(INPUTS, Layout(tp=1), "prefill", 1)
