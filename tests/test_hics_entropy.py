"""Chapter code of the HiCS-FL page "data and entropy" (flkit.papers.hics.entropy): settings, the exact
formulas (entropy, Eq. 22, simplex projection, label recovery), the partitions' data-free labels, and one
first local training on a tiny split (same numbers for the same seed)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from flkit.papers.hics import common, entropy
from flkit.seeding import rng


def test_profiles_and_errors():
    assert entropy.profile("paper")["clients"] == 50 and entropy.profile("paper")["epochs"] == 2
    assert entropy.profile("smoke", seeds=[3, 4])["seeds"] == [3, 4]
    with pytest.raises(ValueError, match="unknown profile 'huge'"):
        entropy.profile("huge")
    with pytest.raises(ValueError, match="clients must be a multiple of 5"):
        entropy.profile("smoke", clients=12)
    with pytest.raises(ValueError, match="fig9 must list panels from"):
        entropy.profile("smoke", fig9=["(c)"])
    with pytest.raises(ValueError, match="unknown setting"):
        entropy.profile("smoke", rounds=3)
    with pytest.raises(ValueError, match="lr must lie in"):
        entropy.profile("smoke", lr=-1.0)
    with pytest.raises(ValueError, match="subset must be None .* or >= 100 x clients"):
        entropy.profile("smoke", subset=500)


def test_labels_from_counts_and_data_free_partition():
    y = common.labels_from_counts(10, 5000)
    assert y.shape == (50000,) and np.array_equal(np.bincount(y), np.full(10, 5000))
    p = common.make_partition(y, 50, common.CIFAR10["lists"]["(1)"], seed=0)
    assert np.array_equal(p.counts.sum(0), np.full(10, 5000)) and p.sizes.min() >= 200
    q = common.make_partition(y, 50, common.CIFAR10["lists"]["(1)"], seed=0)
    assert np.array_equal(p.counts, q.counts)
    lit = common.make_partition(y, 50, (0.001,) * 5, seed=0, literal=True)
    assert (lit.sizes == 0).sum() > 0                         # the text's rule leaves clients empty
    emp = entropy.empty_clients(y, 50, (0.001,) * 5, [0, 1])
    assert set(emp.rule) == {"document text", "code (balanced, 20% minimum)"}
    assert (emp[emp.rule.str.startswith("code")].empty_clients == 0).all()


def test_true_entropy_and_total_variation():
    D = np.array([[0.25, 0.25, 0.25, 0.25], [1.0, 0, 0, 0], [0.5, 0.5, 0, 0]])
    assert np.allclose(common.true_entropy(D), [math.log(4), 0.0, math.log(2)], atol=1e-15, rtol=0)
    assert np.allclose(entropy.total_variation(D, D[[1, 1, 1]]), [0.75, 0.0, 0.5], atol=1e-15, rtol=0)


def test_sum_E_is_exact_on_balanced_data_only():
    g = rng(0, "test")
    C, n = 5, 40
    s = g.dirichlet(np.ones(C), size=n * C)
    y = np.repeat(np.arange(C), n)
    lhs, rhs = entropy.sum_E(s, y, C)
    assert abs(lhs - rhs) < 1e-12
    E_ref = [s[y != i, i].mean() for i in range(C)]
    assert abs(lhs - sum(E_ref)) < 1e-15
    y2 = np.concatenate([np.zeros(10, int), np.repeat(np.arange(1, C), n)])
    s2 = g.dirichlet(np.ones(C), size=len(y2))
    lhs2, rhs2 = entropy.sum_E(s2, y2, C)
    assert abs(lhs2 - rhs2) > 1e-4
    u = np.full((n * C, C), 1 / C)
    assert entropy.sum_E(u, y, C) == pytest.approx((1.0, 1.0), abs=1e-15)   # uniform predictions: 1


def test_project_simplex_and_label_recovery():
    v = np.array([[0.2, 0.3, 0.5], [2.0, 0.0, 0.0], [0.5, 0.5, 0.5], [-1.0, 0.2, 0.4]])
    P = entropy.project_simplex(v)
    assert np.allclose(P.sum(1), 1, atol=1e-15) and (P >= 0).all()
    assert np.allclose(P, [[0.2, 0.3, 0.5], [1, 0, 0], [1 / 3, 1 / 3, 1 / 3], [0, 0.4, 0.6]], atol=1e-15, rtol=0)
    g = rng(1, "test")
    for row in g.normal(size=(20, 4)):                         # KKT: the projection is the closest point
        p = entropy.project_simplex(row)[0]
        for _ in range(50):
            q = g.dirichlet(np.ones(4))
            assert np.sum((row - p) ** 2) <= np.sum((row - q) ** 2) + 1e-12
    # Delta b built exactly as Eq. 23 at initialisation: recovery is exact
    D = g.dirichlet(np.ones(10), size=6)
    lr, steps = 0.001, np.array([38.0, 10, 2, 4, 6, 8])
    db = lr * steps[:, None] * (D - 0.1)
    assert np.max(np.abs(entropy.recover_labels(db, lr, steps, 10) - D)) < 1e-12


def test_eq6_frame_and_slope():
    y = common.labels_from_counts(10, 100)
    part = common.make_partition(y, 10, (0.01, 0.01, 0.1, 1.0, 1.0), seed=0)
    C, N = 10, 10
    D = common.label_fractions(part)
    s_bar = np.full((N, C), 0.1)
    cfg = dict(epochs=2, batch_size=64, lr=0.001)
    steps = 2 * np.ceil(part.sizes / 64)
    db = 0.001 * steps[:, None] * (D - s_bar)                 # the frozen-model prediction itself
    table = pd.concat([entropy._tidy("delta_b", db), entropy._tidy("mean_pred", s_bar)])
    f = entropy.eq6_frame(table, part, cfg, C)
    assert entropy.slope(f.per_step, f.measured) == pytest.approx(1.0, abs=1e-12)
    per_step = entropy.slope(f.eq6_printed, f.per_step)
    assert entropy.slope(f.eq6_printed, f.measured) == pytest.approx(per_step, abs=1e-12)
    assert entropy.direction_cosine(f) == pytest.approx(1.0, abs=1e-12)
    assert np.allclose(f.eq6_printed.to_numpy().reshape(N, C), 0.002 * (D - 0.1), atol=1e-15, rtol=0)


def test_first_round_is_reproducible_and_has_the_document_sign():
    """A tiny FMNIST-shaped split (random images), one local epoch: same seed, same updates; the bias
    update of a one-class client is largest on its class (local minus global)."""
    from types import SimpleNamespace
    g = torch.Generator().manual_seed(0)
    y = torch.arange(600) % 3
    data = SimpleNamespace(x_train=torch.rand(600, 1, 28, 28, generator=g), y_train=y,
                           x_test=torch.rand(20, 1, 28, 28, generator=g), y_test=y[:20])
    idx = [np.flatnonzero(y.numpy() == 0)[:100], np.arange(100, 300), np.arange(300, 600)]
    from flkit.partition import Partition
    part = Partition.from_indices(idx, y.numpy(), 10)
    cfg = dict(subset=None, epochs=1, batch_size=64, lr=0.01)
    task = entropy.fmnist_task(data, part, cfg)
    a = entropy.first_round(task, 5, mean_pred=True)
    b = entropy.first_round(task, 5, mean_pred=True)
    pd.testing.assert_frame_equal(a, b)
    db = entropy.matrix(a, "delta_b")
    assert db.shape == (3, 10) and int(np.argmax(db[0])) == 0 and db[0, 0] > 0
    assert np.allclose(entropy.matrix(a, "mean_pred").sum(1), 1, atol=1e-6)
    c = entropy.first_round(task, 6, mean_pred=False)
    assert set(c.metric) == {"delta_b"} and not np.array_equal(entropy.matrix(c, "delta_b"), db)
