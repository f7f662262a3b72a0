"""Clustered Sampling based on model similarity (Fraboni, Vidal, Kameni & Lorenzi, ICML 2021),
Algorithm 2: :class:`ClusteredSampling` and its steps. Authors' code: github.com/Accenture/Labs-Federated-Learning,
branch ``clustered_sampling``, commit 6707484c4a4e6369be71b7b3a7eb559d39364ef1."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from scipy.cluster.hierarchy import ClusterWarning, linkage

from flkit.sample.base import SamplerState, _available, _base_state, _counts, _draw, _positive_int, _store_latest

__all__ = ["ClusteredState", "ClusteredSampling", "weight_groups",
           "clustered_distributions", "ward_distributions", "arccos_distances"]


@dataclass
class ClusteredState(SamplerState):
    """Adds the latest representative update of each (run, client) and their inner products.

    ``updates`` (R, N, d), allocated at the first ``observe`` on the device and dtype of ``delta``
    (zeros for clients never observed); ``gram`` (R, N, N) float64, gram[r, i, j] = <u_ri, u_rj>,
    refreshed row by row as updates arrive so a round costs O(P N d), not O(N^2 d).
    """

    updates: torch.Tensor | None = None
    gram: np.ndarray | None = None


def arccos_distances(gram: np.ndarray) -> np.ndarray:
    """rho(i, j) = arccos(<u_i, u_j> / (|u_i| |u_j|)) from a Gram matrix; 0 on the diagonal.

    As in the authors' code (``get_similarity(..., "cosine")``), a pair where either update is zero
    (a client never observed) gets distance 0.
    """
    norm = np.sqrt(np.clip(np.diag(gram), 0.0, None))
    den = np.outer(norm, norm)
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where(den > 0, gram / np.where(den > 0, den, 1.0), 1.0)
    dist = np.arccos(np.clip(cos, -1.0, 1.0))
    np.fill_diagonal(dist, 0.0)
    return dist


def weight_groups(Z: np.ndarray, p: np.ndarray, k: int) -> list[np.ndarray]:
    """Cut the dendrogram Z into the maximal subtrees of total weight sum_{i in G} p_i <= 1/k.

    Algorithm 2's cut: the authors set each merge height to the merged weight and call
    ``fcluster(criterion="distance")`` at 1/k. A single client with p_i > 1/k is a group of its own.
    Groups come back as sorted arrays of leaf indices.
    """
    n = p.size
    if n == 1:
        return [np.array([0])]
    children = {n + m: (int(Z[m, 0]), int(Z[m, 1])) for m in range(n - 1)}
    weight = dict(enumerate(p.tolist()))
    for m in range(n - 1):
        a, b = children[n + m]
        weight[n + m] = weight[a] + weight[b]
    limit = (1.0 / k) * (1 + 1e-9)
    groups, stack = [], [2 * n - 2]
    while stack:
        node = stack.pop()
        if weight[node] <= limit or node < n:
            groups.append(node)
        else:
            stack.extend(children[node])

    def leaves(node):
        out, todo = [], [node]
        while todo:
            m = todo.pop()
            if m < n:
                out.append(m)
            else:
                todo.extend(children[m])
        return np.sort(np.array(out))

    return [leaves(g) for g in groups]


def clustered_distributions(groups: list[np.ndarray], p: np.ndarray, k: int,
                            g: np.random.Generator) -> np.ndarray:
    """Algorithm 2's k distributions r (k, n): every row sums to 1, column i sums to k p_i.

    The groups sorted by weight (ties: lowest first client); the k heaviest seed the k distributions
    with r_{j,i} = k p_i (the lightest of them first); the clients of the other groups, group after
    group from the lightest, in a random order within each group (the run's generator), then fill the
    distributions in turn, a client's mass being split between two distributions when it does not fit
    (Algorithm 1's filling). Departure: a seed mass above 1 (a client with k p_i > 1, or fewer than k
    groups) is capped at 1 and its excess filled first, so the column sums stay k p_i.
    """
    n = p.size
    order = sorted(range(len(groups)), key=lambda j: (p[groups[j]].sum(), groups[j][0]))
    split = max(len(order) - k, 0)
    kept, rest = order[split:], order[:split]
    r = np.zeros((k, n))
    queue = []
    for row, j in enumerate(kept):
        for i in groups[j]:
            space = 1.0 - r[row].sum()
            put = min(k * p[i], space)
            r[row, i] = put
            if k * p[i] - put > 0:
                queue.append((i, k * p[i] - put))
    for j in rest:
        queue.extend((i, k * p[i]) for i in g.permutation(groups[j]))
    row, tol = 0, 1e-12 * k
    for i, mass in queue:
        while mass > tol and row < k:
            space = 1.0 - r[row].sum()
            if space <= tol:
                row += 1
                continue
            put = min(space, mass)
            r[row, i] += put
            mass -= put
    return r / r.sum(axis=1, keepdims=True)


def ward_distributions(dist: np.ndarray, p: np.ndarray, k: int, g: np.random.Generator) -> np.ndarray:
    """Algorithm 2 of Clustered Sampling on a distance matrix ``dist`` (n, n) and weights p (n,):
    Ward's linkage with the rows of ``dist`` as the observations (Euclidean), the cut of
    :func:`weight_groups`, the k distributions of :func:`clustered_distributions` (advances g)."""
    if p.size == 1:
        return np.ones((k, 1))
    with warnings.catch_warnings():  # the rows of `dist` are the observations, on purpose (see ClusteredSampling)
        warnings.simplefilter("ignore", ClusterWarning)
        tree = linkage(dist, method="ward")
    return clustered_distributions(weight_groups(tree, p, k), p, k, g)


def _draw_rows(r: np.ndarray, g: np.random.Generator) -> np.ndarray:
    """One index from each row distribution of r (k draws, independent across rows)."""
    cdf = np.cumsum(r, axis=1)
    u = g.random(r.shape[0])[:, None] * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=1), r.shape[1] - 1)


@dataclass(frozen=True)
class ClusteredSampling:
    """Clustered Sampling based on model similarity (Fraboni, Vidal, Kameni & Lorenzi, ICML 2021, Alg. 2).

    Each round, over the available clients A_t with weights p_i = n_i / sum_{A_t} n_j:
    (1) similarity rho(i, j) = arccos of the cosine similarity of the clients' representative
    gradients (the paper's default "Arccos"); a client's representative gradient is its latest
    observed update, zero until it is first observed (the authors' code starts from zeros and
    clusters from round 0); (2) Ward hierarchical clustering; (3) cut the tree into its maximal
    subtrees of weight <= 1/k (:func:`weight_groups`); (4) build k distributions r_{j,i}, each of mass 1 with
    sum_j r_{j,i} = k p_i (:func:`clustered_distributions`); (5) draw one client from each
    distribution, independently. So E[counts_i] = k p_i (unbiased with the aggregation weight 1/k per
    draw, as MD sampling) and a client may be drawn more than once.

    As in the authors' code (``scipy.cluster.hierarchy.linkage(sim_matrix, "ward")`` on the square
    matrix), Ward's linkage clusters the rows of the distance matrix, each client being the vector of
    its distances to the clients of A_t (Euclidean), not the matrix read as pairwise distances.
    ``warmup`` rounds t < warmup use MD sampling (``ProportionalK(k)``) instead: 0 in the authors'
    experiments, 10 in the HiCS-FL code's CS baseline. The authors' updates are local minus global;
    ours are global minus local: the arccos distance is the same.

    Departures: the papers assume every client available; we cluster A_t only (with p renormalised
    over A_t), so E[counts_i | A_t] = k n_i / sum_{A_t} n_j, and draw k times even when |A_t| < k.
    Within-group order of the filling uses the run's generator, and group ties are broken by index.
    The state keeps every client's latest update, R x N x d numbers on the device of ``delta``.

    Authors' code: github.com/Accenture/Labs-Federated-Learning, branch ``clustered_sampling``, commit
    6707484c4a4e6369be71b7b3a7eb559d39364ef1, ``py_func/clustering.py`` (``get_clusters_with_alg2``,
    ``get_similarity``) and ``py_func/FedProx.py`` (``FedProx_clustered_sampling``).
    """

    k: int
    warmup: int = 0

    def __post_init__(self):
        _positive_int(self.k, "k")
        if isinstance(self.warmup, (bool, np.bool_)) or not isinstance(self.warmup, (int, np.integer)) \
                or self.warmup < 0:
            raise ValueError(f"warmup must be an int >= 0 (rounds of MD sampling first), got {self.warmup!r}")

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> ClusteredState:
        base = _base_state(runs, num_clients, sizes, seeds)
        return ClusteredState(rngs=base.rngs, sizes=base.sizes,
                              gram=np.zeros((base.sizes.shape[0], base.sizes.shape[1], base.sizes.shape[1])))

    def distributions(self, state: ClusteredState, r: int, idx: np.ndarray) -> np.ndarray:
        """Run r's k distributions over the clients idx (steps 1-4); advances run r's generator."""
        p = state.sizes[r, idx] / state.sizes[r, idx].sum()
        return ward_distributions(arccos_distances(state.gram[r][np.ix_(idx, idx)]), p, self.k, state.rngs[r])

    def select(self, state: ClusteredState, t: int, available, probe=None):
        avail = _available(available, state)
        chosen = []
        for r, (g, a, n) in enumerate(zip(state.rngs, avail, state.sizes)):
            idx = np.flatnonzero(a)
            if idx.size == 0:
                chosen.append(idx)
            elif t < self.warmup:
                chosen.append(_draw(g, idx, self.k, n[idx], replace=True))
            else:
                chosen.append(idx[_draw_rows(self.distributions(state, r, idx), g)])
        return _counts(chosen, avail.shape[1]), state

    def observe(self, state: ClusteredState, t: int, pairs, delta) -> ClusteredState:
        """Store each trained client's update (the last one when a (run, client) pair repeats)."""
        state.updates, runs, clients = _store_latest(state.updates, pairs, delta, state.sizes.shape)
        for run in np.unique(runs).tolist():
            c = clients[runs == run]
            u = state.updates[run]  # (N, d) view
            block = (u[torch.from_numpy(c).to(u.device)] @ u.T).double().cpu().numpy()  # (p, N)
            state.gram[run][c, :] = block
            state.gram[run][:, c] = block.T
        return state
