r"""The notes' claim "with a variable number of clients the update is quite noisy, so gamma_s must be small"
(document 001): a piece of the page on aggregation weights (:mod:`flkit.papers.availability.weights`).

The unnormalized rule with :math:`q = \alpha/\pi` (flkit's ``KnownP``) under independent Bernoulli availability:
its largest mean-square-stable server step (exact, by enumerating the availability patterns) against that of
the same expected update with fixed weights, its closed form on a problem with one Hessian for all clients,
and the error floors through ``flkit.fl.run`` at fractions of the limit; the page's figure and numbers.
"""
from __future__ import annotations

from textwrap import fill

import numpy as np
import pandas as pd

from flkit import aggregate, fl, participation, plots
from flkit.datasets import QuadraticProblem
from flkit.papers import settings
from flkit.papers.availability import common
from flkit.papers.availability.moments import eta_max, expected_sq_distance, total_weight_moments
from flkit.papers.availability.weights import WeightedQuadratic, configs, linear_pi

__all__ = ["common_hessian", "server_step_table", "edge_runs", "server_runs", "server_step_checks", "plot_server_step",
           "server_view", "server_numbers"]


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
    res = fl.run(task, algs, seeds=list(seeds), rounds=rounds,
                 availability=lambda s: participation.bernoulli(pi, rounds, s),
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


def server_runs(cfg: dict, task: WeightedQuadratic, pi, where) -> pd.DataFrame:
    """:func:`edge_runs` of the weights page's profile `cfg` (``weights.profile``), read from the store `where` or
    made."""
    SV = cfg["server"]
    return common.cached(where, configs(cfg)["server"],
                         lambda: edge_runs(task, pi, SV["fractions"], SV["rounds"], SV["seeds"]))


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
        (below, "with a variable number of available clients the largest mean-square-stable gamma_s of the "
                "unnormalized rule is below that of the same expected update with fixed weights, at every pi_min < 1 "
                f"(smallest ratio {lo:.3f}), and equal at pi_min = 1", lo, 1.0),
        (mono, "the largest stable gamma_s falls as the availabilities spread (pi_min from 1 down to "
               f"{t['pi_min'].min():g})", float(t["gamma_max"].iloc[-1]), float(t["gamma_max"].iloc[0])),
        (dev <= 1e-12, "with one Hessian for all clients the ratio is exactly E[S]^2 / E[S^2], S the total weight of "
                       f"the available clients (max deviation {dev:.1e})", dev, 0.0),
        (z <= 4, f"through fl.run, the floors at fractions {sorted(m.index)} of the limit match the exact recursion "
                 f"(max |z| = {z:.2f})", z, 4.0),
    ]


def plot_server_step(sst: pd.DataFrame, ed: pd.DataFrame, P: dict, SV: dict):
    """Left: the largest mean-square-stable server step against pi_min (:func:`server_step_table`), relative to
    the limit with fixed weights; right: the floors at fractions of it (:func:`edge_runs`), measured and exact.
    Returns the figure."""
    fig, axes = plots.figure(1, 2, row_height=3.5)
    axes = axes[0]
    axes[0].plot(sst["pi_min"], sst["ratio"], "o-", label="clients' own Hessians (exact)")
    axes[0].plot(sst["pi_min"], sst["ratio_common"], "s-", label="one Hessian for all (exact)")
    axes[0].plot(sst["pi_min"], sst["ratio_closed"], "k:", label=r"$\mathbb{E}[S]^2/\mathbb{E}[S^2]$")
    axes[0].set(xscale="log", xlabel=r"$\pi_{\min}$ (availabilities from $\pi_{\min}$ to 1)",
                ylabel=r"$\gamma_s^{\max}$ / limit with fixed weights")
    axes[0].legend(fontsize=8)
    m = ed[ed["metric"] == "tail_dist2"].groupby("fraction")["value"].agg(["mean", "sem"])
    ex = ed[ed["metric"] == "exact_tail_dist2"].set_index("fraction")["value"]
    axes[1].errorbar(m.index, m["mean"], yerr=3 * m["sem"], fmt="o", label="measured (±3 s.e.)")
    axes[1].plot(ex.index, ex.values, "k_", ms=12, label="exact")
    axes[1].set(yscale="log", xlabel=r"$\gamma_s / \gamma_s^{\max}$",
                ylabel=r"floor: mean $\|w_k - w_T^\star\|^2$, 2nd half")
    axes[1].legend(fontsize=8)
    fig.suptitle(fill(f"Variable number of clients and the server step (document 001): N = {P['n']}, q = α/π; "
                      f"right: π_min = {P['pi_min']}, {SV['rounds']} rounds, {len(SV['seeds'])} seeds", 100),
                 fontsize=9.5)
    return fig


def server_view(sst: pd.DataFrame) -> pd.DataFrame:
    """:func:`server_step_table` for reading, by pi_min (4 decimals)."""
    return sst[["pi_min", "VarS", "gamma_max", "gamma_fixed", "ratio", "ratio_common", "ratio_closed",
                "gamma_max_normalized"]].set_index("pi_min").round(4)


def server_numbers(sst: pd.DataFrame, ed: pd.DataFrame, pi_min: float) -> dict:
    """The numbers of the server-step section that the page's prose glues (`pi_min`: the page's problem's)."""
    ex = ed[ed["metric"] == "exact_tail_dist2"].set_index("fraction")["value"]
    r0 = sst.set_index("pi_min")
    return dict(gs_fixed=float(r0["gamma_fixed"].iloc[0]), gs_page=float(r0.loc[pi_min, "gamma_max"]),
                gs_ratio_page=float(r0.loc[pi_min, "ratio"]), gs_pimin=float(r0.index.min()),
                gs_ratio_min=float(r0["ratio"].min()), gs_ratio_common_min=float(r0["ratio_common"].min()),
                gs_norm_min=float(r0["gamma_max_normalized"].min()), gs_page_pimin=pi_min,
                gs_floor_lo=float(ex.iloc[0]), gs_floor_hi=float(ex.iloc[-1]), gs_f_lo=float(ex.index[0]),
                gs_f_hi=float(ex.index[-1]))
