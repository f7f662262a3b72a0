"""Tests of HiCS-FL's samplers (flkit.sample.HiCS, the document's reading; flkit.sample.HiCSAuthors, the authors'
code) and their helpers: the entropy estimate (exact), the annealed group probabilities (closed form), the
distance of Eq. 9, Ward clustering against scipy, the selection law (Monte Carlo within 4 standard errors, exact
successive-sampling inclusion), warm-up, the sampler's parity with its helpers, the code reading, the two classes
against the selections of the one class they were split from, and runs through flkit.fl.run."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from scipy.cluster.hierarchy import fcluster, linkage

from flkit import sample as S
from flkit.seeding import rng
from test_sample import successive_inclusion   # exact inclusion probabilities by enumeration

Z = 4.0  # Monte Carlo tolerance in standard errors


def _partition(labels):
    return {frozenset(np.flatnonzero(labels == v).tolist()) for v in np.unique(labels)}


# ----------------------------------------------------------------------------------------------
# Eq. 7: the entropy estimate
# ----------------------------------------------------------------------------------------------
def test_entropy_estimate_equal_biases_give_ln_C():
    for C in (2, 3, 10, 100):
        assert abs(S.entropy_estimate(np.zeros(C), 0.0025) - math.log(C)) < 1e-12
        assert abs(S.entropy_estimate(np.full(C, 0.37), 0.0025) - math.log(C)) < 1e-12  # shift-invariant


def test_entropy_estimate_one_dominant_class_tends_to_zero():
    b = np.array([0.01, 0.0, 0.0, 0.0])
    H = [float(S.entropy_estimate(b, T)) for T in (1.0, 0.1, 0.01, 0.001, 0.0001)]
    assert all(a > c for a, c in zip(H, H[1:]))                     # decreasing as T -> 0
    # closed form for one class at z, C - 1 at 0: q1 = 1 / (1 + (C-1) e^{-z})
    for T, h in zip((1.0, 0.1, 0.01), H):
        z = 0.01 / T
        q1 = 1 / (1 + 3 * math.exp(-z))
        q0 = (1 - q1) / 3
        assert abs(h - (-q1 * math.log(q1) - 3 * q0 * math.log(q0))) < 1e-12
    assert H[-1] < 1e-35 and np.isfinite(H[-1])
    assert S.entropy_estimate([1e6, 0.0, 0.0], 1e-3) == 0.0      # no overflow, no NaN


def test_entropy_estimate_hand_computed_three_classes_and_batches():
    b = np.array([0.003, 0.001, -0.002])                          # z = b / T = (1.2, 0.4, -0.8)
    z = [1.2, 0.4, -0.8]
    s = sum(math.exp(v) for v in z)
    hand = math.log(s) - sum(v * math.exp(v) for v in z) / s   # H = ln sum e^z - E_q[z]
    assert abs(hand - 0.8580175050573497) < 1e-12
    assert abs(S.entropy_estimate(b, 0.0025) - hand) < 1e-12
    batch = np.stack([np.stack([b, np.zeros(3)]), np.stack([-b, b])])     # (2, 2, 3)
    H = S.entropy_estimate(batch, 0.0025)
    assert H.shape == (2, 2) and abs(H[0, 0] - hand) < 1e-12 and abs(H[0, 1] - math.log(3)) < 1e-12
    assert abs(H[1, 1] - hand) < 1e-12 and H[1, 0] != H[0, 0]    # the sign of the update matters


def test_entropy_estimate_errors():
    for T in (0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="T \\(the temperature\\) must be a finite number > 0"):
            S.entropy_estimate(np.zeros(3), T)
    with pytest.raises(ValueError, match="C >= 2 classes"):
        S.entropy_estimate(np.zeros((4, 1)), 0.1)
    with pytest.raises(ValueError, match="finite values"):
        S.entropy_estimate([0.0, np.nan], 0.1)


# ----------------------------------------------------------------------------------------------
# Eq. 10: annealed group probabilities
# ----------------------------------------------------------------------------------------------
def test_annealed_probs_closed_form_uniform_at_the_end_and_monotone():
    H = np.array([0.1, 2.0, 0.7, 1.3, 2.3])
    for t in (0, 1, 37, 100):
        gamma = 4.0 * (1 - t / 100)
        want = np.exp(gamma * H) / np.exp(gamma * H).sum()
        assert np.max(np.abs(S.annealed_probs(H, 4.0, t, 100) - want)) < 1e-12
    assert np.max(np.abs(S.annealed_probs(H, 4.0, 100, 100) - 0.2)) < 1e-15     # gamma_T = 0
    assert np.max(np.abs(S.annealed_probs(H, 0.0, 3, 100) - 0.2)) < 1e-15       # gamma0 = 0
    order = np.argsort(H)
    for t in (0, 50, 99):
        p = S.annealed_probs(H, 4.0, t, 100)[order]
        assert np.all(np.diff(p) > 0)                               # increasing in H_bar
    # the largest entropy gains weight as gamma grows (earlier rounds)
    top = [S.annealed_probs(H, 4.0, t, 100)[4] for t in (0, 25, 50, 75, 100)]
    assert all(a > b for a, b in zip(top, top[1:]))
    big = S.annealed_probs([1000.0, 0.0], 4.0, 0, 10)               # stable: no overflow
    assert big[0] == 1.0 and big[1] == 0.0


def test_annealed_probs_errors():
    with pytest.raises(ValueError, match="t must lie in \\[0, rounds = 10\\], got 11"):
        S.annealed_probs([1.0, 2.0], 4.0, 11, 10)
    with pytest.raises(ValueError, match="gamma0 must be a finite number >= 0"):
        S.annealed_probs([1.0, 2.0], -1.0, 1, 10)
    with pytest.raises(ValueError, match="rounds must be an int >= 1"):
        S.annealed_probs([1.0, 2.0], 4.0, 0, 0)
    with pytest.raises(ValueError, match="H_bar must be a non-empty 1-D array"):
        S.annealed_probs([], 4.0, 0, 10)


# ----------------------------------------------------------------------------------------------
# Eq. 9 and Ward clustering
# ----------------------------------------------------------------------------------------------
def test_hics_distances_paper_and_code_forms():
    U = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0], [0.0, 0.0]])
    H = np.array([0.5, 1.0, 2.0, 0.0])
    arc = np.array([[0, np.pi / 2, np.pi / 4, 0], [np.pi / 2, 0, np.pi / 4, 0],
                    [np.pi / 4, np.pi / 4, 0, 0], [0, 0, 0, 0]])         # zero vector: distance 0
    dH = np.abs(H[:, None] - H[None, :])
    assert np.max(np.abs(S.hics_distances(U, H, 0.1) - (0.1 * arc + 0.9 * dH))) < 1e-12
    assert np.max(np.abs(S.hics_distances(U, H, 10.0, "code") - (arc + 10.0 * dH))) < 1e-12
    assert np.max(np.abs(S.hics_distances(-U, H, 0.1) - S.hics_distances(U, H, 0.1))) < 1e-15
    with pytest.raises(ValueError, match="lam must lie in \\[0, 1.0\\] for form='paper', got 10"):
        S.hics_distances(U, H, 10)
    with pytest.raises(ValueError, match="form must be 'paper'"):
        S.hics_distances(U, H, 0.1, "ward")


@pytest.mark.filterwarnings("ignore::scipy.cluster.hierarchy.ClusterWarning")
@pytest.mark.parametrize("M", [2, 3, 5, 7])
def test_ward_clusters_same_partition_as_scipy(M):
    g = rng(3, "test")
    X = np.concatenate([g.normal(c, 0.3, size=(4, 2)) for c in ((0, 0), (3, 0), (0, 3), (3, 3))])
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))             # a fixed 16 x 16 distance matrix
    labels = S.ward_clusters(D, M)
    ref = fcluster(linkage(D, method="ward"), M, criterion="maxclust")
    assert _partition(labels) == _partition(ref) and len(np.unique(labels)) == M
    first = [int(np.flatnonzero(labels == m)[0]) for m in range(M)]
    assert first == sorted(first) and labels[0] == 0               # numbered by first appearance
    if M == 4:
        assert _partition(labels) == {frozenset(range(4 * j, 4 * j + 4)) for j in range(4)}


def test_ward_clusters_edge_cases_and_errors():
    D = np.array([[0.0, 1.0], [1.0, 0.0]])
    assert S.ward_clusters(D, 1).tolist() == [0, 0] and S.ward_clusters(D, 2).tolist() == [0, 1]
    with pytest.raises(ValueError, match="M = 3 groups exceed the 2 clients"):
        S.ward_clusters(D, 3)


# ----------------------------------------------------------------------------------------------
# the selection law (Algorithm 1, lines 8-12) and the code's slot rule
# ----------------------------------------------------------------------------------------------
LABELS = np.array([0, 0, 1, 1, 1, 2, 2, 0, 2])
SIZES = np.array([3.0, 1.0, 2.0, 5.0, 1.0, 4.0, 4.0, 2.0, 6.0])
PI = np.array([0.5, 0.2, 0.3])


def test_hics_draw_one_client_cluster_frequencies_and_sizes():
    g, n = rng(0, "test"), 40_000
    picks = np.array([S.hics_draw(g, LABELS, PI, SIZES, 1)[0] for _ in range(n)])
    freq = np.bincount(LABELS[picks], minlength=3) / n
    assert np.all(np.abs(freq - PI) <= Z * np.sqrt(PI * (1 - PI) / n))
    within = SIZES / np.bincount(LABELS, weights=SIZES)[LABELS]
    q = PI[LABELS] * within                                        # P(client i) = pi_m n_i / n(G_m)
    f = np.bincount(picks, minlength=9) / n
    assert np.all(np.abs(f - q) <= Z * np.sqrt(q * (1 - q) / n))


def test_hics_draw_k_clients_is_successive_sampling_of_q():
    g, n, k = rng(1, "test"), 20_000, 3
    counts = np.zeros(9)
    for _ in range(n):
        pick = S.hics_draw(g, LABELS, PI, SIZES, k)
        assert len(set(pick.tolist())) == k
        counts[pick] += 1
    within = SIZES / np.bincount(LABELS, weights=SIZES)[LABELS]
    incl = successive_inclusion(PI[LABELS] * within, k)
    assert abs(incl.sum() - k) < 1e-12
    assert np.all(np.abs(counts / n - incl) <= Z * np.sqrt(incl * (1 - incl) / n))


def test_hics_draw_code_rule_slots_and_uniform_within_groups():
    labels = np.repeat([0, 1, 2], 6)                                # groups of 6 >= k: no redraws
    sizes = np.arange(1.0, 19.0)                                    # unused by the code rule
    g, n, k = rng(2, "test"), 20_000, 4
    slots, counts = np.zeros((n, 3)), np.zeros(18)
    for r in range(n):
        pick = S.hics_draw(g, labels, PI, sizes, k, rule="code")
        assert len(set(pick.tolist())) == k
        slots[r] = np.bincount(labels[pick], minlength=3)
        counts[pick] += 1
    mean, sd = slots.mean(0), slots.std(0) / np.sqrt(n)
    assert np.all(np.abs(mean - k * PI) <= Z * sd)                  # Multinomial(k, pi) slots
    incl = np.repeat(k * PI / 6, 6)                                 # uniform within a group
    assert np.all(np.abs(counts / n - incl) <= Z * np.sqrt(incl * (1 - incl) / n))
    # a full group is drawn again: a group of one client never gets two slots
    small = np.array([0, 1, 1, 1])
    for _ in range(200):
        assert np.bincount(small[S.hics_draw(g, small, np.array([0.9, 0.1]), np.ones(4), 3, "code")])[0] == 1


# ----------------------------------------------------------------------------------------------
# the sampler
# ----------------------------------------------------------------------------------------------
def _state(sampler, R, N, seeds=None, sizes=None):
    sizes = torch.ones(R, N, dtype=torch.float64) if sizes is None else torch.as_tensor(sizes).expand(R, N)
    return sampler.init(R, N, sizes, list(range(R)) if seeds is None else seeds)


@pytest.mark.parametrize("N,K", [(13, 4), (10, 5), (7, 7), (9, 2)])
def test_warmup_covers_every_client_once_in_ceil_N_over_K_rounds(N, K):
    h = S.HiCS(k=K, rounds=50, bias=slice(0, 3))
    R = 6
    st = _state(h, R, N)
    seen = np.zeros((R, N), dtype=int)
    W = math.ceil(N / K)
    assert h.warmup_rounds(N) == W
    for t in range(W):
        c, st = h.select(st, t, torch.ones(R, N, dtype=torch.bool))
        assert np.array_equal(c.sum(1).numpy(), np.full(R, min(K, N - t * K)))
        assert st.mode == ["warmup"] * R
        seen += c.numpy()
    assert np.array_equal(seen, np.ones((R, N), dtype=int)) and not st.unsampled.any()
    c, st = h.select(st, W, torch.ones(R, N, dtype=torch.bool))
    assert st.mode == (["all"] * R if N <= K else ["hics"] * R) and np.array_equal(c.sum(1).numpy(), np.full(R, K))


def test_warmup_is_random_for_the_paper_and_index_ordered_for_the_code():
    N, K = 12, 5
    paper = S.HiCS(k=K, rounds=50, bias=slice(0, 3))
    code = S.HiCSAuthors(k=K, rounds=50, bias=slice(0, 3), weight=slice(3, 9))
    assert code.warmup_rounds(N) == 2 and paper.warmup_rounds(N) == 3
    st = _state(code, 1, N)
    for t, want in enumerate(([0, 1, 2, 3, 4], [5, 6, 7, 8, 9])):
        c, st = code.select(st, t, torch.ones(1, N, dtype=torch.bool))
        assert np.flatnonzero(c[0].numpy()).tolist() == want
    firsts = set()
    for seed in range(30):
        c, _ = paper.select(_state(paper, 1, N, seeds=[seed]), 0, torch.ones(1, N, dtype=torch.bool))
        firsts.add(tuple(np.flatnonzero(c[0].numpy())))
    assert len(firsts) > 20


def _observe_all(h, st, updates, t=0):
    """Feed every (run, client)'s update (R, N, d) (global minus local, as fl.run) to the sampler."""
    R, N, d = updates.shape
    pairs = torch.cartesian_prod(torch.arange(R), torch.arange(N))
    return h.observe(st, t, pairs, updates.reshape(R * N, d))


def _clustered_updates(R, N, C=4, L=3, seed=0):
    """Updates whose bias parts fall in 3 heterogeneity groups; flat vector = [W (C x L), b, extra]."""
    g = rng(seed, "test")
    d = C * L + C + 2
    u = g.normal(0, 1e-4, size=(R, N, d))
    kind = np.arange(N) % 3
    for i in range(N):
        if kind[i] == 0:    # balanced: all biases equal (high entropy)
            u[:, i, C * L:C * L + C] += 0.0
        elif kind[i] == 1:  # one class dominant (low entropy); fl.run's sign: global - local
            u[:, i, C * L + i % C] -= 0.02
        else:               # two classes
            u[:, i, C * L + i % C] -= 0.004
            u[:, i, C * L + (i + 1) % C] -= 0.004
    return torch.from_numpy(u), d


def test_sampler_matches_its_helpers_after_warmup():
    R, N, K, C, L, T = 3, 12, 3, 4, 3, 40
    h = S.HiCS(k=K, rounds=T, bias=slice(C * L, C * L + C))
    sizes = torch.from_numpy(np.arange(1.0, N + 1))
    st = _state(h, R, N, seeds=[5, 6, 7], sizes=sizes)
    u, d = _clustered_updates(R, N, C, L)
    st = _observe_all(h, st, u)
    stored = st.updates.numpy()
    assert stored.shape == (R, N, C) and np.array_equal(stored, -u[:, :, C * L:C * L + C].numpy())
    avail = torch.ones(R, N, dtype=torch.bool)
    avail[1, [0, 5]] = False
    for t in (h.warmup_rounds(N), 20, T - 1):
        gens = copy.deepcopy(st.rngs)
        c, st = h.select(st, t, avail)
        for r in range(R):
            idx = np.flatnonzero(avail[r].numpy())
            H = S.entropy_estimate(-u[r, idx, C * L:C * L + C].numpy(), 0.0025)
            D = S.hics_distances(-u[r, idx, C * L:C * L + C].numpy(), H, 0.1)
            labels = S.ward_clusters(D, K)
            pi = S.annealed_probs([H[labels == m].mean() for m in range(K)], 4.0, t + 1, T)
            want = idx[S.hics_draw(gens[r], labels, pi, sizes.numpy()[idx], K)]
            assert np.flatnonzero(c[r].numpy()).tolist() == sorted(want.tolist())
            assert np.array_equal(st.labels[r, idx], labels) and (st.labels[r, ~avail[r].numpy()] == -1).all()
            assert np.allclose(st.entropy[r, idx], H, rtol=0, atol=1e-15) and np.array_equal(st.probs[r], pi)
    # heterogeneity groups: balanced (kind 0) get the largest estimates and the most weight early on
    H_all = st.entropy[0]
    assert H_all[0::3].min() > H_all[2::3].max() > H_all[1::3].max()


def test_cluster_frequencies_follow_the_annealed_probabilities():
    """Monte Carlo over rounds of one run: with K = 1 the group drawn each round follows pi^t."""
    N, C = 9, 4
    h = S.HiCS(k=1, rounds=400, bias=slice(0, C), clusters=3)
    st = _state(h, 1, N, seeds=[3])
    u = np.zeros((1, N, C))
    u[0, 0:3] = [-1e-5, 1e-5, 0, 0]  # balanced (fl.run sign: global - local)
    u[0, 3:6, 0] = -0.004          # two classes
    u[0, 3:6, 1] = -0.004
    u[0, 6:9, 0] = -0.02           # one class
    u += rng(1, "test").normal(0, 1e-7, size=(1, N, C))
    st = _observe_all(h, st, torch.from_numpy(u))
    hits, probs = np.zeros(3), np.zeros(3)
    rounds = range(h.warmup_rounds(N), 399)
    for t in rounds:
        c, st = h.select(st, t, torch.ones(1, N, dtype=torch.bool))
        m = st.labels[0, int(np.flatnonzero(c[0].numpy())[0])]
        hits[m] += 1
        probs += st.probs[0]
    assert _partition(st.labels[0]) == {frozenset({0, 1, 2}), frozenset({3, 4, 5}), frozenset({6, 7, 8})}
    n = len(rounds)
    p = probs / n                  # mean of the (changing) pi^t; Var of the sum <= sum pi(1 - pi)
    assert np.all(np.abs(hits / n - p) <= Z * np.sqrt(p * (1 - p) / n))
    assert hits[st.labels[0, 0]] > hits[st.labels[0, 3]] > hits[st.labels[0, 6]]


def test_sampler_takes_all_when_few_available_and_never_an_unavailable_client():
    h = S.HiCS(k=3, rounds=30, bias=slice(0, 3))
    R, N = 4, 8
    st = _state(h, R, N)
    u, _ = torch.from_numpy(rng(0, "test").normal(size=(R, N, 5))), None
    st = _observe_all(h, st, u)
    g = rng(4, "test")
    for t in range(3, 20):
        avail = torch.from_numpy(g.random((R, N)) < 0.5)
        c, st = h.select(st, t, avail)
        a = avail.numpy()
        assert not c.numpy()[~a].any()
        assert np.array_equal(c.sum(1).numpy(), np.minimum(3, a.sum(1)))


def test_code_variant_weight_means_variance_switch_and_freeze():
    R, N, K, C, L = 1, 12, 3, 4, 3
    w, b = slice(0, C * L), slice(C * L, C * L + C)
    code = S.HiCSAuthors(k=K, rounds=40, bias=b, weight=w)
    assert (code.temperature, code.lam, code.freeze_after_warmup, code.clusters) == (0.001, 10.0, True, K)
    st = _state(code, R, N)
    u, d = _clustered_updates(R, N, C, L, seed=2)
    st = _observe_all(code, st, u, t=0)
    U = st.updates.numpy()[0]
    assert U.shape == (N, C + C * L) and np.array_equal(U[:, :C], -u[0, :, b].numpy())
    assert np.array_equal(U[:, C:], -u[0, :, w].numpy())
    H = S.entropy_estimate(-u[0, :, w].numpy().reshape(N, C, L).mean(2), 0.001)   # weight row means
    assert np.allclose(code.estimates(U), H, rtol=0, atol=1e-15)
    # the weight parts are small noise: estimates near ln C, variance < 0.1: HiCS clustering
    assert np.var(H) < 0.1
    c, st = code.select(st, code.warmup_rounds(N), torch.ones(R, N, dtype=torch.bool))
    assert st.mode == ["hics"] and c.sum() == K
    # strongly different weight rows: variance >= 0.1 -> Clustered Sampling (K draws, repeats allowed)
    u2 = u.clone()
    for i in range(1, N, 3):        # four clients with one dominant weight row (fl.run sign: global - local)
        u2[0, i, i % C * L:(i % C + 1) * L] -= 0.05
    st = _observe_all(code, st, u2, t=0)
    assert np.var(code.estimates(st.updates.numpy()[0])) >= 0.1
    c, st = code.select(st, 5, torch.ones(R, N, dtype=torch.bool))
    assert st.mode == ["cs"] and c.sum() == K and st.probs[0] is None
    # frozen after warm-up: a later observe changes nothing; the paper variant refreshes every round
    before = st.updates.clone()
    st = _observe_all(code, st, torch.zeros_like(u), t=code.warmup_rounds(N))
    assert torch.equal(st.updates, before)
    paper = S.HiCS(k=K, rounds=40, bias=b)
    sp = _observe_all(paper, _state(paper, R, N), u, t=0)
    sp = _observe_all(paper, sp, torch.zeros_like(u), t=30)
    assert not sp.updates.any()


def test_reproducible_and_independent_of_other_runs():
    h = S.HiCS(k=2, rounds=20, bias=slice(0, 3))
    g = rng(7, "test")
    T, R, N = 10, 3, 7
    avail = g.random((T, R, N)) < 0.8
    vectors = torch.from_numpy(g.normal(0, 0.01, size=(T, R, N, 5)))

    def history(seeds, a, v):
        st = _state(h, len(seeds), N, seeds=seeds)
        out = []
        for t in range(T):
            c, st = h.select(st, t, torch.from_numpy(a[t]))
            out.append(c.numpy())
            pairs = c.nonzero()
            st = h.observe(st, t, pairs, v[t, pairs[:, 0], pairs[:, 1]])
        return np.stack(out)

    full = history([11, 12, 13], avail, vectors)
    assert np.array_equal(full, history([11, 12, 13], avail, vectors))
    for r in range(R):
        alone = history([[11, 12, 13][r]], avail[:, r:r + 1], vectors[:, r:r + 1])
        assert np.array_equal(alone[:, 0], full[:, r])
    other = history([99, 12, 13], avail, vectors)
    assert not np.array_equal(other[:, 0], full[:, 0]) and np.array_equal(other[:, 1:], full[:, 1:])


def test_hics_argument_errors():
    with pytest.raises(ValueError, match="variant must be 'paper' .* or 'code'"):
        S.HiCS(k=2, rounds=5, bias=slice(0, 3), variant="neurips")
    with pytest.raises(ValueError, match="variant='code' is HiCSAuthors, not HiCS"):
        S.HiCS(k=2, rounds=5, bias=slice(0, 3), weight=slice(3, 9), variant="code")
    with pytest.raises(ValueError, match="variant='paper' is HiCS, not HiCSAuthors"):
        S.HiCSAuthors(k=2, rounds=5, bias=slice(0, 3), weight=slice(3, 9), variant="paper")
    with pytest.raises(ValueError, match="variant='code' reads the output layer's weight"):
        S.HiCSAuthors(k=2, rounds=5, bias=slice(0, 3))
    with pytest.raises(ValueError, match="weight covers 7 columns, not a multiple of C = 3"):
        S.HiCSAuthors(k=2, rounds=5, bias=slice(0, 3), weight=slice(3, 10))
    with pytest.raises(ValueError, match="variant must be 'paper' .* or 'code'"):
        S.HiCS.for_task(_logistic_task(), k=2, rounds=5, variant="neurips")
    with pytest.raises(ValueError, match="bias must be a slice\\(start, stop\\)"):
        S.HiCS(k=2, rounds=5, bias=[0, 1, 2])
    with pytest.raises(ValueError, match="bias must cover the C >= 2 output biases"):
        S.HiCS(k=2, rounds=5, bias=slice(0, 1))
    with pytest.raises(ValueError, match="temperature must be a finite number > 0, got 0"):
        S.HiCS(k=2, rounds=5, bias=slice(0, 3), temperature=0)
    with pytest.raises(ValueError, match="lam must lie in \\[0, 1.0\\]"):
        S.HiCS(k=2, rounds=5, bias=slice(0, 3), lam=10)
    with pytest.raises(ValueError, match="clusters \\(M\\) must be an int >= 1"):
        S.HiCS(k=2, rounds=5, bias=slice(0, 3), clusters=0)
    with pytest.raises(ValueError, match="k = 4 exceeds num_clients = 3"):
        S.HiCS(k=4, rounds=5, bias=slice(0, 3)).init(1, 3, torch.ones(1, 3), [0])
    h = S.HiCS(k=1, rounds=2, bias=slice(0, 3))
    st = _state(h, 1, 3)
    with pytest.raises(ValueError, match="round t = 3 exceeds rounds = 2"):
        h.select(st, 2, torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="end at column 3, past the 2 coordinates"):
        h.observe(st, 0, torch.tensor([[0, 1]]), torch.zeros(1, 2))


# ----------------------------------------------------------------------------------------------
# through flkit.fl.run on a small EngineTask
# ----------------------------------------------------------------------------------------------
def _logistic_task():
    """300 synthetic points in 3 classes, 12 clients with skewed labels, a logistic model."""
    from flkit.tasks import EngineTask
    g = torch.Generator().manual_seed(0)
    y = torch.arange(300) % 3
    x = torch.randn(300, 6, generator=g, dtype=torch.float64) + 1.5 * torch.nn.functional.one_hot(y, 6).double()
    order = torch.argsort(y * 1000 + torch.randperm(300, generator=g)).numpy()   # sorted by class
    clients = np.array_split(order, 12)                                           # 1 or 2 classes each
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, 3)).to(torch.float64)
    return EngineTask(model=model, x=x, y=y, clients=clients, x_test=x, y_test=y, batch_size=10, epochs=1,
                      local_lr=0.1)


def test_output_layer_slices_of_an_engine_task():
    task = _logistic_task()
    w, b = S.output_layer(task)
    assert (w, b) == (slice(0, 18), slice(18, 21)) and task.dim == 21
    h = S.HiCS.for_task(task, k=3, rounds=10, variant="code")
    assert h.weight == w and h.bias == b


def test_for_task_picks_the_reading_by_its_variant_and_the_repr_is_the_checkpoint_key():
    """The stored runs' configurations name the reading by ``variant``: HiCS.for_task builds HiCS for "paper" (and
    by default) and HiCSAuthors for "code", whichever class it is called on. ``fl.run`` keys checkpoints by the
    sampler's repr: both classes keep the repr of the one class they were split from (pinned before the split)."""
    task = _logistic_task()
    for cls in (S.HiCS, S.HiCSAuthors):
        assert type(cls.for_task(task, 3, 10, variant="paper")) is S.HiCS
        assert type(cls.for_task(task, 3, 10, variant="code")) is S.HiCSAuthors
    assert type(S.HiCS.for_task(task, 3, 10)) is S.HiCS and type(S.HiCSAuthors.for_task(task, 3, 10)) is S.HiCSAuthors
    assert repr(S.HiCS(k=5, rounds=200, bias=slice(10, 20), weight=slice(0, 10))) == (
        "HiCS(k=5, rounds=200, bias=slice(10, 20, None), weight=slice(0, 10, None), clusters=5, temperature=0.0025, "
        "lam=0.1, gamma0=4.0, variant='paper', var_switch=0.1, freeze_after_warmup=False, draw=None)")
    assert repr(S.HiCSAuthors(k=5, rounds=200, bias=slice(10, 20), weight=slice(0, 10))) == (
        "HiCS(k=5, rounds=200, bias=slice(10, 20, None), weight=slice(0, 10, None), clusters=5, temperature=0.001, "
        "lam=10.0, gamma0=4.0, variant='code', var_switch=0.1, freeze_after_warmup=True, draw=None)")
    assert repr(S.HiCS(k=3, rounds=50, bias=slice(0, 3), clusters=4, draw="distinct", lam=0.5)) == (
        "HiCS(k=3, rounds=50, bias=slice(0, 3, None), weight=None, clusters=4, temperature=0.0025, lam=0.5, "
        "gamma0=4.0, variant='paper', var_switch=0.1, freeze_after_warmup=False, draw='distinct')")
    assert S.HiCS.for_task(task, 3, 10) != S.HiCSAuthors.for_task(task, 3, 10, temperature=0.0025, lam=0.1,
                                                                  freeze_after_warmup=False)


class _PaperWarmupInIndexOrder(S.HiCS):
    """Wrong on purpose: the document's reading with the code's warm-up (clients in index order)."""

    def warmup_order(self, g, pool, take):
        return pool[:take]


class _AuthorsAnnealedByTheDocumentsRound(S.HiCSAuthors):
    """Wrong on purpose: the code's reading with the document's round in the annealing (t + 1)."""

    def annealing_round(self, t):
        return t + 1


@pytest.mark.parametrize("wrong", [False, True])
def test_both_readings_give_the_selections_of_the_class_they_were_split_from(wrong):
    """tests/golden/hics_selections.csv holds what the one HiCS class (variant "paper" / "code") selected, pinned
    before the split: every configuration, built here with the two classes' own constructors, gives the same draw
    counts, modes, labels, entropies and group probabilities bit for bit. A deliberately wrong subclass of each
    (the paper reading with the code's warm-up order, the code reading annealed by the document's round) fails the
    same comparison in every configuration of its reading where the error can show (for the annealing: a clustered
    round whose group probabilities are not uniform)."""
    import golden
    import pandas as pd
    want = golden.read("hics_selections")
    task = golden.hics_task()
    weight, bias = S.output_layer(task)
    classes = ({"paper": _PaperWarmupInIndexOrder, "code": _AuthorsAnnealedByTheDocumentsRound} if wrong
               else {"paper": S.HiCS, "code": S.HiCSAuthors})
    checked = 0
    for name, kw in golden.HICS_CONFIGS.items():
        kw = dict(kw)
        cls = classes[kw.pop("variant")]
        sampler = cls(k=golden.HICS_K, rounds=golden.HICS_ROUNDS, bias=bias, weight=weight, **kw)
        got = golden.normalise(pd.DataFrame(golden.hics_selection_rows(name, sampler)))
        w = want[want["config"] == name].reset_index(drop=True)
        same = golden.compare("hics_selections", got, w) == []
        probs = w[w["metric"] == "prob"].groupby(["run", "round"])["value"]
        anneals = cls is not _AuthorsAnnealedByTheDocumentsRound or bool((probs.max() > probs.min()).any())
        assert same == (not wrong or not anneals), (name, wrong)
        checked += anneals
    assert checked == (6 if wrong else 7)       # the annealing error cannot show in "code": uniform probabilities


@pytest.mark.parametrize("variant", ["paper", "code"])
def test_hics_runs_inside_fl_run_with_the_same_numbers_for_the_same_seed(variant):
    from flkit import aggregate, fl
    task = _logistic_task()
    T = 8
    algs = {"hics": fl.Algorithm(aggregate.FedAvg(), sampler=S.HiCS.for_task(task, k=3, rounds=T, variant=variant,
                                                                             freeze_after_warmup=False))}
    a = fl.run(task, algs, seeds=[0, 1], rounds=T)
    b = fl.run(task, algs, seeds=[0, 1], rounds=T)
    assert np.array_equal(a.values["hics"]["test_loss"], b.values["hics"]["test_loss"])
    assert torch.equal(a.final_w, b.final_w) and np.isfinite(a.values["hics"]["test_loss"]).all()
    assert np.array_equal(a.evals["hics"], np.full(2, 3 * T))
    assert a.values["hics"]["test_loss"][-1].max() < a.values["hics"]["test_loss"][0].min()
    c = fl.run(task, algs, seeds=[2, 1], rounds=T)
    assert np.array_equal(c.values["hics"]["test_loss"][:, 1], a.values["hics"]["test_loss"][:, 1])
