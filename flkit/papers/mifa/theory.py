r"""The theory page of the MIFA chapter (``notebooks/mifa/theory.ipynb``): the analysis of document 002 measured.

This module holds the page's settings and its first sections: the error floors of partial participation
(FedAvg with importance sampling) and MIFA's zero floor, the bias of the stored entries and the error term
:math:`\mathbb E\|\nabla f - G_t\|^2` (Monte Carlo of one round), the stored-entry error of U-MIFA as written, the
one-step inequalities of the analysis, and the words of the page's "What we found". The step-size conditions
and the complexity tables are `flkit.papers.mifa.complexity`; the experiments `flkit.papers.mifa.experiments`;
the one-step inequalities `flkit.papers.mifa.bounds`; the test problems `flkit.papers.mifa.problems`.

Each section reads its runs from the results store (configurations as the page has always stored them) or
computes and stores them.
"""
from __future__ import annotations

from textwrap import fill

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import SymmetricalLogLocator
from scipy import stats

from flkit import plots
from flkit.papers.mifa import bounds, experiments, items, problems
from flkit.papers.mifa.common import (PALETTE, cached, check_word, fit_slope, item_word, n_ticks, outcomes, p_words,
                                      page_profile, where)
from flkit.papers.mifa.methods import LABELS
from flkit.results import melt_wide, pivot_wide

__all__ = ["PROFILES", "profile", "floor_runs", "floor_table", "plot_floor", "floor_values", "FLOOR_ROUNDING",
           "mifa_floor_values", "monte_carlo_runs", "plot_monte_carlo", "unbiasedness_tests", "mse_table",
           "growth_runs", "plot_growth", "growth_table", "GROWTH_COLUMNS", "growth_values", "onestep_runs",
           "onestep_values", "onestep_table", "plot_onestep", "findings"]

# "smoke": seconds, for CI; "paper": the full checks
PROFILES = {
    "smoke": dict(seeds=[0], floor=dict(etas=[0.005, 0.02], ps=[0.1, 0.5], rounds=2000),
                  mc=dict(ps=[0.1, 0.5], t0=30, draws=4000), growth=dict(ps=[0.1, 0.5, 0.9], rounds=60, runs=20),
                  step=dict(ns=[8, 16], rounds_per_n=20, k=(-8, 6)),
                  cx=dict(ns=[8, 16], eps_rel={"convex": 1e-2, "nonconvex": 1e-2}, fedpgd_rounds=3000, seeds=[0, 1]),
                  eps=dict(n=8, eps_rel={"gap": [0.1, 0.03, 0.01], "grad_norm2": [1e-2, 1e-3, 1e-4]},
                           fedpgd_rounds=5000, saga_rounds=5000),
                  onestep=dict(ps=[0.1, 0.5], etas_L=[0.2, 1.0], states_at=[0, 10], draws=2000),
                  general=dict(ps=[0.1, 0.5], etas_L=[0.5, 1.0], states_at=[5, 30], seeds=[0], draws=2000),
                  gd=dict(ns=[8, 16], k=(-4, 4), gd_rounds=200, pgd_rounds=300),
                  zs=dict(eps_n=16, eps_list=[1e-2, 1e-4], boot=200)),
    "paper": dict(seeds=[0, 1, 2, 3, 4], floor=dict(etas=[0.0025, 0.005, 0.01, 0.02, 0.04, 0.08],
                                                   ps=[0.05, 0.1, 0.2, 0.5, 0.8], rounds=20000),
                  mc=dict(ps=[0.1, 0.5], t0=50, draws=100_000),
                  growth=dict(ps=[0.1, 0.3, 0.5, 0.7, 0.9], rounds=300, runs=200),
                  step=dict(ns=[16, 32, 64, 128, 256], rounds_per_n=50, k=(-14, 6)),
                  cx=dict(ns=[16, 32, 64, 128, 256], eps_rel={"convex": 1e-3, "nonconvex": 1e-4}, fedpgd_rounds=15000,
                          seeds=list(range(10))),
                  eps=dict(n=16, eps_rel={"gap": [0.1, 0.0316, 0.01, 0.00316, 0.001],
                                          "grad_norm2": [1e-2, 1e-3, 1e-4, 1e-5]},
                           fedpgd_rounds=200_000, saga_rounds=60_000),
                  onestep=dict(ps=[0.05, 0.1, 0.5], etas_L=[0.05, 0.2, 0.5, 1.0], states_at=[0, 10, 100, 1000],
                               draws=20_000),
                  general=dict(ps=[0.1, 0.5], etas_L=[0.04, 0.5, 1.0], states_at=[5, 30, 200], seeds=[0, 1],
                               draws=20_000),
                  gd=dict(ns=[16, 32, 64, 128, 256], k=(-6, 4), gd_rounds=400, pgd_rounds=1000),
                  zs=dict(eps_n=64, eps_list=[1e-2, 1e-4, 1e-6, 1e-8], boot=1000)),
}


def profile(name: str, **overrides) -> dict:
    """The page's settings under profile `name` ("smoke" or "paper"), with the notebook's parameters as
    `overrides` (None keeps the profile's value; the page passes `seeds`), every setting checked before any work
    (`common.page_profile`). Each section has its own settings (floor, mc, growth, step, cx, eps, onestep,
    general, gd, zs); `seeds` are the seeds of the participation draws."""
    cfg = page_profile(PROFILES, "theory", name, overrides)
    return dict(cfg, seeds=[int(s) for s in cfg["seeds"]])


# ================================================================================================
# 1. error floors
# ================================================================================================
def floor_runs(ftask, cfg: dict, store) -> pd.DataFrame:
    """FedAvg with importance sampling and MIFA on the floor problem (`problems.floor_task`), from the optimum and
    from 0 (`experiments.error_floor` on the profile's floor grid)."""
    seeds = cfg["seeds"]
    return pd.concat([cached(store, dict(experiment="theory_floor", problem=problems.FLOOR, start=start, seeds=seeds,
                                         **cfg["floor"]),
                             lambda start=start: experiments.error_floor(ftask, ["fedavg_is", "mifa"], seeds=seeds,
                                                                         start=start, **cfg["floor"]))
                      for start in ("optimum", "zero")])


def floor_table(fl: pd.DataFrame, ftask) -> pd.DataFrame:
    """Per (start, method, eta, p): the seed means of the floor metrics, c = (2/n)(1/p - 1), the document's
    floor eta^2 L c sigma_G^2 / 2 and ours, eta L c sigma_G^2."""
    L, s2, n = ftask.L, ftask.sigma_G2, ftask.n
    per = (fl.groupby(["start", "method", "eta", "p", "metric"])["value"].mean().unstack("metric").reset_index())
    per["c"] = 2 / n * (1 / per["p"] - 1)
    per["doc_floor"] = per["eta"] ** 2 * L * per["c"] * s2 / 2
    per["our_floor"] = per["eta"] * L * per["c"] * s2
    return per


def _importance_sampling_floors(per: pd.DataFrame) -> pd.DataFrame:
    return per[(per["method"] == "fedavg_is") & (per["start"] == "optimum")]


def plot_floor(per: pd.DataFrame, ftask, cfg: dict):
    """The measured floor of FedAvg (IS) against eta (scaled by L c sigma_G^2) and against c, with both bounds."""
    L, s2, n = ftask.L, ftask.sigma_G2, ftask.n
    T = cfg["floor"]["rounds"]
    isf = _importance_sampling_floors(per)
    fig, axes = plots.figure(1, 2, row_height=4.0)
    axes = axes[0]
    cmap = plt.get_cmap("viridis")
    ps, etas = sorted(isf["p"].unique()), sorted(isf["eta"].unique())
    for k, p in enumerate(ps):
        g = isf[isf["p"] == p]
        axes[0].plot(g["eta"], g["avg_tail"] / (L * g["c"] * s2), "o", color=cmap(k / max(1, len(ps) - 1)),
                     label=f"$p$ = {p}")
    e = np.geomspace(min(etas), max(etas), 50)
    axes[0].plot(e, e, "k--", label=r"corrected bound $\eta L c\sigma_G^2$")
    axes[0].plot(e, e ** 2 / 2, "k:", label=r"document's bound $\eta^2 L c\sigma_G^2/2$")
    axes[0].set(xscale="log", yscale="log", xlabel=r"step size $\eta$",
                ylabel=r"measured floor / $(L c \sigma_G^2)$")
    n_ticks(axes[0], etas)
    axes[0].legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8)
    for k, eta_ in enumerate(etas):
        g = isf[isf["eta"] == eta_].sort_values("c")
        col = plt.get_cmap("plasma")(k / max(1, len(etas) - 1))
        axes[1].plot(g["c"], g["avg_tail"], "o", color=col, label=f"$\\eta$ = {eta_}")
        axes[1].plot(g["c"], eta_ * L * g["c"] * s2, "--", color=col, lw=0.8)
    axes[1].set(xscale="log", yscale="log", xlabel=r"$c = \frac{2}{n}(\frac{1}{p} - 1)$",
                ylabel=r"floor: mean $\|\nabla f(w_t)\|^2$, 2nd half")
    axes[1].plot([], [], "k--", lw=0.8, label=r"$\eta L c\sigma_G^2$")
    axes[1].legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize=8)
    fig.suptitle("Error floor of partial participation (document 002, 'Non-zero error floor'): FedAvg with "
                 "importance\n"
                 f"sampling, n = {n}, d = {problems.FLOOR['dim']}, L = {L:g}, $\\sigma_G^2$ = {s2:g}, T = {T}, "
                 f"{len(cfg['seeds'])} seeds; dashed (right): $\\eta L c\\sigma_G^2$", fontsize=9)
    return fig


def floor_values(per: pd.DataFrame, ftask, cfg: dict) -> dict:
    """The floor section's numbers (t_sl_eta, t_sl_c, ...): the fitted slopes of the floor in eta and in c, and
    in how many settings each bound holds."""
    T = cfg["floor"]["rounds"]
    isf = _importance_sampling_floors(per)
    sl_eta = [fit_slope(g["eta"], g["avg_tail"])[0] for _, g in isf.groupby("p") if g["eta"].nunique() > 1]
    sl_c = [fit_slope(g["c"], g["avg_tail"])[0] for _, g in isf.groupby("eta") if g["c"].nunique() > 1]
    above_doc = int((isf["avg_tail"] > isf["doc_floor"]).sum())
    below_ours = int((isf["avg_tail"] <= isf["our_floor"]).sum())
    z = per[(per["method"] == "fedavg_is") & (per["start"] == "zero")].copy()
    z["rhs_doc"] = 2 * z["gap0"] / (z["eta"] * T) + z["doc_floor"]
    z["rhs_ours"] = 2 * z["gap0"] / (z["eta"] * T) + z["our_floor"]
    return dict(t_sl_eta=np.mean(sl_eta), t_sl_c=np.mean(sl_c), t_above_doc=above_doc, t_below_ours=below_ours,
                t_n_set=len(isf), t_ineq_doc=int((z['avg_all'] <= z['rhs_doc']).sum()),
                t_ineq_ours=int((z['avg_all'] <= z['rhs_ours']).sum()), t_n_z=len(z), t_n_seeds=len(cfg["seeds"]))


FLOOR_ROUNDING = 1e-25       # below this, ||grad f||^2 is at the level of double-precision rounding


def mifa_floor_values(per: pd.DataFrame, fl: pd.DataFrame, ftask, cfg: dict) -> dict:
    """MIFA's floor (t_mifa_...): the last quarter against the second, bound (ii) from w_0 = 0, and its step
    condition 1 - eta L - (eta L tau_max)^2 >= 0 per run."""
    T, L = cfg["floor"]["rounds"], ftask.L
    isf = _importance_sampling_floors(per)
    mf = per[per["method"] == "mifa"]
    mo, mz = mf[mf["start"] == "optimum"], mf[mf["start"] == "zero"].copy()
    raw = fl[(fl["method"] == "mifa") & (fl["start"] == "zero")].pivot_table(
        index=["eta", "p", "seed"], columns="metric", values="value").reset_index()
    raw["rhs"] = 2 * raw["gap1"] / (raw["eta"] * (T - 1))
    raw["condition"] = 1 - raw["eta"] * L - (raw["eta"] * L * raw["tau_max"]) ** 2 >= 0
    mz = mz.merge(raw.groupby(["eta", "p"])["rhs"].mean().rename("rhs_mean").reset_index(), on=["eta", "p"])

    def q(d):
        return d["avg_q4"] / d["avg_q2"]

    falling = mo[mo["avg_q4"] > FLOOR_ROUNDING]
    return dict(t_mifa_q4_max=mo['avg_q4'].max(), t_is_q4_min=isf['avg_q4'].min(), t_is_ratio_lo=q(isf).min(),
                t_is_ratio_hi=q(isf).max(), t_rounding=FLOOR_ROUNDING, t_mifa_round=len(mo) - len(falling),
                t_n_mo=len(mo),
                t_mifa_ratio_max=q(falling).max() if len(falling) else float("nan"),
                t_mifa_bound_ok=int((mz['avg_from1'] <= mz['rhs_mean']).sum()), t_n_mz=len(mz),
                t_cond_ok=int(raw['condition'].sum()), t_n_raw=len(raw), t_tau_lo=raw['tau_max'].min(),
                t_tau_hi=raw['tau_max'].max())


# ================================================================================================
# 2. the stored entries: one round by Monte Carlo
# ================================================================================================
def monte_carlo_runs(qtask, cfg: dict, store) -> pd.DataFrame:
    """`experiments.one_round_monte_carlo` at every p of the profile's mc settings (MIFA run to round t0, step
    0.02, seed 0)."""
    MC = cfg["mc"]
    return pd.concat([cached(store, dict(experiment="theory_monte_carlo", problem=problems.MC_PROBLEM, p=p,
                                         t0=MC["t0"], draws=MC["draws"], eta=0.02, seed=0),
                             lambda p=p: experiments.one_round_monte_carlo(qtask, p=p, t0=MC["t0"], draws=MC["draws"]))
                      for p in MC["ps"]])


def _entries(mc: pd.DataFrame) -> pd.DataFrame:
    return mc[mc["client"] >= 0].pivot_table(index=["p", "rule", "client", "coord"], columns="metric",
                                             values="value").reset_index()


def plot_monte_carlo(mc: pd.DataFrame, cfg: dict):
    """Monte Carlo mean of every stored entry minus Delta against the predicted bias, one panel per p."""
    MC = cfg["mc"]
    comp = _entries(mc)
    fig, axes = plots.figure(1, len(MC["ps"]), row_height=3.4)
    for ax, p in zip(axes[0], MC["ps"]):
        for rule in ("mifa", "umifa", "umifa_saga"):
            col = PALETTE[rule]
            g = comp[(comp["p"] == p) & (comp["rule"] == rule)]
            ax.errorbar(g["predicted"], g["mean_minus_delta"], yerr=3 * g["std_error"], fmt="o", ms=3, color=col,
                        label=LABELS[rule], alpha=0.7)
        lim = np.abs(comp[comp["p"] == p][["predicted", "mean_minus_delta"]].to_numpy()).max() * 1.1
        ax.plot([-lim, lim], [-lim, lim], "k:", lw=0.8)
        ax.set(xlabel=r"predicted $\mathbb{E}[G_t^{(i)}] - \Delta_t^{(i)}$",
               ylabel="Monte Carlo mean $-\\ \\Delta_t^{(i)}$ (±3 s.e.)",
               title=f"p={p}, round {MC['t0']}, {MC['draws']} draws", xlim=(-lim, lim), ylim=(-lim, lim))
        ax.legend()
    fig.suptitle(fill("Bias of the stored entries, every client and coordinate (document 002, notes after rules ii and "
                      "iii)", 100), fontsize=9)
    return fig


def unbiasedness_tests(mc: pd.DataFrame) -> pd.DataFrame:
    """Per (p, rule): chi^2 tests of the stored entries against unbiasedness and against the predicted bias
    (all coordinates of a client move with the same Bernoulli draw: one z per client, its largest coordinate)."""
    rows = []
    for (p, rule), g in _entries(mc).groupby(["p", "rule"]):
        g = g.assign(size=g["std_error"]).sort_values("size").groupby("client").tail(1)
        ok = g["std_error"] > 0
        z0 = g["mean_minus_delta"][ok] / g["std_error"][ok]
        zp = (g["mean_minus_delta"][ok] - g["predicted"][ok]) / g["std_error"][ok]
        rows.append({"p": p, "rule": LABELS[rule], "clients tested": int(ok.sum()),
                     "max |z| against unbiasedness": float(np.abs(z0).max()),
                     "p-value, unbiased (chi2)": float(stats.chi2.sf((z0 ** 2).sum(), ok.sum())),
                     "p-value, predicted bias (chi2)": float(stats.chi2.sf((zp ** 2).sum(), ok.sum()))})
    return pd.DataFrame(rows)


def mse_table(mc: pd.DataFrame) -> pd.DataFrame:
    """Per (p, rule): the measured E||grad f - G_t||^2, its s.e. and the document's expression."""
    mse = mc[mc["client"] < 0].pivot_table(index=["p", "rule"], columns="metric", values="value")
    mse.index = mse.index.set_levels([LABELS[r] for r in mse.index.levels[1]], level=1)
    return mse.rename(columns={"mse": "measured E||grad f - G_t||^2", "mse_se": "its s.e.",
                               "mse_formula": "document's expression"})


# ================================================================================================
# 3. U-MIFA as written: the stored-entry error
# ================================================================================================
GROWTH_COLUMNS = {"log10_median_err": "measured log10 median error at T", "predicted_log10": "predicted",
                  "saga_frac_nonzero": "SAGA memory: fraction of entries not exact"}


def growth_runs(cfg: dict, store) -> pd.DataFrame:
    """`experiments.table_error_growth` on the profile's growth settings (10 clients, seed 0)."""
    GR = cfg["growth"]
    return cached(store, dict(experiment="theory_table_growth", seed=0, n=10, **GR),
                  lambda: experiments.table_error_growth(GR["ps"], rounds=GR["rounds"], runs=GR["runs"]))


def plot_growth(gr: pd.DataFrame, cfg: dict):
    """The measured median stored-entry error per round and p, with the predicted growth."""
    GR = cfg["growth"]
    fig, ax = plots.figure(1, 1, row_height=3.4)
    ax = ax[0, 0]
    for k, p in enumerate(GR["ps"]):
        g = gr[gr["p"] == p].pivot_table(index="round", columns="metric", values="value")
        col = plt.get_cmap("tab10")(k)
        ax.plot(g.index, g["log10_median_err"].clip(lower=-16), color=col, lw=3, alpha=0.55,
                label=f"$p$ = {p} (measured median)")
        ax.plot(g.index, g["predicted_log10"].clip(lower=-16), "--", color="black", lw=1, zorder=3)
    ax.plot([], [], "k--", lw=1, label=r"predicted: $t\,p\,\log_{10}|1/p-1|$")
    ax.set(xlabel="round", ylabel="$\\log_{10}$ median $|G_t^{(i)} - \\Delta^{(i)}|$\n(floor: double precision)",
           ylim=(-17, None))
    ax.legend()
    ax.set_title("Stored-entry error of U-MIFA as written (dashed: $t\\,p\\,\\log_{10}|1/p-1|$), "
                 f"{GR['runs']} runs × 10 clients", fontsize=9)
    return fig


def growth_table(gr: pd.DataFrame, cfg: dict) -> pd.DataFrame:
    """Per p, at the last round: the measured and predicted log10 error and the SAGA entries not yet exact."""
    return gr[gr["round"] == cfg["growth"]["rounds"]].pivot_table(index="p", columns="metric", values="value")


def growth_values(last: pd.DataFrame, cfg: dict) -> dict:
    """The growth section's numbers (t_growth_..., t_w_growth, t_saga_nonexact)."""
    GR = cfg["growth"]
    pm, fin_ = min(GR["ps"]), np.isfinite(last["log10_median_err"]) & np.isfinite(last["predicted_log10"])
    return dict(t_growth_p=pm, t_growth_T=GR["rounds"], t_growth_meas=last.loc[pm, "log10_median_err"],
                t_growth_pred=last.loc[pm, "predicted_log10"],
                t_w_growth="follows" if np.allclose(last["log10_median_err"][fin_], last["predicted_log10"][fin_],
                                                    atol=0.5) else "departs from",
                t_saga_nonexact=last["saga_frac_nonzero"].max())


# ================================================================================================
# 4. the one-step inequalities
# ================================================================================================
_IDS = {"os": ["p", "eta_L", "state"], "ga": ["p", "eta_L", "source", "seed", "round", "rule"]}


def _stored(store, conf: dict, key: str, fn) -> pd.DataFrame:
    return pivot_wide(cached(store, conf, lambda: melt_wide(fn(), _IDS[key])), _IDS[key])


def onestep_runs(ftask, qtask, cfg: dict, store) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(derivation (i)'s table on the floor problem, the general analysis's table on the Monte Carlo problem):
    `bounds.derivation_i_table` and `bounds.general_table` on the profile's onestep and general settings."""
    OS, GA = cfg["onestep"], cfg["general"]
    os_ = _stored(store, dict(experiment="theory_onestep_i", problem=problems.FLOOR, **OS), "os",
                  lambda: bounds.derivation_i_table(ftask, ps=OS["ps"], etas_L=OS["etas_L"], rounds=OS["states_at"],
                                                    draws=OS["draws"]))
    ga = _stored(store, dict(experiment="theory_onestep_general", problem=problems.MC_PROBLEM, **GA), "ga",
                 lambda: bounds.general_table(qtask, ps=GA["ps"], etas_L=GA["etas_L"], rounds=GA["states_at"],
                                              seeds=GA["seeds"], draws=GA["draws"]))
    os_["condition"] = os_["condition"].astype(bool)
    return os_, ga


def onestep_values(os_: pd.DataFrame, ga: pd.DataFrame, cfg: dict) -> dict:
    """The one-step section's numbers (t_os_..., t_ga_...)."""
    OS, GA = cfg["onestep"], cfg["general"]
    cond = os_[os_["condition"]]
    return dict(
        t_os_rounds=", ".join(map(str, OS["states_at"])), t_ga_rounds=", ".join(map(str, GA["states_at"])),
        t_os_n=len(os_), t_os_cond=len(cond), t_os_slack=cond["slack"].min(), t_os_slack_med=cond["slack"].median(),
        t_os_zmax=-cond["z"].max(),
        t_os_viol=int((os_.loc[~os_["condition"], "mc"] > os_.loc[~os_["condition"], "final"]).sum()),
        t_os_ncond=int((~os_["condition"]).sum()), t_ga_n=len(ga), t_ga_zmax=-ga["z_general"].max(),
        t_ga_slack=ga["slack_general"].min(), t_ga_slack_med=ga["slack_general"].median(),
        t_ga_expr_med=ga.groupby("rule")["slack_expr"].median().to_dict()["MIFA"],
        t_ga_expr_med_u=ga.groupby("rule")["slack_expr"].median().to_dict()["U-MIFA"])


def onestep_table(os_: pd.DataFrame) -> pd.DataFrame:
    """Derivation (i): the slack ratio's minimum and median per (p, eta L), at the states meeting its condition."""
    cond = os_[os_["condition"]]
    return cond.groupby(["p", "eta_L"])["slack"].agg(["min", "median"]).rename(
        columns=lambda c: f"slack ratio, {c}").round(3)


def plot_onestep(os_: pd.DataFrame, ga: pd.DataFrame, cfg: dict):
    """Monte Carlo E f(w_(t+1)) - f(w_t) against the document's right-hand side: derivation (i) and the general
    analysis (symmetric-log axes)."""
    cond = os_[os_["condition"]]
    fig, axes = plots.figure(1, 2, row_height=3.6)
    axes = axes[0]
    for k, (p_, g) in enumerate(cond.groupby("p")):
        axes[0].scatter(g["final"], g["mc"], s=16, color=f"C{k}", label=f"$p$ = {p_:g}")
    for rule, mk in (("MIFA", "o"), ("U-MIFA", "s")):
        g = ga[ga["rule"] == rule]
        axes[1].scatter(g["rhs_general"], g["df"], marker=mk, s=14, alpha=0.7, label=rule)
    for ax, title in zip(axes, ("(i) FedAvg with importance sampling,\n" + r"states with $\eta L(1+c) \leq 1$",
                                "general analysis, MIFA and U-MIFA,\n" + r"$\eta L \leq 1$")):
        lo, hi = ax.get_xlim()
        ax.plot([lo, hi], [lo, hi], "k:", lw=0.8)
        ax.set_xscale("symlog", linthresh=1e-4)
        ax.set_yscale("symlog", linthresh=1e-4)
        for axis in (ax.xaxis, ax.yaxis):          # a tick every two decades: legible at the book's width
            axis.set_major_locator(SymmetricalLogLocator(linthresh=1e-4, base=100))
        ax.set(xlabel="right-hand side (document)", ylabel=r"Monte Carlo $\mathbb{E}f(w_{t+1}) - f(w_t)$")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(fill("One-step inequalities of document 002 from fixed states (below the dotted diagonal: the bound "
                      f"holds); {cfg['onestep']['draws']} draws per state; symmetric-log axes", 100), fontsize=9)
    return fig


# ================================================================================================
# "What we found"
# ================================================================================================
def findings(checks: dict, fl: pd.DataFrame) -> dict:
    """The words and numbers of the page's "What we found" (t_w_..., t_nonzero, t_n_ok, t_n_checks), read from its
    checks (`items.theory_checks`); `fl` the floor runs (for the p of the floor grid)."""
    def I(item, *w):
        return item_word(checks, item, *w)

    def CW(item, starts, *w):
        return check_word(checks, item, starts, *w)

    C1, LR, SAGA = items.FLOOR_NONZERO, items.LR_MIFA, items.SAGA_ETA
    tables = [c for t in ("Convex", "Non-convex") for m in ("FedGD", "FedPGD")
              for c in checks[f"{t} table: {m}, complexity"]]
    zs_cx = "Non-convex table: ZeroSarah, complexity"
    return dict(
        t_nonzero=p_words(where(outcomes(checks, C1, "FedAvg (IS) sits above MIFA")), sorted(fl["p"].unique())),
        t_w_claim_i=I(C1, "holds", "does not hold", "holds only in part"),
        t_w_bound=I(items.FLOOR_BOUND, "holds", "is violated", "holds only in part"),
        t_w_mifa_floor=I(items.FLOOR_ZERO, "has no floor", "does not show a zero floor"),
        t_w_unbiased=I(items.UNBIASED, "does not reject", "rejects", "does not always reject"),
        t_w_biased=I(items.BIASED, "rejects unbiasedness and does not reject the predicted bias",
                     "does not confirm the predicted bias", "confirms only in part the predicted bias"),
        t_w_eq_mifa=I(items.EQ_MIFA, "holds at every p tested", "is exceeded", "holds only at some p"),
        t_w_eq_umifa=I(items.EQ_UMIFA, "matches at every p tested", "does not match", "matches only at some p"),
        t_w_lr_mifa=I(LR, "suffices on every problem", "does not always suffice"),
        t_w_lr_saga=I(SAGA, "suffices on every problem", "does not always suffice"),
        t_w_lr="both conditions are met at every n" if all(c.ok for k in (LR, SAGA) for c in checks[k])
        else "some condition is not met at some n",
        t_w_tables="as the tables say" if all(c.ok for c in tables)
        else f"as the tables say in {sum(c.ok for c in tables)} of {len(tables)} checks",
        t_w_saga_cx=I("Convex table: SAGA/U-MIFA, complexity", "within 0.15 of", "more than 0.15 away from",
                      "partly within 0.15 of"),
        t_w_saga_ncx=I("Non-convex table: SAGA/U-MIFA, complexity", "within 0.15 of", "more than 0.15 away from",
                       "partly within 0.15 of"),
        t_w_pgd_het=CW("Non-convex table: FedPGD, complexity", "nonconvex (heterogeneous", "within", "just past"),
        t_w_plat_prop=CW(items.FEDPGD_CONVERGENCE, "FedPGD's plateau is proportional", "proportional to",
                         "not proportional to"),
        t_w_plat_T=CW(items.FEDPGD_CONVERGENCE, "that term falls with T", "halves when T doubles", "is flat in time"),
        t_w_eps_conv="both within 0.15 of" if all(CW(items.EPS_CONVEX, m, 1, 0) for m in ("FedGD:", "SAGA/U-MIFA:"))
        else "not both within 0.15 of",
        t_w_eps_ncx=I(items.EPS_NONCONVEX, "none exceeds its table's", "some exceed their table's",
                      "some exceed their table's"),
        t_w_zs_eta=I(items.ZEROSARAH_ETA, "converges on every problem", "does not always converge"),
        t_w_zs_cx=I(zs_cx, "within 0.15 of", "more than 0.15 away from", "partly within 0.15 of"),
        t_w_zs_sq="within" if all(c.ok for c in checks[zs_cx] if "ceil(sqrt n)" in c.what and "(1/eps)" not in c.what)
        else "above",
        t_w_os=I(items.DERIVATION_I, "holds", "fails", "holds only in part"),
        t_w_ga=I(items.GENERAL, "holds", "fails", "holds only in part"),
        t_w_gd=("hold" if all(c.ok for k in checks if k.endswith("eta bound") and ("FedGD" in k or "FedPGD" in k)
                              for c in checks[k]) else "do not all hold"),
        t_n_ok=sum(c.ok for cs in checks.values() for c in cs), t_n_checks=sum(len(cs) for cs in checks.values()))
