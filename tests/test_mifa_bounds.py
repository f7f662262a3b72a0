"""Document 002's one-step inequalities, FedGD/FedPGD step sizes and ZeroSARAH at b ~ sqrt(n)
(flkit.papers.mifa.bounds): closed forms against exact enumeration, and variants with a wrong constant that the
checks must flag."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch

from flkit import tasks
from flkit.papers import claims
from flkit.papers.mifa import bounds


@pytest.fixture(scope="module")
def sym():
    return tasks.symmetric_quadratic(4, 4, 0, mu=0.1, L=1.0, sigma_G2=1.0)


def _enumerate_is(task, w, p, eta):
    """E f(w+) - f(w) and E||G||^2 of FedAvg with importance sampling by summing over the 2^n participation patterns."""
    n = task.n
    w = torch.as_tensor(w, dtype=torch.float64)
    gi = task.client_grads(w.unsqueeze(0))[0]
    df, g2 = 0.0, 0.0
    for a in itertools.product((0, 1), repeat=n):
        prob = math.prod(p if x else 1 - p for x in a)
        G = (torch.tensor(a, dtype=torch.float64) @ gi) / (n * p)
        df += prob * float(task.f(w - eta * G) - task.f(w))
        g2 += prob * float(G @ G)
    return df, g2


@pytest.mark.parametrize("p", [0.2, 0.7])
def test_derivation_i_closed_form_equals_enumeration(sym, p):
    w = torch.tensor([0.3, -1.0, 2.0, 0.5], dtype=torch.float64)
    ln = bounds.derivation_i_lines(sym, w, p=p, eta=0.4)
    df, g2 = _enumerate_is(sym, w, p, 0.4)
    assert ln["exact"] == pytest.approx(df, abs=1e-12) and ln["EG2"] == pytest.approx(g2, abs=1e-12)
    # the document's chain, in order; c = (2/n)(1/p - 1)
    assert ln["exact"] <= ln["smooth"] + 1e-12 <= ln["split"] + 2e-12
    c = 2 / sym.n * (1 / p - 1)
    assert ln["condition"] == (0.4 * sym.L * (1 + c) <= 1)


def test_step_change_is_the_difference_of_f(sym):
    w = torch.tensor([0.3, -1.0, 2.0, 0.5], dtype=torch.float64)
    G = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got = bounds._step_change(sym, w, G, 0.3)
    np.testing.assert_allclose(got.numpy(), (sym.f(w - 0.3 * G) - sym.f(w.unsqueeze(0))).numpy(), atol=1e-12)


def test_derivation_i_holds_and_a_bound_missing_its_factor_is_flagged(sym):
    tab = bounds.derivation_i_table(sym, ps=[0.1], etas_L=[0.1], rounds=[0, 10], draws=4000)   # eta L (1 + c) = 0.55
    assert tab["condition"].all()
    cs = bounds.derivation_i_checks(tab)
    assert all(c.ok for c in cs), [c.what for c in cs if not c.ok]
    # at the optimum the left side is eta^2/2 E[G^T H G] > 0; a floor without its (1/p - 1) (c = 2/n) is below it
    opt = tab[tab["state"] == "optimum"].iloc[0]
    wrong = -0.1 / 2 * opt["grad2"] + 0.1 ** 2 * sym.L * (2 / sym.n) / 2 * sym.sigma_G2
    assert claims.mc_bound("wrong", opt["mc"], wrong, opt["mc_se"]).verdict == "differs"
    assert claims.mc_bound("right", opt["mc"], opt["final"], opt["mc_se"]).verdict == "agrees"


def test_general_bound_is_tight_at_full_participation_and_a_doubled_descent_is_flagged():
    # one client type, p = 1: G_t = grad f; along the top eigenvector with eta L = 1 the bound is an equality
    task = tasks.symmetric_quadratic(2, 2, 0, mu=0.5, L=1.0, sigma_G2=1e-30)
    w = task.problem.w_star + torch.tensor([0.0, 1.0], dtype=torch.float64)    # A = (0.5, 1): the top direction
    g = task.grad(w.unsqueeze(0))[0]
    G = g.unsqueeze(0)
    df = float(bounds._step_change(task, w, G, 1.0)[0])
    rhs = -0.5 * float(g @ g)
    assert df == pytest.approx(rhs, rel=1e-9)                                           # tight
    assert claims.mc_bound("doc", df, rhs, 0.0).verdict == "agrees"
    assert claims.mc_bound("wrong", df, -1.0 * float(g @ g), 0.0).verdict == "differs"  # -eta ||grad f||^2
    # beyond eta L <= 1 the inequality fails
    assert float(bounds._step_change(task, w, G, 1.5)[0]) > -0.5 * 1.5 * float(g @ g)


def test_general_table_checks_hold_with_eta_L_at_most_one():
    q = tasks.quadratic_task(n=6, dim=4, seed=0, mu=0.2, L=2.0, heterogeneity=1.0)
    tab = bounds.general_table(q, ps=[0.3], etas_L=[1.0], rounds=[3, 10], seeds=[0], draws=2000)
    assert set(tab["rule"]) == {"MIFA", "U-MIFA"} and set(tab["source"]) == {"MIFA run", "SAGA run"}
    assert all(c.ok for c in bounds.general_checks(tab))


def test_gd_step_sweep_finds_the_exact_stability_limit():
    task = tasks.symmetric_quadratic(8, 4, 0, mu=0.1, L=1.0, sigma_G2=1.0)
    grid = [1.0, 1.8, 1.95, 2.05, 2.5]
    r = bounds.gd_step_sweep(task, "fedgd", eta_L=grid, seeds=[0], rounds=600)
    conv = r[r["metric"] == "converged"].set_index("eta_L")["value"]
    assert conv.to_dict() == {1.0: 1.0, 1.8: 1.0, 1.95: 1.0, 2.05: 0.0, 2.5: 0.0}          # GD: stable iff eta L < 2
    with pytest.raises(ValueError, match="method"):
        bounds.gd_step_sweep(task, "mifa", eta_L=grid, seeds=[0], rounds=10)


def test_gd_step_checks_flag_a_step_that_shrinks_with_n():
    idx = pd.MultiIndex.from_product([["convex"], ["fedgd"], [16, 64, 256]], names=["kind", "method", "n"])
    ok = bounds.gd_step_checks(pd.Series([1.41, 1.41, 1.41], index=idx), [0.5, 1.0, 1.41, 2.0])
    assert [c.verdict for c in ok["Convex table: FedGD, eta bound"]] == ["agrees", "agrees"]
    bad = bounds.gd_step_checks(pd.Series([1.0, 0.25, 1 / 16], index=idx), [1 / 16, 0.25, 1.0])   # like 1/n
    assert [c.verdict for c in bad["Convex table: FedGD, eta bound"]] == ["differs", "differs"]


def test_cost_slope_and_zerosarah_checks():
    rows = [dict(n=n, eta_L=e, seed=s, cost=(2.0 if e == 1.0 else 3.0) * n ** 0.5 * (1 + 0.01 * s), rounds=10.0)
            for n in (16, 64, 256) for e in (0.5, 1.0) for s in range(5)]
    piv = pd.DataFrame(rows)
    s, se = bounds.cost_slope(piv, boot=50)
    assert s == pytest.approx(0.5, abs=1e-9) and se < 1e-9
    assert bounds.best_cost(piv)["eta_L"].tolist() == [1.0, 1.0, 1.0]
    sl = pd.DataFrame({"slope": [0.55, 0.9], "se": [0.02, 0.02]},
                      index=pd.Index(["nonconvex", "nonconvex_hetH"], name="kind"))
    cs = bounds.zerosarah_sqrt_checks(sl, 0.1, 64)["Non-convex table: ZeroSarah, complexity"]
    assert [c.verdict for c in cs] == ["agrees", "differs", "agrees"]
