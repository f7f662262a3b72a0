"""Figs. 3-4 of document 003: the runs that tell the explanations of the small rare-class gain apart, read
against FedAvg on the same seeds (the same split and the same relayed users)."""
from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Mapping

import numpy as np
import pandas as pd

from flkit import plots
from flkit.papers import claims
from flkit.papers.cvar.common import (METHOD_COLORS, METHOD_LABELS, RARE_CLASSES, final_accuracies, legend_below,
                                      run_configs, settings)
from flkit.results import canonical_json

__all__ = ["paired_gains", "strong_risk", "STRONG_RISK", "gain_words", "for_reading", "INPUT_SCALING",
           "authors_scaling", "scaling_effect", "scaling_words", "scaling_by_seed", "LARGER_STEP", "STEP_FACTOR",
           "larger_step", "step_effect", "step_words", "LONG_HORIZON", "long_horizon", "horizon_runs",
           "horizon_effect", "horizon_checks", "horizon_words", "horizon_figure"]

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
                                  else g[(g["metric"] == "test_acc_class") & (g["class"] == q)]
                                  ).set_index("seed")["value"]
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
    say = lambda row: (f"{name[row.method]} on "  # noqa: E731
                       f"{'the overall test set' if row.quantity == 'overall' else 'class ' + row.quantity}: "
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
        if n < 2:
            return f"{d:+.1f} points, one seed: no standard error, {verdict}"
        return f"{d:+.1f} ± {se:.1f} points, {verdict}"
    gain = "; ".join(f"{name(row.quantity)}: {row.fedavg_larger_step:.1f} % against {row.fedavg:.1f} % "
                     f"({diff(row.step_gain, row.step_gain_two_se, row.step_gain_verdict, row.seeds)})"
                     for row in e.itertuples())
    rest = "; ".join(f"{name(row.quantity)}: {row.fed_cvar_avg:.1f} % against {row.fedavg_larger_step:.1f} % "
                     "(" + diff(row.cvar_minus_step, row.cvar_minus_step_two_se, row.cvar_minus_step_verdict,
                                row.seeds) + ")"
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


# Fig. 3's setting (r = 90 %) run twice as long as the page's horizon (8000 rounds at the document's scale),
# seeds 0-2: have the rare-class curves levelled off by round 4000, and does Fed-CVaR-Avg pull ahead later?
LONG_HORIZON = dict(settings=[0.9], seeds=[0, 1, 2], factor=2)


def long_horizon(s: Mapping) -> dict:
    """The settings of Fig. 3's setting run `LONG_HORIZON["factor"]` times the page's rounds, beside the page's
    settings `s` (same profile, RAM, cells and inputs); the smoke profile keeps its own seeds. At the paper
    profile: the runs of the ledger item `cvar-mnist-horizon` (8000 rounds)."""
    extra = dict(settings=LONG_HORIZON["settings"], rounds=LONG_HORIZON["factor"] * s["rounds"],
                 seeds=None if s["profile"] == "smoke" else LONG_HORIZON["seeds"])
    keep = {k: s[k] for k in ("ram", "cells", "input_scaling", "train_subset", "test_subset") if k in s}
    return settings(s["experiment"], s["profile"], **keep, **extra)


def _without_seed(config: Mapping) -> str:
    return canonical_json({k: v for k, v in config.items() if k != "seed"})


def horizon_runs(store, s_long: Mapping | None = None) -> pd.DataFrame:
    """The stored runs of `s_long` (default: `long_horizon` of the document's MNIST setting, 8000 rounds) in
    `store` (a `flkit.results.Store`), for every seed stored with both methods (FedAvg and Fed-CVaR-Avg at the
    cells of `s_long`), whatever the seeds `s_long` plans: their joined tidy table (`Store.load_many`), empty
    when no seed has both."""
    s_long = long_horizon(settings("mnist", "paper")) if s_long is None else s_long
    want = {_without_seed(c) for c in run_configs(s_long)}
    found: dict[int, list[dict]] = {}
    for m in store.manifests():
        c = m["config"]
        if "seed" in c and _without_seed(c) in want:
            found.setdefault(int(c["seed"]), []).append(c)
    both = [cs for seed, cs in sorted(found.items()) if len(cs) == len(want)]
    return store.load_many([c for cs in both for c in cs]) if both else pd.DataFrame()


_HORIZON_COLUMNS = ["r", "quantity", "seed", "read_at", "rounds", "fedavg_read", "fedavg_end", "fedavg_change",
                    "fed_cvar_avg_read", "fed_cvar_avg_end", "fed_cvar_avg_change", "gain_read", "gain_end"]


def horizon_effect(store, s_long: Mapping | None = None, *, last_frac: float = 0.1,
                   df: pd.DataFrame | None = None) -> pd.DataFrame:
    """The long-horizon runs (`horizon_runs(store, s_long)`, or the tidy table `df` of such runs), per r,
    quantity (each rare class, and overall) and seed: each method's accuracy (%) over the last `last_frac` of
    the rounds read at half the runs' horizon (`read_at`, the page's horizon: rounds 3600-4000 of an 8000-round
    run) and at its end (rounds 7200-8000), the windows of `final_accuracies` (the page's reading), both
    from the same run; the change between them per method ("_change", end minus read); Fed-CVaR-Avg minus
    FedAvg at both ("gain_read", "gain_end"). Rows only for the seeds both methods have; empty (with these
    columns) when none."""
    if not 0 < last_frac <= 1:
        raise ValueError(f"last_frac must be in (0, 1], got {last_frac!r}")
    df = horizon_runs(store, s_long) if df is None else df
    if df.empty:
        return pd.DataFrame(columns=_HORIZON_COLUMNS)
    T = int(df["rounds"].max())
    half = T // LONG_HORIZON["factor"]
    early = df[df["round"] <= half].assign(rounds=half)
    acc = {"read": final_accuracies(early, last_frac), "end": final_accuracies(df, last_frac)}
    rows = []
    for r in sorted(set(acc["end"]["pattern_frac"]), reverse=True):
        for q in [*RARE_CLASSES.get(r, ()), "overall"]:
            def pick(a, method):
                g = a[(a["pattern_frac"] == r) & (a["method"] == method)]
                g = g[g["metric"] == "test_acc"] if q == "overall" else g[(g["metric"] == "test_acc_class")
                                                                           & (g["class"] == q)]
                return g.groupby("seed")["value"].mean()
            v = {(m, w): pick(acc[w], m) for m in ("fedavg", "fed-cvar-avg") for w in ("read", "end")}
            seeds = sorted(set.intersection(*(set(x.index) for x in v.values())))
            for seed in seeds:
                fr, fe = v[("fedavg", "read")][seed], v[("fedavg", "end")][seed]
                cr, ce = v[("fed-cvar-avg", "read")][seed], v[("fed-cvar-avg", "end")][seed]
                rows.append(dict(r=r, quantity=str(q), seed=int(seed), read_at=half, rounds=T,
                                 fedavg_read=fr, fedavg_end=fe, fedavg_change=fe - fr,
                                 fed_cvar_avg_read=cr, fed_cvar_avg_end=ce, fed_cvar_avg_change=ce - cr,
                                 gain_read=cr - fr, gain_end=ce - fe))
    return pd.DataFrame(rows, columns=_HORIZON_COLUMNS)


def horizon_checks(effect: pd.DataFrame, r: float = 0.9, last_frac: float = 0.1) -> list:
    """The long-horizon runs' checks at `r` on each rare class (`horizon_effect`): per method, "the rare-class
    curve has levelled off by the page's horizon" on the per-seed changes from the window read there to the
    window at the end (`claims.not_rising`, the rule of the page's slopes: confirmed when the mean change is
    below zero by more than 2 se over seeds, contradicted when above zero by more, else not testable at this
    scale; with one seed there is no standard error: not testable at this scale); and "Fed-CVaR-Avg above FedAvg
    at the runs' end", paired by seed (`claims.compare`). No rows at `r`: no check."""
    e = effect[(effect["r"] == r) & (effect["quantity"] != "overall")] if len(effect) else effect
    out = []
    for q, g in e.groupby("quantity", sort=False):
        n, read, end = len(g), int(g["read_at"].iloc[0]), int(g["rounds"].iloc[0])
        lo = lambda t: f"{t - round(last_frac * t)}-{t}"  # noqa: E731
        w = f"{lo(read)} and {lo(end)}"
        for m, col in (("fedavg", "fedavg_change"), ("fed-cvar-avg", "fed_cvar_avg_change")):
            d = g[col].to_numpy(float)
            c = claims.not_rising(f"r = {r}, rare class {q}, {METHOD_LABELS[m]}: levelled off by round {read} "
                                  f"(change to round {end} {d.mean():+.2f} points, {n} seed{'s' if n > 1 else ''})",
                                  d, floor=1e-6)
            rule = (f"per seed, the change of the accuracy (%) from the last-{100 * last_frac:g} % window ending at "
                    f"round {read} to the one ending at round {end} of the same {end}-round run (rounds {w}); " + c.rule
                    + ("; one seed: no standard error, not testable at this scale" if n < 2 else ""))
            out.append(dataclasses.replace(c, rule=rule))
        c = claims.compare(f"r = {r}, rare class {q}: Fed-CVaR-Avg above FedAvg at round {end} (last "
                           f"{100 * last_frac:g} % of the rounds, paired over {n} seed{'s' if n > 1 else ''})",
                           g["fed_cvar_avg_end"].to_numpy(float), g["fedavg_end"].to_numpy(float))
        out.append(dataclasses.replace(c, rule=f"{c.rule} (accuracy over rounds {lo(end)} of {end}-round runs, "
                                               "paired by seed)"))
    return out


def horizon_words(effect: pd.DataFrame, checks: list, planned: int = 3, r: float = 0.9) -> dict[str, str]:
    """`horizon_effect` and `horizon_checks` at `r` in words (the first rare class), every key also when no run
    is stored: seeds ("k of `planned`"), read_at, rounds, each method's rare-class accuracy read at the page's
    horizon and at the runs' end ("fed_read", "fed_end", "cv_read", "cv_end": mean over seeds, %), their change
    ("fed_change", "cv_change": points, ± 2 se with two seeds or more), Fed-CVaR-Avg minus FedAvg ("gain_read",
    "gain_end"), the checks' verdicts ("v_fed", "v_cv": levelled off; "v_gain": above FedAvg at the end), the
    same for the overall accuracy ("all_fed", "all_cv": read -> end), "reading": the finding in words and
    "numbers": the numbers in sentences (with no run: "n/a", the verdicts "still to run", and sentences that
    say so)."""
    e = effect[(effect["r"] == r)] if len(effect) else effect
    rare = e[e["quantity"] != "overall"] if len(e) else e
    keys = ("seeds", "read_at", "rounds", "fed_read", "fed_end", "cv_read", "cv_end", "fed_change", "cv_change",
            "gain_read", "gain_end", "v_fed", "v_cv", "v_gain", "all_fed", "all_cv", "reading", "numbers")
    if rare.empty:
        out = {k: "n/a" for k in keys}
        out.update(seeds=f"0 of {planned}", v_fed="still to run", v_cv="still to run", v_gain="still to run",
                   reading="the runs are still to run at the document's scale, so what a longer horizon does to the "
                           "rare class is not measured yet",
                   numbers="There is no accuracy to read yet.")
        return out
    q = rare["quantity"].iloc[0]
    g = rare[rare["quantity"] == q]
    n = len(g)

    def pm(col):
        d = g[col].to_numpy(float)
        return f"{d.mean():+.1f} points" if n < 2 else f"{d.mean():+.1f} ± {2 * claims.se(d):.1f} points"
    mine = [c for c in checks if f"rare class {q}" in c.what]
    v_fed, v_cv, v_gain = (c.verdict for c in mine[:3])
    o = e[e["quantity"] == "overall"]
    out = dict(seeds=f"{n} of {planned}", read_at=str(int(g["read_at"].iloc[0])), rounds=str(int(g["rounds"].iloc[0])),
               fed_read=f"{g['fedavg_read'].mean():.1f} %", fed_end=f"{g['fedavg_end'].mean():.1f} %",
               cv_read=f"{g['fed_cvar_avg_read'].mean():.1f} %", cv_end=f"{g['fed_cvar_avg_end'].mean():.1f} %",
               fed_change=pm("fedavg_change"), cv_change=pm("fed_cvar_avg_change"), gain_read=pm("gain_read"),
               gain_end=pm("gain_end"), v_fed=v_fed, v_cv=v_cv, v_gain=v_gain,
               all_fed=f"{o['fedavg_read'].mean():.1f} % -> {o['fedavg_end'].mean():.1f} %",
               all_cv=f"{o['fed_cvar_avg_read'].mean():.1f} % -> {o['fed_cvar_avg_end'].mean():.1f} %")
    out["numbers"] = (f"On the rare class, FedAvg goes from {out['fed_read']} (the window ending at round "
                      f"{out['read_at']}) to {out['fed_end']} (the window ending at round {out['rounds']}), a change "
                      f"of {out['fed_change']} (levelled off by round {out['read_at']}: {v_fed}); Fed-CVaR-Avg from "
                      f"{out['cv_read']} to {out['cv_end']}, {out['cv_change']} ({v_cv}). Fed-CVaR-Avg minus FedAvg: "
                      f"{out['gain_read']} at round {out['read_at']} and {out['gain_end']} at round {out['rounds']} "
                      f"(above FedAvg at round {out['rounds']}: {v_gain}). Overall accuracy: FedAvg {out['all_fed']}, "
                      f"Fed-CVaR-Avg {out['all_cv']}.")
    up = g[["fedavg_change", "fed_cvar_avg_change"]].mean()
    acc = "the rare-class accuracy" if n < 2 else "the mean rare-class accuracy"
    moved = (f"{acc} of both methods rises" if (up > 0).all() else f"{acc} of both methods falls" if (up < 0).all()
             else f"{acc} of the two methods moves in opposite directions or not at all")
    if n < 2:
        out["reading"] = (f"{moved} from the window ending at round {out['read_at']} to the one ending at round "
                          f"{out['rounds']}; with one seed there is no standard error, so whether the curves have "
                          f"levelled off by round {out['read_at']}, and whether Fed-CVaR-Avg is above FedAvg at round "
                          f"{out['rounds']}, is not testable at this scale")
    else:
        out["reading"] = (f"{moved} from the window ending at round {out['read_at']} to the one ending at round "
                          f"{out['rounds']}; levelled off by round {out['read_at']}: FedAvg {v_fed}, Fed-CVaR-Avg "
                          f"{v_cv}; Fed-CVaR-Avg above FedAvg at round {out['rounds']}: {v_gain}")
    return out


def horizon_figure(df: pd.DataFrame, r: float = 0.9, smooth: float = 0.9, title: str = ""):
    """The long-horizon runs (`horizon_runs`): test accuracy (%) on the rare class(es) of `r` over the rounds,
    both methods, one line per seed: its evaluations faint, and their EMA (`flkit.plots.smooth_ema`, weight
    `smooth` per evaluation, as the page's other curves); a vertical line at the page's horizon (half the runs')."""
    sub = df[(df["pattern_frac"] == r) & (df["metric"] == "test_acc_class")]
    rare = RARE_CLASSES[r]
    T = int(df["rounds"].max())
    fig, grid = plots.figure(1, len(rare), row_height=2.8)
    axes = np.atleast_1d(grid).ravel()
    styles = ["-", "--", ":", "-."]
    for ax, c in zip(axes, rare):
        for (method, seed), run in sub[sub["class"] == c].groupby(["method", "seed"]):
            run = run.sort_values("round")
            ls = styles[int(seed) % len(styles)]
            ax.plot(run["round"], 100 * run["value"], color=METHOD_COLORS[method], lw=0.5, alpha=0.2, ls=ls)
            ax.plot(run["round"], 100 * plots.smooth_ema(run["value"].to_numpy(float), smooth),
                    color=METHOD_COLORS[method], lw=1.2, ls=ls, label=f"{METHOD_LABELS[method]}, seed {int(seed)}")
        ax.axvline(T // LONG_HORIZON["factor"], color="k", lw=0.8, ls=":")
        ax.set_ylim(0, 100)
        ax.set_xlabel(f"round (faint: each evaluation; bold: its EMA; dotted: round {T // LONG_HORIZON['factor']})")
        ax.set_ylabel(f"rare class {c}: test accuracy (%)")
    legend_below(fig, axes, ncol=3)   # a row per seed pair would be wider than the text column
    fig.suptitle("\n".join(textwrap.fill(line, 95) for line in title.split("\n")), fontsize=9.5)  # within the column
    return fig
