"""FedAU beside CA-Fed on the same Markov streams (flkit.papers.across.fedau_cafed, aggregate.FedAUWeighted, the
"fedau" method of flkit.papers.availability.cafed): FedAU's weight rule with target weights, the limit of its
weight on a two-state chain against a long simulated stream, the fifth method on the same availability as the
others, and the CA-Fed page's stored-run keys unchanged by the addition."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from flkit import aggregate, participation, results
from flkit.aggregate import Updates
from flkit.papers.across import fedau_cafed as H
from flkit.papers.availability import cafed as C


# ------------------------------------------------------------------------------------ the rule
def _updates(mask, d, sizes, g, p=None):
    R, N = mask.shape
    pairs = mask.nonzero()
    return Updates(pairs, torch.from_numpy(g.standard_normal((len(pairs), d))), torch.ones(len(pairs)), R, N,
                   p=p, sizes=sizes)


def test_fedau_weighted_is_fedau_with_equal_sizes_and_reads_no_p():
    g = np.random.default_rng(0)
    R, N, d, K = 2, 5, 3, 3
    a, b = aggregate.FedAU(K), aggregate.FedAUWeighted(K)
    sa, sb = a.init(R, N, d, torch.float64, "cpu"), b.init(R, N, d, torch.float64, "cpu")
    sizes = torch.full((R, N), 7.0)
    for t in range(40):
        mask = torch.from_numpy(g.random((R, N)) < 0.4)
        upd = _updates(mask, d, sizes, g)                  # p=None: a rule that read p would raise
        Ga, sa = a.apply(sa, upd)
        Gb, sb = b.apply(sb, upd)
        torch.testing.assert_close(Gb, Ga, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(b.omega(sb), a.weights(sa), rtol=0, atol=0)
    assert (sb.rounds > 0).any() and torch.all(sb.weight >= 0)


def test_fedau_weighted_uses_the_target_weights_q():
    # round 0: omega = 1 for every client, so G = sum_{arrived} q_k Delta_k with q_k = n_k / sum n
    g = np.random.default_rng(1)
    rule = aggregate.FedAUWeighted(50)
    sizes = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    st = rule.init(1, 4, 2, torch.float64, "cpu")
    mask = torch.tensor([[True, False, True, True]])
    upd = _updates(mask, 2, sizes, g)
    G, st = rule.apply(st, upd)
    q = sizes[0] / sizes.sum()
    torch.testing.assert_close(G[0], (q[[0, 2, 3]].unsqueeze(1) * upd.delta).sum(0))
    torch.testing.assert_close(st.weight[0], torch.tensor([0.1, 0.0, 0.3, 0.4], dtype=torch.float64))
    with pytest.raises(ValueError, match="sample counts"):
        rule.apply(st, _updates(mask, 2, None, g))
    with pytest.raises(ValueError, match="cutoff"):
        aggregate.FedAUWeighted(0)


# --------------------------------------------------------------------------- the limit of omega
def test_omega_limit_is_document_000s_cutoff_mean_for_independent_participation():
    p = np.array([0.1, 0.3, 0.5, 0.9])
    for K in (1, 5, 50):
        # lam = 0: a = b = 1 - p, an i.i.d. Bernoulli(p) chain; document 000: E[S] = (1 - (1 - p)^K) / p
        np.testing.assert_allclose(H.omega_limit(p, 0.0, K), (1 - (1 - p) ** K) / p, rtol=1e-12)
    np.testing.assert_allclose(H.omega_limit(p, 0.5, None), 1 / p, rtol=1e-12)
    with pytest.raises(ValueError, match="positive int"):
        H.omega_limit(p, 0.0, 0)


def test_fedau_omega_converges_to_the_stationary_law_on_a_long_markov_stream():
    # Stated tolerance: the mean over chains of omega_T / limit lies within 4 standard errors + 2 % of 1 (the 2 %
    # covers the estimator's O(1/T) bias at T = 20 000: about 0.9 % for the slowest chain, pi = 0.1, lam = 0.9).
    pi, lam = np.array([0.1, 0.1, 0.3, 0.9]), np.array([0.9, 0.0, 0.6, 0.0])
    to_a, to_i = participation.transition_probs(pi, lam=lam)
    stat = participation.stationary(to_a, to_i)                         # the exact stationary law
    for K in (None, 5, 50):
        w = H.omega_long_run(pi, lam, K, rounds=20_000, chains=40, seed=3)   # (chains, clients)
        lim = 1 / stat if K is None else H.omega_limit(pi, lam, K)
        ratio = w / lim
        mean, se = ratio.mean(0), ratio.std(0, ddof=1) / np.sqrt(len(ratio))
        assert np.all(np.abs(mean - 1) <= 4 * se + 0.02), (K, mean, se)
        if K == 5:   # the cutoff's limit is not 1/pi: the check tells them apart (the correlated client most)
            assert abs(w[:, 0].mean() * stat[0] - 1) > 0.5


# --------------------------------------------------------------- the fifth method on the same streams
@pytest.fixture(scope="module")
def small_runs():
    cl = C.synthetic()
    both = C.run_experiment(cl, C.LRS["synthetic"], 20, [0, 1], 0.001, 32, methods=("unbiased", "fedau"))
    alone = C.run_experiment(cl, C.LRS["synthetic"], 20, [0, 1], 0.001, 32, methods=("fedau",))
    return cl, both, alone


def test_fedau_sees_the_same_availability_as_the_others(small_runs):
    cl, tab, _ = small_runs
    per = tab[tab["client"] >= 0].pivot_table(index=["method", "seed", "client"], columns="metric", values="value")
    for s in (0, 1):
        mask = participation.markov(cl.pi, 20, s, lam=cl.lam)
        fu, ub = per.loc[("fedau", s)], per.loc[("unbiased", s)]
        np.testing.assert_array_equal(fu["available_rounds"], mask.sum(0))
        np.testing.assert_array_equal(fu["aggregated_rounds"], ub["aggregated_rounds"])   # every available client
        np.testing.assert_array_equal(fu["aggregated_rounds"], mask.sum(0))
        # FedAU's final weights are those of its rule driven by this very mask, round by round
        np.testing.assert_allclose(fu["omega"], H._drive(mask, C.FEDAU_K)[-1], rtol=0, atol=0)
        other = participation.markov(cl.pi, 20, s + 7, lam=cl.lam)
        assert not np.array_equal(H._drive(other, C.FEDAU_K)[-1], fu["omega"].to_numpy())


def test_fedau_run_alone_equals_fedau_run_with_the_others(small_runs):
    # runs are keyed by seed only (availability, initial model, minibatches): the pairing with stored runs of
    # the other methods holds for a FedAU run made on its own
    _, both, alone = small_runs
    key = ["seed", "round", "metric", "client"]
    a = both[both["method"] == "fedau"].set_index(key)["value"].sort_index()
    b = alone.set_index(key)["value"].sort_index()
    pd.testing.assert_series_equal(a, b, check_exact=False, rtol=1e-6, atol=1e-7)


def test_fedau_uses_unbiased_learning_rates_and_every_available_client():
    cl = C.synthetic()
    algs = C.algorithms(cl, C.LRS["synthetic"], 150, beta=0.001, methods=C.WITH_FEDAU)
    fu, ub = algs["fedau"], algs["unbiased"]
    assert fu.sampler is None and ub.sampler is None
    assert (fu.lr, fu.local_lr) == (ub.lr, ub.local_lr)
    assert isinstance(fu.aggregator.inner, aggregate.FedAUWeighted) and fu.aggregator.inner.K == 50
    assert (fu.aggregator.momentum, fu.aggregator.weight_decay) == (ub.aggregator.momentum, ub.aggregator.weight_decay)
    own = C.algorithms(cl, {**C.LRS["synthetic"], "fedau": (0.5, 0.25)}, 150, 0.001, methods=["fedau"])["fedau"]
    assert (own.local_lr, own.lr) == (0.5, 0.25)


# ----------------------------------------------------------- the CA-Fed page's stored runs are unchanged
STORED = {("synthetic", "paper", "cafed_synthetic"): "de883bf9adcf90e2",
          ("mnist", "paper", "cafed_mnist"): "07ee8b53afeb2d67",
          ("mnist", "reduced", "cafed_mnist"): "680c1d9c31ac5da8"}


@pytest.mark.parametrize("where", list(STORED), ids=["-".join(k) for k in STORED])
def test_cafed_page_configs_keep_their_keys_and_stored_runs(where):
    ds, prof, exp = where
    conf = C.run_config(exp, ds, C.profile(prof)[ds], 32 if ds == "synthetic" else 64)
    assert results.config_key(conf) == STORED[where]
    assert results.book_store("availability").done(conf)
    assert conf == dict(experiment=exp, data_seed=42, **C.profile(prof)[ds], lrs=C.LRS[ds],
                        batch_size=32 if ds == "synthetic" else 64, source=C.SOURCE)   # the page's literal dict


def test_adding_fedau_leaves_the_four_methods_unchanged():
    assert C.METHODS == ("unbiased", "f3ast", "adafed", "cafed") and "fedau" not in C.METHODS
    assert all("fedau" not in v for v in C.LRS.values())           # the learning rates are in the stored configs
    cl = C.synthetic()
    four = C.algorithms(cl, C.LRS["synthetic"], 150, beta=0.001)
    five = C.algorithms(cl, C.LRS["synthetic"], 150, beta=0.001, methods=C.WITH_FEDAU)
    assert list(four) == list(C.METHODS)
    for m in C.METHODS:
        assert repr(five[m]) == repr(four[m]), m
    confs = H.run_configs(H.profile("paper"))
    assert results.config_key(confs["cafed_synthetic"]) == STORED[("synthetic", "paper", "cafed_synthetic")]
    assert results.config_key(confs["cafed_mnist"]) == STORED[("mnist", "paper", "cafed_mnist")]
    assert len({results.config_key(c) for c in confs.values()}) == 4


# ------------------------------------------------------------------------------------ the bias measure
def test_weight_shares_and_tv_by_hand():
    cl = C.synthetic()
    N = len(cl.pi)
    w = np.zeros(N)
    w[:12] = 1.0                                                      # all weight on clients 0-11, equally
    tab = pd.DataFrame({"method": "x", "seed": 0, "round": 5, "metric": "weight_sum", "value": w,
                        "client": np.arange(N)})
    sh = H.weight_shares(tab, cl)
    np.testing.assert_allclose(sh["share"].sum(), 1.0)
    assert sh["tv"].iloc[0] == pytest.approx(0.5)                     # 1/2 (12 |1/12 - 1/24| + 12/24)
    with pytest.raises(ValueError, match="weight_sum"):
        H.weight_shares(tab.assign(metric="test_acc"), cl)


def test_profile_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown profile"):
        H.profile("huge")
    assert H.profile("paper")["synthetic"] == C.profile("paper")["synthetic"]
