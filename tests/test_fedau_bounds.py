"""FedAU's convergence statements on the noisy quadratic (flkit.papers.fedau.bounds): the closed forms against
hand computations and Monte Carlo, and variants with a wrong constant that the checks must flag."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from flkit.papers import claims
from flkit.papers.fedau import bounds as B


@pytest.fixture(scope="module")
def prob():
    return B.noisy_quadratic(6, 3, 0, sigma2=0.5)


# ------------------------------------------------------------------------------------- the problem's constants
def test_constants_are_exact(prob):
    g = np.random.default_rng(0)
    for x in g.normal(size=(5, prob.d)) * 10:
        gi = prob.A * x - prob.b                                  # grad F_n(x)
        dev = ((gi - gi.mean(0)) ** 2).sum(1).max()
        assert abs(dev - prob.delta2) <= 1e-9 * prob.delta2       # the same at every x: Assumption 3 exactly
    assert prob.L == prob.A.max() == 1.0
    np.testing.assert_allclose(prob.grad(prob.x_star), 0, atol=1e-12)
    assert prob.f(prob.x_star) == pytest.approx(prob.f_star)


def test_bad_problem_is_refused():
    with pytest.raises(ValueError, match="need A"):
        B.NoisyQuadratic(np.ones(3), np.ones((4, 2)), np.full(4, 0.5), 1.0)
    with pytest.raises(ValueError, match="sigma2"):
        B.NoisyQuadratic(np.ones(2), np.ones((4, 2)), np.full(4, 0.5), -1.0)


# ------------------------------------------------------------------------------------- one round
def test_expected_next_deterministic_case_by_hand():
    # p = 1, omega = 1, sigma = 0, I = 1: x_+ = x - gamma eta grad f(x), no randomness at all
    q = B.NoisyQuadratic(np.array([0.5, 1.0]), np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]), np.ones(3), 0.0)
    x = np.array([0.3, -0.7])
    got = B.expected_next(q, x, np.ones(3), gamma=0.2, eta=1.5, I=1)
    assert got == pytest.approx(float(q.f(x - 0.3 * q.grad(x))), abs=1e-14)


def test_expected_next_equals_monte_carlo(prob):
    x = np.array([0.5, -1.0, 2.0])
    for omega in (np.ones(prob.N), 1 / prob.p):
        kw = dict(gamma=0.05, eta=2.0, I=3)
        exact = B.expected_next(prob, x, omega, **kw)
        mc = B.monte_carlo_next(prob, x, omega, draws=40_000, seed=1, **kw)
        assert abs(mc.mean() - exact) <= 4 * mc.std(ddof=1) / math.sqrt(mc.size)


# ------------------------------------------------------------------------------------- Lemma B.3.3
def test_lemma_rhs_terms_by_hand(prob):
    x, I, gamma, eta = np.array([1.0, 0.0, -1.0]), 2, 0.01, 3.0
    r = B.lemma_rhs(prob, x, 1 / prob.p, gamma=gamma, eta=eta, I=I)
    assert r["weights"] == pytest.approx(0.0, abs=1e-15)          # omega = 1/p, phi = 1/N: p omega / N = phi
    S = (1 / prob.p).sum()
    bracket = 15 * I ** 2 * gamma ** 2 + 27 * gamma * eta * I / (8 * prob.N ** 2) * S - 0.25
    assert r["bracket"] == pytest.approx(bracket, rel=1e-12)
    assert r["drift"] == pytest.approx(2.5 * gamma ** 3 * eta * I ** 2 * (prob.sigma2 + 6 * I * prob.delta2), rel=1e-12)
    assert r["rhs"] == pytest.approx(r["f"] + r["weights"] + r["drift"] + r["variance"] + r["descent"], rel=1e-12)


def _deterministic_state():
    """Full participation, no noise, one client type, I = 1: the lemma's bound is within a factor of its left side."""
    A = np.array([1.0, 0.25])
    q = B.NoisyQuadratic(A, np.zeros((20, 2)), np.ones(20), 0.0)
    I, gamma = 1, 1e-4
    return q, np.array([3.0, 0.0]), np.ones(20), dict(gamma=gamma, eta=1 / (4 * I) / gamma, I=I)


def test_lemma_holds_and_a_wrong_constant_is_flagged():
    q, x, w, kw = _deterministic_state()
    assert B.lemma_conditions(q.L, kw["I"], kw["gamma"], kw["eta"])
    mc = B.monte_carlo_next(q, x, w, draws=50, seed=0, **kw)      # deterministic: every draw equal
    se = float(mc.std(ddof=1) / math.sqrt(mc.size))
    r = B.lemma_rhs(q, x, w, **kw)
    assert claims.mc_bound("lemma", mc.mean(), r["rhs"], se).verdict == "agrees"
    # the bracket with -1 in place of -1/4 (a descent four times larger) is below the true change
    g2 = float((q.grad(x) ** 2).sum())
    wrong = r["rhs"] - kw["gamma"] * kw["eta"] * kw["I"] * 0.75 * g2
    assert claims.mc_bound("wrong lemma", mc.mean(), wrong, se).verdict == "differs"


def test_lemma_checks_on_a_table(prob):
    I = 2
    g = 1 / (4 * math.sqrt(15) * prob.L * I)
    st = B.lemma_states(prob, gamma=g, eta=1 / (4 * prob.L * I) / g, I=I, seeds=[0], rounds=[0, 5])
    assert {s["weights"] for s in st} == {"Algorithm 2", "omega = 1", "omega = 1/p"} and len(st) == 6
    tab = B.lemma_table(prob, st, gamma=g, eta=1 / (4 * prob.L * I) / g, I=I, draws=3000, seed=0)
    cs = B.lemma_checks(tab)
    assert all(c.verdict == "agrees" for c in cs)
    assert (tab["slack"] >= 0).all()


# ------------------------------------------------------------------------------------- Theorem 2 and Corollary 4
def test_bracket_bounds_exact():
    b = B.bracket_bounds()
    assert b["option 1"] == 0 and b["option 2"] == Fraction(-1, 16)


def test_theorem2_conditions_imply_the_lemma_only_for_large_Q():
    L, I, N = 1.0, 2, 20
    g = 1 / (4 * math.sqrt(15) * L * I)
    assert not B.theorem2_conditions(L, I, N, 1.0, g, 1.0)["implied"]            # Q = 1 < 4N/27
    assert B.theorem2_conditions(L, I, N, 4 * N / 27 + 1e-9, g, 1.0)["implied"]
    c = B.theorem2_conditions(L, I, N, 100.0, g, 1.0)
    assert c["ge_max_theorem"] == pytest.approx(N / (27 * L * I * 100.0))


def test_theorem2_bound_by_hand(prob):
    kw = dict(gamma=0.01, eta=2.0, I=3, T=100, F=1.5, W_mean=0.2, Q=4.0, G2=2.0)
    b = B.theorem2_bound(prob, **kw)
    s2, d2, N = prob.sigma2, prob.delta2, prob.N
    assert b["init"] == pytest.approx(16 * 1.5 / (0.02 * 3 * 100))
    assert b["weights"] == pytest.approx(0.2 * (24 * (15 * 3 * 1e-4 * s2 + 27 * d2 / 8) + 81 * 2.0))
    assert b["drift"] == pytest.approx(40 * 1e-4 * 3 * (s2 + 18 * d2))
    assert b["variance"] == pytest.approx(16 * 0.02 / N * (17 * s2 / 16 + 81 * d2 / 8) * 4.0)
    assert b["bound"] == pytest.approx(sum(v for k, v in b.items() if k != "bound"))


def test_theorem2_table_and_checks(prob):
    tab = B.theorem2_table(prob, [dict(weights=("fedau", None), T=60, step=1.0), dict(weights="1", T=60, step=1.0)],
                           seeds=[0, 1, 2], I=2)
    assert (tab["conditions"]).all() and (tab["lhs"] < tab["bound"]).all()
    cs = B.theorem2_checks(tab, N=prob.N, L=prob.L, I=2)
    assert [c.verdict for c in cs[:2]] == ["agrees", "agrees"]
    assert cs[2].verdict == "differs" and "Option 1" in cs[2].what      # the bracket bounded by 0
    assert cs[3].verdict == "agrees"                                      # N = 6: Q = 1 >= 4N/27
    assert B.theorem2_checks(tab, N=20, L=prob.L, I=2)[3].verdict == "differs"   # N = 20: Q = 1 < 4N/27


def test_corollary4_steps_by_hand(prob):
    st = B.corollary4_steps(prob, I=2, T=400, F=1.0, Q=3.0)
    assert st["gamma"] == pytest.approx(min(1 / (2 * 20), 1 / (8 * math.sqrt(15))))
    ge = min(math.sqrt(prob.N / (3.0 * (2 * prob.delta2 + prob.sigma2) * 2 * 400)), 1 / 4, prob.N / (27 * 2 * 3.0))
    assert st["ge"] == pytest.approx(ge) and st["eta"] == pytest.approx(ge / st["gamma"])
    r = [B.corollary4_rate(prob, I=2, T=T, F=1.0, Q=3.0, G2=1.0) for T in (100, 1000, 10_000)]
    assert r[0] > r[1] > r[2] > 0


def test_corollary4_checks_flag_a_slow_decay():
    Ts = [100, 200, 400, 800]
    rows = [dict(T=T, seed=s, lhs=(1 + 0.01 * s) * T ** -0.5, rate=1.0, bound=10.0) for T in Ts for s in range(4)]
    ok = B.corollary4_checks(pd.DataFrame(rows), boot=50)
    assert ok[0].verdict == "agrees" and abs(ok[0].ours + 0.5) < 1e-9
    slow = [dict(r, lhs=(1 + 0.01 * r["seed"]) * r["T"] ** -0.2) for r in rows]       # T^(-0.2): beyond -0.5 + 0.15
    assert B.corollary4_checks(pd.DataFrame(slow), boot=50)[0].verdict == "differs"


def test_slope_with_se_on_an_exact_power_law():
    x = np.array([1.0, 2.0, 4.0, 8.0])
    Y = np.vstack([x ** -0.7 * c for c in (1.0, 2.0, 3.0)])
    s, se = B.slope_with_se(x, Y, boot=100)
    assert s == pytest.approx(-0.7) and se < 1e-12


# ------------------------------------------------------------------------------------- Problem 1, intervals
def test_problem1_error_by_hand():
    m = np.zeros((4, 1, 2), dtype=bool)
    m[[0, 2], 0, 0] = True                             # client 0: rate 1/2 over 4 rounds; client 1 never
    om = np.zeros((4, 1, 2))
    om[:, 0, 0] = [1.0, 1.0, 2.0, 3.0]                 # average 7/4
    e = B.problem1_error(m, om, [4])
    assert e[0, 0, 0] == pytest.approx(abs(7 / 4 * 1 / 2 - 1)) and np.isnan(e[0, 0, 1])


def test_problem1_checks_confirm_a_falling_error_and_not_a_flat_one():
    rows = [dict(pattern="bernoulli", K=math.inf, T=T, seed=s, error=(1 + 0.1 * s) / math.sqrt(T), never=0)
            for T in (10, 100, 1000) for s in range(4)]
    assert B.problem1_checks(pd.DataFrame(rows))[0].verdict == "confirmed"
    flat = [dict(r, error=0.2 + 0.01 * r["seed"] + 1e-3 * math.log(r["T"])) for r in rows]
    assert B.problem1_checks(pd.DataFrame(flat))[0].verdict != "confirmed"


def test_interval_helpers_by_hand():
    m = np.array([[0, 1], [0, 0], [1, 0], [0, 0], [0, 1]], dtype=bool)
    np.testing.assert_array_equal(B._first_interval(m), [3.0, 1.0])
    np.testing.assert_array_equal(B._longest_gap(m), [3.0, 4.0])       # client 1: rounds 0 and 4, an interval of 4
    assert np.isinf(B._first_interval(np.zeros((3, 1), dtype=bool)))[0]


def test_first_interval_law_matches_the_geometric_tail():
    p = np.full(400, 0.05)
    ov = B.interval_overestimates(p, 400, [0, 1], Ks=(None,))
    f = ov[ov["kind"] == "first>3/p"]
    assert abs(f["stat"].mean() - (0.95 ** 60)) < 0.04


def test_tidy_round_trip():
    df = pd.DataFrame(dict(a=["x", "y"], b=[1.0, np.nan], v=[0.5, 2.0], ok=[True, False]))
    t = B.to_tidy(df, ["a", "b"])
    assert set(t.columns) >= {"round", "metric", "value"} and (t["round"] == 0).all()
    back = B.from_tidy(t, ["a", "b"])
    assert back["v"].tolist() == [0.5, 2.0] and back["ok"].tolist() == [1.0, 0.0] and back["b"].tolist() == [1.0, -1.0]


def test_stored_tables_are_computed_once_and_read_back(tmp_path):
    from flkit import results
    store = results.Store(tmp_path / "fedau")
    wide = pd.DataFrame(dict(T=[10, 10, 100], seed=[0, 1, 0], lhs=[0.5, 0.25, 0.125], K=[3.0, 3.0, np.inf]))
    conf = dict(experiment="theory_test", T=[10, 100])
    first = B.stored(store, conf, "c4", lambda: wide)
    assert store.done(conf)

    def never():
        raise AssertionError("recomputed a stored table")

    again = B.stored(store, conf, "c4", never)
    for got in (first, again):
        assert got[["T", "seed", "lhs"]].to_numpy().tolist() == wide[["T", "seed", "lhs"]].to_numpy().tolist()
    assert again["K"].tolist()[:2] == [3.0, 3.0]
    with pytest.raises(KeyError):
        B.stored(store, conf, "no-such-table", never)
