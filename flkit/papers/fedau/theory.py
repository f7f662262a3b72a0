r"""Page "Theory" of the FedAU chapter (document 000): Theorems 1 and 3, Corollary 4, Assumption 5, checked
on problems where the answer is known.

The document's symbols: N clients, participation indicator :math:`\mathbb I_t^n`, probability :math:`p_n`,
aggregation weight :math:`\omega_t^n` (Algorithm 2), cutoff K, interval :math:`S_n`, local step size
:math:`\gamma`, local steps I, server step :math:`\eta`. All rules are those of :mod:`flkit.aggregate`
(``KnownP`` for a constant weight :math:`\omega_n = 1/p'_n`, ``AverageAll`` for :math:`\omega_n = 1`,
``FedAU(K)`` for Algorithm 2); all runs go through :func:`flkit.fl.run`. This module holds the settings,
the document's formulas, the exact limits and the Monte Carlo drivers.

* Theorem 1: on quadratics :math:`F_n(x) = \frac12 (x-c_n)^\top A_n (x-c_n)` with diagonal :math:`A_n` and
  :math:`c_n` = client n's label histogram (so the minimizer of :math:`h` is the class mix the model is
  pulled to). Local training is I steps of GD with step :math:`\gamma`, in closed form
  (``flkit.tasks.QuadraticTask``): the update is :math:`D_n (x - c_n)` with
  :math:`D_n = (1 - (1-\gamma A_n)^I)/\gamma`. Since the mask of round t is independent of
  :math:`x_t` and the update is affine in :math:`x_t`, the mean of the iterates obeys the *expected*
  recursion exactly, whose fixed point is :math:`x_\gamma = (\sum_n w_n D_n)^{-1}\sum_n w_n D_n c_n`,
  :math:`w_n = \omega_n p_n` (:func:`limit_point`). With :math:`A_n = A` for all n it is
  :math:`\arg\min h` for every :math:`\gamma`, I; otherwise it is :math:`\arg\min h + \gamma x^{(1)} +
  O(\gamma^2)` with :math:`x^{(1)} = \frac{I-1}{2}(\sum_n w_n A_n)^{-1}\sum_n w_n A_n^2(x_0 - c_n)`
  (:func:`drift_slope`; zero for I = 1).
* Step sizes: ``flkit`` divides the local progress by :math:`\gamma` (:math:`\Delta = D_n(x - c_n)`) and
  steps :math:`x \leftarrow x - \eta_{\rm fl} G`; Algorithm 1's server step is then
  :math:`\eta = \eta_{\rm fl}/\gamma`. We scale :math:`\eta` by :math:`N/P` (:func:`server_lr`) so that
  every weighting has the same expected step.
* Theorem 3 / Corollary 4: :func:`weight_error` drives ``aggregate.FedAU(K)`` on many independent
  Bernoulli masks at once and measures :math:`\mathbb E[(p_n\omega_t^n - 1)^2]` per round and client,
  its variance + bias split, and the proof's per-round bounds (:func:`proof_lines`).
* Assumption 5, Option 1: :func:`option1` measures :math:`\frac1N\sum_n (p_n\omega_t^n-1)^2` per round
  under the three participation patterns of ``flkit.participation``.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from fractions import Fraction

import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter, ScalarFormatter
import numpy as np
import pandas as pd
import torch

from flkit import aggregate, fl, participation, results
from flkit.datasets import QuadraticProblem
from flkit.papers import settings
from flkit.partition import fedau_dirichlet, fedau_participation_probs
from flkit.seeding import rng
from flkit.papers.fedau.common import (PATTERNS, corollary4_K, cutoff_mean, cutoff_var, k_label,  # noqa: F401
                                       masks)
from flkit.tasks import QuadraticTask

__all__ = [
    "PROFILES", "profile", "cached", "Setting", "cifar10_setting", "PATTERNS", "masks", "pattern_rate",
    "quadratic", "omega_of", "argmin_h", "limit_point", "drift_slope", "server_lr", "algorithm",
    "expected_direction", "expected_fixed_point", "WEIGHTINGS", "theorem1_algorithms", "drift_table",
    "exact_table", "tail_averages", "tail_table", "identity_table", "corollary_table", "violation_table",
    "option1_table",
    "weights_over_rounds", "identity_check", "run_final_check",
    "cutoff_pmf", "pmf_moments", "interval_z", "cutoff_mean", "cutoff_var", "cutoff_var_derived", "recorded_intervals",
    "interval_check", "theorem3_bound", "proof_lines", "corollary4_K", "weight_error", "stored_weight_error",
           "bound_average",
    "option1", "option1_summary", "OPTION1_LEVEL",
    "plain_ticks", "plot_tail", "plot_drift", "plot_tradeoff", "plot_per_round", "plot_option1", "k_label",
]

OPTION1_LEVEL = 1 / 81          # Assumption 5, Option 1

_BASE = dict(setting_seed=1, clients=250, gamma=0.1, local_steps=5, x=0.05, period=100)
PROFILES = {
    "smoke": dict(
        _BASE, seeds=[0, 1, 2, 3],
        sim=dict(rounds=800, Ts=[200, 400, 800], etas=[0.3, 1.0], drift_gamma=0.3, drift_I=10),
        exact=dict(gammas=[0.1], rules=["1/p", "1"]),
        drift=dict(gammas=[0.01, 0.03, 0.1, 0.3], Is=[1, 5], impl_gammas=[0.3]),
        intervals=dict(ps=[0.02, 0.1, 0.5], Ks=[1, 2, 10, 50], clients=300, m=20, seed=0),
        werr=dict(rounds=300, masks=16, Ks=[2, 10, 50, None], Ts=[100, 300], check_Ks=[10, 50], seed=0),
        opt1=dict(rounds=600, seeds=[0, 1], Ks=[None, 50]),
        problem1=dict(Ts=[100, 300, 1000], seeds=[0, 1, 2]),
        large=dict(rounds=800, seeds=[0, 1, 2, 3], etas=[1.0, 4.0], mask_rounds=1000, mask_seeds=[0, 1, 2, 3]),
        bounds=dict(N=20, d=5, I=3, sigma2=1.0, seed=0, states_at=[0, 10], state_seeds=[0], draws=4000,
                    thm2_T=200, thm2_seeds=[0, 1, 2, 3], cor4_Ts=[100, 200, 400], cor4_seeds=[0, 1, 2, 3]),
    ),
    "paper": dict(
        _BASE, seeds=list(range(20)),
        sim=dict(rounds=8000, Ts=[500, 1000, 2000, 4000, 8000], etas=[0.1, 0.3, 1.0], drift_gamma=0.3,
                 drift_I=10),
        exact=dict(gammas=[0.1, 0.5], rules=["1/p", "1", "E[S]"]),
        drift=dict(gammas=[0.003, 0.01, 0.03, 0.1, 0.3, 0.6], Is=[1, 2, 5, 10], impl_gammas=[0.003, 0.03, 0.3]),
        intervals=dict(ps=[0.02, 0.1, 0.5], Ks=[1, 2, 5, 10, 50, 200], clients=3000, m=60, seed=0),
        werr=dict(rounds=10_000, masks=48, Ks=[1, 2, 5, 10, 20, 50, 100, 200, 500, None], Ts=[100, 1000, 10_000],
                  check_Ks=[10, 50, 200], seed=0),
        opt1=dict(rounds=10_000, seeds=list(range(8)), Ks=[None, 50]),
        problem1=dict(Ts=[100, 300, 1000, 3000, 10_000], seeds=[0, 1, 2, 3, 4, 5]),
        large=dict(rounds=2000, seeds=list(range(8)), etas=[1.0, 2.0, 3.0, 4.0], mask_rounds=2000,
                   mask_seeds=list(range(100))),
        bounds=dict(N=20, d=5, I=3, sigma2=1.0, seed=0, states_at=[0, 3, 30, 300], state_seeds=[0, 1], draws=20_000,
                    thm2_T=2000, thm2_seeds=list(range(20)), cor4_Ts=[250, 500, 1000, 2000, 4000],
                    cor4_seeds=list(range(30))),
    ),
}


def _cutoffs(v, name: str, finite: bool = False) -> None:
    if not isinstance(v, (list, tuple)) or not v or any(
            (k is None and finite) or (k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1))
            for k in v):
        raise ValueError(f"{name} must be a non-empty list of ints >= 1{'' if finite else ' or None (no cutoff)'}, "
                         f"got {v!r}")


def _horizons(Ts, rounds: int, name: str) -> None:
    if not isinstance(Ts, (list, tuple)) or not Ts or any(settings.positive_int(T, name) > rounds for T in Ts):
        raise ValueError(f"{name} must be a non-empty list of ints in [1, {rounds}] (the rounds run), got {Ts!r}")


def _check(cfg: dict) -> None:
    """The settings that `settings.check_profile` does not know by name."""
    settings.seeds(cfg["seeds"], "seeds")
    settings.positive_int(cfg["setting_seed"], "setting_seed", 0)
    for key in ("local_steps", "period"):
        settings.positive_int(cfg[key], key)
    settings.positive(cfg["gamma"], "gamma")
    settings.probabilities(cfg["x"], "x")
    s, d, ex = cfg["sim"], cfg["drift"], cfg["exact"]
    _horizons(s["Ts"], s["rounds"], "sim.Ts")
    settings.positive_int(s["drift_I"], "sim.drift_I")
    for key, v in (("sim.drift_gamma", s["drift_gamma"]), ("drift.gammas", d["gammas"]),
                   ("drift.impl_gammas", d["impl_gammas"]), ("exact.gammas", ex["gammas"])):
        settings.positive(v, key)
    _cutoffs(d["Is"], "drift.Is", finite=True)
    if not ex["rules"] or any(r not in ("1/p", "1", "E[S]") for r in ex["rules"]):
        raise ValueError(f"exact.rules must be a non-empty list of '1/p', '1', 'E[S]', got {ex['rules']!r}")
    _cutoffs(cfg["intervals"]["Ks"], "intervals.Ks", finite=True)
    for key in ("Ks", "check_Ks"):
        _cutoffs(cfg["werr"][key], f"werr.{key}")
    _horizons(cfg["werr"]["Ts"], cfg["werr"]["rounds"], "werr.Ts")
    _cutoffs(cfg["opt1"]["Ks"], "opt1.Ks")


def profile(name: str, **overrides) -> dict:
    """The page's settings ("smoke": seconds, for CI; "paper": the full checks, a few minutes on one CPU
    core). `overrides` replace top-level settings (None keeps the profile's); every setting is checked
    before any work, and a bad one raises ValueError naming it and what is allowed."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    where = f"fedau theory profile {name!r}"
    cfg = settings.with_overrides(copy.deepcopy(PROFILES[name]), overrides, where)
    try:
        _check(cfg)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    return cfg


def cached(store: results.Store, config: dict, fn) -> pd.DataFrame:
    """The stored result of `config` in `store`, or ``fn()`` (a tidy table) computed and stored under it."""
    return results.sweep([config], lambda c: fn(), store, progress=False)


# ================================================================================================
# the document's clients: CIFAR-10's exact split and FedAU's p_n
# ================================================================================================
@dataclass(frozen=True)
class Setting:
    """FedAU's clients on CIFAR-10's exact per-class counts: p (N,) participation probabilities, hist (N, C)
    label histograms a_n, seed of the split and of q."""
    p: np.ndarray
    hist: np.ndarray
    seed: int


def cifar10_setting(seed: int = 1, clients: int = 250) -> Setting:
    """``fedau_dirichlet(labels, N, 0.1)`` on 10 classes x 5000 images, then
    ``fedau_participation_probs(counts, alpha=0.1, mean=0.1, p_min=0.02)`` (IBM/fedau@6e9cce9
    ``util/util.py``); the split depends on the data only through the per-class counts."""
    part = fedau_dirichlet(np.repeat(np.arange(10), 5000), clients, 0.1, seed=seed)
    p = fedau_participation_probs(part.counts, alpha=0.1, mean=0.1, p_min=0.02, seed=seed)
    return Setting(p, part.counts / part.counts.sum(1, keepdims=True), seed)


def pattern_rate(pattern: str, p, *, x: float = 0.05, period: int = 100) -> np.ndarray:
    """Long-run participation rate of each client (what 1/omega should estimate): p_n for Bernoulli and
    Markov (the chain's stationary law), A_n/(A_n + B_n) for the cyclic pattern (active block
    A_n = max(1, round(L p_n)), inactive block B_n = max(1, L - A_n))."""
    p = np.asarray(p, dtype=float)
    if pattern == "bernoulli":
        return p.copy()
    if pattern == "markov":
        return participation.stationary(*participation.transition_probs(p, x=x))
    if pattern == "cyclic":
        A = np.maximum(1, np.round(period * p))
        return A / (A + np.maximum(1, period - A))
    raise ValueError(f"unknown participation pattern {pattern!r}; choose one of {PATTERNS}")


# ================================================================================================
# Theorem 1: quadratics, exact limits
# ================================================================================================
def quadratic(hist, hessians: str = "identical", *, local_steps: int = 5, seed: int = 0,
              spectrum: tuple[float, float] = (0.5, 2.0)) -> QuadraticTask:
    r"""Clients :math:`F_n(x) = \frac12(x - c_n)^\top A_n(x - c_n)` with :math:`c_n = a_n` (label histogram).
    ``identical``: :math:`A_n = \mathrm{diag}(\mathrm{geomspace}(lo, hi, C))` for all n;
    ``heterogeneous``: each diagonal entry log-uniform on [lo, hi], drawn from rng(seed, "hessians")."""
    c = np.asarray(hist, dtype=float)
    N, d = c.shape
    lo, hi = spectrum
    if not 0 < lo <= hi:
        raise ValueError(f"spectrum must be (lo, hi) with 0 < lo <= hi, got {spectrum!r}")
    if hessians == "identical":
        A = np.broadcast_to(np.geomspace(lo, hi, d), (N, d)).copy()
    elif hessians == "heterogeneous":
        A = np.exp(rng(seed, "hessians").uniform(math.log(lo), math.log(hi), (N, d)))
    else:
        raise ValueError(f"hessians must be 'identical' or 'heterogeneous', got {hessians!r}")
    return QuadraticTask(QuadraticProblem(torch.tensor(A), torch.tensor(c)), local_steps=local_steps)


def omega_of(rule: str, p, K: int | None = None) -> np.ndarray:
    r"""Constant weights of Theorem 1: ``"1/p"`` (:math:`\omega_n = 1/p_n`), ``"1"``, or ``"E[S]"`` (FedAU's
    long-run weight with cutoff K under Bernoulli participation, :math:`\mathbb E[S_n] = (1-(1-p_n)^K)/p_n`;
    K None: 1/p_n)."""
    p = np.asarray(p, dtype=float)
    if rule == "1/p":
        return 1 / p
    if rule == "1":
        return np.ones_like(p)
    if rule == "E[S]":
        return cutoff_mean(p, K)
    raise ValueError(f"unknown weighting {rule!r}; choose '1/p', '1' or 'E[S]'")


def _AC(task):
    return task.problem.A.numpy(), task.problem.b.numpy()


def argmin_h(task, w) -> np.ndarray:
    r""":math:`\arg\min h` for :math:`h \propto \sum_n w_n F_n`, :math:`w_n = \omega_n p_n`:
    :math:`(\sum_n w_n A_n)^{-1}\sum_n w_n A_n c_n` (coordinate-wise: the A_n are diagonal)."""
    A, c = _AC(task)
    w = np.asarray(w, dtype=float)[:, None]
    return (w * A * c).sum(0) / (w * A).sum(0)


def limit_point(task, w, gamma: float) -> np.ndarray:
    r"""Fixed point of the expected recursion with I local GD steps of size gamma:
    :math:`(\sum_n w_n D_n)^{-1}\sum_n w_n D_n c_n`, :math:`D_n = (1-(1-\gamma A_n)^I)/\gamma`."""
    A, c = _AC(task)
    D = (1 - (1 - gamma * A) ** task.local_steps) / gamma
    w = np.asarray(w, dtype=float)[:, None]
    return (w * D * c).sum(0) / (w * D).sum(0)


def drift_slope(task, w) -> np.ndarray:
    r"""First-order client drift :math:`x^{(1)} = \frac{I-1}{2}(\sum_n w_n A_n)^{-1}\sum_n w_n A_n^2
    (x_0 - c_n)`, :math:`x_0 = \arg\min h`: :func:`limit_point` :math:`= x_0 + \gamma x^{(1)} + O(\gamma^2)`."""
    A, c = _AC(task)
    x0 = argmin_h(task, w)
    w = np.asarray(w, dtype=float)[:, None]
    return (task.local_steps - 1) / 2 * (w * A ** 2 * (x0 - c)).sum(0) / (w * A).sum(0)


def server_lr(eta: float, gamma: float, w) -> float:
    r"""``flkit``'s server step for Algorithm 1's :math:`\eta`, scaled by N/P (:math:`P = \sum_n w_n`):
    :math:`\eta_{\rm fl} = \eta\,\gamma\,N/P`, so that every weighting has the expected step
    :math:`\eta\gamma\,\overline{D}`."""
    w = np.asarray(w, dtype=float)
    return float(eta * gamma * w.size / w.sum())


def algorithm(omega, eta: float, gamma: float, p) -> fl.Algorithm:
    r"""Algorithm 1 with constant weights :math:`\omega_n \ge 1`: ``AverageAll`` when all are 1, else
    ``KnownP`` with the server's :math:`p'_n = 1/\omega_n` (so :math:`G = \frac1N\sum_{S_t}\omega_n\Delta^n`)."""
    omega = np.asarray(omega, dtype=float)
    if (omega < 1).any():
        raise ValueError(f"constant weights must be >= 1 (KnownP takes p' = 1/omega in (0, 1]); min is {omega.min()}")
    lr = server_lr(eta, gamma, omega * np.asarray(p, dtype=float))
    if np.all(omega == 1):
        return fl.Algorithm(aggregate.AverageAll(), lr=lr, local_lr=gamma)
    return fl.Algorithm(aggregate.KnownP(), lr=lr, local_lr=gamma, p=1 / omega)


def expected_direction(task, alg: fl.Algorithm, p, x) -> np.ndarray:
    r""":math:`\mathbb E[G_t \mid x_t = x] = \sum_n p_n\,G(\{n\}; x)` from the implementation, for each row
    of x ((k, d) or (d,)): one :func:`flkit.fl.run` round per (point, client n) with only n participating
    (the constant-weight rules are additive over clients), all in one call. Refuses rules whose weights
    depend on the past or on the round's set of clients."""
    if not isinstance(alg.aggregator, (aggregate.KnownP, aggregate.AverageAll)):
        raise ValueError(f"expected_direction needs a constant-weight rule (KnownP, AverageAll), "
                         f"got {alg.aggregator!r}")
    p = np.asarray(p, dtype=float)
    X = np.atleast_2d(np.asarray(x, dtype=float))
    k, N = X.shape[0], p.size
    unit = {s: np.eye(N, dtype=bool)[s % N:s % N + 1] for s in range(k * N)}
    w0 = torch.as_tensor(np.repeat(X, N, axis=0))
    res = fl.run(task, {"one": alg}, seeds=list(range(k * N)), rounds=1, availability=unit, w0=w0, every=1,
                 diverge_factor=None)
    G = ((w0 - res.final_w).numpy() / alg.lr).reshape(k, N, -1)         # G({n}; x_i)
    out = np.einsum("n,knd->kd", p, G)
    return out[0] if np.ndim(x) == 1 else out


def expected_fixed_point(task, alg: fl.Algorithm, p, at=None):
    r"""Solve :math:`\mathbb E[G \mid x] = 0`: the expected direction is affine, :math:`g(x) = Jx - b`;
    J and b from its values at 0 and at the unit vectors (:func:`expected_direction`, one run). With a point
    `at`, returns (fixed point, :math:`\mathbb E[G \mid x = at]`) from the same run."""
    d = task.dim
    pts = [np.zeros(d), np.eye(d)] + ([np.asarray(at, dtype=float)[None]] if at is not None else [])
    g = expected_direction(task, alg, p, np.vstack(pts))
    x = np.linalg.solve((g[1:d + 1] - g[0]).T, -g[0])
    return x if at is None else (x, g[d + 1])


WEIGHTINGS = {"1/p": r"$\omega_n = 1/p_n$", "1": r"$\omega_n = 1$"}


def theorem1_algorithms(p, etas, gamma: float, K: int = 50) -> tuple[dict, dict, dict]:
    r"""The comparison of Theorem 1 on the identical-Hessian problem: constant weights 1/p_n and 1 at each
    eta, and FedAU (Algorithm 2) with no cutoff and with cutoff K at eta = max(etas). Returns (algorithms,
    limit weights w_n = omega_n p_n of each, in the limit for FedAU; eta of each)."""
    p = np.asarray(p, dtype=float)
    algs, w, eta_of = {}, {}, {}
    for rule in WEIGHTINGS:
        for eta in etas:
            name = f"omega={rule}, eta={eta:g}"
            algs[name] = algorithm(omega_of(rule, p), eta, gamma, p)
            w[name], eta_of[name] = omega_of(rule, p) * p, eta
    for k in (None, K):
        name = f"FedAU, {k_label(k)}"
        w[name], eta_of[name] = omega_of("E[S]", p, k) * p, max(etas)
        algs[name] = fl.Algorithm(aggregate.FedAU(K=k), lr=server_lr(max(etas), gamma, w[name]), local_lr=gamma)
    return algs, w, eta_of


def drift_table(hist, p, gammas, Is, *, impl_gammas=(), rules=("1/p", "1"), seed: int = 1) -> pd.DataFrame:
    r"""Heterogeneous Hessians: for each weighting, I and gamma, the distance of the expected dynamics' limit
    :math:`x_\gamma` to :math:`\arg\min h`, from the closed form (:func:`limit_point`) and, for gamma in
    `impl_gammas`, from the implementation (:func:`expected_fixed_point`, NaN elsewhere); slope_norm =
    :math:`\|x^{(1)}\|` (:func:`drift_slope`)."""
    rows = []
    for I in Is:
        task = quadratic(hist, "heterogeneous", local_steps=I, seed=seed)
        for rule in rules:
            w = omega_of(rule, p) * np.asarray(p)
            x0, slope = argmin_h(task, w), np.linalg.norm(drift_slope(task, w))
            for gamma in gammas:
                xi = (expected_fixed_point(task, algorithm(omega_of(rule, p), 1.0, gamma, p), p)
                      if gamma in impl_gammas else np.full_like(x0, np.nan))
                xg = limit_point(task, w, gamma)
                rows.append(dict(rule=rule, I=I, gamma=gamma, dist_closed=np.linalg.norm(xg - x0),
                                 dist_impl=np.linalg.norm(xi - x0), impl_vs_closed=np.abs(xi - xg).max(),
                                 slope_norm=slope))
    return pd.DataFrame(rows)


def exact_table(hist, p, rules, gammas, Is, K: int = 50) -> pd.DataFrame:
    r"""Identical Hessians: for each weighting (:func:`omega_of`, cutoff K for "E[S]"), I and gamma, the
    largest coordinate of :math:`\mathbb E[G \mid x = \arg\min h]` and of (fixed point - argmin h), both
    from the implementation (:func:`expected_fixed_point`)."""
    rows = []
    for I in Is:
        task = quadratic(hist, "identical", local_steps=I)
        for rule in rules:
            omega = omega_of(rule, p, K)
            xh = argmin_h(task, omega * np.asarray(p))
            for g in gammas:
                xs, g_at = expected_fixed_point(task, algorithm(omega, 1.0, g, p), p, at=xh)
                rows.append({"ω_n": rule, "I": I, "γ": f"{g:g}", "max |E[G | x = argmin h]|": np.abs(g_at).max(),
                             "max |fixed point − argmin h|": np.abs(xs - xh).max()})
    return pd.DataFrame(rows).set_index(["ω_n", "I", "γ"])


def tail_averages(task, algorithms: dict, p, seeds, rounds: int, Ts) -> pd.DataFrame:
    r"""Run the algorithms on Bernoulli(p_n) masks (``participation.bernoulli``, one per seed) from x_0 = 0;
    for each horizon T in Ts the Polyak tail average :math:`\bar x_T = \frac{2}{T}\sum_{t=T/2}^{T-1} x_t`.
    Tidy table: method, seed, round = T, metric = "x<j>", value."""
    av = {s: participation.bernoulli(p, rounds, s) for s in seeds}
    d = task.dim
    res = fl.run(task, algorithms, seeds=list(seeds), rounds=rounds, availability=av, p=p, every=rounds,
                 track=lambda w: {f"x{j}": w[:, j] for j in range(d)})
    rows = []
    for name in algorithms:
        X = np.stack([res.values[name][f"x{j}"] for j in range(d)], -1)     # (rounds + 1, S, d), X[t] = x_t
        for T in Ts:
            xbar = X[T // 2:T].mean(0)
            for j in range(d):
                rows.append(pd.DataFrame({"method": name, "seed": list(seeds), "round": T, "metric": f"x{j}",
                                          "value": xbar[:, j]}))
    return pd.concat(rows, ignore_index=True)


def tail_table(tab: pd.DataFrame, refs: dict, x_f, x_biased) -> pd.DataFrame:
    r"""Per method, seed and T: dist_ref = :math:`\|\bar x_T - x_{\rm ref}\|` (the method's predicted
    limit ``refs[method]``), dist_f = :math:`\|\bar x_T - \arg\min f\|`, and the bias fraction
    :math:`\lambda = \langle \bar x_T - x_f, u\rangle / \|x_b - x_f\|`, :math:`u = (x_b - x_f)/\|x_b - x_f\|`,
    x_b = ``x_biased`` (0 at argmin f, 1 at x_b)."""
    wide = tab.pivot_table(index=["method", "seed", "round"], columns="metric", values="value")
    X = wide[[f"x{j}" for j in range(len(x_f))]].to_numpy()
    ref = np.stack([refs[m] for m in wide.index.get_level_values("method")])
    v = np.asarray(x_biased) - np.asarray(x_f)
    out = wide.index.to_frame(index=False)
    out["dist_ref"] = np.linalg.norm(X - ref, axis=1)
    out["dist_f"] = np.linalg.norm(X - np.asarray(x_f), axis=1)
    out["bias_fraction"] = (X - np.asarray(x_f)) @ v / (v @ v)
    return out


# ================================================================================================
# Algorithm 2's weights and the interval-mean identity
# ================================================================================================
def weights_over_rounds(mask, K: int | None) -> np.ndarray:
    r""":math:`\omega_t^n` of ``aggregate.FedAU(K)`` for t = 0..T (read before recording round t; row T:
    after the horizon), shape (T + 1, N)."""
    I = torch.from_numpy(participation.replay(mask))
    rule = aggregate.FedAU(K=K)
    st = rule.init(1, I.shape[1], 1, torch.float64, "cpu")
    out = np.empty((I.shape[0] + 1, I.shape[1]))
    for t in range(I.shape[0]):
        out[t] = rule.weights(st)[0].numpy()
        st = rule.record(st, I[t][None])
    out[-1] = rule.weights(st)[0].numpy()
    return out


def _last_and_count(mask) -> tuple[np.ndarray, np.ndarray]:
    """(T + 1, N) each: t_M, the last participation round before t (-1: none), and M, the participations
    before t."""
    I = participation.replay(mask)
    T, N = I.shape
    M = np.vstack([np.zeros((1, N)), np.cumsum(I, 0)])
    idx = np.where(I, np.arange(T)[:, None], -1)
    last = np.vstack([np.full((1, N), -1), np.maximum.accumulate(idx, 0)])
    return last, M


def identity_check(mask) -> dict:
    r"""With no cutoff, after the participations at rounds :math:`t_1 < \dots < t_M` the mean recorded
    interval is :math:`(t_M + 1)/M`: the inverse of the empirical participation rate over rounds
    :math:`0..t_M`. Compares ``aggregate.FedAU(None)``'s :math:`\omega_t` with it in every round t (and
    with 1 while M = 0). Returns the largest absolute deviations and the cells compared."""
    omega = weights_over_rounds(mask, None)
    last, M = _last_and_count(mask)
    has = M > 0
    ident = np.where(has, (last + 1) / np.maximum(M, 1), 1.0)
    dev = np.abs(omega - ident)
    return dict(max_dev=float(dev[has].max()) if has.any() else 0.0,
                max_dev_before_first=float(dev[~has].max()) if (~has).any() else 0.0,
                cells=int(has.sum()), cells_before_first=int((~has).sum()))


def run_final_check(mask, seed: int = 0) -> dict:
    r"""The same identity on :func:`flkit.fl.run`'s final FedAU state (``Result.final``): a one-parameter
    quadratic task, FedAU with no cutoff, the mask as the seed's availability. Returns the largest
    deviation of the state's mean interval from :math:`(t_M+1)/M` and of M from the participation count."""
    I = participation.replay(mask)
    T, N = I.shape
    one = torch.ones(N, 1, dtype=torch.float64)
    task = QuadraticTask(QuadraticProblem(one, 0 * one))
    res = fl.run(task, {"fedau": fl.Algorithm(aggregate.FedAU(), lr=0.1)}, seeds=[seed], rounds=T,
                 availability={seed: I}, every=T)
    st = res.final["fedau"]
    last, M = _last_and_count(I)
    has = M[-1] > 0
    return dict(max_dev=float(np.abs(st.mean[0].numpy() - (last[-1] + 1) / np.maximum(M[-1], 1))[has].max()),
                count_dev=float(np.abs(st.count[0].numpy() - M[-1]).max()), clients=int(has.sum()))


def identity_table(p, rounds: int, seed: int, *, x: float = 0.05, period: int = 100) -> pd.DataFrame:
    """:func:`identity_check` and :func:`run_final_check` on one mask of each pattern (index: pattern)."""
    rows = {}
    for pattern in PATTERNS:
        m = masks(pattern, p, rounds, seed, x=x, period=period)
        r, f = identity_check(m), run_final_check(m, seed)
        rows[pattern] = {"(round, client) cells with M ≥ 1": r["cells"], "max |ω − (t_M+1)/M|": r["max_dev"],
                         "max |ω − 1| before the first": r["max_dev_before_first"],
                         "fl.run final state: max dev.": f["max_dev"], "fl.run: max |M − count|": f["count_dev"]}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("pattern")


# ================================================================================================
# the cutoff geometric distribution (proof of Theorem 3)
# ================================================================================================
def cutoff_pmf(p, K: int) -> list:
    r""":math:`\Pr\{S = k\} = p(1-p)^{k-1}` for :math:`1 \le k < K`, :math:`(1-p)^{K-1}` for k = K.
    Exact when p is a ``Fraction`` (a list of K Fractions), else floats."""
    K = settings.positive_int(K, "K")
    q = 1 - p
    return [p * q ** (k - 1) for k in range(1, K)] + [q ** (K - 1)]


def pmf_moments(p, K: int) -> tuple:
    """(sum of the pmf, mean, variance) by summing the pmf over k = 1..K (exact for a Fraction p)."""
    pmf = cutoff_pmf(p, K)
    mean = sum(k * f for k, f in enumerate(pmf, 1))
    return sum(pmf), mean, sum(k * k * f for k, f in enumerate(pmf, 1)) - mean * mean


def cutoff_var_derived(p, K: int):
    r"""The variance from :math:`\mathbb E[S] = \sum_{k<K} q^k`, :math:`\mathbb E[S^2] = \sum_{k<K}(2k+1)q^k`,
    q = 1 - p (tail sums), without simplification: an independent route to the same number."""
    q = 1 - p
    s0 = (1 - q ** K) / p                                          # sum_{k<K} q^k
    s1 = q * (1 - K * q ** (K - 1) + (K - 1) * q ** K) / p ** 2     # sum_{k<K} k q^k
    return 2 * s1 + s0 - s0 * s0


def recorded_intervals(mask, K: int, m: int) -> np.ndarray:
    r"""The first m intervals :math:`S_n` that ``aggregate.FedAU(K)`` records for each client, read off its
    state (an interval is recorded when the count M_n grows; its length is the gap before the round + 1).
    Needs rounds >= m K, so that every client has m records (each interval is at most K long)."""
    I = torch.from_numpy(participation.replay(mask))
    T, N = I.shape
    if T < m * K:
        raise ValueError(f"the mask has {T} rounds; m K = {m * K} are needed for {m} intervals per client")
    rule = aggregate.FedAU(K=K)
    st = rule.init(1, N, 1, torch.float64, "cpu")
    out = np.zeros((N, m))
    for t in range(T):
        new = rule.record(st, I[t][None])
        rec = (new.count > st.count)[0].numpy() & (st.count[0].numpy() < m)
        out[rec, st.count[0].numpy()[rec].astype(int)] = st.gap[0].numpy()[rec] + 1
        st = new
    return out


def _var_se(x: np.ndarray) -> float:
    """Standard error of the sample variance of i.i.d. x (delta method: sqrt((m4 - s^4)/n))."""
    c = x - x.mean()
    return float(math.sqrt(max((c ** 4).mean() - (c ** 2).mean() ** 2, 0.0) / x.size))


def interval_z(sim, exact, se, tol: float = 1e-9):
    """(sim - exact) / se, and 0 where the two agree within `tol` (no spread: every interval equal)."""
    sim, exact, se = (np.asarray(v, dtype=float) for v in (sim, exact, se))
    diff = sim - exact
    return np.where(np.abs(diff) <= tol, 0.0, diff / np.where(se > 0, se, np.nan))


def interval_check(ps, Ks, clients: int, m: int, seed: int) -> pd.DataFrame:
    """For each (p, K): the exact mean and variance (closed form; by summing the pmf in exact rational
    arithmetic; the document's formula), and those of m recorded intervals of `clients` Bernoulli(p)
    clients (``participation.bernoulli`` with stream "participation" of `seed`, one mask for all p)."""
    ps = [float(p) for p in ps]
    rows = []
    for K in Ks:
        mask = participation.bernoulli(np.repeat(ps, clients), m * K, rng(seed, f"intervals-K{K}"))
        S = recorded_intervals(mask, K, m)
        for i, p in enumerate(ps):
            x = S[i * clients:(i + 1) * clients].reshape(-1)
            _, mean_q, var_q = pmf_moments(Fraction(repr(p)), K)
            rows.append(dict(p=p, K=K, mean_doc=cutoff_mean(p, K), var_doc=cutoff_var(p, K),
                             var_derived=cutoff_var_derived(p, K), mean_pmf=float(mean_q), var_pmf=float(var_q),
                             exact_doc_equals_pmf=bool(cutoff_var(Fraction(repr(p)), K) == var_q
                                                       and cutoff_mean(Fraction(repr(p)), K) == mean_q),
                             n=x.size, mean_sim=x.mean(), mean_se=x.std(ddof=1) / math.sqrt(x.size),
                             var_sim=x.var(ddof=1), var_se=_var_se(x)))
    out = pd.DataFrame(rows)
    out["z_mean"] = interval_z(out["mean_sim"], out["mean_doc"], out["mean_se"])
    out["z_var"] = interval_z(out["var_sim"], out["var_doc"], out["var_se"])
    return out


# ================================================================================================
# Theorem 3 and Corollary 4: the weight-error term
# ================================================================================================
def theorem3_bound(p, K: int, t):
    r"""The proof's per-round bound :math:`2K(1-p_n)/t + (1-p_n)^{2K}` (t >= 1)."""
    return 2 * K * (1 - p) / t + (1 - p) ** (2 * K)


def proof_lines(p, K: int, t) -> dict:
    r"""The proof's chain for round t >= 1: "split" :math:`p^2\mathrm{Var}[S]/\max(\lfloor t/K\rfloor, 1)
    + (1-p)^{2K}`, "2K/t" :math:`p^2\,2K\,\mathrm{Var}[S]/t + (1-p)^{2K}`, "final"
    :math:`2K(1-p)/t + (1-p)^{2K}`."""
    bias = (1 - p) ** (2 * K)
    v = p ** 2 * cutoff_var(p, K)
    return {"split": v / np.maximum(np.floor(t / K), 1) + bias, "2K/t": 2 * K * v / t + bias,
            "final": theorem3_bound(p, K, t)}


def bound_average(p, K: int, T: int) -> float:
    r""":math:`\frac1{NT}\sum_{t<T}\sum_n` of the per-round bound, the t = 0 term taken as its exact value
    :math:`(1-p_n)^2` (:math:`\omega_0 = 1`; the bound divides by t)."""
    p = np.asarray(p, dtype=float)
    t = np.arange(1, T)
    H = (1.0 / t).sum()
    return float(((1 - p) ** 2 + 2 * K * (1 - p) * H + (T - 1) * (1 - p) ** (2 * K)).mean() / T)


def _log_grid(T: int, points: int = 60) -> np.ndarray:
    return np.unique(np.concatenate([[0], np.geomspace(1, T - 1, points).astype(int)]))


def _mask_blocks(p, R: int, rounds: int, g, chunk: int):
    """(t, (R, N) bool) for t < rounds: R independent Bernoulli(p) masks, drawn in row chunks of one
    ``participation.bernoulli`` draw of the tiled p (the same numbers as one draw of all rounds)."""
    for c0 in range(0, rounds, chunk):
        block = participation.bernoulli(np.tile(p, R), min(chunk, rounds - c0), g).reshape(-1, R, p.size)
        for i, arrived in enumerate(torch.from_numpy(block)):
            yield c0 + i, arrived


def _above(e: torch.Tensor, line: np.ndarray, z: float = 4.0) -> np.ndarray:
    """Clients whose Monte Carlo mean of e (R, N) exceeds `line` by more than z standard errors."""
    m, se = e.mean(0).numpy(), e.std(0).numpy() / math.sqrt(e.shape[0])
    return m - line > z * se


def weight_error(p, K: int | None, rounds: int, n_masks: int, seed: int, Ts, check: bool = False,
                 chunk: int = 250) -> pd.DataFrame:
    r"""Monte Carlo of Theorem 3's term for ``aggregate.FedAU(K)``: `n_masks` independent Bernoulli(p_n)
    masks side by side (stream "participation" of `seed`, :func:`_mask_blocks`). In each round t, from the
    weights read before recording round t, per client: the mean over masks of
    :math:`e = (p_n\omega_t^n - 1)^2`, split into variance :math:`p_n^2\mathrm{Var}(\omega_t^n)` + bias
    :math:`(p_n\mathbb E\omega_t^n - 1)^2` (an exact identity over the masks), averaged over clients.

    Returns a tidy table (K column, inf for no cutoff): per-round curves on a log grid (err_t, var_t,
    bias_t), prefix averages for each T in Ts (avg_err, avg_var, avg_bias) and, with ``check``, for each
    line of :func:`proof_lines`, the (round, client) cells with t >= 1 where the mean exceeds the line by
    more than 4 standard errors (cand_<line>_t<K, cand_<line>_t>=K) and those among them where it does so
    again on as many independent masks (stream "participation-confirm"; viol_<line>_...): with millions of
    cells, single 4-s.e. excursions happen by chance. "cells" = N (rounds - 1)."""
    p = np.asarray(p, dtype=float)
    R, pt = int(n_masks), torch.as_tensor(p)
    rule = aggregate.FedAU(K=K)
    st = rule.init(R, p.size, 1, torch.float64, "cpu")
    curves = np.zeros((rounds, 3))                 # err, var, bias per round (mean over clients)
    cand = {}                                      # (line, t) -> clients above the line
    for t, arrived in _mask_blocks(p, R, rounds, rng(seed, "participation"), chunk):
        w = rule.weights(st)
        e = (pt * w - 1) ** 2
        curves[t] = (float(e.mean()), float((pt ** 2 * w.var(0, unbiased=False)).mean()),
                     float(((pt * w.mean(0) - 1) ** 2).mean()))
        if check and K is not None and t >= 1:
            for name, line in proof_lines(p, K, t).items():
                hit = np.flatnonzero(_above(e, line))
                if hit.size:
                    cand[(name, t)] = hit
        st = rule.record(st, arrived)
    counts = _confirm(p, K, R, seed, cand, chunk) if check and K is not None else {}
    return _werr_table(curves, K, Ts, counts, p.size, rounds)


def stored_weight_error(store: results.Store, p, cfg: dict, K: int | None, rounds: int, Ts,
                        check: bool) -> pd.DataFrame:
    """:func:`weight_error` of the profile's masks (``cfg["werr"]``) for one K and horizon, from `store` or
    computed and stored (:func:`cached`, experiment "theory_weight_error")."""
    W = cfg["werr"]
    conf = dict(experiment="theory_weight_error", setting_seed=cfg["setting_seed"], K=K, rounds=rounds,
                masks=W["masks"], seed=W["seed"], Ts=Ts, check=check)
    return cached(store, conf, lambda: weight_error(p, K, rounds, W["masks"], W["seed"], Ts, check=check))


def _confirm(p, K: int, R: int, seed: int, cand: dict, chunk: int) -> dict:
    """Counts of candidate cells (cand_...) and of those confirmed on independent masks (viol_...)."""
    out = {f"{k}_{name}_{w}": 0 for k in ("cand", "viol") for name in ("split", "2K/t", "final")
           for w in ("t<K", "t>=K")}
    last = max((t for _, t in cand), default=-1)
    rule, pt = aggregate.FedAU(K=K), torch.as_tensor(p)
    st = rule.init(R, p.size, 1, torch.float64, "cpu")
    for t, arrived in _mask_blocks(p, R, last + 1, rng(seed, "participation-confirm"), chunk):
        e = (pt * rule.weights(st) - 1) ** 2
        for name, line in (proof_lines(p, K, t).items() if t >= 1 else ()):
            n = cand.get((name, t))
            if n is not None:
                part = "t<K" if t < K else "t>=K"
                out[f"cand_{name}_{part}"] += n.size
                out[f"viol_{name}_{part}"] += int(_above(e, line)[n].sum())
        st = rule.record(st, arrived)
    return out


def _werr_table(curves, K, Ts, counts, N, rounds) -> pd.DataFrame:
    grid = _log_grid(rounds)
    Kv = math.inf if K is None else float(K)
    frames = [pd.DataFrame({"K": Kv, "round": grid, "metric": name, "value": curves[grid, j]})
              for j, name in enumerate(("err_t", "var_t", "bias_t"))]
    cum = np.cumsum(curves, 0)
    frames.append(pd.DataFrame([dict(K=Kv, round=T, metric=name, value=cum[T - 1, j] / T)
                                for T in Ts for j, name in enumerate(("avg_err", "avg_var", "avg_bias"))]))
    if counts:
        frames.append(pd.DataFrame([dict(K=Kv, round=rounds, metric=k, value=v) for k, v in counts.items()]
                                   + [dict(K=Kv, round=rounds, metric="cells", value=N * (rounds - 1))]))
    return pd.concat(frames, ignore_index=True)


def corollary_table(avg: pd.DataFrame, at_cor: dict, p, Ts) -> pd.DataFrame:
    """Per horizon T: Corollary 4's K, the measured term there (`at_cor[T]`), the best K of the grid and its
    term, the term with no cutoff, and Corollary 4's bias bound next to 1/T. `avg`: the avg_err rows of
    :func:`weight_error` tables (K, round, metric, value)."""
    rows = []
    for T in Ts:
        g = avg[(avg["round"] == T) & (avg["metric"] == "avg_err")].set_index("K")["value"]
        fin, inf = g[np.isfinite(g.index)], g[~np.isfinite(g.index)]
        k = corollary4_K(float(np.min(p)), T)
        rows.append({"T": T, "K = log_c T (Cor. 4)": k, "measured term at round(K_cor)": at_cor[T],
                     "best K on the grid": int(fin.idxmin()), "measured term at best K": fin.min(),
                     "measured term, K = inf": inf.iloc[0] if len(inf) else np.nan,
                     "bias bound (1-min p)^(2K_cor)": (1 - np.min(p)) ** (2 * k), "1/T": 1 / T})
    return pd.DataFrame(rows).set_index("T")


def violation_table(we: pd.DataFrame) -> pd.DataFrame:
    """Candidate and confirmed cells per proof line ((ii) split, (iii) 2K/t, (iv) final), t < K or >= K
    (rows), and K (columns), from the check rows of :func:`weight_error` tables."""
    vi = we[we["metric"].str.startswith(("viol_", "cand_"))].pivot_table(index="K", columns="metric", values="value")
    cols = {(f"K = {int(K)}", name): [int(vi.loc[K, f"{key}_{line}_{part}"]) for line in ("split", "2K/t", "final")
                                      for part in ("t<K", "t>=K")]
            for K in vi.index for key, name in (("cand", "above by 4 s.e."), ("viol", "confirmed"))}
    index = pd.MultiIndex.from_product([["(ii)", "(iii)", "(iv)"], ["t < K", "t ≥ K"]], names=["line", "rounds"])
    return pd.DataFrame(cols, index=index)


# ================================================================================================
# Assumption 5, Option 1
# ================================================================================================
def option1(p, pattern: str, K: int | None, rounds: int, seeds, *, x: float = 0.05, period: int = 100) -> np.ndarray:
    r""":math:`Q_t = \frac1N\sum_n (p_n\omega_t^n - 1)^2` for t = 0..rounds-1 and each seed ((S, T)), with
    :math:`\omega_t^n` of ``aggregate.FedAU(K)`` (:math:`\omega_0 = 1`) on the pattern's mask and p_n the
    pattern's long-run rate (:func:`pattern_rate`)."""
    rate = torch.as_tensor(pattern_rate(pattern, p, x=x, period=period))
    I = torch.from_numpy(np.stack([masks(pattern, p, rounds, s, x=x, period=period) for s in seeds], 1))
    rule = aggregate.FedAU(K=K)
    st = rule.init(len(seeds), rate.numel(), 1, torch.float64, "cpu")
    Q = np.empty((len(seeds), rounds))
    for t in range(rounds):
        Q[:, t] = ((rate * rule.weights(st) - 1) ** 2).mean(1).numpy()
        st = rule.record(st, I[t])
    return Q


def option1_summary(Q: np.ndarray, level: float = OPTION1_LEVEL) -> dict:
    r"""Per seed: t* = the first round from which :math:`Q_t \le` level holds up to the horizon (NaN when it
    fails in the last round), and the fraction of rounds where it holds; with the median and range of t*."""
    ok = Q <= level
    T = Q.shape[1]
    fails_from_end = np.argmax(~ok[:, ::-1], 1)                 # rounds at the end where it holds
    t_star = np.where(ok.all(1), 0, np.where(ok[:, -1], T - fails_from_end, np.nan))
    return dict(t_star=t_star, frac=ok.mean(1), first_ok=np.where(ok.any(1), ok.argmax(1), np.nan))


def option1_table(Qs: dict, level: float = OPTION1_LEVEL) -> pd.DataFrame:
    """Per (pattern, K) of ``Qs[(pattern, K)]`` ((S, T) arrays of :func:`option1`): Q_0, the round from which
    Q_t <= level holds to the horizon (median, min, max over seeds; NaN when some seed fails at the
    horizon), the seeds where it holds at the horizon, and the median Q at the horizon."""
    rows = []
    for (pattern, K), Q in Qs.items():
        t = option1_summary(Q, level)["t_star"]
        ok = np.isfinite(t)
        rows.append({"pattern": pattern, "K": k_label(K), "Q_0": float(Q[:, 0].max()),
                     "holds from round (median)": np.median(t) if ok.all() else np.nan,
                     "min": t[ok].min() if ok.all() else np.nan, "max": t[ok].max() if ok.all() else np.nan,
                     "seeds where it holds at the horizon": int(ok.sum()),
                     "Q at the horizon (median)": np.median(Q[:, -1])})
    return pd.DataFrame(rows).set_index(["pattern", "K"])


# ================================================================================================
# figures
# ================================================================================================
def plain_ticks(ax, xs) -> None:
    """Major x ticks at xs written as plain numbers, no minor x labels (log axes)."""
    ax.set_xticks(xs)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_tail(axes, tab: pd.DataFrame, labels: dict, colors: dict) -> None:
    """Left: mean over seeds of the distance of the tail average to the method's predicted limit against T
    (s.e. bars). Right: the bias fraction at the largest T against eta."""
    ax = axes[0]
    for m, g in tab.groupby("method", sort=False):
        s = g.groupby("round")["dist_ref"].agg(["mean", "sem"])
        ax.errorbar(s.index, s["mean"], yerr=s["sem"], marker="o", ms=3, color=colors[m], label=labels[m], lw=1)
    ax.set(xscale="log", yscale="log", xlabel="rounds T", ylabel=r"$\|\bar x_T - \arg\min h\|$")
    plain_ticks(ax, sorted(tab["round"].unique()))
    # one legend for both panels (same colours), below them at the book's size: inside, it hid the lines
    ax.figure.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=4)
    ax = axes[1]
    last = tab[tab["round"] == tab["round"].max()]
    for m, g in last.groupby("method", sort=False):
        s = g.groupby("eta")["bias_fraction"].agg(["mean", "sem"])
        ax.errorbar(s.index, s["mean"], yerr=2 * s["sem"], marker="o", ms=4, color=colors[m], capsize=3, lw=1)
    ax.set(xscale="log", xlabel=r"server step $\eta$ (Algorithm 1, times $N/P$)",
           ylabel=r"bias fraction $\lambda$ of $\bar x_T$")
    ax.axhline(0, color="k", lw=0.6, ls=":")
    ax.axhline(1, color="k", lw=0.6, ls=":")


def plot_drift(ax, rows: pd.DataFrame) -> None:
    """Distance of the expected dynamics' limit to argmin h against gamma, one line per I (solid: exact
    closed form; markers: from the implementation; dashed: gamma ||x^(1)||)."""
    cmap = plt.get_cmap("viridis")
    Is = sorted(rows["I"].unique())
    for k, I in enumerate(Is):
        g = rows[rows["I"] == I].sort_values("gamma")
        col = cmap(k / max(1, len(Is) - 1))
        y = g["dist_closed"].clip(lower=1e-17)
        ax.plot(g["gamma"], y, "-", color=col, label=f"I = {I}")
        ax.plot(g["gamma"], g["dist_impl"].clip(lower=1e-17), "o", ms=4, mfc="none", color=col)
        if g["slope_norm"].iloc[0] > 0:
            ax.plot(g["gamma"], g["gamma"] * g["slope_norm"], "--", color=col, lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel=r"local step size $\gamma$",
           ylabel=r"$\|x_\gamma - \arg\min h\|$")
    ax.legend(title="local steps")


def plot_tradeoff(axes, avg: pd.DataFrame, bounds: pd.DataFrame, k_cor: dict, Ts) -> None:
    """Left: the measured term against K for each T (solid) with the averaged bound (dashed), Corollary 4's
    K (dotted verticals) and K = inf (markers at the right edge). Right: variance and bias parts at the
    largest T, with the document's bias term (1/N) sum_n (1-p_n)^{2K}."""
    cmap = plt.get_cmap("plasma")
    fin = avg[np.isfinite(avg["K"])]
    kmax = fin["K"].max()
    for k, T in enumerate(Ts):
        col = cmap(k / max(1, len(Ts)))
        g = fin[(fin["round"] == T) & (fin["metric"] == "avg_err")].sort_values("K")
        axes[0].plot(g["K"], g["value"], "o-", ms=3, color=col, label=f"T = {T}")
        b = bounds[bounds["T"] == T].sort_values("K")
        axes[0].plot(b["K"], b["bound"], "--", color=col, lw=0.8)
        inf = avg[~np.isfinite(avg["K"]) & (avg["round"] == T) & (avg["metric"] == "avg_err")]
        if len(inf):
            axes[0].plot([kmax * 2], inf["value"], "s", color=col, ms=5)
        axes[0].axvline(k_cor[T], color=col, ls=":", lw=1)
    axes[0].set(xscale="log", yscale="log", xlabel="cutoff K (square: K = inf)",
                ylabel=r"$\Sigma_t\Sigma_n\,\mathbb{E}[(p_n\omega_t^n - 1)^2]\,/\,(NT)$")
    axes[0].set_ylim(top=min(axes[0].get_ylim()[1], 50))
    axes[0].legend()
    T = max(Ts)
    for metric, style, lab in (("avg_var", "o-", "variance part"), ("avg_bias", "s-", "bias part")):
        g = fin[(fin["round"] == T) & (fin["metric"] == metric) & (fin["value"] > 0)].sort_values("K")
        axes[1].plot(g["K"], g["value"], style, ms=3, label=lab)
    b = bounds[bounds["T"] == T].sort_values("K")
    axes[1].plot(b["K"], b["bias_doc"], "k--", lw=0.8, label=r"$\Sigma_n(1-p_n)^{2K}/N$")
    axes[1].set(xscale="log", yscale="log", xlabel="cutoff K", ylabel=f"part of the term, T = {T}", ylim=(1e-5, 2))
    axes[1].legend()


def plot_per_round(ax, curves: pd.DataFrame, p, Ks) -> None:
    """Measured (1/N) sum_n E[(p_n omega_t^n - 1)^2] per round (solid) and the mean per-round bound
    (dashed), for a few K."""
    cmap = plt.get_cmap("viridis")
    for k, K in enumerate(Ks):
        col = cmap(k / max(1, len(Ks) - 1))
        g = curves[(curves["K"] == K) & (curves["metric"] == "err_t") & (curves["round"] >= 1)]
        ax.plot(g["round"], g["value"], "-", color=col, label=k_label(K))
        t = g["round"].to_numpy()
        ax.plot(t, [theorem3_bound(np.asarray(p), K, tt).mean() for tt in t], "--", color=col, lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="round t",
           ylabel=r"$\Sigma_n\,\mathbb{E}[(p_n\omega_t^n-1)^2]\,/\,N$")
    ax.legend()


def plot_option1(axes, Qs: dict, Ks) -> None:
    """One panel per pattern: median over seeds of Q_t (band: min-max) for each K, with the level 1/81."""
    for ax, pattern in zip(axes, PATTERNS):
        for k, K in enumerate(Ks):
            Q = Qs[(pattern, K)]
            t = np.arange(1, Q.shape[1] + 1)
            ax.plot(t, np.median(Q, 0), color=f"C{k}", lw=1, label=k_label(K))
            ax.fill_between(t, Q.min(0), Q.max(0), color=f"C{k}", alpha=0.25, lw=0)
        ax.axhline(OPTION1_LEVEL, color="k", ls="--", lw=0.8)
        ax.set(xscale="log", yscale="log", title=pattern, xlabel="round t + 1")
    axes[0].set_ylabel(r"mean over $n$ of $(p_n\omega_t^n - 1)^2$")
    hs, ls = axes[0].get_legend_handles_labels()
    hs.append(plt.Line2D([], [], color="k", ls="--", lw=0.8))
    ls.append(f"level 1/{round(1 / OPTION1_LEVEL)}")
    axes[0].figure.legend(hs, ls, loc="outside lower center", ncol=len(ls))
