"""Client participation processes, generated in advance as boolean masks.

A mask is a ``np.ndarray`` of dtype bool and shape ``(rounds, clients)``; ``mask[t, n]`` says whether
client n participates (or is available) in round t. Masks are drawn once, before training, from their
own random stream, so every algorithm of a comparison sees the same clients on the same rounds.

An ``int`` seed uses ``flkit.seeding.rng(seed, "participation")``; :func:`k_among_available`, which
is meant to be applied on top of an availability mask drawn with the same seed, uses the separate
stream ``rng(seed, "selection")`` so that the selection is independent of the availability draws.
A ``np.random.Generator`` may be passed in place of any seed; it is then used (and advanced) as is.

Processes (the authors' code: IBM/fedau@6e9cce9 ``util/util.py::WorkerSampler``; risk-aware-FL@f4a32c0;
hmgxr128/MIFA_code@c1099d9 ``src/trainers/base.py::get_avail_clients``; arodio/CA-Fed@e673587
``activity_simulator.py``; see book/appendix/provenance.md):

* :func:`bernoulli` - independent availability with probability p_n (FedAU, MIFA).
* :func:`markov` - two-state Markov chain per client, FedAU's (p_n, x) or CA-Fed's (pi_n, lambda_n).
* :func:`cyclic` - FedAU's deterministic on/off cycles with a random phase.
* :func:`random_access` - Fed-CVaR-Avg's RAM: exactly one user per round, i.i.d. with probabilities rho.
* :func:`uniform_k` - k clients uniformly without replacement (FedAvg's sampling, HiCS-FL "random").
* :func:`k_among_available` - k clients uniformly among the available ones (doc 001's FedAvg).
* :func:`replay` - validate a given mask or trace.

Helpers: :func:`transition_probs`, :func:`transition_matrix`, :func:`second_eigenvalue`, :func:`stationary`,
:func:`markov_lambda`, :func:`autocorrelation`, :func:`inclusion_probability`.
"""
from __future__ import annotations

import numpy as np

from flkit.seeding import generator

__all__ = [
    "bernoulli",
    "markov",
    "transition_probs",
    "markov_lambda",
    "transition_matrix",
    "second_eigenvalue",
    "autocorrelation",
    "stationary",
    "cyclic",
    "random_access",
    "random_access_indices",
    "uniform_k",
    "k_among_available",
    "replay",
    "inclusion_probability",
]


# ----------------------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------------------
def _int(value, name: str, low: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def _probs(p, name: str = "p") -> np.ndarray:
    """1-D array of per-client probabilities in (0, 1]."""
    a = np.asarray(p, dtype=float)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a 1-D array with one probability per client, got shape {a.shape}")
    bad = ~np.isfinite(a) | (a <= 0) | (a > 1)
    if bad.any():
        n = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}[{n}] = {float(a[n])} is outside (0, 1]; every client needs a probability in (0, 1]")
    return a


def _per_client(v, n: int, name: str) -> np.ndarray:
    a = np.asarray(v, dtype=float)
    if a.ndim == 0:
        return np.full(n, float(a))
    if a.shape != (n,):
        raise ValueError(f"{name} must be a scalar or have one value per client ({n}), got shape {a.shape}")
    return a


# ----------------------------------------------------------------------------------------------
# Bernoulli
# ----------------------------------------------------------------------------------------------
def bernoulli(p, rounds: int, seed) -> np.ndarray:
    """Client n participates in each round independently with probability p_n (FedAU's default
    pattern; MIFA's ``get_avail_clients``). Returns a (rounds, clients) bool mask."""
    p = _probs(p)
    T = _int(rounds, "rounds")
    g = generator(seed, "participation")
    return g.random((T, p.size)) < p


# ----------------------------------------------------------------------------------------------
# Markov
# ----------------------------------------------------------------------------------------------
def transition_probs(p, *, x=None, lam=None) -> tuple[np.ndarray, np.ndarray]:
    """Per-client (P(inactive -> active), P(active -> inactive)) of the two-state chain with
    stationary probability p_n. Give exactly one of

    * ``x`` (FedAU, ``-participation markov-x``): P(i->a) = x, P(a->i) = x (1/p - 1); where the latter
      exceeds 1 both are rescaled as in FedAU's ``WorkerSampler``: P(a->i) = 1, P(i->a) = x / (x(1/p-1)).
      The stationary probability stays p either way.
    * ``lam`` (CA-Fed, the chain's second eigenvalue): P(a->a) = lam + (1-lam) pi, P(i->a) = (1-lam) pi,
      i.e. P(a->i) = (1-lam)(1-pi). Feasible iff max(1 - 1/pi, 1 - 1/(1-pi)) <= lam < 1.

    ``x`` and ``lam`` may be scalars or one value per client.
    """
    p = _probs(p)
    if (x is None) == (lam is None):
        raise ValueError("give exactly one of x (FedAU's max activation probability) or lam (CA-Fed's "
                         "second eigenvalue)")
    if x is not None:
        x = _per_client(x, p.size, "x")
        if (~np.isfinite(x) | (x <= 0) | (x > 1)).any():
            raise ValueError(f"x (probability of the inactive -> active transition) must lie in (0, 1], got {x}")
        to_a = x.copy()
        to_i = x * (1.0 / p - 1.0)
        over = to_i > 1.0
        to_a[over] = x[over] / to_i[over]
        to_i[over] = 1.0
        return to_a, to_i
    lam = _per_client(lam, p.size, "lam")
    to_a = (1.0 - lam) * p
    to_i = (1.0 - lam) * (1.0 - p)
    eps = 1e-12
    bad = ~np.isfinite(lam) | (lam >= 1) | (to_a > 1 + eps) | (to_i > 1 + eps)
    if bad.any():
        n = int(np.flatnonzero(bad)[0])
        with np.errstate(divide="ignore"):
            lo = max(1 - 1 / p[n], 1 - 1 / (1 - p[n]) if p[n] < 1 else -np.inf)
        raise ValueError(f"lam[{n}] = {float(lam[n])} is infeasible for pi = {p[n]}: lambda must lie in "
                         f"[{lo:.4g}, 1) so that both transition probabilities are in [0, 1]")
    return np.clip(to_a, 0, 1), np.clip(to_i, 0, 1)


def markov_lambda(x, p) -> np.ndarray | float:
    """Second eigenvalue (= lag-1 autocorrelation) of FedAU's chain with parameter x:
    1 - x/p, the CA-Fed lambda that gives the same transition matrix (compare FedAU's
    ``util/util.py::WorkerSampler`` with CA-Fed's ``activity_simulator.py``).

    Where FedAU rescales (x(1/p - 1) > 1) the chain's actual eigenvalue is returned,
    1 - P(i->a) - P(a->i) = -p/(1-p), since 1 - x/p would then lie outside [-1, 1].
    """
    scalar = np.ndim(x) == 0 and np.ndim(p) == 0
    a, b = transition_probs(np.atleast_1d(p), x=x)
    lam = 1.0 - a - b
    return float(lam[0]) if scalar else lam


def transition_matrix(p, *, x=None, lam=None) -> np.ndarray:
    """The two-state transition matrix of each client's chain, states ordered (inactive, active):
    P[n, i, j] = P(state j next | state i now), shape (N, 2, 2) (or (2, 2) for a scalar p). Same
    parametrizations as :func:`transition_probs`; with a = P(i->a), b = P(a->i),
    P = [[1 - a, a], [b, 1 - b]], whose eigenvalues are 1 and 1 - a - b (= lam)."""
    scalar = np.ndim(p) == 0
    a, b = transition_probs(np.atleast_1d(p), x=x, lam=lam)
    P = np.stack([np.stack([1 - a, a], -1), np.stack([b, 1 - b], -1)], -2)
    return P[0] if scalar else P


def second_eigenvalue(P) -> np.ndarray | float:
    """lambda_2 of a transition matrix (or a stack (..., n, n)): the eigenvalue of second-largest modulus,
    |lambda_1| >= |lambda_2| >= ... (lambda_1 = 1 for a stochastic matrix). Returned real when its
    imaginary part is below 1e-12 (always for two states), complex otherwise."""
    M = np.asarray(P, dtype=float)
    if M.ndim < 2 or M.shape[-1] != M.shape[-2] or M.shape[-1] < 2:
        raise ValueError(f"P must be a square matrix (or a stack of them) with at least 2 states, got shape {M.shape}")
    ev = np.linalg.eigvals(M)
    order = np.argsort(-np.abs(ev), axis=-1, kind="stable")
    lam2 = np.take_along_axis(ev, order[..., 1:2], -1)[..., 0]
    if np.all(np.abs(lam2.imag) < 1e-12):
        lam2 = lam2.real
    return lam2.item() if lam2.ndim == 0 else lam2


def autocorrelation(mask, lag: int, mean=None) -> np.ndarray:
    """Lag-s autocorrelation of each client's availability indicator X_t (one value per column).

    ``mean=None``: the sample estimate sum_t (X_t - m)(X_{t+s} - m) / sum_t (X_t - m)^2 with m the column
    mean (biased by O(1/T)). ``mean=pi`` (known stationary probabilities): mean_t (X_t - pi)(X_{t+s} - pi)
    / (pi (1 - pi)), unbiased for a chain started in its stationary law. A column that never changes has
    no sample autocorrelation (NaN)."""
    m = replay(mask).astype(float)
    s = _int(lag, "lag", low=0)
    T = m.shape[0]
    if s >= T:
        raise ValueError(f"lag={s} needs a mask with more than {s} rounds, got {T}")
    if mean is None:
        c = m - m.mean(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (c[: T - s] * c[s:]).sum(0) / (c * c).sum(0)
    pi = _per_client(mean, m.shape[1], "mean")
    if ((pi <= 0) | (pi >= 1)).any():
        raise ValueError(f"mean (the stationary probabilities) must lie in (0, 1), got {pi}")
    c = m - pi
    return (c[: T - s] * c[s:]).mean(0) / (pi * (1 - pi))


def stationary(p_to_active, p_to_inactive):
    """Stationary probability of the active state, P(i->a) / (P(i->a) + P(a->i))."""
    a = np.asarray(p_to_active, dtype=float)
    b = np.asarray(p_to_inactive, dtype=float)
    if (a < 0).any() or (a > 1).any() or (b < 0).any() or (b > 1).any():
        raise ValueError("transition probabilities must lie in [0, 1]")
    s = a + b
    if (s <= 0).any():
        raise ValueError("a chain that never moves (both transition probabilities 0) has no unique stationary law")
    out = a / s
    return float(out) if out.ndim == 0 else out


def markov(p, rounds: int, seed, *, x=None, lam=None) -> np.ndarray:
    """Two-state Markov availability, one independent chain per client, stationary probability p_n.

    Parametrized by FedAU's maximum activation probability ``x`` or by CA-Fed's ``lam`` (see
    :func:`transition_probs`; both give the same chain when lam = 1 - x/p). The initial state is
    Bernoulli(p_n), so the chain is stationary from the start; each round the state is updated, then
    read (as FedAU's ``WorkerSampler.sample``), so row 0 is already one step after the initial draw.
    """
    p = _probs(p)
    T = _int(rounds, "rounds")
    to_a, to_i = transition_probs(p, x=x, lam=lam)
    g = generator(seed, "participation")
    state = g.random(p.size) < p
    mask = np.empty((T, p.size), dtype=bool)
    for t in range(T):
        u = g.random(p.size)
        state = np.where(state, u >= to_i, u < to_a)
        mask[t] = state
    return mask


# ----------------------------------------------------------------------------------------------
# Cyclic
# ----------------------------------------------------------------------------------------------
def cyclic(p, rounds: int, seed, period: int = 100) -> np.ndarray:
    """FedAU's cyclic pattern (``-participation cyclic-L``; IBM/fedau@6e9cce9 ``util/util.py::WorkerSampler``).

    Client n alternates an active block of A_n = max(1, round(L p_n)) rounds and an inactive block of
    max(1, L - A_n) rounds. It starts inactive with a random phase phi_n ~ U{0, ..., inactive-1}: rounds
    0..phi_n-1 are inactive, then the first active block begins (phi_n = 0: active from round 0, as in
    the code). Long-run rate A_n / (A_n + inactive_n), = p_n when L p_n is an integer < L.
    """
    p = _probs(p)
    T = _int(rounds, "rounds")
    L = _int(period, "period")
    active = np.maximum(1, np.round(L * p).astype(np.int64))
    inactive = np.maximum(1, L - active)
    g = generator(seed, "participation")
    phase = g.integers(0, inactive)
    t = np.arange(T)[:, None]
    pos = t - phase[None, :]
    return (pos >= 0) & (np.mod(pos, (active + inactive)[None, :]) < active[None, :])


# ----------------------------------------------------------------------------------------------
# Random access model (one user per round)
# ----------------------------------------------------------------------------------------------
def _rho(rho, normalize: bool) -> np.ndarray:
    r = np.asarray(rho, dtype=float)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"rho must be a 1-D array with one probability per user, got shape {r.shape}")
    if (~np.isfinite(r) | (r < 0)).any():
        raise ValueError(f"rho must be finite and non-negative, got {r}")
    s = r.sum()
    if normalize:
        if s <= 0:
            raise ValueError("rho sums to 0; at least one user needs a positive probability")
    elif abs(s - 1.0) > 1e-6:
        raise ValueError(f"rho sums to {s:.8g}, not 1 (tolerance 1e-6); normalize it or pass normalize=True "
                         f"(the 30-user notebook of doc 003 hard-codes a rho that sums to 1.0003)")
    return r / s


def random_access_indices(rho, rounds: int, seed, *, normalize: bool = False) -> np.ndarray:
    """Fed-CVaR-Avg's RAM: the index of the one user selected in each round, drawn i.i.d. with
    probabilities rho (``random.choices(range(K), weights=rho)``). Shape (rounds,), int64."""
    r = _rho(rho, normalize)
    T = _int(rounds, "rounds")
    g = generator(seed, "participation")
    return g.choice(r.size, size=T, p=r).astype(np.int64)


def random_access(rho, rounds: int, seed, *, normalize: bool = False) -> np.ndarray:
    """Mask form of :func:`random_access_indices` (same draws for the same seed): exactly one True per
    row. ``rho`` must sum to 1 within 1e-6 unless ``normalize=True``."""
    idx = random_access_indices(rho, rounds, seed, normalize=normalize)
    mask = np.zeros((idx.size, np.asarray(rho).size), dtype=bool)
    mask[np.arange(idx.size), idx] = True
    return mask


# ----------------------------------------------------------------------------------------------
# Sampling k clients
# ----------------------------------------------------------------------------------------------
def _k_smallest(keys: np.ndarray, k: int) -> np.ndarray:
    kth = np.partition(keys, k - 1, axis=1)[:, k - 1:k]
    return keys <= kth


def uniform_k(num_clients: int, k: int, rounds: int, seed) -> np.ndarray:
    """Each round, k of the num_clients clients uniformly without replacement (exactly k per row)."""
    N = _int(num_clients, "num_clients")
    k = _int(k, "k")
    if k > N:
        raise ValueError(f"k={k} is more than num_clients={N}; sample at most {N} clients")
    T = _int(rounds, "rounds")
    g = generator(seed, "participation")
    return _k_smallest(g.random((T, N)), k)


def k_among_available(available, k: int, seed) -> np.ndarray:
    """Each round, k clients uniformly without replacement among the available ones (all of them when
    fewer than k are available): FedAvg as in the lecture notes of doc 001 ("pick N clients uniformly
    from A_k"). ``available`` is a (rounds, clients) bool mask. An int seed uses the stream
    ``rng(seed, "selection")``, independent of the availability mask drawn with the same seed."""
    avail = replay(available)
    k = _int(k, "k")
    if k > avail.shape[1]:
        raise ValueError(f"k={k} is more than the {avail.shape[1]} clients of the mask")
    g = generator(seed, "selection")
    keys = g.random(avail.shape)
    keys[~avail] = np.inf
    return avail & _k_smallest(keys, k)


def replay(mask, num_clients: int | None = None) -> np.ndarray:
    """Validate a recorded participation trace and return it as a (rounds, clients) bool mask.

    Accepts a 2-D mask of bools or 0/1 numbers, or (with ``num_clients``) a 1-D sequence of the one
    client index per round (a RAM trace). Returns a new array.
    """
    m = np.asarray(mask)
    if m.ndim == 1 and num_clients is not None and m.size > 0 and np.issubdtype(m.dtype, np.integer):
        N = _int(num_clients, "num_clients")
        if m.min() < 0 or m.max() >= N:
            raise ValueError(f"trace holds client indices outside 0..{N - 1}")
        out = np.zeros((m.size, N), dtype=bool)
        out[np.arange(m.size), m] = True
        return out
    if m.ndim != 2 or m.shape[0] == 0 or m.shape[1] == 0:
        raise ValueError(f"a participation mask must have shape (rounds, clients), got {m.shape}")
    if m.dtype != bool:
        if not (np.issubdtype(m.dtype, np.integer) or np.issubdtype(m.dtype, np.floating)):
            raise ValueError(f"mask must hold bools or 0/1 numbers, got dtype {m.dtype}")
        if not np.isin(m, (0, 1)).all():
            raise ValueError("mask must hold only 0/1 (or False/True) values")
    if num_clients is not None and m.shape[1] != num_clients:
        raise ValueError(f"mask has {m.shape[1]} clients, expected {num_clients}")
    return m.astype(bool, copy=True)


def inclusion_probability(p, k: int) -> np.ndarray:
    """Exact probability that each client is among the k selected by :func:`k_among_available`
    when client m is available independently with probability p_m:

        P(n selected) = p_n * sum_j P(J_n = j) * min(1, k / (j + 1)),

    with J_n the number of *other* available clients (Poisson-binomial law, computed by recursion).
    Doc 001's example: p = (1, 1, 1/2), k = 2 -> client 0 is selected with probability
    1/2 * 1 + 1/2 * 2/3 = 5/6 < 1 although it is always available.
    """
    p = np.asarray(p, dtype=float)
    if p.ndim != 1 or p.size == 0 or (~np.isfinite(p) | (p < 0) | (p > 1)).any():
        raise ValueError(f"p must be a 1-D array of availability probabilities in [0, 1], got {p}")
    k = _int(k, "k")
    N = p.size
    weight = np.minimum(1.0, k / np.arange(1, N + 1))  # j other available -> k/(j+1)
    out = np.empty(N)
    for n in range(N):
        dist = np.zeros(N)
        dist[0] = 1.0
        for m in range(N):
            if m != n:
                dist[1:] = dist[1:] * (1 - p[m]) + dist[:-1] * p[m]
                dist[0] *= 1 - p[m]
        out[n] = p[n] * (dist @ weight)
    return out
