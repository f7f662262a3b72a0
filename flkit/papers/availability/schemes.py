r"""Li et al.'s two sampling schemes and their variance: a piece of the page on sampling from the available
clients (:mod:`flkit.papers.availability.sampling`, document 001).

X. Li, K. Huang, W. Yang, S. Wang, Z. Zhang, *On the convergence of FedAvg on non-IID data*, ICLR 2020 (code
lx10077/fedavgpy@4a2e171, ``src/trainers/fedavg4.py``): scheme I draws N clients i.i.d. **with replacement**
with probabilities :math:`\alpha_i` and averages them with weight 1/N each; scheme II draws N clients
**uniformly without replacement** and weighs client i by :math:`\alpha_i M/N`. Both are unbiased for
:math:`\sum_i\alpha_i w^{(i)}`. The aggregate is :math:`c^\top W` with a random weight vector
:math:`c\in\mathbb R^M` (:func:`scheme_weights`); :func:`enumerate_scheme` lists every outcome with its
probability (exact with ``fractions.Fraction``), :func:`weight_covariance` gives Cov(c) in closed form, so that
:math:`\mathbb E\|c^\top W - \alpha^\top W\|^2 = \mathrm{tr}(W W^\top \mathrm{Cov}(c))`;
:func:`scheme_monte_carlo` draws c with the package's samplers. The page's tables, figure and numbers of these
checks are here too.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
from textwrap import fill
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from flkit import sample
from flkit.papers import settings

__all__ = ["SCHEMES", "check_N", "scheme_weights", "enumerate_scheme", "exact_moments", "weight_covariance",
           "scheme_monte_carlo", "scheme_tables", "variance_curves", "mc_view", "plot_variance", "li_numbers"]


def check_N(N, M: int) -> int:
    """N (clients picked per round) as an int in [1, M]; a ValueError otherwise."""
    if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or not 1 <= N <= M:
        raise ValueError(f"N (clients picked per round) must be an int in [1, {M}], got {N!r}")
    return int(N)


SCHEMES = {
    "I": "N draws with replacement, P(i) = alpha_i; weight 1/N per draw",
    "II": "N distinct clients uniformly; weight alpha_i M / N",
}


def _check_scheme(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {sorted(SCHEMES)} (Li et al., ICLR 2020)")
    return scheme


def _check_alpha(alpha) -> None:
    a = [float(v) for v in alpha]
    if not a or any(v <= 0 for v in a) or abs(sum(a) - 1) > 1e-9:
        raise ValueError(f"alpha must be positive weights summing to 1, got {list(alpha)}")


def scheme_weights(scheme: str, counts, alpha, N: int) -> np.ndarray:
    r"""The random weight vector c of an aggregate :math:`c^\top W`: scheme I :math:`c_i = m_i/N` (m_i the
    times client i was drawn), scheme II :math:`c_i = 1_{i\in S}\,\alpha_i M/N`. counts (..., M)."""
    _check_scheme(scheme)
    m = np.asarray(counts, dtype=float)
    a = np.asarray(alpha, dtype=float)
    if m.shape[-1] != a.size:
        raise ValueError(f"counts has {m.shape[-1]} clients, alpha {a.size}")
    return m / N if scheme == "I" else (m > 0) * a * a.size / N


def enumerate_scheme(alpha, N: int, scheme: str) -> list[tuple]:
    """Every outcome of one round as (probability, weight vector c as a tuple), in Python arithmetic (exact
    with Fractions). Scheme I: the multisets of N draws, probability N!/prod m_i! prod alpha_i^m_i; scheme II:
    the C(M, N) subsets, probability 1/C(M, N)."""
    _check_scheme(scheme)
    _check_alpha(alpha)
    M = len(alpha)
    N = check_N(N, M)
    out = []
    if scheme == "I":
        for combo in itertools.combinations_with_replacement(range(M), N):
            m = [combo.count(i) for i in range(M)]
            prob = math.factorial(N) // math.prod(math.factorial(v) for v in m)
            for i, v in enumerate(m):
                prob = prob * alpha[i] ** v
            out.append((prob, tuple(Fraction(v, N) if isinstance(alpha[0], Fraction) else v / N for v in m)))
    else:
        total = math.comb(M, N)
        for S in itertools.combinations(range(M), N):
            prob = Fraction(1, total) if isinstance(alpha[0], Fraction) else 1 / total
            c = tuple(alpha[i] * M / N if i in S else 0 * alpha[i] for i in range(M))
            out.append((prob, c))
    return out


def exact_moments(alpha, N: int, scheme: str, W) -> tuple:
    r"""(E[c^T W], E||c^T W - alpha^T W||^2) by enumeration; W (M, d) a list of rows (Fractions stay exact)
    or an array (floats)."""
    outcomes = enumerate_scheme(alpha, N, scheme)
    if isinstance(W, np.ndarray) or torch.is_tensor(W):
        Wn = np.asarray(W, dtype=float)
        P = np.array([float(p) for p, _ in outcomes])
        C = np.array([[float(v) for v in c] for _, c in outcomes])
        target = np.asarray([float(a) for a in alpha]) @ Wn
        D = C - np.asarray([float(a) for a in alpha])
        G = Wn @ Wn.T
        return P @ C @ Wn, float(P @ np.einsum("si,ij,sj->s", D, G, D)), target
    d = len(W[0])
    mean = [sum(p * sum(c[i] * W[i][j] for i in range(len(c))) for p, c in outcomes) for j in range(d)]
    target = [sum(alpha[i] * W[i][j] for i in range(len(alpha))) for j in range(d)]
    var = sum(p * sum((sum(c[i] * W[i][j] for i in range(len(c))) - target[j]) ** 2 for j in range(d))
              for p, c in outcomes)
    return mean, var, target


def weight_covariance(alpha, N: int, scheme: str) -> np.ndarray:
    r"""Cov(c) in closed form. Scheme I: :math:`(\mathrm{diag}(\alpha) - \alpha\alpha^\top)/N` (multinomial);
    scheme II: :math:`c_i = \frac{M\alpha_i}{N}1_{i\in S}` with :math:`P(i\in S) = \frac NM`,
    :math:`P(i, j\in S) = \frac{N(N-1)}{M(M-1)}`."""
    _check_scheme(scheme)
    _check_alpha(alpha)
    a = np.asarray(alpha, dtype=float)
    M = a.size
    N = check_N(N, M)
    if scheme == "I":
        return (np.diag(a) - np.outer(a, a)) / N
    pi = N / M
    pij = N * (N - 1) / (M * (M - 1)) if M > 1 else pi
    cov_ind = np.full((M, M), pij - pi * pi)
    np.fill_diagonal(cov_ind, pi * (1 - pi))
    s = a * M / N
    return cov_ind * np.outer(s, s)


def scheme_monte_carlo(sizes, N: int, scheme: str, *, runs: int, draws_per_run: int, seed: int) -> np.ndarray:
    """runs x draws_per_run independent weight vectors c (rows), drawn by the package's samplers among M
    always-available clients with data sizes `sizes` (alpha = sizes / sum): scheme I
    ``flkit.sample.ProportionalK(N, replace=True)``, scheme II ``flkit.sample.UniformK(N)``. Run r uses the
    seed ``seed * 100_000 + r`` (its own "selection" stream)."""
    _check_scheme(scheme)
    settings.positive_int(runs, "runs")
    settings.positive_int(draws_per_run, "draws_per_run")
    s = np.asarray(sizes, dtype=float)
    M = s.size
    N = check_N(N, M)
    sampler = sample.ProportionalK(N, replace=True) if scheme == "I" else sample.UniformK(N)
    state = sampler.init(runs, M, torch.as_tensor(np.broadcast_to(s, (runs, M)).copy()),
                         [seed * 100_000 + r for r in range(runs)])
    avail = torch.ones(runs, M, dtype=torch.bool)
    out = np.empty((draws_per_run, runs, M))
    for t in range(draws_per_run):
        counts, state = sampler.select(state, t, avail)
        out[t] = counts.numpy()
    return scheme_weights(scheme, out.reshape(-1, M), s / s.sum(), N)


# ================================================================================================
# the page's tables, figure and numbers
# ================================================================================================
def scheme_tables(vectors: dict, alpha, Ns: Sequence[int], *, enumerate_max_N: int, runs: int,
                  draws_per_run: int, seed: int, sizes) -> tuple[pd.DataFrame, pd.DataFrame]:
    r"""Both schemes on given client vectors (``vectors``: name -> (M, d) array, e.g. the local models and the
    updates of one round). Returns

    * ``exact``: per (vectors, scheme, N <= enumerate_max_N) the relative bias
      :math:`\|\mathbb E[c^\top W] - \alpha^\top W\|/\|\alpha^\top W\|` by enumeration and the variance
      :math:`\mathbb E\|c^\top W - \alpha^\top W\|^2` by enumeration and in closed form;
    * ``mc``: per (vectors, scheme, N) with ``runs x draws_per_run`` draws of the package's samplers: the
      chi-square statistic of :math:`\bar c = \alpha` with the exact covariance (rank r degrees of freedom) and
      its p-value, the relative error of the mean aggregate and its expected size under unbiasedness
      :math:`\sqrt{\mathrm{tr}(G\Sigma)/D}/\|\alpha^\top W\|`, the Monte Carlo variance with its standard error
      and the exact one."""
    from scipy import stats
    a = np.asarray(alpha, dtype=float)
    ex, mc = [], []
    for scheme in ("I", "II"):
        for N in Ns:
            C = scheme_monte_carlo(sizes, N, scheme, runs=runs, draws_per_run=draws_per_run, seed=seed)
            Sig = weight_covariance(a, N, scheme)
            D = len(C)
            dev = C.mean(0) - a
            evals, evecs = np.linalg.eigh(Sig)
            keep = evals > 1e-12 * max(1e-300, evals.max())
            r = int(keep.sum())
            proj = evecs[:, keep].T @ dev
            chi2 = float(D * (proj ** 2 / evals[keep]).sum()) if r else float("nan")
            pval = float(stats.chi2.sf(chi2, r)) if r else float("nan")
            for name, W in vectors.items():
                W = np.asarray(W, dtype=float)
                G = W @ W.T
                tnorm = float(np.linalg.norm(a @ W))
                err2 = np.einsum("si,ij,sj->s", C - a, G, C - a)
                var = float(np.trace(G @ Sig))
                mc.append(dict(vectors=name, scheme=scheme, N=N, draws=D, chi2=chi2, dof=r, p_value=pval,
                               rel_mean_error=float(np.sqrt(max(dev @ G @ dev, 0.0))) / tnorm,
                               rel_mean_error_scale=np.sqrt(var / D) / tnorm,
                               var_mc=float(err2.mean()), var_mc_se=float(err2.std(ddof=1) / np.sqrt(D)),
                               var_exact=var))
                if N <= enumerate_max_N:
                    mean, v_enum, target = exact_moments(list(a), N, scheme, W)
                    ex.append(dict(vectors=name, scheme=scheme, N=N, outcomes=len(enumerate_scheme(list(a), N, scheme)),
                                   rel_bias=float(np.linalg.norm(mean - target)) / tnorm, var_enum=v_enum,
                                   var_closed=var))
    return pd.DataFrame(ex), pd.DataFrame(mc)


def variance_curves(vectors: dict, alpha) -> pd.DataFrame:
    """Exact E||c^T W - alpha^T W||^2 for every N = 1..M, both schemes, every set of vectors."""
    a = np.asarray(alpha, dtype=float)
    rows = []
    for name, W in vectors.items():
        G = np.asarray(W, dtype=float) @ np.asarray(W, dtype=float).T
        for scheme in ("I", "II"):
            for N in range(1, a.size + 1):
                var = float(np.trace(G @ weight_covariance(a, N, scheme)))
                rows.append(dict(vectors=name, scheme=scheme, N=N, var=var))
    return pd.DataFrame(rows)


def mc_view(mc_tab: pd.DataFrame, vectors) -> pd.DataFrame:
    """The Monte Carlo test of both schemes (:func:`scheme_tables`) for reading: per (scheme, N) the chi-square
    test of unbiasedness, and per set of vectors the relative error of the mean aggregate beside its scale."""
    show = mc_tab[mc_tab["vectors"] == "models"].set_index(["scheme", "N"])[["chi2", "dof", "p_value"]]
    for name in vectors:
        g = mc_tab[mc_tab["vectors"] == name].set_index(["scheme", "N"])
        show[f"rel_mean_error ({name})"] = g["rel_mean_error"]
        show[f"rel_mean_error_scale ({name})"] = g["rel_mean_error_scale"]
    return show


def plot_variance(ax, vc: pd.DataFrame, mc_tab: pd.DataFrame, alpha, delta) -> None:
    """Li et al.'s two aggregates on one round: exact variance against N (lines, :func:`variance_curves`), the
    Monte Carlo (dots, +-3 s.e.) and the squared norm of the full-participation step."""
    style = {("I", "models"): ("tab:blue", "-", "scheme I (with replacement), models"),
             ("I", "updates"): ("tab:cyan", ":", "scheme I, updates (the same: weights sum to 1)"),
             ("II", "models"): ("tab:red", "-", "scheme II (uniform, weights alpha M/N), models"),
             ("II", "updates"): ("tab:orange", "--", "scheme II, updates")}
    for (scheme, name), (col, ls, lab) in style.items():
        g = vc[(vc["scheme"] == scheme) & (vc["vectors"] == name)]
        ax.plot(g["N"], g["var"], ls, color=col, label=lab)
        m = mc_tab[(mc_tab["scheme"] == scheme) & (mc_tab["vectors"] == name)]
        ax.errorbar(m["N"], m["var_mc"], yerr=3 * m["var_mc_se"], fmt="o", ms=4, color=col)
    ax.axhline(float(np.sum((alpha @ delta) ** 2)), color="grey", lw=0.8, ls="-.",
               label=r"$\|\sum_i\alpha_i\Delta^{(i)}\|^2$ (the full-participation step)")
    ax.set(yscale="log", xlabel="clients per round N (of M = 10)",
           ylabel=r"$\mathbb{E}\|w_{k+1} - \sum_i\alpha_i w^{(i)}\|^2$")
    ax.legend()
    ax.set_title(fill("Variance of Li et al.'s two aggregates on one MNIST round (lines exact, dots Monte Carlo "
                      "+-3 s.e.)", 80), fontsize=9.5)


def li_numbers(vc: pd.DataFrame, alpha) -> dict:
    """The numbers of the section on Li et al.'s schemes that the page's prose glues: at N = 2 (else the smallest
    N) the variance ratios of scheme II to scheme I, the range of scheme II's total weight over the subsets, the
    number of N where scheme II's variance exceeds scheme I's (updates), and the extra variance of aggregating
    models rather than updates."""
    v = vc.pivot_table(index="N", columns=["scheme", "vectors"], values="var")
    n2 = 2 if 2 in v.index else int(v.index[0])
    sw = [float((alpha[list(Sk)] * len(alpha) / n2).sum()) for Sk in itertools.combinations(range(len(alpha)), n2)]
    cross_n = int((v[("II", "updates")] > v[("I", "updates")]).sum())
    return dict(n2=n2, li_upd=v.loc[n2, ("II", "updates")] / v.loc[n2, ("I", "updates")],
                li_mod=v.loc[n2, ("II", "models")] / v.loc[n2, ("I", "models")], li_a_min=alpha.min(),
                li_a_max=alpha.max(), li_sw_min=min(sw), li_sw_max=max(sw), li_cross=cross_n, li_cross1=cross_n + 1,
                li_add=100 * (v.loc[n2, ("II", "models")] / v.loc[n2, ("II", "updates")] - 1))
