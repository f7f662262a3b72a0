"""The book's agreement rules (flkit.papers.claims) on their boundaries: exactly two standard errors, one- vs
two-sided, zero spread, a stated threshold, too few seeds. The values are chosen so that the arithmetic is
exact in floating point: [0, 0, 0, 4] has mean 1, sd 2 and standard error 1, so two standard errors are 2."""
from __future__ import annotations

import math

import numpy as np
import pytest

from flkit.papers import claims

SE1 = [0.0, 0.0, 0.0, 4.0]          # mean 1, se 1 (2 se = 2)
EPS = 1e-9


def shifted(d):
    return [x + d for x in SE1]


def test_se():
    assert claims.se(SE1) == 1.0
    assert claims.se([3.0]) == 0.0
    assert math.isnan(claims.se([]))
    assert claims.se([0.0, 0.0, 0.0, 4.0, math.nan]) == 1.0       # missing seeds are dropped
    assert claims.se([2.0, 2.0, 2.0]) == 0.0


# ---------------------------------------------------------------------------------------------------------
# agree: |ours - document| <= max(2 combined se, threshold)


@pytest.mark.parametrize("reference, verdict", [
    (3.0, "agrees"), (-1.0, "agrees"),                 # exactly two standard errors away: agrees
    (3.0 + EPS, "differs"), (-1.0 - EPS, "differs"),   # just beyond
    (1.0, "agrees"),
])
def test_agree_at_exactly_two_standard_errors(reference, verdict):
    c = claims.agree("x", SE1, reference)
    assert c.verdict == verdict
    assert c.margin == 2.0 and c.ours == 1.0 and c.spread == 1.0 and c.reference == reference
    assert c.rule.startswith("|ours - document|")


def test_agree_combines_both_standard_errors():
    c = claims.agree("x", SE1, 1.0 + 2 * math.sqrt(2), ref_sd=2.0, ref_n=4)      # se_doc = 1
    assert c.margin == pytest.approx(2 * math.sqrt(2))
    assert claims.agree("x", SE1, 1.0 + 2.8, ref_sd=2.0, ref_n=4).verdict == "agrees"
    assert claims.agree("x", SE1, 1.0 + 2.9, ref_sd=2.0, ref_n=4).verdict == "differs"
    assert claims.agree("x", SE1, 1.0 + 2.9).verdict == "differs"                   # no document spread: 2.0
    # the default number of document seeds is 5
    assert claims.agree("x", SE1, 1.0, ref_sd=math.sqrt(5)).margin == pytest.approx(2 * math.sqrt(2))


def test_agree_zero_spread_uses_the_threshold():
    assert claims.agree("x", [5.0], 2.0, threshold=3.0).verdict == "agrees"          # exactly on the threshold
    assert claims.agree("x", [5.0], 2.0, threshold=3.0 - EPS).verdict == "differs"
    assert claims.agree("x", [5.0, 5.0, 5.0], 5.0).verdict == "agrees"              # zero spread, equal
    assert claims.agree("x", [5.0, 5.0, 5.0], 5.0 + EPS).verdict == "differs"       # zero spread, no threshold
    c = claims.agree("x", [5.0], 2.0, threshold=3.0)
    assert c.margin == 3.0 and c.spread == 0.0
    assert claims.agree("x", SE1, 3.5, threshold=2.5).verdict == "agrees"           # threshold beats 2 se
    assert claims.agree("x", SE1, 3.5, threshold=1.5).verdict == "differs"          # 2 se beats threshold


def test_agree_without_a_number_is_not_testable():
    assert claims.agree("x", [math.nan, math.nan], 1.0).verdict == "not testable at this scale"
    assert claims.agree("x", [math.nan, 1.0, 3.0], 2.0).ours == 2.0


@pytest.mark.parametrize("ours, side, verdict", [
    ([0.0] * 3, "upper", "agrees"),          # far below an upper bound: agrees, however far
    ([0.0] * 3, "two-sided", "differs"),
    ([0.0] * 3, "lower", "differs"),
    ([20.0] * 3, "lower", "agrees"),         # far above a lower bound
    ([20.0] * 3, "upper", "differs"),
    ([20.0] * 3, "two-sided", "differs"),
])
def test_agree_one_sided(ours, side, verdict):
    c = claims.agree("x", ours, 10.0, side=side)
    assert c.verdict == verdict
    assert ("one-sided" in c.rule) == (side != "two-sided")


def test_agree_one_sided_at_exactly_two_standard_errors():
    assert claims.agree("x", SE1, -1.0, side="upper").verdict == "agrees"            # ours 2 se above
    assert claims.agree("x", SE1, -1.0 - EPS, side="upper").verdict == "differs"
    assert claims.agree("x", SE1, 3.0, side="lower").verdict == "agrees"             # ours 2 se below
    assert claims.agree("x", SE1, 3.0 + EPS, side="lower").verdict == "differs"
    assert claims.agree("x", SE1, 3.0 + EPS, side="upper").verdict == "agrees"
    assert claims.agree("x", SE1, -1.0 - EPS, side="lower").verdict == "agrees"
    with pytest.raises(ValueError, match="side must be one of"):
        claims.agree("x", SE1, 1.0, side="greater")


# ---------------------------------------------------------------------------------------------------------
# bound: a single measured number against a bound the document states one way (an O(.) rate)


def test_bound_is_one_sided():
    # n^0.76 under O(n): an upper bound is not exceeded
    assert claims.bound("x", 0.76, 1.0, tol=0.15).verdict == "agrees"
    assert claims.bound("x", 0.76, 1.0, tol=0.15, side="two-sided").verdict == "differs"
    assert claims.bound("x", 0.76, 1.0, tol=0.15, side="lower").verdict == "differs"
    assert claims.bound("x", 1.25, 1.0, tol=0.25).verdict == "agrees"                # exactly on it
    assert claims.bound("x", 1.25 + EPS, 1.0, tol=0.25).verdict == "differs"
    assert claims.bound("x", 0.75, 1.0, tol=0.25, side="lower").verdict == "agrees"
    assert claims.bound("x", 0.75 - EPS, 1.0, tol=0.25, side="lower").verdict == "differs"
    assert claims.bound("x", 1.25, 1.0, tol=0.25, side="two-sided").verdict == "agrees"
    assert claims.bound("x", 0.75, 1.0, tol=0.25, side="two-sided").verdict == "agrees"
    assert claims.bound("x", 1.0, 1.0).verdict == "agrees"                           # zero tolerance
    assert claims.bound("x", 1.0 + EPS, 1.0).verdict == "differs"
    assert claims.bound("x", math.nan, 1.0).verdict == "not testable at this scale"
    assert claims.bound("x", 1.0, math.nan).verdict == "not testable at this scale"
    c = claims.bound("x", 0.76, 1.0, tol=0.15)
    assert (c.ours, c.reference, c.margin) == (0.76, 1.0, 0.15) and "upper bound" in c.rule
    assert "lower bound" in claims.bound("x", 1.0, 1.0, side="lower").rule
    with pytest.raises(ValueError, match="side must be one of"):
        claims.bound("x", 1.0, 1.0, side="up")


def test_mc_bound_one_sided_with_a_stated_margin():
    # a Monte Carlo mean 0.3 above an upper bound, s.e. 0.1: within 3 s.e., not within 2
    assert claims.mc_bound("x", 1.3, 1.0, 0.1).verdict == "agrees"
    assert claims.mc_bound("x", 1.3, 1.0, 0.1, z=2.0).verdict == "differs"
    assert claims.mc_bound("x", 1.0 + 0.3 + 1e-9, 1.0, 0.1).verdict == "differs"
    assert claims.mc_bound("x", -50.0, 1.0, 0.1).verdict == "agrees"            # far below an upper bound
    assert claims.mc_bound("x", -50.0, 1.0, 0.1, side="lower").verdict == "differs"
    assert claims.mc_bound("x", 0.75, 1.0, 0.1, side="lower").verdict == "agrees"
    assert claims.mc_bound("x", math.nan, 1.0, 0.1).verdict == "not testable at this scale"
    c = claims.mc_bound("x", 1.2, 1.0, 0.1, draws=400)
    assert (c.ours, c.reference, c.spread) == (1.2, 1.0, 0.1) and abs(c.margin - 0.3) < 1e-15
    assert "3 s.e. over 400 draws" in c.rule and "upper bound" in c.rule
    with pytest.raises(ValueError, match="one-sided"):
        claims.mc_bound("x", 1.0, 1.0, 0.1, side="two-sided")


# ---------------------------------------------------------------------------------------------------------
# compare: "a >= b" on paired per-seed values


def test_compare_at_exactly_two_standard_errors():
    b = [0.0] * 4
    # mean paired difference exactly 2 se: not confirmed (strictly above is needed)
    c = claims.compare("a > b", [1.0, 1.0, 1.0, 5.0], b)
    assert c.ours == 2.0 and c.margin == 2.0 and c.verdict == "not testable at this scale"
    assert claims.compare("a > b", [1.01, 1.01, 1.01, 5.01], b).verdict == "confirmed"
    # exactly -2 se: not contradicted
    assert claims.compare("a > b", [-1.0, -1.0, -1.0, -5.0], b).verdict == "not testable at this scale"
    assert claims.compare("a > b", [-1.01, -1.01, -1.01, -5.01], b).verdict == "contradicted"
    assert claims.compare("a > b", SE1, b).verdict == "not testable at this scale"     # inside noise
    # the pairing matters: the same values unpaired would not tell
    assert claims.compare("a > b", [3.0, 4.0, 5.0], [2.0, 3.0, 4.0]).verdict == "confirmed"


def test_compare_zero_spread_and_too_few_seeds():
    assert claims.compare("x", [2.0, 2.0, 2.0], [1.0, 1.0, 1.0]).verdict == "confirmed"
    assert claims.compare("x", [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]).verdict == "contradicted"
    assert claims.compare("x", [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]).verdict == "not testable at this scale"
    one = claims.compare("x", [5.0], [1.0])
    assert one.verdict == "not testable at this scale" and one.rule == "needs at least two seeds" and one.ours == 4.0
    assert claims.compare("x", [5.0, math.nan], [1.0, 2.0]).verdict == "not testable at this scale"
    assert math.isnan(claims.compare("x", [], []).ours)


def test_compare_with_a_tie_threshold():
    b = [0.0] * 4
    assert claims.compare("x", [1.0, 1.0, 1.0, 5.0], b, threshold=3.0).verdict == "confirmed"      # a tie
    assert claims.compare("x", [-2.0, -2.0, -2.0, -6.0], b, threshold=3.0).verdict == "confirmed"  # -3 = -threshold
    c = claims.compare("x", [-2.01, -2.01, -2.01, -6.01], b, threshold=3.0)
    assert c.verdict == "contradicted" and c.margin == 3.0 and "tie allowed within 3" in c.rule
    assert claims.compare("x", [-1.01, -1.01, -1.01, -5.01], b, threshold=1.0).verdict == "contradicted"
    assert "tie" not in claims.compare("x", SE1, b).rule


# ---------------------------------------------------------------------------------------------------------
# close: "a is close to b" on paired per-seed values


def test_close_boundaries():
    b = [0.0] * 4
    d2 = [1.0, 1.0, 1.0, 5.0]                     # mean 2, 2 se = 2
    assert claims.close("x", d2, b, threshold=4.0).verdict == "confirmed"              # |2| + 2 == 4
    assert claims.close("x", d2, b, threshold=4.0 - EPS).verdict == "not testable at this scale"
    assert claims.close("x", [-x for x in d2], b, threshold=4.0).verdict == "confirmed"
    d4 = [3.0, 3.0, 3.0, 7.0]                     # mean 4, 2 se = 2
    assert claims.close("x", d4, b, threshold=2.0).verdict == "not testable at this scale"   # 4 - 2 == 2
    assert claims.close("x", d4, b, threshold=2.0 - EPS).verdict == "contradicted"
    assert claims.close("x", [-x for x in d4], b, threshold=2.0 - EPS).verdict == "contradicted"
    c = claims.close("x", d2, b, threshold=4.0)
    assert (c.ours, c.margin, c.spread) == (2.0, 2.0, 1.0)


def test_close_zero_spread_and_too_few_seeds():
    assert claims.close("x", [1.0, 1.0], [1.0, 1.0], threshold=0.0).verdict == "confirmed"
    assert claims.close("x", [1.5, 1.5], [1.0, 1.0], threshold=0.5).verdict == "confirmed"
    assert claims.close("x", [1.5, 1.5], [1.0, 1.0], threshold=0.5 - EPS).verdict == "contradicted"
    one = claims.close("x", [1.0], [1.0], threshold=1.0)
    assert one.verdict == "not testable at this scale" and one.rule == "needs at least two seeds"


# ---------------------------------------------------------------------------------------------------------
# holds, Check, summary


def test_holds_and_check_properties():
    ok = claims.holds("x", True, "exact")
    bad = claims.holds("x", np.bool_(False), "exact", ours=1.0, reference=2.0)
    assert ok.verdict == "agrees" and ok.ok and not ok.failed
    assert bad.verdict == "differs" and bad.failed and not bad.ok and (bad.ours, bad.reference) == (1.0, 2.0)
    assert claims.Check("x", "confirmed", 1, 0, 0, "r").ok
    assert claims.Check("x", "contradicted", 1, 0, 0, "r").failed
    nt = claims.Check("x", "not testable at this scale", 1, 0, 0, "r")
    assert not nt.ok and not nt.failed
    assert set(claims.CHECK_VERDICTS) == {"agrees", "confirmed", "differs", "contradicted",
                                          "not testable at this scale"}


def test_summary():
    cs = [claims.holds("a", True, "r"), claims.holds("b", False, "r"),
          claims.compare("c", [1.0, 1.0], [1.0, 1.0])]
    assert claims.summary(cs) == "1 of 3 checks agree or are confirmed; 1 not testable at this scale"
    assert claims.summary(cs[:2]) == "1 of 2 checks agree or are confirmed"


# ------------------------------------------------------------------------- horizon, not_rising, correlated
def test_horizon_makes_a_claim_about_an_unrun_end_not_testable():
    c = claims.agree("cell", [70.0, 71.0, 72.0], 86.0, ref_sd=0.5)
    assert c.verdict == "differs"
    short = claims.horizon(c, 250, 6000)
    assert short.verdict == "not testable at this scale"
    assert (short.ours, short.reference, short.margin) == (c.ours, c.reference, c.margin)   # numbers kept
    assert "round 250 of the document's 6000" in short.rule
    assert claims.horizon(c, 6000, 6000) == c and claims.horizon(c, None, 6000) == c        # the full horizon
    assert claims.horizon(c, 5999, 6000).verdict == "not testable at this scale"
    ok = claims.agree("cell", [86.0, 86.0], 86.0)
    assert claims.horizon(ok, 250, 6000).verdict == "not testable at this scale"           # agreement too


@pytest.mark.parametrize("slopes, expected", [
    ([10.0, 10.0, 10.0], "contradicted"),                       # still rising, zero spread
    ([-1.0, -1.0, -1.0], "confirmed"),                          # falling beyond the noise
    ([9.0, -3.0, 30.0, 1.0, 9.0], "not testable at this scale"),  # inside 2 se of zero: not "levelled off"
    ([0.0, 0.0, 0.0], "not testable at this scale"),            # exactly flat: no evidence either way
    ([1e-13, -1e-13, 2e-13], "not testable at this scale"),     # float noise under the floor
    ([5.0], "not testable at this scale"),                      # one seed
])
def test_not_rising(slopes, expected):
    c = claims.not_rising("curve", slopes, floor=1e-6)
    assert c.verdict == expected
    if len(slopes) > 1:
        assert c.ours == pytest.approx(np.mean(np.where(np.abs(slopes) <= 1e-6, 0.0, slopes)))


def test_not_rising_at_exactly_two_standard_errors_is_not_testable():
    v = np.array([1.0, 3.0])          # mean 2, sd sqrt(2), se 1: mean == 2 se
    assert claims.se(v) == pytest.approx(1.0)
    assert claims.not_rising("curve", v).verdict == "not testable at this scale"
    assert claims.not_rising("curve", v + 1e-9).verdict == "contradicted"


def test_correlated_needs_significance_in_every_seed():
    rng = np.random.default_rng(0)
    x = np.arange(50.0)
    strong = [x, x]
    assert claims.correlated("r", strong, [x + rng.normal(0, 5, 50), x + rng.normal(0, 5, 50)]).verdict == "confirmed"
    assert claims.correlated("r", strong, [-x, -x]).verdict == "contradicted"
    # positive in both seeds but not significant in one: not testable (a mean rho > 0 is not enough)
    noise = rng.normal(0, 1, 50)
    weak = noise + 0.001 * x
    from scipy import stats
    assert stats.spearmanr(x, weak, alternative="greater").pvalue > 0.05
    c = claims.correlated("r", strong, [x, weak])
    assert c.verdict == "not testable at this scale" and c.margin > 0.05
    assert "p < 0.05 in every seed" in c.rule
    assert claims.correlated("r", [[1.0, 2.0]], [[1.0, 2.0]]).verdict == "not testable at this scale"  # < 3 pairs


def test_mc_bound_exactly_on_the_margin_and_missing_numbers():
    # mean 0.5 above the bound, s.e. 0.125, z = 4: exactly z s.e. (exact in binary) agrees, just beyond differs
    assert claims.mc_bound("x", 1.5, 1.0, 0.125, z=4.0).verdict == "agrees"
    assert claims.mc_bound("x", 1.5 + EPS, 1.0, 0.125, z=4.0).verdict == "differs"
    assert claims.mc_bound("x", 0.5, 1.0, 0.125, z=4.0, side="lower").verdict == "agrees"
    assert claims.mc_bound("x", 0.5 - EPS, 1.0, 0.125, z=4.0, side="lower").verdict == "differs"
    # without a standard error (or a bound, or with a negative one) nothing can be said
    nt = "not testable at this scale"
    assert claims.mc_bound("x", 0.5, 1.0, math.nan).verdict == nt          # far below, but no s.e.
    assert claims.mc_bound("x", 1.5, 1.0, math.nan).verdict == nt
    assert claims.mc_bound("x", 0.5, math.nan, 0.1).verdict == nt
    assert claims.mc_bound("x", 0.5, 1.0, -0.1).verdict == nt
    assert math.isnan(claims.mc_bound("x", 0.5, 1.0, math.nan).margin)


@pytest.mark.parametrize("slopes, expected", [
    ([0.5, 0.5, 0.5], "not testable at this scale"),          # exactly at the floor: flat
    ([-0.5, -0.5, -0.5], "not testable at this scale"),
    ([0.5 + 2.0 ** -20] * 3, "contradicted"),                 # just above the floor, zero spread: still rising
    ([-0.5 - 2.0 ** -20] * 3, "confirmed"),
])
def test_not_rising_at_the_floor(slopes, expected):
    c = claims.not_rising("curve", slopes, floor=0.5)
    assert c.verdict == expected
    assert c.ours == (0.0 if expected.startswith("not") else slopes[0])


def test_not_rising_identical_tiny_slopes_are_flat():
    # an exactly flat curve whose fitted slopes are the same float noise in every seed: zero spread, so
    # without the floor the noise alone would read as "still rising"
    assert claims.not_rising("curve", [1e-9, 1e-9, 1e-9], floor=1e-6).verdict == "not testable at this scale"
    assert claims.not_rising("curve", [1e-9, 1e-9, 1e-9]).verdict == "contradicted"     # floor 0: taken at its word


X5, Y5 = np.arange(1.0, 6.0), np.array([1.0, 2.0, 3.0, 5.0, 4.0])     # Spearman's rho 0.9 on 5 pairs


def test_correlated_one_sided_p_and_its_level():
    from scipy import stats
    c = claims.correlated("r", [X5], [Y5])
    # one-sided p of the t approximation: t = rho sqrt((n - 2) / (1 - rho^2)) on n - 2 = 3 degrees of freedom
    p = stats.t.sf(0.9 * math.sqrt(3 / (1 - 0.81)), 3)
    assert c.verdict == "confirmed" and c.ours == pytest.approx(0.9) and c.margin == pytest.approx(p, rel=1e-9)
    assert 0.018 < p < 0.019                                               # two-sided: 0.037
    assert claims.correlated("r", [X5], [Y5], level=0.03).verdict == "confirmed"        # one-sided p < 0.03
    assert claims.correlated("r", [X5], [Y5], level=0.01).verdict == "not testable at this scale"
    # p exactly at the level: not significant (p < level is needed); just above it: confirmed
    assert claims.correlated("r", [X5], [Y5], level=c.margin).verdict == "not testable at this scale"
    assert claims.correlated("r", [X5], [Y5], level=np.nextafter(c.margin, 1.0)).verdict == "confirmed"
    assert claims.correlated("r", [X5], [-Y5], level=0.03).verdict == "contradicted"
    assert claims.correlated("r", [X5], [-Y5], level=0.01).verdict == "not testable at this scale"


def test_correlated_is_a_rank_correlation():
    # y = exp(x) is monotone in x: Spearman's rho is 1 (p about 1e-24) where Pearson's r is 0.89 (one-sided
    # p 0.023): at level 0.01 the rank test confirms, a linear one would not
    c = claims.correlated("r", [X5], [np.exp(X5)], level=0.01)
    assert c.verdict == "confirmed" and c.ours == pytest.approx(1.0) and c.margin < 1e-10


def test_correlated_seeds_of_opposite_signs_are_not_testable():
    # one seed significantly positive, the other significantly negative: neither confirmed nor contradicted
    c = claims.correlated("r", [X5, X5], [Y5, -Y5])
    assert c.verdict == "not testable at this scale" and c.ours == pytest.approx(0.0, abs=1e-12)
    assert claims.correlated("r", [X5, X5], [-Y5, Y5]).verdict == "not testable at this scale"
