"""Split a training set among federated clients: one function per scheme of the seed documents.

Every function takes the training labels (a 1-D array of non-negative ints; a CPU torch tensor works
too) and a ``seed``, and returns a :class:`Partition`. An ``int`` seed uses the independent stream
``flkit.seeding.rng(seed, "data")``; a ``np.random.Generator`` may be passed instead and is then used
(and advanced) as it is.

Schemes and where they come from (paper = seed document, code = the authors' public code; repository,
commit and file of each in ``book/appendix/provenance.md``):

============================  ==================================================================
:func:`iid`                   uniform random split into near-equal parts (CA-Fed's IID split)
:func:`shards`                MIFA's "2 classes per client, equal size" split (``generate_equal.py``)
:func:`dirichlet`             per-class Dirichlet proportions over clients (Yurochkin et al. 2019,
                              the NIID-Bench recipe that HiCS-FL cites as [42])
:func:`grouped_dirichlet`     HiCS-FL's several-alpha partition (appendix 6.10; ``sampling.py``)
:func:`fedau_dirichlet`       FedAU's per-client label mix (``util.py::partition``)
:func:`fedau_participation_probs`  FedAU's p_n = max(p_min, lambda <a_n, q>)
:func:`rare_users`            Fed-CVaR-Avg's class-exclusive rare users (Sec. 4 of doc 003)
:func:`user_classes`          explicit class lists per user (the 2-D examples of doc 003)
============================  ==================================================================
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from flkit.seeding import generator

__all__ = [
    "Partition",
    "iid",
    "shards",
    "dirichlet",
    "grouped_dirichlet",
    "fedau_dirichlet",
    "fedau_participation_probs",
    "rare_users",
    "user_classes",
    "plot_counts",
]


# ----------------------------------------------------------------------------------------------
# Partition object and shared helpers
# ----------------------------------------------------------------------------------------------
@dataclass
class Partition:
    """Who holds which training samples.

    indices: one int64 array per client, indices into the training set.
    counts:  (clients, classes) array of label counts, ``counts[n, c]`` = samples of class c at client n.
    """

    indices: list[np.ndarray]
    counts: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        """Number of samples per client, shape (clients,)."""
        return self.counts.sum(axis=1)

    @property
    def num_clients(self) -> int:
        return len(self.indices)

    @classmethod
    def from_indices(cls, indices: Sequence[np.ndarray], labels, num_classes: int | None = None) -> "Partition":
        """Build a Partition (and its counts) from per-client index arrays."""
        y = _labels(labels)
        C = int(num_classes) if num_classes is not None else int(y.max()) + 1
        idx = [np.asarray(i, dtype=np.int64).reshape(-1) for i in indices]
        counts = np.stack([np.bincount(y[i], minlength=C) for i in idx]) if idx else np.zeros((0, C), np.int64)
        return cls(indices=idx, counts=counts.astype(np.int64))


def _labels(labels) -> np.ndarray:
    if hasattr(labels, "detach"):  # torch tensor
        labels = labels.detach().cpu().numpy()
    y = np.asarray(labels)
    if y.ndim != 1 or y.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D array of class ids, got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(y == np.round(y)):
            y = y.astype(np.int64)
        else:
            raise ValueError(f"labels must be integers (class ids 0..C-1), got dtype {y.dtype}")
    if y.min() < 0:
        raise ValueError(f"labels must be non-negative class ids, got minimum {y.min()}")
    return y.astype(np.int64, copy=False)


def _num_clients(num_clients, n_samples: int, name: str = "num_clients") -> int:
    if isinstance(num_clients, (bool, np.bool_)) or not isinstance(num_clients, (int, np.integer)):
        raise ValueError(f"{name} must be a positive int, got {num_clients!r}")
    if num_clients < 1:
        raise ValueError(f"{name} must be >= 1, got {num_clients}")
    if num_clients > n_samples:
        raise ValueError(f"{name}={num_clients} is more than the {n_samples} samples to split; "
                         f"use at most {n_samples} clients")
    return int(num_clients)


def _positive(value, name: str) -> float:
    v = float(value)
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


def _open_fraction(value, name: str) -> float:
    v = float(value)
    if not (0.0 < v < 1.0):
        raise ValueError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    return v


def _round_half_up(x: float) -> int:
    return int(np.floor(x + 0.5 + 1e-9))


def _class_indices(y: np.ndarray, C: int) -> list[np.ndarray]:
    order = np.argsort(y, kind="stable")
    bounds = np.searchsorted(y[order], np.arange(C + 1))
    return [order[bounds[c]:bounds[c + 1]] for c in range(C)]


def _split_by_proportions(idx: np.ndarray, proportions: np.ndarray) -> list[np.ndarray]:
    """NIID-Bench split: cut points floor(cumsum(p) * len), contiguous pieces."""
    cuts = (np.cumsum(proportions) * len(idx)).astype(int)[:-1]
    return np.split(idx, cuts)


# ----------------------------------------------------------------------------------------------
# IID and shards
# ----------------------------------------------------------------------------------------------
def iid(labels, num_clients: int, seed) -> Partition:
    """Shuffle all samples and cut them into ``num_clients`` parts whose sizes differ by at most one."""
    y = _labels(labels)
    K = _num_clients(num_clients, y.size)
    g = generator(seed, "data")
    perm = g.permutation(y.size)
    return Partition.from_indices(np.array_split(perm, K), y)


def shards(labels, num_clients: int, classes_per_client: int = 2, *, seed,
           shards_per_class: int | None = None, max_tries: int = 100) -> Partition:
    """MIFA's equal, class-restricted split: every client holds ``classes_per_client`` classes, one
    equal-size shard of each (MIFA: 100 clients, 2 classes each, on MNIST / CIFAR-10).

    As in the authors' ``generate_equal.py``: every class is cut to the size of the smallest class,
    cut into ``shards_per_class`` equal contiguous shards (default ``ceil(K * classes_per_client / C) + 1``,
    i.e. 21 for MIFA's 100 clients x 2 classes / 10 classes), and each client in turn draws
    ``classes_per_client`` distinct classes uniformly among the classes that still have a shard and
    takes one shard of each. Not all data is used (the spare shards and the cut-off tails).

    Departures from the code: samples are shuffled within each class (data stream) before the cut,
    so the split does not depend on the dataset's storage order; classes are cut to the smallest
    class size (the code cuts to that size minus one); if the greedy draw runs out of distinct
    classes (the code would crash) the whole draw is repeated, at most ``max_tries`` times.
    """
    y = _labels(labels)
    K = _num_clients(num_clients, y.size)
    C = int(y.max()) + 1
    by_class = _class_indices(y, C)
    present = [c for c in range(C) if by_class[c].size > 0]
    m = classes_per_client
    if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, np.integer)) or not 1 <= m <= len(present):
        raise ValueError(f"classes_per_client must be an int in [1, {len(present)}] (the number of classes "
                         f"present in labels), got {classes_per_client!r}")
    need = K * m
    if shards_per_class is None:
        shards_per_class = -(-need // len(present)) + 1
    if shards_per_class * len(present) < need:
        raise ValueError(f"shards_per_class={shards_per_class} gives {shards_per_class * len(present)} shards "
                         f"but {K} clients x {m} classes need {need}; use at least {-(-need // len(present))}")
    n_min = min(by_class[c].size for c in present)
    size = n_min // shards_per_class
    if size < 1:
        raise ValueError(f"the smallest class has {n_min} samples, too few for {shards_per_class} shards per "
                         f"class; use fewer clients or fewer classes_per_client")
    g = generator(seed, "data")
    pools = {c: g.permutation(by_class[c])[: size * shards_per_class].reshape(shards_per_class, size)
             for c in present}
    for _ in range(max_tries):
        left = {c: shards_per_class for c in present}
        out: list[np.ndarray] = []
        for _k in range(K):
            avail = [c for c in present if left[c] > 0]
            if len(avail) < m:
                break
            chosen = g.choice(avail, size=m, replace=False)
            parts = []
            for c in chosen:
                left[c] -= 1
                parts.append(pools[c][left[c]])
            out.append(np.concatenate(parts))
        if len(out) == K:
            return Partition.from_indices(out, y, C)
    raise RuntimeError(f"shards: the greedy class draw ran out of distinct classes {max_tries} times; "
                       f"raise shards_per_class (now {shards_per_class})")


# ----------------------------------------------------------------------------------------------
# Dirichlet family
# ----------------------------------------------------------------------------------------------
def _dirichlet_group(idx_by_class: list[np.ndarray], n_clients: int, alpha: float, g: np.random.Generator,
                     balance: bool, min_size: int, max_tries: int, where: str) -> list[np.ndarray]:
    """Per-class Dirichlet(alpha) proportions over ``n_clients``; resample until min_size is met."""
    total = sum(i.size for i in idx_by_class)
    cap = total / n_clients
    for _ in range(max_tries):
        batches: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        held = np.zeros(n_clients, dtype=np.int64)
        for idx in idx_by_class:
            if idx.size == 0:
                continue
            idx = g.permutation(idx)
            p = g.dirichlet(np.full(n_clients, alpha))
            if balance:
                p = p * (held < cap)
            s = p.sum()
            p = p / s if s > 0 else np.full(n_clients, 1.0 / n_clients)
            for n, piece in enumerate(_split_by_proportions(idx, p)):
                batches[n].append(piece)
                held[n] += piece.size
        if held.min() >= min_size:
            return [g.permutation(np.concatenate(b)) if b else np.zeros(0, np.int64) for b in batches]
    raise RuntimeError(f"{where}: no draw in {max_tries} tries gave every client >= {min_size} samples "
                       f"(alpha={alpha}); lower the minimum size, raise alpha, use balance=True or fewer clients")


def dirichlet(labels, num_clients: int, alpha: float, seed, min_size: int = 0, balance: bool = False,
              *, max_tries: int = 1000) -> Partition:
    """Label-skew split of Yurochkin et al. (2019), as in NIID-Bench and HiCS-FL appendix 6.10.

    For each class i, proportions X_i ~ Dir(alpha 1_K) over the K clients; client k receives
    floor-rounded X_i^(k) N_i / sum_j X_i^(j) of class i's (shuffled) samples, contiguous pieces.
    ``balance=True``: a client stops receiving new classes once it holds >= N/K samples (the
    NIID-Bench / HiCS-FL code; not in the papers' text). The whole draw is repeated until every client
    holds >= ``min_size`` samples (code-side rule; ``min_size=0`` = a single draw). Uses all data.
    """
    y = _labels(labels)
    K = _num_clients(num_clients, y.size)
    a = _positive(alpha, "alpha")
    if int(min_size) < 0 or int(min_size) * K > y.size:
        raise ValueError(f"min_size must be in [0, {y.size // K}] for {y.size} samples over {K} clients, "
                         f"got {min_size!r}")
    C = int(y.max()) + 1
    g = generator(seed, "data")
    out = _dirichlet_group(_class_indices(y, C), K, a, g, bool(balance), int(min_size), max_tries, "dirichlet")
    return Partition.from_indices(out, y, C)


def grouped_dirichlet(labels, num_clients: int, alphas: Sequence[float], seed, balance: bool = True,
                      min_frac: float = 0.2, *, max_tries: int = 1000) -> Partition:
    """HiCS-FL's partition with several concentration parameters (doc 004, appendix 6.10).

    The clients form G = len(alphas) equal groups (clients g*K/G ... (g+1)*K/G - 1 form group g).
    Group g receives its own 1/G slice of every class and splits it with :func:`dirichlet`'s rule
    and alpha_g over its K/G clients. As in the code (``sampling.py::partition_data_various_alpha``):
    balancing (a client stops receiving once it holds >= N_g/(K/G) samples) and resampling of the
    group until every client holds >= int(min_frac * N_g/(K/G)) samples; each client's indices are
    shuffled at the end.

    Departures from the code: the slices are ``np.array_split`` of each class (in storage order), so
    classes of unequal size (MNIST) are cut exactly into G parts and all data is used (the code cuts
    fixed slices of int(N/(G*C)) samples, assuming equal classes). The clients' local *test* splits
    of the code are not produced here.
    """
    y = _labels(labels)
    K = _num_clients(num_clients, y.size)
    alphas = [float(a) for a in np.atleast_1d(np.asarray(alphas, dtype=float))]
    if not alphas:
        raise ValueError("alphas must list at least one concentration parameter")
    for a in alphas:
        if not np.isfinite(a) or a <= 0:
            raise ValueError(f"every alpha must be > 0, got alphas={alphas}")
    G = len(alphas)
    if K % G != 0:
        raise ValueError(f"{G} alpha groups do not divide num_clients={K}; use a multiple of {G} clients "
                         f"(HiCS-FL: 50 clients, 5 alphas)")
    if not (0.0 <= float(min_frac) < 1.0):
        raise ValueError(f"min_frac must lie in [0, 1), got {min_frac!r}")
    m = K // G
    C = int(y.max()) + 1
    g = generator(seed, "data")
    slices = [np.array_split(ix, G) for ix in _class_indices(y, C)]
    out: list[np.ndarray] = []
    for gi, a in enumerate(alphas):
        part = [slices[c][gi] for c in range(C)]
        n_g = sum(p.size for p in part)
        if n_g < m:
            raise ValueError(f"group {gi} has {n_g} samples for {m} clients; use fewer clients")
        min_size = int(float(min_frac) * n_g / m)
        out += _dirichlet_group(part, m, a, g, bool(balance), min_size, max_tries, f"grouped_dirichlet group {gi}")
    return Partition.from_indices(out, y, C)


def fedau_dirichlet(labels, num_clients: int = 250, alpha: float = 0.1, *, seed,
                    shuffle: bool = False) -> Partition:
    """FedAU's partition (IBM/fedau@6e9cce9, ``util/util.py::partition``).

    Each client n draws a label distribution D_n ~ Dir(alpha 1_C); the samples of label i are split
    among the clients in proportion to D_{n,i} / sum_m D_{m,i}: client n gets the contiguous slice
    [round(N_i S_{n-1,i}), round(N_i S_{n,i})) with S_{n,i} the cumulative share. Client sizes end up
    similar while labels are strongly skewed. Uses all data.

    As in the code, each label's samples are taken in storage order; ``shuffle=True`` shuffles them
    first (data stream). Rounding is numpy's round-half-to-even, as in the code.
    """
    y = _labels(labels)
    K = _num_clients(num_clients, y.size)
    a = _positive(alpha, "alpha")
    C = int(y.max()) + 1
    g = generator(seed, "data")
    D = g.dirichlet(np.full(C, a), size=K)               # (K, C)
    share = np.cumsum(D, axis=0) / D.sum(axis=0)        # (K, C) cumulative share per label
    out: list[list[np.ndarray]] = [[] for _ in range(K)]
    for c, idx in enumerate(_class_indices(y, C)):
        if shuffle:
            idx = g.permutation(idx)
        ends = np.round(idx.size * share[:, c]).astype(np.int64)
        ends[-1] = idx.size
        starts = np.concatenate([[0], ends[:-1]])
        for n in range(K):
            out[n].append(idx[starts[n]:ends[n]])
    return Partition.from_indices([np.concatenate(o) for o in out], y, C)


def fedau_participation_probs(counts, alpha: float = 0.1, mean: float = 0.1, p_min: float = 0.02, *, seed,
                              q=None) -> np.ndarray:
    """FedAU's heterogeneous participation probabilities
    (IBM/fedau@6e9cce9, ``util/util.py::data_participation_each_node``).

        p_n = max(p_min, lambda <a_n, q>),   q ~ Dir(alpha 1_C) drawn once,   lambda = mean * C,

    with a_n the *actual* normalized label histogram of client n (``counts[n] / counts[n].sum()``).
    ``q`` may be given explicitly (then ``seed`` is not used for it).

    Random stream: an int seed uses ``rng(seed, "participation-probs")``, not "data": drawing q as
    the first Dirichlet of the "data" stream would reproduce client 0's D_0 of :func:`fedau_dirichlet`
    (same bits). The code draws q right after the partition from the same global stream.

    Unlike the code (which has no upper clip and would crash in ``np.random.binomial``), a value
    p_n > 1 raises ValueError instead of being clipped silently.
    """
    cnt = np.asarray(counts, dtype=float)
    if cnt.ndim != 2 or cnt.shape[0] == 0 or cnt.shape[1] == 0:
        raise ValueError(f"counts must be a (clients, classes) array, got shape {cnt.shape}")
    if (cnt < 0).any():
        raise ValueError("counts must be non-negative")
    sizes = cnt.sum(axis=1)
    if (sizes <= 0).any():
        raise ValueError(f"client {int(np.argmin(sizes))} holds no samples; its label histogram a_n is undefined")
    a_ = _positive(alpha, "alpha")
    mean = float(mean)
    if not (0.0 < mean <= 1.0):
        raise ValueError(f"mean (target mean participation probability) must lie in (0, 1], got {mean!r}")
    p_min = float(p_min)
    if not (0.0 < p_min <= 1.0):
        raise ValueError(f"p_min must lie in (0, 1], got {p_min!r}")
    C = cnt.shape[1]
    if q is None:
        q = generator(seed, "participation-probs").dirichlet(np.full(C, a_))
    else:
        q = np.asarray(q, dtype=float).reshape(-1)
        if q.shape != (C,) or (q < 0).any() or abs(q.sum() - 1.0) > 1e-6:
            raise ValueError(f"q must be a probability vector of length {C}, got {q!r}")
    lam = mean * C
    p = np.maximum(p_min, lam * (cnt / sizes[:, None]) @ q)
    if (p > 1.0).any():
        n = int(np.argmax(p))
        raise ValueError(f"client {n} gets p_n = {p[n]:.4f} > 1 (lambda = mean*C = {lam:g}); "
                         f"lower `mean` (now {mean}) or raise `alpha` (now {a_}) so that every p_n <= 1")
    return p


# ----------------------------------------------------------------------------------------------
# Class-exclusive splits (Fed-CVaR-Avg, doc 003)
# ----------------------------------------------------------------------------------------------
def _even_split(y: np.ndarray, C: int, classes_of_user: list[list[int]], g: np.random.Generator) -> list[np.ndarray]:
    by_class = _class_indices(y, C)
    holders: dict[int, list[int]] = {}
    for u, cl in enumerate(classes_of_user):
        for c in cl:
            holders.setdefault(c, []).append(u)
    parts: list[list[np.ndarray]] = [[] for _ in classes_of_user]
    for c in sorted(holders):
        users = holders[c]
        for u, piece in zip(users, np.array_split(g.permutation(by_class[c]), len(users))):
            parts[u].append(piece)
    return [np.concatenate(p) if p else np.zeros(0, np.int64) for p in parts]


def rare_users(labels, num_users: int = 30, frequent_frac: float = 0.9, pattern_frac: float = 0.9, *, seed,
               rare_classes: Sequence[int] | None = None, stratify: bool = True) -> Partition:
    """Fed-CVaR-Avg's split (doc 003 Sec. 4; risk-aware-FL@f4a32c0, MNIST and Fashion-MNIST scripts):
    rare users own rare classes.

    Users are ordered from most to least frequent (match them with a RAM distribution rho sorted in
    descending order). The first F = round(M K) users are the frequent ones, the last K - F the rare
    ones. The first round(r C) classes ("patterns") are split evenly among the frequent users, the
    remaining classes evenly among the rare users; ``rare_classes`` overrides the latter set.
    K=30: M=0.9, r=0.8 -> users 0-26 hold classes 0-7, users 27-29 classes 8-9 (Fig. 4, Table 1);
    M=0.9, r=0.9 -> users 27-29 hold class 9 only (Fig. 3).

    ``stratify=True`` (default): every class of a group is shuffled (data stream) and cut into
    near-equal parts, one per user of the group, so each user holds the same number of samples of
    every class of its group (up to one). ``stratify=False`` follows the authors' script: the group's
    pooled samples, in random order, are cut into equal contiguous chunks and the remainder
    (< group size samples) is dropped, so class mixes vary slightly between users.
    """
    y = _labels(labels)
    K = _num_clients(num_users, y.size, "num_users")
    M = _open_fraction(frequent_frac, "frequent_frac")
    F = _round_half_up(M * K)
    if not 1 <= F <= K - 1:
        raise ValueError(f"frequent_frac={frequent_frac} gives {F} frequent users out of {K}; "
                         f"need between 1 and {K - 1} so that both groups are non-empty")
    C = int(y.max()) + 1
    if rare_classes is None:
        r = _open_fraction(pattern_frac, "pattern_frac")
        n_common = _round_half_up(r * C)
        if not 1 <= n_common <= C - 1:
            raise ValueError(f"pattern_frac={pattern_frac} gives {n_common} frequent classes out of {C}; "
                             f"need between 1 and {C - 1}")
        rare = list(range(n_common, C))
    else:
        rare = sorted({int(c) for c in rare_classes})
        if not rare or rare[0] < 0 or rare[-1] >= C or len(rare) == C:
            raise ValueError(f"rare_classes must be a non-empty proper subset of the classes 0..{C - 1}, "
                             f"got {list(rare_classes)!r}")
    common = [c for c in range(C) if c not in set(rare)]
    g = generator(seed, "data")
    if stratify:
        assignment = [common] * F + [rare] * (K - F)
        out = _even_split(y, C, assignment, g)
    else:
        out = []
        for cls, n_users in ((common, F), (rare, K - F)):
            pool = g.permutation(np.flatnonzero(np.isin(y, cls)))
            size = pool.size // n_users
            if size < 1:
                raise ValueError(f"classes {cls} have {pool.size} samples for {n_users} users")
            out += list(pool[: size * n_users].reshape(n_users, size))
    return Partition.from_indices(out, y, C)


def user_classes(labels, assignment: Sequence[Sequence[int]], seed) -> Partition:
    """Each user u holds the classes listed in ``assignment[u]``; a class listed by several users is
    shuffled (data stream) and split into near-equal parts among them. Classes nobody lists are left
    out. Doc 003's 2-D examples: ``[[0], [1], [2]]`` (Fig. 2a), ``[[0], [1], [2, 3]]`` (Fig. 2b),
    ``[[0, 1]] * 24 + [[2]] * 6`` (Fig. 2c).

    A class may appear only once in a user's list (the authors' 4-class notebook adds class 2 to user
    2 twice, i.e. duplicates its samples; the paper describes one extra pattern, which we follow).
    """
    y = _labels(labels)
    C = int(y.max()) + 1
    if len(assignment) == 0:
        raise ValueError("assignment must list the classes of at least one user")
    classes_of_user: list[list[int]] = []
    for u, cl in enumerate(assignment):
        cl = [int(c) for c in cl]
        if not cl:
            raise ValueError(f"user {u} has no classes; every user needs at least one")
        if len(set(cl)) != len(cl):
            raise ValueError(f"user {u} lists a class twice ({cl}); list each class once per user")
        bad = [c for c in cl if not 0 <= c < C]
        if bad:
            raise ValueError(f"user {u} lists classes {bad} outside 0..{C - 1}")
        classes_of_user.append(cl)
    by_class = _class_indices(y, C)
    for c in {c for cl in classes_of_user for c in cl}:
        holders = sum(c in cl for cl in classes_of_user)
        if by_class[c].size < holders:
            raise ValueError(f"class {c} has {by_class[c].size} samples for {holders} users")
    out = _even_split(y, C, classes_of_user, generator(seed, "data"))
    return Partition.from_indices(out, y, C)


# ----------------------------------------------------------------------------------------------
# Plot
# ----------------------------------------------------------------------------------------------
def plot_counts(counts, ax=None, title: str | None = None, *, clients_on: str = "x", cmap: str = "Blues",
                annotate: bool | None = None):
    """Heat map of label counts, clients x classes (darker = more samples), like Figs. 7-8 of the
    HiCS-FL paper. ``counts`` may be a :class:`Partition`. ``clients_on="x"`` puts clients on the
    horizontal axis (classes on the vertical), ``"y"`` the other way round. Returns the Axes."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    cnt = counts.counts if isinstance(counts, Partition) else np.asarray(counts)
    if cnt.ndim != 2:
        raise ValueError(f"counts must be a (clients, classes) array, got shape {cnt.shape}")
    if clients_on not in ("x", "y"):
        raise ValueError(f"clients_on must be 'x' or 'y', got {clients_on!r}")
    K, C = cnt.shape
    data = cnt.T if clients_on == "x" else cnt
    if ax is None:
        w, h = (max(4.0, 0.16 * K + 1.5), max(2.5, 0.3 * C + 1)) if clients_on == "x" else \
               (max(3.0, 0.4 * C + 1.5), max(3.0, 0.16 * K + 1))
        _, ax = plt.subplots(figsize=(min(w, 20), min(h, 20)))
    if annotate is None:
        annotate = K * C <= 120
    sns.heatmap(data, ax=ax, cmap=cmap, annot=annotate, fmt="d" if np.issubdtype(cnt.dtype, np.integer) else ".2g",
                cbar_kws={"label": "samples"}, xticklabels="auto", yticklabels="auto")
    ax.set_xlabel("client" if clients_on == "x" else "class")
    ax.set_ylabel("class" if clients_on == "x" else "client")
    if title:
        ax.set_title(title)
    return ax
