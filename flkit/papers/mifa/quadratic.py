"""The quadratic page of the MIFA chapter (``notebooks/mifa/quadratic.ipynb``): Figures 1-3 of document 002 on the
document's "simple quadratic" (10 clients, one local gradient step), the momentum sweep that answers the
document's question after Figure 2, and the words of the page's "What we found".

The page's runs are stored by configuration (experiments "quadratic_beta_sweep" and "quadratic_curves"); the
configurations built here are those the page has always stored its runs under.
"""
from __future__ import annotations

from textwrap import fill

import numpy as np
import pandas as pd
import torch

from flkit import plots, results
from flkit.papers.mifa import items
from flkit.papers.mifa.common import (FIGURES, PALETTE, and_list, diverged_runs, momentum_answer, outcomes,
                                      p_words, page_profile, plot_curves, summary, umifam_claim_word, where)
from flkit.papers.mifa.methods import LABELS, simulate
from flkit.tasks import quadratic_task

__all__ = ["PROFILES", "profile", "PROBLEM", "MOMENTUM", "METHODS", "TARGET_REL", "task", "initial_gap",
           "problem_table", "beta_sweep_configs", "beta_sweep", "figure_beta", "curve_configs", "curves",
           "rounds_to_target", "figure", "figure_values", "plot_beta_sweep", "best_beta_table", "rounds_table",
           "tuned_table", "findings"]

# "smoke": seconds, for CI; "paper": the setting of the document (10 clients, eta 0.02)
PROFILES = {
    "smoke": dict(seeds=[0, 1], p_values=[0.01, 0.1, 0.5], rounds={0.01: 600, 0.1: 300, 0.5: 200},
                  eta=0.02, betas=[0.0, 0.5, 0.9]),
    "paper": dict(seeds=list(range(10)), p_values=[0.01, 0.1, 0.5], rounds={0.01: 10000, 0.1: 2000, 0.5: 2000},
                  eta=0.02, betas=[0.0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95]),
}


def profile(name: str, **overrides) -> dict:
    """The page's settings under profile `name` ("smoke" or "paper"), with the notebook's parameters as
    `overrides` (None keeps the profile's value): seeds, p_values (Figures 1-3), rounds (p -> T), eta, betas
    (the momentum grid of the sweep). Checked before any work (`common.page_profile`); numbers come back as
    the page uses them (seeds ints, probabilities and steps floats, rounds a dict float -> int)."""
    cfg = page_profile(PROFILES, "quadratic", name, overrides)
    cfg = dict(cfg, seeds=[int(s) for s in cfg["seeds"]], p_values=[float(p) for p in cfg["p_values"]],
               rounds={float(k): int(v) for k, v in cfg["rounds"].items()}, eta=float(cfg["eta"]),
               betas=[float(b) for b in cfg["betas"]])
    return cfg


# ================================================================================================
# the problem
# ================================================================================================
PROBLEM = dict(generator="flkit.datasets.quadratic_clients", n=10, dim=10, seed=0, mu=0.2, L=2.0,
               heterogeneity=1.0, local_steps=1, w0=0.0)
MOMENTUM = ["mifam", "umifam", "umifam_saga"]
METHODS = ["fedavg_is", "fedavg", "mifa", "umifa", "mifam", "umifam", "umifa_saga", "umifam_saga", "fedgd"]
TARGET_REL = 1e-10          # the target of "rounds to": 1e-10 x the initial gap


def task(problem: dict = PROBLEM):
    """The document's simple quadratic (`flkit.tasks.quadratic_task` with the settings of `problem`)."""
    return quadratic_task(n=problem["n"], dim=problem["dim"], seed=problem["seed"], mu=problem["mu"],
                          L=problem["L"], heterogeneity=problem["heterogeneity"])


def initial_gap(task) -> float:
    """f(w_0) - f* at w_0 = 0."""
    w0 = torch.zeros(1, task.dim, dtype=torch.float64)
    return float(task.metrics(w0)["gap"][0])


def problem_table(task, eta: float) -> pd.DataFrame:
    """The problem's numbers, one row each (clients, dimension, curvatures, initial gap, heterogeneity at the
    optimum, MIFA's step-size bound and the step used)."""
    g_star = task.problem.client_grads(task.problem.w_star)
    return pd.Series({
        "clients n": task.n, "dimension d": task.dim, "L (largest curvature of any f_i)": task.L,
        "mu (smallest eigenvalue of the global Hessian)": task.problem.mu,
        "f(w_0) - f*": initial_gap(task),
        "max_i ||grad f_i(w*)||^2 (heterogeneity at the optimum)": float((g_star ** 2).sum(-1).max()),
        "MIFA step-size bound 1/(L n)": 1 / (task.L * task.n), "eta": eta,
    }).to_frame("value")


# ================================================================================================
# the momentum sweep and the beta of Figures 1-3
# ================================================================================================
def _run_beta_sweep(task, config: dict) -> pd.DataFrame:
    runs = pd.DataFrame([(s, b) for b in config["betas"] for s in config["seeds"]], columns=["seed", "beta"])
    res = simulate(task, config["methods"], seeds=runs["seed"].tolist(), beta=runs["beta"].to_numpy(),
                   eta=config["eta"], p=config["p"], rounds=config["rounds"], every=config["rounds"],
                   target=("gap", config["target"]))
    return res.outcomes(runs)


def beta_sweep_configs(cfg: dict, gap0: float) -> list[dict]:
    """One stored run per p: every momentum method at every beta of the grid and seed, to 1e-10 x the
    initial gap."""
    return [dict(experiment="quadratic_beta_sweep", problem=PROBLEM, p=p, eta=cfg["eta"], rounds=cfg["rounds"][p],
                 seeds=cfg["seeds"], betas=cfg["betas"], methods=MOMENTUM, target_rel=TARGET_REL,
                 target=TARGET_REL * gap0) for p in cfg["p_values"]]


def beta_sweep(task, cfg: dict, gap0: float, store) -> pd.DataFrame:
    """The momentum sweep's outcomes (hit round, client updates, per method, beta, seed and p), read from
    `store` or computed and stored."""
    return results.sweep(beta_sweep_configs(cfg, gap0), lambda c: _run_beta_sweep(task, c), store, progress=False)


def figure_beta(hits: pd.DataFrame, betas, beta: float | None = None) -> tuple[float, dict]:
    """The beta of Figures 1-3: the largest of the grid at which every run of MIFAm and U-MIFAm (SAGA memory)
    reaches the target at every p (`beta` when given), and the page's numbers on it."""
    reached_all = hits.groupby(["method", "beta"])["value"].apply(lambda v: bool((v >= 0).all()))
    ok_betas = [b for b in betas if all(reached_all.get((m, b), False) for m in ("mifam", "umifam_saga"))]
    if beta is None:
        beta = max(ok_betas) if ok_betas else 0.0
    return beta, dict(q_ok_betas=", ".join(f"{b:g}" for b in ok_betas) or "none", q_ok_max=max(ok_betas, default=0.0),
                      q_beta=beta)


# ================================================================================================
# Figures 1-3
# ================================================================================================
def _run_curves(task, config: dict) -> pd.DataFrame:
    res = simulate(task, config["methods"], seeds=config["seeds"], eta=config["eta"], p=config["p"],
                   beta=config["beta"], rounds=config["rounds"], every=max(1, config["rounds"] // 50),
                   target=("gap", config["target"]), stop_early=False)
    runs = pd.DataFrame({"seed": config["seeds"]})
    df = pd.concat([res.tidy(runs).query("metric == 'gap'"), res.outcomes(runs).query("metric == 'hit_round'")])
    return df.drop(columns="run")


def curve_configs(cfg: dict, beta: float, gap0: float) -> dict[float, dict]:
    """{p: the stored run of that figure}: every method of :data:`METHODS` on every seed."""
    return {p: dict(experiment="quadratic_curves", problem=PROBLEM, p=p, eta=cfg["eta"], beta=beta,
                    rounds=cfg["rounds"][p], seeds=cfg["seeds"], methods=METHODS, target=TARGET_REL * gap0)
            for p in cfg["p_values"]}


def curves(task, cfg: dict, beta: float, gap0: float, store) -> dict[float, pd.DataFrame]:
    """{p: the figure's tidy runs} (gap per recorded round, hit round per seed), read from `store` or computed."""
    return {p: results.sweep([c], lambda c: _run_curves(task, c), store, progress=False)
            for p, c in curve_configs(cfg, beta, gap0).items()}


def rounds_to_target(data: dict, p: float) -> pd.Series:
    """Median (over seeds) first round with gap <= 1e-10 x initial gap, at the beta of the figures (inf: never)."""
    h = data[p][data[p]["metric"] == "hit_round"]
    med = h.groupby("method", sort=False)["value"].apply(lambda v: np.median(np.where(v >= 0, v, np.inf)))
    return med.rename(f"p={p}")


def figure(data: dict, p: float, number: int, cfg: dict, beta: float) -> pd.DataFrame:
    """Figure `number` of the document (ours) on the current matplotlib figure, and its table: per method the
    median final gap, the runs that diverged and the median rounds to the target."""
    df = data[p]
    fig, ax = plots.figure(1, 1, row_height=3.2)
    ax = ax[0, 0]
    plot_curves(df, "gap", ax=ax, methods=METHODS)
    ax.set_ylabel(r"$f(w_t) - f^\star$")
    ax.set_title(fill(f"Fig. {number} of document 002 (ours): quadratic, n=10, p={p}, eta={cfg['eta']}, beta={beta}, "
                      f"tau=1, {len(cfg['seeds'])} seeds", 75), fontsize=9)
    tab = summary(df, "gap")
    tab["rounds to 1e-10 x initial gap (median)"] = rounds_to_target(data, p).reindex(tab.index)
    return tab


def figure_values(tab: pd.DataFrame, number: int, rounds: int, gap0: float) -> dict:
    """The figure's numbers for the prose below it (q<number>_...)."""
    fin, reach = tab["final (median)"], tab["rounds to 1e-10 x initial gap (median)"]
    div = [LABELS[m] for m in tab.index if not tab.loc[m, "diverged runs"].startswith("0/")]
    return {f"q{number}_T": rounds, f"q{number}_div": and_list(div) or "none",
            f"q{number}_umifa_trend": "grows" if fin["umifa"] > gap0 else "does not grow",
            **{f"q{number}_{m}": fin[m] for m in ("fedavg_is", "fedavg", "mifa", "umifa")},
            **{f"q{number}_{m}_rounds": reach[m] for m in ("mifa", "umifa_saga", "fedgd")}}


# ================================================================================================
# the momentum sweep: figure and tables
# ================================================================================================
def _median_rounds(v):
    return np.median(np.where(v >= 0, v, np.inf))


def plot_beta_sweep(hits: pd.DataFrame, cfg: dict):
    """The sweep's median rounds to the target against beta, one panel per p (bars: min-max over the seeds
    that reach it; open marker: some runs never do)."""
    p_values, rounds = cfg["p_values"], cfg["rounds"]
    fig, axes = plots.figure(1, len(p_values), row_height=3.0, sharey=True)
    for ax, p in zip(axes[0], p_values):
        h = hits[hits["p"] == p]
        for m in MOMENTUM:
            for b, g in h[h["method"] == m].groupby("beta"):
                v = g["value"].to_numpy()
                fin = v[v >= 0]
                med = _median_rounds(v)
                if not np.isfinite(med):
                    continue
                full = len(fin) == len(v)
                ax.errorbar([b], [med], yerr=[[med - fin.min()], [fin.max() - med]], marker="o", capsize=3,
                            color=PALETTE[m], mfc=PALETTE[m] if full else "white")
            med = h[h["method"] == m].groupby("beta")["value"].apply(_median_rounds)
            fin = np.isfinite(med)
            ax.plot(med.index[fin], med[fin], "--", color=PALETTE[m], label=LABELS[m])
        ax.set_xlabel(r"momentum $\beta$")
        ax.set_yscale("log")
        ax.set_title(f"p={p}, T={rounds[p]}", fontsize=9)
    axes[0][0].set_ylabel("rounds to gap <= 1e-10 x initial")
    fig.legend(*axes[0][-1].get_legend_handles_labels(), loc="outside lower center", ncol=4)
    fig.suptitle(fill(f"Momentum sweep (our addition; answers the question after Fig. 2 of document 002): quadratic, "
                      f"n=10, eta={cfg['eta']}, {len(cfg['seeds'])} seeds; open marker: some runs never reach the "
                      f"target", 100), fontsize=9)
    return fig


def best_beta_table(hits: pd.DataFrame, p_values) -> tuple[pd.DataFrame, dict]:
    """Per p and momentum method: the best beta of the sweep (fewest median rounds), the rounds there and at
    beta = 0, and the speed-up; with {(p, method): (best beta, its median rounds)}."""
    best_beta, rows = {}, []
    for p in p_values:
        for m in MOMENTUM:
            med = hits[(hits["p"] == p) & (hits["method"] == m)].groupby("beta")["value"].apply(_median_rounds)
            b = med.idxmin() if np.isfinite(med).any() else None
            if b is not None:
                best_beta[(p, m)] = (b, med[b])
            rows.append({"p": p, "method": LABELS[m], "best beta": "never reached" if b is None else f"{b:g}",
                         "median rounds at it": np.inf if b is None else med[b], "at beta = 0": med.get(0.0, np.inf),
                         "speed-up over beta = 0": np.nan if b is None else med.get(0.0, np.inf) / med[b]})
    return pd.DataFrame(rows).set_index(["p", "method"]), best_beta


def rounds_table(data: dict, p_values, beta: float) -> pd.DataFrame:
    """Median rounds to the target per method (rows) and p (columns), at the figures' beta."""
    tab = pd.DataFrame({f"p={p}": rounds_to_target(data, p) for p in p_values})
    tab.index = [LABELS[m] for m in tab.index]
    return tab.rename_axis(f"beta = {beta} for all momentum methods")


def tuned_table(best_beta: dict, p_values) -> pd.DataFrame:
    """Each momentum method at its best beta: median rounds (beta), per p."""
    tuned = pd.DataFrame({f"p={p}": {LABELS[m]: (f"{best_beta[(p, m)][1]:.0f} (beta={best_beta[(p, m)][0]:g})"
                                                 if (p, m) in best_beta else "never")
                                     for m in MOMENTUM} for p in p_values})
    return tuned.rename_axis("each momentum method at its best beta")


# ================================================================================================
# "What we found"
# ================================================================================================
def findings(checks: dict, data: dict, mom: pd.DataFrame, best_beta: dict, p_values) -> dict:
    """The words and numbers of the page's "What we found" (q_...), read from its checks (`items.quadratic_checks`),
    the figures' runs and the sweep's tables."""
    Q, B = items.MOMENTUM, items.UMIFAM_BETTER

    def o(item, starts, required=True):
        return outcomes(checks, item, starts, required)

    def pw(ps):
        return p_words(ps, p_values)

    floor = {p: v for p in data for p, v in o(FIGURES["quadratic"][p], "FedAvg (IS) ends above MIFA").items()}
    mom_ps = {m: where(o(Q, f"{LABELS[m]}: momentum"), o(Q, f"{LABELS[m]} at its best", False))
              for m in ("mifam", "umifam_saga")}
    gain = [mom.loc[(p, LABELS[m]), "speed-up over beta = 0"] for m, ps in mom_ps.items() for p in ps]
    lit, saga = where(o(B, "U-MIFAm as written is the fastest")), o(B, "U-MIFAm (SAGA memory) at its best", False)
    lit_div = [diverged_runs(data[p], ["umifa", "umifam"]) for p in p_values if p < 0.5]
    return dict(
        q_floor=pw(where(floor)), q_mom_mifam=pw(mom_ps["mifam"]), q_mom_saga=pw(mom_ps["umifam_saga"]),
        q_mom_factor=" to ".join(dict.fromkeys((f"{min(gain):.1f}", f"{max(gain):.1f}"))) if gain else "n/a",
        q_mom_lit=pw(where(o(Q, "U-MIFAm: momentum"))),
        q_mom_zero=pw([p for p in p_values
                       if all(best_beta.get((p, m), (None,))[0] == 0 for m in ("mifam", "umifam_saga"))]),
        q_mom_answer=momentum_answer(sorted(set(mom_ps['mifam']) | set(mom_ps['umifam_saga'])), p_values),
        q_lit_fastest=pw(lit), q_lit_reach=pw([p for p in p_values if (p, "umifam") in best_beta]),
        q_lit_div=sum(k for k, _ in lit_div), q_lit_runs=sum(n for _, n in lit_div),
        q_saga_beats=pw(where(saga)), q_saga_loses=pw(where(saga, ok=("contradicted",))),
        q_saga_tie=pw(where(saga, ok=("not testable at this scale",))),
        q_saga_fastest=pw(where(o(B, "U-MIFAm with SAGA memory, at its best beta"))),
        q_claim=umifam_claim_word(lit, where(saga), p_values),
        q_n_ok=sum(c.ok for cs in checks.values() for c in cs), q_n_checks=sum(len(cs) for cs in checks.values()))

