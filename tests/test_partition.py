"""Tests of flkit.partition: coverage of the data, counts, seeds, the schemes' defining properties and
the error messages."""
from __future__ import annotations

import numpy as np
import pytest

from flkit import partition as P
from flkit.seeding import rng


def _labels(per_class=(600,) * 10, seed=0):
    """Shuffled label vector with the given number of samples per class."""
    y = np.repeat(np.arange(len(per_class)), per_class)
    return np.random.default_rng(seed).permutation(y)


# MNIST-like unequal classes (train-set class counts of MNIST divided by 10)
MNIST_LIKE = (592, 674, 596, 613, 584, 542, 592, 627, 585, 595)

# schemes that hand out every sample exactly once
FULL = {
    "iid": lambda y, s: P.iid(y, 30, s),
    "dirichlet": lambda y, s: P.dirichlet(y, 20, 0.3, s),
    "dirichlet_balanced": lambda y, s: P.dirichlet(y, 20, 0.1, s, min_size=50, balance=True),
    "grouped_dirichlet": lambda y, s: P.grouped_dirichlet(y, 50, [0.001, 0.01, 0.1, 0.5, 1.0], s),
    "fedau_dirichlet": lambda y, s: P.fedau_dirichlet(y, 250, 0.1, seed=s),
    "fedau_dirichlet_shuffled": lambda y, s: P.fedau_dirichlet(y, 100, 0.5, seed=s, shuffle=True),
    "rare_users_r08": lambda y, s: P.rare_users(y, 30, 0.9, 0.8, seed=s),
    "rare_users_r09": lambda y, s: P.rare_users(y, 30, 0.9, 0.9, seed=s),
    "user_classes": lambda y, s: P.user_classes(y, [[0, 1, 2], [3, 4], [5, 6, 7], [8, 9, 0]], s),
}


@pytest.mark.parametrize("name", sorted(FULL))
def test_every_index_once_counts_and_seeds(name):
    make = FULL[name]
    y = _labels(MNIST_LIKE)
    part = make(y, 3)
    allidx = np.concatenate(part.indices)
    assert np.array_equal(np.sort(allidx), np.arange(y.size)), "every sample exactly once"
    assert all(i.dtype == np.int64 for i in part.indices)
    assert part.counts.shape == (len(part.indices), 10)
    for n, idx in enumerate(part.indices):
        assert np.array_equal(part.counts[n], np.bincount(y[idx], minlength=10))
    assert np.array_equal(part.sizes, [len(i) for i in part.indices])
    # reproducible by seed, a Generator gives the same as the int seed's "data" stream
    again = make(y, 3)
    assert all(np.array_equal(a, b) for a, b in zip(part.indices, again.indices))
    via_gen = make(y, rng(3, "data"))
    assert all(np.array_equal(a, b) for a, b in zip(part.indices, via_gen.indices))
    other = make(y, 4)
    assert not all(np.array_equal(a, b) for a, b in zip(part.indices, other.indices))


def test_iid_sizes_and_mixture():
    y = _labels()
    part = P.iid(y, 7, 0)
    assert part.sizes.max() - part.sizes.min() <= 1
    # each client's label mix is close to uniform (hypergeometric sd ~ 12 for 857 draws)
    assert np.all(np.abs(part.counts - part.sizes[:, None] / 10) < 60)


def test_shards_two_classes_equal_size():
    y = _labels(MNIST_LIKE)
    part = P.shards(y, 100, 2, seed=0)
    nclasses = (part.counts > 0).sum(axis=1)
    assert np.all(nclasses == 2)
    n_min, spc = min(MNIST_LIKE), 21  # default: ceil(100*2/10) + 1 = 21 shards per class, as MIFA
    size = n_min // spc
    assert np.all(part.counts[part.counts > 0] == size)
    allidx = np.concatenate(part.indices)
    assert np.unique(allidx).size == allidx.size, "no sample twice"
    assert np.all(part.counts.sum(axis=0) <= spc * size)
    assert np.array_equal(part.counts, P.shards(y, 100, 2, seed=0).counts)
    assert not np.array_equal(part.counts, P.shards(y, 100, 2, seed=1).counts)
    three = P.shards(y, 20, classes_per_client=3, seed=0)
    assert np.all((three.counts > 0).sum(axis=1) == 3)


@pytest.mark.parametrize("r, rare", [(0.8, [8, 9]), (0.9, [9])])
def test_rare_users_exact_ownership(r, rare):
    y = _labels((270,) * 10)  # 270 = 27 * 10 = 3 * 90
    part = P.rare_users(y, num_users=30, frequent_frac=0.9, pattern_frac=r, seed=0)
    common = [c for c in range(10) if c not in rare]
    expect_freq = np.zeros(10, int)
    expect_freq[common] = 270 // 27
    expect_rare = np.zeros(10, int)
    expect_rare[rare] = 270 // 3
    assert np.array_equal(part.counts[:27], np.tile(expect_freq, (27, 1)))
    assert np.array_equal(part.counts[27:], np.tile(expect_rare, (3, 1)))
    # explicit override gives the same ownership
    over = P.rare_users(y, 30, 0.9, seed=0, rare_classes=rare)
    assert np.array_equal(over.counts, part.counts)


def test_rare_users_unstratified_follows_code():
    y = _labels(MNIST_LIKE)
    part = P.rare_users(y, 30, 0.9, 0.8, seed=0, stratify=False)
    assert np.all(part.counts[:27, 8:] == 0) and np.all(part.counts[27:, :8] == 0)
    assert np.unique(part.sizes[:27]).size == 1 and np.unique(part.sizes[27:]).size == 1
    n_common = sum(MNIST_LIKE[:8])
    assert part.sizes[0] == n_common // 27


def test_rare_users_other_sizes():
    # doc 003 Fig. 2(c): 30 users, 3 classes, the 6 least frequent hold class 2
    y = _labels((240,) * 3)
    part = P.rare_users(y, 30, frequent_frac=0.8, pattern_frac=2 / 3, seed=1)
    assert np.array_equal(part.counts[:24], np.tile([10, 10, 0], (24, 1)))
    assert np.array_equal(part.counts[24:], np.tile([0, 0, 40], (6, 1)))


def test_user_classes_examples():
    y = _labels((300,) * 4)
    part = P.user_classes(y, [[0], [1], [2, 3]], seed=0)
    assert np.array_equal(part.counts, [[300, 0, 0, 0], [0, 300, 0, 0], [0, 0, 300, 300]])
    shared = P.user_classes(_labels((288,) * 3), [[0, 1]] * 24 + [[2]] * 6, seed=0)
    assert np.array_equal(shared.counts[:24], np.tile([12, 12, 0], (24, 1)))
    assert np.array_equal(shared.counts[24:], np.tile([0, 0, 48], (6, 1)))
    # classes nobody lists are left out
    partial = P.user_classes(y, [[0], [1]], seed=0)
    assert partial.sizes.sum() == 600 and np.all(partial.counts[:, 2:] == 0)


def test_fedau_dirichlet_rule():
    """Client n gets [round(N_c S_{n-1,c}), round(N_c S_{n,c})) of label c, S = cumulative share of D."""
    y = _labels(MNIST_LIKE)
    K, a = 50, 0.1
    part = P.fedau_dirichlet(y, K, a, seed=np.random.default_rng(11))
    D = np.random.default_rng(11).dirichlet(np.full(10, a), size=K)
    S = np.cumsum(D, axis=0) / D.sum(axis=0)
    ends = np.round(np.array(MNIST_LIKE) * S).astype(int)
    expect = np.diff(np.vstack([np.zeros(10, int), ends]), axis=0)
    assert np.array_equal(part.counts, expect)
    # contiguous slices of each label in storage order
    for c in range(10):
        pos = np.flatnonzero(y == c)
        got = np.concatenate([i[y[i] == c] for i in part.indices])
        assert np.array_equal(got, pos)


def test_fedau_participation_probs_hand_computation():
    counts = np.array([[3, 1], [0, 4], [2, 2]])
    q = np.array([0.25, 0.75])
    # lambda = 0.1 * 2 = 0.2 ; <a_n, q> = 0.375, 0.75, 0.5 ; lambda<a,q> = 0.075, 0.15, 0.1 ; floor 0.09
    p = P.fedau_participation_probs(counts, mean=0.1, p_min=0.09, seed=0, q=q)
    assert np.allclose(p, [0.09, 0.15, 0.1])
    # q drawn once from the given stream: Dir(alpha 1_C)
    p2 = P.fedau_participation_probs(counts, alpha=0.3, mean=0.1, p_min=0.01, seed=np.random.default_rng(5))
    q2 = np.random.default_rng(5).dirichlet(np.full(2, 0.3))
    a = counts / counts.sum(1, keepdims=True)
    assert np.allclose(p2, np.maximum(0.01, 0.2 * a @ q2))
    # int seed: its own stream, not the data stream (which would replay the partition's draws)
    p3 = P.fedau_participation_probs(counts, alpha=0.3, mean=0.1, p_min=0.01, seed=5)
    q3 = rng(5, "participation-probs").dirichlet(np.full(2, 0.3))
    assert np.allclose(p3, np.maximum(0.01, 0.2 * a @ q3))


def test_fedau_participation_probs_realistic_and_raise():
    y = _labels((600,) * 10)
    part = P.fedau_dirichlet(y, 250, 0.1, seed=1)
    p = P.fedau_participation_probs(part.counts, seed=1)
    assert p.shape == (250,) and p.min() >= 0.02 and p.max() <= 1
    assert 0.05 < p.mean() < 0.2
    with pytest.raises(ValueError, match=r"client 0 .*p_n = 1\.2.*lower `mean`"):
        P.fedau_participation_probs(np.array([[5, 0], [1, 1]]), mean=0.6, seed=0, q=[1.0, 0.0])


def test_grouped_dirichlet_groups_use_their_slice():
    y = _labels(MNIST_LIKE)
    alphas = [0.001, 0.01, 0.1, 0.5, 1.0]
    part = P.grouped_dirichlet(y, 50, alphas, seed=0)
    by_class = [np.flatnonzero(y == c) for c in range(10)]
    for gi in range(5):
        allowed = np.concatenate([np.array_split(ix, 5)[gi] for ix in by_class])
        members = np.concatenate(part.indices[gi * 10:(gi + 1) * 10])
        assert np.array_equal(np.sort(members), np.sort(allowed)), f"group {gi} holds exactly its slice"
        n_g = allowed.size
        assert part.sizes[gi * 10:(gi + 1) * 10].min() >= int(0.2 * n_g / 10)
    # alpha = 0.001: (almost) one class per client; alpha = 1: many classes per client
    assert np.median((part.counts[:10] > 0).sum(1)) <= 2
    assert np.median((part.counts[40:] > 0).sum(1)) >= 5


def test_dirichlet_min_size_and_balance():
    y = _labels()
    part = P.dirichlet(y, 20, 0.3, seed=0, min_size=100, balance=True)
    assert part.sizes.min() >= 100
    unbalanced = P.dirichlet(y, 20, 0.3, seed=0)
    assert unbalanced.sizes.std() > part.sizes.std()


def test_plot_counts():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    part = P.rare_users(_labels((270,) * 10), seed=0)
    ax = P.plot_counts(part, title="rare users")
    assert ax.get_title() == "rare users" and ax.get_xlabel() == "client"
    ax2 = P.plot_counts(part.counts, clients_on="y")
    assert ax2.get_ylabel() == "client"
    plt.close("all")


@pytest.mark.parametrize("call, match", [
    (lambda y: P.dirichlet(y, 10, 0.0, 0), "alpha must be > 0"),
    (lambda y: P.dirichlet(y, 10, -1, 0), "alpha must be > 0"),
    (lambda y: P.fedau_dirichlet(y, 10, 0, seed=0), "alpha must be > 0"),
    (lambda y: P.grouped_dirichlet(y, 10, [0.1, 0.0], 0), "every alpha must be > 0"),
    (lambda y: P.grouped_dirichlet(y, 50, [0.1, 0.2, 0.3], 0), "do not divide num_clients=50"),
    (lambda y: P.grouped_dirichlet(y, 10, [0.1], 0, min_frac=1.5), "min_frac"),
    (lambda y: P.iid(y, 10**6, 0), "more than the 6000 samples"),
    (lambda y: P.iid(y, 0, 0), "num_clients must be >= 1"),
    (lambda y: P.iid(y, 10, "a"), "seed must be"),
    (lambda y: P.iid(y, 10, -3), "seed must be a non-negative integer"),
    (lambda y: P.dirichlet(y, 10, 0.5, 0, min_size=10**5), "min_size"),
    (lambda y: P.shards(y, 10, 11, seed=0), r"classes_per_client must be an int in \[1, 10\]"),
    (lambda y: P.shards(y, 100, 2, seed=0, shards_per_class=5), "shards_per_class=5"),
    (lambda y: P.rare_users(y, 30, 1.0, seed=0), "frequent_frac must lie strictly between 0 and 1"),
    (lambda y: P.rare_users(y, 30, 0.0, seed=0), "frequent_frac"),
    (lambda y: P.rare_users(y, 30, 0.99, seed=0), "frequent users out of 30"),
    (lambda y: P.rare_users(y, 30, 0.9, 1.2, seed=0), "pattern_frac must lie strictly between 0 and 1"),
    (lambda y: P.rare_users(y, 30, 0.9, 0.01, seed=0), "frequent classes out of 10"),
    (lambda y: P.rare_users(y, 30, 0.9, seed=0, rare_classes=[10]), "rare_classes"),
    (lambda y: P.user_classes(y, [[0, 0], [1]], 0), "lists a class twice"),
    (lambda y: P.user_classes(y, [[0], [12]], 0), "outside 0..9"),
    (lambda y: P.user_classes(y, [[0], []], 0), "no classes"),
    (lambda y: P.iid(y.reshape(60, 100), 10, 0), "1-D"),
    (lambda y: P.iid(y - 1, 10, 0), "non-negative"),
    (lambda y: P.iid(y + 0.5, 10, 0), "integers"),
    (lambda y: P.fedau_participation_probs(np.ones((3, 2)), mean=0, seed=0), r"mean .* must lie in \(0, 1\]"),
    (lambda y: P.fedau_participation_probs(np.ones((3, 2)), p_min=0, seed=0), r"p_min must lie in \(0, 1\]"),
    (lambda y: P.fedau_participation_probs(np.ones((3, 2)), alpha=0, seed=0), "alpha must be > 0"),
    (lambda y: P.fedau_participation_probs(np.array([[1, 1], [0, 0]]), seed=0), "client 1 holds no samples"),
    (lambda y: P.fedau_participation_probs(np.ones((3, 2)), seed=0, q=[0.5, 0.6]), "q must be a probability"),
])
def test_value_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call(_labels())


def test_impossible_min_size_raises_runtime_error():
    with pytest.raises(RuntimeError, match="lower the minimum size"):
        P.dirichlet(_labels(), 20, 0.01, seed=0, min_size=250, max_tries=5)


def test_torch_labels_and_from_indices():
    torch = pytest.importorskip("torch")
    y = _labels()
    a = P.iid(torch.as_tensor(y), 6, 0)
    b = P.iid(y, 6, 0)
    assert np.array_equal(a.counts, b.counts)
    part = P.Partition.from_indices([[0, 1], [2]], np.array([2, 0, 1]), num_classes=4)
    assert np.array_equal(part.counts, [[1, 0, 1, 0], [0, 1, 0, 0]]) and part.num_clients == 2
