r"""Page "Aggregation weights and the biased objective" (document 001, first half of the notes).

The notes' symbols: N clients, client objectives :math:`F_i`, target importance :math:`\alpha_i`
(:math:`\sum_i\alpha_i = 1`), availability probability :math:`\pi_i`, aggregation weight :math:`q_i`,
available set :math:`A_k` in round k. Two aggregators of the local models :math:`w_i`:

* normalized: :math:`w_{k+1} = \sum_{i\in A_k} q_i w_i / \sum_{i\in A_k} q_i` (the model stays where it is
  when :math:`A_k` is empty);
* unnormalized: :math:`w_{k+1} = w_k + \gamma_s\sum_{i\in A_k} q_i (w_i - w_k)`.

In flkit's sign convention (:mod:`flkit.aggregate`: :math:`\Delta_i = w_k - w_i`, server step
:math:`w_{k+1} = w_k - \eta G`) both are the rule :class:`Weighted`: :math:`G = \sum_{i\in A} c_i(A)\Delta_i`
with the per-round weights :math:`c_i(A) = q_i 1\{i\in A\}/\sum_{j\in A}q_j` (normalized, :math:`\eta = 1`)
or :math:`c_i(A) = q_i 1\{i\in A\}` (unnormalized, :math:`\eta = \gamma_s`). Everything on this page
follows from the law of the random vector :math:`c(A)` under independent Bernoulli(:math:`\pi_i`)
availability, computed exactly by enumerating the :math:`2^N` patterns (:func:`weight_law`).

The test problems are the closed-form quadratics :math:`F_i(w) = \frac12 (w-b_i)^\top A_i (w-b_i)` of
:func:`flkit.datasets.quadratic_clients` (diagonal :math:`A_i`) with one local gradient step, so that
:math:`\Delta_i = \nabla F_i(w)` (the server step plays the product of the local and the server step sizes).
The minimizer of :math:`\sum_i a_i F_i` is :math:`(\sum_i a_i A_i)^{-1}\sum_i a_i A_i b_i` (:func:`argmin`),
and because the round's update is linear in w with weights independent of the past, the mean and the
covariance of the iterates obey an exact recursion (:func:`expected_sq_distance`).
"""
from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd
import torch

from flkit import aggregate, fl, participation
from flkit.datasets import QuadraticProblem, quadratic_clients
from flkit.papers import settings
from flkit.seeding import rng
from flkit.tasks import QuadraticTask

__all__ = [
    "PROFILES", "profile", "EXAMPLE", "Weighted", "WeightedQuadratic",
    "fairness_weights", "client_sizes", "argmin", "objective_gap", "biased_weights", "linear_pi",
    "effective_weights", "weight_law", "weight_moments", "aggregate_moments", "monte_carlo_weights",
    "monte_carlo_aggregate", "zscore", "expected_sq_distance", "stationary_sq_distance", "eta_max",
    "fairness_table", "fairness_runs", "floor_rules", "floor_runs", "one_aggregate_table", "spread_table",
    "total_weight_moments", "server_step_table", "common_hessian", "edge_runs", "server_step_checks",
    "worked_example_table", "limit_cases", "limit_runs", "limit_summary", "limit_table", "finding_words",
    "PALETTE", "LIMIT_REFS", "plot_fairness_2d", "plot_spread", "plot_floors", "plot_limits",
]

MAX_ENUM_CLIENTS = 16  # 2^16 availability patterns is the most the exact computations enumerate

# ================================================================================================
# settings
# ================================================================================================
_PROBLEM = dict(n=10, dim=10, seed=0, mu=0.2, L=2.0, heterogeneity=1.0, pi_min=0.1)
PROFILES = {
    "smoke": dict(problem=_PROBLEM, fair=dict(seeds=20, n=10, dim=10, sizes_sigma=1.0),
                  mc_draws=20_000, spread_grid=[0.05, 0.2, 0.5, 1.0],
                  floor=dict(etas=[0.02, 0.1, 0.5], rounds=600, seeds=list(range(6))),
                  limits=dict(eta=0.05, rounds=600, seeds=list(range(20)), pi_const=0.3),
                  server=dict(pi_mins=[1.0, 0.5, 0.1, 0.02], fractions=[0.5, 0.75], rounds=600, seeds=list(range(8)))),
    "paper": dict(problem=_PROBLEM, fair=dict(seeds=200, n=10, dim=10, sizes_sigma=1.0),
                  mc_draws=200_000, spread_grid=[0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0],
                  floor=dict(etas=[0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.7, 1.0], rounds=4000,
                             seeds=list(range(20))),
                  limits=dict(eta=0.02, rounds=3000, seeds=list(range(50)), pi_const=0.3),
                  server=dict(pi_mins=[1.0, 0.7, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02], fractions=[0.25, 0.5, 0.75],
                              rounds=4000, seeds=list(range(40)))),
}


def profile(name: str, **overrides) -> dict:
    """The page's settings under profile `name` ("smoke": seconds, "paper": the page of the book).
    `overrides` replace top-level settings (None keeps the profile's), and every setting is checked before
    any work (`settings.check_profile`: rounds >= 1, seeds non-empty, probabilities in (0, 1], ...)."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    return settings.with_overrides(copy.deepcopy(PROFILES[name]), overrides, f"weights profile {name!r}")


# The notes' worked example: three clients, alpha_i = 1/3, pi ~ (1/2, 1/6, 1), q = (2, 6, 1).
EXAMPLE = dict(pi=(Fraction(1, 2), Fraction(1, 6), Fraction(1)), q=(Fraction(2), Fraction(6), Fraction(1)),
               alpha=(Fraction(1, 3),) * 3)


# ================================================================================================
# the rule (flkit.aggregate's contract)
# ================================================================================================
@dataclass(frozen=True)
class Weighted:
    r"""The notes' two aggregators with fixed weights q (document 001):
    normalized :math:`G = \sum_{n\in S} q_n\Delta^n / \sum_{n\in S} q_n` (:math:`G = 0` when nothing
    arrived; server step :math:`\eta = 1` gives :math:`w_{k+1} = \sum q_i w_i/\sum q_i`), unnormalized
    :math:`G = \sum_{n\in S} q_n\Delta^n` (:math:`\eta = \gamma_s`). A client drawn c_n times counts c_n
    times. Special cases in :mod:`flkit.aggregate`: FedAvg = normalized with q = 1, AverageAll =
    unnormalized with q = 1/N, KnownP = unnormalized with :math:`q_n = 1/(N p_n)`.
    In the CA-Fed code (arodio/CA-Fed at e673587, ``clients_sampler.py``) the "Unbiased" baseline is the
    unnormalized rule with weights :math:`q_k/\pi_k` (``UnbiasedClientsSampler``, lines 197-229) and AdaFed
    with full participation the same weights normalized to sum one (``AdaFedClientsSampler.sample`` and
    ``_normalize_weights``, lines 559-610); there the server then takes an SGD step with momentum."""
    q: tuple
    normalize: bool = True

    def __post_init__(self):
        q = np.asarray(self.q, dtype=float)
        if q.ndim != 1 or q.size == 0 or not np.all(np.isfinite(q)) or not np.all(q > 0):
            raise ValueError(f"Weighted q must be a non-empty sequence of positive finite numbers, got {self.q!r}")
        if not isinstance(self.normalize, bool):
            raise ValueError(f"Weighted normalize must be True or False, got {self.normalize!r}")
        object.__setattr__(self, "q", tuple(float(v) for v in q))

    def init(self, R, N, d, dtype, device):
        if len(self.q) != N:
            raise ValueError(f"Weighted has {len(self.q)} weights q for {N} clients")
        return None

    def apply(self, state, upd: aggregate.Updates):
        q = torch.as_tensor(self.q, dtype=upd.delta.dtype, device=upd.delta.device)[upd.pairs[:, 1]]
        a = (upd.counts.to(upd.delta.dtype) * q).unsqueeze(-1)
        total = upd.sum_clients(a * upd.delta)
        if not self.normalize:
            return total, state
        norm = upd.delta.new_zeros(upd.R).index_add_(0, upd.pairs[:, 0], a[:, 0]).unsqueeze(-1)
        return torch.where(norm > 0, total / norm.clamp(min=1e-300), torch.zeros_like(total)), state


# ================================================================================================
# problems
# ================================================================================================
@dataclass
class WeightedQuadratic(QuadraticTask):
    r""":class:`flkit.tasks.QuadraticTask` (one local gradient step: :math:`\Delta_i = \nabla F_i(w)`) with the
    clients' sample counts ``sizes`` (read by ``FedAvg(weights="size")``) and a target ``alpha``; metrics:
    ``dist2_T`` :math:`= \|w - w_T^\star\|^2` and ``gap_T`` :math:`= F_T(w) - F_T^\star` for
    :math:`F_T = \sum_i\alpha_i F_i` (exact quadratic forms)."""
    sizes: tuple | None = None
    alpha: tuple | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.local_steps != 1 or self.lam != 0:
            raise ValueError(f"WeightedQuadratic is the convex problem with one local step (the page's exact "
                             f"formulas need Delta_i = grad F_i); got local_steps={self.local_steps}, lam={self.lam}")
        n = self.problem.A.shape[0]
        a = np.full(n, 1.0 / n) if self.alpha is None else np.asarray(self.alpha, dtype=float)
        if a.shape != (n,) or np.any(a < 0) or abs(a.sum() - 1) > 1e-12:
            raise ValueError(f"alpha must be {n} non-negative weights summing to 1, got {self.alpha!r}")
        if self.sizes is not None and (len(self.sizes) != n or min(self.sizes) <= 0):
            raise ValueError(f"sizes must be {n} positive sample counts, got {self.sizes!r}")
        self.alpha = tuple(a.tolist())
        self.w_T = argmin(self.problem, a)
        self._H_T = (torch.as_tensor(a)[:, None] * self.problem.A).sum(0)

    def metrics(self, w):
        e = w - self.w_T
        return {"dist2_T": (e * e).sum(-1), "gap_T": 0.5 * (self._H_T * e * e).sum(-1)}


def client_sizes(n: int, seed: int, sigma: float = 1.0, median: int = 100) -> np.ndarray:
    """Unequal sample counts |S_i|: round(median * exp(sigma Z)), at least 1 (rng(seed, "data/sizes"))."""
    if n < 1 or sigma < 0 or median < 1:
        raise ValueError(f"need n >= 1, sigma >= 0, median >= 1; got {n}, {sigma}, {median}")
    z = rng(seed, "data/sizes").standard_normal(n)
    return np.maximum(1, np.round(median * np.exp(sigma * z))).astype(int)


def fairness_weights(sizes) -> dict[str, np.ndarray]:
    r"""The notes' two targets: per-client :math:`\alpha_i = 1/N`, per-sample :math:`\alpha_i = |S_i|/\sum_j|S_j|`."""
    s = np.asarray(sizes, dtype=float)
    if s.ndim != 1 or s.size == 0 or np.any(s <= 0):
        raise ValueError(f"sizes must be positive sample counts, got {sizes!r}")
    return {"client": np.full(s.size, 1.0 / s.size), "sample": s / s.sum()}


def argmin(problem: QuadraticProblem, weights) -> torch.Tensor:
    r"""Closed-form minimizer of :math:`\sum_i a_i F_i`: :math:`(\sum_i a_i A_i)^{-1}\sum_i a_i A_i b_i`
    (A_i diagonal); the scale of a does not matter."""
    a = torch.as_tensor(np.asarray(weights, dtype=float), dtype=problem.A.dtype)
    if a.shape != (problem.A.shape[0],) or bool((a < 0).any()) or float(a.sum()) <= 0:
        raise ValueError(f"weights must be {problem.A.shape[0]} non-negative numbers, not all zero; got {weights!r}")
    H = (a[:, None] * problem.A).sum(0)
    return (a[:, None] * problem.A * problem.b).sum(0) / H


def objective_gap(problem: QuadraticProblem, weights, w) -> torch.Tensor:
    r""":math:`F_a(w) - \min F_a` for :math:`F_a = \sum_i a_i F_i` with a normalized to sum 1 (exact
    quadratic form)."""
    a = np.asarray(weights, dtype=float)
    a = torch.as_tensor(a / a.sum(), dtype=problem.A.dtype)
    e = torch.as_tensor(w, dtype=problem.A.dtype) - argmin(problem, a)
    return 0.5 * ((a[:, None] * problem.A).sum(0) * e * e).sum(-1)


def linear_pi(n: int, pi_min: float) -> np.ndarray:
    r"""Availabilities spread evenly: :math:`\pi_i` = linspace(pi_min, 1, n)."""
    if not 0 < pi_min <= 1 or n < 1:
        raise ValueError(f"need 0 < pi_min <= 1 and n >= 1, got pi_min={pi_min}, n={n}")
    return np.linspace(pi_min, 1.0, n) if n > 1 else np.array([1.0])


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


# ================================================================================================
# item 1: per-client vs per-sample fairness
# ================================================================================================
def fairness_table(n: int, dim: int, seeds: int, sizes_sigma: float, mu: float, L: float,
                   heterogeneity: float) -> pd.DataFrame:
    r"""For data seeds 0..seeds-1: distance between the per-client and per-sample minimizers, the spread
    of the clients' optima, the total-variation distance between the two alphas, and each objective's
    excess at the other's minimizer. Closed forms only."""
    settings.check_profile(dict(seeds=seeds, n=n, dim=dim, sizes_sigma=sizes_sigma, mu=mu, L=L,
                                heterogeneity=heterogeneity), "fairness_table")
    rows = []
    for s in range(seeds):
        prob = quadratic_clients(n, dim, s, heterogeneity=heterogeneity, mu=mu, L=L)
        al = fairness_weights(client_sizes(n, s, sizes_sigma))
        wc, ws = argmin(prob, al["client"]), argmin(prob, al["sample"])
        rows.append({"seed": s, "dist": float((wc - ws).norm()),
                     "spread": float((prob.b - prob.b.mean(0)).norm(dim=1).mean()),
                     "tv": 0.5 * float(np.abs(al["client"] - al["sample"]).sum()),
                     "excess_client_at_sample": float(objective_gap(prob, al["client"], ws)),
                     "excess_sample_at_client": float(objective_gap(prob, al["sample"], wc))})
    return pd.DataFrame(rows)


def fairness_runs(task: WeightedQuadratic, eta: float, rounds: int) -> pd.DataFrame:
    """Full participation through flkit.fl.run: FedAvg (uniform) and FedAvg (size); final distance of
    each to both closed-form minimizers."""
    algs = {"FedAvg, uniform": fl.Algorithm(aggregate.FedAvg("uniform"), lr=eta),
            "FedAvg, size": fl.Algorithm(aggregate.FedAvg("size"), lr=eta)}
    res = fl.run(task, algs, seeds=[0], rounds=rounds, every=rounds, diverge_factor=None)
    al = fairness_weights(task.sizes)
    ref = {"client": argmin(task.problem, al["client"]), "sample": argmin(task.problem, al["sample"])}
    rows = [{"method": a, "target": k, "round": rounds, "metric": "dist", "value": float((res.final_w[r] - v).norm())}
            for r, a in enumerate(algs) for k, v in ref.items()]
    return pd.DataFrame(rows)


# ================================================================================================
# item 2: error floors with constant steps (flkit.fl.run)
# ================================================================================================
def floor_rules(pi, alpha) -> dict[str, tuple[object, np.ndarray, bool]]:
    r"""The compared rules: name -> (flkit aggregator, the notes' q, normalized?). Unnormalized with
    :math:`q = \alpha/\pi` is flkit's KnownP (:math:`\alpha = 1/N`); normalized with q = 1 is FedAvg."""
    pi, alpha = np.asarray(pi, dtype=float), np.asarray(alpha, dtype=float)
    n = pi.size
    if not np.allclose(alpha, 1.0 / n):
        raise ValueError("floor_rules maps to KnownP and FedAvg, which target alpha = 1/N")
    return {"unnormalized, q = alpha/pi": (aggregate.KnownP(), alpha / pi, False),
            "normalized, q = alpha/pi": (Weighted(tuple(alpha / pi), True), alpha / pi, True),
            "normalized, q = 1 (FedAvg)": (aggregate.FedAvg(), np.ones(n), True)}


def floor_runs(task: WeightedQuadratic, pi, etas, rounds: int, seeds) -> pd.DataFrame:
    """Every rule of :func:`floor_rules` at every step size, started at the target minimizer, Bernoulli(pi)
    availability: the mean of dist2_T over the second half of the rounds (one value per run), the exact
    expectation of that mean, and the exact stationary bias2 / variance."""
    settings.positive(etas, "etas")
    settings.probabilities(pi, "pi")
    rounds, seeds = settings.positive_int(rounds, "rounds", 2), settings.seeds(seeds)
    rules = floor_rules(pi, task.alpha)
    algs = {f"{name} | eta={eta}": fl.Algorithm(rule, lr=eta) for eta in etas for name, (rule, _, _) in rules.items()}
    avail = lambda s: participation.bernoulli(pi, rounds, s)  # noqa: E731
    res = fl.run(task, algs, seeds=list(seeds), rounds=rounds, availability=avail, p=pi, w0=task.w_T,
                 every=1, diverge_factor=None)
    tail = res.rounds > rounds // 2
    rows = []
    w_T = task.w_T.numpy()
    for eta in etas:
        for name, (_, q, norm) in rules.items():
            v = res.values[f"{name} | eta={eta}"]["dist2_T"][tail].mean(0)
            ex = expected_sq_distance(task.problem, pi, q, normalize=norm, eta=eta, rounds=rounds, w0=w_T,
                                      refs={"T": w_T})["T"][res.rounds[tail]].mean()
            st = stationary_sq_distance(task.problem, pi, q, normalize=norm, eta=eta, ref=w_T)
            base = dict(method=name, eta=eta, round=rounds)
            rows += [dict(base, seed=int(s), metric="tail_dist2", value=float(x)) for s, x in zip(seeds, v)]
            rows += [dict(base, seed=-1, metric=k, value=float(x)) for k, x in
                     (("exact_tail_dist2", ex), ("stationary_bias2", st["bias2"]), ("stationary_variance", st["variance"]))]
    return pd.DataFrame(rows)


# ================================================================================================
# item 4: F_B vs F_T in the notes' three cases
# ================================================================================================
def limit_cases(n: int, sizes, pi_min: float, pi_const: float) -> dict[str, dict]:
    r"""The notes' three cases, each with two choices of q (rescaled so that :math:`\sum_i\pi_i q_i = 1`,
    the mean step of the unnormalized rule; the normalized rule ignores the scale). Target
    :math:`\alpha = 1/N`; the "other" q is per-sample, :math:`q \propto |S_i|`."""
    alpha = np.full(n, 1.0 / n)
    s = np.asarray(sizes, dtype=float)
    spread = linear_pi(n, pi_min)
    cases = {"pi_i = 1": (np.ones(n), {"q = alpha": alpha, "q ~ |S_i|": s}),
             f"pi_i = {pi_const}": (np.full(n, pi_const), {"q = alpha": alpha, "q ~ |S_i|": s}),
             "general pi": (spread, {"q = alpha": alpha, "q = alpha/pi": alpha / spread})}
    out = {}
    for case, (pi, qs) in cases.items():
        for qname, q in qs.items():
            out[f"{case} | {qname}"] = dict(case=case, q_name=qname, pi=pi, q=q / (pi @ q))
    return out


def limit_runs(task: WeightedQuadratic, cases: dict, eta: float, rounds: int, seeds) -> pd.DataFrame:
    """Each (case, q) with both rules through flkit.fl.run (availability Bernoulli(pi) of the case, the
    runs started at w = 0): squared distance of the final iterate to argmin F_T, to argmin F_B (the notes'
    p = pi q / sum pi q) and to argmin of the rule's exact effective weights, per seed, with the exact
    expectations beside them."""
    settings.positive(eta, "eta")
    rounds, seeds = settings.positive_int(rounds, "rounds"), settings.seeds(seeds)
    rows = []
    w_T = task.w_T.numpy()
    w0 = np.zeros(task.dim)
    for key, c in cases.items():
        pi, q = c["pi"], c["q"]
        algs = {f"{key} | {'normalized' if norm else 'unnormalized'}": (fl.Algorithm(Weighted(tuple(q), norm), lr=eta), norm)
                for norm in (False, True)}
        avail = lambda s, pi=pi: participation.bernoulli(pi, rounds, s)  # noqa: E731
        res = fl.run(task, {k: a for k, (a, _) in algs.items()}, seeds=list(seeds), rounds=rounds,
                     availability=avail, every=rounds, diverge_factor=None)
        w_B = argmin(task.problem, biased_weights(pi, q)).numpy()
        for r0, (name, (_, norm)) in enumerate(algs.items()):
            P = np.asarray(effective_weights(pi, q, normalize=norm))
            w_P = argmin(task.problem, P).numpy()
            refs = {"F_T": w_T, "F_B": w_B, "effective": w_P}
            ex = expected_sq_distance(task.problem, pi, q, normalize=norm, eta=eta, rounds=rounds, w0=w0, refs=refs)
            W = res.final_w[r0 * len(seeds):(r0 + 1) * len(seeds)].numpy()
            base = dict(case=c["case"], q_name=c["q_name"], rule="normalized" if norm else "unnormalized", round=rounds)
            for ref, v in refs.items():
                rows += [dict(base, seed=int(s), metric=f"dist2_{ref}", value=float(((W[i] - v) ** 2).sum()))
                         for i, s in enumerate(seeds)]
                rows.append(dict(base, seed=-1, metric=f"exact_dist2_{ref}", value=float(ex[ref][-1])))
            rows.append(dict(base, seed=-1, metric="dist2_FB_FT", value=float(((w_B - w_T) ** 2).sum())))
            rows.append(dict(base, seed=-1, metric="dist2_effective_FT", value=float(((w_P - w_T) ** 2).sum())))
            rows.append(dict(base, seed=-1, metric="dist2_effective_FB", value=float(((w_P - w_B) ** 2).sum())))
    return pd.DataFrame(rows)


# ================================================================================================
# items 2 and 3: one aggregate, exact and Monte Carlo
# ================================================================================================
def _points(task: WeightedQuadratic) -> dict[str, np.ndarray]:
    return {"w = 0": np.zeros(task.dim), "w = w_T*": task.w_T.numpy()}


def one_aggregate_table(task: WeightedQuadratic, pi, draws: int, seed: int) -> pd.DataFrame:
    r"""One aggregate :math:`G = \sum_i c_i(A)\nabla F_i(w)` of each rule of :func:`floor_rules` at w = 0 and
    at :math:`w = w_T^\star`: exact bias :math:`\|\mathbb E G - \nabla F_T(w)\|^2` and variance
    :math:`\mathbb E\|G - \mathbb E G\|^2` by enumeration; Monte Carlo mean and variance with standard errors
    beside them (max |z| of the mean over coordinates; z of the variance)."""
    settings.positive_int(draws, "draws", 2)
    settings.probabilities(pi, "pi")
    rows = []
    for point, w in _points(task).items():
        D = task.problem.client_grads(torch.as_tensor(w)).numpy()
        g = np.asarray(task.alpha) @ D
        for name, (_, q, norm) in floor_rules(pi, task.alpha).items():
            mean, var = aggregate_moments(pi, q, D, normalize=norm)
            mc = monte_carlo_aggregate(pi, q, D, draws, seed, normalize=norm)
            z = [zscore(a, b, c) for a, b, c in zip(mc["mean"], mean, mc["mean_se"])]
            cos = float(mean @ g / (np.linalg.norm(mean) * np.linalg.norm(g))) if g @ g > 1e-20 else math.nan
            rows.append({"point": point, "rule": name, "|grad F_T|^2": float(g @ g), "cos(E G, grad F_T)": cos,
                         "bias2 (exact)": float(((mean - g) ** 2).sum()), "variance (exact)": var,
                         "variance (MC)": mc["var"], "variance s.e.": mc["var_se"],
                         "max |z|, mean": float(np.max(np.abs(z))), "z, variance": zscore(mc["var"], var, mc["var_se"])})
    return pd.DataFrame(rows)


def spread_table(task: WeightedQuadratic, pi_mins) -> pd.DataFrame:
    """Exact bias2 and variance of one aggregate (as :func:`one_aggregate_table`) when the availabilities
    are linear_pi(N, pi_min), for each pi_min."""
    settings.probabilities(pi_mins, "pi_mins")
    rows = []
    for pm in pi_mins:
        pi = linear_pi(task.n, pm)
        for point, w in _points(task).items():
            D = task.problem.client_grads(torch.as_tensor(w)).numpy()
            g = np.asarray(task.alpha) @ D
            for name, (_, q, norm) in floor_rules(pi, task.alpha).items():
                mean, var = aggregate_moments(pi, q, D, normalize=norm)
                rows.append({"pi_min": pm, "point": point, "rule": name, "grad2": float(g @ g),
                             "bias2": float(((mean - g) ** 2).sum()), "variance": var})
    return pd.DataFrame(rows)


def zscore(estimate, exact, se, tol: float = 1e-12) -> float:
    """(estimate - exact) / se; a degenerate estimate (se <= tol, e.g. a client available in every
    round) gives 0 when it equals the exact value to `tol`, else inf."""
    diff = float(estimate) - float(exact)
    if float(se) > tol:
        return diff / float(se)
    return 0.0 if abs(diff) <= tol else math.inf


def _frac(x) -> str:
    x = Fraction(x)
    return f"{x.numerator}" if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def worked_example_table(draws: int, seed: int) -> pd.DataFrame:
    r"""The notes' three clients: the notes' :math:`p_i = \pi_i q_i/\sum_j\pi_j q_j`, the unnormalized rule's
    expected weights :math:`\pi_i q_i` (per unit :math:`\gamma_s`) for q = (2, 6, 1) and for
    :math:`q = \alpha/\pi`, and the normalized rule's exact effective weights (the same for both q: the
    normalized rule does not see the scale of q), each with its Monte Carlo mean and standard error."""
    settings.positive_int(draws, "draws", 2)
    pi, q, alpha = EXAMPLE["pi"], EXAMPLE["q"], EXAMPLE["alpha"]
    q_ab = tuple(a / p for a, p in zip(alpha, pi))
    exact = {"notes' p_i": biased_weights(pi, q),
             "unnormalized, q = (2, 6, 1)": effective_weights(pi, q, normalize=False),
             "unnormalized, q = alpha/pi": effective_weights(pi, q_ab, normalize=False),
             "normalized, q = (2, 6, 1)": effective_weights(pi, q, normalize=True),
             "normalized, q = alpha/pi": effective_weights(pi, q_ab, normalize=True)}
    rows = []
    for name, ex in exact.items():
        mc = (None if name.startswith("notes") else
              monte_carlo_weights(pi, q_ab if "alpha" in name else q, draws, seed, normalize=name.startswith("normalized")))
        for i in range(3):
            row = {"quantity": name, "client": i + 1, "pi_i": _frac(pi[i]), "alpha_i": _frac(alpha[i]),
                   "exact": _frac(ex[i]), "exact (decimal)": float(ex[i])}
            if mc is not None:
                row.update({"Monte Carlo": float(mc[0][i]), "s.e.": float(mc[1][i]),
                            "z": zscore(mc[0][i], float(ex[i]), mc[1][i])})
            rows.append(row)
    return pd.DataFrame(rows)


# ================================================================================================
# figure helpers
# ================================================================================================
PALETTE = {"unnormalized, q = alpha/pi": "#1b7837", "normalized, q = alpha/pi": "#2166ac",
           "normalized, q = 1 (FedAvg)": "#b2182b"}


def plot_fairness_2d(ax, problem: QuadraticProblem, sizes) -> dict[str, np.ndarray]:
    """Clients' optima b_i (marker area ~ |S_i|), the two minimizers and level sets of both objectives
    (d = 2). Returns the two minimizers."""
    if problem.dim != 2:
        raise ValueError(f"plot_fairness_2d draws d = 2 problems, got d = {problem.dim}")
    al = fairness_weights(sizes)
    b = problem.b.numpy()
    s = np.asarray(sizes, dtype=float)
    ax.scatter(b[:, 0], b[:, 1], s=300 * s / s.max(), color="0.6", edgecolor="k", zorder=3,
               label=r"client optima $b_i$ (area $\propto |S_i|$)")
    lo, hi = b.min(0) - 0.8, b.max(0) + 0.8
    X, Y = np.meshgrid(np.linspace(lo[0], hi[0], 200), np.linspace(lo[1], hi[1], 200))
    grid = torch.as_tensor(np.stack([X, Y], -1))
    out = {}
    for (key, a), col, lab in zip(al.items(), ("#2166ac", "#b2182b"),
                                  (r"per-client $\alpha_i = 1/N$", r"per-sample $\alpha_i = |S_i|/\sum_j |S_j|$")):
        w = argmin(problem, a).numpy()
        out[key] = w
        Z = objective_gap(problem, a, grid).numpy()
        ax.contour(X, Y, Z, levels=np.quantile(Z, [0.02, 0.08, 0.2]), colors=col, linewidths=0.8, alpha=0.8)
        ax.plot(*w, "*", ms=16, color=col, markeredgecolor="k", zorder=4, label=f"argmin, {lab}")
    ax.set(xlabel="$w_1$", ylabel="$w_2$", aspect="equal")
    return out


def plot_floors(axes, df: pd.DataFrame, task: WeightedQuadratic, pi) -> None:
    """Left: the floor (mean of ||w_k - w_T*||^2 over the second half), measured (mean over seeds, +-3 s.e.)
    and exact (lines); right: the exact stationary variance component alone, up to each rule's
    mean-square stability limit (dotted lines: the exact squared bias)."""
    meas = df[df["metric"] == "tail_dist2"].groupby(["method", "eta"])["value"].agg(["mean", "std", "count"])
    w_T = task.w_T.numpy()
    for name, (_, q, norm) in floor_rules(pi, task.alpha).items():
        col = PALETTE[name]
        m = meas.loc[name]
        axes[0].errorbar(m.index, m["mean"], yerr=3 * m["std"] / np.sqrt(m["count"]), fmt="o", ms=4, color=col,
                         label=rule_label(name))
        emax = eta_max(task.problem, pi, q, normalize=norm)
        etas = np.geomspace(min(m.index), 0.97 * emax, 60)
        st = [stationary_sq_distance(task.problem, pi, q, normalize=norm, eta=e, ref=w_T) for e in etas]
        axes[0].plot(etas, [s["total"] for s in st], "-", color=col, lw=1)
        axes[1].plot(etas, [s["variance"] for s in st], "-", color=col, label=f"stable for $\\eta$ < {emax:.2f}")
        if st[0]["bias2"] > 1e-20:
            axes[0].axhline(st[0]["bias2"], ls=":", color=col, lw=1)
    axes[0].set(xscale="log", yscale="log", xlabel=r"server step size $\eta$",
                ylabel=r"floor: mean $\|w_k - w_T^\star\|^2$, 2nd half")
    axes[1].set(xscale="log", yscale="log", xlabel=r"server step size $\eta$",
                ylabel=r"stationary variance tr $\Sigma$ (exact)")
    # the rules' legend below the left panel (inside it hid the points at small eta and the dotted bias line);
    # the right panel's stability limits in its empty upper left corner
    axes[0].legend(loc="upper center", bbox_to_anchor=(0.5, -0.2))
    axes[1].legend(loc="upper left")


def eta_max(problem: QuadraticProblem, pi, q, *, normalize: bool) -> float:
    r"""The largest step of mean-square stability: :math:`\min_a 2\mathbb E[H_a]/\mathbb E[H_a^2]` (where
    :math:`\mathbb E[(1-\eta H_a)^2] < 1` for every coordinate a)."""
    probs, H, _ = _round_law(problem, pi, q, normalize)
    return float((2 * (probs @ H) / (probs @ H ** 2)).min())


# ================================================================================================
# "variable # of clients, quite noisy => gamma_s small" (the unnormalized rule's server step)
# ================================================================================================
def total_weight_moments(pi, q) -> tuple[float, float]:
    r"""Mean and variance of the round's total weight :math:`S_k = \sum_{i\in A_k} q_i` under independent
    Bernoulli(:math:`\pi_i`) availability: :math:`\sum_i\pi_iq_i` and :math:`\sum_i q_i^2\pi_i(1-\pi_i)`."""
    pi, q = np.asarray(pi, dtype=float), np.asarray(q, dtype=float)
    return float((pi * q).sum()), float((q * q * pi * (1 - pi)).sum())


def common_hessian(problem: QuadraticProblem) -> QuadraticProblem:
    r"""The same clients with one Hessian for all, the mean of theirs (:math:`A_i = \bar A`), and optima kept:
    the curvature of a round is then :math:`S_k\bar A`, random only through the total weight."""
    A = problem.A.mean(0, keepdim=True).expand_as(problem.A).clone()
    return QuadraticProblem(A, problem.b.clone())


def server_step_table(problem: QuadraticProblem, n: int, pi_mins) -> pd.DataFrame:
    r"""For availabilities spread evenly from each :math:`\pi_{\min}` to 1 and :math:`q = \alpha/\pi`
    (:math:`\alpha_i = 1/N`; then :math:`\mathbb E[S] = 1`): the moments of the total weight S, the largest
    mean-square-stable server step of the unnormalized rule (:func:`eta_max`, exact by enumeration) on the problem
    and on its common-Hessian version, the limit :math:`2/\lambda_{\max}(\sum_i\alpha_iA_i)` of the same expected
    update with the weights fixed (every client every round with weight :math:`\alpha_i`: no variable number), and
    the closed form of the ratio on the common-Hessian problem, :math:`\mathbb E[S]^2/\mathbb E[S^2]`."""
    alpha = np.full(n, 1.0 / n)
    A = problem.A.numpy()
    Ac = common_hessian(problem)
    rows = []
    for pm in pi_mins:
        pi = linear_pi(n, pm)
        q = alpha / pi
        ES, VS = total_weight_moments(pi, q)
        fixed = 2 / float((alpha[:, None] * A).sum(0).max())
        g = eta_max(problem, pi, q, normalize=False)
        gc = eta_max(Ac, pi, q, normalize=False)
        rows.append(dict(pi_min=pm, ES=ES, VarS=VS, cv2=VS / ES ** 2, gamma_max=g, gamma_fixed=fixed, ratio=g / fixed,
                         gamma_max_common=gc, ratio_common=gc / fixed, ratio_closed=ES ** 2 / (ES ** 2 + VS),
                         gamma_max_normalized=eta_max(problem, pi, q, normalize=True)))
    return pd.DataFrame(rows)


def edge_runs(task: WeightedQuadratic, pi, fractions, rounds: int, seeds) -> pd.DataFrame:
    r"""The unnormalized rule with :math:`q = \alpha/\pi` (flkit's ``KnownP``) through ``flkit.fl.run`` at server
    steps :math:`\gamma_s = f\,\gamma_s^{\max}` (f in `fractions`, :math:`\gamma_s^{\max}` its mean-square
    limit), started at :math:`w_T^\star`: per run the mean of :math:`\|w_k - w_T^\star\|^2` over the second half,
    and the exact expectation of that mean (:func:`expected_sq_distance`)."""
    pi = settings.probabilities(pi, "pi")
    rounds, seeds = settings.positive_int(rounds, "rounds", 2), settings.seeds(seeds)
    q = np.asarray(task.alpha) / pi
    gmax = eta_max(task.problem, pi, q, normalize=False)
    etas = [float(f) * gmax for f in fractions]
    if any(not 0 < f < 1 for f in fractions):
        raise ValueError(f"fractions of the stability limit must lie in (0, 1), got {fractions!r}")
    algs = {f"f={f}": fl.Algorithm(aggregate.KnownP(), lr=e) for f, e in zip(fractions, etas)}
    res = fl.run(task, algs, seeds=list(seeds), rounds=rounds, availability=lambda s: participation.bernoulli(pi, rounds, s),
                 p=pi, w0=task.w_T, every=1, diverge_factor=None)
    tail = res.rounds > rounds // 2
    w_T = task.w_T.numpy()
    rows = []
    for f, e in zip(fractions, etas):
        v = res.values[f"f={f}"]["dist2_T"][tail].mean(0)
        ex = expected_sq_distance(task.problem, pi, q, normalize=False, eta=e, rounds=rounds, w0=w_T,
                                  refs={"T": w_T})["T"][res.rounds[tail]].mean()
        rows += [dict(fraction=f, eta=e, seed=int(s), round=rounds, metric="tail_dist2", value=float(x))
                 for s, x in zip(seeds, v)]
        rows.append(dict(fraction=f, eta=e, seed=-1, round=rounds, metric="exact_tail_dist2", value=float(ex)))
    return pd.DataFrame(rows)


def server_step_checks(tab: pd.DataFrame, edge: pd.DataFrame) -> list[tuple[bool, str, float, float]]:
    """The criteria of the claim 'variable number of clients, quite noisy, so gamma_s small' as (ok, text, ours,
    reference): (1) the unnormalized rule's limit is below the fixed-weights one at every pi_min < 1 and equal at
    pi_min = 1; (2) it falls as pi_min falls; (3) on the common-Hessian problem the ratio is E[S]^2/E[S^2] (1e-12);
    (4) through fl.run the floors at fractions of the limit match the exact recursion (|z| <= 4)."""
    t = tab.sort_values("pi_min", ascending=False)
    var = t[t["pi_min"] < 1]
    one = t[t["pi_min"] == 1]
    below = bool((var["ratio"] < 1 - 1e-9).all()) and bool((np.abs(one["ratio"] - 1) <= 1e-9).all())
    mono = bool((np.diff(t["gamma_max"].to_numpy()) <= 1e-12).all())
    dev = float(np.abs(t["ratio_common"] - t["ratio_closed"]).max())
    m = edge[edge["metric"] == "tail_dist2"].groupby("fraction")["value"].agg(["mean", "std", "count"])
    ex = edge[edge["metric"] == "exact_tail_dist2"].set_index("fraction")["value"]
    z = float(((m["mean"] - ex) / (m["std"] / np.sqrt(m["count"]))).abs().max())
    lo = float(var["ratio"].min()) if len(var) else float("nan")
    return [
        (below, f"with a variable number of available clients the largest mean-square-stable gamma_s of the unnormalized "
                f"rule is below that of the same expected update with fixed weights, at every pi_min < 1 (smallest "
                f"ratio {lo:.3f}), and equal at pi_min = 1", lo, 1.0),
        (mono, "the largest stable gamma_s falls as the availabilities spread (pi_min from 1 down to "
               f"{t['pi_min'].min():g})", float(t["gamma_max"].iloc[-1]), float(t["gamma_max"].iloc[0])),
        (dev <= 1e-12, "with one Hessian for all clients the ratio is exactly E[S]^2 / E[S^2], S the total weight of the "
                       f"available clients (max deviation {dev:.1e})", dev, 0.0),
        (z <= 4, f"through fl.run, the floors at fractions {sorted(m.index)} of the limit match the exact recursion "
                 f"(max |z| = {z:.2f})", z, 4.0),
    ]


def plot_spread(axes, df: pd.DataFrame) -> None:
    """Left: exact squared bias of one aggregate relative to |grad F_T(0)|^2 at w = 0, against pi_min;
    right: exact variance at w = 0 (solid) and at w = w_T* (dashed)."""
    for name, g in df.groupby("rule", sort=False):
        col = PALETTE[name]
        z, t = g[g["point"] == "w = 0"], g[g["point"] == "w = w_T*"]
        axes[0].plot(z["pi_min"], z["bias2"] / z["grad2"], "o-", color=col, ms=3, label=rule_label(name))
        z, t = z[z["variance"] > 1e-12], t[t["variance"] > 1e-12]          # pi_min = 1: no randomness
        axes[1].plot(z["pi_min"], z["variance"], "o-", color=col, ms=3)
        axes[1].plot(t["pi_min"], t["variance"], "s--", color=col, ms=3)
    axes[0].set(xscale="log", xlabel=r"smallest availability $\pi_{\min}$ ($\pi_i$ evenly in $[\pi_{\min}, 1]$)",
                ylabel=r"$\|\mathbb{E}G - \nabla F_T(w)\|^2 / \|\nabla F_T(w)\|^2$ at $w = 0$")
    axes[1].set(xscale="log", yscale="log", xlabel=r"$\pi_{\min}$ (at 1 the variance is 0: not drawn)",
                ylabel=r"variance $\mathbb{E}\|G - \mathbb{E}G\|^2$")
    from matplotlib.ticker import NullFormatter
    ticks = sorted(df["pi_min"].unique())
    for ax in axes:
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=8)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(min(ticks) / 1.3, max(ticks) * 1.3)
    # one legend below both panels (the curves fill both axes): colour = rule, line style = point (right panel)
    from matplotlib.lines import Line2D
    hs, ls = axes[0].get_legend_handles_labels()
    hs += [Line2D([], [], color="0.3", marker="o", ms=3, ls="-"),
           Line2D([], [], color="0.3", marker="s", ms=3, ls="--")]
    ls += ["right: at $w = 0$", r"right: at $w = w_T^\star$"]
    axes[0].figure.legend(hs, ls, loc="outside lower center", ncol=2)


def limit_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per (case, q, rule) and reference point: the mean over seeds of the final squared distance, its
    standard error, the exact expectation and z = (mean - exact) / s.e."""
    meas = df[df["seed"] >= 0].groupby(["case", "q_name", "rule", "metric"], sort=False)["value"]
    out = meas.agg(["mean", "std", "count"]).reset_index()
    out["se"] = out["std"] / np.sqrt(out["count"])
    ex = df[df["seed"] < 0].set_index(["case", "q_name", "rule", "metric"])["value"]
    out["exact"] = [ex[(c, q, r, "exact_" + m)] for c, q, r, m in out[["case", "q_name", "rule", "metric"]].to_numpy()]
    # a deterministic case (every pi_i = 1) has s.e. 0: compare to the CSV's 8 significant digits
    out["z"] = [zscore(a, b, c, tol=1e-6 * max(1.0, abs(b))) for a, b, c in out[["mean", "exact", "se"]].to_numpy()]
    out["reference"] = out["metric"].str.replace("dist2_", "", regex=False)
    return out.drop(columns=["std", "count", "metric"])


def limit_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (case, q, rule): the mean final squared distances to w_T*, w_B* (the notes' F_B) and m (the rule's
    exact limit), and the exact squared distances between these three points."""
    key = ["case", "q_name", "rule"]
    fin = df[df["seed"] >= 0].pivot_table(index=key, columns="metric", values="value", aggfunc="mean", sort=False)
    gap = df[df["metric"].str.startswith("dist2_effective_") | (df["metric"] == "dist2_FB_FT")].pivot_table(
        index=key, columns="metric", values="value", sort=False)
    names = {"dist2_F_T": "final |w - w_T*|^2", "dist2_F_B": "final |w - w_B*|^2", "dist2_effective": "final |w - m|^2",
             "dist2_FB_FT": "|w_B* - w_T*|^2", "dist2_effective_FT": "|m - w_T*|^2", "dist2_effective_FB": "|m - w_B*|^2"}
    return fin.join(gap).rename(columns=names)[list(names.values())]


LIMIT_REFS = {"F_T": (r"argmin $F_T$", "#1b7837", "o"), "F_B": (r"argmin $F_B$ (notes' $p$)", "#b2182b", "s"),
              "effective": (r"argmin $\sum_i P_i F_i$ (exact $P$)", "#2166ac", "^")}


def _math_label(text: str) -> str:
    """A case or q name of :func:`limit_cases` in math text: "pi_i = 0.3" -> $\\pi_i = 0.3$, "q ~ |S_i|" ->
    $q \\propto |S_i|$, "general pi" -> general $\\pi$."""
    if text.startswith("general "):
        return "general " + _math_label(text[len("general "):])
    t = text.replace("alpha", r"\alpha").replace("pi", r"\pi").replace(" ~ ", r" \propto ")
    return f"${t}$"


def rule_label(name: str) -> str:
    """A rule name of PALETTE in math text ("q = alpha/pi" -> $q = \\alpha/\\pi$)."""
    head, _, q = name.partition(", ")
    rest = ""
    if " (" in q:
        q, rest = q.split(" (", 1)
        rest = " (" + rest
    return f"{head}, {_math_label(q)}{rest}"


def plot_limits(axes, summary: pd.DataFrame, floor: float = 1e-6) -> None:
    """One panel per rule: the final squared distance (mean over seeds, +-3 s.e.) to each reference point
    for every (case, q); exact expectations as short black ticks; values below `floor` drawn at it."""
    for ax, rule in zip(axes, ("unnormalized", "normalized")):
        g = summary[summary["rule"] == rule]
        combos = list(dict.fromkeys(zip(g["case"], g["q_name"])))
        for j, (ref, (lab, col, mk)) in enumerate(LIMIT_REFS.items()):
            h = g[g["reference"] == ref].set_index(["case", "q_name"]).loc[combos]
            x = np.arange(len(combos)) + (j - 1) * 0.22
            y = np.maximum(h["mean"].to_numpy(), floor)
            ax.errorbar(x, y, yerr=3 * h["se"].to_numpy(), fmt=mk, color=col, ms=5, label=lab)
            ax.plot(x, np.maximum(h["exact"].to_numpy(), floor), "_", color="k", ms=10)
        # major ticks: q of each run; minor ticks (no mark) centred under each case: the case (pi)
        ax.set_xticks(np.arange(len(combos)), [_math_label(q) for _, q in combos], fontsize=8.5)
        cases = list(dict.fromkeys(c for c, _ in combos))
        mid = [np.mean([i for i, (c2, _) in enumerate(combos) if c2 == c]) for c in cases]
        ax.set_xticks(mid, [_math_label(c) for c in cases], minor=True, fontsize=8.5)
        ax.tick_params(axis="x", which="minor", length=0, pad=16)
        ax.tick_params(axis="x", which="major", pad=2)
        ax.set(yscale="log", ylabel=r"final $\|w_K - w^\star\|^2$", title=f"{rule} rule")
        ax.axhline(floor, color="0.7", lw=0.6)
    axes[0].figure.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=3)


# ================================================================================================
# the page's summary
# ================================================================================================
def finding_words(checks: dict, found: dict) -> dict[str, str]:
    """The outcome-dependent words of the page's "What we found" (glued into its prose), from the page's checks
    ({key: (section, text, ok)}) and `found`; plain text, every phrase follows the outcome of its check."""
    ok = lambda *keys: all(checks[k][2] for k in keys)  # noqa: E731
    pick = lambda cond, yes, no: yes if cond else no  # noqa: E731
    if ok("var_alpha_pi", "var_fedavg"):
        less = "holds in every setting"
    elif found["var_exc_at_opt_only"]:
        less = "holds far from the optimum (w = 0) in every setting; the exceptions are all at the target minimizer"
    else:
        less = "does not always hold, far from the optimum included"
    return {
        "fw_fair": pick(ok("fair_differ"), "lead to different minimizers on every test problem",
                        "do not always lead to different minimizers"),
        "fw_runs": pick(ok("fair_runs"), "lands on each closed form", "misses a closed form"),
        "fw_unbiased": pick(ok("unbiased"), "is exactly unbiased", "is not exactly unbiased"),
        "fw_norm_biased": pick(ok("normalized_biased"), "is biased", "is not biased"),
        "fw_less_var": less,
        "fw_cross": "at no step of the grid" if found["cross"] is None else f"at η ≥ {found['cross']:g}",
        "fw_floor_exact": pick(ok("floor_exact"), "the measured floors match the exact recursion",
                               "some measured floors disagree with the exact recursion"),
        "fw_example_p": pick(ok("example_p"), "holds exactly", "does not hold"),
        "fw_example_unnorm": pick(ok("example_unnorm"), "are exactly", "are not exactly"),
        "fw_example_norm": pick(ok("example_norm"), "not", "exactly"),
        "fw_limit_unnorm": pick(ok("limit_unnorm_FB"), "in every case", "only in some cases"),
        "fw_cases": pick(ok("case_1", "case_2", "case_3"), "in all three cases", "not in all three cases"),
        "fw_limit_norm": pick(ok("limit_norm_FB"), "in every case", "only in some cases"),
    }
