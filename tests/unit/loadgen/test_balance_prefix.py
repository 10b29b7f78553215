"""Prefix-aware routing (loadgen/balance.py): sessions stick to the replica holding their history,
unless the load is out of balance or the match is too short to matter."""

from __future__ import annotations

import pytest

from orchestrator.loadgen import balance
from orchestrator.loadgen.balance import Balancer
from orchestrator.loadgen.content import Content


def test_a_session_sticks_to_the_replica_that_served_it() -> None:
    bal = Balancer(4, "prefix_aware")
    sessions = [Content.of([(100 + s, 500)]) for s in range(8)]
    first = [bal.acquire(c.route()) for c in sessions]
    assert sorted(first) == [0, 0, 1, 1, 2, 2, 3, 3]  # new sessions spread by load
    for i in first:
        bal.release(i)
    later = [bal.acquire(c.then(7, 50).then(200 + k, 40).route()) for k, c in enumerate(sessions)]
    assert later == first and bal.affine == 8
    rr = Balancer(4, "round_robin")
    assert [rr.acquire(c.route()) for c in sessions] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_a_short_match_or_no_content_goes_to_the_least_loaded() -> None:
    bal = Balancer(2, "prefix_aware")
    shared = Content.of([(1, 10)])
    assert bal.acquire(shared.then(2, 1000).route()) == 0
    # only 10 of 1,010 tokens match on replica 0: below the threshold, the idle replica wins
    assert bal.acquire(shared.then(3, 1000).route()) == 1
    assert bal.acquire(None) in (0, 1) and bal.affine == 0


def test_imbalance_overrides_affinity() -> None:
    bal = Balancer(2, "prefix_aware")
    hot = Content.of([(1, 1000)])
    for k in range(balance.BALANCE_ABS_THRESHOLD + 2):
        i = bal.acquire(hot.then(10 + k, 10).route())
        if k and i == 1:
            break
    assert bal.outstanding[0] > balance.BALANCE_ABS_THRESHOLD  # affinity held until the gap passed 64
    assert bal.outstanding[1] == 1


def test_what_an_endpoint_remembers_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(balance, "MAX_ROUTES", 4)
    bal = Balancer(1, "prefix_aware")
    for k in range(10):
        bal.acquire(Content.of([(k, 10)]).route())
    assert bal.remembered(0) == 0  # one endpoint: nothing to choose, nothing remembered
    bal2 = Balancer(2, "prefix_aware")
    for k in range(10):
        bal2.acquire(Content.of([(k, 10), (k, 10)]).route())
    assert 0 < bal2.remembered(0) <= 4 and bal2.remembered(1) <= 4
