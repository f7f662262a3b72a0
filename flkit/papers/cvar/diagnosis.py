"""Figs. 3-4 of document 003: the runs that tell the explanations of the small rare-class gain apart, read
against FedAvg on the same seeds (the same split and the same relayed users)."""
from __future__ import annotations

import pandas as pd

from flkit.papers import claims
from flkit.papers.cvar.report import RARE_CLASSES, final_accuracies

__all__ = ["paired_gains"]


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
