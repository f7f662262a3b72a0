"""MIFA family (document 002): update rules against hand-computed rounds, unbiasedness, momentum,
FedPGD sampling, the closed-form local training against torch autograd."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from flkit import aggregate, fl, sample, tasks
from flkit.papers.mifa import common, experiments, items, methods

DT = torch.float64

def test_umifa_growth_rate():
    assert experiments.umifa_growth_rate(0.2) > 0 > experiments.umifa_growth_rate(0.8)
    assert experiments.umifa_growth_rate(0.5) == 0.0
    assert experiments.umifa_growth_rate(0.2) == pytest.approx(0.2 * math.log(4.0))


def test_methods_map_to_aggregate_rules():
    from flkit import aggregate as agg
    assert methods.METHODS["fedavg_is"].aggregator() == agg.KnownP()
    assert methods.METHODS["umifam_saga"].aggregator(0.5) == agg.Momentum(agg.UMIFA("saga"), 0.5)
    assert methods.METHODS["fedpgd"].aggregator() == agg.FedAvg()


def test_fedpgd_samples_exactly_b_and_shares_masks():
    task = tasks.symmetric_quadratic(8, dim=3, seed=0)
    res = methods.simulate(task, ["fedpgd", "fedgd", "mifa", "fedavg"], seeds=[0, 1, 2], eta=0.1, p=3 / 8, b=3,
                        rounds=40, every=40)
    assert np.all(res.evals["fedpgd"] == 3 * 40)
    assert np.all(res.evals["fedgd"] == 8 * 40)
    assert np.array_equal(res.evals["mifa"], res.evals["fedavg"])     # same clients on the same rounds
    masks = methods.uniform_k_masks([0, 1], 3, 50, 8)
    assert torch.all(masks.sum(-1) == 3)


def test_quadratic_local_steps_closed_form():
    task = tasks.quadratic_task(n=4, dim=3, seed=1, local_steps=3)
    w = torch.randn(2, 3, dtype=DT)
    eta = torch.tensor([0.05, 0.1], dtype=DT)
    got = task.updates(w, torch.ones(2, 4, dtype=torch.bool), eta)
    for r in range(2):
        for i in range(4):
            x = w[r].clone()
            for _ in range(3):
                x = x - eta[r] * task.problem.A[i] * (x - task.problem.b[i])
            assert torch.allclose(got[r, i], (w[r] - x) / eta[r])
    one = tasks.quadratic_task(n=4, dim=3, seed=1)
    assert torch.allclose(one.updates(w, None, eta), one.problem.client_grads(w))


def test_gap_is_exact_quadratic_form():
    task = tasks.quadratic_task(n=5, dim=4, seed=2)
    w = torch.randn(3, 4, dtype=DT)
    gap = task.metrics(w)["gap"]
    assert torch.allclose(gap, task.problem.f(w) - task.problem.f_star, atol=1e-12)


def test_symmetric_quadratic_has_exact_client_variance():
    task = tasks.symmetric_quadratic(6, dim=4, seed=0, sigma_G2=2.0)
    w = torch.randn(5, 4, dtype=DT)
    dev = task.client_grads(w) - task.grad(w).unsqueeze(-2)
    assert torch.allclose((dev ** 2).sum(-1), torch.full((5, 6), 2.0, dtype=DT))
    assert math.isclose(task.sigma_G2, 2.0)
    # the global objective does not depend on n
    t2 = tasks.symmetric_quadratic(12, dim=4, seed=0, sigma_G2=2.0)
    assert torch.allclose(task.grad(w), t2.grad(w))


def _tiny_softmax_task():
    g = torch.Generator().manual_seed(0)
    n, m, D, C = 2, 7, 5, 3
    x = torch.rand(n, m, D, generator=g)
    x[:, :, 1] = 0.0                          # a column that is zero for every sample
    x[0, :, 3] = 0.0                          # ... and one that is zero for client 0 only
    x = torch.cat([x, torch.ones(n, m, 1)], -1)
    y = torch.randint(0, C, (n, m), generator=g)
    return tasks.SoftmaxTask(x=x, y=y, x_test=x[0], y_test=y[0], num_classes=C, epochs=2, batch_size=3,
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
    task = tasks.quadratic_task(n=10, dim=4, seed=0)
    res = methods.simulate(task, ["umifa", "umifa_saga"], seeds=[0, 1], eta=0.02, p=0.1, rounds=3000, every=100)
    assert np.all(res.diverged["umifa"] > 0)                  # literal U-MIFA blows up at p = 0.1
    assert np.all(res.diverged["umifa_saga"] == -1)
    assert np.isinf(res.values["umifa"]["gap"][-1]).all()
    df = res.tidy()
    assert set(df.columns) >= {"method", "run", "round", "metric", "value"}


def test_simulate_softmax_matches_a_plain_loop():
    """methods.simulate (through flkit.fl) against the rules written out here, on the closed-form trainer."""
    task = _tiny_softmax_task()
    seeds, T, p, eta = [0, 1], 4, 0.5, 0.1
    meths = ["mifa", "umifa_saga", "fedavg_is"]
    res = methods.simulate(task, meths, seeds=seeds, eta=eta, p=p, rounds=T, every=T)
    mask = methods.bernoulli_masks(seeds, p, T, task.n)
    w = torch.zeros(len(meths), 2, task.dim)
    table = torch.zeros(len(meths), 2, task.n, task.dim)
    for t in range(T):
        delta = task.updates(w.view(-1, task.dim), mask[:, t].repeat(len(meths), 1), torch.tensor(eta),
                             seeds, t, groups=len(meths)).view(len(meths), 2, task.n, -1)
        a = mask[:, t].unsqueeze(-1)
        G = [None] * 3
        table[0] = torch.where(a, delta[0], table[0])                          # MIFA
        G[0] = table[0].mean(1)
        G[1] = (table[1] + torch.where(a, (delta[1] - table[1]) / p, 0.0)).mean(1)   # SAGA/U-MIFA
        table[1] = torch.where(a, delta[1], table[1])
        G[2] = torch.where(a, delta[2] / p, 0.0).sum(1) / task.n                # FedAvg (IS)
        w = w - eta * torch.stack(G)
    ref = task.metrics(w.view(-1, task.dim))["loss"].view(len(meths), 2)
    for j, m in enumerate(meths):
        assert np.allclose(res.values[m]["loss"][-1], ref[j].numpy(), atol=1e-6)


def test_global_gradient_is_mean_of_client_gradients():
    task = tasks.symmetric_quadratic(16, dim=4, seed=0, lam=0.5, center_scale=2.0)
    w = torch.randn(3, 4, dtype=DT)
    assert torch.allclose(task.grad(w), task.client_grads(w).mean(-2))


def test_heterogeneous_quadratic_keeps_the_global_objective():
    het, sym = tasks.heterogeneous_quadratic(16, 8, 0, h=0.8), tasks.symmetric_quadratic(16, 8, 0)
    A, H = het.problem.A, sym.problem.A[0]
    assert torch.allclose(A.mean(0), H, atol=1e-14)                       # same global Hessian
    assert not torch.allclose(A, A[:1].expand_as(A))                      # but different client Hessians
    assert torch.allclose((A / H - 1).abs(), torch.full_like(A, 0.8))    # curvatures (1 -+ h) H_jj
    assert torch.allclose(het.problem.w_star, sym.problem.w_star, atol=1e-12)
    w = torch.randn(4, 8, dtype=DT)
    assert torch.allclose(het.metrics(w)["gap"], sym.metrics(w)["gap"], atol=1e-12)
    g = het.problem.client_grads(het.problem.w_star)
    assert torch.allclose((g * g).sum(-1), torch.ones(16, dtype=DT))     # sigma_G^2 = 1 at the optimum
    assert het.L == pytest.approx(1.8)
    with pytest.raises(ValueError, match="h"):
        tasks.heterogeneous_quadratic(16, 8, 0, h=1.0)


def test_flat_quadratic_is_not_strongly_convex_and_gd_gap_falls_like_one_over_T():
    task = tasks.flat_quadratic(8, 32, 0, zeros=2, lam_min=1e-5)
    P = task.problem
    assert P.mu == 0.0 and torch.isfinite(P.w_star).all()
    assert torch.all(P.A[:, :2] == 0)
    g = P.client_grads(P.w_star)
    dev = g - g.mean(0)
    assert torch.allclose((dev * dev).sum(-1), torch.full((8,), 0.1, dtype=DT))
    # exact GD: the gap after T steps from w0 = 0 is 1/2 sum_j lam_j (1 - eta lam_j)^(2T) (w*_j)^2; ~ 1/T
    H, ws = task._H, P.w_star
    gap = lambda T: float(0.5 * (H * ((1 - H) ** T * ws) ** 2).sum())    # noqa: E731
    assert math.log10(gap(100) / gap(1000)) == pytest.approx(1.0, abs=0.05)
    assert float(task.metrics(torch.zeros(1, 32, dtype=DT))["gap"][0]) == pytest.approx(0.5 * float(H.sum()))


def test_tuned_momentum_checks_pick_the_best_beta_and_pair_seeds():
    import pandas as pd
    rows = []
    for s in range(4):
        for b, base in ((0.0, 100), (0.5, 50), (0.9, 80)):
            rows.append(("mifam", b, s, base + s))
            rows.append(("umifam_saga", b, s, base / 2 + s))
        rows.append(("umifam", 0.5, s, np.inf))
    tab = pd.DataFrame(rows, columns=["method", "beta", "seed", "value"])
    best = common.best_betas(tab[tab["beta"] > 0])
    assert list(best.index) == ["mifam", "umifam_saga"]                      # umifam: never finite
    assert best.loc["mifam", "beta"] == 0.5 and best.loc["mifam", "median"] == 51.5
    out = items.tuned_momentum_checks(tab, "t", "rounds")
    q, b = out["Question: can we speed things up with momentum?"], out["Claim: U-MIFAm works better in practice"]
    assert [c.verdict for c in q] == ["confirmed", "confirmed"] and len(b) == 1
    assert b[0].verdict == "confirmed"
    assert b[0].ours == pytest.approx(np.mean(np.log10(50 + np.arange(4)) - np.log10(25 + np.arange(4))))


def test_epsilon_checks_rules():
    import pandas as pd
    expo = pd.DataFrame([("gap", "fedgd", 1.0, 1.1), ("gap", "fedpgd", 2.0, 1.5),
                         ("grad_norm2", "fedgd", 1.0, 0.5), ("grad_norm2", "fedpgd", 2.0, 2.3)],
                        columns=["criterion", "method", "table exponent", "measured exponent"])
    out = items.epsilon_checks(expo)
    assert [c.verdict for c in out["Convex table: epsilon-dependence of the complexities"]] == ["agrees", "differs"]
    assert [c.verdict for c in out["Non-convex table: epsilon-dependence of the complexities"]] == ["agrees", "differs"]


def test_finding_words_follow_the_checks():
    from flkit.papers import claims
    item = "Question: can we speed things up with momentum?"
    checks = {item: [
        claims.holds("p=0.01: MIFAm: momentum speeds it up", False, "r"),
        claims.holds("p=0.1: MIFAm: momentum speeds it up", True, "r"),
        claims.holds("p=0.1: U-MIFAm: momentum speeds it up", True, "r"),
        claims.compare("Fig. 2, p=0.1: MIFAm at its best beta 0.7", [2, 3, 4], [1, 2, 3]),
        claims.compare("Fig. 1, p=0.01: MIFAm at its best beta 0.3", [1, 2, 3], [2, 3, 4]),
        claims.compare("Fig. 3, p=0.5, beta=0.5: MIFAm at its best beta 0.8", [1, 2, 3], [1.1, 1.9, 3.0])]}
    hold = common.outcomes(checks, item, "MIFAm: momentum")
    assert hold == {0.01: "differs", 0.1: "agrees"}                 # the U-MIFAm check is not matched
    paired = common.outcomes(checks, item, "MIFAm at its best")
    assert paired == {0.1: "confirmed", 0.01: "contradicted", 0.5: "not testable at this scale"}
    assert common.where(paired, hold) == [0.1] and common.where(paired, ok=("contradicted",)) == [0.01]
    assert common.p_words([0.1], [0.01, 0.1, 0.5]) == "p = 0.1"
    assert common.p_words([0.5, 0.01], [0.01, 0.1, 0.5]) == "p = 0.01 and 0.5"
    assert common.p_words([0.01, 0.1, 0.5], [0.01, 0.1, 0.5]) == "every p" and common.p_words([], [0.1]) == "no p"
    assert common.item_word(checks, item, "all", "none", "some") == "some"
    assert common.item_word({item: checks[item][1:2]}, item, "all", "none") == "all"
    assert common.check_word({"x": [claims.compare("a b", [1, 2], [1.1, 1.9])]}, "x", "a", "y", "n", "u") == "u"
    assert common.and_list(["a", "b", "c"]) == "a, b and c" and common.and_list([]) == ""
    with pytest.raises(ValueError, match="starts with"):
        common.outcomes(checks, item, "FedAvg")
    assert (common.outcomes(checks, item, "FedAvg", required=False) == {}
            == common.outcomes(checks, "Fig. 9", "a", False))
    with pytest.raises(ValueError, match="no checks under item"):
        common.item_word(checks, "Fig. 9", "a", "b")


def test_diverged_runs_and_claim_word():
    import pandas as pd
    df = pd.DataFrame([("umifa", 0, 1, 1.0), ("umifa", 0, 2, np.inf), ("umifa", 1, 1, 1.0), ("mifa", 0, 1, np.nan),
                       ("umifa", 1, 1, np.inf)], columns=["method", "seed", "round", "value"]).assign(metric="gap")
    assert common.diverged_runs(df, ["umifa"]) == (2, 2) and common.diverged_runs(df, ["mifa", "umifa"]) == (3, 3)
    assert common.diverged_runs(df[df["value"] < 2], ["umifa"]) == (0, 2)
    every = [0.01, 0.1, 0.5]
    assert (common.umifam_claim_word([], [0.01, 0.1], every)
            == "holds only in the SAGA-memory reading, and only at p = 0.01 and 0.1")
    assert common.umifam_claim_word([], every, every) == "holds only in the SAGA-memory reading"
    assert common.umifam_claim_word([], [], every) == "holds in neither reading"
    assert common.umifam_claim_word([0.5], [], every) == "holds for U-MIFAm as written at p = 0.5"


def test_momentum_answer():
    every = [0.01, 0.1, 0.5]
    assert common.momentum_answer([0.1, 0.5], every) == "Yes where enough clients participate"
    assert common.momentum_answer([0.01, 0.1], every) == "Yes at p = 0.01 and 0.1"
    assert common.momentum_answer(every, every) == "Yes, at every p" and common.momentum_answer([], every) == "No"


def _zerosarah_reference(A, B, lam_task, x0, eta, idx, lam, lam0):
    """ZeroSARAH written out for one run in numpy: idx[t] = the clients of round t. Returns x_0..x_T and
    v_0..v_{T-1}."""
    n, d = A.shape

    def g(i, w):
        out = A[i] * (w - B[i])
        return out + lam_task * 2 * w / (1 + w * w) ** 2 if lam_task else out
    x, xp, v, y = x0.copy(), x0.copy(), np.zeros(d), np.zeros((n, d))
    xs, vs = [x.copy()], []
    for t, S in enumerate(idx):
        lt = lam0 if t == 0 else lam
        diff = np.mean([g(i, x) - g(i, xp) for i in S], axis=0)
        corr = np.mean([g(i, xp) - y[i] for i in S], axis=0) + y.mean(0)
        v = diff + (1 - lt) * v + lt * corr
        for i in S:
            y[i] = g(i, x)
        xp, x = x, x - eta * v
        xs.append(x.copy())
        vs.append(v.copy())
    return np.array(xs), np.array(vs)


def _zerosarah(task, etas, mask, lam=None, lam0=1.0, w0=None, rule=None):
    """ZeroSARAH through flkit.fl.run, one algorithm per run r (step etas[r], clients mask[r] (T, n))."""
    rule = rule or aggregate.ZeroSARAH(lam, lam0)
    algs = {r: fl.Algorithm(rule, lr=float(e), local_lr=float(e), availability=mask[r].numpy())
            for r, e in enumerate(etas)}
    return fl.run(task, algs, seeds=[0], rounds=mask.shape[1], w0=w0, every=1)


@pytest.mark.parametrize("lam_task", [0.0, 1.0])
def test_zerosarah_matches_a_plain_loop(lam_task):
    task = tasks.heterogeneous_quadratic(6, 3, 0, mu=0.2, L=1.0, sigma_G2=1.0, h=0.5, lam=lam_task)
    A, B = task.problem.A.numpy(), task.problem.b.numpy()
    seeds, etas, T, b = [0, 1, 2, 0], np.array([0.3, 0.1, 0.5, 0.05]), 25, 2
    mask = methods.uniform_k_masks(seeds, b, T, 6)
    res = _zerosarah(task, etas, mask, lam=0.3, lam0=0.8)
    for r in range(len(seeds)):
        idx = [np.flatnonzero(mask[r, t].numpy()) for t in range(T)]
        xs, _ = _zerosarah_reference(A, B, lam_task, np.zeros(3), etas[r], idx, 0.3, 0.8)
        g = np.array([task.grad(torch.as_tensor(x)[None]).pow(2).sum().item() for x in xs])
        np.testing.assert_allclose(res.values[r]["grad_norm2"][:, 0], g, rtol=1e-12, atol=1e-15)
        assert res.evals[r] == b * T                                    # client updates, as fl.run counts them
    sim = methods.simulate(task, ["zerosarah"], seeds=seeds, eta=etas, p=b / 6, mask=mask, rounds=T)
    assert np.all(sim.evals["zerosarah"] == b + 2 * b * (T - 1))        # 2 gradients per participation


@pytest.mark.parametrize("lam", [1.0, 0.25])
def test_zerosarah_with_all_clients_is_gradient_descent(lam):
    # b = n: the estimate is the full gradient, v_t = grad f(x_t) for every t (lam0 = 1, any lam)
    task = tasks.heterogeneous_quadratic(4, 3, 1, mu=0.2, L=1.0, sigma_G2=1.0, h=0.5, lam=1.0)
    A, B = task.problem.A.numpy(), task.problem.b.numpy()
    T, eta = 30, 0.2
    idx = [np.arange(4)] * T
    xs, vs = _zerosarah_reference(A, B, 1.0, np.ones(3), eta, idx, lam, 1.0)
    for x, v in zip(xs[:-1], vs):
        np.testing.assert_allclose(v, task.grad(torch.as_tensor(x)[None])[0].numpy(), rtol=1e-12, atol=1e-14)
    w = torch.ones(1, 3, dtype=DT)
    for _ in range(T):
        w = w - eta * task.grad(w)
    res = _zerosarah(task, [eta, eta], torch.ones(2, T, 4, dtype=torch.bool), lam=lam, w0=torch.ones(3, dtype=DT))
    gd = task.grad(w).pow(2).sum().item()
    np.testing.assert_allclose([res.values[r]["grad_norm2"][-1, 0] for r in (0, 1)], [gd, gd], rtol=1e-10)


def test_zerosarah_waits_out_a_round_without_clients():
    """A run that receives nothing keeps its state and its model (G = 0), and its first round with clients is its
    round 0 (lambda_0, x_{-1} = x_0): the run equals the plain loop over its rounds with clients."""
    task = tasks.heterogeneous_quadratic(6, 3, 0, mu=0.2, L=1.0, sigma_G2=1.0, h=0.5, lam=1.0)
    A, B = task.problem.A.numpy(), task.problem.b.numpy()
    mask = methods.uniform_k_masks([3], 2, 12, 6)
    mask[0, [0, 1, 5, 6, 7]] = False
    res = _zerosarah(task, [0.3], mask, lam=0.3, lam0=0.8)
    idx = [np.flatnonzero(m) for m in mask[0].numpy() if m.any()]
    xs, _ = _zerosarah_reference(A, B, 1.0, np.zeros(3), 0.3, idx, 0.3, 0.8)
    keep = np.r_[0, 0, 0, 1, 2, 3, 3, 3, 3, 4, 5, 6, 7]                   # x after each round: steps only with clients
    g = np.array([task.grad(torch.as_tensor(xs[k])[None]).pow(2).sum().item() for k in keep])
    np.testing.assert_allclose(res.values[0]["grad_norm2"][:, 0], g, rtol=1e-12, atol=1e-15)


class _IgnoresAt:
    """A probe that gives the gradients at the current model whatever model it is asked at."""

    def __init__(self, probe):
        self.probe = probe

    def gradients(self, mask, at=None):
        return self.probe.gradients(mask)

    def models(self):
        return self.probe.models()


class _NoPreviousModel(aggregate.ZeroSARAH):
    """Wrong on purpose: the gradients 'at x_{t-1}' taken at x_t (the probe's ``at`` ignored), so the SARAH
    difference vanishes and only the table term is left."""

    def apply(self, state, upd, probe):
        return super().apply(state, upd, _IgnoresAt(probe))


@pytest.mark.parametrize("variant", ["rule", "no previous model", "lambda b/n"])
def test_zerosarah_rule_reproduces_its_former_loop(variant):
    """The trajectories ZeroSARAH's own loop gave before it became a rule (tests/golden/mifa_zerosarah.csv, written
    by that loop) at b = 1 and b = ceil(sqrt n) of n = 16 and b = 3 of n = 8, one step diverging: the rule through
    flkit.fl.run gives divergence and client gradients exactly, ||grad f||^2 and f within float64 rounding (rtol
    1e-9: the loop summed f in closed form, and another CPU's kernels move the last digits, measured up to 2.7e-13
    relative on ATen's AVX2 kernels against the golden file's AVX512). Two wrong variants fail the same
    comparison: the previous gradients taken at the current model, and the table weight lambda = b/n instead of
    b/(2n)."""
    import golden
    from flkit.papers.mifa import problems
    want = golden.read("mifa_zerosarah")
    for kind, n, b in (("nonconvex", 16, 1), ("nonconvex_hetH", 16, 4), ("nonconvex", 8, 3)):
        task = problems.family(n, kind)
        runs = [(s, e) for e in (0.05, 0.4, 30.0) for s in (0, 1)]
        mask = methods.uniform_k_masks([s for s, _ in runs], b, 60, n)
        rule = {"rule": aggregate.ZeroSARAH(), "no previous model": _NoPreviousModel(),
                "lambda b/n": aggregate.ZeroSARAH(lam=b / n)}[variant]
        res = _zerosarah(task, [e / task.L for _, e in runs], mask, rule=rule)
        w = want[want["part"] == f"trajectory/{kind}/{n}/{b}"]
        o = want[want["part"] == f"outcomes/{kind}/{n}/{b}"].set_index(["metric", "seed", "eta_L"])["value"]
        same = True
        for r, (s, e) in enumerate(runs):
            for metric in ("grad_norm2", "f"):
                old = w[(w["metric"] == metric) & (w["seed"] == s) & (w["eta_L"] == e)]["value"].to_numpy()
                new = golden.normalise(pd.DataFrame({"v": res.values[r][metric][:, 0]}))["v"].to_numpy()
                same &= bool(np.all((old == new) | np.isclose(new, old, rtol=1e-9, atol=0)))
            same &= res.diverged[r][0] == o[("diverged_round", s, e)]
            gradients = methods.two_gradients(res.evals[r], mask[r:r + 1])[0]
            same &= gradients == o[("client_updates", s, e)]
        assert same == (variant == "rule"), (variant, kind, n, b)


def test_zerosarah_rejects_bad_inputs():
    task = tasks.symmetric_quadratic(4, dim=2, seed=0)
    for lam in (0.0, 1.5, -0.1, True):
        with pytest.raises(ValueError, match=r"lam .*\(0, 1\] or be None"):
            aggregate.ZeroSARAH(lam=lam)
    with pytest.raises(ValueError, match=r"lam0 .*\(0, 1\], got 0.0"):
        aggregate.ZeroSARAH(lam0=0.0)
    with pytest.raises(ValueError, match="without replacement"):       # a client drawn twice in a round
        fl.run(task, {"z": fl.Algorithm(aggregate.ZeroSARAH(), sampler=sample.ProportionalK(8, replace=True))},
               seeds=[0], rounds=2)
    with pytest.raises(ValueError, match=r"b \(clients per round\) must lie in \[1, 4\], got 5"):
        experiments.rounds_to_epsilon(task, "zerosarah", eta_L=[0.1], seeds=[0], max_rounds=5, metric="gap",
                                      eps_rel=0.1, b=5)


def test_zerosarah_fits_the_step_and_complexity_tables():
    task = tasks.symmetric_quadratic(8, dim=3, seed=0)
    st = experiments.step_size_sweep(task, ["mifa", "zerosarah"], eta_L=[0.5, 64.0], seeds=[0, 1], rounds=400)
    s = st[st["metric"] == "stable"].set_index(["method", "eta_L", "seed"])["value"]
    assert s.loc[("zerosarah", 0.5)].eq(1).all() and s.loc[("zerosarah", 64.0)].eq(0).all()
    cx = experiments.rounds_to_epsilon(task, "zerosarah", eta_L=[0.5], seeds=[0, 1], max_rounds=2000, metric="gap",
                                eps_rel=1e-3, b=2)
    p = cx.pivot_table(index="seed", columns="metric", values="value")
    assert (p["hit_round"] > 0).all() and np.all(p["client_updates"] == 2 + 4 * (p["hit_round"] - 1))
