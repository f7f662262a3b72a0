"""HiCS-FL theory page (document 004): Theorem 1's bound, exact inclusion probabilities, the HiCS recorder,
the label-mixture quadratics, Theorem 2 / Lemma 2 formulas, and the bias-update helper."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from flkit import aggregate, fl, models, sample
from flkit.papers.hics import theory
from flkit.tasks import EngineTask


# ------------------------------------------------------------------------------------------ Theorem 1
def test_theorem1_bound_closed_form():
    # C = 2, D_u = U, D_k = (1, 0), E = (0.3, 0.5), eta R / T = 0.4: worked by hand
    D = np.array([[0.5, 0.5], [1.0, 0.0]])
    B = theory.theorem1_bound(D, [0.3, 0.5], eta=0.1, R=2, T=0.5)
    first = 0.5 * (0.4 * 0.8 / 2) ** 2 * 0.5                 # 0.0064
    calC = 0.2 * (0.2 + 4 * 0.5 * math.log(2)) / (4 * 0.25)  # eta R (eta R + C^2 T ln C) / (C^2 T^2)
    assert B[0, 1] == pytest.approx(first - calC * 0.1, abs=1e-13)
    # u = (1, 0): ||D_u - U||_inf = 0.5; k = U: first term 0
    assert B[1, 0] == pytest.approx(-0.4 * 0.5 - calC * 0.1, abs=1e-13)


def test_theorem1_proof_form_differs_by_log_C_factor():
    rng = np.random.default_rng(0)
    D = rng.dirichlet(np.full(10, 0.3), size=6)
    E_ = rng.uniform(0.01, 0.2, size=10)
    kw = dict(eta=0.001, R=2, T=0.0025)
    bs, bp = theory.theorem1_bound(D, E_, **kw), theory.theorem1_bound(D, E_, form="proof", **kw)
    sup = np.abs(D - 0.1).max(1)
    np.testing.assert_allclose(bs - bp, (math.log(10) - 1) * 0.8 * sup[:, None] * np.ones((1, 6)), atol=1e-14)
    assert np.all(bp < bs)                   # for C = 10 the proved bound is the weaker one


def test_theorem1_bound_rejects_bad_input():
    with pytest.raises(ValueError, match="form"):
        theory.theorem1_bound(np.eye(3), np.ones(3) / 3, eta=0.1, R=1, T=1.0, form="lemma")
    with pytest.raises(ValueError, match="T must"):
        theory.theorem1_bound(np.eye(3), np.ones(3) / 3, eta=0.1, R=1, T=0.0)
    with pytest.raises(ValueError, match="D must"):
        theory.theorem1_bound(np.eye(3), np.ones(4) / 4, eta=0.1, R=1, T=1.0)


# --------------------------------------------------------------------- successive sampling, exactly
def _brute_inclusion(w, k):
    n, out = len(w), np.zeros(len(w))
    for seq in itertools.permutations(range(n), k):
        p, left = 1.0, w.sum()
        for i in seq:
            p *= w[i] / left
            left -= w[i]
        out[list(seq)] += p
    return out


@pytest.mark.parametrize("w,k", [(np.array([0.5, 1.0, 2.0, 3.5, 0.25, 1.7]), 3),
                                 (np.array([1.0, 1.0, 2.0, 2.0, 2.0, 5.0]), 2),
                                 (np.array([0.1, 0.2, 0.3, 0.4]), 4)])
def test_successive_inclusion_is_exact(w, k):
    got = theory.successive_inclusion(w, k)
    np.testing.assert_allclose(got, _brute_inclusion(w, k), atol=1e-12)
    assert got.sum() == pytest.approx(k, abs=1e-12)


def test_successive_inclusion_matches_hics_draw():
    rng = np.random.default_rng(1)
    labels = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3])
    pi, n = np.array([0.5, 0.2, 0.2, 0.1]), np.arange(1, 11, dtype=float)
    within = np.bincount(labels, weights=n)
    exact = theory.successive_inclusion(pi[labels] * n / within[labels], 4)
    draws = 20000
    freq = np.bincount(np.concatenate([sample.hics_draw(rng, labels, pi, n, 4) for _ in range(draws)]),
                       minlength=10) / draws
    se = np.sqrt(exact * (1 - exact) / draws)
    assert np.all(np.abs(freq - exact) < 5 * se + 1e-12)


def test_successive_inclusion_rejects_bad_k():
    with pytest.raises(ValueError, match="k must"):
        theory.successive_inclusion([1.0, 0.0, 2.0], 3)


# ------------------------------------------------------------------------ quadratics and Theorem 2
def _small_quad(**kw):
    q = dict(theory.PROFILES["smoke"]["quad"], rounds=15, seeds=[0, 1], eta_fracs=[0.5])
    q.update(kw)
    return q


def test_shifted_dirichlet_groups_average_to_uniform():
    D = theory.shifted_dirichlet((0.001, 0.5), 10, seed=3)
    assert D.shape == (20, 10)
    np.testing.assert_allclose(D.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(D[:10].mean(0), 0.1, atol=1e-12)
    np.testing.assert_allclose(D[10:].mean(0), 0.1, atol=1e-12)
    assert np.isfinite(D).all() and D[:10].max(1).min() > 0.99      # alpha = 0.001: one class


def test_label_quadratic_sigma2_is_exact_everywhere():
    D = theory.shifted_dirichlet((0.01, 0.5), 4, seed=0)
    task = theory.label_quadratic(D, [0.5, 1.0, 2.0, 0.25], scale=2.0)
    s2 = theory.sigma2(task)
    for w in (torch.zeros(1, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)):
        diff = task.client_grads(w) - task.grad(w).unsqueeze(-2)
        np.testing.assert_allclose((diff ** 2).sum(-1).numpy(), np.broadcast_to(s2, diff.shape[:-1]), atol=1e-12)
    assert float(task.problem.A.max()) == 2.0


def test_theorem2_constants_and_bound():
    L, R, eta = 2.0, 3, 0.01
    q = 60 * L ** 2 * R ** 2 * eta ** 2
    c = theory.theorem2_constants(L, R, eta, noise2=0.5)
    assert c["A1"] == pytest.approx(R * eta * (0.5 - q / 2), abs=1e-15)
    assert c["A2"] == pytest.approx((2 + q) / (1 - q), abs=1e-13)
    assert c["Phi"] == pytest.approx((10 * L ** 2 * R * eta ** 2 + L * eta) * 0.5 / (1 - q), abs=1e-15)
    ws = np.array([0.3, 0.2, 0.1, 0.4])
    assert theory.theorem2_bound(1.5, ws, L=L, R=R, eta=eta, noise2=0.5) == pytest.approx(
        (1.5 / c["A1"] + c["A2"] * ws.sum()) / 4 + c["Phi"], abs=1e-12)
    with pytest.raises(ValueError, match="1/\\(8 L R\\)"):
        theory.theorem2_constants(1.0, 2, 0.07)
    with pytest.raises(ValueError, match="R >= 2"):
        theory.theorem2_constants(1.0, 1, 0.01)


def test_lemma2_ratio_matches_explicit_local_steps():
    D = theory.shifted_dirichlet((0.01, 0.5), 4, seed=1)
    base = theory.label_quadratic(D, [0.5, 1.0, 1.5, 2.0])
    from flkit.tasks import QuadraticTask
    task = QuadraticTask(base.problem, local_steps=3)
    w = torch.randn(2, 4, dtype=torch.float64)
    eta = torch.tensor([0.01, 0.02], dtype=torch.float64)
    got = theory.lemma2_ratio(task, w, eta)
    A, b, s2 = task.problem.A, task.problem.b, torch.as_tensor(theory.sigma2(task))
    g2 = task.metrics(w)["grad_norm2"]
    for r in range(2):
        worst = 0.0
        for k in range(len(D)):
            th = w[r].clone()
            for step in range(1, 4):
                th = th - eta[r] * A[k] * (th - b[k])
                dev = float(((th - w[r]) ** 2).sum())
                bound = float(theory.lemma2_bound(s2[k], g2[r], R=3, eta=float(eta[r])))
                worst = max(worst, dev / bound)
        assert float(got[r]) == pytest.approx(worst, rel=1e-12)


def test_recorder_leaves_selection_unchanged_and_records_probabilities():
    q = _small_quad()
    D, task = theory.quadratic_clients(q)
    C, eta = q["classes"], 0.5 / (8 * 1.0 * q["R"])
    mk = lambda: sample.HiCS(k=q["K"], rounds=q["rounds"], bias=slice(0, C), temperature=q["temperature"],
                             lam=q["lam"], gamma0=q["gamma0"])
    rec = theory.HiCSRecorder(mk())
    algs = {"plain": fl.Algorithm(aggregate.FedAvg(), mk(), lr=eta, local_lr=eta),
            "recorded": fl.Algorithm(aggregate.FedAvg(), rec, lr=eta, local_lr=eta)}
    res = fl.run(task, algs, seeds=[0, 1], rounds=q["rounds"])
    assert torch.equal(res.final_w[:2], res.final_w[2:])                 # same draws, same models
    assert len(rec.log) == q["rounds"]
    warm = -(-len(D) // q["K"])
    for e in rec.log:
        np.testing.assert_allclose(e["omega"].sum(1), 1.0, atol=1e-12)
        if e["t"] < warm:
            assert e["mode"] == ["warmup", "warmup"] and np.isnan(e["generic"]).all()
        else:
            assert e["mode"] == ["hics", "hics"]
            np.testing.assert_allclose(e["generic"].sum(1), 1.0, atol=1e-12)
    # the first warm-up round draws uniformly from all N clients
    np.testing.assert_allclose(rec.log[0]["omega"], 1 / len(D), atol=1e-15)


def test_run_quadratic_random_sampling_term_and_bounds_hold():
    q = _small_quad()
    D, task = theory.quadratic_clients(q)
    df = theory.run_quadratic(q)
    s2 = theory.sigma2(task)
    ws = df[(df.method == "random") & (df.metric == "weighted_sigma2")].value
    np.testing.assert_allclose(ws, s2.mean(), atol=1e-15)
    bt = theory.bound_table(df, q, task)
    assert len(bt) == 4 and (bt.bound > bt.mean_grad2).all() and (bt.mean_grad2 >= bt.min_grad2).all()
    assert (bt.lemma2_max <= 1).all()


# ------------------------------------------------------------------------------ bias-update helper
def _tiny_task():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 1, 4, 4, generator=g)
    y = torch.randint(0, 3, (120,), generator=g)
    clients = [np.arange(0, 40), np.arange(40, 90), np.arange(90, 120)]
    return EngineTask(models.logreg(16, 3), x, y, clients, x[:10], y[:10], batch_size=8, epochs=2,
                      local_lr=0.05, vectorized=False)


def test_bias_updates_match_the_task_for_sgd():
    task = _tiny_task()
    w0 = task.init_params([4])
    runs = fl.Runs([4], torch.tensor([0.05]), ["x"])
    pairs, delta, _ = task.client_updates(w0, torch.ones(1, 3, dtype=torch.bool), 0, runs)
    _, bias = sample.output_layer(task)
    want = (-delta[:, bias]).double().numpy()[np.argsort(pairs[:, 1].numpy())]
    got = theory.bias_updates(task, w0, range(3), seed=4)
    np.testing.assert_allclose(got, want, atol=1e-7)
    adam = theory.bias_updates(task, w0, range(3), seed=4, opt="adam")
    assert not np.allclose(adam, got)
    other = theory.bias_updates(task, w0, range(3), seed=4, t=1)           # another minibatch order
    assert not np.allclose(other, got)
    with pytest.raises(ValueError, match="opt"):
        theory.bias_updates(task, w0, range(3), seed=4, opt="rmsprop")


# ------------------------------------------------------------------------------------------ profile
def test_profile_checks_its_values():
    assert theory.profile("smoke", seeds=[3, 4])["quad"]["seeds"] == [3, 4]
    with pytest.raises(ValueError, match="unknown profile"):
        theory.profile("huge")
    with pytest.raises(ValueError, match="repeated"):
        theory.profile("smoke", seeds=[1, 1])
    with pytest.raises(ValueError, match="reps"):
        theory.profile("smoke", reps=1)
    with pytest.raises(ValueError, match="unknown setting"):
        theory.profile("smoke", rounds=3)
