"""FedAU's cutoff study (document 000, Theorem 3 and Corollary 4; the page notebooks/fedau/cutoff.ipynb): FedAU
with several cutoffs K, and no cutoff, under Bernoulli participation whose floor p_min varies, on the main
table's setting (:mod:`flkit.papers.fedau.table`: data, model, the authors' FedAU step sizes, runs and store).

The document shows this study as a figure whose image is not in the text we have, so the page reads what the
theory predicts for it: Theorem 3's bias term (1/N) sum_n (1 - p_n)^(2K) falls with K, Corollary 4's K = log_c T
(c = 1/(1 - min p_n)^2) brings it to at most 1/T, and the document's table puts K = 50 ahead of no cutoff.

A run of the study is a table run (:func:`table.base_config <flkit.papers.fedau.table.base_config>`) of the
method "FedAU (K = <K>)" at the study's p_min, so its runs with K = 50 or none at the table's p_min and seeds are
the table's own runs (the same configs, stored once).
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from flkit import plots
from flkit.papers import claims
from flkit.papers.fedau import table
from flkit.papers.fedau.common import NAMES, corollary4_K, load_data, split
from flkit.papers.settings import positive_int, probabilities, seeds as check_seeds, with_overrides

__all__ = ["GRIDS", "PROFILES", "profile", "configs", "sweep", "summarize", "checks", "best_cutoffs", "bias_term",
           "bias_terms", "corollary4_table", "plot_accuracy", "plot_bias", "header", "glue_values"]

# per profile of the table (table.PROFILES): the cutoffs K (None: no cutoff), the floors p_min and the seeds
GRIDS = {
    "smoke": dict(cutoffs=[5, None], p_mins=[0.05], cutoff_seeds=[1]),
    # the CPU profile executed here: a smaller grid than the document's
    "reduced": dict(cutoffs=[5, 20, 50, 200, None], p_mins=[0.005, 0.02, 0.05], cutoff_seeds=[1, 2, 3]),
    # the CNN spot-check's study is a subset of its table (K = 50 and no cutoff at p_min 0.02 on the same seeds),
    # so the sweep's --study all adds no run
    "cnn-spot": dict(cutoffs=[50, None], p_mins=[0.02], cutoff_seeds=[1, 2]),
    "paper": dict(cutoffs=[5, 10, 20, 50, 100, 500, None], p_mins=[0.005, 0.01, 0.02, 0.05],
                  cutoff_seeds=[1, 2, 3, 4, 5]),
}
PROFILES = {name: dict(copy.deepcopy(table.PROFILES[name]), **GRIDS[name]) for name in table.PROFILES}
# the study trains FedAU with the authors' step sizes (README.md of IBM/fedau@6e9cce9), whatever its K
STEPS = table.METHODS["FedAU (K = inf)"][2:]


def profile(name: str, **overrides) -> dict:
    """The table's settings of a profile with its cutoff grid, and `overrides` (None values keep the profile's;
    the table's settings and the grid's alike); checked before any work."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    s = with_overrides(copy.deepcopy(PROFILES[name]), overrides, f"FedAU cutoff profile {name!r}")
    s["profile"] = name
    table.validate(s)
    validate(s)
    return s


def validate(s: Mapping) -> None:
    """One clear ValueError for a bad setting of the grid, before any work."""
    check_seeds(s["cutoff_seeds"], "cutoff_seeds")
    for v in s["cutoffs"]:
        if v is not None:
            positive_int(v, "every cutoff K in cutoffs (None: no cutoff)")
    probabilities(s["p_mins"], "p_mins")


def configs(s: Mapping) -> list[dict]:
    """One config per run: FedAU with every K of ``cutoffs`` x every p_min of ``p_mins`` x every seed of
    ``cutoff_seeds``, under Bernoulli participation."""
    base, (gamma, eta) = table.base_config(s), STEPS
    return [dict(base, pattern="bernoulli", method=f"FedAU (K = {K or 'inf'})", rule="fedau", K=K, gamma=gamma,
                 eta=eta, p_min=p_min, seed=seed)
            for p_min in s["p_mins"] for K in s["cutoffs"] for seed in s["cutoff_seeds"]]


def sweep(s: Mapping, **kwargs) -> pd.DataFrame:
    """Every run of the study, from the store or computed (:func:`table.sweep
    <flkit.papers.fedau.table.sweep>`, whose keyword arguments it takes)."""
    return table.sweep(s, runs=configs(s), desc="FedAU cutoff", **kwargs)


def header(s: Mapping) -> str:
    """What the profile runs, in one line (the page's first output)."""
    Ks = ["inf" if k is None else k for k in s["cutoffs"]]
    return (f"profile {s['profile']!r}: {NAMES[s['dataset']]}, model {table.model_name(s)}, {s['rounds']} rounds, "
            f"K in {Ks}, p_min in {s['p_mins']}, seeds {s['cutoff_seeds']}")


# ------------------------------------------------------------------------------------------ the theory
def bias_term(s: Mapping, p_min: float, Ks: Sequence, seeds: Sequence[int]) -> pd.DataFrame:
    """Theorem 3's bias term (1/N) sum_n (1 - p_n)^(2K) for the seeds' p_n (the stand-in's split), per K."""
    c0 = dict(table.base_config(s), p_min=p_min)
    y = load_data(c0, "cpu")[1].cpu().numpy()
    rows = []
    for seed in seeds:
        p = split(dict(c0, seed=seed), y)[1]
        for K in Ks:
            rows.append(dict(seed=seed, p_min=p_min, K=np.inf if K is None else K,
                             bias=0.0 if K is None else float(np.mean((1 - p) ** (2 * K))), min_p=float(p.min())))
    return pd.DataFrame(rows)


def bias_terms(s: Mapping) -> pd.DataFrame:
    """:func:`bias_term` for every p_min, K and seed of the study."""
    return pd.concat([bias_term(s, pm, s["cutoffs"], s["cutoff_seeds"]) for pm in s["p_mins"]])


def corollary4_table(s: Mapping) -> pd.DataFrame:
    """Corollary 4's K for every p_min of the study, at the profile's horizon and at the document's."""
    k4 = [corollary4_K(pm, s["rounds"]) for pm in s["p_mins"]]
    return pd.DataFrame({"p_min": s["p_mins"], "Corollary 4's K at this T": [round(v) for v in k4],
                         "at T = 10,000": [round(corollary4_K(pm, 10000)) for pm in s["p_mins"]]})


def plot_bias(bias: pd.DataFrame, s: Mapping):
    """The bias term of :func:`bias_terms` (mean over seeds) vs K, one line per p_min, Corollary 4's K dotted."""
    fig, axes = plots.figure(1, 1, width=5.5, row_height=3.0)
    ax = axes[0, 0]
    for i, (pm, g) in enumerate(bias[np.isfinite(bias.K)].groupby("p_min")):
        m = g.groupby("K")["bias"].mean()
        ax.plot(m.index, m.values, marker="o", color=f"C{i}", label=f"p_min = {pm:g}")
        ax.axvline(corollary4_K(pm, s["rounds"]), color=f"C{i}", ls=":")
    ax.plot([], [], "k:", label="Corollary 4's K")
    ax.set(xscale="log", yscale="log", xlabel="cutoff K (rounds)", ylabel="bias term (1/N) Σ (1 - p_n)^(2K)")
    ax.legend()
    return fig


# -------------------------------------------------------------------------------------------- the runs
def summarize(df: pd.DataFrame, s: Mapping, metric: str = "test_acc") -> pd.DataFrame:
    """Mean and sd over seeds (%) of the final-window accuracy per (p_min, K)."""
    fw = table.final_window(df, s)
    fw = fw[fw.metric == metric].assign(K=lambda x: x["K"].fillna(np.inf))
    g = fw.groupby(["p_min", "K"])["value"]
    return pd.DataFrame({"mean": 100 * g.mean(), "sd": 100 * g.std(ddof=1), "seeds": g.count()}).reset_index()


def plot_accuracy(cs: pd.DataFrame):
    """Final-window accuracy (:func:`summarize`) vs the cutoff K (K = inf drawn at the right end), one line per
    p_min."""
    fig, axes = plots.figure(1, 1, width=5.5, row_height=3.4)
    ax = axes[0, 0]
    Ks = sorted(cs.K.unique())
    finite = [k for k in Ks if np.isfinite(k)]
    pos = {k: (k if np.isfinite(k) else max(finite) * 4) for k in Ks}
    groups = list(cs.groupby("p_min"))
    for i, (p_min, g) in enumerate(groups):
        g = g.sort_values("K")
        shift = 1.06 ** (i - (len(groups) - 1) / 2)          # side by side, so that the bars do not overlap
        x = [pos[k] * shift for k in g.K]
        ax.errorbar(x, g["mean"], yerr=g["sd"].fillna(0), marker="o", capsize=3, label=f"p_min = {p_min:g}")
    ax.set_xscale("log")
    ax.set_xticks([pos[k] for k in Ks], [f"{k:g}" if np.isfinite(k) else "∞" for k in Ks])
    ax.minorticks_off()
    ax.set_xlabel("cutoff K (rounds)")
    ax.set_ylabel("test accuracy (%), mean ± sd")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=3, frameon=False)
    return fig


def checks(df: pd.DataFrame, s: Mapping, metric: str = "test_acc") -> list[claims.Check]:
    """Per p_min, paired over seeds: the smallest K loses to no cutoff; K = 50 >= no cutoff (the
    document's table); the largest finite K of the grid, when at least Corollary 4's K, is within half a
    point of no cutoff."""
    fw = table.final_window(df, s)
    fw = fw[fw.metric == metric].assign(K=lambda x: x["K"].fillna(np.inf))
    ps = 100 * fw.pivot_table(index=["p_min", "K"], columns="seed", values="value")
    finite = sorted(k for k in s["cutoffs"] if k is not None)
    out = []
    for pm in s["p_mins"]:
        def v(K):
            return ps.loc[(pm, K)].to_numpy() if (pm, K) in ps.index else np.array([np.nan])
        if finite:
            out.append(claims.compare(f"p_min = {pm:g}: no cutoff >= K = {finite[0]}", v(np.inf), v(finite[0])))
        if 50 in finite:
            out.append(claims.compare(f"p_min = {pm:g}: K = 50 >= no cutoff", v(50), v(np.inf)))
        k4 = corollary4_K(pm, s["rounds"])
        big = [k for k in finite if k >= k4]
        if big:
            out.append(claims.close(f"p_min = {pm:g}: K = {big[0]} (>= Corollary 4's {k4:.0f}) within 0.5 point "
                                    f"of no cutoff", v(big[0]), v(np.inf), threshold=0.5))
    return out


def best_cutoffs(cs: pd.DataFrame) -> pd.DataFrame:
    """Per p_min: the K of the grid with the highest mean accuracy, its accuracy and that of no cutoff."""
    rows = []
    for p_min, g in cs.groupby("p_min"):
        best = g.loc[g["mean"].idxmax()]
        none = g[~np.isfinite(g.K)]["mean"]
        rows.append(dict(p_min=p_min, best_K=best.K, best_acc=best["mean"],
                         no_cutoff_acc=float(none.iloc[0]) if len(none) else np.nan))
    return pd.DataFrame(rows)


def glue_values(found: Sequence[claims.Check], cs: pd.DataFrame, best: pd.DataFrame, s: Mapping) -> dict:
    """The page's numbers for its prose: the checks' counts (n_checks, n_ok, n_nt), the best K of every p_min
    (best_K) and its largest gain over no cutoff in points (best_gain), the range of Corollary 4's K
    (k4_range) and the spread of the mean accuracies over the grid (acc_spread)."""
    k4 = [corollary4_K(pm, s["rounds"]) for pm in s["p_mins"]]
    return dict(n_checks=len(found), n_ok=sum(c.ok for c in found),
                n_nt=sum(c.verdict == "not testable at this scale" for c in found),
                best_K=", ".join(f"{k:g}" for k in best.best_K.unique()),
                best_gain=float((best.best_acc - best.no_cutoff_acc).max()),
                k4_range=f"{min(k4):.0f} to {max(k4):.0f}", acc_spread=float(cs["mean"].max() - cs["mean"].min()))
