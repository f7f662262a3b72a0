r"""Theorem 1 of CA-Fed (quoted by the notes, document 001) on strongly convex quadratics: a piece of the page
on correlated availability (:mod:`flkit.papers.availability.markov`).

Clients :math:`F_k(w) = \frac12 (w-b_k)^\top A_k (w-b_k)`; the theorem bounds the error of the target objective
:math:`F = \sum_k\alpha_k F_k` at any w by an optimization term of the biased objective
:math:`F_B = \sum_k p_k F_k` and a bias term, :math:`\epsilon \le \epsilon_{opt} + \epsilon_{bias}`
(eq. (10)). Here: the terms in closed form (:func:`theorem1`), the ratio on random problems
(:func:`theorem1_sample`), its exact supremum for two clients (:func:`two_client_sup`) and a search for tight
cases (:func:`theorem1_search`); the page's verdicts and figures of these checks. Everything in float64 on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize

from flkit.papers import settings
from flkit.seeding import rng

__all__ = ["Quadratics", "random_quadratics", "theorem1", "theorem1_sample", "two_client_sup", "theorem1_search",
           "search_table", "theorem1_numbers", "TWO_CLIENT_CASES", "TIGHT_TOL", "theorem1_verdict",
           "two_client_table", "tightness_verdict", "plot_theorem1", "plot_tightness"]

@dataclass(frozen=True)
class Quadratics:
    r"""Clients :math:`F_k(w) = \frac12 (w-b_k)^\top A_k (w-b_k)`, A (N, d, d) SPD, b (N, d);
    :math:`F_k^* = 0`. mu, L: the smallest and largest eigenvalue over all :math:`A_k` (every :math:`F_k`
    is mu-strongly convex and L-smooth, the tightest such constants)."""
    A: np.ndarray
    b: np.ndarray

    @property
    def mu(self) -> float:
        return float(np.linalg.eigvalsh(self.A).min())

    @property
    def L(self) -> float:
        return float(np.linalg.eigvalsh(self.A).max())

    def hessian(self, weights) -> np.ndarray:
        return np.einsum("k,kij->ij", weights, self.A)

    def minimizer(self, weights) -> np.ndarray:
        return np.linalg.solve(self.hessian(weights), np.einsum("k,kij,kj->i", weights, self.A, self.b))

    def gap(self, weights, w) -> float:
        """sum_k weights_k F_k(w) minus its minimum, as 1/2 (w - w_W)^T H_W (w - w_W) (no cancellation)."""
        e = np.asarray(w) - self.minimizer(weights)
        return float(0.5 * e @ self.hessian(weights) @ e)

    def client_values(self, w) -> np.ndarray:
        diff = np.asarray(w) - self.b
        return 0.5 * np.einsum("ki,kij,kj->k", diff, self.A, diff)

    def value(self, weights, w) -> float:
        return float(np.asarray(weights) @ self.client_values(w))


def _spd(g: np.random.Generator, d: int, eig: np.ndarray) -> np.ndarray:
    Q, _ = np.linalg.qr(g.standard_normal((d, d)))
    return (Q * eig) @ Q.T


def random_quadratics(N: int, d: int, mu: float, L: float, g: np.random.Generator) -> Quadratics:
    """N clients, random SPD A_k with eigenvalues uniform in [mu, L], optima b_k ~ N(0, I)."""
    if not (0 < mu <= L):
        raise ValueError(f"need 0 < mu <= L, got mu={mu}, L={L}")
    A = np.stack([_spd(g, d, g.uniform(mu, L, d)) for _ in range(N)])
    return Quadratics(A, g.standard_normal((N, d)))


def theorem1(problem: Quadratics, alpha, p, w) -> dict:
    r"""The terms of Theorem 1 (eq. (10)) at w: :math:`\epsilon = F(w) - F^*`,
    :math:`\epsilon_{opt} = 2\kappa^2 (F_B(w) - F_B^*)`, :math:`\epsilon_{bias} = 2\kappa^4
    \chi^2_{\alpha\|p}\Gamma` with :math:`\kappa = L/\mu`, :math:`\chi^2 = \sum_k (\alpha_k-p_k)^2/p_k`
    (+inf when some :math:`p_k = 0 < \alpha_k`), :math:`\Gamma = \max_k F_k(w^*) - F_k^*`; and the ratio
    :math:`\epsilon / (\epsilon_{opt} + \epsilon_{bias})`."""
    alpha, p, w = np.asarray(alpha, float), np.asarray(p, float), np.asarray(w, float)
    kappa = problem.L / problem.mu
    w_star = problem.minimizer(alpha)
    eps, opt_gap = problem.gap(alpha, w), problem.gap(p, w)
    with np.errstate(divide="ignore", invalid="ignore"):
        chi2 = float(np.sum(np.where(p > 0, (alpha - p) ** 2 / p, np.where(alpha > 0, np.inf, 0.0))))
    gamma = float(problem.client_values(w_star).max())
    e_opt, e_bias = 2 * kappa ** 2 * opt_gap, 2 * kappa ** 4 * chi2 * gamma
    bound = e_opt + e_bias
    return dict(eps=eps, eps_opt=e_opt, eps_bias=e_bias, bound=bound, ratio=eps / bound if bound > 0 else np.nan,
                kappa=kappa, chi2=chi2, gamma=gamma, opt_gap=opt_gap)


def theorem1_sample(problems: int, seed: int = 0) -> pd.DataFrame:
    r"""Theorem 1's ratio on random problems: N in 2..10, d in {1, 2, 5}, eigenvalues in [1, L] with L in
    {1.5, 2, 5, 10}, :math:`\alpha \sim` Dirichlet(1), p a random mix of :math:`\alpha` and a Dirichlet(1)
    draw, and w either :math:`w_B^*` (the optimization term vanishes) or :math:`w_B^* + r z`
    (z uniform on the sphere, r log-uniform in [1e-3, 10]). Stream rng(seed, "theorem1")."""
    settings.positive_int(problems, "problems")
    g = rng(seed, "theorem1")
    rows = []
    for i in range(problems):
        N, d, L = int(g.integers(2, 11)), int(g.choice([1, 2, 5])), float(g.choice([1.5, 2.0, 5.0, 10.0]))
        prob = random_quadratics(N, d, 1.0, L, g)
        alpha = g.dirichlet(np.ones(N))
        s = g.uniform()
        p = (1 - s) * alpha + s * g.dirichlet(np.ones(N))
        z = g.standard_normal(d)
        z /= np.linalg.norm(z)
        r = 0.0 if g.uniform() < 0.2 else 10 ** g.uniform(-3, 1)
        w = prob.minimizer(p) + r * z
        rows.append(dict(problem=i, N=N, d=d, L_nominal=L, r=r, **theorem1(prob, alpha, p, w)))
    return pd.DataFrame(rows)


def two_client_sup(alpha1: float, p1: float) -> float:
    r"""Exact :math:`\sup_w \epsilon/\text{bound}` for two clients in one dimension with equal curvature
    (:math:`\kappa = 1`), :math:`p \ne \alpha`: :math:`\frac12\big(1 + p_1 p_2/\max(\alpha_1,\alpha_2)^2\big)`
    (independent of the curvature and of :math:`b_1 \ne b_2`). It tends to 1 as
    :math:`\alpha, p \to (\frac12, \frac12)`."""
    return 0.5 * (1 + p1 * (1 - p1) / max(alpha1, 1 - alpha1) ** 2)


def _softmax(z):
    z = 5 * np.tanh(np.asarray(z) / 5)        # weights within a factor e^10 of each other
    e = np.exp(z - z.max())
    return e / e.sum()


def _decode(x, N: int, d: int, kappa: float):
    """Parameters of the search: curvatures in [1, kappa] (one client pinned at 1, one at kappa, so the
    problem's kappa is exactly `kappa`), rotations (d = 2), optima b, logits of alpha and p (bounded, so
    that no weight is below e^-10 times another), the point w."""
    i = 0
    sig = lambda v: 1 / (1 + np.exp(-np.clip(v, -30, 30)))  # noqa: E731
    eig = 1 + (kappa - 1) * sig(x[i:i + N * d]).reshape(N, d)
    i += N * d
    eig[0, 0], eig[-1, -1] = 1.0, kappa
    if d == 1:
        A = eig[:, :, None]
    else:
        th = x[i:i + N]
        i += N
        R = np.stack([np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]) for t in th])
        A = np.einsum("kij,kj,klj->kil", R, eig, R)
    b = x[i:i + N * d].reshape(N, d)
    i += N * d
    alpha, p = _softmax(x[i:i + N]), _softmax(x[i + N:i + 2 * N])
    i += 2 * N
    return Quadratics(A, b), alpha, p, x[i:i + d]


def theorem1_search(N: int, d: int, kappa: float, starts: int, seed: int = 0, maxiter: int = 3000) -> dict:
    r"""Largest ratio :math:`\epsilon/(\epsilon_{opt}+\epsilon_{bias})` found by Nelder-Mead over the
    problem (curvatures with :math:`\kappa` fixed, rotations, optima), :math:`\alpha`, p and w, from
    `starts` random starts (stream rng(seed, "theorem1-search")). Returns the best ratio and its point."""
    if kappa < 1:
        raise ValueError(f"kappa = L/mu must be >= 1, got {kappa}")
    g = rng(seed, f"theorem1-search/{N}/{d}/{kappa}")
    size = N * d + (N if d > 1 else 0) + N * d + 2 * N + d

    def neg(x):
        prob, alpha, p, w = _decode(x, N, d, kappa)
        try:
            r = theorem1(prob, alpha, p, w)["ratio"]
        except np.linalg.LinAlgError:
            return 0.0
        return -r if np.isfinite(r) else 0.0

    best = None
    for _ in range(starts):
        res = optimize.minimize(neg, g.standard_normal(size), method="Nelder-Mead",
                                options=dict(maxiter=maxiter, maxfev=2 * maxiter, xatol=1e-10, fatol=1e-14))
        if best is None or res.fun < best.fun:
            best = res
    prob, alpha, p, w = _decode(best.x, N, d, kappa)
    return dict(N=N, d=d, kappa=kappa, ratio=-best.fun, alpha=alpha.tolist(), p=p.tolist(),
                **{k: v for k, v in theorem1(prob, alpha, p, w).items() if k in ("chi2", "gamma", "opt_gap")})


def search_table(cases, starts: int, maxiter: int, seed: int = 0) -> pd.DataFrame:
    """:func:`theorem1_search` for every (N, d, kappa) case, as a tidy table (round 0; metrics ratio,
    chi2, gamma, and alpha / p per client)."""
    settings.positive_int(starts, "starts")
    settings.positive_int(maxiter, "maxiter")
    rows = []
    for N, d, kappa in cases:
        r = theorem1_search(N, d, kappa, starts, seed, maxiter)
        base = dict(N=N, d=d, kappa=kappa, round=0, client=-1)
        rows += [dict(base, metric=m, value=float(r[m])) for m in ("ratio", "chi2", "gamma")]
        rows += [dict(base, metric=m, value=float(v), client=k) for m in ("alpha", "p") for k, v in enumerate(r[m])]
    return pd.DataFrame(rows)


# ================================================================================================
# the page's checks of Theorem 1
# ================================================================================================
TWO_CLIENT_CASES = [(0.5, 0.6), (0.5, 0.51), (0.7, 0.4), (0.3, 0.9)]      # (alpha_1, p_1)
TIGHT_TOL = 1e-9   # rounding: near the supremum p ~ alpha and w - w_B* is a difference of nearly equal numbers


def theorem1_verdict(th: pd.DataFrame) -> tuple[bool, str]:
    """Theorem 1 on the random problems of :func:`theorem1_sample`: the ratio never exceeds 1."""
    rmax = float(th["ratio"].max())
    return (rmax <= 1, f"Theorem 1 holds on all {len(th)} random problems: largest ratio {rmax:.3f}, "
            f"median {th['ratio'].median():.1e}")


def two_client_table(cases=TWO_CLIENT_CASES) -> pd.DataFrame:
    r"""Two clients in one dimension with equal curvature, per (alpha_1, p_1) of `cases`: the supremum over w of
    Theorem 1's ratio found by Nelder-Mead from three starts, beside :func:`two_client_sup`."""
    rows = []
    for a1, p1 in cases:
        prob = Quadratics(np.ones((2, 1, 1)), np.array([[0.0], [1.0]]))
        f = lambda w: -theorem1(prob, [a1, 1 - a1], [p1, 1 - p1], [w[0]])["ratio"]  # noqa: E731
        best = min((optimize.minimize(f, [x0], method="Nelder-Mead", options=dict(xatol=1e-12, fatol=1e-15))
                    for x0 in (-3.0, 0.3, 3.0)), key=lambda r: r.fun)
        rows.append(dict(alpha1=a1, p1=p1, numerical=-best.fun, formula=two_client_sup(a1, p1)))
    return pd.DataFrame(rows)


def tightness_verdict(two: pd.DataFrame, best: pd.DataFrame) -> tuple[bool, str]:
    """The search never finds a ratio above 1 (within :data:`TIGHT_TOL`) and the two-client formula matches the
    numerical supremum to 1e-8."""
    formula_err = float((two["numerical"] - two["formula"]).abs().max())
    top = float(best["largest ratio found"].max())
    return (top <= 1 + TIGHT_TOL and formula_err < 1e-8, f"largest ratio found by the search {top:.10f} "
            f"(<= 1 within rounding {TIGHT_TOL:g}); two-client formula matches the numerical supremum to "
            f"{formula_err:.1e}")


def theorem1_numbers(best: pd.DataFrame, th: pd.DataFrame) -> dict:
    """The numbers of the search for a tight case of Theorem 1 that the page's prose glues: the largest ratio at
    kappa = 1, the largest relative distance (%) to 1/(2 kappa) for kappa >= 2 (nan without such kappa), the
    median ratio on the random problems."""
    k1 = best[best["kappa"] == 1.0]["largest ratio found"]
    big = best[best["kappa"] >= 2]
    rel = float((big["largest ratio found"] * 2 * big["kappa"] - 1).abs().max()) if len(big) else float("nan")
    return dict(t1_k1=float(k1.max()), t1_rel=100 * rel, t1_median=float(th["ratio"].median()))


# ================================================================================================
# figure helpers
# ================================================================================================
def plot_theorem1(ax, th: pd.DataFrame) -> None:
    """Histogram of log10 of Theorem 1's ratio on the random problems (:func:`theorem1_sample`)."""
    ax.hist(np.log10(th["ratio"]), bins=60, color="tab:blue")
    ax.axvline(0, color="k", ls="--", lw=1, label="ratio = 1 (bound attained)")
    ax.set(xlabel=r"$\log_{10}\ \epsilon / (\epsilon_{opt} + \epsilon_{bias})$", ylabel="random problems",
           title=f"Theorem 1 on {len(th)} random quadratics (kappa from 1 to {th['kappa'].max():.1f})")
    ax.legend()


def plot_tightness(ax, best: pd.DataFrame) -> None:
    """The largest ratio found by the search (:func:`search_table`) against kappa, per (N, d), beside 1/(2 kappa)."""
    for (N, d), g in best.groupby(["N", "d"]):
        ax.plot(g["kappa"], g["largest ratio found"], "o-", label=f"search, N={N}, d={d}")
    k = np.linspace(1, best["kappa"].max(), 100)
    ax.plot(k, 1 / (2 * k), "k:", label=r"$1/(2\kappa)$")
    ax.axhline(1, color="k", ls="--", lw=0.8)
    ax.set(xlabel=r"$\kappa = L/\mu$ (tightest constants of the problem)", ylabel="largest ratio found",
           title="Theorem 1: how tight can the bound be?")
    ax.legend()
