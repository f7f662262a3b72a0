"""Tests of flkit.participation: long-run rates and correlations against theory (tolerances of
5 standard deviations from the CLT), exact structure of the deterministic parts, seeds, errors."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from flkit import participation as Q
from flkit.seeding import rng

Z = 5.0  # tolerance in standard deviations


def test_bernoulli_rates():
    p = np.linspace(0.05, 1.0, 12)
    T = 20000
    m = Q.bernoulli(p, T, seed=0)
    assert m.shape == (T, 12) and m.dtype == bool
    sd = np.sqrt(p * (1 - p) / T)
    assert np.all(np.abs(m.mean(0) - p) <= Z * sd + 1e-12)
    assert m[:, -1].all(), "p = 1: always in"


# FedAU's default x = 0.05; p = 0.02 and 0.04 trigger FedAU's rescaling (x(1/p - 1) > 1)
P_MARKOV = np.array([0.02, 0.04, 0.1, 0.3, 0.5, 0.9])


def _check_chain(m, p, a, b):
    T = m.shape[0]
    lam = 1 - a - b
    # long-run rate, variance of a stationary two-state chain's time average
    sd_rate = np.sqrt(p * (1 - p) / T * (1 + lam) / (1 - lam))
    assert np.all(np.abs(m.mean(0) - p) <= Z * sd_rate), (m.mean(0), p)
    # lag-1 autocorrelation == lambda; sd from the transition-count estimates of a and b
    x = m.astype(float)
    ac = np.array([np.corrcoef(x[:-1, n], x[1:, n])[0, 1] for n in range(p.size)])
    sd_ac = np.sqrt(a * (1 - a) / (T * (1 - p)) + b * (1 - b) / (T * p))
    assert np.all(np.abs(ac - lam) <= Z * sd_ac), (ac, lam)


def test_markov_fedau_parametrization():
    x, T = 0.05, 30000
    a, b = Q.transition_probs(P_MARKOV, x=x)
    # FedAU: P(i->a) = x, P(a->i) = x(1/p - 1), rescaled to P(a->i) = 1 where that exceeds 1
    raw = x * (1 / P_MARKOV - 1)
    assert np.allclose(np.where(raw > 1, 1.0, raw), b)
    assert np.allclose(np.where(raw > 1, x / raw, x), a)
    assert np.allclose(Q.stationary(a, b), P_MARKOV)
    _check_chain(Q.markov(P_MARKOV, T, seed=1, x=x), P_MARKOV, a, b)


def test_markov_cafed_parametrization():
    # CA-Fed: pi in {0.9, 0.1}, stable lambda = 0.9 (feasible), shifting ~0.005, a negative lambda
    pi = np.array([0.9, 0.1, 0.9, 0.1, 0.5, 0.3])
    lam = np.array([0.9, 0.9, 0.005, 0.005, -0.5, 0.6])
    a, b = Q.transition_probs(pi, lam=lam)
    assert np.allclose(lam + (1 - lam) * pi, 1 - b), "P(a->a) = lambda + (1 - lambda) pi"
    assert np.allclose((1 - lam) * pi, a), "P(i->a) = (1 - lambda) pi"
    _check_chain(Q.markov(pi, 30000, seed=2, lam=lam), pi, a, b)


def test_markov_parametrizations_coincide():
    x = 0.05
    lam = Q.markov_lambda(x, P_MARKOV)
    no_rescale = x * (1 / P_MARKOV - 1) <= 1
    assert np.allclose(lam[no_rescale], 1 - x / P_MARKOV[no_rescale])
    assert np.all((lam >= -1) & (lam <= 1))
    for u, v in zip(Q.transition_probs(P_MARKOV, x=x), Q.transition_probs(P_MARKOV, lam=lam)):
        assert np.allclose(u, v)
    assert np.array_equal(Q.markov(P_MARKOV, 500, 7, x=x), Q.markov(P_MARKOV, 500, 7, lam=lam))
    assert Q.markov_lambda(0.05, 0.5) == pytest.approx(0.9)


def test_markov_update_then_read():
    """p = 1/2, x = 1: P(i->a) = P(a->i) = 1, the state flips every round, and row 0 is already the
    flipped initial state (the initial draw is the first number of the stream)."""
    p = np.full(200, 0.5)
    m = Q.markov(p, 6, seed=3, x=1.0)
    assert np.all(m[1:] == ~m[:-1])
    init = rng(3, "participation").random(200) < 0.5
    assert np.array_equal(m[0], ~init)


def test_cyclic_structure_and_rates():
    L = 100
    p = np.array([0.02, 0.1, 0.25, 0.5, 0.9, 1.0, 0.004])
    T = 100 * L
    m = Q.cyclic(p, T, seed=0, period=L)
    active = np.maximum(1, np.round(L * p).astype(int))
    inactive = np.maximum(1, L - active)
    rate = active / (active + inactive)
    assert np.all(np.abs(m.mean(0) - rate) <= L / T)
    assert np.allclose(rate[:5], p[:5])  # L p integer and < L: rate == p
    for n in range(p.size):
        col = m[:, n].astype(int)
        starts = np.flatnonzero(np.diff(np.r_[0, col]) == 1)
        ends = np.flatnonzero(np.diff(np.r_[col, 0]) == -1)
        lengths = ends - starts + 1
        assert np.all(lengths[:-1] == active[n]) and lengths[-1] <= active[n]
        assert 0 <= starts[0] < inactive[n], "random phase within the first inactive block"
        assert np.all(np.diff(starts) == active[n] + inactive[n])
    phases = np.array([np.argmax(Q.cyclic([0.1], L, s, period=L)[:, 0]) for s in range(20)])
    assert np.unique(phases).size > 5


def test_random_access():
    rho = np.array([0.5, 0.3, 0.15, 0.05])
    T = 40000
    m = Q.random_access(rho, T, seed=0)
    assert m.shape == (T, 4) and np.all(m.sum(1) == 1)
    sd = np.sqrt(rho * (1 - rho) / T)
    assert np.all(np.abs(m.mean(0) - rho) <= Z * sd)
    idx = Q.random_access_indices(rho, T, seed=0)
    assert np.array_equal(m.argmax(1), idx)
    with pytest.raises(ValueError, match="sums to 1.0003"):
        Q.random_access(rho * 1.0003, 10, 0)
    ok = Q.random_access(rho * 1.0003, 10, 0, normalize=True)
    assert np.array_equal(ok, Q.random_access(rho, 10, 0))
    with pytest.raises(ValueError, match="non-negative"):
        Q.random_access([0.5, 0.7, -0.2], 10, 0)


def test_uniform_k():
    m = Q.uniform_k(20, 5, 20000, seed=0)
    assert np.all(m.sum(1) == 5)
    sd = np.sqrt(0.25 * 0.75 / 20000)
    assert np.all(np.abs(m.mean(0) - 0.25) <= Z * sd)
    with pytest.raises(ValueError, match="k=21 is more than num_clients=20"):
        Q.uniform_k(20, 21, 5, 0)


def test_k_among_available_subset_and_count():
    avail = Q.bernoulli(np.linspace(0.1, 0.9, 12), 3000, seed=0)
    sel = Q.k_among_available(avail, 4, seed=0)
    assert not (sel & ~avail).any()
    assert np.array_equal(sel.sum(1), np.minimum(4, avail.sum(1)))


def test_inclusion_probability_five_sixths():
    """Lecture notes of doc 001: N = 2 of 3 clients picked uniformly among the available ones; the
    client of interest is always available and both others are available together half the time:
    P(selected) = 1/2 * 1 + 1/2 * 2/3 = 5/6 < 1."""
    p = np.array([1.0, 1.0, 0.5])
    exact = Q.inclusion_probability(p, 2)
    assert exact[0] == pytest.approx(5 / 6, abs=1e-12)
    # only P(both others available) = 1/2 matters
    assert Q.inclusion_probability([1.0, 0.5**0.5, 0.5**0.5], 2)[0] == pytest.approx(5 / 6, abs=1e-12)
    T = 200_000
    sel = Q.k_among_available(Q.bernoulli(p, T, seed=0), 2, seed=0)
    mc = sel.mean(0)
    sd = np.sqrt(exact * (1 - exact) / T)
    assert np.all(np.abs(mc - exact) <= Z * sd), (mc, exact)


def test_inclusion_probability_brute_force_and_monte_carlo():
    p = np.array([0.9, 0.2, 0.55, 0.7, 0.35])
    k = 2
    brute = np.zeros(5)
    for state in itertools.product([0, 1], repeat=5):
        s = np.array(state, bool)
        w = np.prod(np.where(s, p, 1 - p))
        if s.sum():
            brute += w * s * min(1.0, k / s.sum())
    exact = Q.inclusion_probability(p, k)
    assert np.allclose(exact, brute, atol=1e-12)
    T = 100_000
    mc = Q.k_among_available(Q.bernoulli(p, T, seed=1), k, seed=1).mean(0)
    assert np.all(np.abs(mc - exact) <= Z * np.sqrt(exact * (1 - exact) / T))


MAKERS = {
    "bernoulli": lambda s: Q.bernoulli([0.2, 0.5, 0.7], 50, s),
    "markov_x": lambda s: Q.markov([0.2, 0.5, 0.7], 50, s, x=0.1),
    "markov_lam": lambda s: Q.markov([0.2, 0.5, 0.7], 50, s, lam=0.3),
    "cyclic": lambda s: Q.cyclic([0.2, 0.5, 0.7], 50, s, period=10),
    "random_access": lambda s: Q.random_access([0.2, 0.5, 0.3], 50, s),
    "uniform_k": lambda s: Q.uniform_k(6, 2, 50, s),
    "k_among_available": lambda s: Q.k_among_available(np.ones((50, 6), bool), 2, s),
}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_same_seed_same_mask(name):
    make = MAKERS[name]
    a = make(11)
    assert a.dtype == bool and a.ndim == 2
    assert np.array_equal(a, make(11))
    assert not np.array_equal(a, make(12))
    concern = "selection" if name == "k_among_available" else "participation"
    assert np.array_equal(a, make(rng(11, concern)))


def test_replay():
    m = np.array([[1, 0, 1], [0, 0, 1]])
    out = Q.replay(m)
    assert out.dtype == bool and np.array_equal(out, m.astype(bool))
    assert np.array_equal(Q.replay([2, 0, 1], num_clients=3), np.eye(3, dtype=bool)[[2, 0, 1]])
    with pytest.raises(ValueError, match="0/1"):
        Q.replay(np.array([[0, 2]]))
    with pytest.raises(ValueError, match="shape"):
        Q.replay(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="expected 4"):
        Q.replay(m, num_clients=4)


@pytest.mark.parametrize("call, match", [
    (lambda: Q.bernoulli([0.5, 0.0], 10, 0), r"p\[1\] = 0\.0 is outside \(0, 1\]"),
    (lambda: Q.bernoulli([0.5, 1.2], 10, 0), "outside"),
    (lambda: Q.bernoulli([0.5], 0, 0), "rounds must be an int >= 1"),
    (lambda: Q.bernoulli([0.5], 10, 1.5), "seed must be"),
    (lambda: Q.markov([0.5], 10, 0), "exactly one of x"),
    (lambda: Q.markov([0.5], 10, 0, x=0.1, lam=0.2), "exactly one of x"),
    (lambda: Q.markov([0.5], 10, 0, x=0.0), "x .* must lie in"),
    (lambda: Q.markov([0.9], 10, 0, lam=-0.5), r"lam\[0\] = -0\.5 is infeasible for pi = 0\.9"),
    (lambda: Q.markov([0.9], 10, 0, lam=1.0), "infeasible"),
    (lambda: Q.markov([0.9, 0.5], 10, 0, lam=[0.1, 0.2, 0.3]), "one value per client"),
    (lambda: Q.cyclic([0.5], 10, 0, period=0), "period must be an int >= 1"),
    (lambda: Q.k_among_available(np.ones((3, 4), bool), 5, 0), "k=5 is more than the 4 clients"),
    (lambda: Q.inclusion_probability([0.5, 1.5], 1), "availability probabilities"),
    (lambda: Q.stationary(0.0, 0.0), "never moves"),
])
def test_value_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
