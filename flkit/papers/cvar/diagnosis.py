"""Figs. 3-4 of document 003: the runs that tell the explanations of the small rare-class gain apart, read
against FedAvg on the same seeds (the same split and the same relayed users)."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from flkit.papers import claims
from flkit.papers.cvar.experiments import settings
from flkit.papers.cvar.report import RARE_CLASSES, final_accuracies

__all__ = ["paired_gains", "strong_risk", "STRONG_RISK", "gain_words", "for_reading", "INPUT_SCALING",
           "authors_scaling", "scaling_effect", "scaling_words", "scaling_by_seed", "LARGER_STEP", "STEP_FACTOR",
           "larger_step", "step_effect", "step_words"]

# Fed-CVaR-Avg at the document's best Fashion-MNIST cell (Table 1: gamma = alpha = 0.1) in the settings of Figs. 3
# and 4 (r = 90 %, 80 %), 3 seeds: does a stronger risk setting lift the rare classes?
STRONG_RISK = dict(settings=[0.9, 0.8], cells=[[0.1, 0.1]], seeds=[0, 1, 2])


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


# The authors' input scaling (their MNIST script trains on raw 0-255 pixels and tests on [0, 1] ones), paired
# with the page's runs on seeds 0-2: does it lift the rare classes?
INPUT_SCALING = dict(input_scaling="authors", seeds=[0, 1, 2])


def authors_scaling(s: Mapping) -> dict:
    """The settings of the authors'-input-scaling runs beside the page's settings `s` (same profile, RAM,
    rounds, cells and settings of r); the smoke profile keeps its own seeds."""
    extra = dict(INPUT_SCALING, seeds=None if s["profile"] == "smoke" else INPUT_SCALING["seeds"])
    keep = {k: s[k] for k in ("ram", "rounds", "settings", "cells", "train_subset", "test_subset") if k in s}
    return settings(s["experiment"], s["profile"], **keep, **extra)


def scaling_effect(df_document: pd.DataFrame, df_authors: pd.DataFrame, last_frac: float = 0.1) -> pd.DataFrame:
    """Per r, method and quantity (each rare class, overall): the accuracy (%) over the last `last_frac` of the
    rounds with the document's inputs and with the authors' scaling, mean over the seeds both have, and the
    paired difference (authors' minus document's) with two standard errors and the verdict of "the authors'
    scaling above the document's" (`claims.compare`)."""
    a, d = final_accuracies(df_authors, last_frac), final_accuracies(df_document, last_frac)
    rows = []
    for r in sorted(set(a["pattern_frac"]) & set(d["pattern_frac"]), reverse=True):
        for method in ("fedavg", "fed-cvar-avg"):
            for q in [*RARE_CLASSES.get(r, ()), "overall"]:
                def pick(acc):
                    g = acc[(acc["pattern_frac"] == r) & (acc["method"] == method)]
                    if method != "fedavg":
                        g = g[(g["alpha"].isin(a["alpha"])) & (g["gamma"].isin(a["gamma"]))]
                    g = g[g["metric"] == "test_acc"] if q == "overall" else g[(g["metric"] == "test_acc_class")
                                                                               & (g["class"] == q)]
                    return g.groupby("seed")["value"].mean()
                xa, xd = pick(a), pick(d)
                seeds = sorted(set(xa.index) & set(xd.index))
                if not seeds:
                    continue
                c = claims.compare(f"r = {r}, {q}, {method}: the authors' input scaling above the document's",
                                   xa.loc[seeds].to_numpy(float), xd.loc[seeds].to_numpy(float))
                rows.append(dict(r=r, method=method, quantity=str(q), seeds=len(seeds),
                                 document_inputs=xd.loc[seeds].mean(), authors_inputs=xa.loc[seeds].mean(),
                                 difference=c.ours, two_se=c.margin, verdict=c.verdict))
    return pd.DataFrame(rows, columns=["r", "method", "quantity", "seeds", "document_inputs", "authors_inputs",
                                       "difference", "two_se", "verdict"])


def scaling_by_seed(df_document: pd.DataFrame, df_authors: pd.DataFrame, last_frac: float = 0.1) -> pd.DataFrame:
    """The runs behind `scaling_effect`, one row per (r, quantity, seed): each method's accuracy (%) over the last
    `last_frac` of the rounds with the document's inputs and with the authors' scaling (the seeds the
    authors'-scaling runs have; Fed-CVaR-Avg at their cells)."""
    a, d = final_accuracies(df_authors, last_frac), final_accuracies(df_document, last_frac)
    d = d[d["seed"].isin(set(a["seed"])) & d["pattern_frac"].isin(set(a["pattern_frac"]))
          & ((d["method"] == "fedavg") | (d["alpha"].isin(a["alpha"]) & d["gamma"].isin(a["gamma"])))]
    both = pd.concat([d.assign(inputs="document"), a.assign(inputs="authors'")])
    rare = [c in RARE_CLASSES.get(r, ()) for r, c in zip(both["pattern_frac"], both["class"])]   # each r's own
    both = both[(both["metric"] == "test_acc") | ((both["metric"] == "test_acc_class") & np.array(rare, dtype=bool))]
    both = both.assign(quantity=[("overall" if m == "test_acc" else f"class {int(c)}")
                                 for m, c in zip(both["metric"], both["class"])],
                       method=both["method"].map({"fedavg": "FedAvg", "fed-cvar-avg": "Fed-CVaR-Avg"}))
    out = both.pivot_table(index=["pattern_frac", "quantity", "seed"], columns=["method", "inputs"], values="value")
    return out.rename_axis(index=["r", "quantity", "seed"])


def _diff(row) -> str:
    """"+3.0 ± 0.2 points, confirmed", or with one seed "+3.0 points, one seed: no standard error"."""
    if row.seeds < 2:
        return f"{row.difference:+.1f} points, one seed: no standard error, {row.verdict}"
    return f"{row.difference:+.1f} ± {row.two_se:.1f} points, {row.verdict}"


def scaling_words(effect: pd.DataFrame, gains_authors: pd.DataFrame, r: float = 0.9) -> dict[str, str]:
    """`scaling_effect` and the authors'-scaling runs' `paired_gains` at `r` in words: what the scaling does
    to each method's rare classes, and Fed-CVaR-Avg against FedAvg when both train on raw pixels."""
    e = effect[effect["r"] == r] if len(effect) else effect
    if e.empty:
        return {"effect": "n/a (no stored runs)", "gain": "n/a (no stored runs)", "seeds": "0"}
    name = {"fedavg": "FedAvg", "fed-cvar-avg": "Fed-CVaR-Avg"}
    say = lambda row: (f"{name[row.method]} on {'the overall test set' if row.quantity == 'overall' else 'class ' + row.quantity}: "  # noqa: E731
                       f"{row.authors_inputs:.1f} % against {row.document_inputs:.1f} % ({_diff(row)})")
    g = gains_authors[gains_authors["r"] == r] if len(gains_authors) else gains_authors
    gain = "; ".join(f"{'overall' if row.quantity == 'overall' else 'class ' + row.quantity}: "
                     f"{row.fed_cvar_avg:.1f} % against {row.fedavg:.1f} % ({_diff(row)})"
                     for row in g.itertuples()) or "n/a (no stored runs)"
    return {"effect": "; ".join(say(row) for row in e.itertuples()), "gain": gain, "seeds": str(int(e["seeds"].min()))}


def strong_risk(s: Mapping) -> dict:
    """The settings of the stronger risk setting beside the page's settings `s` (same profile, RAM, rounds and
    inputs); the smoke profile keeps its own seeds."""
    extra = dict(STRONG_RISK, seeds=None if s["profile"] == "smoke" else STRONG_RISK["seeds"])
    keep = {k: s[k] for k in ("ram", "rounds", "input_scaling", "train_subset", "test_subset") if k in s}
    return settings(s["experiment"], s["profile"], **keep, **extra)


# FedAvg with its step multiplied by the largest weight Alg. 1 gives a step at alpha = gamma = 0.3,
# (1 - gamma) / alpha + gamma = 2.63, in Fig. 3's setting, 3 seeds: does a larger step alone give Fed-CVaR-Avg's
# numbers?
LARGER_STEP = dict(settings=[0.9], cells=[[1.0, 1.0]], seeds=[0, 1, 2])
STEP_FACTOR = (1 - 0.3) / 0.3 + 0.3


def larger_step(s: Mapping) -> dict:
    """The settings of FedAvg with its step `lr_theta` multiplied by `STEP_FACTOR`, beside the page's settings `s`
    (same profile, RAM, rounds and inputs; risk-neutral cells only, so FedAvg's runs alone); the smoke profile
    keeps its own seeds."""
    extra = dict(LARGER_STEP, seeds=None if s["profile"] == "smoke" else LARGER_STEP["seeds"])
    keep = {k: s[k] for k in ("ram", "rounds", "input_scaling", "train_subset", "test_subset") if k in s}
    return settings(s["experiment"], s["profile"], lr_theta=s["lr_theta"] * STEP_FACTOR, **keep, **extra)


def step_effect(df: pd.DataFrame, df_step: pd.DataFrame, alpha: float = 0.3, gamma: float = 0.3,
                last_frac: float = 0.1) -> pd.DataFrame:
    """Per r and quantity (each rare class, overall), on the seeds all three have: the accuracy (%) over the last
    `last_frac` of the rounds of FedAvg, of FedAvg with the larger step (`df_step`) and of Fed-CVaR-Avg at
    (alpha, gamma) (`df`), and two paired comparisons (`claims.compare`): the larger step against FedAvg
    ("step_gain") and Fed-CVaR-Avg against the larger step ("cvar_minus_step")."""
    acc, big = final_accuracies(df, last_frac), final_accuracies(df_step, last_frac)
    big = big[big["method"] == "fedavg"]
    rows = []
    for r in sorted(set(big["pattern_frac"]) & set(acc["pattern_frac"]), reverse=True):
        for q in [*RARE_CLASSES.get(r, ()), "overall"]:
            def pick(g):
                g = g[g["pattern_frac"] == r]
                g = g[g["metric"] == "test_acc"] if q == "overall" else g[(g["metric"] == "test_acc_class")
                                                                           & (g["class"] == q)]
                return g.groupby("seed")["value"].mean()
            fed = pick(acc[acc["method"] == "fedavg"])
            cv = pick(acc[(acc["method"] != "fedavg") & (acc["alpha"] == alpha) & (acc["gamma"] == gamma)])
            st = pick(big)
            seeds = sorted(set(fed.index) & set(cv.index) & set(st.index))
            if not seeds:
                continue
            f, c, b = (x.loc[seeds].to_numpy(float) for x in (fed, cv, st))
            gain = claims.compare(f"r = {r}, {q}: FedAvg with a {STEP_FACTOR:.2f}x step above FedAvg", b, f)
            rest = claims.compare(f"r = {r}, {q}: Fed-CVaR-Avg above FedAvg with a {STEP_FACTOR:.2f}x step", c, b)
            rows.append(dict(r=r, quantity=str(q), seeds=len(seeds), fedavg=f.mean(), fedavg_larger_step=b.mean(),
                             fed_cvar_avg=c.mean(), step_gain=gain.ours, step_gain_two_se=gain.margin,
                             step_gain_verdict=gain.verdict, cvar_minus_step=rest.ours,
                             cvar_minus_step_two_se=rest.margin, cvar_minus_step_verdict=rest.verdict))
    return pd.DataFrame(rows, columns=["r", "quantity", "seeds", "fedavg", "fedavg_larger_step", "fed_cvar_avg",
                                       "step_gain", "step_gain_two_se", "step_gain_verdict", "cvar_minus_step",
                                       "cvar_minus_step_two_se", "cvar_minus_step_verdict"])


def step_words(effect: pd.DataFrame, r: float = 0.9) -> dict[str, str]:
    """`step_effect` at `r` in words: the larger step against FedAvg, and Fed-CVaR-Avg against the larger step."""
    e = effect[effect["r"] == r] if len(effect) else effect
    if e.empty:
        return {"gain": "n/a (no stored runs)", "rest": "n/a (no stored runs)", "seeds": "0",
                "reading": "not run yet"}
    name = lambda q: "overall" if q == "overall" else f"class {q}"  # noqa: E731

    def diff(d, se, verdict, n):
        return f"{d:+.1f} points, one seed: no standard error, {verdict}" if n < 2 else f"{d:+.1f} ± {se:.1f} points, {verdict}"
    gain = "; ".join(f"{name(row.quantity)}: {row.fedavg_larger_step:.1f} % against {row.fedavg:.1f} % "
                     f"({diff(row.step_gain, row.step_gain_two_se, row.step_gain_verdict, row.seeds)})"
                     for row in e.itertuples())
    rest = "; ".join(f"{name(row.quantity)}: {row.fed_cvar_avg:.1f} % against {row.fedavg_larger_step:.1f} % "
                     f"({diff(row.cvar_minus_step, row.cvar_minus_step_two_se, row.cvar_minus_step_verdict, row.seeds)})"
                     for row in e.itertuples())
    return {"gain": gain, "rest": rest, "seeds": str(int(e["seeds"].min())), "reading": _step_reading(e)}


def _step_reading(e: pd.DataFrame) -> str:
    """Which explanation the rare-class rows of `step_effect` (at one r) support, from their verdicts."""
    rare = e[e["quantity"] != "overall"]
    gain = set(rare["step_gain_verdict"])
    rest = set(rare["cvar_minus_step_verdict"])
    if rest == {"confirmed"}:
        return ("Fed-CVaR-Avg is ahead of the larger step beyond two standard errors on the rare classes: a larger "
                "step alone does not give its numbers, its reweighting does more")
    if rest == {"contradicted"}:
        return ("the larger step is ahead of Fed-CVaR-Avg beyond two standard errors on the rare classes: a larger "
                "step alone gives more than Fed-CVaR-Avg's reweighting")
    if gain == {"confirmed"}:
        return ("the larger step lifts FedAvg's rare classes beyond two standard errors and Fed-CVaR-Avg is not "
                "ahead of it beyond them: a larger step alone accounts for Fed-CVaR-Avg's rare-class numbers as far "
                "as these seeds can tell")
    return ("neither comparison is beyond two standard errors on the rare classes: at this number of seeds the runs "
            "cannot tell a larger step from Fed-CVaR-Avg's reweighting")


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
    out = out.astype(object).where(out.notna(), "n/a (one seed)")      # no standard error from one seed
    return out.rename(columns={"quantity": "rare class / overall", "fedavg": "FedAvg (%)",
                               "fed_cvar_avg": "Fed-CVaR-Avg (%)", "difference": "paired difference (points)",
                               "two_se": "two standard errors"})
