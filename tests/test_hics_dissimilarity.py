"""Assumption 1 on Fashion-MNIST (document 004, appendix 6.2, Fig. 6(a)): the clients, the gradient
differences against the closed-form gradient of softmax regression, the envelope fits on exact curves, the
checks' verdicts, and a tiny run."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from flkit import models
from flkit.papers.hics import common, dissimilarity, items, theory
from flkit.tasks import EngineTask


def test_spread_alphas_log_uniform():
    a = dissimilarity.spread_alphas(0.01, 50.0, 250)
    assert len(a) == 250 and a[0] == pytest.approx(0.01, rel=1e-15) and a[-1] == pytest.approx(50.0, rel=1e-15)
    np.testing.assert_allclose(a[1:] / a[:-1], (5000.0) ** (1 / 249), rtol=1e-12)
    with pytest.raises(ValueError, match="lo < hi"):
        dissimilarity.spread_alphas(1.0, 0.5, 10)
    with pytest.raises(ValueError, match="n must"):
        dissimilarity.spread_alphas(0.1, 1.0, 1)


def test_dirichlet_clients_sizes_classes_and_seed():
    y = np.repeat(np.arange(10), 300)
    alphas = dissimilarity.spread_alphas(0.01, 50.0, 40)
    p = dissimilarity.dirichlet_clients(y, alphas, 120, seed=3)
    assert p.num_clients == 40 and (p.sizes == 120).all()
    for idx, row in zip(p.indices, p.counts):
        assert len(np.unique(idx)) == len(idx)                       # no image twice within a client
        np.testing.assert_array_equal(np.bincount(y[idx], minlength=10), row)
    H = common.true_entropy(common.label_fractions(p))
    assert H[:5].mean() < 0.3 and H[-5:].mean() > 2.0                 # alpha 0.01: one class; alpha 50: near ln 10
    q = dissimilarity.dirichlet_clients(y, alphas, 120, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(p.indices, q.indices))
    assert 0 < dissimilarity.union_entropy(p) <= math.log(10) + 1e-12
    with pytest.raises(ValueError, match="size"):
        dissimilarity.dirichlet_clients(y, alphas, 301, seed=0)
    with pytest.raises(ValueError, match="alpha"):
        dissimilarity.dirichlet_clients(y, [0.5, 0.0], 10, seed=0)


def test_largest_remainder_sums_exactly():
    p = np.array([0.333, 0.333, 0.334])
    np.testing.assert_array_equal(dissimilarity._largest_remainder(p, 10), [3, 3, 4])
    assert dissimilarity._largest_remainder(np.array([0.5, 0.5]), 7).sum() == 7


def test_gradient_differences_match_closed_form_float64():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(60, 1, 4, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (60,), generator=g)
    clients = [np.arange(0, 20), np.arange(20, 40), np.arange(40, 60)]
    task = EngineTask(models.logreg(16, 3).double(), x, y, clients, x[:5], y[:5], batch_size=8, epochs=1)
    w = task.init_params([1])
    d2, g2 = dissimilarity.gradient_differences(task, w)
    P = task.unflatten(w)
    names = list(P)
    W = next(P[k][0] for k in names if P[k].dim() == 3).numpy()      # (3, 16)
    b = next(P[k][0] for k in names if P[k].dim() == 2).numpy()
    X, Y = x.reshape(60, -1).numpy(), np.eye(3)[y.numpy()]
    grads = []
    for idx in clients:
        z = X[idx] @ W.T + b
        s = np.exp(z - z.max(1, keepdims=True))
        s /= s.sum(1, keepdims=True)
        G = (s - Y[idx]) / len(idx)
        flat = {k: (G.T @ X[idx] if P[k].dim() == 3 else G.sum(0)) for k in names}
        grads.append(np.concatenate([flat[k].reshape(-1) for k in names]))
    grads = np.array(grads)
    mean = grads.mean(0)
    np.testing.assert_allclose(d2, ((grads - mean) ** 2).sum(1), rtol=0, atol=1e-12)
    assert g2 == pytest.approx(float((mean ** 2).sum()), abs=1e-12)


def _curve_points(beta, rho, kappa, n=200):
    x = np.linspace(0.0, math.log(10) - 0.01, n)
    return x, dissimilarity.envelope_curve(x, beta, rho, kappa)


def test_tight_envelope_recovers_an_exact_curve():
    x, y = _curve_points(1.2217, 0.5, 0.8)
    betas = (0.5, 1.2217, 3.0)
    t = dissimilarity.tight_envelope(x, y, betas=betas)
    assert t["beta"] == 1.2217
    assert t["rho"] == pytest.approx(0.5, abs=1e-7) and t["kappa"] == pytest.approx(0.8, abs=1e-7)
    area = 0.8 * math.log(10) - 0.5 * (1 - 10 ** -1.2217) / 1.2217
    assert t["area"] == pytest.approx(area, abs=1e-7) and t["constant_area"] == pytest.approx(y.max() * math.log(10))
    # points rising with H: the least-area bound is the constant one (rho = 0)
    t2 = dissimilarity.tight_envelope(x, x.copy(), betas=betas)
    assert t2["rho"] == pytest.approx(0.0, abs=1e-9) and t2["area"] == pytest.approx(t2["constant_area"], rel=1e-9)


def test_thirds_shape_ratio_and_binned_quantile():
    x = np.array([0.1, 0.2, 1.0, 1.1, 2.0, 2.1])
    y = np.array([10.0, 10.0, 8.0, 8.0, 2.0, 2.0])
    np.testing.assert_allclose(dissimilarity.thirds(x, y), [10.0, 8.0, 2.0])
    assert dissimilarity.shape_ratio([10.0, 8.0, 2.0]) == pytest.approx(3.0)          # concave: the fall steepens
    assert dissimilarity.shape_ratio([10.0, 4.0, 2.0]) == pytest.approx(1 / 3)        # convex: it flattens
    mids = (np.arange(3) + 0.5) * math.log(10) / 3
    blue = dissimilarity.envelope_curve(mids, 1.0, 0.13, 0.14)
    assert dissimilarity.doc_shape_ratio("blue") == pytest.approx(dissimilarity.shape_ratio(blue))
    assert dissimilarity.doc_shape_ratio("blue") > 1 and dissimilarity.doc_shape_ratio("green") > 1
    m, lev = dissimilarity.binned_quantile(x, y, bins=3, q=0.5)
    np.testing.assert_allclose(lev, [10.0, 8.0, 2.0])
    np.testing.assert_allclose(m, mids)
    with pytest.raises(ValueError, match="third"):
        dissimilarity.thirds(np.array([0.1, 0.2]), np.array([1.0, 2.0]))


def _pts(sign):
    rows = []
    for r in (0, 10):
        H = np.linspace(0.01, 2.29, 30)
        rows.append(pd.DataFrame({"round": r, "client": np.arange(30), "H": H,
                                  "y": dissimilarity.envelope_curve(H, 1.0, 0.13,
                                                                    0.14) if sign < 0 else 0.01 + 0.05 * H}))
    return pd.concat(rows, ignore_index=True)


def test_fig6_checks_verdicts_and_filing():
    betas = (0.5, 1.0, 2.0)
    good = _pts(-1)
    cs = dissimilarity.fig6_checks(good, dissimilarity.tight_envelope(good.H, good.y, betas=betas),
                                   dissimilarity.round_spearman(good))
    assert [c.verdict for c in cs] == ["agrees"] * 3
    assert cs[0].reference == pytest.approx(dissimilarity.doc_shape_ratio("blue")) and cs[2].ours == pytest.approx(-1.0)
    bad = _pts(+1)
    cs = dissimilarity.fig6_checks(bad, dissimilarity.tight_envelope(bad.H, bad.y, betas=betas),
                                   dissimilarity.round_spearman(bad))
    assert [c.verdict for c in cs] == ["differs"] * 3
    filed = items.by_item("theory", cs)
    assert sorted(filed) == sorted(["Fig. 6(a)", "Assumption 1", "Claim (appendix 6.2): the local-global gradient "
                                                                  "difference follows the pattern of Assumption 1"])


def test_tiny_run_records_every_client():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(10).repeat(40)
    data = SimpleNamespace(x_train=torch.rand(400, 1, 28, 28, generator=g), y_train=y,
                           x_test=torch.rand(50, 1, 28, 28, generator=g), y_test=torch.arange(10).repeat(5))
    cfg = dict(dissimilarity.FIG6, clients=6, size=20, rounds=3, every=2)
    t = dissimilarity.run_fig6(cfg, data)
    assert sorted(t["round"].unique()) == [0, 2]
    assert (t.groupby(["round", "metric"]).size().to_dict()
            == {(0, "grad_diff2"): 6, (0, "grad_norm2"): 1, (0, "test_acc"): 1,
                (2, "grad_diff2"): 6, (2, "grad_norm2"): 1, (2, "test_acc"): 1})
    part = dissimilarity.dirichlet_clients(y.numpy(), dissimilarity.spread_alphas(0.01, 50.0, 6), 20, 0)
    task = dissimilarity.fig6_task(data, part, cfg)
    d0, _ = dissimilarity.gradient_differences(task, task.init_params([0]))
    got = t[(t["round"] == 0) & (t.metric == "grad_diff2")].sort_values("client")["value"].to_numpy()
    np.testing.assert_allclose(got, d0, rtol=1e-5)
    pts = dissimilarity.point_frame(t, part, cfg)
    assert len(pts) == 12 and pts["alpha"].iloc[0] == pytest.approx(0.01)


def test_theory_profile_fig6_validation():
    assert theory.profile("paper")["fig6"] == dissimilarity.FIG6
    with pytest.raises(ValueError, match="fig6.model"):
        theory.profile("smoke", fig6=dict(dissimilarity.FIG6, model="resnet"))
    with pytest.raises(ValueError, match="every"):
        theory.profile("smoke", fig6=dict(dissimilarity.FIG6, every=0))


def test_fig6_run_resumes_from_its_checkpoint_to_the_same_rows(tmp_path):
    """run_fig6 stopped at a deadline (flkit.fl.Deadline, after one round) and called again from its checkpoint
    gives the rows of an uninterrupted run; the checkpoint is removed at the end."""
    from flkit import fl
    g = torch.Generator().manual_seed(0)
    y = torch.arange(10).repeat(40)
    data = SimpleNamespace(x_train=torch.rand(400, 1, 28, 28, generator=g), y_train=y,
                           x_test=torch.rand(50, 1, 28, 28, generator=g), y_test=torch.arange(10).repeat(5))
    cfg = dict(dissimilarity.FIG6, clients=6, size=20, rounds=5, every=2)
    whole = dissimilarity.run_fig6(cfg, data)
    ck = tmp_path / "checkpoints" / "fig6.pt"
    stops = 0
    while True:
        try:
            got = dissimilarity.run_fig6(cfg, data, checkpoint=ck, deadline=0.0)   # a deadline passed: one round a call
            break
        except fl.Deadline:
            stops += 1
            assert ck.is_file()
    assert stops == 4 and not ck.exists()
    pd.testing.assert_frame_equal(got, whole)
    ck.parent.mkdir(exist_ok=True)
    with pytest.raises(fl.Deadline):
        dissimilarity.run_fig6(cfg, data, checkpoint=ck, deadline=0.0)
    with pytest.raises(RuntimeError, match="another run"):
        dissimilarity.run_fig6(dict(cfg, seed=1), data, checkpoint=ck)
