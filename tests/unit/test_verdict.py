"""A load point's verdict as a value, and the one reading of a stored (passed, text) pair."""

from __future__ import annotations

from orchestrator.verdict import Verdict


def test_stored_pairs_read_back() -> None:
    assert Verdict.of(True, "") == Verdict("passed")
    fail = "SLO not met: itl_p99_ms 101 > 100"
    assert Verdict.of(False, fail) == Verdict("failed", fail)
    lost = "unreliable: the simulated servers lost 30% of their clock"
    assert Verdict.of(False, lost).status == "unjudged" and not Verdict.of(False, lost).judged
    assert Verdict.of(None, None).passed  # no SLO: nothing failed


def test_an_unjudged_verdict_is_stored_so_that_it_reads_back_unjudged() -> None:
    v = Verdict.unjudged("the machine was too busy")
    assert v.text.startswith("unreliable: ") and Verdict.of(False, v.text) == v
    assert Verdict.unjudged(v.text) == v  # not prefixed twice
