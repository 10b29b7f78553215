"""Consistency estimators on synthetic token ids and top-k logprobs with answers known in closed form."""

from __future__ import annotations

import math

import pytest

from orchestrator.consistency import estimators as est
from orchestrator.consistency.client import Generation
from orchestrator.consistency.compare import Side, compare
from orchestrator.errors import OrchError


def lp(probs: dict[int, float]) -> dict[int, float]:
    return {t: math.log(p) for t, p in probs.items()}


def test_first_divergence_and_exact_match() -> None:
    assert est.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert est.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert est.first_divergence([1, 2], [1, 2, 3]) == 2  # the shorter one stopped early
    assert est.exact_match_rate([([1], [1]), ([1, 2], [1, 3]), ([], []), ([4], [5])]) == 0.5
    assert est.exact_match_rate([]) == 1.0


def test_identical_distributions_have_zero_kl_and_tv() -> None:
    p = lp({1: 0.5, 2: 0.3, 3: 0.1})
    assert est.kl_divergence(p, p) == pytest.approx(0.0, abs=1e-12)
    assert est.total_variation(p, p) == pytest.approx(0.0, abs=1e-12)


def test_full_support_matches_the_closed_form() -> None:
    # top-k covers all the mass: the tail bucket is empty and the estimate is the exact KL/TV
    p, q = {1: 0.5, 2: 0.5}, {1: 0.9, 2: 0.1}
    kl = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert est.kl_divergence(lp(p), lp(q)) == pytest.approx(kl, rel=1e-6)
    assert est.total_variation(lp(p), lp(q)) == pytest.approx(0.4, rel=1e-6)


def test_tail_mass_is_one_bucket() -> None:
    # listed: token 1; tail: P 0.4, Q 0.2 -> buckets (0.6, 0.4) vs (0.8, 0.2)
    p, q = lp({1: 0.6}), lp({1: 0.8})
    kl = 0.6 * math.log(0.6 / 0.8) + 0.4 * math.log(0.4 / 0.2)
    assert est.kl_divergence(p, q) == pytest.approx(kl, rel=1e-6)
    assert est.total_variation(p, q) == pytest.approx(0.2, rel=1e-6)


def test_tokens_listed_by_one_side_only_join_the_tail() -> None:
    # token 2 only in P's list, token 3 only in Q's: shared bucket {1}, tails 0.5 and 0.5: no difference
    p, q = lp({1: 0.5, 2: 0.3}), lp({1: 0.5, 3: 0.3})
    assert est.kl_divergence(p, q) == pytest.approx(0.0, abs=1e-9)
    # coarse-graining is a lower bound of the true TV (0.3 here)
    assert est.total_variation(p, q) <= 0.3


def test_argmax_agreement_and_margin() -> None:
    a = [lp({1: 0.6, 2: 0.4}), lp({3: 0.5, 4: 0.5}), lp({5: 0.9})]
    b = [lp({1: 0.7, 2: 0.3}), lp({4: 0.6, 3: 0.4}), lp({5: 0.8})]
    assert est.argmax_agreement(a, b) == (2, 3)
    assert est.argmax_agreement(a, b, upto=1) == (1, 1)
    assert est.argmax(lp({3: 0.5, 4: 0.5})) == 3  # ties: the smaller id on both sides
    assert est.top2_margin(a[0]) == pytest.approx(math.log(0.6 / 0.4))
    assert est.top2_margin(a[2]) is None


def test_summary_and_histogram() -> None:
    s = est.summarize([1.0, 2.0, 3.0, 4.0])
    assert (s.n, s.mean, s.p50, s.max) == (4, 2.5, 2.5, 4.0)
    assert est.summarize([]).mean is None
    hist = est.divergence_histogram([0, 5, None, 15, 31], max_tokens=32, bins=4)
    assert [h["count"] for h in hist] == [2, 1, 0, 1]
    assert hist[0] == {"from": 0, "to": 8, "count": 2}


def _gen(prompt: tuple[int, ...], ids: tuple[int, ...], topk: list[dict[int, float]]) -> Generation:
    return Generation(prompt, ids, tuple(topk))


def test_compare_two_sides_known_answer() -> None:
    near_tie = lp({7: 0.51, 8: 0.49})
    sure = lp({1: 0.99})
    a = Side("tp1", "m", (_gen((0,), (1, 7, 1), [sure, near_tie, sure]), _gen((0, 2), (1, 1), [sure, sure])),
             scored=((sure, near_tie, sure), (sure, sure)))  # fmt: skip
    flipped = lp({8: 0.52, 7: 0.48})
    b = Side("tp2", "m", (_gen((0,), (1, 8, 1), [sure, flipped, sure]), _gen((0, 2), (1, 1), [sure, sure])),
             scored=((sure, flipped, sure), (sure, sure)))  # fmt: skip
    r = compare(a, b, max_tokens=3, top_k=2)
    assert r.exact_match_rate == 0.5 and r.divergence_rate == 0.5
    assert r.prompts[0].first_divergence == 1 and r.prompts[1].first_divergence is None
    assert r.margin_at_divergence.max == pytest.approx(math.log(0.51 / 0.49))
    assert r.argmax_agreement_before_divergence == 1.0  # 1 position before the flip + 2 of the identical one
    assert r.argmax_agreement_teacher_forced == pytest.approx(4 / 5)
    kl_flip = 0.51 * math.log(0.51 / 0.48) + 0.49 * math.log(0.49 / 0.52)
    assert r.kl_per_token.n == 5 and r.kl_per_token.max == pytest.approx(kl_flip, rel=1e-6)
    assert r.tv_per_token.max == pytest.approx(0.03, rel=1e-6)
    assert "teacher-forced" in r.method and r.to_dict()["prompts"][0]["first_divergence"] == 1


def test_compare_without_prompt_logprobs_uses_generation_logprobs() -> None:
    p = lp({1: 0.9})
    a = Side("a", "m", (_gen((0,), (1, 1), [p, p]),))
    b = Side("b", "m", (_gen((0,), (1, 1), [p, p]),))
    r = compare(a, b, max_tokens=2, top_k=1)
    assert r.method.startswith("generation logprobs") and r.kl_per_token.max == pytest.approx(0.0, abs=1e-12)
    assert r.argmax_agreement_teacher_forced is None


def test_different_models_or_tokenizers_are_refused() -> None:
    g = _gen((0, 1), (2,), [lp({2: 0.9})])
    with pytest.raises(OrchError, match="different models"):
        compare(Side("a", "m1", (g,)), Side("b", "m2", (g,)), max_tokens=1, top_k=1)
    other = _gen((0, 1, 1), (2,), [lp({2: 0.9})])
    with pytest.raises(OrchError, match="tokenize prompt 0 differently"):
        compare(Side("a", "m", (g,)), Side("b", "m", (other,)), max_tokens=1, top_k=1)
