"""Document 001, page "Aggregation weights and the biased objective": the worked example's exact effective
weights, a two-client enumeration by hand, the closed-form minimizers, the general-q rule against flkit's
rules, the exact moment recursion against brute force, and one Monte Carlo mean against the exact one."""
from __future__ import annotations

import itertools
from fractions import Fraction as Fr

import numpy as np
import pandas as pd
import pytest
import torch

from flkit import aggregate, fl
from flkit.datasets import QuadraticProblem, quadratic_clients
from flkit.papers.availability import moments, server_step
from flkit.papers.availability import weights as W

DT = torch.float64


# ------------------------------------------------------------------------------ the worked example
def test_worked_example_notes_p_is_one_third():
    # pi q = (1/2 * 2, 1/6 * 6, 1 * 1) = (1, 1, 1), so p = pi q / sum pi q = (1, 1, 1) / 3
    assert W.biased_weights(W.EXAMPLE["pi"], W.EXAMPLE["q"]) == (Fr(1, 3),) * 3


def test_worked_example_unnormalized_expected_weights():
    pi, q = W.EXAMPLE["pi"], W.EXAMPLE["q"]
    assert W.effective_weights(pi, q, normalize=False) == (1, 1, 1)                 # pi_i q_i, per unit gamma_s
    q_ab = tuple(a / p for a, p in zip(W.EXAMPLE["alpha"], pi))
    assert q_ab == (Fr(2, 3), Fr(2), Fr(1, 3))
    assert W.effective_weights(pi, q_ab, normalize=False) == (Fr(1, 3),) * 3       # = alpha exactly


def test_worked_example_normalized_effective_weights_by_hand():
    # client 3 is always there; patterns {3}: 5/12 -> (0, 0, 1); {1,3}: 5/12 -> (2/3, 0, 1/3);
    # {2,3}: 1/12 -> (0, 6/7, 1/7); {1,2,3}: 1/12 -> (2/9, 6/9, 1/9)
    # E = (5/12*2/3 + 1/12*2/9, 1/12*6/7 + 1/12*6/9, 5/12 + 5/36 + 1/84 + 1/108) = (8/27, 8/63, 109/189)
    pi, q = W.EXAMPLE["pi"], W.EXAMPLE["q"]
    expected = (Fr(8, 27), Fr(8, 63), Fr(109, 189))
    assert W.effective_weights(pi, q, normalize=True) == expected
    q_ab = tuple(a / p for a, p in zip(W.EXAMPLE["alpha"], pi))                      # the scale of q is invisible
    assert W.effective_weights(pi, q_ab, normalize=True) == expected
    assert sum(expected) == 1 and expected != (Fr(1, 3),) * 3


def test_two_clients_normalized_by_hand():
    # pi = (1/2, 1/4), q = (1, 1): {1}: 3/8 -> (1, 0); {2}: 1/8 -> (0, 1); {1,2}: 1/8 -> (1/2, 1/2); {}: 3/8 -> 0
    assert W.effective_weights((Fr(1, 2), Fr(1, 4)), (1, 1), normalize=True) == (Fr(7, 16), Fr(3, 16))
    # pi = (1/2, 1/2), q = (1, 2): {1}: 1/4 -> (1, 0); {2}: 1/4 -> (0, 1); {1,2}: 1/4 -> (1/3, 2/3)
    # = (1/3, 5/12): not proportional to pi q = (1/2, 1) although pi is constant
    assert W.effective_weights((Fr(1, 2), Fr(1, 2)), (1, 2), normalize=True) == (Fr(1, 3), Fr(5, 12))
    assert W.biased_weights((Fr(1, 2), Fr(1, 2)), (1, 2)) == (Fr(1, 3), Fr(2, 3))


def test_weight_law_matches_exact_enumeration():
    pi, q = [0.3, 0.9, 0.55, 1.0], [1.0, 0.2, 3.0, 0.7]
    for norm in (False, True):
        masks, probs, C = W.weight_law(pi, q, normalize=norm)
        assert masks.shape == (16, 4) and probs.sum() == pytest.approx(1.0, abs=1e-15)
        assert np.allclose(probs @ C, W.effective_weights(pi, q, normalize=norm), atol=1e-15)
    P, cov = W.weight_moments(pi, q, normalize=False)
    assert np.allclose(P, np.multiply(pi, q))
    assert np.allclose(np.diag(cov), np.multiply(pi, 1 - np.asarray(pi)) * np.square(q))   # Bernoulli variances
    assert np.allclose(cov - np.diag(np.diag(cov)), 0)                                     # independent clients


def test_monte_carlo_mean_within_five_standard_errors():
    pi, q = W.EXAMPLE["pi"], W.EXAMPLE["q"]
    exact = np.array([float(v) for v in W.effective_weights(pi, q, normalize=True)])
    mean, se = W.monte_carlo_weights([float(v) for v in pi], [float(v) for v in q], 20_000, 0, normalize=True)
    assert np.all(se > 0) and np.all(np.abs(mean - exact) <= 5 * se)
    assert not np.allclose(mean, 1 / 3, atol=5 * se.max())          # and far from alpha


def test_one_aggregate_unbiased_only_unnormalized():
    prob = quadratic_clients(5, 3, 1)
    pi, alpha = np.array([0.2, 0.4, 0.6, 0.8, 1.0]), np.full(5, 0.2)
    D = prob.client_grads(torch.zeros(3, dtype=DT)).numpy()
    m, v = W.aggregate_moments(pi, alpha / pi, D, normalize=False)
    assert np.allclose(m, alpha @ D, atol=1e-14) and v > 0
    m2, _ = W.aggregate_moments(pi, alpha / pi, D, normalize=True)
    assert np.linalg.norm(m2 - alpha @ D) > 1e-3


# ------------------------------------------------------------------------------ closed forms
def test_argmin_by_hand_and_stationary():
    # 1-D: F_1 = 1/2 (w - 0)^2, F_2 = 3/2 (w - 4)^2, alpha = (1/2, 1/2): w* = (0 + 3*4) / (1 + 3) = 3
    prob = QuadraticProblem(torch.tensor([[1.0], [3.0]], dtype=DT), torch.tensor([[0.0], [4.0]], dtype=DT))
    assert float(W.argmin(prob, [0.5, 0.5])) == pytest.approx(3.0, abs=1e-15)
    assert float(W.argmin(prob, [3.0, 1.0])) == pytest.approx(2.0, abs=1e-15)     # (0 + 3*4*1) / (3 + 3)
    prob = quadratic_clients(6, 4, 3)
    a = np.array([0.1, 0.3, 0.05, 0.25, 0.2, 0.1])
    w = W.argmin(prob, a)
    grad = (torch.as_tensor(a)[:, None] * prob.client_grads(w)).sum(0)
    assert float(grad.abs().max()) <= 1e-13
    assert float(W.objective_gap(prob, a, w)) == pytest.approx(0.0, abs=1e-15)
    assert float(W.objective_gap(prob, a, w + 0.1)) > 0


def test_fairness_weights_and_full_participation_runs():
    al = W.fairness_weights([1, 3, 6])
    assert np.allclose(al["client"], 1 / 3) and np.allclose(al["sample"], [0.1, 0.3, 0.6])
    prob = quadratic_clients(5, 3, 0, mu=0.5, L=2.0)
    task = W.WeightedQuadratic(prob, sizes=(10, 200, 35, 7, 90))
    out = W.fairness_runs(task, eta=0.5, rounds=300).set_index(["method", "target"])["value"]
    assert out[("FedAvg, uniform", "client")] <= 1e-10 and out[("FedAvg, size", "sample")] <= 1e-10
    assert out[("FedAvg, uniform", "sample")] > 1e-2


def test_notes_cases_biased_weights():
    q = (1.0, 2.0, 5.0)
    assert np.allclose(W.biased_weights((1, 1, 1), q), np.divide(q, 8))               # pi = 1: p ~ q
    assert np.allclose(W.biased_weights((0.3, 0.3, 0.3), q), np.divide(q, 8))         # pi constant: p ~ q
    pi, alpha = (0.2, 0.5, 0.9), (0.5, 0.3, 0.2)
    assert np.allclose(W.biased_weights(pi, np.divide(alpha, pi)), alpha)             # q = alpha/pi: p = alpha


# ------------------------------------------------------------------------------ the rule
def _updates(R=2, N=4, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(R, N, generator=g) < 0.6
    mask[0, 0] = True
    pairs = mask.nonzero()
    delta = torch.randn(len(pairs), d, generator=g, dtype=DT)
    p = torch.tensor([0.2, 0.5, 0.7, 1.0], dtype=DT).expand(R, N)
    return aggregate.Updates(pairs, delta, torch.ones(len(pairs), dtype=DT), R, N, p=p)


def test_weighted_rule_special_cases_match_flkit_rules():
    upd = _updates()
    p = upd.p[0].numpy()
    pairs = [(aggregate.Weighted(tuple(1 / (4 * p)), False), aggregate.KnownP()),
             (aggregate.Weighted((1.0,) * 4, True), aggregate.FedAvg()),
             (aggregate.Weighted((0.25,) * 4, False), aggregate.AverageAll())]
    for ours, theirs in pairs:
        a, _ = ours.apply(ours.init(2, 4, 3, DT, "cpu"), upd)
        b, _ = theirs.apply(theirs.init(2, 4, 3, DT, "cpu"), upd)
        assert torch.allclose(a, b, atol=1e-12, rtol=0)


def test_weighted_rule_by_hand_and_errors():
    delta = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=DT)
    upd = aggregate.Updates(torch.tensor([[0, 0], [0, 2]]), delta, torch.ones(2, dtype=DT), 1, 3)
    G, _ = aggregate.Weighted((1.0, 5.0, 3.0), True).apply(None, upd)
    assert torch.allclose(G, torch.tensor([[0.25, 1.5]], dtype=DT))              # (1*d1 + 3*d2) / 4
    G, _ = aggregate.Weighted((1.0, 5.0, 3.0), False).apply(None, upd)
    assert torch.allclose(G, torch.tensor([[1.0, 6.0]], dtype=DT))
    empty = aggregate.Updates(torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, 2, dtype=DT),
                              torch.zeros(0, dtype=DT), 1, 3)
    G, _ = aggregate.Weighted((1.0, 5.0, 3.0), True).apply(None, empty)
    assert torch.equal(G, torch.zeros(1, 2, dtype=DT))                             # nobody available: stay
    with pytest.raises(ValueError, match="positive"):
        aggregate.Weighted((1.0, -1.0))
    with pytest.raises(ValueError, match="3 weights q for 4 clients"):
        aggregate.Weighted((1.0, 2.0, 3.0)).init(1, 4, 2, DT, "cpu")
    with pytest.raises(ValueError, match="local_steps=3"):
        W.WeightedQuadratic(quadratic_clients(3, 2, 0), local_steps=3)
    with pytest.raises(ValueError, match="unknown profile"):
        W.profile("huge")
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        W.effective_weights((0.0, 1.0), (1, 1), normalize=True)


# ------------------------------------------------------------------------------ exact moments of the iterates
def _brute_force(prob, pi, q, normalize, eta, rounds, w0, ref):
    """E||w_T - ref||^2 by enumerating every sequence of availability patterns."""
    masks, probs, C = W.weight_law(pi, q, normalize=normalize)
    A, b = prob.A.numpy(), prob.b.numpy()
    total = 0.0
    for path in itertools.product(range(len(probs)), repeat=rounds):
        w = np.array(w0, dtype=float)
        for k in path:
            w = w - eta * (C[k][:, None] * A * (w - b)).sum(0)
        total += np.prod(probs[list(path)]) * ((w - ref) ** 2).sum()
    return total


@pytest.mark.parametrize("normalize", [False, True])
def test_expected_sq_distance_matches_brute_force(normalize):
    prob = quadratic_clients(2, 3, 4, mu=0.5, L=2.0)
    pi, q, eta = [0.3, 0.8], [1.5, 0.5], 0.3
    w0, ref = np.array([1.0, -2.0, 0.5]), W.argmin(prob, [0.5, 0.5]).numpy()
    ex = W.expected_sq_distance(prob, pi, q, normalize=normalize, eta=eta, rounds=4, w0=w0, refs={"r": ref})["r"]
    for T in (1, 2, 4):
        assert ex[T] == pytest.approx(_brute_force(prob, pi, q, normalize, eta, T, w0, ref), rel=1e-12)
    long = W.expected_sq_distance(prob, pi, q, normalize=normalize, eta=eta, rounds=3000, w0=w0, refs={"r": ref})
    st = W.stationary_sq_distance(prob, pi, q, normalize=normalize, eta=eta, ref=ref)
    assert long["r"][-1] == pytest.approx(st["total"], rel=1e-10)
    # the mean's limit is the minimizer of sum_i P_i F_i for the exact effective weights P
    P = W.effective_weights(pi, q, normalize=normalize)
    assert np.allclose(long["m"], W.argmin(prob, P).numpy(), atol=1e-13)
    if not normalize:
        assert np.allclose(long["m"], W.argmin(prob, W.biased_weights(pi, q)).numpy(), atol=1e-13)


def test_fl_run_matches_hand_recursion():
    prob = quadratic_clients(4, 3, 2)
    task = W.WeightedQuadratic(prob)
    pi, q, eta, T = np.array([0.3, 0.6, 0.9, 1.0]), np.array([0.5, 1.0, 2.0, 0.25]), 0.1, 30
    from flkit import participation
    algs = {"u": fl.Algorithm(aggregate.Weighted(tuple(q), False), lr=eta),
            "n": fl.Algorithm(aggregate.Weighted(tuple(q), True), lr=eta)}
    res = fl.run(task, algs, seeds=[3], rounds=T, availability=lambda s: participation.bernoulli(pi, T, s),
                 every=T, diverge_factor=None)
    mask = participation.bernoulli(pi, T, 3)
    A, b = prob.A.numpy(), prob.b.numpy()
    for r, norm in enumerate((False, True)):
        w = np.zeros(3)
        for t in range(T):
            c = moments._weights_of(mask[t:t + 1], q, norm)[0]
            w = w - eta * (c[:, None] * A * (w - b)).sum(0)
        assert np.allclose(res.final_w[r].numpy(), w, atol=1e-13, rtol=0)


# ----------------------------------------------------------------------------- "variable # of clients => gamma_s small"
def _page_problem():
    P = W.profile("smoke")["problem"]
    return quadratic_clients(P["n"], P["dim"], P["seed"], heterogeneity=P["heterogeneity"], mu=P["mu"], L=P["L"]), P


def test_total_weight_moments_match_the_enumerated_law():
    pi, q = np.array([0.2, 0.5, 1.0]), np.array([3.0, 0.5, 1.0])
    masks, probs, C = W.weight_law(pi, q, normalize=False)
    S = C.sum(1)
    ES, VS = W.total_weight_moments(pi, q)
    assert ES == pytest.approx(probs @ S) and VS == pytest.approx(probs @ (S - ES) ** 2)


def test_server_step_limit_closed_form_and_stability():
    prob, P = _page_problem()
    tab = server_step.server_step_table(prob, P["n"], [1.0, 0.3, 0.05])
    np.testing.assert_allclose(tab["ratio_common"], tab["ratio_closed"], rtol=0, atol=1e-12)
    assert tab["ratio"].iloc[0] == pytest.approx(1.0, abs=1e-12) and (tab["ratio"].iloc[1:] < 1).all()
    assert (np.diff(tab["gamma_max"]) < 0).all()
    # the limit is real: the exact second-moment recursion exists just below it and not just above, although the
    # same expected update with fixed weights (the naive limit) would be stable there
    pi = W.linear_pi(P["n"], 0.05)
    q = np.full(P["n"], 1 / P["n"]) / pi
    g = tab["gamma_max"].iloc[-1]
    assert 1.01 * g < tab["gamma_fixed"].iloc[-1]
    W.stationary_sq_distance(prob, pi, q, normalize=False, eta=0.99 * g, ref=np.zeros(P["dim"]))
    with pytest.raises(ValueError, match="not mean-square stable"):
        W.stationary_sq_distance(prob, pi, q, normalize=False, eta=1.01 * g, ref=np.zeros(P["dim"]))


def test_server_step_checks_flag_a_wrong_table():
    prob, P = _page_problem()
    tab = server_step.server_step_table(prob, P["n"], [1.0, 0.3, 0.05])
    edge = pd.DataFrame([dict(fraction=0.5, eta=0.1, seed=s, round=10, metric="tail_dist2", value=1.0 + 0.01 * s)
                         for s in range(5)] + [dict(fraction=0.5, eta=0.1, seed=-1, round=10,
                                                    metric="exact_tail_dist2", value=1.02)])
    assert all(ok for ok, *_ in server_step.server_step_checks(tab, edge))
    wrong = tab.assign(ratio=1.0, ratio_common=tab["ratio_closed"] + 1e-6)     # no effect of the variable number
    far = edge.assign(value=np.where(edge["metric"] == "tail_dist2", 3 * edge["value"], edge["value"]))
    oks = [ok for ok, *_ in server_step.server_step_checks(wrong, far)]
    assert oks == [False, True, False, False]


def test_edge_runs_match_the_exact_floor():
    prob, P = _page_problem()
    task = W.WeightedQuadratic(prob)
    pi = W.linear_pi(P["n"], P["pi_min"])
    ed = server_step.edge_runs(task, pi, [0.5], rounds=400, seeds=list(range(12)))
    m = ed[ed["metric"] == "tail_dist2"]["value"]
    ex = ed[ed["metric"] == "exact_tail_dist2"]["value"].iloc[0]
    assert abs(m.mean() - ex) <= 4 * m.std(ddof=1) / np.sqrt(len(m))
    with pytest.raises(ValueError, match="fractions"):
        server_step.edge_runs(task, pi, [1.2], rounds=10, seeds=[0])
