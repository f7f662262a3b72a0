"""HiCS-FL, heterogeneity-guided hierarchical clustered sampling (Chen & Vikalo 2023, Algorithm 1), in two
readings: :class:`HiCS`, the document's (``variant="paper"``), and :class:`HiCSAuthors`, the authors' code
(``variant="code"``, CityChan/HiCS-FL@25f309d); the steps they share are the functions below and the base
class :class:`HiCSBase`. ``HiCS.for_task(task, K, T, variant=...)`` builds either from an EngineTask."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from typing import ClassVar, Sequence

import numpy as np
import torch
from scipy.cluster.hierarchy import ClusterWarning

from flkit.sample.base import SamplerState, _available, _base_state, _counts, _draw, _positive_int, _store_latest
from flkit.sample.clustered import _draw_rows, arccos_distances, ward_distributions

__all__ = ["output_layer", "entropy_estimate", "annealed_probs", "hics_distances",
           "ward_clusters", "hics_draw", "HiCSState", "HiCSBase", "HiCS", "HiCSAuthors"]


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
    the document's sign (local minus global), bias first then (:class:`HiCSAuthors`) the weight row-major,
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


@dataclass(frozen=True, repr=False)
class HiCSBase:
    r"""What the two readings of HiCS-FL share (:class:`HiCS`, the document; :class:`HiCSAuthors`, the authors'
    code): the round structure of Algorithm 1 and the mechanics of this package. A reading sets ``VARIANT``
    (its ``variant`` string, "paper" or "code": the name stored runs and checkpoints know it by), ``DEFAULTS``
    (temperature, lam, freeze_after_warmup when given as None) and the steps where the two differ:
    :meth:`warmup_rounds`, :meth:`warmup_order`, :meth:`columns` (what it stores of an update),
    :meth:`estimates`, :meth:`fallback` and :meth:`annealing_round`.

    Every round: warm-up (the first :meth:`warmup_rounds` rounds) from the pool :math:`S_0` of clients never
    sampled; afterwards, the estimates :math:`\hat H_k` of the stored updates, the distances
    (:func:`hics_distances` in the reading's form), Ward clustering into M groups (:func:`ward_clusters`; M =
    ``clusters``, default K), the group scores :math:`\bar H_m` (mean of :math:`\hat H_k`), the annealed group
    probabilities (:func:`annealed_probs`) and K clients by :func:`hics_draw` (``draw``: None, the reading's
    rule; "paper" or "code", the other reading's; "distinct", a diagnostic: K distinct groups by :math:`\pi`,
    one client from each, needs M >= K). The trained clients' updates replace their stored ones
    (``freeze_after_warmup``: during warm-up only).

    Where to find the bias: ``bias`` (and ``weight``) are the column slices of the output layer's bias b (C,)
    and weight W (C x L, row-major) in the flat parameter vector; :meth:`for_task` reads them from an
    EngineTask (:func:`output_layer`: the model's last ``nn.Linear``). ``fl.run``'s updates are global minus
    local; the sampler stores their negation, the document's :math:`\Delta\mathbf b = \theta_k - \theta^t` (the
    sign matters for Eq. 7). Rounds are the document's t = 1, ..., :math:`\mathcal T` (``rounds``); ``fl.run``'s
    t is the document's t - 1.

    Departures for partial availability (the document has every client available): warm-up draws from
    :math:`S_0 \cap A_t` during the same number of rounds, so a client unavailable throughout warm-up
    keeps a zero update (:math:`\hat H = \ln C` and arccos distance 0, as the code's initial zeros);
    later rounds cluster the available clients only (M reduced to |A_t| when smaller) and take all of
    them when |A_t| <= K. A run used beyond ``rounds`` rounds raises ValueError (the annealing needs
    :math:`\mathcal T`). Random draws use the run's "selection" stream.

    ``repr`` is ``HiCS(k=..., ..., variant=..., ...)`` for both readings, the fields in this order: the form
    under which ``fl.run`` keys checkpoints (one class with a ``variant`` field before the two readings were
    split)."""

    k: int
    rounds: int
    bias: slice
    weight: slice | None = None
    clusters: int | None = None
    temperature: float | None = None
    lam: float | None = None
    gamma0: float = 4.0
    variant: str | None = None
    var_switch: float = 0.1
    freeze_after_warmup: bool | None = None
    draw: str | None = None

    VARIANT: ClassVar[str]
    DEFAULTS: ClassVar[dict]

    def __post_init__(self):
        _positive_int(self.k, "k")
        _positive_int(self.rounds, "rounds")
        if self.variant is None:
            object.__setattr__(self, "variant", self.VARIANT)
        if self.variant != self.VARIANT:
            if self.variant in _READINGS:
                raise ValueError(f"variant={self.variant!r} is {_READINGS[self.variant].__name__}, not "
                                 f"{type(self).__name__}; HiCS.for_task(task, k, rounds, variant=...) builds either")
            raise ValueError(f"variant must be 'paper' (the document) or 'code' (CityChan/HiCS-FL@25f309d), "
                             f"got {self.variant!r}")
        for name, value in self.DEFAULTS.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        object.__setattr__(self, "clusters", self.k if self.clusters is None else self.clusters)
        _positive_int(self.clusters, "clusters (M)")
        C = _slice_len(self.bias, "bias")
        if C < 2:
            raise ValueError(f"bias must cover the C >= 2 output biases, got {self.bias!r}")
        for name in ("temperature", "var_switch"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        hics_distances(np.zeros((1, 1)), np.zeros(1), self.lam, self.VARIANT)  # validates lam
        if isinstance(self.gamma0, (bool, np.bool_)) or not np.isfinite(self.gamma0) or self.gamma0 < 0:
            raise ValueError(f"gamma0 must be a finite number >= 0, got {self.gamma0!r}")
        if not isinstance(self.freeze_after_warmup, (bool, np.bool_)):
            raise ValueError(f"freeze_after_warmup must be True, False or None, got {self.freeze_after_warmup!r}")
        if self.draw not in (None, "paper", "code", "distinct"):
            raise ValueError(f"draw must be None (the variant's rule), 'paper', 'code' or 'distinct', "
                             f"got {self.draw!r}")
        if self.draw == "distinct" and self.clusters < self.k:
            raise ValueError(f"draw='distinct' takes k = {self.k} distinct groups: clusters (M = {self.clusters}) "
                             f"must be >= k")

    def __repr__(self) -> str:
        return "HiCS(" + ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)) + ")"

    @classmethod
    def for_task(cls, task, k: int, rounds: int, **kw) -> "HiCSBase":
        """The sampler with the output layer's slices read from an EngineTask (:func:`output_layer`).
        ``variant``: "paper" (:class:`HiCS`) or "code" (:class:`HiCSAuthors`), as stored runs' configurations
        name the reading; without it, this class's reading."""
        weight, bias = output_layer(task)
        reading = cls if kw.get("variant") is None else _READINGS.get(kw["variant"], cls)
        return reading(k=k, rounds=rounds, bias=bias, weight=weight, **kw)

    # ------------------------------------------------------------------ the steps where the readings differ
    def warmup_rounds(self, num_clients: int) -> int:
        """The number of warm-up rounds for N clients."""
        raise NotImplementedError

    def warmup_order(self, g: np.random.Generator, pool: np.ndarray, take: int) -> np.ndarray:
        """The `take` clients of a warm-up round, from the available clients never sampled `pool`."""
        raise NotImplementedError

    def columns(self) -> tuple[slice, ...]:
        """The slices of an update the sampler stores, in order."""
        raise NotImplementedError

    def estimates(self, U: np.ndarray) -> np.ndarray:
        """:math:`\\hat H` (n,) from stored updates U (n, c) (:meth:`columns`, in order)."""
        raise NotImplementedError

    def fallback(self, state: HiCSState, r: int, idx: np.ndarray, D: np.ndarray, H: np.ndarray, n: np.ndarray,
                 g: np.random.Generator) -> np.ndarray | None:
        """The clients of a round that does not use the clusters (None: it uses them)."""
        return None

    def annealing_round(self, t: int) -> int:
        """The t of :math:`\\gamma^t` in ``fl.run``'s round t."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the sampler protocol
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
        pick = self.warmup_order(state.rngs[r], pool, min(self.k, pool.size))
        state.unsampled[r, pick] = False
        state.mode[r] = "warmup"
        return pick

    def _clustered_pick(self, state: HiCSState, r: int, idx: np.ndarray, t: int) -> np.ndarray:
        width = sum(_slice_len(c, "column slice") for c in self.columns())
        U = (np.zeros((idx.size, width)) if state.updates is None
             else state.updates[r][torch.from_numpy(idx).to(state.updates.device)].cpu().numpy())
        H = self.estimates(U)
        D = hics_distances(U, H, self.lam, self.VARIANT)
        n = state.sizes[r, idx]
        g = state.rngs[r]
        state.entropy[r] = np.nan
        state.entropy[r, idx] = H
        state.labels[r] = -1
        picked = self.fallback(state, r, idx, D, H, n, g)
        if picked is not None:
            return picked
        labels = ward_clusters(D, min(self.clusters, idx.size))
        H_bar = np.array([H[labels == m].mean() for m in range(labels.max() + 1)])
        pi = annealed_probs(H_bar, self.gamma0, self.annealing_round(t), self.rounds)
        state.labels[r, idx] = labels
        state.mode[r], state.probs[r] = "hics", pi
        return idx[hics_draw(g, labels, pi, n, self.k, self.draw or self.VARIANT)]

    def observe(self, state: HiCSState, t: int, pairs, delta) -> HiCSState:
        """Store the trained clients' output-layer updates (:meth:`columns`), negated (document sign); with
        ``freeze_after_warmup`` only during warm-up."""
        if self.freeze_after_warmup and t >= self.warmup_rounds(state.sizes.shape[1]):
            return state
        last = max(c.stop for c in self.columns())
        if last > delta.shape[1]:
            raise ValueError(f"the output-layer slices end at column {last}, past the {delta.shape[1]} "
                             f"coordinates of the updates; check bias= and weight=")
        cols = [j for c in self.columns() for j in range(*c.indices(delta.shape[1]))]
        part = -delta[:, torch.tensor(cols, device=delta.device)].double()
        state.updates, _, _ = _store_latest(state.updates, pairs, part, state.sizes.shape)
        return state


@dataclass(frozen=True, repr=False)
class HiCS(HiCSBase):
    r"""HiCS-FL as the document writes it (Chen & Vikalo 2023, arXiv v1, Algorithm 1; ``variant="paper"``).

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
       :func:`annealed_probs` with :math:`\gamma^t = \gamma^0(1 - t/\mathcal T)`, :math:`\gamma^0` = 4,
       t the document's round; K distinct clients by :func:`hics_draw` (Algorithm 1's loop: group ~
       :math:`\pi^t`, client ~ :math:`\tilde{\mathbf p}_m \propto n_k`, added to the set until it holds K).
       The document gives no per-group slot rule beyond this loop; we read it literally (a repeated client
       is drawn again). M defaults to K (the document sets M = K "for convenience").
    3. Every round the trained clients' bias updates replace their stored ones (Algorithm 1, line 18).

    The rest (where the bias is, the sign, partial availability, ``draw``) is :class:`HiCSBase`'s;
    ``weight`` is accepted and not read."""

    VARIANT: ClassVar[str] = "paper"
    DEFAULTS: ClassVar[dict] = dict(temperature=0.0025, lam=0.1, freeze_after_warmup=False)

    def warmup_rounds(self, num_clients: int) -> int:
        """ceil(N/K): every client trains once."""
        return -(-num_clients // self.k)

    def warmup_order(self, g, pool, take):
        """Uniformly without replacement."""
        return _draw(g, pool, take, None, replace=False)

    def columns(self):
        """The output layer's bias."""
        return (self.bias,)

    def estimates(self, U):
        """Eq. 7 on the stored bias updates."""
        return entropy_estimate(U, self.temperature)

    def annealing_round(self, t):
        """The document's round, t + 1."""
        return t + 1


@dataclass(frozen=True, repr=False)
class HiCSAuthors(HiCSBase):
    r"""HiCS-FL as the authors' code runs it (``variant="code"``): CityChan/HiCS-FL@25f309d (the NeurIPS 2024
    code), ``server/server_hics.py`` (``train``, ``cluster_sampling``, ``magnitude_gradient``,
    ``estimated_entropy_from_grad``, ``get_matrix_similarity_from_grads_entropy``, ``sample_clients_entropy``)
    and ``clustering.py`` (``get_gradients_fc``, ``get_similarity``, ``get_clusters_with_alg2``,
    ``sample_clients``). Where it departs from :class:`HiCS` (the document):

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
      alpha list has several distinct values, every round otherwise: the default is True (every
      multi-alpha setting of the document); pass False for a single-alpha partition.

    Needs ``weight`` (see :func:`output_layer`). The rest is :class:`HiCSBase`'s."""

    VARIANT: ClassVar[str] = "code"
    DEFAULTS: ClassVar[dict] = dict(temperature=0.001, lam=10.0, freeze_after_warmup=True)

    def __post_init__(self):
        super().__post_init__()
        C = _slice_len(self.bias, "bias")
        if self.weight is None:
            raise ValueError("variant='code' reads the output layer's weight: give weight= (see output_layer)")
        if _slice_len(self.weight, "weight") % C:
            raise ValueError(f"weight covers {_slice_len(self.weight, 'weight')} columns, not a multiple "
                             f"of C = {C} (W is C x L)")

    def warmup_rounds(self, num_clients: int) -> int:
        """floor(N/K)."""
        return num_clients // self.k

    def warmup_order(self, g, pool, take):
        """In index order."""
        return pool[:take]

    def columns(self):
        """The output layer's bias, then its weight (row-major)."""
        return (self.bias, self.weight)

    def estimates(self, U):
        """Eq. 7 on the row means of the stored weight updates."""
        C = _slice_len(self.bias, "bias")
        return entropy_estimate(U[:, C:].reshape(U.shape[0], C, -1).mean(axis=2), self.temperature)

    def fallback(self, state, r, idx, D, H, n, g):
        """Clustered Sampling's Algorithm 2 when the estimates' variance is >= ``var_switch``."""
        if np.var(H) < self.var_switch:
            return None
        state.mode[r], state.probs[r] = "cs", None
        return idx[_draw_rows(ward_distributions(D, n / n.sum(), self.k, g), g)]

    def annealing_round(self, t):
        """The code's 0-based round t."""
        return t


_READINGS = {"paper": HiCS, "code": HiCSAuthors}


def _slice_len(s, name: str) -> int:
    if not isinstance(s, slice) or not isinstance(s.start, (int, np.integer)) \
            or not isinstance(s.stop, (int, np.integer)) or s.step not in (None, 1) or not 0 <= s.start < s.stop:
        raise ValueError(f"{name} must be a slice(start, stop) of flat-vector columns with 0 <= start < stop, "
                         f"got {s!r}")
    return int(s.stop - s.start)
