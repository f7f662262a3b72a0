r"""Page "Aggregation weights and the biased objective" (document 001, first half of the notes).

The notes' symbols: N clients, client objectives :math:`F_i`, target importance :math:`\alpha_i`
(:math:`\sum_i\alpha_i = 1`), availability probability :math:`\pi_i`, aggregation weight :math:`q_i`,
available set :math:`A_k` in round k. Two aggregators of the local models :math:`w_i`:

* normalized: :math:`w_{k+1} = \sum_{i\in A_k} q_i w_i / \sum_{i\in A_k} q_i` (the model stays where it is
  when :math:`A_k` is empty);
* unnormalized: :math:`w_{k+1} = w_k + \gamma_s\sum_{i\in A_k} q_i (w_i - w_k)`.

In flkit's sign convention (:mod:`flkit.aggregate`: :math:`\Delta_i = w_k - w_i`, server step :math:`w_{k+1} = w_k -
\eta G`) both are the rule :class:`flkit.aggregate.Weighted`: :math:`G = \sum_{i\in A} c_i(A)\Delta_i` with the
per-round weights :math:`c_i(A) = q_i 1\{i\in A\}/\sum_{j\in A}q_j` (normalized, :math:`\eta = 1`) or :math:`c_i(A)
= q_i 1\{i\in A\}` (unnormalized, :math:`\eta = \gamma_s`). Everything on this page follows from the law of the
random vector :math:`c(A)` under independent Bernoulli(:math:`\pi_i`) availability, computed exactly by enumerating
the :math:`2^N` patterns (:func:`weight_law`; the exact laws and moments are their own piece,
:mod:`flkit.papers.availability.moments`, reachable here as before).

The test problems are the closed-form quadratics :math:`F_i(w) = \frac12 (w-b_i)^\top A_i (w-b_i)` of
:func:`flkit.datasets.quadratic_clients` (diagonal :math:`A_i`) with one local gradient step, so that
:math:`\Delta_i = \nabla F_i(w)` (the server step plays the product of the local and the server step sizes).
The minimizer of :math:`\sum_i a_i F_i` is :math:`(\sum_i a_i A_i)^{-1}\sum_i a_i A_i b_i` (:func:`argmin`),
and because the round's update is linear in w with weights independent of the past, the mean and the
covariance of the iterates obey an exact recursion (:func:`expected_sq_distance`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from textwrap import fill

import numpy as np
import pandas as pd
import torch

from flkit import aggregate, fl, participation, plots
from flkit.datasets import QuadraticProblem, quadratic_clients
from flkit.papers import settings
from flkit.papers.availability import common
from flkit.papers.availability.moments import (
    MAX_ENUM_CLIENTS,
    aggregate_moments,
    biased_weights,
    effective_weights,
    eta_max,
    expected_sq_distance,
    monte_carlo_aggregate,
    monte_carlo_weights,
    stationary_sq_distance,
    total_weight_moments,
    weight_law,
    weight_moments,
)
from flkit.seeding import rng
from flkit.tasks import QuadraticTask

__all__ = [
    "PROFILES", "profile", "EXAMPLE", "WeightedQuadratic",
    "fairness_weights", "client_sizes", "argmin", "objective_gap", "biased_weights", "linear_pi",
    "effective_weights", "weight_law", "weight_moments", "aggregate_moments", "monte_carlo_weights",
    "monte_carlo_aggregate", "zscore", "expected_sq_distance", "stationary_sq_distance", "eta_max",
    "fairness_table", "fairness_runs", "floor_rules", "floor_runs", "one_aggregate_table", "spread_table",
    "total_weight_moments",
    "worked_example_table", "limit_cases", "limit_runs", "limit_summary", "limit_table", "finding_words",
    "PALETTE", "LIMIT_REFS", "plot_fairness_2d", "plot_spread", "plot_floors", "plot_limits", "MAX_ENUM_CLIENTS",
    "BOX", "problem_of", "configs", "floor_all", "limit_all", "plot_fairness", "fairness_view",
    "fairness_checks", "fairness_numbers", "one_aggregate_checks", "variance_checks", "variance_numbers",
    "floor_check", "floor_numbers", "example_checks",
    "example_numbers", "limit_checks", "case_checks", "summary_numbers",
]

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


def profile(name: str, seeds=None, **overrides) -> dict:
    """The page's settings under profile `name` ("smoke": seconds, "paper": the page of the book).
    `overrides` replace top-level settings (None keeps the profile's; ``mc_draws``: the Monte Carlo rounds of
    the one-round checks); `seeds`, when given, replace the seeds of the error-floor and of the limit runs (not
    those of the server-step runs). Every setting is checked before any work (`settings.check_profile`: rounds
    >= 1, seeds non-empty, probabilities in (0, 1], ...)."""
    cfg = common.profile_of("weights", PROFILES, name, overrides)
    if seeds is not None:
        for part in ("floor", "limits"):
            cfg[part]["seeds"] = [int(v) for v in seeds]
        settings.check_profile(cfg, f"weights profile {name!r}")
    return cfg


# The notes' worked example: three clients, alpha_i = 1/3, pi ~ (1/2, 1/6, 1), q = (2, 6, 1).
EXAMPLE = dict(pi=(Fraction(1, 2), Fraction(1, 6), Fraction(1)), q=(Fraction(2), Fraction(6), Fraction(1)),
               alpha=(Fraction(1, 3),) * 3)


# ================================================================================================
# the rule (flkit.aggregate's contract)
# ================================================================================================
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
# exact laws by enumeration, Monte Carlo beside them, exact moments of the iterates:
# flkit.papers.availability.moments
# ================================================================================================


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
            "normalized, q = alpha/pi": (aggregate.Weighted(tuple(alpha / pi), True), alpha / pi, True),
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
                     (("exact_tail_dist2", ex), ("stationary_bias2", st["bias2"]),
                      ("stationary_variance", st["variance"]))]
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
        algs = {f"{key} | {'normalized' if norm else 'unnormalized'}":
                (fl.Algorithm(aggregate.Weighted(tuple(q), norm), lr=eta), norm)
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
                         "max |z|, mean": float(np.max(np.abs(z))),
                         "z, variance": zscore(mc["var"], var, mc["var_se"])})
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
              monte_carlo_weights(pi, q_ab if "alpha" in name else q, draws, seed,
                                  normalize=name.startswith("normalized")))
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
             "dist2_FB_FT": "|w_B* - w_T*|^2", "dist2_effective_FT": "|m - w_T*|^2",
             "dist2_effective_FB": "|m - w_B*|^2"}
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
# the page: its problem, its stored runs, its readings and the verdicts of its checks
# ================================================================================================
BOX = dict(page="availability/weights", headline="Eq. (4)",
           tests="the aggregation weights of the notes: the aggregator and its two fairness choices, the biased "
                 "objective F_B of eq. (4) when clients are available with unequal probabilities, the three-client "
                 "example, and the weights q_i = α_i/π_i that remove the bias")


def problem_of(cfg: dict) -> tuple[QuadraticProblem, np.ndarray, WeightedQuadratic, np.ndarray]:
    """The page's problem under the settings `cfg` (:func:`profile`): the quadratic clients, their sample counts
    |S_i|, the task (target alpha_i = 1/N) and the availabilities pi_i (evenly from pi_min to 1)."""
    P = cfg["problem"]
    prob = quadratic_clients(P["n"], P["dim"], P["seed"], heterogeneity=P["heterogeneity"], mu=P["mu"], L=P["L"])
    sizes = client_sizes(P["n"], P["seed"])
    return prob, sizes, WeightedQuadratic(prob, sizes=tuple(sizes.tolist())), linear_pi(P["n"], P["pi_min"])


def configs(cfg: dict) -> dict:
    """The stored-run configs of the page under the settings `cfg`: "floor" (error floors), "server" (the server
    step at the edge of stability, :mod:`~flkit.papers.availability.server_step`) and "limits" (F_B against F_T in
    the notes' three cases)."""
    P, FL, SV, LM = cfg["problem"], cfg["floor"], cfg["server"], cfg["limits"]
    pi, sizes = linear_pi(P["n"], P["pi_min"]), client_sizes(P["n"], P["seed"])
    return dict(floor=dict(experiment="weights_floor", problem=P, pi=pi.tolist(), etas=FL["etas"], rounds=FL["rounds"],
                           seeds=FL["seeds"]),
                server=dict(experiment="weights_server_step", problem=P, pi=pi.tolist(), fractions=SV["fractions"],
                            rounds=SV["rounds"], seeds=SV["seeds"]),
                limits=dict(experiment="weights_limits", problem=P, sizes=sizes.tolist(), pi_const=LM["pi_const"],
                            eta=LM["eta"], rounds=LM["rounds"], seeds=LM["seeds"]))


def floor_all(cfg: dict, task: WeightedQuadratic, pi, where) -> pd.DataFrame:
    """:func:`floor_runs` of the profile, read from the store `where` or made."""
    FL = cfg["floor"]
    return common.cached(where, configs(cfg)["floor"],
                         lambda: floor_runs(task, pi, FL["etas"], FL["rounds"], FL["seeds"]))


def limit_all(cfg: dict, task: WeightedQuadratic, sizes, where) -> pd.DataFrame:
    """:func:`limit_runs` on the cases of :func:`limit_cases`, read from the store `where` or made."""
    P, LM = cfg["problem"], cfg["limits"]
    cases = limit_cases(P["n"], sizes, P["pi_min"], LM["pi_const"])
    return common.cached(where, configs(cfg)["limits"],
                         lambda: limit_runs(task, cases, LM["eta"], LM["rounds"], LM["seeds"]))


def plot_fairness(ft: pd.DataFrame, cfg: dict):
    """Left: both objectives on N = 8 clients in d = 2 (:func:`plot_fairness_2d`); right: over the problems of
    :func:`fairness_table`, the distance between the two minimizers against the total variation between the two
    alphas. Returns the figure."""
    P, F = cfg["problem"], cfg["fair"]
    prob2 = quadratic_clients(8, 2, P["seed"], heterogeneity=P["heterogeneity"], mu=P["mu"], L=P["L"])
    fig, axes = plots.figure(1, 2, row_height=3.2)
    axes = axes[0]
    plot_fairness_2d(axes[0], prob2, client_sizes(8, P["seed"], F["sizes_sigma"]))
    axes[0].legend()
    axes[0].set_title(fill("N = 8 clients in d = 2: level sets of both objectives", 44), fontsize=9.5)
    axes[1].scatter(ft["tv"], ft["dist"] / ft["spread"], s=8)
    axes[1].set(xlabel=r"total variation between the two $\alpha$'s",
                ylabel=r"$\|w^\star_{\rm client} - w^\star_{\rm sample}\|$ / mean $\|b_i - \bar b\|$")
    axes[1].set_title(fill(f"{len(ft)} problems: N = {F['n']}, d = {F['dim']}, log-normal sizes", 44), fontsize=9.5)
    fig.suptitle(fill("Per-client vs per-sample fairness (document 001, 'AGGREGATOR'): closed-form minimizers", 100),
                 fontsize=9.5)
    return fig


def fairness_view(task: WeightedQuadratic) -> pd.DataFrame:
    """Full participation through fl.run (:func:`fairness_runs`, step 0.5, 500 rounds): the final distance of
    each FedAvg to both closed-form minimizers."""
    return fairness_runs(task, eta=0.5, rounds=500).pivot_table(index="method", columns="target", values="value")


def fairness_checks(fr: pd.DataFrame, ft: pd.DataFrame) -> list[tuple[str, bool, str]]:
    """Section 1 as (key, passed, text): each FedAvg of :func:`fairness_view` ends on its own minimizer, and the
    two minimizers differ on every problem of :func:`fairness_table`."""
    own = max(fr.loc["FedAvg, uniform", "client"], fr.loc["FedAvg, size", "sample"])
    return [("fair_runs", own <= 1e-10, f"full participation through fl.run ends on the closed-form minimizer of its "
                                        f"own objective (distance <= 1e-10; max {own:.1e})"),
            ("fair_differ", ft["dist"].min() > 1e-6, f"the two minimizers differ on every one of the {len(ft)} "
                                                     f"problems (distance > 1e-6; min {ft['dist'].min():.3f})")]


def fairness_numbers(ft: pd.DataFrame) -> dict:
    """The numbers of Section 1 that the page's prose glues."""
    rel, r = ft["dist"] / ft["spread"], np.corrcoef(ft["tv"], ft["dist"])[0, 1]
    return dict(fair_n=len(ft), fair_med=ft["dist"].median(), fair_min=ft["dist"].min(), fair_max=ft["dist"].max(),
                fair_rel_med=rel.median(), fair_rel_min=rel.min(), fair_rel_max=rel.max(), fair_corr=r,
                fair_exc_cs=ft["excess_client_at_sample"].median(), fair_exc_sc=ft["excess_sample_at_client"].median())


def one_aggregate_checks(oa: pd.DataFrame, draws: int, dim: int) -> list[tuple[str, bool, str]]:
    """One aggregate (:func:`one_aggregate_table`) as (key, passed, text): Monte Carlo against the exact laws,
    the unnormalized rule with q = alpha/pi unbiased, the normalized rules biased."""
    zmax = max(oa["max |z|, mean"].max(), oa["z, variance"].abs().max())
    unb, nrm = oa[oa["rule"].str.startswith("unnormalized")], oa[oa["rule"].str.startswith("normalized")]
    return [("agg_mc", zmax <= 4, f"Monte Carlo ({draws} rounds) against exact enumeration, one aggregate: every "
                                  f"|z| <= 4 ({len(oa) * (dim + 1)} means and variances; max |z| = {zmax:.2f})"),
            ("unbiased", unb["bias2 (exact)"].max() <= 1e-20, f"unnormalized with q = alpha/pi is unbiased: exact "
                                                               f"||E G - grad F_T||^2 <= 1e-20 (max "
                                                               f"{unb['bias2 (exact)'].max():.1e})"),
            ("normalized_biased", nrm["bias2 (exact)"].min() > 1e-6, f"the normalized rules are biased: exact "
                                                                      f"||E G - grad F_T||^2 > 0 (min "
                                                                      f"{nrm['bias2 (exact)'].min():.3g})")]


def _less_variance(sp: pd.DataFrame):
    """(variance per (pi_min, point) and rule, the unnormalized rule's, {normalized rule: below it where there is
    randomness})."""
    var = sp.pivot_table(index=["pi_min", "point"], columns="rule", values="variance")
    U = var["unnormalized, q = alpha/pi"]
    return var, U, {r: (var[r] < U)[U > 1e-12] for r in ("normalized, q = alpha/pi", "normalized, q = 1 (FedAvg)")}


def variance_checks(sp: pd.DataFrame) -> tuple[list[tuple[str, bool, str]], dict]:
    """'Biased but less variance' on :func:`spread_table` as (key, passed, text) per normalized rule, and the
    findings for the summary (settings below the unnormalized rule, exceptions only at the target minimizer)."""
    _, _, less = _less_variance(sp)
    out, found = [], {}
    for (ck, fk), (r, s) in zip((("var_alpha_pi", "var_ap"), ("var_fedavg", "var_q1")), less.items()):
        out.append((ck, s.all(), f"{r} has less variance than the unnormalized rule: {int(s.sum())} of {len(s)} "
                                 f"(pi_min, point) settings with some randomness (pi_min < 1)"))
        found[fk] = (int(s.sum()), len(s))
    found["var_exc_at_opt_only"] = all(pt == "w = w_T*" for v in less.values() for _, pt in v[~v].index)
    return out, found


def variance_numbers(sp: pd.DataFrame, spread_grid) -> dict:
    """The numbers of the variance comparison that the page's prose glues."""
    var, U, less = _less_variance(sp)
    at0 = var.xs("w = 0", level="point")
    lowest = float(min(spread_grid))
    ratio = at0.loc[lowest] / at0.loc[lowest, "unnormalized, q = alpha/pi"]
    exc = {r: ", ".join(f"({a:g}, {b})" for a, b in v[~v].index) or "none" for r, v in less.items()}
    least = (var.idxmin(axis=1) == "normalized, q = 1 (FedAvg)")[U > 1e-12]
    bias = sp.pivot_table(index=["pi_min", "point"], columns="rule", values="bias2")
    most = (bias.idxmax(axis=1) == "normalized, q = 1 (FedAvg)")[U > 1e-12]
    return dict(var_lowest=lowest, var_ratio_ap=ratio["normalized, q = alpha/pi"],
                var_ratio_q1=ratio["normalized, q = 1 (FedAvg)"], var_exc_ap=exc["normalized, q = alpha/pi"],
                var_exc_q1=exc["normalized, q = 1 (FedAvg)"], var_least=int(least.sum()), var_n_least=len(least),
                var_most=int(most.sum()), var_n_most=len(most))


def floor_check(fd: pd.DataFrame) -> tuple[bool, str]:
    """The measured floors (:func:`floor_runs`) against the exact recursion: every |z| <= 4."""
    m = fd[fd["metric"] == "tail_dist2"].groupby(["method", "eta"])["value"].agg(["mean", "std", "count"])
    ex = fd[fd["seed"] < 0].pivot_table(index=["method", "eta"], columns="metric", values="value")
    z = (m["mean"] - ex["exact_tail_dist2"]) / (m["std"] / np.sqrt(m["count"]))
    return z.abs().max() <= 4, (f"measured floors against the exact recursion: every |z| <= 4 ({len(z)} (rule, eta); "
                                f"max {z.abs().max():.2f})")


def floor_numbers(fd: pd.DataFrame) -> tuple[dict, dict]:
    """The numbers of the error floors that the page's prose glues, and the findings for the summary (the
    smallest step where FedAvg's floor is below the unnormalized rule's, the slope of the latter in eta)."""
    ex = fd[fd["seed"] < 0].pivot_table(index=["method", "eta"], columns="metric", values="value")
    tot = (ex["stationary_bias2"] + ex["stationary_variance"]).unstack("method")
    U, FA = tot["unnormalized, q = alpha/pi"], tot["normalized, q = 1 (FedAvg)"]
    cross = [e for e in tot.index if FA[e] < U[e]]
    found = dict(cross=min(cross) if cross else None,
                 floor_slope=np.polyfit(np.log(U.index), np.log(U.to_numpy()), 1)[0])
    b2 = ex["stationary_bias2"].groupby("method").max()
    return dict(b2_q1=b2["normalized, q = 1 (FedAvg)"], b2_ap=b2["normalized, q = alpha/pi"],
                b2_un=b2["unnormalized, q = alpha/pi"], floor_min=U.min(), floor_max=U.max(),
                floor_slope=found["floor_slope"],
                floor_cross=", ".join(f"{e:g}" for e in cross) if cross else "none of the grid"), found


def _exact_of(we: pd.DataFrame, name: str) -> list:
    return we[we["quantity"] == name]["exact"].tolist()


def example_checks(we: pd.DataFrame, draws: int) -> tuple[list[tuple[str, bool, str]], dict]:
    """The notes' three clients (:func:`worked_example_table`) as (key, passed, text), and the normalized rule's
    effective weights for the summary."""
    mcz = we["z"].abs().max()
    p_notes, uq = _exact_of(we, "notes' p_i"), _exact_of(we, "unnormalized, q = alpha/pi")
    nq = _exact_of(we, "normalized, q = alpha/pi")
    return [("example_mc", mcz <= 4, f"Monte Carlo ({draws} rounds) against the exact effective weights: every |z| "
                                     f"<= 4 (max {mcz:.2f})"),
            ("example_p", p_notes == ["1/3"] * 3, f"notes' p_i for q = (2, 6, 1): {p_notes} = alpha"),
            ("example_unnorm", uq == ["1/3"] * 3, f"unnormalized rule with q = alpha/pi: expected weights {uq} = alpha "
                                                  f"exactly"),
            ("example_norm", nq != ["1/3"] * 3, f"normalized rule with q = alpha/pi: effective weights {nq}, not "
                                                f"alpha")], dict(example_norm="(" + ", ".join(nq) + ")")


def example_numbers(we: pd.DataFrame) -> dict:
    """The numbers of the three-client example that the page's prose glues."""
    w_n = we[we["quantity"] == "normalized, q = alpha/pi"]["exact (decimal)"].to_numpy()
    chi2 = float(((1 / 3 - w_n) ** 2 / w_n).sum())
    return dict(ex_norm_frac=", ".join(_exact_of(we, "normalized, q = alpha/pi")),
                ex_norm_dec=", ".join(f"{v:.3f}" for v in w_n), ex_chi2=chi2,
                ex_alone=float(np.prod([1 - 1 / 2, 1 - 1 / 6])))


def limit_checks(tab: pd.DataFrame, ls: pd.DataFrame) -> tuple[list[tuple[str, bool, str]], dict]:
    """Section 4 (:func:`limit_table`, :func:`limit_summary`) as (key, passed, text): the final distances against
    their exact expectations, and each rule's limit against the notes' F_B; the normalized rule's count for the
    summary."""
    out = [("limit_exact", ls["z"].abs().max() <= 4, f"final squared distances against the exact expectations: "
                                                     f"every |z| <= 4 ({len(ls)}; max {ls['z'].abs().max():.2f})")]
    same = tab["|m - w_B*|^2"] <= 1e-20
    for key, rule in (("limit_unnorm_FB", "unnormalized"), ("limit_norm_FB", "normalized")):
        s = same.xs(rule, level="rule")
        out.append((key, s.all(), f"{rule} rule: its limit m is the minimizer of the notes' F_B (|m - w_B*|^2 <= "
                                  f"1e-20) in {int(s.sum())} of {len(s)} (case, q)"))
    return out, dict(norm_FB=(int(s.sum()), len(s)))


def case_checks(tab: pd.DataFrame, pi_const: float) -> tuple[list[tuple[str, bool, str]], pd.DataFrame]:
    """The notes' three cases where F_B = F_T, as (key, passed, text), and the (case, q) where the normalized
    rule's limit is not the minimizer of F_B."""
    cases_T = [("pi_i = 1", "q = alpha"), (f"pi_i = {pi_const}", "q = alpha"), ("general pi", "q = alpha/pi")]
    out = []
    for k, (c, q) in enumerate(cases_T):
        g = tab.loc[(c, q, "unnormalized")]
        out.append((f"case_{k + 1}", g["|w_B* - w_T*|^2"] <= 1e-20,
                    f"{c}, {q}: F_B = F_T (|w_B* - w_T*|^2 = {g['|w_B* - w_T*|^2']:.1e}) and the unnormalized rule "
                    f"ends at final |w - w_T*|^2 = {g['final |w - w_T*|^2']:.2g}"))
    same = tab["|m - w_B*|^2"] <= 1e-20
    bad = tab.xs("normalized", level="rule")[~same.xs("normalized", level="rule")]
    return out, bad[["|m - w_B*|^2", "|m - w_T*|^2", "|w_B* - w_T*|^2"]]


def summary_numbers(checks, found: dict) -> dict:
    """The numbers and words of the page's "What we found", from its checks (``items.Checks``) and findings."""
    return dict(n_agree=checks.n_agree, n_checks=len(checks), fair_rel=found["fair_rel"], var_ap_n=found["var_ap"][0],
                var_ap_of=found["var_ap"][1], var_q1_n=found["var_q1"][0], var_q1_of=found["var_q1"][1],
                example_norm=found["example_norm"], norm_FB_n=found["norm_FB"][0], norm_FB_of=found["norm_FB"][1],
                **finding_words(checks, found))


# ================================================================================================
# the page's summary
# ================================================================================================
def finding_words(checks, found: dict) -> dict[str, str]:
    """The outcome-dependent words of the page's "What we found" (glued into its prose), from the page's checks
    (``items.Checks``, or {key: (section, text, ok)}) and `found`; plain text, every phrase follows the outcome of
    its check."""
    passed = checks.verdicts() if hasattr(checks, "verdicts") else {k: v[2] for k, v in checks.items()}
    ok = lambda *keys: all(passed[k] for k in keys)  # noqa: E731
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
