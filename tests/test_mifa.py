"""MIFA family (document 002): update rules against hand-computed rounds, unbiasedness, momentum,
FedPGD sampling, the closed-form local training against torch autograd."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from flkit import mifa

DT = torch.float64

# One round, 3 clients, d = 2 (R = 1 run). Active clients 0 and 2; p = (0.5, 0.25, 0.5).
DELTA = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]], dtype=DT)
MEMORY = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]], dtype=DT)
ACTIVE = torch.tensor([[True, False, True]])
P = torch.tensor([0.5, 0.25, 0.5], dtype=DT)


def test_fedavg_is_by_hand():
    # (1/3) * ([1,2]/0.5 + [5,6]/0.5) = (1/3) [12, 16]
    g = mifa.fedavg_is_rule(DELTA, ACTIVE, P)
    assert torch.allclose(g, torch.tensor([[4.0, 16.0 / 3]], dtype=DT))


def test_fedavg_active_by_hand_and_empty_round():
    assert torch.allclose(mifa.fedavg_rule(DELTA, ACTIVE), torch.tensor([[3.0, 4.0]], dtype=DT))
    none = torch.zeros_like(ACTIVE)
    assert torch.equal(mifa.fedavg_rule(DELTA, none), torch.zeros(1, 2, dtype=DT))


def test_mifa_by_hand():
    g, mem = mifa.mifa_rule(MEMORY, DELTA, ACTIVE)
    assert torch.equal(mem, torch.tensor([[[1.0, 2.0], [0.0, 1.0], [5.0, 6.0]]], dtype=DT))
    assert torch.allclose(g, torch.tensor([[2.0, 3.0]], dtype=DT))


def test_umifa_by_hand():
    # client 0: [1,2]/0.5 - (2-1)[1,0] = [1,4]; client 2: [5,6]/0.5 - [2,2] = [8,10]; client 1 kept
    g, mem = mifa.umifa_rule(MEMORY, DELTA, ACTIVE, P)
    assert torch.allclose(mem, torch.tensor([[[1.0, 4.0], [0.0, 1.0], [8.0, 10.0]]], dtype=DT))
    assert torch.allclose(g, torch.tensor([[3.0, 5.0]], dtype=DT))


def test_saga_by_hand():
    # estimates: y_0 + (D_0 - y_0)/0.5 = [1,4]; y_1 = [0,1]; y_2 + (D_2 - y_2)/0.5 = [8,10]; table <- raw D
    g, mem = mifa.saga_rule(MEMORY, DELTA, ACTIVE, P)
    assert torch.allclose(g, torch.tensor([[3.0, 5.0]], dtype=DT))
    assert torch.equal(mem, torch.tensor([[[1.0, 2.0], [0.0, 1.0], [5.0, 6.0]]], dtype=DT))


def test_step_and_momentum_by_hand():
    w0 = torch.tensor([[1.0, 1.0]], dtype=DT)
    st = mifa.init("mifam", w0, 3)
    assert st.memory.shape == (1, 3, 2) and torch.equal(st.memory, torch.zeros(1, 3, 2, dtype=DT))
    st.memory = MEMORY.clone()
    st.v = torch.tensor([[1.0, -1.0]], dtype=DT)
    st, diag = mifa.step("mifam", st, DELTA, ACTIVE, eta=0.1, p=P, beta=0.5)
    v1 = 0.5 * torch.tensor([1.0, -1.0], dtype=DT) + torch.tensor([2.0, 3.0], dtype=DT)      # [2.5, 2.5]
    assert torch.allclose(st.v, v1.unsqueeze(0))
    assert torch.allclose(st.w, (torch.tensor([1.0, 1.0], dtype=DT) - 0.1 * v1).unsqueeze(0))
    assert int(diag["active"]) == 2
    # second round, nobody active: G_t = mean of the table = [2, 3] again; v2 = 0.5 v1 + G
    st, _ = mifa.step("mifam", st, DELTA, torch.zeros_like(ACTIVE), eta=0.1, p=P, beta=0.5)
    v2 = 0.5 * v1 + torch.tensor([2.0, 3.0], dtype=DT)
    assert torch.allclose(st.v, v2.unsqueeze(0))
    assert torch.allclose(st.w, (torch.tensor([1.0, 1.0], dtype=DT) - 0.1 * v1 - 0.1 * v2).unsqueeze(0))
    # memory-less method without momentum: plain step
    s2 = mifa.init("fedavg_is", w0, 3)
    assert s2.memory is None and s2.v is None
    s2, _ = mifa.step("fedavg_is", s2, DELTA, ACTIVE, eta=0.1, p=P)
    assert torch.allclose(s2.w, w0 - 0.1 * torch.tensor([[4.0, 16.0 / 3]], dtype=DT))


def test_momentum_recursion_closed_form():
    # constant G (full participation, constant updates): v_t = sum_{k<t} beta^k G, w_T = w_0 - eta sum_t v_t
    beta, eta, T = 0.7, 0.05, 12
    d = torch.ones(1, 4, 3, dtype=DT) * torch.tensor([1.0, -2.0, 0.5], dtype=DT)
    act = torch.ones(1, 4, dtype=torch.bool)
    for name in ("mifam", "umifam_saga"):
        st = mifa.init(name, torch.zeros(1, 3, dtype=DT), 4)
        for _ in range(T):
            st, _ = mifa.step(name, st, d, act, eta=eta, p=1.0, beta=beta)
        G = d[0, 0]
        vs = [sum(beta ** k for k in range(t + 1)) for t in range(T)]
        assert torch.allclose(st.v[0], vs[-1] * G)
        assert torch.allclose(st.w[0], -eta * sum(vs) * G)


def _mc_one_round(rule, p, M=200_000, seed=0):
    """M independent draws of one round's participation from a fixed state (n=3, d=2)."""
    g = torch.Generator().manual_seed(seed)
    act = torch.rand(M, 3, generator=g, dtype=DT) < p
    mem = MEMORY.expand(M, -1, -1)
    delta = DELTA.expand(M, -1, -1)
    if rule == "umifa":
        _, new = mifa.umifa_rule(mem, delta, act, p)
    else:
        _, new = mifa.mifa_rule(mem, delta, act)
    return new


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_umifa_unbiased_mifa_biased(p):
    M = 200_000
    new = _mc_one_round("umifa", p, M)
    mean, sd = new.mean(0), new.std(0)
    tol = 4.5 * sd / math.sqrt(M)                  # CLT: |mean - Delta| < 4.5 standard errors
    assert torch.all((mean - DELTA[0]).abs() <= tol), (mean, DELTA[0], tol)
    # the exact variance per coordinate: (1/p - 1) (G_{t-1} - Delta)^2
    assert torch.allclose(sd ** 2, (1 / p - 1) * (MEMORY[0] - DELTA[0]) ** 2, rtol=0.05)
    newm = _mc_one_round("mifa", p, M, seed=1)
    meanm, sdm = newm.mean(0), newm.std(0)
    bias = (1 - p) * (MEMORY[0] - DELTA[0])         # E[G_t^(i)] - Delta = (1-p)(G_{t-1} - Delta)
    assert torch.all((meanm - DELTA[0] - bias).abs() <= 4.5 * sdm / math.sqrt(M) + 1e-12)
    assert (meanm - DELTA[0]).abs().max() > 20 * (4.5 * sdm.max() / math.sqrt(M))  # bias >> MC error


def test_literal_umifa_table_error_multiplies_by_one_minus_inverse_p():
    # fixed Delta: G_t - Delta = (1 - 1/p)(G_{t-1} - Delta) for an active client
    p = 0.2
    _, new = mifa.umifa_rule(MEMORY, DELTA, torch.ones(1, 3, dtype=torch.bool), p)
    assert torch.allclose(new - DELTA, (1 - 1 / p) * (MEMORY - DELTA))
    assert mifa.umifa_growth_rate(0.2) > 0 > mifa.umifa_growth_rate(0.8)
    assert mifa.umifa_growth_rate(0.5) == 0.0


def test_fedpgd_samples_exactly_b_and_shares_masks():
    task = mifa.symmetric_quadratic(8, dim=3, seed=0)
    res = mifa.simulate(task, ["fedpgd", "fedgd", "mifa", "fedavg"], seeds=[0, 1, 2], eta=0.1, p=3 / 8, b=3,
                        rounds=40, every=40)
    assert np.all(res.evals["fedpgd"] == 3 * 40)
    assert np.all(res.evals["fedgd"] == 8 * 40)
    assert np.array_equal(res.evals["mifa"], res.evals["fedavg"])     # same clients on the same rounds
    masks = mifa.uniform_k_masks([0, 1], 3, 50, 8)
    assert torch.all(masks.sum(-1) == 3)


def test_quadratic_local_steps_closed_form():
    task = mifa.quadratic_task(n=4, dim=3, seed=1, local_steps=3)
    w = torch.randn(2, 3, dtype=DT)
    eta = torch.tensor([0.05, 0.1], dtype=DT)
    got = task.updates(w, torch.ones(2, 4, dtype=torch.bool), eta)
    for r in range(2):
        for i in range(4):
            x = w[r].clone()
            for _ in range(3):
                x = x - eta[r] * task.problem.A[i] * (x - task.problem.b[i])
            assert torch.allclose(got[r, i], (w[r] - x) / eta[r])
    one = mifa.quadratic_task(n=4, dim=3, seed=1)
    assert torch.allclose(one.updates(w, None, eta), one.problem.client_grads(w))


def test_gap_is_exact_quadratic_form():
    task = mifa.quadratic_task(n=5, dim=4, seed=2)
    w = torch.randn(3, 4, dtype=DT)
    gap = task.metrics(w)["gap"]
    assert torch.allclose(gap, task.problem.f(w) - task.problem.f_star, atol=1e-12)


def test_symmetric_quadratic_has_exact_client_variance():
    task = mifa.symmetric_quadratic(6, dim=4, seed=0, sigma_G2=2.0)
    w = torch.randn(5, 4, dtype=DT)
    dev = task.client_grads(w) - task.grad(w).unsqueeze(-2)
    assert torch.allclose((dev ** 2).sum(-1), torch.full((5, 6), 2.0, dtype=DT))
    assert math.isclose(task.sigma_G2, 2.0)
    # the global objective does not depend on n
    t2 = mifa.symmetric_quadratic(12, dim=4, seed=0, sigma_G2=2.0)
    assert torch.allclose(task.grad(w), t2.grad(w))


def _tiny_softmax_task():
    g = torch.Generator().manual_seed(0)
    n, m, D, C = 2, 7, 5, 3
    x = torch.rand(n, m, D, generator=g)
    x[:, :, 1] = 0.0                          # a column that is zero for every sample
    x[0, :, 3] = 0.0                          # ... and one that is zero for client 0 only
    x = torch.cat([x, torch.ones(n, m, 1)], -1)
    y = torch.randint(0, C, (n, m), generator=g)
    return mifa.SoftmaxTask(x=x, y=y, x_test=x[0], y_test=y[0], num_classes=C, epochs=2, batch_size=3,
                            weight_decay=0.01)


def test_softmax_local_sgd_matches_torch_autograd():
    task = _tiny_softmax_task()
    g = torch.Generator().manual_seed(1)
    n, m, D1 = task.x.shape
    C, G = task.num_classes, 2
    W0 = 0.3 * torch.randn(n, D1, G * C, generator=g)
    perms = torch.argsort(torch.rand(n, task.epochs, m, generator=g), -1)
    out = task.local_sgd(W0, torch.arange(n), perms, 0.2)
    for i in range(n):
        for k in range(G):
            lin = torch.nn.Linear(D1 - 1, C)
            with torch.no_grad():
                lin.weight.copy_(W0[i, :-1, k * C:(k + 1) * C].T)
                lin.bias.copy_(W0[i, -1, k * C:(k + 1) * C])
            opt = torch.optim.SGD(lin.parameters(), lr=0.2, weight_decay=0.01)
            for e in range(task.epochs):
                for s0 in range(0, m, task.batch_size):
                    idx = perms[i, e, s0:s0 + task.batch_size]
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(lin(task.x[i, idx, :-1]), task.y[i, idx]).backward()
                    opt.step()
            ref = torch.cat([lin.weight.detach().T, lin.bias.detach().unsqueeze(0)])
            assert torch.allclose(out[i, :, k * C:(k + 1) * C], ref, atol=1e-5)


def test_softmax_updates_shared_across_methods_and_objective():
    task = _tiny_softmax_task()
    d = task.dim
    w = 0.1 * torch.randn(2, d)                            # 2 method blocks x 1 run
    act = torch.tensor([[True, False], [True, True]])
    delta = task.updates(w, act, torch.tensor(0.1), seeds=[3], t=0, groups=2)
    assert delta.shape == (2, 2, d)
    # block 0 client 0 equals the update computed alone (same minibatch order for the same seed/round)
    alone = task.updates(w[:1], act[:1], torch.tensor(0.1), seeds=[3], t=0, groups=1)
    assert torch.allclose(delta[0, 0], alone[0, 0], atol=1e-6)
    assert torch.equal(delta[0, 1], torch.zeros(d))           # inactive in block 0: zero in the dense form
    # objective against a direct computation
    W = w.view(2, -1, task.num_classes)
    X, Y = task.x.reshape(-1, task.x.shape[-1]), task.y.reshape(-1)
    ref = torch.stack([torch.nn.functional.cross_entropy(X @ W[k], Y) + 0.005 * (W[k] ** 2).sum() for k in range(2)])
    assert torch.allclose(task.metrics(w)["loss"].float(), ref, atol=1e-5)


def test_simulate_declares_divergence_with_inf():
    task = mifa.quadratic_task(n=10, dim=4, seed=0)
    res = mifa.simulate(task, ["umifa", "umifa_saga"], seeds=[0, 1], eta=0.02, p=0.1, rounds=3000, every=100)
    assert np.all(res.diverged["umifa"] > 0)                  # literal U-MIFA blows up at p = 0.1
    assert np.all(res.diverged["umifa_saga"] == -1)
    assert np.isinf(res.values["umifa"]["gap"][-1]).all()
    df = res.tidy()
    assert set(df.columns) >= {"method", "run", "round", "metric", "value"}


@pytest.mark.parametrize("name", ["fedavg_is", "fedavg", "mifa", "umifa", "mifam", "umifam", "umifa_saga", "umifam_saga"])
def test_sparse_step_matches_dense_step(name):
    g = torch.Generator().manual_seed(5)
    R, n, d, T = 3, 6, 4, 25
    p = torch.full((R, n), 0.3, dtype=DT)
    dense = mifa.init(name, torch.zeros(R, d, dtype=DT), n)
    sparse = mifa.init(name, torch.zeros(R, d, dtype=DT), n)
    for t in range(T):
        act = torch.rand(R, n, generator=g) < 0.3
        delta = torch.randn(R, n, d, generator=g, dtype=DT)
        dense, _ = mifa.step(name, dense, delta, act, eta=0.05, p=p, beta=0.6)
        rows, cols = act.nonzero(as_tuple=True)
        sparse, _ = mifa.step_sparse(name, sparse, rows, cols, delta[rows, cols], eta=0.05, p=p, beta=0.6,
                                     resync=(t % 7 == 0))
        assert torch.allclose(dense.w, sparse.w, atol=1e-10)
        if dense.memory is not None:
            assert torch.allclose(dense.memory, sparse.memory, atol=1e-10)


def test_simulate_softmax_sparse_path_matches_dense_rules():
    task = _tiny_softmax_task()
    seeds, T, p = [0, 1], 4, 0.5
    meths = ["mifa", "umifa_saga", "fedavg_is"]
    res = mifa.simulate(task, meths, seeds=seeds, eta=0.1, p=p, rounds=T, every=T)
    mask = mifa.bernoulli_masks(seeds, p, T, task.n)
    states = [mifa.init(m, torch.zeros(2, task.dim), task.n) for m in meths]
    pr = torch.full((2, task.n), p)
    for t in range(T):
        w_all = torch.cat([s.w for s in states])
        delta = task.updates(w_all, mask[:, t].repeat(len(meths), 1), torch.tensor(0.1), seeds * len(meths), t,
                             groups=len(meths)).view(len(meths), 2, task.n, -1)
        states = [mifa.step(m, s, delta[j], mask[:, t], eta=0.1, p=pr)[0] for j, (m, s) in enumerate(zip(meths, states))]
    ref = task.metrics(torch.cat([s.w for s in states]))["loss"].view(len(meths), 2)
    for j, m in enumerate(meths):
        assert np.allclose(res.values[m]["loss"][-1], ref[j].numpy(), atol=1e-6)


def test_quadratic_sparse_simulation_matches_dense():
    task = mifa.symmetric_quadratic(16, dim=4, seed=0, lam=0.5, center_scale=2.0)
    kw = dict(seeds=[0, 1], eta=0.1, p=1 / 16, rounds=200, every=50, b=1,
              mask=mifa.uniform_k_masks([0, 1], 1, 200, 16))
    meths = ["mifa", "umifa_saga", "fedpgd", "fedgd", "umifam"]
    a = mifa.simulate(task, meths, sparse=False, **kw)
    b = mifa.simulate(task, meths, sparse=True, **kw)
    for m in meths:
        x, y = a.values[m]["grad_norm2"], b.values[m]["grad_norm2"]
        fin = np.isfinite(x)
        assert np.array_equal(fin, np.isfinite(y))
        assert np.allclose(x[fin], y[fin], rtol=1e-8, atol=1e-12)
    # fast global gradient = mean of the clients' gradients
    w = torch.randn(3, 4, dtype=DT)
    assert torch.allclose(task.grad(w), task.client_grads(w).mean(-2))
