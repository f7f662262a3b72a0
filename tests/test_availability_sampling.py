"""Document 001, sampling page: the 5/6 example, Li et al.'s two schemes, top-k, communication arithmetic."""
from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import pytest
import torch

from flkit import fl, participation
from flkit.papers.availability import sampling as S


# ------------------------------------------------------------------ 1. FedAvg among the available clients
def test_notes_example_is_five_sixths_exactly():
    ex = S.NOTES_EXAMPLE
    P = S.exact_inclusion(ex["pi"], ex["N"])
    assert P == [F(5, 6), F(5, 6), F(1, 3)]
    assert sum(P) == ex["N"]                      # N clients are picked whenever N are available
    # the package's Poisson-binomial law gives the same numbers
    np.testing.assert_allclose(participation.inclusion_probability([1, 1, 0.5], 2), [5 / 6, 5 / 6, 1 / 3],
                               rtol=0, atol=1e-15)


def test_table_reading_does_not_give_five_sixths():
    # the availabilities of the notes' table (pi = 1/2, 1/6, 1): the always-available client gets 35/36
    assert S.exact_inclusion([F(1, 2), F(1, 6), F(1)], 2)[2] == F(35, 36)


def test_inclusion_monte_carlo_within_five_standard_errors():
    f, se = S.inclusion_monte_carlo([1, 1, 0.5], 2, rounds=20_000, seed=3)
    assert np.all(np.abs(f - np.array([5 / 6, 5 / 6, 1 / 3])) <= 5 * se)
    f1, _ = S.inclusion_monte_carlo([1, 1, 0.5], 2, rounds=20_000, seed=3)
    np.testing.assert_array_equal(f, f1)          # same seed, same numbers


def test_exact_inclusion_matches_package_on_heterogeneous_population():
    pi = [F(k, 10) for k in range(1, 8)]
    for N in (1, 2, 4, 7):
        np.testing.assert_allclose([float(v) for v in S.exact_inclusion(pi, N)],
                                   participation.inclusion_probability([float(v) for v in pi], N), atol=1e-13)


def test_effective_weights_and_chi2_of_the_example():
    P = S.exact_inclusion(S.NOTES_EXAMPLE["pi"], 2)
    alpha = [F(1, 3)] * 3
    p = S.effective_weights(P, alpha)
    assert p == [F(5, 12), F(5, 12), F(1, 6)]
    assert S.chi2_divergence(alpha, p) == F(1, 5)
    assert S.effective_weights(P, [a / Pi for a, Pi in zip(alpha, P)]) == alpha   # q = alpha / P removes the bias


def test_objective_check_converges_to_biased_minimiser():
    b = [[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]]
    df = S.objective_check([1, 1, 0.5], 2, b, rounds=600, burn_in=100, lr=0.05, seeds=range(8))
    w_B = np.array([5 / 3, 2 / 3])               # sum_i p_i b_i with p = (5/12, 5/12, 1/6)
    w_T = np.array([4 / 3, 4 / 3])
    for method, target, other in (("q=1", w_B, w_T), ("q=alpha/P", w_T, w_B)):
        g = df[df["method"] == method].groupby("coord")["value"]
        m, se = g.mean().to_numpy(), g.sem().to_numpy()
        assert np.all(np.abs(m - target) <= 5 * se), (method, m, se)
        assert np.any(np.abs(m - other) > 5 * se), (method, m, se)


def test_exact_inclusion_rejects_bad_input():
    with pytest.raises(ValueError, match="N"):
        S.exact_inclusion([1, 1], 3)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        S.exact_inclusion([1, 1.5], 1)


# ------------------------------------------------------------------ 2. Li et al.'s two schemes
ALPHA4 = [F(1, 10), F(2, 10), F(3, 10), F(4, 10)]
W4 = [[1, 2, 0], [3, -1, 2], [0, 5, -4], [2, 2, 7]]


@pytest.mark.parametrize("scheme", ["I", "II"])
@pytest.mark.parametrize("N", [1, 2, 3, 4])
def test_schemes_are_unbiased_exactly(scheme, N):
    outcomes = S.enumerate_scheme(ALPHA4, N, scheme)
    assert sum(p for p, _ in outcomes) == 1
    mean, var, target = S.exact_moments(ALPHA4, N, scheme, W4)
    assert mean == target                                       # exact rational equality
    assert target == [sum(a * w[j] for a, w in zip(ALPHA4, W4)) for j in range(3)]
    # the closed-form covariance of the weights gives the same variance
    Wn = np.array(W4, dtype=float)
    closed = np.trace(Wn @ Wn.T @ S.weight_covariance([float(a) for a in ALPHA4], N, scheme))
    assert abs(float(var) - closed) <= 1e-12 * max(1.0, closed)


def test_scheme_two_without_the_factor_is_biased():
    # the notes' abbreviation read literally ("q_i = alpha_i", no M/N): biased for unequal alpha
    outcomes = S.enumerate_scheme(ALPHA4, 2, "II")
    M, N = 4, 2
    mean = [sum(p * sum(c[i] * N / M * W4[i][j] for i in range(M)) for p, c in outcomes) for j in range(3)]
    target = [sum(a * w[j] for a, w in zip(ALPHA4, W4)) for j in range(3)]
    assert mean != target


def test_scheme_one_variance_closed_form_hand_value():
    # scheme I, N draws: E||c^T W - alpha^T W||^2 = (sum_i alpha_i ||w_i||^2 - ||alpha^T W||^2) / N
    mean, var, target = S.exact_moments(ALPHA4, 2, "I", W4)
    second = sum(a * sum(v * v for v in w) for a, w in zip(ALPHA4, W4))
    assert var == (second - sum(t * t for t in target)) / 2


@pytest.mark.parametrize("scheme", ["I", "II"])
def test_schemes_monte_carlo_mean_within_five_standard_errors(scheme):
    sizes = np.array([1.0, 2.0, 3.0, 4.0])
    C = S.scheme_monte_carlo(sizes, 2, scheme, runs=8, draws_per_run=500, seed=1)
    assert C.shape == (4000, 4)
    m, se = C.mean(0), C.std(0, ddof=1) / math.sqrt(len(C))
    assert np.all(np.abs(m - sizes / sizes.sum()) <= 5 * se)
    cov = S.weight_covariance(sizes / sizes.sum(), 2, scheme)
    np.testing.assert_allclose(np.cov(C.T), cov, atol=0.15 * np.abs(cov).max())
    np.testing.assert_array_equal(C, S.scheme_monte_carlo(sizes, 2, scheme, runs=8, draws_per_run=500, seed=1))


def test_scheme_weights_and_errors():
    np.testing.assert_allclose(S.scheme_weights("I", [[2, 0, 1]], [0.2, 0.3, 0.5], 3), [[2 / 3, 0, 1 / 3]])
    np.testing.assert_allclose(S.scheme_weights("II", [[1, 0, 1]], [0.2, 0.3, 0.5], 2), [[0.3, 0, 0.75]])
    with pytest.raises(ValueError, match="scheme"):
        S.enumerate_scheme(ALPHA4, 2, "III")
    with pytest.raises(ValueError, match="alpha"):
        S.weight_covariance([0.5, 0.6], 1, "I")


# ------------------------------------------------------------------ 3. communication and top-k
def test_communication_cost_hand_case():
    assert S.model_upload_bytes(K=3, N=2, model_bytes=10) == 60
    assert S.data_upload_bytes([5, 7, 11]) == 23
    assert S.notes_practical_numbers() == dict(K=280, N=100, uploads=28_000)
    assert S.notes_practical_numbers(24, 7, 4, 500)["uploads"] == 24 * 7 * 4 * 500
    models = S.model_table()
    row = models[models["model"] == "logreg"].iloc[0]
    assert (row["params"], row["bytes"]) == (7850, 31_400)
    t = S.cost_table(models[models["model"] == "logreg"], data_bytes=47_100_000, K=280, Ns=[100])
    r = t.iloc[0]
    assert r["fl_bytes"] == 280 * 100 * 31_400
    assert r["fl_bytes_top1"] == 280 * 100 * 8 * 79      # ceil(0.01 * 7850) = 79 kept entries
    assert r["break_even_K"] == pytest.approx(47_100_000 / (100 * 31_400))
    with pytest.raises(ValueError, match="K"):
        S.model_upload_bytes(-1, 2, 3)


def test_topk_on_a_hand_vector():
    x = torch.tensor([3.0, -5.0, 1.0, 0.5, -2.0])
    assert torch.equal(S.topk(x, 2), torch.tensor([3.0, -5.0, 0.0, 0.0, 0.0]))
    assert torch.equal(S.topk(x, 3), torch.tensor([3.0, -5.0, 0.0, 0.0, -2.0]))
    assert torch.equal(S.topk(x, 5), x)
    rows = torch.stack([x, -x.flip(0)])
    assert torch.equal(S.topk(rows, 1), torch.tensor([[0.0, -5.0, 0, 0, 0], [0, 0, 0, 5.0, 0]]))
    e = S.relative_topk_error(x, 2)
    assert float(e) == pytest.approx(math.sqrt(1 + 0.25 + 4) / math.sqrt(9 + 25 + 1 + 0.25 + 4), abs=1e-7)
    np.testing.assert_allclose(S.topk_error_curve(x[None], [0.2, 0.4, 0.6, 1.0])[0],
                               [float(S.relative_topk_error(x, k)) for k in (1, 2, 3, 5)], atol=1e-12)
    assert [S.k_of(f, 7850) for f in (0.01, 0.1, 1.0)] == [79, 785, 7850]
    with pytest.raises(ValueError, match="k must be"):
        S.topk(x, 0)
    with pytest.raises(ValueError, match="frac"):
        S.k_of(1.5, 10)


def test_topk_task_sends_sparse_update_or_sparse_model():
    task = S.quadratic_clients_task([[1.0, 2.0, -3.0], [0.5, -4.0, 1.0]])
    plan = {"upd": ("update", 0.34), "mod": ("model", 0.34)}          # k = ceil(0.34 * 3) = 2
    wrapped = S.TopKTask(task, plan)
    w = torch.tensor([[0.1, 0.2, 0.3], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3]], dtype=torch.float64)
    runs = fl.Runs([0, 0, 0], torch.ones(3, dtype=torch.float64), ["upd", "mod", "dense"])
    active = torch.ones(3, 2, dtype=torch.bool)
    pairs, delta, local = wrapped.client_updates(w, active, 0, runs)
    full = task.client_updates(w, active, 0, runs)[1]                   # Delta = w - b (one gradient step)
    for k, (r, i) in enumerate(pairs.tolist()):
        if r == 0:
            assert torch.equal(delta[k], S.topk(full[k], 2))
        elif r == 1:
            assert torch.equal(local[k], S.topk(w[r] - full[k], 2))
            assert torch.allclose(delta[k], w[r] - S.topk(w[r] - full[k], 2))
        else:
            assert torch.equal(delta[k], full[k])
        assert torch.allclose(local[k], w[r] - delta[k])
    assert {(e["method"], e["what"]) for e in wrapped.log} == {("upd", "update"), ("mod", "model")}
    with pytest.raises(ValueError, match="what"):
        S.TopKTask(task, {"x": ("gradient", 0.1)})


def test_profile_rejects_unknown():
    assert set(S.profile("smoke")) == set(S.profile("paper"))
    with pytest.raises(ValueError, match="unknown profile"):
        S.profile("fast")


# ------------------------------------------------------------------------------------- counting the uploads
def test_upload_count_law_by_enumeration():
    import itertools
    pi, N = np.array([0.2, 0.5, 0.9, 0.6]), 2
    law = S.upload_count_law(pi, N)
    brute = np.zeros(N + 1)
    for a in itertools.product((0, 1), repeat=pi.size):
        brute[min(N, sum(a))] += np.prod([p if x else 1 - p for p, x in zip(pi, a)])
    np.testing.assert_allclose(law, brute, rtol=0, atol=1e-15)
    assert S.upload_count_law(np.ones(5), 3).tolist() == [0, 0, 0, 1]


def test_count_uploads_is_K_N_with_everyone_available_and_less_otherwise():
    d = S.count_uploads(8, 3, 12, 1.0, [0, 1], dim=2)
    assert (d["uploads"] == 36).all() and (d["bytes"] == 4 * 2 * 36).all() and (d["expected"] == 36).all()
    low = S.count_uploads(8, 3, 12, 0.2, [0, 1], dim=2)
    assert (low["uploads"] < 36).all() and low["expected"].iloc[0] < 36
    with pytest.raises(ValueError, match="N"):
        S.count_uploads(3, 5, 2, 1.0, [0])
