r"""The exact laws behind the page on aggregation weights (:mod:`flkit.papers.availability.weights`, document
001): the notes' two aggregators with fixed weights q under independent Bernoulli(:math:`\pi_i`) availability.

Both are :math:`G = \sum_{i\in A} c_i(A)\Delta_i` with the per-round weights :math:`c_i(A) = q_i 1\{i\in
A\}/\sum_{j\in A}q_j` (normalized) or :math:`c_i(A) = q_i 1\{i\in A\}` (unnormalized). The law of the random
vector :math:`c(A)` is computed exactly by enumerating the :math:`2^N` patterns (:func:`weight_law`), with Monte
Carlo beside it; on the quadratics :math:`F_i(w) = \frac12 (w-b_i)^\top A_i (w-b_i)` (diagonal :math:`A_i`, one
local gradient step) the mean and the covariance of the iterates obey an exact recursion
(:func:`expected_sq_distance`), whose limit, stability threshold and the moments of the round's total weight
are here too.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from flkit import participation
from flkit.datasets import QuadraticProblem
from flkit.papers import settings

__all__ = ["MAX_ENUM_CLIENTS", "biased_weights", "effective_weights", "weight_law", "weight_moments",
           "aggregate_moments", "monte_carlo_weights", "monte_carlo_aggregate", "expected_sq_distance",
           "stationary_sq_distance", "eta_max", "total_weight_moments"]

MAX_ENUM_CLIENTS = 16  # 2^16 availability patterns is the most the exact computations enumerate


# ================================================================================================
# exact laws by enumeration, and Monte Carlo beside them
# ================================================================================================
def _check_pi_q(pi, q) -> tuple[list, list]:
    pi, q = list(pi), list(q)
    if len(pi) != len(q) or not pi:
        raise ValueError(f"pi and q must have the same positive length, got {len(pi)} and {len(q)}")
    if len(pi) > MAX_ENUM_CLIENTS:
        raise ValueError(f"exact enumeration takes at most {MAX_ENUM_CLIENTS} clients, got {len(pi)}")
    if any(not (0 < p <= 1) for p in pi):
        raise ValueError(f"availabilities pi must lie in (0, 1], got {pi}")
    if any(not (v > 0) for v in q):
        raise ValueError(f"aggregation weights q must be positive, got {q}")
    return pi, q


def biased_weights(pi, q):
    r"""The notes' :math:`p_i = \pi_i q_i / \sum_j \pi_j q_j` (exact for Fractions)."""
    pi, q = _check_pi_q(pi, q)
    s = sum(a * b for a, b in zip(pi, q))
    return tuple(a * b / s for a, b in zip(pi, q))


def effective_weights(pi, q, *, normalize: bool):
    r"""The rule's expected per-round weights :math:`P_i = \mathbb E[c_i(A)]` by enumerating the
    :math:`2^N` patterns: unnormalized :math:`P_i = \pi_i q_i` (times :math:`\gamma_s`), normalized
    :math:`P_i = \mathbb E[q_i 1\{i\in A\}/\sum_{j\in A}q_j]` (0 on the empty pattern). Plain Python
    arithmetic: exact when pi and q are Fractions."""
    pi, q = _check_pi_q(pi, q)
    n = len(pi)
    out = [0 * pi[0]] * n
    for a in itertools.product((False, True), repeat=n):
        prob = math.prod(p if on else 1 - p for p, on in zip(pi, a))
        tot = sum(v for v, on in zip(q, a) if on) if normalize else 1
        if prob == 0 or tot == 0:
            continue
        out = [o + prob * v / tot if on else o for o, v, on in zip(out, q, a)]
    return tuple(out)


def _weights_of(masks: np.ndarray, q: np.ndarray, normalize: bool) -> np.ndarray:
    c = masks * q
    if normalize:
        s = c.sum(1, keepdims=True)
        c = np.divide(c, s, out=np.zeros_like(c), where=s > 0)
    return c


def weight_law(pi, q, *, normalize: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All 2^N availability patterns: masks (2^N, N) bool, their probabilities (2^N,) and the rule's
    weights c(A) (2^N, N), float64."""
    pi, q = _check_pi_q(pi, q)
    pi, q = np.asarray(pi, dtype=float), np.asarray(q, dtype=float)
    n = pi.size
    masks = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(bool)
    probs = np.where(masks, pi, 1 - pi).prod(1)
    return masks, probs, _weights_of(masks, q, normalize)


def weight_moments(pi, q, *, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """Exact mean P = E[c] (N,) and covariance Cov(c) (N, N) of the rule's per-round weights."""
    _, probs, C = weight_law(pi, q, normalize=normalize)
    P = probs @ C
    D = C - P
    return P, (D * probs[:, None]).T @ D


def aggregate_moments(pi, q, deltas, *, normalize: bool) -> tuple[np.ndarray, float]:
    r"""Exact mean :math:`\mathbb E[G]` (d,) and total variance :math:`\mathbb E\|G - \mathbb E G\|^2` of one
    aggregate :math:`G = \sum_i c_i(A)\Delta_i` of fixed client updates ``deltas`` (N, d)."""
    D = np.asarray(deltas, dtype=float)
    P, cov = weight_moments(pi, q, normalize=normalize)
    return P @ D, float(np.trace(D.T @ cov @ D))


def monte_carlo_weights(pi, q, draws: int, seed: int, *, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """Mean of c(A) (N,) over `draws` Bernoulli(pi) patterns (flkit.participation.bernoulli, stream
    "participation" of `seed`) and its standard error (N,)."""
    settings.positive_int(draws, "draws", 2)
    masks = participation.bernoulli(np.asarray(pi, dtype=float), draws, seed)
    C = _weights_of(masks, np.asarray(q, dtype=float), normalize)
    return C.mean(0), C.std(0, ddof=1) / math.sqrt(draws)


def monte_carlo_aggregate(pi, q, deltas, draws: int, seed: int, *, normalize: bool) -> dict:
    """Monte Carlo of one aggregate: mean (d,) with standard errors (d,), and the total variance with its
    standard error (delta method on the sample of squared deviations)."""
    settings.positive_int(draws, "draws", 2)
    masks = participation.bernoulli(np.asarray(pi, dtype=float), draws, seed)
    G = _weights_of(masks, np.asarray(q, dtype=float), normalize) @ np.asarray(deltas, dtype=float)
    m = G.mean(0)
    sq = ((G - m) ** 2).sum(1)
    return {"mean": m, "mean_se": G.std(0, ddof=1) / math.sqrt(draws), "var": float(sq.mean() * draws / (draws - 1)),
            "var_se": float(sq.std(ddof=1) / math.sqrt(draws))}


# ================================================================================================
# exact moments of the iterates on a quadratic
# ================================================================================================
def _round_law(problem: QuadraticProblem, pi, q, normalize: bool):
    _, probs, C = weight_law(pi, q, normalize=normalize)
    A, b = problem.A.numpy(), problem.b.numpy()
    return probs, C @ A, C @ (A * b)           # H(A) (M, d) diagonal curvature, h(A) (M, d)


def _moments(problem: QuadraticProblem, pi, q, normalize: bool, eta: float):
    """The round law's pattern probabilities, H, E[H], the mean limit m, xi = H m - h, 1 - eta H and
    E[(1 - eta H_a)(1 - eta H_b)], with the checks that the recursion needs."""
    probs, H, h = _round_law(problem, pi, q, normalize)
    EH = probs @ H
    if np.any(EH <= 0):
        raise ValueError("some coordinate gets no curvature in expectation: no client ever contributes")
    m = (probs @ h) / EH
    xi = H * m - h
    one = 1 - eta * H
    E2 = np.einsum("k,ka,kb->ab", probs, one, one)
    if np.max(np.abs(E2)) >= 1:
        raise ValueError(f"eta={eta} is not mean-square stable for this rule (max E[(1 - eta H)^2] >= 1)")
    return probs, H, EH, m, xi, one, E2


def expected_sq_distance(problem: QuadraticProblem, pi, q, *, normalize: bool, eta: float, rounds: int,
                         w0, refs) -> dict[str, np.ndarray]:
    r"""Exact :math:`\mathbb E\|w_k - r\|^2`, k = 0..rounds, for the iterates
    :math:`w_{k+1} = w_k - \eta\sum_i c_i(A_k)\nabla F_i(w_k)` with i.i.d. Bernoulli(pi) patterns.

    With :math:`H = \sum_i c_i A_i` and :math:`h = \sum_i c_i A_i b_i` the update is
    :math:`w_{k+1} = w_k - \eta(H_k w_k - h_k)`; its mean converges to :math:`m` with
    :math:`\mathbb E[H]m = \mathbb E[h]` (the minimizer of :math:`\sum_i P_i F_i`, :math:`P = \mathbb E[c]`).
    For :math:`u_k = w_k - m`, :math:`\xi = Hm - h` and diagonal H:
    :math:`\mathbb E u_{k+1} = (1 - \eta\mathbb E H)\,\mathbb E u_k` and
    :math:`S_{k+1} = \mathbb E[(1-\eta H_a)(1-\eta H_b)]\,S_k - \eta(\mu_a K_{ab} + \mu_b K_{ba}) +
    \eta^2\mathbb E[\xi_a\xi_b]` with :math:`K_{ab} = \mathbb E[(1-\eta H_a)\xi_b]` (the pattern of round k is
    independent of :math:`w_k`). refs: {name: point (d,)}. Returns {name: (rounds + 1,)} and "m"."""
    probs, H, EH, m, xi, one, E2 = _moments(problem, pi, q, normalize, eta)
    Exx = np.einsum("k,ka,kb->ab", probs, xi, xi)
    K = np.einsum("k,ka,kb->ab", probs, one, xi)
    mu = np.asarray(w0, dtype=float) - m
    S = np.outer(mu, mu)
    offs = {k: m - np.asarray(r, dtype=float) for k, r in refs.items()}
    out = {k: np.empty(rounds + 1) for k in refs}
    for t in range(rounds + 1):
        for k, o in offs.items():
            out[k][t] = np.trace(S) + 2 * o @ mu + o @ o
        cross = mu[:, None] * K
        S = E2 * S - eta * (cross + cross.T) + eta ** 2 * Exx
        mu = (1 - eta * EH) * mu
    out["m"] = m
    return out


def stationary_sq_distance(problem: QuadraticProblem, pi, q, *, normalize: bool, eta: float, ref) -> dict:
    r"""The stationary limit: bias2 :math:`= \|m - r\|^2`, variance :math:`= \mathrm{tr}\,\Sigma` with
    :math:`\Sigma_{ab} = \eta^2\mathbb E[\xi_a\xi_b] / (1 - \mathbb E[(1-\eta H_a)(1-\eta H_b)])`, and their sum."""
    probs, H, EH, m, xi, one, E2 = _moments(problem, pi, q, normalize, eta)
    Sigma = eta ** 2 * np.einsum("k,ka,kb->ab", probs, xi, xi) / (1 - E2)
    o = m - np.asarray(ref, dtype=float)
    return {"bias2": float(o @ o), "variance": float(np.trace(Sigma)), "total": float(o @ o + np.trace(Sigma)), "m": m}


def eta_max(problem: QuadraticProblem, pi, q, *, normalize: bool) -> float:
    r"""The largest step of mean-square stability: :math:`\min_a 2\mathbb E[H_a]/\mathbb E[H_a^2]` (where
    :math:`\mathbb E[(1-\eta H_a)^2] < 1` for every coordinate a)."""
    probs, H, _ = _round_law(problem, pi, q, normalize)
    return float((2 * (probs @ H) / (probs @ H ** 2)).min())


def total_weight_moments(pi, q) -> tuple[float, float]:
    r"""Mean and variance of the round's total weight :math:`S_k = \sum_{i\in A_k} q_i` under independent
    Bernoulli(:math:`\pi_i`) availability: :math:`\sum_i\pi_iq_i` and :math:`\sum_i q_i^2\pi_i(1-\pi_i)`."""
    pi, q = np.asarray(pi, dtype=float), np.asarray(q, dtype=float)
    return float((pi * q).sum()), float((q * q * pi * (1 - pi)).sum())
