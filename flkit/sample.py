"""Client samplers: which of the available clients train in round t, and how many times each.

A sampler is a frozen dataclass of hyper-parameters with three methods (FedJAX's shape):

* ``init(runs, num_clients, sizes, seeds) -> state``: ``sizes`` (R, N) holds n_i, the number of
  samples of client i in run r; run r draws from its own generator
  ``flkit.seeding.rng(seeds[r], "selection")``, kept in the state, so a run's choices do not depend on
  which other runs share the batch.
* ``select(state, t, available, probe) -> (counts, state)``: ``available`` (R, N) bool, the clients
  available in round t; ``counts`` (R, N) int64, how many times each client is drawn (an unavailable
  client is never drawn).
* ``observe(state, t, pairs, delta) -> state``: the updates of the clients that trained, ``pairs``
  (P, 2) = (run, client) and ``delta`` (P, d) = global model minus local model. Only samplers that
  learn from updates keep them.

``probe`` is the round loop's narrow window on training state: ``probe.losses(mask)`` (the current
global model's training loss on the asked clients, NaN elsewhere) and ``probe.updates(mask)`` (the
updates the asked clients would send). Only :class:`PowD` calls it here.

Below, A_t is the set of available clients of one run, p_i = n_i / sum_{j in A_t} n_j the data
fractions renormalised over A_t, and k the number of draws per round. The papers assume every client
is available; we apply their rules to A_t, so "proportional to n_i" means p_i over A_t.
Samplers without replacement take all of A_t when |A_t| <= k. Samplers with replacement
(``ProportionalK(replace=True)``, ``ClusteredSampling``) make k draws whenever A_t is non-empty,
so that E[counts_i] = k p_i still holds when |A_t| < k (a client may then be drawn several times).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from scipy.cluster.hierarchy import ClusterWarning, linkage

from flkit.seeding import rng

__all__ = [
    "SamplerState",
    "ClusteredState",
    "AllAvailable",
    "UniformK",
    "ProportionalK",
    "PowD",
    "ClusteredSampling",
    "weight_groups",
    "clustered_distributions",
    "arccos_distances",
]


# ----------------------------------------------------------------------------------------------
# state and validation shared by every sampler
# ----------------------------------------------------------------------------------------------
@dataclass
class SamplerState:
    """One generator per run (``rng(seeds[r], "selection")``) and the (R, N) sample counts n_i."""

    rngs: list
    sizes: np.ndarray


def _positive_int(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


def _base_state(runs, num_clients, sizes, seeds, k=None) -> SamplerState:
    runs = _positive_int(runs, "runs")
    num_clients = _positive_int(num_clients, "num_clients")
    if k is not None and k > num_clients:
        raise ValueError(f"k = {k} exceeds num_clients = {num_clients}; choose k <= num_clients")
    s = torch.as_tensor(sizes).detach().cpu().numpy().astype(np.float64)
    if s.shape != (runs, num_clients):
        raise ValueError(f"sizes must have shape (runs, num_clients) = {(runs, num_clients)}, got {s.shape}")
    if not np.all(np.isfinite(s) & (s > 0)):
        r, i = np.argwhere(~(np.isfinite(s) & (s > 0)))[0]
        raise ValueError(f"sizes[{r}, {i}] = {s[r, i]}; every client needs a finite sample count > 0")
    seeds = list(seeds)
    if len(seeds) != runs:
        raise ValueError(f"seeds must give one seed per run ({runs}), got {len(seeds)}")
    return SamplerState(rngs=[rng(int(sd), "selection") for sd in seeds], sizes=s)


def _available(available, state: SamplerState) -> np.ndarray:
    a = torch.as_tensor(available).detach().cpu().numpy()
    if a.dtype != np.bool_ or a.shape != state.sizes.shape:
        raise ValueError(f"available must be a bool tensor of shape {state.sizes.shape}, "
                         f"got dtype {a.dtype} and shape {a.shape}")
    return a


def _counts(per_run: list[np.ndarray], n: int) -> torch.Tensor:
    """(R, N) int64 counts from each run's array of drawn client indices (repeats allowed)."""
    return torch.from_numpy(np.stack([np.bincount(c, minlength=n) for c in per_run]).astype(np.int64))


def _draw(g: np.random.Generator, idx: np.ndarray, size: int, weights: np.ndarray | None,
          replace: bool) -> np.ndarray:
    """`size` clients among `idx`, uniformly (weights None) or with probabilities weights / sum."""
    p = None if weights is None else weights / weights.sum()
    return np.asarray(g.choice(idx, size=size, replace=replace, p=p), dtype=np.int64)


# ----------------------------------------------------------------------------------------------
# samplers that do not learn
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AllAvailable:
    """Every available client trains once: S_t = A_t (full participation when all are available)."""

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> SamplerState:
        return _base_state(runs, num_clients, sizes, seeds)

    def select(self, state: SamplerState, t: int, available, probe=None):
        return torch.from_numpy(_available(available, state).astype(np.int64)), state

    def observe(self, state, t, pairs, delta):
        return state


@dataclass(frozen=True)
class UniformK:
    """k distinct clients uniformly at random among the available: P(i in S_t) = k / |A_t|.

    FedAvg's sampling (McMahan et al. 2017; Li et al. 2020 "scheme II") applied to A_t. When
    |A_t| <= k every available client is taken.
    """

    k: int

    def __post_init__(self):
        _positive_int(self.k, "k")

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> SamplerState:
        return _base_state(runs, num_clients, sizes, seeds, k=self.k)

    def select(self, state: SamplerState, t: int, available, probe=None):
        avail = _available(available, state)
        chosen = []
        for g, a in zip(state.rngs, avail):
            idx = np.flatnonzero(a)
            chosen.append(idx if idx.size <= self.k else _draw(g, idx, self.k, None, replace=False))
        return _counts(chosen, avail.shape[1]), state

    def observe(self, state, t, pairs, delta):
        return state


@dataclass(frozen=True)
class ProportionalK:
    """k clients drawn with probability proportional to their data size, p_i = n_i / sum_{A_t} n_j.

    ``replace=True`` (default): Li et al. 2020 ("On the convergence of FedAvg on non-IID data"),
    sampling scheme I, the "MD sampling" of Fraboni et al. 2021: k i.i.d. draws from p, so
    counts ~ Multinomial(k, p), E[counts_i] = k p_i and P(i drawn) = 1 - (1 - p_i)^k; the unbiased
    aggregate averages the k drawn updates with weight 1/k each (counts_i / k). The k draws are made
    even when |A_t| < k.

    ``replace=False``: k distinct clients by successive sampling (each draw proportional to n_i among
    the clients not yet drawn, numpy's ``choice(replace=False, p=...)``), as the "random" baseline of
    the HiCS-FL code. Its inclusion probability is not k p_i: for k = 2,
    P(i in S_t) = p_i (1 + sum_{j != i} p_j / (1 - p_j)); in general it is the sum, over the ordered
    k-tuples that contain i, of prod_l p_{s_l} / (1 - p_{s_1} - ... - p_{s_{l-1}}). When |A_t| <= k
    every available client is taken.
    """

    k: int
    replace: bool = True

    def __post_init__(self):
        _positive_int(self.k, "k")
        if not isinstance(self.replace, (bool, np.bool_)):
            raise ValueError(f"replace must be True or False, got {self.replace!r}")

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> SamplerState:
        return _base_state(runs, num_clients, sizes, seeds, k=None if self.replace else self.k)

    def select(self, state: SamplerState, t: int, available, probe=None):
        avail = _available(available, state)
        chosen = []
        for g, a, n in zip(state.rngs, avail, state.sizes):
            idx = np.flatnonzero(a)
            if idx.size == 0 or (not self.replace and idx.size <= self.k):
                chosen.append(idx)
            else:
                chosen.append(_draw(g, idx, self.k, n[idx], replace=self.replace))
        return _counts(chosen, avail.shape[1]), state

    def observe(self, state, t, pairs, delta):
        return state


@dataclass(frozen=True)
class PowD:
    """Power-of-choice (Cho, Wang & Joshi 2020, arXiv:2010.01243; AISTATS 2022).

    Each round: (1) draw a candidate set C_t of d distinct clients from A_t, each draw proportional to
    p_i (successive sampling, as ``ProportionalK(replace=False)``); (2) the candidates report F_i(w_t),
    the current global model's training loss on their local data (one ``probe.losses`` call per round,
    asking the candidates only); (3) S_t = the k candidates with the highest F_i(w_t), each drawn once.
    Ties are broken by the lowest client index (the paper does not say); a NaN loss ranks below every
    number. The HiCS-FL document runs pow-d with d = N ("ideal" pow-d: every client reports its loss).

    Departures for partial availability: candidates come from A_t and C_t = A_t when |A_t| <= d; when
    |A_t| <= k all of A_t is taken with no loss asked. Runs whose candidate set has at most k clients
    are left out of the probe's mask, and the probe is not called when no run needs losses.
    """

    k: int
    d: int

    def __post_init__(self):
        _positive_int(self.k, "k")
        _positive_int(self.d, "d")
        if self.d < self.k:
            raise ValueError(f"d = {self.d} must be >= k = {self.k} (the k winners come from d candidates)")

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> SamplerState:
        if isinstance(num_clients, (int, np.integer)) and self.d > num_clients:
            raise ValueError(f"d = {self.d} exceeds num_clients = {num_clients}; choose d <= num_clients")
        return _base_state(runs, num_clients, sizes, seeds, k=self.k)

    def select(self, state: SamplerState, t: int, available, probe):
        avail = _available(available, state)
        R, N = avail.shape
        cand = []
        for g, a, n in zip(state.rngs, avail, state.sizes):
            idx = np.flatnonzero(a)
            cand.append(idx if idx.size <= self.d else np.sort(_draw(g, idx, self.d, n[idx], replace=False)))
        ask = np.zeros((R, N), dtype=bool)
        for r, c in enumerate(cand):
            if c.size > self.k:
                ask[r, c] = True
        loss = None
        if ask.any():
            loss = torch.as_tensor(probe.losses(torch.from_numpy(ask))).detach().cpu().numpy()
            loss = loss.astype(np.float64)
            if loss.shape != (R, N):
                raise ValueError(f"probe.losses must return shape {(R, N)}, got {loss.shape}")
        chosen = []
        for r, c in enumerate(cand):
            if c.size <= self.k:
                chosen.append(c)
            else:  # highest loss first; np.lexsort puts NaN last; c is sorted, so ties -> lowest index
                chosen.append(c[np.lexsort((c, -loss[r, c]))[: self.k]])
        return _counts(chosen, N), state

    def observe(self, state, t, pairs, delta):
        return state


# ----------------------------------------------------------------------------------------------
# Clustered Sampling (Fraboni et al. 2021), Algorithm 2
# ----------------------------------------------------------------------------------------------
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
        if idx.size == 1:
            return np.ones((self.k, 1))
        dist = arccos_distances(state.gram[r][np.ix_(idx, idx)])
        with warnings.catch_warnings():  # the rows of `dist` are the observations, on purpose (see above)
            warnings.simplefilter("ignore", ClusterWarning)
            tree = linkage(dist, method="ward")
        groups = weight_groups(tree, p, self.k)
        return clustered_distributions(groups, p, self.k, state.rngs[r])

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
        pairs = torch.as_tensor(pairs).detach().cpu().long()
        R, N = state.sizes.shape
        if pairs.ndim != 2 or pairs.shape[1] != 2 or delta.ndim != 2 or delta.shape[0] != pairs.shape[0]:
            raise ValueError(f"pairs must be (P, 2) and delta (P, d) with the same P, "
                             f"got {tuple(pairs.shape)} and {tuple(delta.shape)}")
        if pairs.numel() and (pairs.min() < 0 or (pairs[:, 0] >= R).any() or (pairs[:, 1] >= N).any()):
            raise ValueError(f"pairs must hold (run < {R}, client < {N}), got run and client maxima "
                             f"{pairs.max(0).values.tolist()} and minimum {int(pairs.min())}")
        if state.updates is None:
            state.updates = torch.zeros(R, N, delta.shape[1], dtype=delta.dtype, device=delta.device)
        if delta.shape[1] != state.updates.shape[2]:
            raise ValueError(f"delta has {delta.shape[1]} coordinates, earlier ones {state.updates.shape[2]}")
        runs, clients = pairs[:, 0].numpy(), pairs[:, 1].numpy()
        keys = runs * N + clients
        last = len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]  # last occurrence of each pair
        for run in np.unique(runs[last]).tolist():
            rows = last[runs[last] == run]
            c = clients[rows]
            u = state.updates[run]  # (N, d) view
            u[torch.from_numpy(c).to(u.device)] = delta[torch.from_numpy(rows).to(delta.device)].to(u.dtype)
            block = (u[torch.from_numpy(c).to(u.device)] @ u.T).double().cpu().numpy()  # (p, N)
            state.gram[run][c, :] = block
            state.gram[run][:, c] = block.T
        return state
