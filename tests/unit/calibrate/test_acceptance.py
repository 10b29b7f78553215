"""Measured acceptance: fitted per method from stored point records, and carried by a profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.calibrate.acceptance import fit_acceptance
from orchestrator.catalog.profiles import load_profile, write_profile
from orchestrator.errors import SpecError
from orchestrator.plan.speculative import SpeculativeSettings


def _vllm_record(steps: float, hits: list[float]) -> dict[str, object]:
    accepted = sum(hits)
    return {"method": "ngram", "k": 4, "assumed": [0.5] * 4, "assumed_tokens_per_step": 1.9375,
            "measured": {"decode_steps": steps, "drafts": steps, "draft_tokens": 4 * steps,
                         "accepted_tokens": accepted, "per_position": [],
                         "tokens_per_step": 1 + accepted / steps, "accepted_at": hits}}


def test_vllm_counts_add_up_over_points_before_converting() -> None:
    fits = fit_acceptance([_vllm_record(100, [80, 60, 30, 15]), _vllm_record(300, [240, 120, 60, 15])])
    fit = fits["ngram"]
    assert fit.form == "per position" and fit.points == 2
    assert fit.per_position == pytest.approx((320 / 400, 180 / 320, 90 / 180, 30 / 90))
    assert fit.tokens_per_step == pytest.approx(1 + 620 / 400)
    settings = SpeculativeSettings("ngram", 4, fit.per_position)
    assert settings.tokens_per_step == pytest.approx(fit.tokens_per_step)


def test_sglang_accept_length_fits_one_rate() -> None:
    records = [{"method": "eagle3", "k": 3, "assumed": [0.7] * 3, "assumed_tokens_per_step": 2.53,
                "measured": {"tokens_per_step": t}} for t in (2.0, 2.4)]
    fit = fit_acceptance(records)["eagle3"]
    assert fit.form == "tokens per step" and len(fit.per_position) == 3
    assert SpeculativeSettings("eagle3", 3, fit.per_position).tokens_per_step == pytest.approx(2.2)


def test_points_without_a_measurement_fit_nothing() -> None:
    assert fit_acceptance([{"method": "ngram", "k": 4, "assumed": [0.5] * 4}]) == {}


def test_a_profile_carries_acceptance_and_refuses_nonsense(tmp_path: Path) -> None:
    good = tmp_path / "p.yaml"
    write_profile(good, gpu="h100-sxm", engine="vllm", constants={}, source="t",
                  extra={"acceptance": {"ngram": [0.3, 0.9]}})
    assert load_profile(str(good)).acceptance == {"ngram": (0.3, 0.9)}
    bad = tmp_path / "bad.yaml"
    write_profile(bad, gpu="h100-sxm", engine="vllm", constants={}, source="t",
                  extra={"acceptance": {"ngram": [1.5]}})
    with pytest.raises(SpecError, match="acceptance: a mapping of method to rates per position"):
        load_profile(str(bad))
