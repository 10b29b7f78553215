import math

import pytest

from orchestrator.selection import LayoutOutcome, PointOutcome, select


def _p(label: str, rate: float, passed: bool, goodput_per_gpu: float, ttft: float = 100.0) -> PointOutcome:
    return PointOutcome(
        label,
        rate,
        passed,
        "" if passed else "SLO not met: ttft",
        goodput_per_gpu,
        goodput_per_gpu * 200,
        ttft,
        40.0,
    )


def test_winner_is_best_goodput_per_gpu_at_highest_passing_rate() -> None:
    a = LayoutOutcome("tp8", 8, "measured", None, (_p("r2", 2, True, 0.25), _p("r8", 8, True, 0.9)))
    b = LayoutOutcome("tp4x2", 8, "measured", None, (_p("r2", 2, True, 0.25), _p("r8", 8, False, 0.3)))
    c = LayoutOutcome("tp2x4", 8, "rejected", "weights do not fit", ())
    d = LayoutOutcome("pp8", 8, "measured", None, (_p("r2", 2, False, 0.1),))
    sel = select([a, b, c, d])
    assert sel.winner == "tp8" and sel.tie_with == ()
    reasons = {v.layout: v.reason for v in sel.verdicts}
    assert "0.25" in reasons["tp4x2"] and "< winner's 0.9" in reasons["tp4x2"]
    assert reasons["tp2x4"].startswith("rejected by the planner: weights")
    assert "no load point met the SLO" in reasons["pp8"]


def test_tie_within_noise_goes_to_fewer_gpus_then_lower_ttft() -> None:
    big = LayoutOutcome("tp8", 8, "measured", None, (_p("r4", 4, True, 0.50, ttft=90),))
    small = LayoutOutcome("tp4", 4, "measured", None, (_p("r4", 4, True, 0.49, ttft=150),))
    sel = select([big, small])
    assert sel.winner == "tp4" and sel.tie_with == ("tp8",)
    far = LayoutOutcome("tp4", 4, "measured", None, (_p("r4", 4, True, 0.30),))
    assert select([big, far]).winner == "tp8"


def test_nobody_passes_is_an_answer() -> None:
    sel = select([LayoutOutcome("tp8", 8, "failed", "engine died: CUDA OOM", ())])
    assert sel.winner is None and "engine died" in sel.verdicts[0].reason


def _iv(label: str, rate: float, passed: bool, g: float, lo: float, hi: float, margin: str) -> PointOutcome:
    return PointOutcome(label, rate, passed, "" if passed else "SLO not met: itl_p99_ms 120 > 100", g,
                        g * 200, 100.0, 40.0, {"goodput_per_gpu": [lo, hi]}, margin)


def test_layouts_tie_when_their_intervals_overlap_not_at_a_fixed_band() -> None:
    # 20% apart but noisy: the intervals overlap, so it is a tie (a fixed 5% band would call a winner)
    a = LayoutOutcome("tp8", 8, "measured", None, (_iv("r4", 4, True, 0.60, 0.45, 0.75, "holds"),))
    b = LayoutOutcome("tp4", 4, "measured", None, (_iv("r4", 4, True, 0.50, 0.40, 0.62, "holds"),))
    sel = select([a, b])
    assert sel.winner == "tp4" and sel.tie_with == ("tp8",)
    reasons = {v.layout: v.reason for v in sel.verdicts}
    assert "intervals overlap" in reasons["tp4"] and "decided by fewer GPUs (4 against 8)" in reasons["tp4"]
    assert reasons["tp8"].endswith("tp4 uses fewer GPUs (4 against 8)")
    # 2% apart but precise: the intervals are apart, so the better one wins outright
    c = LayoutOutcome("tp8", 8, "measured", None, (_iv("r4", 4, True, 0.510, 0.508, 0.512, "holds"),))
    d = LayoutOutcome("tp4", 4, "measured", None, (_iv("r4", 4, True, 0.500, 0.498, 0.502, "holds"),))
    sel2 = select([c, d])
    assert sel2.winner == "tp8" and sel2.tie_with == ()
    loser = {v.layout: v for v in sel2.verdicts}["tp4"]
    assert "intervals apart" in loser.reason and loser.score_interval == (0.498, 0.502)


def test_a_searched_capacity_widens_the_score_by_its_own_uncertainty() -> None:
    pts = (
        _iv("r2", 2.0, True, 0.20, 0.19, 0.21, "holds"),
        _iv("r3", 3.0, True, 0.30, 0.29, 0.31, "close"),  # the capacity, but close to the SLO
        _iv("r3.2", 3.2, False, 0.1, 0.1, 0.1, "close"),
        _iv("r4", 4.0, False, 0.1, 0.1, 0.1, "breaks"),
    )
    sel = select([LayoutOutcome("tp8", 8, "measured", None, pts, searched=True)])
    v = sel.verdicts[0]
    assert v.best_rate == 3.0 and v.capacity_interval == (2.0, 4.0)
    assert v.score_interval is not None
    # relative half-widths in quadrature: the point's (1/30) and the capacity's (1/3 each way)
    assert v.score_interval[0] == pytest.approx(0.30 * (1 - math.hypot(1 / 30, 1 / 3)))
    assert v.score_interval[1] == pytest.approx(0.30 * (1 + math.hypot(1 / 30, 1 / 3)))


def test_an_unjudged_point_makes_the_decision_not_sound() -> None:
    bad = PointOutcome("r4", 4, False, "unreliable: the simulated servers lost 20% of their clock", 0.0, 0.0,
                       None, None)
    a = LayoutOutcome("tp8", 8, "measured", None, (_p("r2", 2, True, 0.2), bad))
    sel = select([a])
    assert sel.winner == "tp8" and not sel.sound and sel.unjudged == ("tp8 r4",)
    assert select([LayoutOutcome("tp8", 8, "measured", None, (_p("r2", 2, True, 0.2),))]).sound


def _n(label: str, g: float, lo: float, hi: float, requests: int, ttft: float = 100.0,
       ttft_iv: tuple[float, float] | None = None) -> PointOutcome:
    iv: dict[str, object] = {"goodput_per_gpu": [lo, hi], "requests": requests}
    if ttft_iv is not None:
        iv["ttft_p99_ms"] = list(ttft_iv)
    return PointOutcome(label, 4.0, True, "", g, g * 200, ttft, 40.0, iv, "holds")


def test_too_few_requests_are_not_enough_to_separate() -> None:
    """Issue 29: 17 requests each, all passing, were declared "intervals apart"."""
    a = LayoutOutcome("tp8", 8, "measured", None, (_n("r4", 0.20, 0.199, 0.201, 17),))
    b = LayoutOutcome("tp4x2", 8, "measured", None, (_n("r4", 0.13, 0.129, 0.131, 17),))
    sel = select([a, b])
    reasons = {v.layout: v.reason for v in sel.verdicts}
    assert sel.tie_with == ("tp4x2",) and "intervals apart" not in " ".join(reasons.values())
    too_few = "not enough requests to separate: 17 and 17 in the measurement window, 25 needed"
    assert too_few in reasons["tp4x2"]
    # the same intervals from enough requests are apart
    c = LayoutOutcome("tp8", 8, "measured", None, (_n("r4", 0.20, 0.199, 0.201, 80),))
    d = LayoutOutcome("tp4x2", 8, "measured", None, (_n("r4", 0.13, 0.129, 0.131, 80),))
    sel2 = select([c, d])
    assert sel2.tie_with == () and "intervals apart" in {v.layout: v.reason for v in sel2.verdicts}["tp4x2"]
    assert sel2.decided_by == "the best goodput_per_gpu, intervals apart from the next (tp4x2)"
    assert sel.decided_by.startswith("the higher point estimate, within noise")
    assert sel.to_dict()["decided_by"] == sel.decided_by
    assert "apart from every other layout" in {v.layout: v.reason for v in sel2.verdicts}["tp8"]


def test_a_tie_break_that_decides_nothing_is_not_given_as_the_reason() -> None:
    """Two 8-GPU layouts tied: never "broken by fewer GPUs"; the TTFT decides only beyond noise."""
    a = LayoutOutcome("tp8", 8, "measured", None, (_n("r4", 0.50, 0.40, 0.60, 80, 150, (140, 160)),))
    b = LayoutOutcome("tp4x2", 8, "measured", None, (_n("r4", 0.48, 0.38, 0.58, 80, 120, (110, 130)),))
    sel = select([a, b])
    reasons = {v.layout: v.reason for v in sel.verdicts}
    assert sel.winner == "tp4x2" and "fewer GPUs" not in " ".join(reasons.values())
    assert "decided by lower TTFT p99 (120.0 against 150.0 ms, beyond noise)" in reasons["tp4x2"]
    assert "tp4x2 has the lower TTFT p99" in reasons["tp8"]
    # TTFT intervals overlapping: the lower TTFT decides nothing; the objective's point estimate does,
    # said to be within noise; never "fewer GPUs"
    c = LayoutOutcome("tp8", 8, "measured", None, (_n("r4", 0.50, 0.40, 0.60, 80, 150, (110, 160)),))
    d = LayoutOutcome("tp4x2", 8, "measured", None, (_n("r4", 0.48, 0.38, 0.58, 80, 120, (100, 155)),))
    sel2 = select([c, d])
    why = {v.layout: v.reason for v in sel2.verdicts}
    assert sel2.winner == "tp8"
    assert "decided by the higher point estimate, within noise (nothing else separates them: 8 GPUs each; " \
        "TTFT p99 not apart)" in why["tp8"]
    assert "has the lower TTFT p99" not in why["tp4x2"] and "point estimate is higher" in why["tp4x2"]
    assert "fewer GPUs" not in " ".join(why.values())
    # equal TTFT: the higher point estimate, within noise
    e = LayoutOutcome("tp8", 8, "measured", None, (_n("r4", 0.50, 0.40, 0.60, 80, 150, (110, 160)),))
    f = LayoutOutcome("tp4x2", 8, "measured", None, (_n("r4", 0.48, 0.38, 0.58, 80, 150, (110, 160)),))
    sel3 = select([e, f])
    assert sel3.winner == "tp8"
    assert "decided by the higher point estimate, within noise (nothing else separates them: 8 GPUs each; " \
        "TTFT p99 not apart)" in {v.layout: v.reason for v in sel3.verdicts}["tp8"]


def test_a_ttft_lower_only_within_noise_never_beats_the_higher_objective() -> None:
    """llama70b-h200's sweep: tp2x4 scores 2.46 goodput per GPU, tp8 1.68, their intervals overlap; tp8's
    TTFT p99 is lower (638 against 790 ms) but its interval overlaps tp2x4's: the objective decides."""
    hi = LayoutOutcome("tp2x4", 8, "measured", None, (_n("r21", 2.456, 1.922, 2.959, 80, 790, (600, 900)),))
    lo = LayoutOutcome("tp8", 8, "measured", None, (_n("r14", 1.68, 1.383, 2.24, 80, 638, (560, 800)),))
    sel = select([lo, hi])
    assert sel.winner == "tp2x4" and sel.tie_with == ("tp8",)
    assert sel.decided_by.startswith("the higher point estimate, within noise")
    # the same TTFT beyond noise (intervals apart) still decides, as documented
    fast = LayoutOutcome("tp8", 8, "measured", None, (_n("r14", 1.68, 1.383, 2.24, 80, 500, (450, 550)),))
    sel2 = select([fast, hi])
    assert sel2.winner == "tp8" and "beyond noise" in sel2.decided_by


def _slo_iv(
    label: str, rate: float, passed: bool, g: float, itl: tuple[float, float], margin: str
) -> PointOutcome:
    iv = {"goodput_per_gpu": [g * 0.9, g * 1.1], "itl_p99_ms": list(itl), "slo": {"itl_p99_ms": 100.0},
          "requests": 200}
    return PointOutcome(label, rate, passed, "" if passed else "SLO not met: itl_p99_ms", g, g * 200, 100.0,
                        itl[0], iv, margin)


def test_the_capacity_interval_is_drawn_to_where_the_slo_intervals_reach_the_bound() -> None:
    """Between a sure pass at 2/s (ITL p99 upper end 80) and a close pass at 4/s (upper end 120) the upper
    end reaches 100 at 3/s; between the close pass and a sure fail at 8/s (lower end 140, from 90 at
    4/s) the lower end reaches 100 at 4.8/s. Not the sure loads 2 and 8: the search's coarse steps are
    not the measurement's uncertainty."""
    pts = (
        _slo_iv("r2", 2.0, True, 0.2, (60.0, 80.0), "holds"),
        _slo_iv("r4", 4.0, True, 0.4, (90.0, 120.0), "close"),
        _slo_iv("r8", 8.0, False, 0.1, (140.0, 170.0), "breaks"),
    )
    sel = select([LayoutOutcome("tp8", 8, "measured", None, pts, searched=True)])
    assert sel.verdicts[0].capacity_interval == (pytest.approx(3.0), pytest.approx(4.8))
    # runs stored before the bounds were kept with the intervals: the sure loads themselves
    old = tuple(PointOutcome(p.label, p.rate, p.passed, p.verdict, p.goodput_per_gpu,
                             p.output_tokens_per_s_per_gpu, p.ttft_p99_ms, p.itl_p99_ms,
                             {k: v for k, v in (p.intervals or {}).items() if k != "slo"}, p.slo_margin)
                for p in pts)
    assert select([LayoutOutcome("tp8", 8, "measured", None, old, searched=True)]).verdicts[0] \
        .capacity_interval == (2.0, 8.0)
