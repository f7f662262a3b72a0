"""Tests of flkit.sample: selection laws by Monte Carlo (tolerance: 5 binomial standard errors),
exact checks of pow-d's choice, of Clustered Sampling's distributions and of DivFL's greedy facility
location (against brute force and a reference greedy), reproducibility per run."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.cluster.hierarchy import linkage

from flkit import sample as S
from flkit.seeding import rng

Z = 5.0  # tolerance in standard deviations


class FakeProbe:
    """losses = a fixed (R, N) table (NaN where not asked); updates and gradients = fixed vectors. Counts
    its calls (``update_calls`` counts both kinds of vector request, ``gradient_calls`` the gradients)."""

    def __init__(self, table, vectors=None):
        self.table = torch.as_tensor(table, dtype=torch.float64)
        self.vectors = vectors
        self.masks = []
        self.update_masks = []
        self.update_calls = 0
        self.gradient_calls = 0

    def gradients(self, mask):
        self.gradient_calls += 1
        return self.updates(mask)

    def losses(self, mask):
        self.masks.append(mask.clone())
        return torch.where(mask, self.table, torch.full_like(self.table, float("nan")))

    def updates(self, mask):
        self.update_calls += 1
        self.update_masks.append(mask.clone())
        pairs = mask.nonzero()
        return pairs, self.vectors[pairs[:, 0], pairs[:, 1]]


def _run(sampler, sizes, available, rounds, seeds=None, probe=None):
    """counts (rounds, R, N) of `rounds` selections with a fixed availability (R, N)."""
    sizes = torch.as_tensor(sizes, dtype=torch.float64)
    R, N = sizes.shape
    probe = probe if probe is not None else FakeProbe(torch.zeros(R, N))
    state = sampler.init(R, N, sizes, list(range(R)) if seeds is None else seeds)
    out = []
    for t in range(rounds):
        c, state = sampler.select(state, t, torch.as_tensor(available), probe)
        assert c.dtype == torch.int64 and c.shape == (R, N)
        out.append(c.numpy())
    return np.stack(out)


def _close(mean, expected, sd):
    assert np.all(np.abs(mean - expected) <= Z * sd + 1e-12), (mean, expected, sd)


def successive_inclusion(p, k):
    """Exact P(i in S) when k distinct items are drawn one by one proportionally to p (enumeration)."""
    p = np.asarray(p, dtype=float) / np.sum(p)
    incl = np.zeros(p.size)
    for seq in itertools.permutations(range(p.size), k):
        prob, left = 1.0, 1.0
        for i in seq:
            prob *= p[i] / left
            left -= p[i]
        incl[list(seq)] += prob
    return incl


SIZES = np.array([5.0, 1.0, 3.0, 8.0, 2.0, 4.0, 6.0])
AVAIL = np.array([True, True, False, True, True, False, True])  # 5 of 7 available


# ----------------------------------------------------------------------------------------------
# AllAvailable, UniformK, ProportionalK
# ----------------------------------------------------------------------------------------------
def test_all_available_takes_every_available_client_once():
    avail = rng(0, "test").random((3, 7)) < 0.5
    probe = FakeProbe(torch.zeros(3, 7))
    s = S.AllAvailable()
    state = s.init(3, 7, torch.ones(3, 7, dtype=torch.float64), [0, 1, 2])
    c, _ = s.select(state, 0, torch.from_numpy(avail), probe)
    assert np.array_equal(c.numpy(), avail.astype(np.int64)) and not probe.masks


def test_uniform_k_inclusion_k_over_available():
    R, T, k = 200, 40, 2
    counts = _run(S.UniformK(k), np.tile(SIZES, (R, 1)), np.tile(AVAIL, (R, 1)), T)
    c = counts.reshape(-1, 7)
    assert set(np.unique(c)) <= {0, 1} and np.all(c.sum(1) == k) and not c[:, ~AVAIL].any()
    pi = k / AVAIL.sum()
    _close(c[:, AVAIL].mean(0), pi, np.sqrt(pi * (1 - pi) / c.shape[0]))


def test_uniform_k_takes_all_when_few_available():
    avail = np.array([[True, False, True, False, False, False, False], [False] * 7])
    c = _run(S.UniformK(3), np.tile(SIZES, (2, 1)), avail, 3)
    assert np.array_equal(c, np.broadcast_to(avail.astype(np.int64), c.shape))


def test_proportional_with_replacement_is_multinomial():
    R, T, k = 200, 40, 3
    counts = _run(S.ProportionalK(k), np.tile(SIZES, (R, 1)), np.tile(AVAIL, (R, 1)), T).reshape(-1, 7)
    assert np.all(counts.sum(1) == k) and not counts[:, ~AVAIL].any()
    p = SIZES[AVAIL] / SIZES[AVAIL].sum()
    M = counts.shape[0]
    _close(counts[:, AVAIL].mean(0), k * p, np.sqrt(k * p * (1 - p) / M))  # E[counts_i] = k p_i
    q = 1 - (1 - p) ** k  # P(i drawn at least once)
    _close((counts[:, AVAIL] > 0).mean(0), q, np.sqrt(q * (1 - q) / M))
    assert counts.max() > 1, "with replacement a client is sometimes drawn twice"


def test_proportional_with_replacement_draws_k_even_when_few_available():
    avail = np.array([[True, False, False, False, True, False, False]])
    c = _run(S.ProportionalK(3), SIZES[None], avail, 5)
    assert np.all(c.sum(-1) == 3) and not c[..., ~avail[0]].any()


def test_proportional_without_replacement_successive_sampling_law():
    R, T, k = 200, 40, 3
    counts = _run(S.ProportionalK(k, replace=False), np.tile(SIZES, (R, 1)), np.tile(AVAIL, (R, 1)), T)
    c = counts.reshape(-1, 7)
    assert set(np.unique(c)) <= {0, 1} and np.all(c.sum(1) == k) and not c[:, ~AVAIL].any()
    pi = successive_inclusion(SIZES[AVAIL], k)
    assert abs(pi.sum() - k) < 1e-12
    _close(c[:, AVAIL].mean(0), pi, np.sqrt(pi * (1 - pi) / c.shape[0]))
    # the k = 2 closed form of the docstring
    p = SIZES / SIZES.sum()
    k2 = p * (1 + (p / (1 - p)).sum() - p / (1 - p))
    assert np.allclose(successive_inclusion(SIZES, 2), k2, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# PowD
# ----------------------------------------------------------------------------------------------
def test_powd_picks_top_k_losses_among_candidates_only():
    R, N, k, d = 3, 7, 2, 4
    g = rng(1, "test")
    table = g.random((R, N))
    table[0, :] = 0.5  # run 0: all tied -> the two lowest candidate indices
    table[1, 3] = np.nan  # NaN ranks last
    probe = FakeProbe(table)
    avail = np.tile(AVAIL, (R, 1))
    s = S.PowD(k, d)
    state = s.init(R, N, torch.from_numpy(np.tile(SIZES, (R, 1))), [0, 1, 2])
    for t in range(30):
        c, state = s.select(state, t, torch.from_numpy(avail), probe)
        assert len(probe.masks) == t + 1, "one probe.losses call per round"
        asked = probe.masks[-1].numpy()
        assert np.all(asked.sum(1) == d) and not (asked & ~avail).any()
        for r in range(R):
            cand = np.flatnonzero(asked[r])
            key = np.where(np.isnan(table[r, cand]), -np.inf, table[r, cand])
            top = cand[np.lexsort((cand, -key))[:k]]
            assert np.array_equal(np.flatnonzero(c[r].numpy()), np.sort(top))
            if r == 0:
                assert np.array_equal(np.flatnonzero(c[r].numpy()), cand[:k])
        assert set(np.unique(c.numpy())) <= {0, 1}
    assert probe.update_calls == 0


def test_powd_candidates_proportional_to_size():
    R, T, k, d = 200, 30, 1, 3
    probe = FakeProbe(torch.zeros(R, 7))
    _run(S.PowD(k, d), np.tile(SIZES, (R, 1)), np.tile(AVAIL, (R, 1)), T, probe=probe)
    asked = torch.stack(probe.masks).numpy().reshape(-1, 7)
    assert np.all(asked.sum(1) == d) and not asked[:, ~AVAIL].any()
    pi = successive_inclusion(SIZES[AVAIL], d)
    _close(asked[:, AVAIL].mean(0), pi, np.sqrt(pi * (1 - pi) / asked.shape[0]))


def test_powd_asks_nothing_when_no_choice_is_left():
    avail = np.array([[True, False, True, False, False, False, False], AVAIL])
    probe = FakeProbe(torch.zeros(2, 7))
    c = _run(S.PowD(2, 4), SIZES[None], avail[:1], 3, probe=probe)  # |A| = k: take all
    assert np.array_equal(c[:, 0], np.broadcast_to(avail[0].astype(np.int64), (3, 7))) and not probe.masks
    c = _run(S.PowD(2, 2), np.tile(SIZES, (2, 1)), avail, 3, probe=probe)  # d = k: candidates win
    assert not probe.masks and np.all(c.sum(-1) == 2)
    c = _run(S.PowD(2, 4), np.tile(SIZES, (2, 1)), avail, 3, probe=probe)  # run 0 left out of the mask
    assert all(not m[0].any() and m[1].sum() == 4 for m in probe.masks) and len(probe.masks) == 3


# ----------------------------------------------------------------------------------------------
# Clustered Sampling
# ----------------------------------------------------------------------------------------------
def test_arccos_distances_and_zero_updates():
    u = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [-2.0, 0.0]])
    dist = S.arccos_distances(u @ u.T)
    expected = np.array([[0, np.pi / 4, 0, np.pi], [np.pi / 4, 0, 0, 3 * np.pi / 4], [0, 0, 0, 0],
                         [np.pi, 3 * np.pi / 4, 0, 0]])
    assert np.allclose(dist, expected, atol=1e-12)


def test_weight_groups_cut_at_one_over_k():
    # leaves 0,1 merge, then 2,3, then (0,1)+(2,3); p = (.2, .1, .3, .4); k = 2 -> {0,1} (0.3), {2}, {3}
    Zm = np.array([[0, 1, 0.1, 2], [2, 3, 0.2, 2], [4, 5, 0.3, 4]], dtype=float)
    groups = S.weight_groups(Zm, np.array([0.2, 0.1, 0.3, 0.4]), 2)
    assert sorted(g.tolist() for g in groups) == [[0, 1], [2], [3]]
    groups = S.weight_groups(Zm, np.array([0.25] * 4), 2)  # weights exactly 1/k stay together
    assert sorted(g.tolist() for g in groups) == [[0, 1], [2, 3]]


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_clustered_distributions_rows_one_columns_k_p(k):
    g = rng(k, "test")
    for trial in range(20):
        n = int(g.integers(1, 12))
        sizes = g.exponential(size=n) ** 2 + 0.01  # uneven: often a client with k p_i > 1
        p = sizes / sizes.sum()
        pts = g.normal(size=(n, 3))
        Zm = linkage(pts, "ward") if n > 1 else None
        groups = S.weight_groups(Zm, p, k) if n > 1 else [np.array([0])]
        assert sorted(np.concatenate(groups).tolist()) == list(range(n))
        assert all(p[gr].sum() <= 1 / k + 1e-9 or gr.size == 1 for gr in groups)
        r = S.clustered_distributions(groups, p, k, g)
        assert r.shape == (k, n) and np.all(r >= 0)
        assert np.allclose(r.sum(1), 1, atol=1e-12) and np.allclose(r.sum(0), k * p, atol=1e-10)


def test_clustered_distributions_known_case():
    """k = 2, groups {0,1} (0.45), {2} (0.35), {3} (0.1), {4} (0.1): the two heaviest seed the two
    distributions (lighter first), then clients 3 and 4 fill the first, 4 spilling into the second."""
    p = np.array([0.2, 0.25, 0.35, 0.1, 0.1])
    groups = [np.array([3]), np.array([0, 1]), np.array([4]), np.array([2])]
    r = S.clustered_distributions(groups, p, 2, rng(0, "test"))
    expected = np.array([[0, 0, 0.7, 0.2, 0.1], [0.4, 0.5, 0, 0, 0.1]])
    assert np.allclose(r, expected, atol=1e-12)


def _cluster_case():
    """9 clients in 3 clusters of identical (orthogonal) updates, each cluster holding 1/3 of the data."""
    sizes = np.array([1.0, 2.0, 3.0, 2.0, 2.0, 2.0, 4.0, 1.0, 1.0])
    cluster = np.repeat([0, 1, 2], 3)
    vectors = torch.eye(5, dtype=torch.float64)[cluster] * torch.from_numpy(np.arange(1.0, 10.0))[:, None]
    return sizes, cluster, vectors


def test_clustered_sampling_one_client_per_cluster_and_unbiased():
    sizes, cluster, vectors = _cluster_case()
    R, T, k, N = 100, 40, 3, 9
    s = S.ClusteredSampling(k)
    probe = FakeProbe(torch.zeros(R, N))
    state = s.init(R, N, torch.from_numpy(np.tile(sizes, (R, 1))), list(range(R)))
    pairs = torch.cartesian_prod(torch.arange(R), torch.arange(N))
    state = s.observe(state, 0, pairs, vectors[pairs[:, 1]])
    out = []
    for t in range(T):
        c, state = s.select(state, t, torch.ones(R, N, dtype=torch.bool), probe)
        out.append(c.numpy())
    c = np.stack(out).reshape(-1, N)
    per_cluster = np.stack([c[:, cluster == j].sum(1) for j in range(3)], 1)
    assert np.all(per_cluster == 1), "exactly one client of each cluster every round"
    # one independent draw per distribution: P(client 0 and client 3) = (1/6) (2/6)
    both, q = (c[:, 0] * c[:, 3]).mean(), 1 / 18
    assert abs(both - q) <= Z * np.sqrt(q * (1 - q) / c.shape[0])
    p = sizes / sizes.sum()
    _close(c.mean(0), k * p, np.sqrt(k * p * (1 - p) / c.shape[0]))
    assert not probe.masks and probe.update_calls == 0


def test_clustered_sampling_unbiased_unobserved_and_partial_availability():
    """No update observed yet (all zero, as the authors' start), a heavy client (k p_i > 1), 5 of 7
    available: E[counts_i] = k n_i / sum_{A} n_j, k draws, never an unavailable client."""
    R, T, k = 150, 40, 4
    sizes = SIZES.copy()
    sizes[3] = 30.0
    counts = _run(S.ClusteredSampling(k), np.tile(sizes, (R, 1)), np.tile(AVAIL, (R, 1)), T).reshape(-1, 7)
    assert np.all(counts.sum(1) == k) and not counts[:, ~AVAIL].any()
    p = sizes[AVAIL] / sizes[AVAIL].sum()
    assert k * p.max() > 1
    _close(counts[:, AVAIL].mean(0), k * p, np.sqrt(k * p * (1 - p) / counts.shape[0]))


def test_clustered_observe_keeps_latest_updates_and_gram():
    R, N, dim = 2, 5, 4
    g = rng(3, "test")
    s = S.ClusteredSampling(2)
    state = s.init(R, N, torch.ones(R, N, dtype=torch.float64), [0, 1])
    ref = np.zeros((R, N, dim))
    for t in range(4):
        pairs = torch.tensor([[0, t], [1, (2 * t) % N], [0, (t + 1) % N], [0, t]])  # (0, t) twice: last wins
        delta = torch.from_numpy(g.normal(size=(4, dim)))
        state = s.observe(state, t, pairs, delta)
        for (r, i), v in zip(pairs.tolist(), delta.numpy()):
            ref[r, i] = v
    assert np.array_equal(state.updates.numpy(), ref)
    assert np.allclose(state.gram, np.einsum("rid,rjd->rij", ref, ref), atol=1e-12)


def test_clustered_warmup_is_md_sampling():
    R, T, k = 3, 6, 2
    a = _run(S.ClusteredSampling(k, warmup=T), np.tile(SIZES, (R, 1)), np.tile(AVAIL, (R, 1)), T)
    b = _run(S.ProportionalK(k), np.tile(SIZES, (R, 1)), np.tile(AVAIL, (R, 1)), T)
    assert np.array_equal(a, b)


# ----------------------------------------------------------------------------------------------
# DivFL
# ----------------------------------------------------------------------------------------------
def ref_greedy(D, k):
    """The greedy written out: k times, add the client not yet chosen with the smallest
    sum_i min_{j in S} D[i, j] (math.fsum: correctly rounded, so a tie in exact arithmetic between the
    same terms in another order stays a tie); a later client wins only when strictly smaller."""
    chosen = []
    for _ in range(min(k, D.shape[0])):
        best, arg = np.inf, None
        for j in range(D.shape[0]):
            if j not in chosen:
                v = math.fsum(min(D[i, s] for s in chosen + [j]) for i in range(D.shape[0]))
                if arg is None or v < best:
                    best, arg = v, j
        chosen.append(arg)
    return chosen


def fl_loss(D, chosen):
    """sum_i min_{j in S} D[i, j]."""
    return D[:, list(chosen)].min(axis=1).sum()


def _dist(u):
    u = np.asarray(u, dtype=float)
    return np.linalg.norm(u[:, None] - u[None], axis=-1)


def _clusters():
    """10 clients in 3 clusters of identical updates: cluster 0 = {1, 3, 6, 7}, 1 = {2, 5, 8}, 2 = {0, 4, 9}."""
    labels = np.array([2, 0, 1, 0, 2, 1, 0, 0, 1, 2])
    centers = torch.tensor([[0.0, 0.0, 0.0], [3.0, 0.0, 0.0], [0.0, 4.0, 1.0]], dtype=torch.float64)
    return labels, centers[labels]


def test_divfl_greedy_one_client_per_cluster_by_the_tie_rule():
    labels, u = _clusters()
    D = S.update_distances(u)
    same = labels[:, None] == labels[None]
    assert np.all(D[same] == 0) and np.all(D[~same] > 0) and np.array_equal(D, D.T)
    # sum of distances: cluster 0 (4 clients) 3*3 + 3*sqrt(17) is the smallest, then cluster 2 saves
    # 3*sqrt(17) > cluster 1's 3*3; within a cluster the columns tie exactly -> the lowest index
    assert S.facility_location_greedy(D, 3).tolist() == [1, 0, 2]
    assert fl_loss(D, [1, 0, 2]) == 0.0
    assert S.facility_location_greedy(D, 2).tolist() == [1, 0]
    best2 = min(fl_loss(D, c) for c in itertools.combinations(range(10), 2))
    assert fl_loss(D, [1, 0]) == best2 == 9.0  # cluster 1's three clients at distance 3 from cluster 0
    # through the sampler: client 1 unavailable -> cluster 0 is represented by client 3
    avail = np.ones((2, 10), dtype=bool)
    avail[1, 1] = False
    probe = FakeProbe(torch.zeros(2, 10), torch.stack([u, u]))
    s = S.DivFL(3)
    c, _ = s.select(s.init(2, 10, torch.ones(2, 10, dtype=torch.float64), [0, 1]), 0, torch.from_numpy(avail), probe)
    assert np.flatnonzero(c[0]).tolist() == [0, 1, 2] and np.flatnonzero(c[1]).tolist() == [0, 2, 3]


@pytest.mark.parametrize("seed", range(5))
def test_divfl_greedy_equals_reference_and_is_within_1_minus_1_over_e_of_brute_force(seed):
    g = rng(seed, "test")
    strict = 0
    for trial in range(12):
        n, dim = int(g.integers(3, 9)), int(g.integers(1, 5))
        k = int(g.integers(1, n + 1))
        u = g.normal(size=(n, dim)) * g.exponential(size=(n, 1))
        D = S.update_distances(torch.from_numpy(u))
        assert np.allclose(D, _dist(u), rtol=0, atol=1e-12) and np.array_equal(D, D.T) and np.all(np.diag(D) == 0)
        greedy = S.facility_location_greedy(D, k)
        assert greedy.tolist() == ref_greedy(D, k)
        C = D.max()  # G(S) = sum_i max_{j in S} (C - D[i, j]) = n C - L(S): monotone submodular, G(empty) = 0
        opt = max(n * C - fl_loss(D, c) for c in itertools.combinations(range(n), k))
        value = n * C - fl_loss(D, greedy)
        assert (1 - 1 / np.e) * opt - 1e-12 <= value <= opt + 1e-12
        strict += value < opt - 1e-12
    if seed == 0:
        assert strict > 0, "the brute force finds a better set than the greedy at least once"


def test_divfl_stochastic_greedy_draws_candidates_from_the_generator():
    g = rng(5, "test")
    n, k = 12, 3
    D = S.update_distances(torch.from_numpy(g.normal(size=(n, 4))))
    got = S.facility_location_greedy(D, k, rng(1, "selection"), subsample=0.25)  # m = max(3, int(3.0)) = 3
    g2, left, want = rng(1, "selection"), list(range(n)), []
    for _ in range(k):
        cand = np.sort(g2.choice(np.array(left), size=3, replace=False))
        j = int(cand[int(np.argmin([fl_loss(D, want + [j]) for j in cand]))])
        want.append(j)
        left.remove(j)
    assert got.tolist() == want
    full = S.facility_location_greedy(D, k).tolist()
    assert S.facility_location_greedy(D, k, rng(1, "selection"), subsample=1.0).tolist() == full
    assert any(S.facility_location_greedy(D, k, rng(s, "selection"), subsample=0.25).tolist() != full
               for s in range(5))


@pytest.mark.parametrize("proxy", ["gradient", "update"])
def test_divfl_probed_proxies_ask_the_available_vectors_once_per_round(proxy):
    R, N, dim, k, T = 3, 8, 4, 3, 6
    g = rng(2, "test")
    vectors = torch.from_numpy(g.normal(size=(R, N, dim)))
    probe = FakeProbe(torch.zeros(R, N), vectors)
    s = S.DivFL(k, proxy=proxy)
    state = s.init(R, N, torch.ones(R, N, dtype=torch.float64), [0, 1, 2])
    for t in range(T):
        avail = g.random((R, N)) < 0.6
        avail[:, t % 4: t % 4 + k + 1] = True  # every run has a choice to make
        c, state = s.select(state, t, torch.from_numpy(avail), probe)
        assert probe.update_calls == t + 1 and torch.equal(probe.update_masks[-1], torch.from_numpy(avail))
        for r in range(R):
            idx = np.flatnonzero(avail[r])
            want = idx[ref_greedy(_dist(vectors[r, idx].numpy()), k)]
            assert np.flatnonzero(c[r].numpy()).tolist() == sorted(want.tolist())
    assert not probe.masks and probe.gradient_calls == (T if proxy == "gradient" else 0)


def test_divfl_takes_all_when_few_available_and_asks_only_runs_with_a_choice():
    avail = np.array([[True, False, True, False, False, False, False], AVAIL])  # 2 and 5 available
    vectors = torch.from_numpy(rng(3, "test").normal(size=(2, 7, 3)))
    probe = FakeProbe(torch.zeros(2, 7), vectors)
    c = _run(S.DivFL(2), np.tile(SIZES, (2, 1)), avail, 3, probe=probe)
    assert np.array_equal(c[:, 0], np.broadcast_to(avail[0].astype(np.int64), (3, 7)))
    assert np.all(c[:, 1].sum(-1) == 2) and not (c[:, 1] & ~AVAIL).any()
    assert probe.update_calls == 3 and all(not m[0].any() and np.array_equal(m[1].numpy(), AVAIL)
                                           for m in probe.update_masks)
    probe = FakeProbe(torch.zeros(1, 7), vectors[:1])
    c = _run(S.DivFL(2), SIZES[None], avail[:1], 3, probe=probe)  # |A| = k: take all, ask nothing
    assert np.array_equal(c[:, 0], np.broadcast_to(avail[0].astype(np.int64), (3, 7))) and probe.update_calls == 0


@pytest.mark.parametrize("proxy", ["gradient", "update", "stale"])
def test_divfl_never_selects_an_unavailable_client(proxy):
    R, N, k, T = 4, 9, 3, 25
    g = rng(4, "test")
    vectors = torch.from_numpy(g.normal(size=(T, R, N, 5)))
    s = S.DivFL(k, proxy=proxy)
    state = s.init(R, N, torch.ones(R, N, dtype=torch.float64), [0, 1, 2, 3])
    for t in range(T):
        avail = g.random((R, N)) < g.uniform(0.1, 0.9)
        probe = FakeProbe(torch.zeros(R, N), vectors[t])
        c, state = s.select(state, t, torch.from_numpy(avail), probe)
        c = c.numpy()
        assert set(np.unique(c)) <= {0, 1} and not c[~avail].any()
        assert np.array_equal(c.sum(1), np.minimum(k, avail.sum(1)))
        assert probe.update_calls == int(proxy != "stale" and bool((avail.sum(1) > k).any()))
        assert probe.gradient_calls == int(proxy == "gradient" and bool((avail.sum(1) > k).any()))
        pairs = torch.from_numpy(c).nonzero()
        state = s.observe(state, t, pairs, vectors[t, pairs[:, 0], pairs[:, 1]])
    assert (state.updates is None) == (proxy != "stale")


def test_divfl_stale_uses_the_last_observed_updates_and_zeros_for_the_unseen():
    N, k = 6, 2
    s = S.DivFL(k, proxy="stale")
    state = s.init(1, N, torch.ones(1, N, dtype=torch.float64), [0])
    probe = FakeProbe(torch.zeros(1, N))  # no vectors: an updates call would fail
    everyone = torch.ones(1, N, dtype=torch.bool)
    c, state = s.select(state, 0, everyone, probe)
    assert np.flatnonzero(c[0]).tolist() == [0, 1], "nothing observed: all at distance 0, the lowest indices"
    pairs = torch.tensor([[0, 0], [0, 3], [0, 0], [0, 4]])
    delta = torch.tensor([[9.0, 9.0], [5.0, 0.0], [-6.0, 0.0], [5.0, 0.1]], dtype=torch.float64)
    state = s.observe(state, 0, pairs, delta)  # client 0 twice: the last one is kept
    table = torch.zeros(N, 2, dtype=torch.float64)
    table[0], table[3], table[4] = delta[2], delta[1], delta[3]
    assert torch.equal(state.updates[0], table)
    c, state = s.select(state, 1, everyone, probe)
    # the zero clients 1, 2, 5 cover the most; then 3 and 4 tie (L = 6.1) -> 3
    assert np.flatnonzero(c[0]).tolist() == sorted(ref_greedy(_dist(table.numpy()), k)) == [1, 3]
    assert probe.update_calls == 0


def _fl_task():
    """tests/test_fl.py's small task: 6 clients, a linear softmax model, 3 local steps."""
    from flkit.tasks import EngineTask
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 5, generator=g, dtype=torch.float64)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long() + (x[:, 2] > 1).long()
    clients = np.array_split(torch.randperm(120, generator=g).numpy(), 6)
    return EngineTask(model=torch.nn.Linear(5, 3).to(torch.float64), x=x, y=y, clients=clients, x_test=x[:40],
                      y_test=y[:40], batch_size=4, steps=3, local_lr=0.2)


class _Spy:
    """Wraps a sampler for fl.run and records, per round, the availability, the counts, the probe's
    answers and the updates observed."""

    def __init__(self, inner):
        self.inner, self.log = inner, []

    def init(self, *args):
        return self.inner.init(*args)

    def select(self, state, t, available, probe):
        asked = []

        class Recorder:
            def updates(self, mask):
                out = probe.updates(mask)
                asked.append((mask.clone(), *out))
                return out

            def gradients(self, mask):
                out = probe.gradients(mask)
                asked.append((mask.clone(), *out))
                return out

        c, state = self.inner.select(state, t, available, Recorder())
        self.log.append(dict(t=t, available=available.clone(), counts=c.clone(), asked=asked))
        return c, state

    def observe(self, state, t, pairs, delta):
        self.log[-1].update(pairs=pairs.clone(), delta=delta.clone())
        return self.inner.observe(state, t, pairs, delta)


@pytest.mark.parametrize("sampler", [S.DivFL(2, proxy="update"), S.DivFL(2), S.DivFL(2, proxy="stale", subsample=0.5)],
                         ids=["update", "gradient", "stale"])
def test_divfl_end_to_end_through_fl_run(sampler):
    from flkit import aggregate, fl, participation
    T, k, seeds = 5, 2, [3, 11]
    p = np.array([0.9, 0.2, 0.5, 0.7, 0.3, 0.6])
    spy = _Spy(sampler)
    res = fl.run(_fl_task(), {"divfl": fl.Algorithm(aggregate.FedAvg(), sampler=spy)}, seeds=seeds, rounds=T,
                 availability=lambda s: participation.bernoulli(p, T, s))
    masks = np.stack([participation.bernoulli(p, T, s) for s in seeds], 1)  # (T, R, N)
    assert np.array_equal(res.evals["divfl"], np.minimum(k, masks.sum(-1)).sum(0))
    assert np.isfinite(res.values["divfl"]["test_loss"]).all() and len(spy.log) == T
    checked = 0
    for t, rec in enumerate(spy.log):
        avail, c = masks[t], rec["counts"].numpy()
        assert np.array_equal(rec["available"].numpy(), avail) and not c[~avail].any()
        assert np.array_equal(c.sum(1), np.minimum(k, avail.sum(1))) and set(np.unique(c)) <= {0, 1}
        if sampler.proxy == "stale":
            assert not rec["asked"]
            continue
        choice = avail.sum(1) > k
        assert len(rec["asked"]) == int(choice.any())
        if not choice.any():
            continue
        checked += 1
        mask, pairs, delta = rec["asked"][0]
        assert np.array_equal(mask.numpy(), avail & choice[:, None])
        for r in np.flatnonzero(choice):
            rows = (pairs[:, 0] == r).nonzero().squeeze(1)
            clients = pairs[rows, 1].numpy()
            want = clients[ref_greedy(_dist(delta[rows].numpy()), k)]
            assert np.flatnonzero(c[r]).tolist() == sorted(want.tolist())
            if sampler.proxy == "gradient":
                continue
            # the chosen clients then send exactly the probed updates
            for i in want:
                sent = rec["delta"][((rec["pairs"][:, 0] == r) & (rec["pairs"][:, 1] == int(i))).nonzero()[0, 0]]
                assert torch.equal(sent, delta[rows[clients.tolist().index(i)]])
    assert sampler.proxy == "stale" or checked >= 2, "some rounds must leave a choice to make"


def test_divfl_argument_errors():
    ones = torch.ones(2, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="k must be an int >= 1, got 0"):
        S.DivFL(0)
    for bad in ("last", "ideal"):
        with pytest.raises(ValueError, match=f"proxy must be 'gradient' .*, 'update' .* or 'stale' .*, got '{bad}'"):
            S.DivFL(2, proxy=bad)
    for bad in (0, 0.0, 1.5, True, "0.1"):
        with pytest.raises(ValueError, match="subsample must be None .* or a number in \\(0, 1\\]"):
            S.DivFL(2, subsample=bad)
    with pytest.raises(ValueError, match="k = 6 exceeds num_clients = 5"):
        S.DivFL(6).init(2, 5, ones, [0, 1])
    class Short:  # forgets the last asked pair
        def updates(self, mask):
            pairs = mask.nonzero()[:-1]
            return pairs, torch.zeros(len(pairs), 3, dtype=torch.float64)

        gradients = updates

    for proxy, what in (("update", "updates"), ("gradient", "gradients")):
        s = S.DivFL(2, proxy=proxy)
        with pytest.raises(ValueError, match=f"probe.{what} returned 9 {what} for 10 asked"):
            s.select(s.init(2, 5, ones, [0, 1]), 0, torch.ones(2, 5, dtype=torch.bool), Short())
    st = S.DivFL(2, proxy="stale")
    with pytest.raises(ValueError, match="pairs must hold \\(run < 2, client < 5\\)"):
        st.observe(st.init(2, 5, ones, [0, 1]), 0, torch.tensor([[0, 5]]), torch.zeros(1, 3))


# ----------------------------------------------------------------------------------------------
# reproducibility: same seeds -> same choices; a run's choices do not depend on the runs beside it
# ----------------------------------------------------------------------------------------------
SAMPLERS = [S.UniformK(2), S.ProportionalK(3), S.ProportionalK(2, replace=False), S.PowD(2, 4),
            S.ClusteredSampling(3), S.DivFL(3, subsample=0.5), S.DivFL(3, proxy="update", subsample=0.5),
            S.DivFL(3, proxy="stale", subsample=0.5)]


def _history(sampler, seeds, avail, table, vectors, T=8):
    R, N = avail.shape[1:]
    sizes = torch.from_numpy(np.tile(SIZES, (R, 1)))
    probe = FakeProbe(table, vectors[0])
    state = sampler.init(R, N, sizes, seeds)
    out = []
    for t in range(T):
        c, state = sampler.select(state, t, torch.from_numpy(avail[t]), probe)
        out.append(c.numpy())
        pairs = c.nonzero()
        state = sampler.observe(state, t, pairs, vectors[t, pairs[:, 0], pairs[:, 1]])
    return np.stack(out)


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda s: type(s).__name__ + getattr(s, "proxy", ""))
def test_reproducible_and_independent_of_other_runs(sampler):
    g = rng(7, "test")
    T, R, N = 8, 4, 7
    seeds = [11, 12, 13, 14]
    avail = g.random((T, R, N)) < 0.8
    table = torch.from_numpy(g.random((R, N)))
    vectors = torch.from_numpy(g.normal(size=(T, R, N, 6)))
    full = _history(sampler, seeds, avail, table, vectors)
    assert np.array_equal(full, _history(sampler, seeds, avail, table, vectors))
    for r in range(R):
        alone = _history(sampler, [seeds[r]], avail[:, r:r + 1], table[r:r + 1], vectors[:, r:r + 1])
        assert np.array_equal(alone[:, 0], full[:, r]), r
    other = _history(sampler, [99, 12, 13, 14], avail, table, vectors)
    assert not np.array_equal(other[:, 0], full[:, 0]) and np.array_equal(other[:, 1:], full[:, 1:])


# ----------------------------------------------------------------------------------------------
# errors
# ----------------------------------------------------------------------------------------------
def test_argument_errors():
    ones = torch.ones(2, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="k must be an int >= 1, got 0"):
        S.UniformK(0)
    with pytest.raises(ValueError, match="d = 1 must be >= k = 2"):
        S.PowD(2, 1)
    with pytest.raises(ValueError, match="d = 6 exceeds num_clients = 5"):
        S.PowD(2, 6).init(2, 5, ones, [0, 1])
    with pytest.raises(ValueError, match="k = 6 exceeds num_clients = 5"):
        S.UniformK(6).init(2, 5, ones, [0, 1])
    with pytest.raises(ValueError, match="replace must be True or False"):
        S.ProportionalK(2, replace="yes")
    with pytest.raises(ValueError, match="warmup must be an int >= 0"):
        S.ClusteredSampling(2, warmup=-1)
    with pytest.raises(ValueError, match=r"sizes must have shape \(runs, num_clients\) = \(2, 4\)"):
        S.UniformK(2).init(2, 4, ones, [0, 1])
    with pytest.raises(ValueError, match=r"sizes\[1, 2\] = 0.0"):
        bad = ones.clone()
        bad[1, 2] = 0
        S.ProportionalK(2).init(2, 5, bad, [0, 1])
    with pytest.raises(ValueError, match="one seed per run \\(2\\), got 1"):
        S.UniformK(2).init(2, 5, ones, [0])
    s = S.UniformK(2)
    with pytest.raises(ValueError, match="available must be a bool tensor of shape"):
        s.select(s.init(2, 5, ones, [0, 1]), 0, torch.ones(2, 5), None)
