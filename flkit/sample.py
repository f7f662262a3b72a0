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
global model's training loss on the asked clients, NaN elsewhere), ``probe.gradients(mask)`` (the asked
clients' gradients of their local objective over all their data at the current global model) and
``probe.updates(mask)`` (the updates the asked clients would send). :class:`PowD` and :class:`CAFed` ask
for losses, :class:`DivFL` for gradients (its default ``proxy="gradient"``) or updates
(``proxy="update"``); the other samplers never call it.

Samplers return counts only; weights are the aggregation rule's business. :class:`CAFed` and
:class:`F3AST` (and their baselines Unbiased and AdaFed, which are :class:`AllAvailable`) aggregate with
a_k = q_k / pi_k (q_k = n_k / sum_j n_j, pi_k the availability known to the server), the rule
``flkit.aggregate.InverseAvailability``: a CA-Fed client is either excluded (a_k = 0: not selected) or
kept with its full weight q_k / pi_k, so the selection carries all that the sampler decides.

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
    "DivFLState",
    "DivFL",
    "weight_groups",
    "clustered_distributions",
    "ward_distributions",
    "arccos_distances",
    "update_distances",
    "facility_location_greedy",
    "CAFedState",
    "CAFed",
    "cafed_error",
    "cafed_allocation",
    "F3ASTState",
    "F3AST",
    "output_layer",
    "entropy_estimate",
    "annealed_probs",
    "hics_distances",
    "ward_clusters",
    "hics_draw",
    "HiCSState",
    "HiCS",
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


def _store_latest(updates: torch.Tensor | None, pairs, delta, shape: tuple[int, int]):
    """Write each (run, client)'s update into ``updates`` (R, N, d), the last one when a pair repeats.

    ``updates`` is allocated with zeros on the device and dtype of ``delta`` when None. Returns
    (updates, runs, clients): the distinct (run, client) pairs written, as int arrays.
    """
    pairs = torch.as_tensor(pairs).detach().cpu().long()
    R, N = shape
    if pairs.ndim != 2 or pairs.shape[1] != 2 or delta.ndim != 2 or delta.shape[0] != pairs.shape[0]:
        raise ValueError(f"pairs must be (P, 2) and delta (P, d) with the same P, "
                         f"got {tuple(pairs.shape)} and {tuple(delta.shape)}")
    if pairs.numel() and (pairs.min() < 0 or (pairs[:, 0] >= R).any() or (pairs[:, 1] >= N).any()):
        raise ValueError(f"pairs must hold (run < {R}, client < {N}), got run and client maxima "
                         f"{pairs.max(0).values.tolist()} and minimum {int(pairs.min())}")
    if updates is None:
        updates = torch.zeros(R, N, delta.shape[1], dtype=delta.dtype, device=delta.device)
    if delta.shape[1] != updates.shape[2]:
        raise ValueError(f"delta has {delta.shape[1]} coordinates, earlier ones {updates.shape[2]}")
    runs, clients = pairs[:, 0].numpy(), pairs[:, 1].numpy()
    keys = runs * N + clients
    last = len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]  # last occurrence of each pair
    if last.size:
        rows = torch.from_numpy(last)
        updates[pairs[rows, 0].to(updates.device), pairs[rows, 1].to(updates.device)] = \
            delta[rows.to(delta.device)].to(updates.dtype)
    return updates, runs[last], clients[last]


# ----------------------------------------------------------------------------------------------
# DivFL (Balakrishnan et al., ICLR 2022): greedy facility location over the clients' updates
# ----------------------------------------------------------------------------------------------
@dataclass
class DivFLState(SamplerState):
    """Adds, for ``proxy="stale"``, the latest observed update of each (run, client): ``updates``
    (R, N, d), allocated at the first ``observe`` on the device and dtype of ``delta`` (zeros for
    clients never observed). Stays None with ``proxy="gradient"`` and ``proxy="update"``."""

    updates: torch.Tensor | None = None


def update_distances(u: torch.Tensor) -> np.ndarray:
    """D[i, j] = ||u_i - u_j||_2 for the rows of u (n, d), as a float64 (n, n) array.

    Computed from the differences (``torch.cdist`` without the Gram-matrix shortcut), on u's device:
    identical updates are at distance exactly 0 and D is exactly symmetric, so ties are exact. A
    non-finite distance (an update with NaN or inf) counts as +inf.
    """
    if u.shape[0] == 0:
        return np.zeros((0, 0))
    d = torch.cdist(u[None], u[None], compute_mode="donot_use_mm_for_euclid_dist")[0]
    d = d.double().cpu().numpy()
    return np.where(np.isfinite(d), d, np.inf)


def facility_location_greedy(D: np.ndarray, k: int, g: np.random.Generator | None = None,
                             subsample: float | None = None) -> np.ndarray:
    """Greedy minimisation of L(S) = sum_i min_{j in S} D[i, j] over |S| = min(k, n) columns of D (n, n).

    Each of the k steps adds the column j not yet in S with the smallest L(S + j), ties to the lowest j.
    Each sum is taken over its sorted terms, so two candidates whose terms are the same numbers in
    another order (as j and j' often are, D being symmetric) tie exactly. Equivalently the greedy
    maximises the facility-location function G(S) = sum_i max_{j in S} (C - D[i, j]) for any C >= max D
    (monotone submodular, G(empty) = 0), so G(S_greedy) >= (1 - 1/e) max_{|S|=k} G(S).
    ``subsample`` (stochastic greedy, as the authors' ``stochastic_greedy``): each step looks only at
    m = max(k, int(subsample * n)) columns drawn uniformly without replacement from those not yet in S
    (``g.choice``), or at all of them when at most m are left. Returns the chosen columns in the
    order they were added.
    """
    n = D.shape[1]
    best = np.full(D.shape[0], np.inf)  # min_{j in S} D[i, j]; +inf while S is empty
    left = np.ones(n, dtype=bool)
    chosen = []
    m = n if subsample is None else max(k, int(subsample * n))
    for _ in range(min(k, n)):
        cand = np.flatnonzero(left)
        if m < cand.size:
            cand = np.sort(g.choice(cand, size=m, replace=False))
        # L(S + j) for each candidate j, summed in sorted order: equal multisets of terms tie exactly
        cost = np.sort(np.minimum(best[:, None], D[:, cand]), axis=0).sum(axis=0)
        j = int(cand[np.argmin(cost)])                             # first minimum: lowest index
        chosen.append(j)
        left[j] = False
        best = np.minimum(best, D[:, j])
    return np.array(chosen, dtype=np.int64)


PROXIES = ("gradient", "update", "stale")     # DivFL's vectors: the document's one-step gradient first


@dataclass(frozen=True)
class DivFL:
    """Diverse client selection (Balakrishnan, Li, Zhou, Himayat, Smith & Bilmes, ICLR 2022).

    Rule: S_t maximises the facility-location function G(S) = sum_{i in V} max_{j in S} f(i, j) over
    |S| = k, with the similarity f given by the clients' gradient dissimilarity, i.e. S_t minimises
    sum_{i in V} min_{j in S} ||Delta_i - Delta_j||: every client i is "represented" by its closest
    selected client, so the selected updates summarise all of them. Solved greedily
    (:func:`facility_location_greedy`): k steps, each adding the client that most decreases the sum,
    ties to the lowest client index; each selected client trains once (counts 1). The distance is
    Euclidean (:func:`update_distances`), as the authors' ``pairwise_distances(..., metric="euclidean")``
    with a zero diagonal; the sum over i is unweighted (no n_i).

    ``proxy`` = the vectors Delta_i the distances are taken on:

    * ``"gradient"`` (default): every available client's gradient of its local objective over all its
      data at the current global model x_t, :math:`\nabla F_i(x_t)`, asked through the probe each round
      (one ``probe.gradients(mask)`` call per round, mask = A_t of the runs with |A_t| > k). This is the
      idealized DivFL of the HiCS-FL document (appendix 6.1.2: "1-step gradients were requested from all
      client[s] in each round (regardless of their participation status)"), read as the gradient of one
      full-batch step at the received model, which is also what DivFL's own code computes at round 0 and
      what the DivFL paper's analysis uses. The sign (gradient, not step) and a step size common to all
      clients leave the distances' order, hence S_t, unchanged.
    * ``"update"``: every available client's full local update from x_t (the task's local training:
      epochs or steps of minibatch SGD), asked through ``probe.updates(mask)``; Delta_i = x_t minus the local
      model. A labelled variant: a richer vector than the document's one-step gradient, at the cost of
      every client's full local training every round. Because local training is keyed by
      (seed, round, client), the updates the chosen clients then send are the probed ones.
    * ``"stale"``: Delta_i = the last update client i sent (through ``observe``), zeros for a client
      never observed; no probe call. The authors' code works this way after round 0: the table of
      per-client gradients is refreshed only for the clients selected in a round.

    ``subsample`` (default None: plain greedy): stochastic greedy, each step choosing among
    max(k, int(subsample |A_t|)) random remaining clients, drawn with the run's generator.

    Departures. The paper's V is all N clients, all available; we take V = A_t, both as the clients
    that may be chosen and as the clients to be represented (the probed proxies have no vector for an
    unavailable client). If |A_t| <= k every available client is taken and nothing is asked. The
    paper's vector is the full local gradient at the received model (``proxy="gradient"``).

    Authors' code (github.com/melodi-lab/divfl, commit 4a5b80df85a72b97751ce1130ee5c7d76a2c1540,
    ``flearn/trainers/fedavg.py``, ``flearn/trainers/fedbase.py``: ``select_cl_submod``, ``lazy_greedy``,
    ``greedy``, ``stochastic_greedy``): at round 0 every client's full-batch gradient at the global model
    is computed; afterwards only the selected clients' rows are refreshed, each with the gradient at
    the model it received that round (the scripts' ``m_interval`` flag does not reach this condition).
    Our "stale" starts from zeros instead of that round-0 probe. The default solver is lazy greedy
    (the plain greedy's choices, up to ties, which follow numpy's argmin/argsort order).
    The HiCS-FL code (github.com/CityChan/HiCS-FL, commit 25f309d118d72c8ca176b6551704f648b304e100,
    ``server/server_divfl.py``) trains all N clients every round but selects with the updates of the
    previous round (zeros at round 0), by stochastic greedy with subsample 0.1, and aggregates only
    the selected clients; our "gradient" and "update" use the current round's vectors, as the HiCS-FL
    document says.
    """

    k: int
    proxy: str = "gradient"
    subsample: float | None = None

    def __post_init__(self):
        _positive_int(self.k, "k")
        if self.proxy not in PROXIES:
            raise ValueError(f"proxy must be 'gradient' (every available client's gradient at the global model, "
                             f"through the probe), 'update' (every available client's full local update, through "
                             f"the probe) or 'stale' (the last observed updates), got {self.proxy!r}")
        s = self.subsample
        if s is not None and (isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, float, np.floating))
                              or not 0 < s <= 1):
            raise ValueError(f"subsample must be None (plain greedy) or a number in (0, 1], got {s!r}")

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> DivFLState:
        base = _base_state(runs, num_clients, sizes, seeds, k=self.k)
        return DivFLState(rngs=base.rngs, sizes=base.sizes)

    def select(self, state: DivFLState, t: int, available, probe=None):
        avail = _available(available, state)
        R, N = avail.shape
        ask = avail & (avail.sum(axis=1, keepdims=True) > self.k)  # runs with a choice to make
        vectors = self._vectors(state, ask, probe)
        chosen = []
        for r in range(R):
            idx = np.flatnonzero(avail[r])
            if not ask[r].any():
                chosen.append(idx)
                continue
            D = update_distances(vectors[r])
            chosen.append(idx[facility_location_greedy(D, self.k, state.rngs[r], self.subsample)])
        return _counts(chosen, N), state

    def _vectors(self, state: DivFLState, ask: np.ndarray, probe) -> list:
        """Per run, the (|A_t|, d) updates of its asked clients in client order (None if not asked)."""
        R, N = ask.shape
        out = [None] * R
        if not ask.any():
            return out
        if self.proxy == "stale":
            for r in np.flatnonzero(ask.any(axis=1)):
                idx = torch.from_numpy(np.flatnonzero(ask[r]))
                out[r] = (torch.zeros(len(idx), 1, dtype=torch.float64) if state.updates is None
                          else state.updates[r][idx.to(state.updates.device)])
            return out
        ask_of = probe.gradients if self.proxy == "gradient" else probe.updates
        what = "gradients" if self.proxy == "gradient" else "updates"
        pairs, delta = ask_of(torch.from_numpy(ask))
        pairs = torch.as_tensor(pairs).detach().cpu().long()
        if pairs.ndim != 2 or pairs.shape[1] != 2 or delta.ndim != 2 or delta.shape[0] != pairs.shape[0]:
            raise ValueError(f"probe.{what} must return pairs (P, 2) and vectors (P, d) with the same P, "
                             f"got {tuple(pairs.shape)} and {tuple(delta.shape)}")
        got = np.zeros((R, N), dtype=bool)
        pos = np.full((R, N), -1, dtype=np.int64)
        if len(pairs):
            got[pairs[:, 0].numpy(), pairs[:, 1].numpy()] = True
            pos[pairs[:, 0].numpy(), pairs[:, 1].numpy()] = np.arange(len(pairs))
        if not np.array_equal(got, ask) or len(pairs) != ask.sum():
            raise ValueError(f"probe.{what} returned {len(pairs)} {what} for {int(ask.sum())} asked "
                             f"(run, client) pairs; it must return each asked pair once and no other")
        for r in np.flatnonzero(ask.any(axis=1)):
            out[r] = delta[torch.from_numpy(pos[r, ask[r]]).to(delta.device)]
        return out

    def observe(self, state: DivFLState, t: int, pairs, delta) -> DivFLState:
        """``proxy="stale"``: keep each trained client's update (the last one when a pair repeats)."""
        if self.proxy == "stale":
            state.updates, _, _ = _store_latest(state.updates, pairs, delta, state.sizes.shape)
        return state


# ----------------------------------------------------------------------------------------------
# CA-Fed (Rodio et al., INFOCOM 2023): greedy exclusion of clients, and the F3AST baseline
# ----------------------------------------------------------------------------------------------
def _client_vector(values, name: str, low: float, high: float, *, low_open: bool = False) -> tuple:
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a 1-D sequence with one value per client, got shape {a.shape}")
    bad = ~np.isfinite(a) | (a <= low if low_open else a < low) | (a > high)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        lo = "(" if low_open else "["
        raise ValueError(f"{name}[{i}] = {a[i]!r} is outside {lo}{low}, {high}]")
    return tuple(float(v) for v in a)


def _fraction(value, name: str, *, high_open: bool = False) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not (0 <= value < 1 if high_open else 0 <= value <= 1):
        raise ValueError(f"{name} must be a number in [0, 1{')' if high_open else ']'}, got {value!r}")
    return float(value)


def cafed_error(a: np.ndarray, q: np.ndarray, pi: np.ndarray, gap: np.ndarray, c: float = 1.0) -> float:
    r"""CA-Fed's estimate of the total error of allocation ``a`` (N,):

    .. math:: E(a) = \sum_k w_k\,(\hat F_k - F_k^*) + c\,\max_k(\hat F_k - F_k^*)\;\mathrm{TV}(q, w)^2,
       \qquad w_k = \frac{\pi_k a_k}{\sum_h \pi_h a_h},\quad \mathrm{TV}(q, w) = \tfrac12\|q - w\|_1 .

    ``gap`` = :math:`\hat F_k - F_k^*` (the smoothed loss estimates minus the local optima). The first
    term estimates the optimisation error of the biased objective :math:`F_B` (whose weights are w, the
    notes' :math:`p_k \propto \pi_k q_k`), the second the bias term of Theorem 1 with the notes'
    :math:`\Gamma` estimated by the largest gap and :math:`\chi^2_{\alpha\|p}` replaced by the squared
    total-variation distance (as the authors' code, arodio/CA-Fed@e673587 ``clients_sampler.py``,
    ``_estimate_optimization_objective``; ``utils/divergence.py``, ``tv_distance``). The max runs over
    every client, excluded or not. ``a`` must have a positive entry."""
    w = pi * a
    total = w.sum()
    if not total > 0:
        raise ValueError("the allocation gives no weight to any client (sum_k pi_k a_k = 0)")
    w = w / total
    tv = 0.5 * np.abs(q - w).sum()
    return float(gap @ w + c * gap.max() * tv ** 2)


def cafed_allocation(q, pi, lam, gap, c: float = 1.0, tolerance: float = 0.0,
                     trace: list | None = None) -> tuple[np.ndarray, list[int]]:
    r"""CA-Fed's allocation: start from :math:`a_k = q_k/\pi_k` for every client, then visit the clients
    twice, first by decreasing :math:`|\lambda_k|` (most correlated first), then by increasing
    :math:`\pi_k` (least available first), ties in client order, and set :math:`a_k = 0` whenever
    :math:`E(a) - E(a') \ge` ``tolerance`` for the candidate a' (:func:`cafed_error`; tolerance 0: a
    tie excludes). A pass stops at the first candidate that would leave no client (sum a' = 0), as in
    the authors' ``_truncate_clients`` (arodio/CA-Fed@e673587 ``clients_sampler.py``). An excluded
    client visited again in the second pass stays excluded.

    Returns (a (N,), excluded): the final allocation and the clients excluded, in the order they were.
    ``trace``: a list to which one dict per visit is appended (pass 1 or 2, client, E of the current
    allocation, E of the candidate, whether the candidate was taken; a visit that stops the pass has
    candidate E = NaN).
    All inputs are (N,) arrays; the whole computation is float64 (the authors keep the loss estimates in
    float32)."""
    q, pi, lam, gap = (np.asarray(v, dtype=np.float64) for v in (q, pi, lam, gap))
    if not (q.shape == pi.shape == lam.shape == gap.shape) or q.ndim != 1:
        raise ValueError(f"q, pi, lam and gap must be 1-D of one length, got {q.shape}, {pi.shape}, "
                         f"{lam.shape}, {gap.shape}")
    if not np.all(pi > 0):
        raise ValueError(f"every pi_k must be > 0, got {pi}")
    a = q / pi
    best = cafed_error(a, q, pi, gap, c)
    excluded: list[int] = []
    by_correlation = np.argsort(-np.abs(lam), kind="stable")
    by_availability = np.argsort(pi, kind="stable")
    for npass, order in ((1, by_correlation), (2, by_availability)):
        for k in order.tolist():
            cand = a.copy()
            cand[k] = 0.0
            if cand.sum() == 0:
                if trace is not None:
                    trace.append(dict(pass_=npass, client=k, current=best, candidate=np.nan, taken=False))
                break
            err = cafed_error(cand, q, pi, gap, c)
            taken = best - err >= tolerance
            if trace is not None:
                trace.append(dict(pass_=npass, client=k, current=best, candidate=err, taken=taken and a[k] != 0))
            if taken:
                if a[k] != 0:
                    excluded.append(k)
                a, best = cand, err
    return a, excluded


@dataclass
class CAFedState(SamplerState):
    r"""Adds, per run: ``loss`` (R, N) the smoothed loss estimates :math:`\hat F_k`, ``started`` (R,)
    whether they were initialised, ``allocation`` (R, N) the last allocation a, ``kept`` (R, N) how many
    rounds each client had a_k > 0 and ``available`` (R, N) how many rounds it was available."""

    loss: np.ndarray | None = None
    started: np.ndarray | None = None
    allocation: np.ndarray | None = None
    kept: np.ndarray | None = None
    available: np.ndarray | None = None


@dataclass(frozen=True)
class CAFed:
    r"""CA-Fed, Correlation-Aware FL (Rodio, Faticanti, Marfoq, Neglia & Leonardi, INFOCOM 2023).

    Each round t, per run:

    1. The available clients report :math:`F_k(w_t)`, the current global model's loss on their data (one
       ``probe.losses`` call, asking the available clients). Loss estimates: at the first round with an
       available client, :math:`\hat F_k = F_k(w_t)` for the available clients and the mean of those for
       the others; afterwards :math:`\hat F_k \leftarrow \beta\hat F_k + (1-\beta)F_k(w_t)` for the
       available clients (``beta`` = the authors' ``smoothness_param``), the others keep theirs.
    2. :func:`cafed_allocation` with :math:`q_k = n_k/\sum_j n_j` (``objective_type weighted``), the
       oracle :math:`\pi_k, \lambda_k` (``pi``, ``lam``: the authors' default ``--estimator_type oracle``),
       the local optima :math:`F_k^*` (``optima``) and ``c`` (``bias_const``, 1 in every script).
    3. :math:`S_t` = the available clients with :math:`a_k > 10^{-10}`, each drawn once. The rule that
       goes with it is ``flkit.aggregate.InverseAvailability()`` (weights :math:`a_k = q_k/\pi_k`, not
       normalised).

    Departures from the authors' code (arodio/CA-Fed@e673587 ``clients_sampler.py``,
    ``MarkovianClientsSampler``; ``aggregator.py``, ``gather_loss_dict``; ``utils/utils.py``,
    ``get_local_optimums``): the reported loss is the training loss (``probe.losses``); the code
    evaluates each client's *validation* loader, which is its test split. A run whose first round has no
    available client waits for one to initialise the estimates (the code would divide by zero). Its
    :math:`F_k^*` come from scikit-learn (see the chapter code); here they are an input.
    """

    pi: tuple
    lam: tuple
    optima: tuple
    beta: float = 0.0
    c: float = 1.0
    tolerance: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "pi", _client_vector(self.pi, "pi", 0.0, 1.0, low_open=True))
        object.__setattr__(self, "lam", _client_vector(self.lam, "lam", -1.0, 1.0))
        object.__setattr__(self, "optima", _client_vector(self.optima, "optima", -np.inf, np.inf))
        if not len(self.pi) == len(self.lam) == len(self.optima):
            raise ValueError(f"pi, lam and optima need one value per client, got lengths "
                             f"{len(self.pi)}, {len(self.lam)}, {len(self.optima)}")
        object.__setattr__(self, "beta", _fraction(self.beta, "beta (loss smoothing)", high_open=True))
        for name in ("c", "tolerance"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> CAFedState:
        base = _base_state(runs, num_clients, sizes, seeds)
        if len(self.pi) != base.sizes.shape[1]:
            raise ValueError(f"CAFed was given {len(self.pi)} clients' pi, lam and optima; the task has "
                             f"{base.sizes.shape[1]} clients")
        R, N = base.sizes.shape
        return CAFedState(rngs=base.rngs, sizes=base.sizes, loss=np.zeros((R, N)), started=np.zeros(R, bool),
                          allocation=np.zeros((R, N)), kept=np.zeros((R, N)), available=np.zeros((R, N)))

    def select(self, state: CAFedState, t: int, available, probe):
        avail = _available(available, state)
        R, N = avail.shape
        chosen = np.zeros((R, N), dtype=np.int64)
        if not avail.any():
            return torch.from_numpy(chosen), state
        loss = torch.as_tensor(probe.losses(torch.from_numpy(avail))).detach().cpu().numpy().astype(np.float64)
        if loss.shape != (R, N):
            raise ValueError(f"probe.losses must return shape {(R, N)}, got {loss.shape}")
        pi, lam, opt = (np.asarray(v) for v in (self.pi, self.lam, self.optima))
        for r in range(R):
            a_r = avail[r]
            if not a_r.any():
                continue
            if not state.started[r]:
                state.loss[r] = loss[r, a_r].mean()
                state.loss[r, a_r] = loss[r, a_r]
                state.started[r] = True
            else:
                state.loss[r, a_r] = self.beta * state.loss[r, a_r] + (1 - self.beta) * loss[r, a_r]
            q = state.sizes[r] / state.sizes[r].sum()
            alloc, _ = cafed_allocation(q, pi, lam, state.loss[r] - opt, self.c, self.tolerance)
            state.allocation[r] = alloc
            chosen[r] = a_r & (alloc > 1e-10)
        state.kept += state.allocation > 1e-10
        state.available += avail
        return torch.from_numpy(chosen), state

    def observe(self, state, t, pairs, delta):
        return state


@dataclass
class F3ASTState(SamplerState):
    """Adds ``pi_hat`` (R, N), the availability estimates of the last round."""

    pi_hat: np.ndarray | None = None


@dataclass(frozen=True)
class F3AST:
    r"""F3AST (Ribero, Vikalo & de Veciana 2022, arXiv:2205.06730) as run by the CA-Fed code.

    Each round: :math:`\hat\pi_k = (1-s)\,\pi_k + s\,\mathbb 1[k \in A_t]` (``smoothness`` s), then
    :math:`S_t` = the k available clients with the largest :math:`q_k^2/\hat\pi_k^2` (ties: lowest client
    index; every available client when :math:`|A_t| \le k`), each drawn once. The rule that goes with it
    is ``flkit.aggregate.InverseAvailability(ema=s)`` (weights :math:`q_k/\hat\pi_k`, not normalised).

    As in arodio/CA-Fed@e673587 (``clients_sampler.py``, ``F3AST._update_estimates``; ``utils/utils.py``,
    ``get_clients_sampler``): the estimator is the oracle, which returns the true :math:`\pi_k` afresh every
    round, so :math:`\hat\pi` is one smoothing step from :math:`\pi`, not a running average over rounds (the
    F3AST paper's estimate); and s = 1 / (number of rounds), whatever ``--smoothness_param`` says. For a
    selected (hence available) client :math:`\hat\pi_k = (1-s)\pi_k + s`, increasing in :math:`\pi_k`, so
    with equal :math:`q_k` the rule takes the k least available of the available clients.
    """

    k: int
    pi: tuple
    smoothness: float

    def __post_init__(self):
        _positive_int(self.k, "k")
        object.__setattr__(self, "pi", _client_vector(self.pi, "pi", 0.0, 1.0, low_open=True))
        object.__setattr__(self, "smoothness", _fraction(self.smoothness, "smoothness", high_open=True))

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> F3ASTState:
        base = _base_state(runs, num_clients, sizes, seeds, k=self.k)
        if len(self.pi) != base.sizes.shape[1]:
            raise ValueError(f"F3AST was given {len(self.pi)} clients' pi; the task has {base.sizes.shape[1]} clients")
        return F3ASTState(rngs=base.rngs, sizes=base.sizes, pi_hat=np.zeros_like(base.sizes))

    def select(self, state: F3ASTState, t: int, available, probe=None):
        avail = _available(available, state)
        s = self.smoothness
        state.pi_hat = (1 - s) * np.asarray(self.pi)[None, :] + s * avail
        q = state.sizes / state.sizes.sum(axis=1, keepdims=True)
        score = (q / state.pi_hat) ** 2
        chosen = []
        for r in range(avail.shape[0]):
            idx = np.flatnonzero(avail[r])
            chosen.append(idx if idx.size <= self.k else idx[np.argsort(-score[r, idx], kind="stable")[: self.k]])
        return _counts(chosen, avail.shape[1]), state

    def observe(self, state, t, pairs, delta):
        return state


# ----------------------------------------------------------------------------------------------
# HiCS-FL (Chen & Vikalo 2023): heterogeneity-guided hierarchical clustered sampling
# ----------------------------------------------------------------------------------------------
def output_layer(task) -> tuple[slice, slice]:
    """(weight, bias): the columns of the output layer's weight W (C x L, row-major) and bias b in the
    flat parameter vector of an :class:`flkit.tasks.EngineTask` (any object with ``model``, ``names`` and
    ``shapes``). The output layer is the model's last ``nn.Linear``; it must have a bias."""
    linear = [name for name, m in task.model.named_modules() if isinstance(m, torch.nn.Linear)]
    if not linear:
        raise ValueError("the task's model has no nn.Linear layer: HiCS-FL reads the output layer's bias update")
    prefix = linear[-1] + "." if linear[-1] else ""
    start, found = 0, {}
    for name, shape in zip(task.names, task.shapes):
        n = int(np.prod(shape, dtype=np.int64))
        if name in (prefix + "weight", prefix + "bias"):
            found[name[len(prefix):]] = slice(start, start + n)
        start += n
    if "bias" not in found:
        raise ValueError(f"the output layer {linear[-1]!r} has no bias; HiCS-FL needs its bias update")
    return found["weight"], found["bias"]


def entropy_estimate(delta_bias, T: float) -> np.ndarray:
    r"""HiCS-FL's heterogeneity estimate, Eq. 7: :math:`\hat H(\mathcal D^{(k)}) = H(\mathrm{softmax}(\Delta
    \mathbf b^{(k)} / T))`, with :math:`H(q) = -\sum_i q_i \ln q_i` (nats) and :math:`\Delta\mathbf b^{(k)}`
    the client's update of the output layer's bias in the document's sign (local minus global model).

    ``delta_bias`` (..., C): one update per row; returns (...) float64, each in [0, ln C]. Computed with
    a log-softmax, so a large :math:`\Delta b / T` neither overflows nor gives NaN."""
    if isinstance(T, (bool, np.bool_)) or not isinstance(T, (int, float, np.integer, np.floating)) \
            or not np.isfinite(T) or T <= 0:
        raise ValueError(f"T (the temperature) must be a finite number > 0, got {T!r}")
    z = np.asarray(delta_bias, dtype=np.float64)
    if z.ndim == 0 or z.shape[-1] < 2 or not np.all(np.isfinite(z)):
        raise ValueError(f"delta_bias must hold finite values with C >= 2 classes on its last axis, "
                         f"got shape {z.shape}")
    z = z / T
    z = z - z.max(axis=-1, keepdims=True)
    logq = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return -(np.exp(logq) * logq).sum(axis=-1)


def annealed_probs(H_bar, gamma0: float, t: float, rounds: int) -> np.ndarray:
    r"""HiCS-FL's cluster probabilities, Eq. 10: :math:`\pi^t_m = \exp(\gamma^t \bar H_m) / \sum_{m'}
    \exp(\gamma^t \bar H_{m'})` with :math:`\gamma^t = \gamma^0 (1 - t/\mathcal T)`, ``rounds`` =
    :math:`\mathcal T`. At :math:`t = \mathcal T` (:math:`\gamma = 0`) the clusters are uniform; for
    :math:`\gamma^t > 0`, :math:`\pi^t_m` increases with :math:`\bar H_m`."""
    H = np.asarray(H_bar, dtype=np.float64)
    if H.ndim != 1 or H.size == 0 or not np.all(np.isfinite(H)):
        raise ValueError(f"H_bar must be a non-empty 1-D array of finite cluster entropies, got shape {H.shape}")
    rounds = _positive_int(rounds, "rounds")
    if isinstance(gamma0, (bool, np.bool_)) or not np.isfinite(gamma0) or gamma0 < 0:
        raise ValueError(f"gamma0 must be a finite number >= 0, got {gamma0!r}")
    if isinstance(t, (bool, np.bool_)) or not 0 <= t <= rounds:
        raise ValueError(f"t must lie in [0, rounds = {rounds}], got {t!r}")
    z = gamma0 * (1.0 - t / rounds) * H
    z = np.exp(z - z.max())
    return z / z.sum()


def hics_distances(vectors, H, lam: float, form: str = "paper") -> np.ndarray:
    r"""HiCS-FL's client distance (n, n) from the clients' update vectors (n, c) and estimates H (n,).

    ``form="paper"`` (Eq. 9): :math:`\lambda \arccos(\cos(\Delta_u, \Delta_k)) + (1-\lambda)|\hat H_u -
    \hat H_k|`, :math:`\lambda \in [0, 1]`, the document's vectors being the output-layer bias updates.
    ``form="code"`` (CityChan/HiCS-FL@25f309d ``server/server_hics.py``,
    ``get_matrix_similarity_from_grads_entropy``): :math:`\arccos(\cos(\Delta_u, \Delta_k)) + \lambda
    |\hat H_u - \hat H_k|`, :math:`\lambda \ge 0`, the code's vectors being the output layer's weight and
    bias updates together. The arccos term is :func:`arccos_distances` (0 for a pair with a zero vector)."""
    U = np.asarray(vectors, dtype=np.float64)
    H = np.asarray(H, dtype=np.float64)
    if U.ndim != 2 or H.shape != (U.shape[0],):
        raise ValueError(f"vectors must be (n, c) and H (n,), got {U.shape} and {H.shape}")
    if form not in ("paper", "code"):
        raise ValueError(f"form must be 'paper' (Eq. 9) or 'code' (the authors' weighting), got {form!r}")
    high = 1.0 if form == "paper" else np.inf
    if isinstance(lam, (bool, np.bool_)) or not 0 <= lam <= high:
        raise ValueError(f"lam must lie in [0, {high}] for form={form!r}, got {lam!r}")
    arc = arccos_distances(U @ U.T)
    dH = np.abs(H[:, None] - H[None, :])
    return lam * arc + (1 - lam) * dH if form == "paper" else arc + lam * dH


def ward_clusters(dist, M: int) -> np.ndarray:
    """Ward's hierarchical clustering of n clients into M groups, as the HiCS-FL code
    (``AgglomerativeClustering(n_clusters=M, metric="euclidean", linkage="ward")``): each client is the
    row of the distance matrix ``dist`` (n, n), i.e. its vector of distances to all the clients.
    Returns labels (n,) in 0..M-1, numbered by first appearance (client 0 is in group 0)."""
    from sklearn.cluster import AgglomerativeClustering

    D = np.asarray(dist, dtype=np.float64)
    if D.ndim != 2 or D.shape[0] != D.shape[1] or not np.all(np.isfinite(D)):
        raise ValueError(f"dist must be a finite square matrix, got shape {D.shape}")
    M = _positive_int(M, "M")
    if M > D.shape[0]:
        raise ValueError(f"M = {M} groups exceed the {D.shape[0]} clients to cluster")
    if M == 1 or D.shape[0] == 1:
        return np.zeros(D.shape[0], dtype=np.int64)
    with warnings.catch_warnings():  # scikit-learn calls scipy's linkage on the rows, which warns: on purpose
        warnings.simplefilter("ignore", ClusterWarning)
        raw = AgglomerativeClustering(n_clusters=M, linkage="ward").fit_predict(D)
    _, first = np.unique(raw, return_index=True)
    order = np.argsort(np.argsort(first))           # raw label -> rank of its first client
    return order[raw].astype(np.int64)


def hics_draw(g: np.random.Generator, labels, pi, weights, k: int, rule: str = "paper") -> np.ndarray:
    r"""k distinct clients (indices into labels) from groups ``labels`` (n,) with group probabilities
    ``pi`` (M,) and client weights (n,) (the data sizes n_i).

    ``rule="paper"`` (Algorithm 1, lines 8-12): repeat { draw a group m ~ :math:`\pi`, then a client of
    :math:`G_m` with :math:`\tilde p_{m,i} = n_i / \sum_{j \in G_m} n_j`, and add it to the set
    :math:`\mathcal S^t` } until :math:`|\mathcal S^t| = k`. A draw of a client already in the set
    leaves the set unchanged, so this is successive sampling without replacement proportional to
    :math:`q_i = \pi_{m(i)} \tilde p_{m(i),i}`, drawn here with ``g.choice(n, k, replace=False, p=q)``.
    ``rule="code"`` (``server_hics.py``, ``sample_clients_entropy``): k group slots, each drawn from
    :math:`\pi` and drawn again while the group already has as many slots as clients; then each group's
    slots are filled with distinct clients drawn uniformly (data sizes are not used).
    ``rule="distinct"`` (a diagnostic, neither the document's nor the code's): k distinct groups drawn
    without replacement by successive sampling proportional to :math:`\pi` (``g.choice(M, k,
    replace=False, p=pi)``), then one client from each, proportional to the data sizes within the group;
    with M = k every group gives one client, as Clustered Sampling's one client per cluster. Needs k <= M."""
    labels = np.asarray(labels, dtype=np.int64)
    pi = np.asarray(pi, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    k = _positive_int(k, "k")
    n, M = labels.size, pi.size
    if w.shape != (n,) or labels.min() < 0 or labels.max() >= M or k > n:
        raise ValueError(f"need labels (n,) in 0..{M - 1}, weights (n,) and k <= n; got labels {labels.shape}, "
                         f"weights {w.shape}, k = {k}")
    if rule == "paper":
        within = np.zeros(M)
        np.add.at(within, labels, w)
        q = pi[labels] * w / within[labels]
        return np.asarray(g.choice(n, size=k, replace=False, p=q / q.sum()), dtype=np.int64)
    if rule == "distinct":
        if k > M:
            raise ValueError(f"rule 'distinct' draws k = {k} distinct groups, more than the M = {M} groups")
        out = []
        for m in g.choice(M, size=k, replace=False, p=pi / pi.sum()):
            members = np.flatnonzero(labels == m)
            out.append(int(g.choice(members, p=w[members] / w[members].sum())))
        return np.asarray(out, dtype=np.int64)
    if rule != "code":
        raise ValueError(f"rule must be 'paper', 'code' or 'distinct', got {rule!r}")
    size = np.bincount(labels, minlength=M)
    slots = np.zeros(M, dtype=np.int64)
    for _ in range(k):
        m = int(g.choice(M, p=pi))
        while slots[m] >= size[m]:
            m = int(g.choice(M, p=pi))
        slots[m] += 1
    out = [g.choice(np.flatnonzero(labels == m), slots[m], replace=False) for m in range(M) if slots[m]]
    return np.concatenate(out).astype(np.int64)


@dataclass
class HiCSState(SamplerState):
    """Adds, per (run, client): ``updates`` (R, N, c) float64, the last observed output-layer update in
    the document's sign (local minus global), bias first then (variant "code") the weight row-major,
    allocated at the first ``observe`` on the device of ``delta`` (zeros for a client never observed);
    ``unsampled`` (R, N) the warm-up pool S_0. Diagnostics of the last clustering round of each run:
    ``entropy`` (R, N) the estimates (NaN where not computed), ``labels`` (R, N) the groups (-1: not
    clustered), ``probs`` (list of R arrays) the group probabilities pi, ``mode`` (R,) "warmup", "hics",
    "cs" (the code's fallback) or "all" (|A_t| <= K)."""

    updates: torch.Tensor | None = None
    unsampled: np.ndarray | None = None
    entropy: np.ndarray | None = None
    labels: np.ndarray | None = None
    probs: list | None = None
    mode: list | None = None


_HICS_DEFAULTS = {"paper": dict(temperature=0.0025, lam=0.1, freeze_after_warmup=False),
                  "code": dict(temperature=0.001, lam=10.0, freeze_after_warmup=True)}


@dataclass(frozen=True)
class HiCS:
    r"""HiCS-FL, heterogeneity-guided hierarchical clustered sampling (Chen & Vikalo 2023, Algorithm 1).

    ``variant="paper"`` (the document, arXiv v1). Rounds are the document's t = 1, ..., :math:`\mathcal T`
    (``rounds``); ``fl.run``'s t is the document's t - 1.

    1. Warm-up, t <= ceil(N/K): K clients drawn uniformly without replacement from the pool
       :math:`S_0` of clients never sampled (min(K, |S_0|)), so every client trains once.
    2. Afterwards, every round: for each client, :math:`\hat H_k` = :func:`entropy_estimate` of its last
       observed bias update :math:`\Delta\mathbf b^{(k)}` (Eq. 7, temperature T = 0.0025 for FMNIST);
       the distance of Eq. 9 (:func:`hics_distances`, ``form="paper"``, :math:`\lambda` = 0.1) whose
       cosine is taken between the **bias updates** (the document: "we compute it using only the
       updates of the bias in the output layer"); Ward clustering into M groups
       (:func:`ward_clusters`: scikit-learn's ``AgglomerativeClustering``, as the authors; the document
       says only "hierarchical clustering with Ward's method", and Ward's method needs vectors, so each
       client is its row of distances, as the authors and :class:`ClusteredSampling`); group scores
       :math:`\bar H_m` = the mean of :math:`\hat H_k` over the group; group probabilities
       :func:`annealed_probs` with :math:`\gamma^t = \gamma^0(1 - t/\mathcal T)`, :math:`\gamma^0` = 4;
       K distinct clients by :func:`hics_draw` (Algorithm 1's loop: group ~ :math:`\pi^t`, client ~
       :math:`\tilde{\mathbf p}_m \propto n_k`, added to the set until it holds K). The document gives
       no per-group slot rule beyond this loop; we read it literally (a repeated client is drawn again).
       M defaults to K (the document sets M = K "for convenience").
    3. Every round the trained clients' bias updates replace their stored ones (Algorithm 1, line 18).

    Where to find the bias: ``bias`` (and ``weight`` for the code variant) are the column slices of the
    output layer's bias b (C,) and weight W (C x L, row-major) in the flat parameter vector;
    :meth:`for_task` reads them from an EngineTask (:func:`output_layer`: the model's last
    ``nn.Linear``). ``fl.run``'s updates are global minus local; the sampler stores their negation,
    the document's :math:`\Delta\mathbf b = \theta_k - \theta^t` (the sign matters for Eq. 7).

    ``variant="code"``: as CityChan/HiCS-FL@25f309d (the NeurIPS 2024 code), ``server/server_hics.py``
    (``train``, ``cluster_sampling``, ``magnitude_gradient``, ``estimated_entropy_from_grad``,
    ``get_matrix_similarity_from_grads_entropy``, ``sample_clients_entropy``) and ``clustering.py``
    (``get_gradients_fc``, ``get_similarity``, ``get_clusters_with_alg2``, ``sample_clients``):

    * warm-up: floor(N/K) rounds, clients in index order (round t takes clients tK, ..., tK + K - 1);
    * :math:`\hat H_k` from the row means of the output layer's **weight** update (C x L, mean over L),
      not the bias, with T = 0.001 (configs);
    * distance arccos(cos) + :math:`\lambda|\hat H_u - \hat H_k|`, :math:`\lambda` = 10, the cosine
      taken over the output layer's weight and bias updates together (``form="code"``);
    * when the population variance of the :math:`\hat H_k` is >= ``var_switch`` (0.1), the round uses
      Clustered Sampling's Algorithm 2 instead (:func:`ward_distributions` on the same distances, weights
      n_k / sum n; K draws, one per distribution, so a client may be drawn twice);
    * :math:`\gamma = \gamma^0 (\mathcal T - t)/\mathcal T` with the code's 0-based t (never reaches 0);
    * the group slots are allotted by ``hics_draw(rule="code")`` (clients uniform within a group);
    * stored updates are refreshed only during warm-up (``freeze_after_warmup``) when the partition's
      alpha list has several distinct values, every round otherwise: the default of the code variant is
      True (every multi-alpha setting of the document); pass False for a single-alpha partition.

    ``draw``: None (default) draws the clients by the variant's rule (:func:`hics_draw` ``rule=variant``);
    "paper" or "code" picks the other variant's rule; "distinct" (a diagnostic) draws K distinct groups
    without replacement by :math:`\pi` and one client from each (needs M >= K).

    Departures for partial availability (the document has every client available): warm-up draws from
    :math:`S_0 \cap A_t` during the same number of rounds, so a client unavailable throughout warm-up
    keeps a zero update (:math:`\hat H = \ln C` and arccos distance 0, as the code's initial zeros);
    later rounds cluster the available clients only (M reduced to |A_t| when smaller) and take all of
    them when |A_t| <= K. A run used beyond ``rounds`` rounds raises ValueError (the annealing needs
    :math:`\mathcal T`). Random draws use the run's "selection" stream.
    """

    k: int
    rounds: int
    bias: slice
    weight: slice | None = None
    clusters: int | None = None
    temperature: float | None = None
    lam: float | None = None
    gamma0: float = 4.0
    variant: str = "paper"
    var_switch: float = 0.1
    freeze_after_warmup: bool | None = None
    draw: str | None = None

    def __post_init__(self):
        _positive_int(self.k, "k")
        _positive_int(self.rounds, "rounds")
        if self.variant not in _HICS_DEFAULTS:
            raise ValueError(f"variant must be 'paper' (the document) or 'code' (CityChan/HiCS-FL@25f309d), "
                             f"got {self.variant!r}")
        for name, value in _HICS_DEFAULTS[self.variant].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        object.__setattr__(self, "clusters", self.k if self.clusters is None else self.clusters)
        _positive_int(self.clusters, "clusters (M)")
        C = _slice_len(self.bias, "bias")
        if C < 2:
            raise ValueError(f"bias must cover the C >= 2 output biases, got {self.bias!r}")
        if self.variant == "code":
            if self.weight is None:
                raise ValueError("variant='code' reads the output layer's weight: give weight= (see output_layer)")
            if _slice_len(self.weight, "weight") % C:
                raise ValueError(f"weight covers {_slice_len(self.weight, 'weight')} columns, not a multiple "
                                 f"of C = {C} (W is C x L)")
        for name in ("temperature", "var_switch"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        hics_distances(np.zeros((1, 1)), np.zeros(1), self.lam, self.variant)  # validates lam
        if isinstance(self.gamma0, (bool, np.bool_)) or not np.isfinite(self.gamma0) or self.gamma0 < 0:
            raise ValueError(f"gamma0 must be a finite number >= 0, got {self.gamma0!r}")
        if not isinstance(self.freeze_after_warmup, (bool, np.bool_)):
            raise ValueError(f"freeze_after_warmup must be True, False or None, got {self.freeze_after_warmup!r}")
        if self.draw not in (None, "paper", "code", "distinct"):
            raise ValueError(f"draw must be None (the variant's rule), 'paper', 'code' or 'distinct', got {self.draw!r}")
        if self.draw == "distinct" and self.clusters < self.k:
            raise ValueError(f"draw='distinct' takes k = {self.k} distinct groups: clusters (M = {self.clusters}) "
                             f"must be >= k")

    @classmethod
    def for_task(cls, task, k: int, rounds: int, **kw) -> "HiCS":
        """HiCS with the output layer's slices read from an EngineTask (:func:`output_layer`)."""
        weight, bias = output_layer(task)
        return cls(k=k, rounds=rounds, bias=bias, weight=weight, **kw)

    def warmup_rounds(self, num_clients: int) -> int:
        """Warm-up length: ceil(N/K) rounds (paper), floor(N/K) (code)."""
        return -(-num_clients // self.k) if self.variant == "paper" else num_clients // self.k

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> HiCSState:
        base = _base_state(runs, num_clients, sizes, seeds, k=self.k)
        R, N = base.sizes.shape
        return HiCSState(rngs=base.rngs, sizes=base.sizes, unsampled=np.ones((R, N), dtype=bool),
                         entropy=np.full((R, N), np.nan), labels=np.full((R, N), -1, dtype=np.int64),
                         probs=[None] * R, mode=[None] * R)

    def select(self, state: HiCSState, t: int, available, probe=None):
        avail = _available(available, state)
        R, N = avail.shape
        if t + 1 > self.rounds:
            raise ValueError(f"round t = {t + 1} exceeds rounds = {self.rounds}; give HiCS the run's number of rounds")
        chosen = []
        for r in range(R):
            idx = np.flatnonzero(avail[r])
            if t < self.warmup_rounds(N):
                chosen.append(self._warmup_pick(state, r, idx))
            elif idx.size <= self.k:
                state.mode[r] = "all"
                chosen.append(idx)
            else:
                chosen.append(self._clustered_pick(state, r, idx, t))
        return _counts(chosen, N), state

    def _warmup_pick(self, state: HiCSState, r: int, idx: np.ndarray) -> np.ndarray:
        pool = idx[state.unsampled[r, idx]]
        take = min(self.k, pool.size)
        pick = pool[:take] if self.variant == "code" else _draw(state.rngs[r], pool, take, None, replace=False)
        state.unsampled[r, pick] = False
        state.mode[r] = "warmup"
        return pick

    def estimates(self, U: np.ndarray) -> np.ndarray:
        """:math:`\\hat H` (n,) from stored updates U (n, c) (bias first, then the weight for "code")."""
        C = _slice_len(self.bias, "bias")
        if self.variant == "paper":
            return entropy_estimate(U[:, :C], self.temperature)
        return entropy_estimate(U[:, C:].reshape(U.shape[0], C, -1).mean(axis=2), self.temperature)

    def _clustered_pick(self, state: HiCSState, r: int, idx: np.ndarray, t: int) -> np.ndarray:
        C = _slice_len(self.bias, "bias")
        width = C + (_slice_len(self.weight, "weight") if self.variant == "code" else 0)
        U = (np.zeros((idx.size, width)) if state.updates is None
             else state.updates[r][torch.from_numpy(idx).to(state.updates.device)].cpu().numpy())
        H = self.estimates(U)
        D = hics_distances(U[:, :C] if self.variant == "paper" else U, H, self.lam, self.variant)
        n = state.sizes[r, idx]
        g = state.rngs[r]
        state.entropy[r] = np.nan
        state.entropy[r, idx] = H
        state.labels[r] = -1
        if self.variant == "code" and np.var(H) >= self.var_switch:
            state.mode[r], state.probs[r] = "cs", None
            return idx[_draw_rows(ward_distributions(D, n / n.sum(), self.k, g), g)]
        labels = ward_clusters(D, min(self.clusters, idx.size))
        H_bar = np.array([H[labels == m].mean() for m in range(labels.max() + 1)])
        pi = annealed_probs(H_bar, self.gamma0, t + 1 if self.variant == "paper" else t, self.rounds)
        state.labels[r, idx] = labels
        state.mode[r], state.probs[r] = "hics", pi
        return idx[hics_draw(g, labels, pi, n, self.k, self.draw or self.variant)]

    def observe(self, state: HiCSState, t: int, pairs, delta) -> HiCSState:
        """Store the trained clients' output-layer updates, negated (document sign); with
        ``freeze_after_warmup`` only during warm-up."""
        if self.freeze_after_warmup and t >= self.warmup_rounds(state.sizes.shape[1]):
            return state
        cols = list(range(*self.bias.indices(delta.shape[1])))
        if self.variant == "code":
            cols += list(range(*self.weight.indices(delta.shape[1])))
        last = max(self.bias.stop, self.weight.stop if self.variant == "code" else 0)
        if last > delta.shape[1]:
            raise ValueError(f"the output-layer slices end at column {last}, past the {delta.shape[1]} "
                             f"coordinates of the updates; check bias= and weight=")
        part = -delta[:, torch.tensor(cols, device=delta.device)].double()
        state.updates, _, _ = _store_latest(state.updates, pairs, part, state.sizes.shape)
        return state


def _slice_len(s, name: str) -> int:
    if not isinstance(s, slice) or not isinstance(s.start, (int, np.integer)) \
            or not isinstance(s.stop, (int, np.integer)) or s.step not in (None, 1) or not 0 <= s.start < s.stop:
        raise ValueError(f"{name} must be a slice(start, stop) of flat-vector columns with 0 <= start < stop, "
                         f"got {s!r}")
    return int(s.stop - s.start)
