"""FedAU's weight estimate (document 000, Algorithm 2) and the three participation patterns.

Hand-written traces pin aggregate.FedAU; the document's Algorithm 2, transcribed literally, is shown to
give the same omega_t in every round; the closed forms of the page (cutoff mean and variance, long-run
limits, the exact cyclic weight, the standard error of an autocorrelated rate) are checked against direct
computations; the stationary rates of the three patterns with FedAU's p_n are checked exactly and by
simulation."""
from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import pytest
import torch
from scipy import stats

from flkit import aggregate, participation
from flkit.papers.fedau import weights as W

# one client, 12 rounds: absent 4 rounds, two participations, absent 4, one participation, absent
TRACE = np.array([0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0], dtype=bool)
# omega read in round t (before round t is recorded), then the value after round 11, by hand:
#   K = inf: intervals 5 (round 4), 1 (round 5), 5 (round 10)
EXPECTED_INF = [1, 1, 1, 1, 1, 5, 3, 3, 3, 3, 3, F(11, 3), F(11, 3)]
#   K = 3: cutoff 3 (round 2), 2 (round 4), 1 (round 5), cutoff 3 (round 8), 2 (round 10)
EXPECTED_K3 = [1, 1, 1, 3, 3, F(5, 2), 2, 2, 2, F(9, 4), F(9, 4), F(11, 5), F(11, 5)]
# what the authors' -save-weight-stats writes: the weight applied at the latest participation
NAN = math.nan
LOG_INF = [NAN] * 5 + [5] * 5 + [3, 3]           # round 4: no interval yet, no weight applied
LOG_K3 = [NAN] * 4 + [3] + [F(5, 2)] * 5 + [F(9, 4)] * 2


def fedau_trace(mask, K):
    """omega read each round by aggregate.FedAU, plus the one after the last round: (T + 1, N)."""
    m = torch.as_tensor(np.asarray(mask, dtype=bool).reshape(len(mask), -1))
    rule = aggregate.FedAU(K=K)
    st = rule.init(1, m.shape[1], 1, torch.float64, "cpu")
    out = []
    for t in range(m.shape[0]):
        out.append(rule.weights(st)[0].numpy())
        st = rule.record(st, m[t][None])
    out.append(rule.weights(st)[0].numpy())
    return np.array(out)


def random_masks(T=300, N=40, seed=0):
    g = np.random.default_rng(seed)
    p = g.choice([0.02, 0.1, 0.3, 0.7, 1.0], size=N)
    return participation.bernoulli(p, T, g)


# ------------------------------------------------------------------------------------ hand traces
@pytest.mark.parametrize("K, expected", [(None, EXPECTED_INF), (3, EXPECTED_K3)])
def test_fedau_hand_trace(K, expected):
    np.testing.assert_allclose(fedau_trace(TRACE, K)[:, 0], [float(v) for v in expected], rtol=1e-15, atol=0)


@pytest.mark.parametrize("K, expected", [(None, EXPECTED_INF), (3, EXPECTED_K3)])
def test_algorithm2_hand_trace(K, expected):
    np.testing.assert_allclose(W.algorithm2(TRACE[:, None], K)[:, 0], [float(v) for v in expected[:-1]],
                               rtol=1e-15, atol=0)


@pytest.mark.parametrize("K, expected", [(None, LOG_INF), (3, LOG_K3)])
def test_code_weight_log_hand_trace(K, expected):
    np.testing.assert_allclose(W.code_weight_log(TRACE[:, None], K)[:, 0], [float(v) for v in expected],
                               rtol=1e-15, atol=0)


def test_cutoff_one_records_every_round():
    mask = random_masks(T=50, N=5)
    np.testing.assert_array_equal(fedau_trace(mask, 1)[1:], np.ones((50, 5)))


# ------------------------------------------------------------------------------------ Algorithm 2 as printed
@pytest.mark.parametrize("K", [None, 1, 2, 3, 7, 50])
def test_algorithm2_equals_fedau_in_every_round(K):
    """The relation, exactly: the document's omega_t (computed from I_{t-1}) is the omega aggregate.FedAU
    reads in round t, for every t = 0..T-1 (no shift); the two running means differ only by rounding."""
    mask = random_masks(seed=K or 0)
    lit, ours = W.algorithm2(mask, K), fedau_trace(mask, K)[:-1]
    np.testing.assert_allclose(lit, ours, rtol=1e-12, atol=0)
    if K != 1:                                               # K = 1: omega = 1 in every round
        assert not np.allclose(lit[1:], ours[:-1], rtol=1e-6)  # a shift by one round would not match


@pytest.mark.parametrize("K", [None, 2, 5, 50])
def test_omega_is_rounds_covered_over_records(K):
    mask = random_masks(seed=10 + (K or 0))
    np.testing.assert_allclose(W.omega_identity(mask, K), fedau_trace(mask, K), rtol=1e-12, atol=0)


def test_code_log_equals_fedau_at_participations():
    mask = random_masks(seed=3)
    om, log = fedau_trace(mask, 50)[:-1], W.code_weight_log(mask, 50)
    seen = mask & ~np.isnan(log)
    np.testing.assert_array_equal(log[seen], om[seen])


# ------------------------------------------------------------------------------------ closed forms
@pytest.mark.parametrize("p", [0.02, 0.1, 0.37, 0.9])
@pytest.mark.parametrize("K", [1, 2, 5, 50])
def test_cutoff_geometric_mean_and_variance(p, K):
    k = np.arange(1, K + 1)
    pmf = np.where(k < K, p * (1 - p) ** (k - 1), (1 - p) ** (k - 1))
    mean = (k * pmf).sum()
    assert pmf.sum() == pytest.approx(1, abs=1e-12)
    assert W.cutoff_mean(p, K) == pytest.approx(mean, rel=1e-12)
    assert W.cutoff_var(p, K) == pytest.approx((k * k * pmf).sum() - mean ** 2, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("p", [0.02, 0.1, 0.4])
@pytest.mark.parametrize("K", [1, 4, 50])
def test_interval_limit_from_the_interval_law(p, K):
    """E[S] / (1 + E floor((S-1)/K)) summed over the Markov interval law (S = 1 w.p. 1-b, else 1 + Geom(a))."""
    a, b = participation.transition_probs([p], x=0.05)
    a, b = float(a[0]), float(b[0])
    s = np.arange(1, 20_000)
    pmf = np.where(s == 1, 1 - b, b * a * (1 - a) ** np.maximum(s - 2, 0))
    ES, Erec = (s * pmf).sum(), ((1 + (s - 1) // K) * pmf).sum()
    assert ES == pytest.approx(1 / p, rel=1e-10)
    assert W.limit("markov", [p], K)[0] == pytest.approx(ES / Erec, rel=1e-10)
    assert W.limit("bernoulli", [p], K)[0] == pytest.approx(W.cutoff_mean(p, K), rel=1e-12)


def test_markov_limit_by_simulation():
    """Long-run omega of FedAU on many independent Markov chains (p = 0.1, x = 0.05, K = 50 and inf):
    mean omega_T over 1000 chains within 4 standard errors of the limit."""
    p = np.full(1000, 0.1)
    mask = participation.markov(p, 8000, 7, x=0.05)[:, None, :]
    for K in (None, 50):
        final = W.simulate(mask, p[None], K).final[0]
        se = final.std(ddof=1) / np.sqrt(final.size)
        assert abs(final.mean() - W.limit("markov", [0.1], K)[0]) < 4 * se


@pytest.mark.parametrize("K", [None, 1, 7, 50, 98])
@pytest.mark.parametrize("T", [1, 37, 100, 1234, 5000])
def test_cyclic_weight_exact(K, T):
    p = W.cifar10_probs(2)[:60]
    mask = participation.cyclic(p, T, 5, period=100)
    ref = participation.cyclic(p, 400, 5, period=100)       # same phases, long enough to read them
    got = W.cyclic_weight(p, 100, K, W.cyclic_phase(ref), T)
    np.testing.assert_allclose(got, fedau_trace(mask, K)[-1], rtol=1e-12, atol=0)


def test_cyclic_limit():
    p = np.array([0.02, 0.025, 0.1, 0.37, 0.5, 0.6])
    A, I = W.cyclic_blocks(p, 100)
    np.testing.assert_array_equal(A, [2, 2, 10, 37, 50, 60])
    np.testing.assert_allclose(W.limit("cyclic", p, None), 100 / A, rtol=1e-15)
    np.testing.assert_allclose(W.limit("cyclic", p, 50), 100 / (A + I // 50), rtol=1e-15)
    far = W.cyclic_weight(p, 100, 50, np.zeros(6, int), 10_000_000)
    np.testing.assert_allclose(far, W.limit("cyclic", p, 50), rtol=1e-5)


@pytest.mark.parametrize("lam", [-0.6, 0.0, 0.3, 0.95])
def test_rate_se_closed_form(lam):
    T, p = 57, 0.2
    k = np.arange(1, T)
    var = p * (1 - p) / T ** 2 * (T + 2 * ((T - k) * lam ** k).sum())
    assert W.rate_se(p, lam, T) == pytest.approx(math.sqrt(var), rel=1e-12)


# ------------------------------------------------------------------------------------ participation rates
@pytest.fixture(scope="module")
def rates():
    cfg = W.profile("paper", seeds=[1])
    return W.rate_checks({1: W.cifar10_probs(1)}, cfg), cfg


def test_fedau_probs_on_cifar10_counts():
    p = W.cifar10_probs(1)
    assert p.shape == (250,) and p.min() == 0.02 and p.max() <= 1
    np.testing.assert_array_equal(p, W.cifar10_probs(1))


def test_exact_long_run_rates(rates):
    r, cfg = rates
    for pat in ("bernoulli", "markov"):
        d = r[r["pattern"] == pat]
        np.testing.assert_allclose(d["exact"], d["p"], rtol=1e-12, atol=0)
    c = r[r["pattern"] == "cyclic"]
    A, I = W.cyclic_blocks(c["p"].to_numpy(), cfg["period"])
    assert (A + I == cfg["period"]).all()                   # every p_n < 1 - 1/L here: cycles of exactly L
    np.testing.assert_array_equal(c["exact"], A / cfg["period"])
    assert (c["exact"] - c["p"]).abs().max() <= 0.5 / cfg["period"] + 1e-15   # the rounding of L p_n


@pytest.mark.parametrize("pattern", ["bernoulli", "markov"])
def test_simulated_rates_within_standard_errors(rates, pattern):
    """z = (rate - p_n) / exact se (Markov: with the chain's autocorrelation). Per client: within the
    family-wise equivalent of 4 se over 250 clients; together: mean z^2 = 1 within 4 se of chi^2/n and the
    pooled mean deviation within 4 se."""
    d = rates[0][rates[0]["pattern"] == pattern]
    n = len(d)
    z_fw = stats.norm.isf(stats.norm.sf(4.0) / n)
    assert d["z"].abs().max() < z_fw
    assert abs((d["z"] ** 2).mean() - 1) < 4 * math.sqrt(2 / n)
    assert abs(d["z"].sum() / math.sqrt(n)) < 4
    if pattern == "markov":                                  # ignoring the autocorrelation understates se
        assert (d["z_iid"] ** 2).mean() > 2


def test_cyclic_simulated_count_is_exact(rates):
    cfg = rates[1]
    p = W.cifar10_probs(1)
    mask = W.masks("cyclic", p, cfg["rounds"], 1, period=cfg["period"])
    A, I = W.cyclic_blocks(p, cfg["period"])
    Tp = np.maximum(cfg["rounds"] - W.cyclic_phase(mask), 0)
    np.testing.assert_array_equal(mask.sum(0), (Tp // (A + I)) * A + np.minimum(Tp % (A + I), A))


def test_patterns_use_separate_streams():
    p = np.full(250, 0.02)
    b, m = W.masks("bernoulli", p, 500, 1), W.masks("markov", p, 500, 1)
    assert (b != m).mean() > 0.02                           # shared uniforms would make them nearly equal
    np.testing.assert_array_equal(b, W.masks("bernoulli", p, 500, 1))


# ------------------------------------------------------------------------------------ the page's runs
def test_simulate_statistics_match_the_trace():
    mask = random_masks(T=120, N=30, seed=4)
    p = np.full(30, 0.3)
    run = W.simulate(mask[:, None, :], p[None], 5, track=np.array([[0, 7]]))
    om = fedau_trace(mask, 5)
    np.testing.assert_allclose(run.err[:, 0], np.abs(p * om[:-1] - 1).mean(1), rtol=1e-12)
    np.testing.assert_allclose(run.sq[:, 0], ((p * om[:-1] - 1) ** 2).mean(1), rtol=1e-12)
    np.testing.assert_array_equal(run.trace[:, 0], om[:-1][:, [0, 7]])
    np.testing.assert_array_equal(run.final[0], om[-1])
    np.testing.assert_allclose(run.mean_omega[0], om[:-1].mean(0), rtol=1e-12)


def test_pick_clients_distinct_and_nearest():
    p = np.array([0.02, 0.02, 0.05, 0.3, 0.41])
    np.testing.assert_array_equal(W.pick_clients(p, [0.02, 0.02, 0.4]), [0, 1, 4])


# ------------------------------------------------------------------------------------ memory
def test_memory_floats_and_bytes():
    d, N = 1000, 250
    m = W.memory_table(N, data_sets=("SVHN",)).set_index("method")
    assert m.loc["FedAU (K = inf)", "floats"] == 3 * N and m.loc["FedAU (K = inf)", "bytes"] == 3 * N * 8
    for meth in ("average participating", "average all", "known participation statistics"):
        assert m.loc[meth, "floats"] == 0 and m.loc[meth, "bytes"] == 0
    dS = int(m["d"].iloc[0])
    for meth in ("MIFA", "FedVarp"):
        assert m.loc[meth, "floats"] == N * dS and m.loc[meth, "bytes"] == 4 * N * dS
        assert m.loc[meth, "state / d"] == N                  # the document's "250 x memory"
    assert aggregate.memory_floats(aggregate.MIFA(), N, d) == N * d


# ------------------------------------------------------------------------------------ settings
def test_profile_errors():
    with pytest.raises(ValueError, match="unknown profile"):
        W.profile("huge")
    with pytest.raises(ValueError, match="cutoffs"):
        W.profile("smoke", cutoffs=[0])
    with pytest.raises(ValueError, match="x "):
        W.profile("smoke", x=1.5)
    with pytest.raises(ValueError, match="rounds"):
        W.profile("smoke", rounds=0)
    with pytest.raises(ValueError, match="memory_models"):
        W.profile("smoke", memory_models=["MNIST"])
    with pytest.raises(ValueError, match="unknown setting"):
        W.profile("smoke", horizon=3)
    with pytest.raises(ValueError, match="pattern"):
        W.masks("poisson", [0.5], 3, 1)


def test_moment_deviations_is_the_pmf_check_and_sees_a_wrong_variance(monkeypatch):
    dev_mean, dev_var, n = W.moment_deviations()
    assert n == 25 and dev_mean < 1e-12 and dev_var < 1e-9
    # the geometric law's variance (no cutoff) in place of the document's: the check sees it
    monkeypatch.setattr(W, "cutoff_var", lambda p, K: (1 - p) / p ** 2)
    assert W.moment_deviations()[1] > 0.1
