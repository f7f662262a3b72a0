"""CA-Fed and its baselines: the greedy exclusion on hand-computed cases, each baseline's weights on a hand
case, F3AST's top-k choice, the server's SGD against torch.optim.SGD, and the chapter's settings."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from flkit import aggregate, sample
from flkit.aggregate import Updates
from flkit.papers.availability import cafed as C

PI4 = np.array([0.5, 0.25, 1.0, 0.8])
Q4 = np.full(4, 0.25)


class FakeProbe:
    def __init__(self, table):
        self.table = torch.as_tensor(table, dtype=torch.float64)
        self.masks = []

    def losses(self, mask):
        self.masks.append(mask.clone())
        return torch.where(mask, self.table, torch.full_like(self.table, float("nan")))


# ------------------------------------------------------------------------------------ the error estimate
def test_cafed_error_hand_case():
    # w = pi a / sum = (0.5, 1, 0)/1.5; opt = 1/3*1 + 2/3*2 = 5/3; TV = (1/6 + 5/12 + 1/4)/2 = 5/12;
    # bias = max gap 4 * (5/12)^2 = 25/36; E = 5/3 + 25/36 = 85/36
    e = sample.cafed_error(np.array([1.0, 1.0, 0.0]), np.array([0.5, 0.25, 0.25]), np.array([0.5, 1.0, 1.0]),
                           np.array([1.0, 2.0, 4.0]), c=1.0)
    assert e == pytest.approx(85 / 36, abs=1e-14)
    e2 = sample.cafed_error(np.array([1.0, 1.0, 0.0]), np.array([0.5, 0.25, 0.25]), np.array([0.5, 1.0, 1.0]),
                            np.array([1.0, 2.0, 4.0]), c=2.0)
    assert e2 == pytest.approx(5 / 3 + 50 / 36, abs=1e-14)
    with pytest.raises(ValueError, match="no weight"):
        sample.cafed_error(np.zeros(3), np.full(3, 1 / 3), np.ones(3), np.ones(3))


# ------------------------------------------------------------------------------------ the greedy exclusion
def test_exclusion_worked_example_two_passes():
    # gaps (0, 2, 3, 3), lambda (0.2, 0.9, 0, 0.5): see cafed.worked_example's docstring for the arithmetic
    tr, a, excluded, _ = C.worked_example()
    assert excluded == [3, 2, 1]
    np.testing.assert_array_equal(a, [0.5, 0.0, 0.0, 0.0])
    assert tr["pass"].tolist() == [1, 1, 1, 1, 2, 2]
    assert tr["client"].tolist() == [1, 3, 0, 2, 1, 0]                 # |lambda| decreasing, then pi increasing
    np.testing.assert_allclose(tr["E(without k)"].to_numpy()[:5], [35 / 16, 89 / 48, 13 / 4, 7 / 4, 27 / 16],
                               rtol=0, atol=1e-14)
    assert tr["excluded"].tolist() == [False, True, False, True, True, False]
    assert np.isnan(tr["E(without k)"].iloc[5])                            # removing 0 would leave nobody


@pytest.mark.parametrize("lam, first", [((0.2, 0.9, 0.0, 0.5), 1), ((0.9, 0.2, 0.0, 0.5), 0)])
def test_exclusion_order_decides_between_equal_gaps(lam, first):
    # gaps (2, 2, 1, 1), max 2: E(all) = 3/2; dropping one gap-2 client: 4/3 + 2/16 = 35/24 < 3/2 (excluded);
    # then any second removal: mean of two kept + 2 (1/2)^2 >= 1 + 1/2 = 3/2 > 35/24 (kept). The client
    # with the larger |lambda| of the two goes.
    gap = np.array([2.0, 2.0, 1.0, 1.0])
    a, excluded = sample.cafed_allocation(Q4, PI4, np.array(lam), gap)
    assert excluded == [first]
    expect = Q4 / PI4
    expect[first] = 0.0
    np.testing.assert_array_equal(a, expect)


def test_exclusion_two_in_lambda_order():
    # gaps (3, 3, 0, 0), max 3: without 0: 1 + 3/16 < 3/2; without 0, 1: 0 + 3/4 < 19/16; without a third:
    # 0 + 3 (3/4)^2 = 27/16 > 3/4 (kept). Order of exclusion follows |lambda|.
    gap = np.array([3.0, 3.0, 0.0, 0.0])
    assert sample.cafed_allocation(Q4, PI4, np.array([0.5, 0.9, 0.0, 0.0]), gap)[1] == [1, 0]
    assert sample.cafed_allocation(Q4, PI4, np.array([0.9, 0.5, 0.0, 0.0]), gap)[1] == [0, 1]


def test_ties_exclude_and_the_last_client_stays():
    # all gaps 0: E = 0 for every allocation, every tie excludes, a pass stops when one client is left
    tr = []
    a, excluded = sample.cafed_allocation(Q4, PI4, np.array([0.9, 0.5, 0.2, 0.0]), np.zeros(4), trace=tr)
    assert excluded == [0, 1, 2]
    np.testing.assert_array_equal(a, [0, 0, 0, Q4[3] / PI4[3]])
    a, excluded = sample.cafed_allocation(Q4, PI4, np.array([0.9, 0.5, 0.2, 0.0]), np.zeros(4), tolerance=1e-9)
    assert excluded == [] and np.array_equal(a, Q4 / PI4)


def test_allocation_rejects_bad_input():
    with pytest.raises(ValueError, match="pi_k"):
        sample.cafed_allocation(Q4, np.array([0.5, 0.0, 1.0, 1.0]), np.zeros(4), np.zeros(4))
    with pytest.raises(ValueError, match="one length"):
        sample.cafed_allocation(Q4, PI4, np.zeros(3), np.zeros(4))


# ------------------------------------------------------------------------------------ the CAFed sampler
def test_cafed_sampler_loss_estimates_and_selection():
    # round 0: available clients report their loss, the unavailable one gets the mean of the available;
    # round 1: beta-smoothing for the available clients only
    s = sample.CAFed(pi=PI4, lam=(0.2, 0.9, 0.0, 0.5), optima=(0.5, 0.25, 0.5, 0.75), beta=0.25)
    state = s.init(1, 4, torch.ones(1, 4), [0])
    avail0 = torch.tensor([[True, False, True, True]])
    probe = FakeProbe([[0.5, 9.0, 3.5, 3.75]])
    counts, state = s.select(state, 0, avail0, probe)
    assert probe.masks[0].equal(avail0)
    np.testing.assert_allclose(state.loss[0], [0.5, (0.5 + 3.5 + 3.75) / 3, 3.5, 3.75], rtol=0, atol=1e-15)
    # gaps (0, 7.75/3 - 0.25, 3, 3): recompute the allocation independently and compare
    a, _ = sample.cafed_allocation(Q4, PI4, np.array([0.2, 0.9, 0.0, 0.5]),
                                   state.loss[0] - np.array([0.5, 0.25, 0.5, 0.75]))
    np.testing.assert_array_equal(state.allocation[0], a)
    assert counts.tolist() == [[int(avail0[0, k] and a[k] > 0) for k in range(4)]]
    avail1 = torch.tensor([[True, True, False, False]])
    before = state.loss.copy()
    counts, state = s.select(state, 1, avail1, FakeProbe([[1.5, 2.25, 99.0, 99.0]]))
    np.testing.assert_allclose(state.loss[0, :2], 0.25 * before[0, :2] + 0.75 * np.array([1.5, 2.25]), atol=1e-15)
    np.testing.assert_array_equal(state.loss[0, 2:], before[0, 2:])
    assert not counts[0, 2:].any()


def test_cafed_sampler_waits_for_an_available_client():
    s = sample.CAFed(pi=PI4, lam=(0, 0, 0, 0), optima=(0, 0, 0, 0))
    state = s.init(1, 4, torch.ones(1, 4), [0])
    counts, state = s.select(state, 0, torch.zeros(1, 4, dtype=torch.bool), FakeProbe(torch.zeros(1, 4)))
    assert counts.sum() == 0 and not state.started[0]


def test_cafed_sampler_validation():
    with pytest.raises(ValueError, match="pi"):
        sample.CAFed(pi=(0.5, 1.2), lam=(0, 0), optima=(0, 0))
    with pytest.raises(ValueError, match="one value per client"):
        sample.CAFed(pi=(0.5, 0.5), lam=(0,), optima=(0, 0))
    with pytest.raises(ValueError, match="beta"):
        sample.CAFed(pi=(0.5,), lam=(0,), optima=(0,), beta=1.0)
    with pytest.raises(ValueError, match="task has 3"):
        sample.CAFed(pi=(0.5, 0.5), lam=(0, 0), optima=(0, 0)).init(1, 3, torch.ones(1, 3), [0])


# ------------------------------------------------------------------------------------ F3AST
def test_f3ast_top_k_and_smoothing():
    # q = (1, 1, 2, 1, 1)/6, client 3 unavailable, k = 2.
    # s = 0: q/pi = (0.185, 1.667, 0.667, -, 1.667): clients 1 and 4 tie at the top -> {1, 4}.
    # s = 0.5: pi_hat = (0.95, 0.55, 0.75, -, 0.55), q/pi_hat = (0.175, 0.303, 0.444, -, 0.303):
    # client 2 first, then the tie 1 / 4 goes to the lower index -> {1, 2}.
    pi = (0.9, 0.1, 0.5, 0.2, 0.1)
    sizes = torch.tensor([[1.0, 1.0, 2.0, 1.0, 1.0]])
    avail = torch.tensor([[True, True, True, False, True]])
    for s, expect in ((0.0, [0, 1, 0, 0, 1]), (0.5, [0, 1, 1, 0, 0])):
        f = sample.F3AST(2, pi, s)
        counts, state = f.select(f.init(1, 5, sizes, [0]), 0, avail)
        assert counts.tolist() == [expect]
        np.testing.assert_allclose(state.pi_hat[0], (1 - s) * np.array(pi) + s * avail[0].numpy(), atol=1e-15)
    f = sample.F3AST(4, pi, 0.1)
    counts, _ = f.select(f.init(1, 5, sizes, [0]), 0, avail)
    assert counts.tolist() == [[1, 1, 1, 0, 1]]                       # |A_t| <= k: every available client
    with pytest.raises(ValueError, match="smoothness"):
        sample.F3AST(2, pi, 1.0)


# ------------------------------------------------------------------------------------ the weights
def _upd(p, sizes, pairs, delta, local=None):
    pairs = torch.tensor(pairs)
    return Updates(pairs, torch.tensor(delta, dtype=torch.float64), torch.ones(len(pairs), dtype=torch.float64),
                   int(pairs[:, 0].max()) + 1 if len(pairs) else 1, len(p[0]),
                   torch.tensor(p, dtype=torch.float64), torch.tensor(sizes, dtype=torch.float64),
                   None if local is None else torch.tensor(local, dtype=torch.float64))


def _apply(rule, upd):
    return rule.apply(rule.init(upd.R, upd.N, upd.delta.shape[1], torch.float64, "cpu"), upd)


def test_baseline_weights_hand_case():
    # q = (1, 1, 2)/4, pi = (0.5, 1, 0.25); clients 0 and 2 arrive with deltas e1 and e2.
    upd = _upd([[0.5, 1.0, 0.25]], [[1, 1, 2]], [[0, 0], [0, 2]], [[1.0, 0.0], [0.0, 1.0]])
    G, st = _apply(aggregate.InverseAvailability(), upd)
    # Unbiased, CA-Fed
    torch.testing.assert_close(G, torch.tensor([[0.5, 2.0]], dtype=torch.float64), rtol=0, atol=1e-15)
    torch.testing.assert_close(st.weight, torch.tensor([[0.5, 0.0, 2.0]], dtype=torch.float64))
    torch.testing.assert_close(st.rounds, torch.tensor([[1.0, 0.0, 1.0]], dtype=torch.float64))
    G, _ = _apply(aggregate.InverseAvailability(normalize=True), upd)        # AdaFed: (0.5, 2) / 2.5
    torch.testing.assert_close(G, torch.tensor([[0.2, 0.8]], dtype=torch.float64), rtol=0, atol=1e-15)
    G, _ = _apply(aggregate.InverseAvailability(ema=0.5), upd)               # F3AST: pi_hat = (0.75, -, 0.625)
    torch.testing.assert_close(G, torch.tensor([[1 / 3, 0.8]], dtype=torch.float64), rtol=0, atol=1e-15)


def test_unbiased_weights_equal_known_p_with_equal_sizes():
    g = torch.Generator().manual_seed(0)
    p = torch.rand(2, 5, generator=g, dtype=torch.float64) * 0.9 + 0.1
    pairs = torch.tensor([[0, 1], [0, 3], [1, 0], [1, 4]])
    delta = torch.randn(4, 3, generator=g, dtype=torch.float64)
    upd = Updates(pairs, delta, torch.ones(4, dtype=torch.float64), 2, 5, p, torch.ones(2, 5, dtype=torch.float64))
    G1, _ = _apply(aggregate.InverseAvailability(), upd)
    G2, _ = aggregate.KnownP().apply(None, upd)
    torch.testing.assert_close(G1, G2, rtol=0, atol=1e-15)


def test_inverse_availability_needs_p_and_sizes():
    upd = _upd([[0.5, 1.0]], [[1, 1]], [[0, 0]], [[1.0]])
    upd.p = None
    with pytest.raises(ValueError, match="participation probabilities"):
        _apply(aggregate.InverseAvailability(), upd)
    with pytest.raises(ValueError, match="ema"):
        aggregate.InverseAvailability(ema=1.0)


def test_server_sgd_matches_torch_sgd():
    # G_t arrives in rounds 0, 1, 3 (round 2 empty: no step, buffer kept), as torch's SGD skipping a step
    mu, wd, lr = 0.9, 1e-2, 0.3
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, generator=g, dtype=torch.float64)
    ref = torch.nn.Parameter(x.clone())
    opt = torch.optim.SGD([ref], lr=lr, momentum=mu, weight_decay=wd)
    rule = aggregate.ServerSGD(aggregate.InverseAvailability(), momentum=mu, weight_decay=wd)
    state = rule.init(1, 2, 3, torch.float64, "cpu")
    ours = x.clone()
    for t in range(4):
        delta = torch.randn(1, 3, generator=g, dtype=torch.float64)
        pairs = [] if t == 2 else [[0, 1]]
        d = delta if pairs else torch.zeros(0, 3, dtype=torch.float64)
        upd = Updates(torch.tensor(pairs, dtype=torch.long).reshape(-1, 2), d,
                      torch.ones(len(pairs), dtype=torch.float64), 1, 2,
                      torch.tensor([[0.5, 0.8]], dtype=torch.float64),
                      torch.tensor([[1.0, 3.0]], dtype=torch.float64), (ours - d) if pairs else d)
        G, state = rule.apply(state, upd)
        ours = ours - lr * G[0]
        if pairs:
            opt.zero_grad()
            ref.grad = (0.75 / 0.8) * delta[0].clone()                     # q_1 / pi_1 = (3/4) / 0.8
            opt.step()
        torch.testing.assert_close(ours, ref.detach(), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="momentum"):
        aggregate.ServerSGD(aggregate.InverseAvailability(), momentum=1.0)


# ------------------------------------------------------------------------------------ chapter code
def test_local_optimum_matches_sklearn():
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss
    cl = C.synthetic()
    x, y = cl.x[cl.clients[13]].double().numpy(), cl.y[cl.clients[13]].numpy()
    # the two-class multinomial objective with C = 1 has the minimiser of the binary one with C = 2
    m = LogisticRegression(C=2.0, tol=1e-10, max_iter=10_000).fit(x, y)
    assert C.local_optimum(x, y) == pytest.approx(log_loss(y, m.predict_proba(x)), abs=1e-7)


def test_synthetic_setting():
    cl = C.synthetic()
    assert len(cl.clients) == 24 and set(cl.sizes) == {50} and len(cl.y_test) == 24 * 150
    counts = np.bincount(cl.types, minlength=3)
    assert counts.tolist() == [12, 6, 6]
    np.testing.assert_allclose(cl.pi, np.where(cl.types == 0, 0.9, 0.1), rtol=0, atol=1e-15)
    assert np.all(cl.lam[cl.types == 1] == 0.9) and np.all(np.abs(cl.lam[cl.types != 1]) < 0.05)
    np.testing.assert_array_equal(cl.cluster, np.repeat([0, 1], 12))


def test_log_rounds_and_summary():
    r = C.log_rounds(150)
    # 1 + 13 + 15, round 20 twice
    assert r[:4].tolist() == [0, 2, 5, 8] and 38 in r and 41 not in r and r[-1] == 150 and len(r) == 28
    import pandas as pd
    t = pd.DataFrame({"method": "m", "seed": 0, "round": np.arange(11), "metric": "test_acc", "client": -1,
                      "value": np.linspace(0, 1, 11)})
    s = C.summarize(t, 10, grid="all").iloc[0]
    assert s["max"] == pytest.approx(100) and s["time_avg"] == pytest.approx(50)
    assert s["std_2nd_half"] == pytest.approx(100 * np.linspace(0.5, 1, 6).std())


def test_share_check_agrees_with_the_notes():
    cl = C.synthetic()
    out = C.share_check(cl.pi, cl.lam, 150, range(60))
    assert (out["z"].abs() <= 4).all()
    unb = out[out["rule"] == "q = alpha/pi"]
    np.testing.assert_allclose(unb["predicted"], unb["target"], atol=1e-12)


def test_profile_and_algorithms():
    with pytest.raises(ValueError, match="unknown profile"):
        C.profile("huge")
    cl = C.synthetic()
    algs = C.algorithms(cl, C.LRS["synthetic"], 150, beta=0.001)
    assert list(algs) == list(C.METHODS)
    assert algs["f3ast"].sampler.smoothness == pytest.approx(1 / 150) and algs["f3ast"].aggregator.inner.ema == 1 / 150
    assert algs["adafed"].aggregator.inner.normalize and algs["adafed"].lr == 1.0
    with pytest.raises(ValueError, match="unknown methods"):
        C.algorithms(cl, C.LRS["synthetic"], 150, beta=0.0, methods=["fedavg"])


def test_fl_run_end_to_end_small():
    # 6 rounds of the synthetic task: CA-Fed aggregates only available clients with a_k > 0; Unbiased all
    # available clients; the weight sums equal sum over rounds of q_k/pi_k for the aggregated rounds
    cl = C.synthetic()
    tab = C.run_experiment(cl, C.LRS["synthetic"], 6, [3], 0.001, 32, methods=["unbiased", "cafed"])
    per = tab[tab["client"] >= 0].pivot_table(index=["method", "client"], columns="metric", values="value")
    unb = per.loc["unbiased"]
    np.testing.assert_array_equal(unb["aggregated_rounds"], unb["available_rounds"])
    np.testing.assert_allclose(unb["weight_sum"], unb["aggregated_rounds"] * cl.q / cl.pi, rtol=1e-6)  # p in float32
    ca = per.loc["cafed"]
    assert (ca["aggregated_rounds"] <= ca["available_rounds"]).all()
    acc = tab[(tab["metric"] == "test_acc")]
    assert acc["round"].nunique() == 7 and acc["value"].between(0, 1).all()
