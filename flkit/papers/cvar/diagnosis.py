"""Figs. 3-4 of document 003: the runs that tell the explanations of the small rare-class gain apart, read
against FedAvg on the same seeds (the same split and the same relayed users)."""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from flkit.papers import claims
from flkit.papers.cvar.report import RARE_CLASSES, final_accuracies

__all__ = ["paired_gains", "strong_risk", "STRONG_RISK", "gain_words", "for_reading"]

# Fed-CVaR-Avg at the document's best Fashion-MNIST cell (Table 1: gamma = alpha = 0.1) in Fig. 3's setting
# (r = 90 %), 3 seeds: does a stronger risk setting lift the rare class?
STRONG_RISK = dict(settings=[0.9], cells=[[0.1, 0.1]], seeds=[0, 1, 2])


def paired_gains(df: pd.DataFrame, last_frac: float = 0.1) -> pd.DataFrame:
    """Every Fed-CVaR-Avg cell (alpha, gamma) of the stored runs `df` (tidy, config fields as columns) against
    FedAvg, per r and quantity (each rare class, and overall): accuracy (%) over the evaluations in the last
    `last_frac` of the rounds, mean over the seeds both have; the paired difference, two standard errors of
    it and the verdict of "Fed-CVaR-Avg above FedAvg" (`claims.compare`)."""
    acc = final_accuracies(df, last_frac)
    rows = []
    for r in sorted(set(acc["pattern_frac"]), reverse=True):
        at = acc[acc["pattern_frac"] == r]
        fed_runs = at[at["method"] == "fedavg"]
        cells = at.loc[at["method"] != "fedavg", ["alpha", "gamma"]].drop_duplicates().sort_values(["alpha", "gamma"])
        for alpha, gamma in cells.itertuples(index=False):
            cv_runs = at[(at["method"] != "fedavg") & (at["alpha"] == alpha) & (at["gamma"] == gamma)]
            for q in [*RARE_CLASSES.get(r, ()), "overall"]:
                pick = lambda g: (g[(g["metric"] == "test_acc")] if q == "overall"  # noqa: E731
                                  else g[(g["metric"] == "test_acc_class") & (g["class"] == q)]).set_index("seed")["value"]
                fed, cv = pick(fed_runs), pick(cv_runs)
                seeds = sorted(set(fed.index) & set(cv.index))
                c = claims.compare(f"r = {r}, {q}: Fed-CVaR-Avg (alpha = {alpha:g}, gamma = {gamma:g}) above FedAvg",
                                   cv.loc[seeds].to_numpy(float), fed.loc[seeds].to_numpy(float))
                rows.append(dict(r=r, alpha=alpha, gamma=gamma, quantity=str(q), seeds=len(seeds),
                                 fedavg=fed.loc[seeds].mean(), fed_cvar_avg=cv.loc[seeds].mean(),
                                 difference=c.ours, two_se=c.margin, verdict=c.verdict))
    return pd.DataFrame(rows)


def strong_risk(s: Mapping) -> dict:
    """The settings of the stronger risk setting beside the page's settings `s` (same profile, RAM, rounds and
    inputs); the smoke profile keeps its own seeds."""
    from flkit.papers.cvar.experiments import settings
    extra = dict(STRONG_RISK, seeds=None if s["profile"] == "smoke" else STRONG_RISK["seeds"])
    keep = {k: s[k] for k in ("ram", "rounds", "input_scaling", "train_subset", "test_subset") if k in s}
    return settings(s["experiment"], s["profile"], **keep, **extra)


def gain_words(gains: pd.DataFrame, alpha: float, gamma: float, r: float = 0.9) -> dict[str, str]:
    """One cell's rows of `paired_gains` in words: the rare classes and overall, ours vs FedAvg with the paired
    difference and its two standard errors."""
    g = gains[(gains["alpha"] == alpha) & (gains["gamma"] == gamma) & (gains["r"] == r)]
    if g.empty:
        return {"rare": "n/a (no stored runs)", "overall": "n/a (no stored runs)", "seeds": "0"}
    say = lambda row: (f"{row.fed_cvar_avg:.1f} % against {row.fedavg:.1f} % (paired difference "  # noqa: E731
                       f"{row.difference:+.1f} ± {row.two_se:.1f} points, {row.verdict})")
    rare = g[g["quantity"] != "overall"]
    return {"rare": "; ".join(f"class {row.quantity}: {say(row)}" for row in rare.itertuples()),
            "overall": say(next(g[g["quantity"] == "overall"].itertuples())), "seeds": str(int(g["seeds"].min()))}


def for_reading(gains: pd.DataFrame, decimals: int = 2) -> pd.DataFrame:
    """`paired_gains` as the page shows it: r in %, headers in words."""
    out = gains.round(decimals).assign(r=[f"{100 * r:.0f} %" for r in gains["r"]])
    return out.rename(columns={"quantity": "rare class / overall", "fedavg": "FedAvg (%)",
                               "fed_cvar_avg": "Fed-CVaR-Avg (%)", "difference": "paired difference (points)",
                               "two_se": "two standard errors"})
