"""FedAU theory page (flkit.papers.fedau.theory): the closed forms against the implementation."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from flkit import aggregate, participation
from flkit.papers.fedau import theory as th
from flkit.papers.fedau.weights import algorithm2   # the document's Algorithm 2, line by line
from flkit.seeding import rng

P_SMALL = np.array([0.02, 0.05, 0.1, 0.3, 0.6, 0.9])          # six clients with stated p_n


def _hist(N=6, C=3, seed=0):
    h = rng(seed, "test").dirichlet(np.full(C, 0.5), size=N)
    return h


# ------------------------------------------------------------------------------------- settings
def test_profiles_valid_and_errors():
    for name in th.PROFILES:
        th.profile(name)
    with pytest.raises(ValueError, match="unknown profile"):
        th.profile("huge")
    with pytest.raises(ValueError, match="seeds"):
        th.profile("smoke", seeds=[1, 1])
    with pytest.raises(ValueError, match="gamma"):
        th.profile("smoke", gamma=-0.1)
    with pytest.raises(ValueError, match="unknown setting"):
        th.profile("smoke", rounds=5)


def test_cifar10_setting_is_fedau_construction():
    S = th.cifar10_setting(1)
    assert S.p.shape == (250,) and S.hist.shape == (250, 10)
    assert S.p.min() == 0.02 and S.p.max() <= 1
    np.testing.assert_allclose(S.hist.sum(1), 1, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------- Theorem 1
@pytest.mark.parametrize("rule", ["1/p", "1", "E[S]"])
def test_theorem1_identical_hessians_fixed_point_is_argmin_h(rule):
    task_1 = th.quadratic(_hist(), "identical", local_steps=1)
    omega = th.omega_of(rule, P_SMALL, 5)
    for I in (1, 4):
        task = th.quadratic(_hist(), "identical", local_steps=I)
        xh = th.argmin_h(task, omega * P_SMALL)
        for gamma in (0.1, 0.7):
            x_star, g_at = th.expected_fixed_point(task, th.algorithm(omega, 0.5, gamma, P_SMALL), P_SMALL, at=xh)
            assert np.abs(g_at).max() <= 1e-12
            assert np.abs(x_star - xh).max() <= 1e-12
    # argmin h: the weighted mean of the c_n (A_n = A cancels), computed independently
    xh = th.argmin_h(task_1, omega * P_SMALL)
    np.testing.assert_allclose(xh, (omega * P_SMALL) @ _hist() / (omega * P_SMALL).sum(), rtol=0, atol=1e-14)


def test_argmin_h_with_inverse_p_is_argmin_f():
    task = th.quadratic(_hist(), "heterogeneous", local_steps=1, seed=3)
    np.testing.assert_allclose(th.argmin_h(task, np.ones(6)), task.problem.w_star.numpy(), rtol=0, atol=1e-14)
    np.testing.assert_allclose(th.argmin_h(task, th.omega_of("1/p", P_SMALL) * P_SMALL), task.problem.w_star.numpy(),
                               rtol=0, atol=1e-14)


def test_theorem1_heterogeneous_limit_and_drift():
    omega = th.omega_of("1/p", P_SMALL)
    w = omega * P_SMALL
    t1 = th.quadratic(_hist(), "heterogeneous", local_steps=1, seed=3)
    x1, _ = th.expected_fixed_point(t1, th.algorithm(omega, 1.0, 0.3, P_SMALL), P_SMALL, at=np.zeros(3))
    assert np.abs(x1 - th.argmin_h(t1, w)).max() <= 1e-12              # I = 1: no drift
    t5 = th.quadratic(_hist(), "heterogeneous", local_steps=5, seed=3)
    x5 = th.expected_fixed_point(t5, th.algorithm(omega, 1.0, 0.3, P_SMALL), P_SMALL)
    assert np.abs(x5 - th.limit_point(t5, w, 0.3)).max() <= 1e-12
    assert np.linalg.norm(x5 - th.argmin_h(t5, w)) > 1e-3
    g = 1e-5                                                            # first-order coefficient
    fd = (th.limit_point(t5, w, g) - th.argmin_h(t5, w)) / g
    np.testing.assert_allclose(fd, th.drift_slope(t5, w), rtol=1e-3, atol=1e-9)


def test_expected_direction_refuses_adaptive_rules():
    task = th.quadratic(_hist(), "identical")
    alg = th.algorithm(np.ones(6), 1.0, 0.1, P_SMALL)
    with pytest.raises(ValueError, match="constant-weight"):
        th.expected_direction(task, alg.__class__(aggregate.FedAU(), lr=0.1), P_SMALL, np.zeros(3))
    with pytest.raises(ValueError, match=">= 1"):
        th.algorithm(np.full(6, 0.5), 1.0, 0.1, P_SMALL)


def test_tail_table_bias_fraction():
    import pandas as pd
    x_f, x_b = np.array([0.0, 0.0]), np.array([2.0, 0.0])
    tab = pd.DataFrame({"method": "m", "seed": 0, "round": 10, "metric": ["x0", "x1"], "value": [1.0, 3.0]})
    out = th.tail_table(tab, {"m": x_b}, x_f, x_b)
    assert out["bias_fraction"].iloc[0] == 0.5
    assert out["dist_f"].iloc[0] == pytest.approx(math.hypot(1, 3), abs=1e-15)


# ------------------------------------------------------------------------------- Algorithm 2, identity
@pytest.mark.parametrize("K", [None, 1, 3, 7])
def test_fedau_weights_equal_algorithm2(K):
    mask = participation.bernoulli(P_SMALL, 300, 4)
    np.testing.assert_allclose(th.weights_over_rounds(mask, K)[:-1], algorithm2(mask, K), rtol=0, atol=1e-12)


def test_interval_mean_identity_exact():
    mask = np.zeros((8, 1), dtype=bool)
    mask[[2, 5], 0] = True                                             # intervals 3, 3 -> omega = (5 + 1)/2
    assert th.weights_over_rounds(mask, None)[-1, 0] == 3.0
    for pattern in th.PATTERNS:
        m = th.masks(pattern, P_SMALL, 700, 2)
        r = th.identity_check(m)
        assert r["max_dev"] <= 1e-12 and r["max_dev_before_first"] == 0.0 and r["cells"] > 0
    f = th.run_final_check(participation.bernoulli(P_SMALL, 400, 5), seed=5)
    assert f["max_dev"] <= 1e-12 and f["count_dev"] == 0


# ------------------------------------------------------------------------ cutoff geometric distribution
@pytest.mark.parametrize("p", [Fraction(1, 50), Fraction(1, 10), Fraction(1, 2), Fraction(3, 7)])
@pytest.mark.parametrize("K", [1, 2, 3, 10, 40])
def test_cutoff_moments_exact(p, K):
    total, mean, var = th.pmf_moments(p, K)
    assert total == 1
    assert th.cutoff_mean(p, K) == mean
    assert th.cutoff_var(p, K) == var                                   # the document's formula, exactly
    assert th.cutoff_var_derived(p, K) == var


def test_cutoff_var_float_and_limits():
    p = np.array([0.02, 0.1, 0.5, 0.9])
    for K in (1, 2, 50, 200):
        np.testing.assert_allclose(th.cutoff_var(p, K), th.cutoff_var_derived(p, K), rtol=1e-12,
                                   atol=1e-12)
    np.testing.assert_allclose(th.cutoff_var(p, 5000), (1 - p) / p ** 2, rtol=1e-12)   # K -> inf: geometric
    assert th.cutoff_var(0.3, 1) == pytest.approx(0.0, abs=1e-15)


def _intervals_direct(I, K, m):
    out = np.zeros((I.shape[1], m))
    for n in range(I.shape[1]):
        got, gap = [], 0
        for t in range(I.shape[0]):
            gap += 1
            if I[t, n] or gap == K:
                got.append(gap)
                gap = 0
        out[n] = got[:m]
    return out


@pytest.mark.parametrize("K", [1, 4, 9])
def test_recorded_intervals_match_direct_count(K):
    mask = participation.bernoulli(np.array([0.05, 0.2, 0.5]), 5 * K, 3)
    np.testing.assert_array_equal(th.recorded_intervals(mask, K, 5), _intervals_direct(mask, K, 5))
    with pytest.raises(ValueError, match="rounds"):
        th.recorded_intervals(mask, K, 6)


def test_interval_z():
    z = th.interval_z([1.0, 2.0, 3.0], [1.0 + 1e-12, 1.5, 3.5], [0.0, 0.25, 0.0])
    assert z[0] == 0 and z[1] == 2 and np.isnan(z[2])


# ----------------------------------------------------------------------------- Theorem 3, Corollary 4
def test_corollary4_K_makes_bias_one_over_T():
    for p_min in (0.02, 0.1):
        for T in (2, 100, 10_000):
            K = th.corollary4_K(p_min, T)
            assert (1 - p_min) ** (2 * K) == pytest.approx(1 / T, rel=1e-12)


def test_bound_average_brute_force():
    p = P_SMALL
    K, T = 7, 40
    brute = np.mean([(1 - p) ** 2] + [th.theorem3_bound(p, K, t) for t in range(1, T)], axis=0).mean()
    assert th.bound_average(p, K, T) == pytest.approx(brute, rel=1e-12)
    lines = th.proof_lines(0.1, 10, 25)
    assert lines["split"] == pytest.approx(0.01 * th.cutoff_var(0.1, 10) / 2 + 0.9 ** 20, rel=1e-14)
    assert lines["split"] <= lines["2K/t"] <= lines["final"]


@pytest.mark.parametrize("K", [None, 3])
def test_weight_error_equals_direct_computation(K):
    R, T, seed = 3, 40, 7
    tab = th.weight_error(P_SMALL, K, T, R, seed, [10, 40], check=K is not None, chunk=16)
    draws = participation.bernoulli(np.tile(P_SMALL, R), T, rng(seed, "participation")).reshape(T, R, -1)
    W = np.stack([th.weights_over_rounds(draws[:, r], K)[:-1] for r in range(R)], 1)      # (T, R, N)
    e = (P_SMALL * W - 1) ** 2
    err = e.mean((1, 2))
    var = (P_SMALL ** 2 * W.var(1)).mean(1)
    bias = ((P_SMALL * W.mean(1) - 1) ** 2).mean(1)
    got = tab.pivot_table(index="round", columns="metric", values="value")
    rounds = got["err_t"].dropna().index
    np.testing.assert_allclose(got.loc[rounds, "err_t"], err[rounds], rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.loc[rounds, "var_t"] + got.loc[rounds, "bias_t"], err[rounds], rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.loc[rounds, "bias_t"], bias[rounds], rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.loc[rounds, "var_t"], var[rounds], rtol=0, atol=1e-12)
    assert got.loc[40, "avg_err"] == pytest.approx(err.mean(), rel=1e-12)
    assert got.loc[10, "avg_err"] == pytest.approx(err[:10].mean(), rel=1e-12)
    if K is not None:
        assert got.loc[T, "viol_final_t<K"] == 0 and got.loc[T, "viol_final_t>=K"] == 0
        assert got.loc[T, "cells"] == P_SMALL.size * (T - 1)


# ----------------------------------------------------------------------------- Assumption 5, Option 1
def test_option1_at_t0_and_summary():
    for pattern in th.PATTERNS:
        Q = th.option1(P_SMALL, pattern, None, 30, [0, 1])
        rate = th.pattern_rate(pattern, P_SMALL)
        np.testing.assert_allclose(Q[:, 0], np.mean((rate - 1) ** 2), rtol=0, atol=1e-15)
    Q = np.array([[1.0, 0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]])
    s = th.option1_summary(Q, level=0.5)
    np.testing.assert_array_equal(s["t_star"], [3, 0, np.nan])
    np.testing.assert_array_equal(s["first_ok"], [1, 0, 0])


def test_cyclic_rate_is_long_run_rate():
    m = participation.cyclic(P_SMALL, 100 * 50 + 99, 0, period=100)
    emp = m[99:99 + 100 * 50].mean(0)                 # 50 full cycles after the initial phase
    np.testing.assert_allclose(th.pattern_rate("cyclic", P_SMALL, period=100), emp, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="pattern"):
        th.pattern_rate("weekly", P_SMALL)
