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
