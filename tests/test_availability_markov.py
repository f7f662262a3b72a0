"""Correlated availability page (document 001): the Markov chain's exact quantities, Theorem 1, the
aggregator and schedule of the FedAvg runs, the step-size sums. Fast (a few seconds)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import optimize

from flkit import aggregate, participation as Q
from flkit.aggregate import Updates
from flkit.papers.availability import markov as M

CASES = [(0.5, 0.9), (0.5, 0.5), (0.5, 0.0), (0.5, -0.5), (0.5, -0.9), (0.3, -0.3), (0.1, 0.9), (0.9, 0.99)]


# ------------------------------------------------------------------------------- the chain
@pytest.mark.parametrize("pi, lam", CASES)
def test_second_eigenvalue_is_lambda_cafed(pi, lam):
    P = Q.transition_matrix(pi, lam=lam)
    assert P.shape == (2, 2) and np.allclose(P.sum(1), 1.0, atol=1e-15)
    assert P[1, 1] == pytest.approx(lam + (1 - lam) * pi, abs=1e-15)   # CA-Fed: stay active
    assert P[0, 1] == pytest.approx((1 - lam) * pi, abs=1e-15)         # CA-Fed: become active
    assert Q.second_eigenvalue(P) == pytest.approx(lam, abs=1e-12)
    stat = np.array([1 - pi, pi])
    assert np.allclose(stat @ P, stat, atol=1e-15)


def test_second_eigenvalue_fedau_and_map():
    p = np.array([0.1, 0.3, 0.5, 0.9, 0.5])
    x = np.array([0.01, 0.05, 0.3, 0.1, 0.9])
    P = Q.transition_matrix(p, x=x)
    lam2 = Q.second_eigenvalue(P)
    assert np.allclose(lam2, 1 - x / p, atol=1e-12)                   # FedAU (x, p) -> lambda = 1 - x/p
    assert np.allclose(lam2, Q.markov_lambda(x, p), atol=1e-12)
    assert np.allclose(Q.transition_matrix(p, lam=1 - x / p), P, atol=1e-15)   # same P both ways
    # where FedAU rescales, 1 - x/p is infeasible and the chain's eigenvalue is -p/(1-p)
    assert Q.second_eigenvalue(Q.transition_matrix(0.1, x=0.3)) == pytest.approx(-0.1 / 0.9, abs=1e-12)
    with pytest.raises(ValueError, match="infeasible"):
        Q.transition_matrix(0.1, lam=1 - 0.3 / 0.1)


def test_parameter_map_table():
    pm = M.parameter_map([0.005, 0.05, 0.3], [0.1, 0.5, 0.9])
    feas = pm[pm["feasible"]]
    assert (feas["max_abs_diff"] < 1e-15).all()
    assert np.allclose(feas["lam2_fedau"], feas["lam_map"], atol=1e-12)
    assert (pm["feasible"] == ~pm["rescaled"]).all() and pm["rescaled"].sum() == 1
    p, x = np.array([0.1, 0.5, 0.9]), 0.05
    assert np.array_equal(Q.markov(p, 300, 4, x=x), Q.markov(p, 300, 4, lam=1 - x / p))


def test_second_eigenvalue_general_and_errors():
    C = np.roll(np.eye(3), 1, axis=1)                      # 3-cycle: eigenvalues are the cube roots of 1
    lam2 = Q.second_eigenvalue(C)
    assert abs(abs(lam2) - 1) < 1e-12 and abs(lam2.imag) > 0.5
    with pytest.raises(ValueError, match="square matrix"):
        Q.second_eigenvalue(np.ones((2, 3)))
    with pytest.raises(ValueError, match="at least 2 states"):
        Q.second_eigenvalue(np.ones((1, 1)))


@pytest.mark.parametrize("pi, lam", CASES)
def test_autocorrelation_closed_form(pi, lam):
    for s in range(0, 12):
        assert M.corr_closed_form(pi, lam, s) == pytest.approx(lam ** s, abs=1e-12)


def test_autocorrelation_simulation_within_5_se():
    ac = M.autocorrelation_check([(0.5, 0.9), (0.5, -0.7), (0.3, 0.5), (0.2, -0.2)], [1, 2, 3, 5],
                                 rounds=3000, chains=200, seed=0)
    assert (ac["z"].abs() <= 5).all(), ac
    # the same estimates are far from a wrong law (lambda^(s+1)): the check can fail
    wrong = (ac["mc_mean"] - ac["lam"] ** (ac["lag"] + 1)) / ac["mc_se"]
    assert (wrong.abs() > 5).any()


def test_autocorrelation_function_exact_values():
    T = 10
    alt = np.tile([[1], [0]], (T // 2, 3)).astype(bool)           # 1,0,1,0,...: lag-1 correlation -1
    assert np.allclose(Q.autocorrelation(alt, 1, mean=0.5), -1.0)
    assert np.allclose(Q.autocorrelation(alt, 1), -(T - 1) / T)
    assert np.allclose(Q.autocorrelation(alt, 2, mean=0.5), 1.0)
    assert np.allclose(Q.autocorrelation(alt, 0), 1.0)
    const = np.ones((5, 1), bool)
    assert np.isnan(Q.autocorrelation(const, 1)[0])
    with pytest.raises(ValueError, match="lag=10 needs a mask with more than 10 rounds"):
        Q.autocorrelation(alt, 10)
    with pytest.raises(ValueError, match="lag must be an int >= 0"):
        Q.autocorrelation(alt, -1)
    with pytest.raises(ValueError, match=r"must lie in \(0, 1\)"):
        Q.autocorrelation(alt, 1, mean=1.0)


@pytest.mark.parametrize("pi, lam", CASES)
def test_mixing_exact(pi, lam):
    for mu0 in (0.0, 0.25, 1.0):
        e = M.mixing_exact(pi, lam, mu0, 30)
        assert np.allclose(e["tv"], e["rate"], atol=1e-14, rtol=1e-10)


def test_mixing_simulation():
    mx = M.mixing_check([(0.5, 0.8), (0.3, -0.4)], steps=10, rounds=12, chains=20000, seed=0)
    z = ((mx["est"] - mx["exact"]) / mx["se"])[mx["t"] > 0]
    assert (z.abs() <= 5).all()


def test_joint_chain_slem_is_max_modulus():
    slem, mx = M.joint_slem([0.3, 0.5, 0.6], [0.5, -0.8, 0.3])
    assert slem == pytest.approx(0.8, abs=1e-12) and mx == 0.8


def test_mean_on_run():
    m = np.array([[1, 0], [1, 1], [0, 1], [1, 1]], bool)
    assert M.mean_on_run(m) == pytest.approx((2 + 1 + 3) / 3)


# ------------------------------------------------------------------------------- Theorem 1
def test_theorem1_ratio_at_most_one_on_fixed_random_set():
    th = M.theorem1_sample(300, seed=0)
    assert (th["ratio"] > 0).all()
    assert th["ratio"].max() <= 1.0, th.loc[th["ratio"].idxmax()]


def test_theorem1_terms_by_hand():
    # one dimension, two clients with curvature 1 and 4: mu = 1, L = 4, kappa = 4
    prob = M.Quadratics(np.array([[[1.0]], [[4.0]]]), np.array([[0.0], [1.0]]))
    alpha, p, w = np.array([0.5, 0.5]), np.array([0.25, 0.75]), np.array([2.0])
    r = M.theorem1(prob, alpha, p, w)
    w_star = 4 / 5                                    # (0.5*0 + 0.5*4*1) / (0.5 + 2)
    w_B = 3 / 3.25                                    # (0.75*4) / (0.25 + 3)
    assert r["eps"] == pytest.approx(0.5 * 2.5 * (2 - w_star) ** 2, rel=1e-14)
    assert r["eps_opt"] == pytest.approx(2 * 16 * 0.5 * 3.25 * (2 - w_B) ** 2, rel=1e-14)
    chi2 = 0.25 ** 2 / 0.25 + 0.25 ** 2 / 0.75
    gamma = max(0.5 * w_star ** 2, 0.5 * 4 * (w_star - 1) ** 2)
    assert r["eps_bias"] == pytest.approx(2 * 4 ** 4 * chi2 * gamma, rel=1e-14)
    assert M.theorem1(prob, alpha, np.array([1.0, 0.0]), w)["chi2"] == math.inf   # an excluded client


@pytest.mark.parametrize("a1, p1", [(0.5, 0.6), (0.5, 0.51), (0.7, 0.4), (0.3, 0.9)])
def test_two_client_supremum_formula(a1, p1):
    prob = M.Quadratics(np.full((2, 1, 1), 3.0), np.array([[-1.0], [2.0]]))
    f = lambda w: -M.theorem1(prob, [a1, 1 - a1], [p1, 1 - p1], [w[0]])["ratio"]  # noqa: E731
    best = min((optimize.minimize(f, [x0], method="Nelder-Mead", options=dict(xatol=1e-12, fatol=1e-15))
                for x0 in (-5.0, 0.5, 5.0)), key=lambda r: r.fun)
    assert -best.fun == pytest.approx(M.two_client_sup(a1, p1), abs=1e-9)


def test_theorem1_constant_is_sharp_at_kappa_one():
    # near alpha = p = (1/2, 1/2) the supremum is 1 - 2 eps^2: halving the bound's constant would break it
    assert M.two_client_sup(0.5, 0.5 + 1e-3) == pytest.approx(1 - 2e-6, abs=1e-15)
    r = M.theorem1_search(2, 1, 1.0, starts=2, seed=0, maxiter=1500)
    assert 0.999 < r["ratio"] <= 1 + 1e-9


# ------------------------------------------------------------------------------- the FedAvg runs
def _updates(delta, pairs, R, N, p):
    return Updates(torch.tensor(pairs), torch.tensor(delta, dtype=torch.float64), torch.ones(len(pairs),
                   dtype=torch.float64), R, N, torch.tensor(p, dtype=torch.float64).expand(R, N))


def test_unnormalized_aggregator_is_q_alpha_over_pi():
    pi = np.array([0.9, 0.1, 0.5, 0.2])
    keep = np.array([True, False, True, True])
    alg = M._unbiased(pi, lr=1.0, a=0.0, keep=keep)
    delta = [[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]]
    pairs = [[0, 0], [0, 2], [0, 3]]                     # available kept clients 0, 2, 3
    G, _ = alg.aggregator.apply(alg.aggregator.init(1, 4, 2, torch.float64, "cpu"),
                                _updates(delta, pairs, 1, 4, alg.p))
    q = 1 / (keep.sum() * pi)                            # alpha_k / pi_k, alpha uniform on the kept clients
    want = q[0] * np.array(delta[0]) + q[2] * np.array(delta[1]) + q[3] * np.array(delta[2])
    assert np.allclose(G.numpy()[0], want, atol=1e-15)


def test_step_schedule_multiplies_by_t_power():
    rule = aggregate.StepSchedule(aggregate.AverageAll(), a=0.75)
    state = rule.init(1, 2, 1, torch.float64, "cpu")
    for t in range(1, 6):
        G, state = rule.apply(state, _updates([[2.0]], [[0, 0]], 1, 2, [1.0, 1.0]))
        assert float(G[0, 0]) == pytest.approx(1.0 * t ** -0.75, rel=1e-15)
    assert np.allclose(M.eta([1, 8], 0.3, 1 / 3), [0.3, 0.15])


def test_lambda_sweep_deterministic_and_lambda_zero_is_bernoulli_law():
    cfg = dict(pi=0.5, lams=[0.0, 0.9], rounds=30, eta0=0.3, a=0.75, n=4, dim=3, every=10)
    a, b = M.lambda_sweep(cfg, [0, 1]), M.lambda_sweep(cfg, [0, 1])
    assert a.equals(b)
    start = a[(a["metric"] == "gap") & (a["round"] == 0)]["value"]
    assert start.nunique() == 1                          # same start for every lambda
    # lambda = 0: the two rows of P are equal, availability is i.i.d. Bernoulli(pi)
    P = Q.transition_matrix(0.3, lam=0.0)
    assert np.allclose(P[0], P[1]) and np.allclose(P[0], [0.7, 0.3])


def test_exclusion_runs_small():
    cfg = dict(rounds=20, eta0=0.15, a=0.75, n=8, dim=3, mu=1.0, L=2.0, heterogeneity=1.0, every=10)
    ex = M.exclusion_runs(cfg, [0, 1], problem_seed=0)

    def val(m, met, r):
        return ex[(ex["method"] == m) & (ex["metric"] == met) & (ex["round"] == r)]["value"].iloc[0]

    names = list(M.STRATEGIES)
    assert val(names[0], "bias", 0) < 1e-20 and val(names[0], "chi2", 0) == 0.0
    assert val(names[0], "opt", 20) == pytest.approx(val(names[0], "total", 20), rel=1e-12)   # F_B = F
    for m in names[1:]:
        assert val(m, "bias", 0) > 0 and val(m, "chi2", 0) == math.inf
    assert M.client_types(8).count("available, shifting") == 4
    with pytest.raises(ValueError, match="multiple of 4"):
        M.client_types(10)


# ------------------------------------------------------------------------------- step sizes (11)
def test_step_sums_and_limits():
    ss = M.step_sums([0.5, 0.75, 1.0, 1.2], 10 ** 5, chunk=30_000)
    for a in (0.75, 1.0, 1.2):
        L = M.step_sum_limits(a)
        r = ss[(ss["a"] == a) & (ss["T"] == 10 ** 5)].iloc[0]
        assert r["S1"] == pytest.approx(L["S1_asym"](10 ** 5), rel=1e-9)
        assert r["S2"] + L["S2_tail"](10 ** 5) == pytest.approx(L["S2_limit"], rel=1e-8)
    t = np.arange(1, 10 ** 4 + 1, dtype=float)
    assert ss[(ss["a"] == 0.75) & (ss["T"] == 10 ** 4)]["S1"].iloc[0] == pytest.approx(np.sum(t ** -0.75), rel=1e-12)
    flags = {a: M.step_sum_limits(a)["both"] for a in (0.0, 0.5, 0.51, 0.75, 1.0, 1.01)}
    assert flags == {0.0: False, 0.5: False, 0.51: True, 0.75: True, 1.0: True, 1.01: False}
    assert M.step_sum_limits(1.0)["S2_limit"] == pytest.approx(0.9375482543158437, rel=1e-12)   # -zeta'(2)


def test_profiles():
    for name in M.PROFILES:
        cfg = M.profile(name)
        assert 0.5 < cfg["lam"]["a"] <= 1 and 0.5 < cfg["excl"]["a"] <= 1   # the schedules satisfy (11)
    with pytest.raises(ValueError, match="unknown profile 'fast'"):
        M.profile("fast")
