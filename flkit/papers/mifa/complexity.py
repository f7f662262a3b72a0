r"""The step-size conditions and the complexity tables of document 002, measured (sections of the MIFA chapter's
theory page, ``notebooks/mifa/theory.ipynb``).

* :func:`step_size_runs`: the largest converging step of MIFA, U-MIFA (both readings) and ZeroSARAH against n,
  one client per round (the document's "Learning Rate" claims and the non-convex table's ZeroSarah row);
* :func:`complexity_runs`: client gradients to reach epsilon at the best step of a :math:`\sqrt2` grid, against n
  (both tables' n-dependence); :func:`plateau_runs`: FedPGD's plateau against the table's variance term;
* :func:`epsilon_runs`: the tables' epsilon-dependence on a convex, not strongly convex problem;
* :func:`gd_runs`: FedGD's and FedPGD's :math:`\eta = \mathcal O(1/L)`;
* :func:`zerosarah_sqrt_runs`: ZeroSARAH at :math:`b = \lceil\sqrt n\rceil` clients per round.

The problems are `flkit.papers.mifa.problems`'s families; each section reads its runs from the results store
(configurations as the page has always stored them) or computes and stores them.
"""
from __future__ import annotations

from textwrap import fill

import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter, ScalarFormatter

from flkit import plots
from flkit.papers.mifa import bounds
from flkit.papers.mifa.common import HETERO, PALETTE, cached, fit_slope, n_ticks, spread, two_decimals
from flkit.papers.mifa.experiments import EPS_EXPONENT, rounds_to_epsilon, step_size_sweep
from flkit.papers.mifa.methods import LABELS, ZEROSARAH, simulate
from flkit.papers.mifa.problems import (ALL_KINDS, KINDS, METRIC, SHORT, base, extra, family, flat_config,
                                        flat_task, kind_short)

__all__ = ["STEP_METHODS", "step_grid", "step_size_runs", "plot_step_sizes", "step_size_table", "step_size_values",
           "CX_METHODS", "PRED", "complexity_runs", "complexity_slopes", "plot_complexity", "complexity_values",
           "plateau_runs", "plot_plateau", "plateau_values", "EPS_METHODS", "CRITERION", "epsilon_runs",
           "epsilon_exponents", "plot_epsilon", "epsilon_table", "epsilon_values", "gd_grid", "gd_runs", "plot_gd",
           "gd_values", "NCX", "zerosarah_sqrt_runs", "plot_zerosarah_sqrt", "zerosarah_sqrt_values"]

ZS = ZEROSARAH


def _sqrt2_grid(k0: int, k1: int) -> np.ndarray:
    """2^(k/2) for k = k0..k1."""
    return 2.0 ** (np.arange(k0, k1 + 1) / 2)


# ================================================================================================
# step-size conditions: MIFA, U-MIFA, ZeroSARAH
# ================================================================================================
STEP_METHODS = ["mifa", "umifa_saga", "umifa"]


def step_grid(cfg: dict) -> np.ndarray:
    """The step grid eta L of the step-size section: 2^(k/2) over the profile's step.k range."""
    return _sqrt2_grid(*cfg["step"]["k"])


def step_size_runs(cfg: dict, store) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(stab, emax): per (kind, method, n, eta L) 1 when every seed converged (`experiments.step_size_sweep`,
    one client per round, step.rounds_per_n x n rounds; ZeroSARAH with lambda = b/(2n)), and per (kind, method)
    the largest converging eta L at each n."""
    ST, seeds, grid = cfg["step"], cfg["seeds"], step_grid(cfg)
    st = pd.concat([cached(store, dict(experiment="theory_step_size", kind=kind, n=n, dim=8, eta_L=grid.tolist(),
                                       seeds=seeds, rounds=ST["rounds_per_n"] * n, methods=STEP_METHODS,
                                       **extra(kind)),
                            lambda n=n, kind=kind: step_size_sweep(family(n, kind), STEP_METHODS, eta_L=grid,
                                                                   seeds=seeds, rounds=ST["rounds_per_n"] * n)
                            ).assign(kind=kind)
                    for kind in ALL_KINDS for n in ST["ns"]])
    zst = pd.concat([cached(store, dict(experiment="theory_step_size", kind=kind, n=n, dim=8, eta_L=grid.tolist(),
                                         seeds=seeds, rounds=ST["rounds_per_n"] * n, methods=[ZS], lam="b/(2n)",
                                         **extra(kind)),
                             lambda n=n, kind=kind: step_size_sweep(family(n, kind), [ZS], eta_L=grid, seeds=seeds,
                                                                    rounds=ST["rounds_per_n"] * n)).assign(kind=kind)
                     for kind in ALL_KINDS for n in ST["ns"]])
    st = pd.concat([st, zst], ignore_index=True)
    stab = st[st["metric"] == "stable"].groupby(["kind", "method", "n", "eta_L"])["value"].min().reset_index()
    emax = stab[stab["value"] == 1].groupby(["kind", "method", "n"])["eta_L"].max().unstack("n")
    return stab, emax


def plot_step_sizes(emax: pd.DataFrame, cfg: dict):
    """The largest converging eta L against n per problem, with the three bounds' slopes."""
    ST = cfg["step"]
    fig, axes = plots.figure(2, 2, row_height=3.1, sharey=True)
    axes = axes.ravel()
    ns = np.array(ST["ns"], dtype=float)
    for ax, kind in zip(axes, ALL_KINDS):
        for m in ("mifa", "umifa_saga", ZS):
            if (kind, m) in emax.index:
                y = emax.loc[(kind, m)].reindex(ST["ns"]).to_numpy(dtype=float)
                s = fit_slope(ns, y)[0]
                ax.plot(ns, y, "o-", color=PALETTE[m], label=f"{SHORT[m]}: {two_decimals(s)}")
        refs = [ax.plot(ns, 1 / ns, "k--")[0], ax.plot(ns, ns ** (-2 / 3), "k:")[0], ax.plot(ns, ns ** -0.5, "k-.")[0]]
        ax.set(xscale="log", yscale="log", xlabel="clients n", ylim=(1e-4, 5),
               title=f"{kind_short(kind)}\n(L = {family(16, kind).L:g})")
        n_ticks(ax, ST["ns"])
        ax.legend(loc="lower left", title="slope", fontsize=8, title_fontsize=8)
    fig.legend(refs, [r"MIFA paper: $1/(Ln)$, slope $-1$", r"Reddi et al.: $1/(Ln^{2/3})$, slope $-2/3$",
                      r"ZeroSarah (table): $1/(Ln^{1/2})$, slope $-1/2$"], loc="outside lower center", ncol=2,
               fontsize=8)
    for ax in axes[::2]:
        ax.set_ylabel(r"largest converging $\eta L$")
    fig.suptitle(fill("Step-size conditions of document 002 ('Learning Rate'): one client per round, "
                      f"{len(cfg['seeds'])} seeds, {ST['rounds_per_n']}n rounds", 100), fontsize=9)
    return fig


def step_size_table(emax: pd.DataFrame) -> pd.DataFrame:
    """The largest converging eta L per (problem, method) and n, methods by name."""
    return (emax * 1).rename(index=LABELS, level=1).round(4)


def step_size_values(stab: pd.DataFrame, emax: pd.DataFrame, cfg: dict) -> dict:
    """The step-size section's numbers (t_umifa_..., t_emax_..., t_zs_bound_n, t_zs_nmax)."""
    ST = cfg["step"]
    ns = np.array(ST["ns"], dtype=float)
    lit = stab[(stab["method"] == "umifa")]
    slope_e = {m: [fit_slope(ns, emax.loc[(k, m)].reindex(ST["ns"]).to_numpy(dtype=float))[0]
                   for k in ALL_KINDS if (k, m) in emax.index] for m in ("mifa", "umifa_saga", ZS)}
    return dict(t_umifa_none=int(lit.groupby(["kind", "n"])["value"].max().eq(0).sum()),
                t_umifa_n=lit.groupby(["kind", "n"]).ngroups, t_emax_sl_mifa=spread(slope_e["mifa"]),
                t_emax_sl_saga=spread(slope_e["umifa_saga"]),
                t_emax=spread(emax.drop(ZS, level="method").to_numpy(dtype=float)),
                t_emax_sl_zs=spread(slope_e[ZS]), t_emax_zs=spread(emax.xs(ZS, level="method").to_numpy(dtype=float)),
                t_zs_bound_n=f"{1 / np.sqrt(max(ST['ns'])):.3g}", t_zs_nmax=max(ST["ns"]))


# ================================================================================================
# the complexity tables in n
# ================================================================================================
# method -> (the k of its step grid 2^(k/2), its rounds; None: 20 n + 2000); ZeroSARAH: the non-convex problems only
def _cx_methods(cfg: dict) -> dict:
    return {"fedgd": (np.arange(-4, 3), 3000), "fedpgd": (np.arange(-16, -5), cfg["cx"]["fedpgd_rounds"]),
            "umifa_saga": (np.arange(-12, 3), None), "mifa": (np.arange(-12, 3), None), ZS: (np.arange(-12, 3), None)}


CX_METHODS = ("fedgd", "fedpgd", "umifa_saga", "mifa", ZS)
PRED = {"convex": {"fedgd": 1, "fedpgd": 0, "umifa_saga": 1},
        "nonconvex": {"fedgd": 1, "fedpgd": 0, "umifa_saga": 2 / 3, ZS: 1 / 2}}     # the tables' slopes in n


def complexity_runs(cfg: dict, store) -> pd.DataFrame:
    """Per (kind, method, n): the step of the grid whose median cost over the seeds (client gradients until the
    table's criterion is below eps_rel x its initial value; b = 1, `experiments.rounds_to_epsilon`) is the
    smallest, that cost and the median rounds."""
    CX = cfg["cx"]
    cx_seeds = CX["seeds"]
    frames = []
    for kind in ALL_KINDS:
        for n in CX["ns"]:
            for m, (ks, cap) in _cx_methods(cfg).items():
                if m == ZS and base(kind) != "nonconvex":
                    continue
                eta_L = (2.0 ** (ks / 2)).tolist()
                T = cap if cap is not None else 20 * n + 2000
                conf = dict(experiment="theory_complexity", kind=kind, n=n, dim=8, method=m, eta_L=eta_L,
                            seeds=cx_seeds, max_rounds=T, eps_rel=CX["eps_rel"][base(kind)], b=1, stop_factor=2,
                            **extra(kind))
                frames.append(cached(store, conf, lambda n=n, kind=kind, m=m, eta_L=eta_L, T=T: rounds_to_epsilon(
                    family(n, kind), m, eta_L=eta_L, seeds=cx_seeds, max_rounds=T, metric=METRIC[base(kind)],
                    eps_rel=CX["eps_rel"][base(kind)], b=1, stop_factor=2)).assign(kind=kind, method_=m))
    cx = pd.concat(frames, ignore_index=True)
    cx["method"] = cx["method_"]
    piv = cx.pivot_table(index=["kind", "method", "n", "eta_L", "seed"], columns="metric", values="value").reset_index()
    piv["cost"] = np.where(piv["hit_round"] >= 0, piv["client_updates"], np.inf)
    piv["rounds"] = np.where(piv["hit_round"] >= 0, piv["hit_round"], np.inf)
    med = piv.groupby(["kind", "method", "n", "eta_L"])[["cost", "rounds"]].median().reset_index()
    return med.loc[med.groupby(["kind", "method", "n"])["cost"].idxmin()].set_index(["kind", "method", "n"])


def _cost_curves(best: pd.DataFrame):
    """(kind, method, n values, costs, finite mask, best rows) per problem and method present, in the page's order."""
    for kind in ALL_KINDS:
        for m in CX_METHODS:
            if (kind, m) not in best.droplevel("n").index:
                continue
            b = best.loc[(kind, m)]
            x, y = b.index.to_numpy(dtype=float), b["cost"].to_numpy()
            yield kind, m, x, y, np.isfinite(y), b


def complexity_slopes(best: pd.DataFrame) -> pd.DataFrame:
    """Per (problem, method): the table's slope of the cost in n, the measured one, the slope of the rounds, and
    the n at which epsilon was never reached."""
    rows = []
    for kind, m, x, y, ok, b in _cost_curves(best):
        rows.append({"problem": kind, "method": LABELS[m], "predicted slope": PRED[base(kind)].get(m, np.nan),
                     "measured slope": fit_slope(x[ok], y[ok])[0],
                     "slope of the rounds": fit_slope(x[ok], b["rounds"].to_numpy()[ok])[0],
                     "never reached at some n": int((~ok).sum())})
    return pd.DataFrame(rows).set_index(["problem", "method"])


def plot_complexity(best: pd.DataFrame, cfg: dict):
    """The best step's cost against n per problem and method, with the table's predicted n-dependence."""
    CX = cfg["cx"]
    QTY = {"gap": "gap", "grad_norm2": "‖∇f‖²"}
    fig, axes = plots.figure(2, 2, row_height=4.1)
    axes = dict(zip(ALL_KINDS, axes.ravel()))
    for kind, m, x, y, ok, _ in _cost_curves(best):
        ax = axes[kind]
        s = fit_slope(x[ok], y[ok])[0]
        ax.plot(x[ok], y[ok], "o-", color=PALETTE[m], label=f"{SHORT[m]}: {two_decimals(s)}")
        if m in PRED[base(kind)] and ok.any():
            x0, y0 = x[ok][0], y[ok][0]
            ax.plot(x, y0 * (x / x0) ** PRED[base(kind)][m], ":", color=PALETTE[m], lw=1.2)
    for kind, ax in axes.items():
        ax.set(xscale="log", yscale="log", xlabel="clients n", ylabel="client gradients to reach ε\n(best step)",
               title=f"{kind_short(kind)}\nL = {family(16, kind).L:g}, ε = {CX['eps_rel'][base(kind)]:g} × initial "
                     f"{QTY[METRIC[base(kind)]]}")
        n_ticks(ax, CX["ns"])
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8, title="slope in n",
                  title_fontsize=8)
    fig.suptitle("Complexity tables of document 002, measured: dotted = the table's predicted n-dependence through "
                 "the\n"
                 f"first point; b = 1, {len(CX['seeds'])} seeds, best step of a √2 grid", fontsize=9)
    return fig


def complexity_values(slopes: pd.DataFrame, best: pd.DataFrame) -> dict:
    """The complexity section's numbers (t_gd_sl, t_pgd_sl, ..., t_zs_vs_saga)."""
    HET = HETERO
    sl, Lb = slopes["measured slope"].astype(float).unstack("method"), LABELS
    het = [abs(sl.loc[k + HET, Lb[m]] - sl.loc[k, Lb[m]]) for k in KINDS for m in ("fedgd", "umifa_saga", "mifa")]

    def cost(m):
        return best.xs(m, level="method")["cost"].to_numpy()

    zs = best.xs(ZS, level="method")
    return dict(t_gd_sl=spread(sl[Lb["fedgd"]]), t_pgd_sl=spread(sl[Lb["fedpgd"]]), t_mifa_sl=spread(sl[Lb["mifa"]]),
                t_saga_sl_cx=spread(sl.loc[["convex", "convex" + HET], Lb["umifa_saga"]]),
                t_saga_sl_ncx=spread(sl.loc[["nonconvex", "nonconvex" + HET], Lb["umifa_saga"]]),
                t_het_diff=max(het), t_pgd_het=sl.loc["nonconvex" + HET, Lb["fedpgd"]],
                t_mifa_more="at every n" if (cost("mifa") > cost("umifa_saga")).all() else "not at every n",
                t_zs_sl=spread(sl.loc[["nonconvex", "nonconvex" + HET], Lb[ZS]]),
                t_zs_rounds_sl=spread(slopes.loc[[("nonconvex", Lb[ZS]), ("nonconvex" + HET, Lb[ZS])],
                                                 "slope of the rounds"]),
                t_zs_rounds_per_n=spread(zs["rounds"] / zs.index.get_level_values("n")),
                t_zs_vs_saga=spread(zs["cost"] / best.xs("umifa_saga", level="method")["cost"].loc[
                    ["nonconvex", "nonconvex" + HET]]))


# ================================================================================================
# FedPGD's plateau
# ================================================================================================
def _fedpgd_plateau(cfg: dict) -> pd.DataFrame:
    """Time averages of the gap over the 2nd and the 4th quarter of FedPGD's runs started at the optimum."""
    rows = []
    T, seeds = cfg["floor"]["rounds"], cfg["seeds"]
    for n, bs in ((16, (1, 2, 4, 8)), (64, (1, 4, 16))):
        task = family(n, "convex")
        for b in bs:
            runs = pd.DataFrame([(s, e) for e in (0.01, 0.04) for s in seeds], columns=["seed", "eta"])
            res = simulate(task, ["fedpgd"], seeds=runs["seed"].tolist(), eta=runs["eta"].to_numpy(), p=b / n,
                           b=b, rounds=T, every=1, w0=task.problem.w_star.expand(len(runs), -1).clone(),
                           diverge_ref=1.0)
            g = res.values["fedpgd"]["gap"]
            for name, sl in (("avg_q2", slice(T // 4, T // 2)), ("avg_q4", slice(3 * T // 4, T))):
                rows.append(runs.assign(n=n, b=b, round=T, metric=name, value=g[sl].mean(0)))
    return pd.concat(rows, ignore_index=True)


def plateau_runs(cfg: dict, store) -> pd.DataFrame:
    """Per (n, b, eta): FedPGD's mean gap over the second and the last quarter, and the table's variance term
    (eta L / (n - 1)) (n / b - 1) sigma_G^2 (L = sigma_G^2 = 1)."""
    pg = cached(store, dict(experiment="theory_fedpgd_plateau", dim=8, seeds=cfg["seeds"],
                            rounds=cfg["floor"]["rounds"], etas=[0.01, 0.04]), lambda: _fedpgd_plateau(cfg))
    pv = pg.pivot_table(index=["n", "b", "eta"], columns="metric", values="value").reset_index()
    pv["term"] = pv["eta"] * 1.0 / (pv["n"] - 1) * (pv["n"] / pv["b"] - 1) * 1.0
    return pv


def plot_plateau(pv: pd.DataFrame, cfg: dict):
    """FedPGD's plateau against the table's variance term, with the fitted power."""
    fig, ax = plots.figure(1, 1, width=6.0, row_height=3.4)
    ax = ax[0, 0]
    for (n_, eta_), g in pv.groupby(["n", "eta"]):
        ax.plot(g["term"], g["avg_q4"], "o", label=f"n={n_}, eta={eta_}")
    t = np.geomspace(pv["term"][pv["term"] > 0].min(), pv["term"].max(), 20)
    s, c0 = fit_slope(pv["term"], pv["avg_q4"])
    ax.plot(t, np.exp(c0) * t ** s, "k:", label=f"fit: slope {s:.2f}")
    ax.set(xscale="log", yscale="log", xlabel=r"$\frac{\eta L}{n-1}(\frac{n}{b}-1)\sigma_G^2$",
           ylabel="FedPGD gap, mean over the last quarter")
    ax.legend()
    ax.set_title(fill("FedPGD plateau against the table's variance term (convex, d=8, "
                      f"T={cfg['floor']['rounds']})", 80), fontsize=9)
    return fig


def plateau_values(pv: pd.DataFrame) -> dict:
    """The plateau's numbers: the last quarter over the second (t_plat_lo, t_plat_hi), the fitted slope (t_plat_sl)."""
    ratio = (pv["avg_q4"] / pv["avg_q2"])
    return dict(t_plat_lo=ratio.min(), t_plat_hi=ratio.max(), t_plat_sl=fit_slope(pv["term"], pv["avg_q4"])[0])


# ================================================================================================
# the tables' epsilon-dependence
# ================================================================================================
def _eps_methods(cfg: dict) -> dict:
    EPSC = cfg["eps"]
    return {"fedgd": (np.arange(-4, 3), 3000), "fedpgd": (np.arange(-20, -3), EPSC["fedpgd_rounds"]),
            "umifa_saga": (np.arange(-12, 3), EPSC["saga_rounds"])}


EPS_METHODS = ("fedgd", "fedpgd", "umifa_saga")
CRITERION = {"gap": r"convex table: $\min_t f(x_t) - f^\star \leq \epsilon$",
             "grad_norm2": r"non-convex table: $\min_t \|\nabla f(x_t)\|^2 \leq \epsilon$"}


def epsilon_runs(cfg: dict, store) -> pd.DataFrame:
    """Per (criterion, method, eps): the step of the grid whose median cost over the seeds is the smallest, and
    that cost (`problems.flat_task`, b = 1)."""
    EPSC, seeds = cfg["eps"], cfg["seeds"]
    FLAT = flat_config(EPSC["n"])
    etask = flat_task(FLAT)
    frames = []
    for crit, eps_list in EPSC["eps_rel"].items():
        for m, (ks, cap) in _eps_methods(cfg).items():
            eta_L = (2.0 ** (ks / 2)).tolist()
            for e in eps_list:
                conf = dict(experiment="theory_epsilon", problem=FLAT, method=m, criterion=crit, eps_rel=e, eta_L=eta_L,
                            seeds=seeds, max_rounds=cap, b=1, stop_factor=2)
                frames.append(cached(store, conf, lambda m=m, crit=crit, e=e, eta_L=eta_L, cap=cap: rounds_to_epsilon(
                    etask, m, eta_L=eta_L, seeds=seeds, max_rounds=cap, metric=crit, eps_rel=e, b=1, stop_factor=2))
                              .assign(method_=m))
    ep = pd.concat(frames, ignore_index=True)
    ep["method"] = ep["method_"]
    piv = ep.pivot_table(index=["criterion", "method", "eps_rel", "eta_L", "seed"], columns="metric",
                         values="value").reset_index()
    piv["cost"] = np.where(piv["hit_round"] >= 0, piv["client_updates"], np.inf)
    med = piv.groupby(["criterion", "method", "eps_rel", "eta_L"])["cost"].median().reset_index()
    return med.loc[med.groupby(["criterion", "method", "eps_rel"])["cost"].idxmin()].set_index(["criterion", "method"])


def _eps_curves(best_e: pd.DataFrame, cfg: dict):
    """(criterion, method, eps values, costs, finite mask, the last three finite points, the exponent a over them,
    over all eps, the table's) in the page's order."""
    for crit in cfg["eps"]["eps_rel"]:
        for m in EPS_METHODS:
            b = best_e.loc[(crit, m)].sort_values("eps_rel", ascending=False)
            x, y = b["eps_rel"].to_numpy(dtype=float), b["cost"].to_numpy(dtype=float)
            ok = np.isfinite(y)
            tail = np.flatnonzero(ok)[-3:]
            a = -fit_slope(x[tail], y[tail])[0] if len(tail) >= 2 else np.nan
            a_all = -fit_slope(x[ok], y[ok])[0]
            yield crit, m, x, y, ok, tail, a, a_all, EPS_EXPONENT[crit][m]


def epsilon_exponents(best_e: pd.DataFrame, cfg: dict) -> pd.DataFrame:
    """Per (criterion, method): the table's exponent a of (1/eps)^a, the measured one over the three smallest eps
    reached and over all, and the eps never reached."""
    return pd.DataFrame([{"criterion": crit, "method": m, "table exponent": a_tab, "measured exponent": a,
                          "measured, all eps": a_all, "eps never reached": int((~ok).sum())}
                         for crit, m, x, y, ok, tail, a, a_all, a_tab in _eps_curves(best_e, cfg)])


def plot_epsilon(best_e: pd.DataFrame, cfg: dict):
    """The best step's cost against eps per criterion and method, with the table's (1/eps)^a."""
    EPSC = cfg["eps"]
    fig, axes = plots.figure(1, 2, row_height=4.3)
    axes = dict(zip(EPSC["eps_rel"], axes[0]))
    for crit, m, x, y, ok, tail, a, a_all, a_tab in _eps_curves(best_e, cfg):
        ax = axes[crit]
        ax.plot(x[ok], y[ok], "o-", color=PALETTE[m], label=f"{LABELS[m]}: exponent {a:.2f}")
        if ok.any():
            ax.plot(x, y[tail[-1]] * (x / x[tail[-1]]) ** (-a_tab), ":", color=PALETTE[m], lw=1.2)
    for crit, ax in axes.items():
        ax.set(xscale="log", yscale="log", xlabel=r"$\epsilon$ / initial value", ylabel="client gradients (best step)")
        ax.invert_xaxis()
        ax.set_title(fill(CRITERION[crit], 60), fontsize=9)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8)
    fig.suptitle(f"ε-dependence of the complexity tables (document 002): convex, not strongly convex quadratic\n"
                 f"(d = 32, two zero eigenvalues), n = {EPSC['n']}, b = 1, {len(cfg['seeds'])} seeds, best step of "
                 f"a √2 grid;\ndotted: the table's $(1/\\epsilon)^a$ through the smallest ε", fontsize=9)
    return fig


def epsilon_table(expo: pd.DataFrame) -> pd.DataFrame:
    """:func:`epsilon_exponents` with the methods by name, to two decimals."""
    return expo.assign(method=expo["method"].map(LABELS)).set_index(["criterion", "method"]).round(2)


def epsilon_values(expo: pd.DataFrame) -> dict:
    """The measured exponents (t_eps_<criterion>_<method>, t_eps_all_...)."""
    ex = expo.set_index(["criterion", "method"])
    return {**{f"t_eps_{c}_{m}": ex.loc[(c, m), "measured exponent"] for c, m in ex.index},
            **{f"t_eps_all_{c}_{m}": ex.loc[(c, m), "measured, all eps"] for c, m in ex.index}}


# ================================================================================================
# FedGD and FedPGD: eta = O(1/L)
# ================================================================================================
def gd_grid(cfg: dict) -> np.ndarray:
    """The step grid eta L of the FedGD/FedPGD section: 2^(k/2) over the profile's gd.k range."""
    return _sqrt2_grid(*cfg["gd"]["k"])


def _gd_rounds(cfg: dict) -> dict:
    return {"fedgd": cfg["gd"]["gd_rounds"], "fedpgd": cfg["gd"]["pgd_rounds"]}


def gd_runs(cfg: dict, store) -> pd.Series:
    """Per (kind, method, n): the largest grid eta L at which every seed of FedGD / FedPGD converges
    (`bounds.gd_step_sweep`)."""
    GD, seeds, grid, rounds = cfg["gd"], cfg["seeds"], gd_grid(cfg), _gd_rounds(cfg)
    gd = pd.concat([cached(store, dict(experiment="theory_gd_step_size", kind=kind, n=n, dim=8, method=m,
                                        eta_L=grid.tolist(), seeds=seeds, rounds=rounds[m], **extra(kind)),
                            lambda n=n, kind=kind, m=m: bounds.gd_step_sweep(family(n, kind), m, eta_L=grid,
                                                                             seeds=seeds, rounds=rounds[m])
                            ).assign(kind=kind)
                    for kind in ALL_KINDS for n in GD["ns"] for m in rounds])
    conv = gd[gd["metric"] == "converged"].groupby(["kind", "method", "n", "eta_L"])["value"].min().reset_index()
    return conv[conv["value"] == 1].groupby(["kind", "method", "n"])["eta_L"].max()


def plot_gd(gd_emax: pd.Series, cfg: dict):
    """FedGD's and FedPGD's largest converging eta L against n, per problem, with the bound's constant 1."""
    GD = cfg["gd"]
    fig, axes = plots.figure(1, 2, row_height=3.3, sharey=True)
    for ax, m in zip(axes[0], _gd_rounds(cfg)):
        for k, kind in enumerate(ALL_KINDS):
            y = gd_emax.xs((kind, m), level=("kind", "method")).reindex(GD["ns"])
            ax.plot(GD["ns"], y, "o-", color=f"C{k}", label=kind_short(kind))
        ax.axhline(1, color="k", ls=":", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel="clients n", title=SHORT[m])
        n_ticks(ax, GD["ns"])
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
    axes[0][0].set_ylabel(r"largest converging $\eta L$")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(fill("Step-size bounds O(1/L) of FedGD and FedPGD (document 002, both tables): dotted, the bound with "
                      "constant 1", 100), fontsize=9)
    return fig


def gd_values(gd_emax: pd.Series, cfg: dict) -> dict:
    """The section's numbers (t_gd_seeds, t_gd_rounds, t_pgd_rounds, t_gd_emax, t_pgd_emax)."""
    GD = cfg["gd"]
    return dict(t_gd_seeds=len(cfg["seeds"]), t_gd_rounds=GD["gd_rounds"], t_pgd_rounds=GD["pgd_rounds"],
                t_gd_emax=spread(gd_emax.xs("fedgd", level="method")),
                t_pgd_emax=spread(gd_emax.xs("fedpgd", level="method")))


# ================================================================================================
# ZeroSARAH at b = ceil(sqrt n)
# ================================================================================================
NCX = [k for k in ALL_KINDS if base(k) == "nonconvex"]


def _zs_piv(cfg: dict, store, kind: str, ns, eps_list) -> pd.DataFrame:
    """ZeroSARAH with b = ceil(sqrt n) clients per round: cost and rounds per (n, b, eps, eta L, seed)."""
    cx_seeds = cfg["cx"]["seeds"]
    frames = []
    for n in ns:
        b = int(np.ceil(np.sqrt(n)))
        for e in eps_list:
            eta_L = (2.0 ** (np.arange(-12, 3) / 2)).tolist()
            conf = dict(experiment="theory_complexity", kind=kind, n=n, dim=8, method=ZS, eta_L=eta_L, seeds=cx_seeds,
                        max_rounds=20 * n + 4000, eps_rel=e, b=b, stop_factor=2, **extra(kind))
            frames.append(cached(store, conf, lambda n=n, kind=kind, eta_L=eta_L, b=b, e=e: rounds_to_epsilon(
                family(n, kind), ZS, eta_L=eta_L, seeds=cx_seeds, max_rounds=20 * n + 4000, metric="grad_norm2",
                eps_rel=e, b=b, stop_factor=2)).assign(kind=kind, b=b, eps_=e))
    pv = pd.concat(frames).pivot_table(index=["kind", "n", "b", "eps_", "eta_L", "seed"], columns="metric",
                                       values="value").reset_index()
    pv["cost"] = np.where(pv["hit_round"] >= 0, pv["client_updates"], np.inf)
    pv["rounds"] = np.where(pv["hit_round"] >= 0, pv["hit_round"], np.inf)
    return pv


def zerosarah_sqrt_runs(cfg: dict, store) -> tuple[pd.DataFrame, float, pd.DataFrame]:
    """(slopes, eps exponent, best): per non-convex kind the log-log slope of ZeroSARAH's best cost in n with its
    bootstrap s.e. (`bounds.cost_slope`), the exponent a of cost ~ (1/eps)^a at n = zs.eps_n, and the best step's
    cost and rounds per (kind, n) (`bounds.best_cost`)."""
    CX, ZQ = cfg["cx"], cfg["zs"]
    zq = pd.concat([_zs_piv(cfg, store, k, CX["ns"], [CX["eps_rel"]["nonconvex"]]) for k in NCX])
    zs_sl = pd.DataFrame([dict(zip(("slope", "se"), bounds.cost_slope(zq[zq["kind"] == k], boot=ZQ["boot"])), kind=k)
                          for k in NCX]).set_index("kind")
    ze = _zs_piv(cfg, store, "nonconvex", [ZQ["eps_n"]], ZQ["eps_list"])
    be = ze.groupby("eps_").apply(lambda g: g.groupby("eta_L")["cost"].median().min())
    zs_eps = -fit_slope(be.index.to_numpy(dtype=float), be.to_numpy(dtype=float))[0]
    zs_best = pd.concat({k: bounds.best_cost(zq[zq["kind"] == k]) for k in NCX}, names=["kind"])
    return zs_sl, zs_eps, zs_best


def plot_zerosarah_sqrt(best: pd.DataFrame, zs_sl: pd.DataFrame, zs_best: pd.DataFrame, cfg: dict):
    """ZeroSARAH's best cost in n at b = 1 (`best`: :func:`complexity_runs`) and at b = ceil(sqrt n), with n^(1/2)."""
    CX = cfg["cx"]
    fig, ax = plots.figure(1, 1, width=6.0, row_height=3.6)
    ax = ax[0, 0]
    for k, kind in enumerate(NCX):
        b1 = best.loc[(kind, ZS)]
        ax.plot(b1.index, b1["cost"], "o--", color=f"C{k}", label=f"{kind_short(kind)}, b = 1")
        bs = zs_best.loc[kind]
        ax.plot(bs.index, bs["cost"], "s-", color=f"C{k}",
                label=f"{kind_short(kind)}, b = ⌈√n⌉: slope {zs_sl.loc[kind, 'slope']:.2f}")
    ns_ = np.array(CX["ns"], dtype=float)
    ax.plot(ns_, zs_best.loc[NCX[0]]["cost"].iloc[0] * (ns_ / ns_[0]) ** 0.5, "k:", lw=1,
            label=r"$n^{1/2}$ (the table)")
    ax.set(xscale="log", yscale="log", xlabel="clients n", ylabel="client gradients to reach ε (best step)")
    n_ticks(ax, CX["ns"])
    ax.legend(fontsize=7)
    ax.set_title(fill(f"ZeroSARAH's cost in n, ε = {CX['eps_rel']['nonconvex']:g} × initial ‖∇f‖², "
                      f"{len(CX['seeds'])} seeds", 70), fontsize=9)
    return fig


def zerosarah_sqrt_values(zs_sl: pd.DataFrame, zs_eps: float, zs_best: pd.DataFrame, cfg: dict) -> dict:
    """The section's numbers (t_zs_seeds, t_zs_eps_n, t_zs_sq_..., t_zs_eps)."""
    return dict(t_zs_seeds=len(cfg["cx"]["seeds"]), t_zs_eps_n=cfg["zs"]["eps_n"], t_zs_sq_sl=spread(zs_sl["slope"]),
                t_zs_sq_se=zs_sl["se"].max(),
                t_zs_sq_rounds_sl=spread([fit_slope(zs_best.loc[k].index, zs_best.loc[k]["rounds"])[0] for k in NCX]),
                t_zs_eps=zs_eps)
