"""What the three pages of the MIFA chapter share: where their runs are stored, how a page reads its profile,
the methods' colours and curves, the slope fit and its tolerance, the momentum grid of a figure, and the
words and numbers of the pages' "What we found" (read from the pages' own checks).
"""
from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter, ScalarFormatter

from flkit import plots, results
from flkit.papers import settings
from flkit.papers.mifa.methods import LABELS, METHODS

__all__ = ["store", "cached", "page_profile", "FIGURES", "SLOPE_TOL", "HETERO", "fit_slope", "PALETTE", "plot_curves",
           "n_ticks", "summary", "MOMENTUM_BASE", "best_betas", "momentum_table", "OK", "outcomes", "p_words", "where",
           "item_word", "check_word", "and_list", "two_decimals", "spread", "diverged_runs", "umifam_claim_word",
           "momentum_answer"]

FIGURES = {"quadratic": {0.01: "Fig. 1", 0.1: "Fig. 2", 0.5: "Fig. 3"},
           "logistic": {0.01: "Fig. 4", 0.1: "Fig. 5", 0.5: "Fig. 6"}}   # our inference (see the chapter index)
SLOPE_TOL = 0.15    # a measured log-log slope "is" a predicted power when within this distance
HETERO = "_hetH"    # suffix of a problem kind whose clients have different Hessians (`heterogeneous_quadratic`)


# ================================================================================================
# the pages' settings and results store
# ================================================================================================
def store(profile: str) -> results.Store:
    """The pages' results store: results/mifa/ for the paper profile (committed), results/tmp/mifa/ for any
    other (only paper results are kept)."""
    return results.book_store("mifa" if profile == "paper" else "tmp/mifa")


def cached(store: results.Store, config: dict, fn) -> pd.DataFrame:
    """The stored table of `config` in `store`, computed by `fn()` and stored when missing."""
    return results.sweep([config], lambda c: fn(), store, progress=False)


def page_profile(profiles: Mapping[str, dict], page: str, name: str, overrides: Mapping) -> dict:
    """The settings of the `page` page under profile `name` (a key of `profiles`), with the top-level settings
    given in `overrides` (the notebook's parameters; None keeps the profile's value), all checked before any
    work (`flkit.papers.settings.check_profile`: rounds >= 1, seeds non-empty and distinct, probabilities in
    (0, 1], step sizes > 0, momentum in [0, 1), and a number of rounds for every p); a clear error names the
    bad value and the allowed ones."""
    if name not in profiles:
        raise ValueError(f"unknown profile {name!r} for the {page} page; choose one of {sorted(profiles)}")
    where = f"{page} profile {name!r}"
    cfg = settings.with_overrides(copy.deepcopy(profiles[name]), overrides, where)
    if "p_values" in cfg:
        missing = [p for p in cfg["p_values"] if p not in cfg["rounds"]]
        if missing:
            raise ValueError(f"{where}: rounds has no entry for p = {missing} (give a dict p -> rounds)")
    return cfg


# ================================================================================================
# slopes, curves and summaries
# ================================================================================================
def fit_slope(x, y) -> tuple[float, float]:
    """Least-squares slope and intercept of log(y) against log(x) (finite, positive points only)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    if ok.sum() < 2:
        return float("nan"), float("nan")
    s, c = np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)
    return float(s), float(c)


PALETTE = {"fedavg_is": "0.45", "fedavg": "tab:brown", "mifa": "tab:blue", "mifam": "tab:cyan",
           "umifa": "tab:red", "umifam": "tab:orange", "umifa_saga": "tab:green", "umifam_saga": "tab:olive",
           "fedgd": "black", "fedpgd": "tab:purple", "zerosarah": "tab:pink"}


def plot_curves(df: pd.DataFrame, metric: str, ax=None, methods: Sequence[str] | None = None, log: bool = True,
                band: str = "minmax", mark_diverged: bool = True):
    """Mean over seeds per method with a min-max band (`flkit.plots.curves`), momentum methods dashed,
    diverged runs marked with an x at their round of divergence (``mark_diverged=False`` leaves the marks
    out, e.g. on an accuracy axis where an x at the top would read as a value; the means are the same)."""
    methods = [m for m in (methods or METHODS) if m in set(df["method"])]
    data = df[(df["metric"] == metric) & df["method"].isin(methods)]
    ax = plots.curves(data, hue="method", metric=metric, band=band, log=log, label_map=LABELS,
                      palette=PALETTE, order=methods, units="seed" if "seed" in data else None, ax=ax)
    momentum = {LABELS[m] for m in methods if METHODS[m].momentum}
    for line in ax.get_lines():
        if any(str(line.get_label()).startswith(lab) for lab in momentum) and line.get_linestyle() != "None":
            line.set_linestyle("--")
    if not mark_diverged:
        for line in ax.get_lines():
            if line.get_marker() == "x" and line.get_linestyle() == "None":
                line.remove()
    ax.legend(ncol=1, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return ax


def n_ticks(ax, ns) -> None:
    """Ticks of a log x axis at the values `ns` (numbers of clients), written plainly."""
    ax.set_xticks(ns)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def summary(df: pd.DataFrame, metric: str, threshold: float | None = None) -> pd.DataFrame:
    """Per method: median final value over seeds, runs that diverged, and (with `threshold`) the median
    first recorded round at which the metric is <= threshold (NaN when a majority never gets there)."""
    rows = []
    d = df[df["metric"] == metric]
    for meth, g in d.groupby("method", sort=False):
        last = g[g["round"] == g["round"].max()]
        runs = g.groupby("seed")
        div = int(sum(1 for _, r in runs if not np.isfinite(r["value"]).all()))
        row = {"method": meth, "label": LABELS.get(meth, meth), "final (median)": float(np.median(last["value"])),
               "diverged runs": f"{div}/{runs.ngroups}"}
        if threshold is not None:
            firsts = [r.loc[r["value"] <= threshold, "round"].min() for _, r in runs]
            row[f"rounds to {threshold:g} (median)"] = float(np.median([np.inf if pd.isna(f) else f for f in firsts]))
        rows.append(row)
    return pd.DataFrame(rows).set_index("method")

# ================================================================================================
# a figure's momentum grid (the quadratic and logistic pages; the sensitivity page of "Across the documents")
# ================================================================================================
MOMENTUM_BASE = {"mifam": "mifa", "umifam": "umifa", "umifam_saga": "umifa_saga"}   # beta = 0 of each momentum method


def best_betas(tab: pd.DataFrame) -> pd.DataFrame:
    """tab: one row per (method, beta, seed) with `value` (lower is better: rounds to a target, a final
    gap; never reached or diverged: inf). Per method: the beta of the grid with the lowest median value
    over seeds (ties: the smaller beta) and that median; methods that never get a finite median are left out."""
    med = tab.groupby(["method", "beta"])["value"].median().reset_index()
    med = med[np.isfinite(med["value"])].sort_values(["method", "value", "beta"])
    return med.groupby("method").head(1).set_index("method").rename(columns={"value": "median"})


def momentum_table(curves: pd.DataFrame, sweep: pd.DataFrame | None, beta: float, metric: str = "gap") -> pd.DataFrame:
    """One figure's momentum grid, one row per (momentum method, beta, seed) with the final `metric`
    (a run with a non-finite value anywhere, i.e. declared diverged: inf). beta = 0 comes from the figure's
    methods without momentum (MIFA, U-MIFA, U-MIFA with SAGA memory), `beta` from its momentum methods,
    the other betas from `sweep` (tidy runs with a beta column; the same seeds, clients and minibatches)."""
    def finals(df, name_map, b):
        rows = []
        for src, dst in name_map.items():
            g = df[(df["metric"] == metric) & (df["method"] == src)]
            if g.empty:
                continue
            for seed, r in g.groupby("seed"):
                v = r.sort_values("round")["value"].to_numpy(dtype=float)
                rows.append((dst, b, int(seed), float(v[-1]) if np.isfinite(v).all() else np.inf))
        return rows
    rows = finals(curves, {b: m for m, b in MOMENTUM_BASE.items()}, 0.0)
    rows += finals(curves, {m: m for m in MOMENTUM_BASE}, float(beta))
    if sweep is not None:
        for b, g in sweep.groupby("beta"):
            if float(b) not in (0.0, float(beta)):
                rows += finals(g, {m: m for m in MOMENTUM_BASE}, float(b))
    return pd.DataFrame(rows, columns=["method", "beta", "seed", "value"])

# ================================================================================================
# the pages' "What we found": words and numbers for the prose (glued), read from the pages' own checks
# ================================================================================================
OK = ("agrees", "confirmed")
_P_PREFIX = re.compile(r"^(?:Fig\. \d+, )?p=([0-9.]+)(?:, [^:]*)?: (.*)$", re.S)


def outcomes(checks: dict, item: str, starts: str, required: bool = True) -> dict[float, str]:
    """{p: verdict} of the checks filed under `item` whose text is '[Fig. k, ]p=<p>[, ...]: <rest>' with
    <rest> starting with `starts` (e.g. "MIFAm at its best beta", which "U-MIFAm at ..." does not match).
    Raises ValueError when no check matches, so that a page's prose cannot silently refer to nothing;
    with `required=False` (checks that exist only when the data allow them, such as the tuned-momentum
    comparisons, which need a finite best beta) it returns {} instead."""
    if item not in checks and not required:
        return {}
    if item not in checks:
        raise ValueError(f"no checks under item {item!r}; items: {sorted(checks)}")
    out = {}
    for c in checks[item]:
        m = _P_PREFIX.match(c.what)
        if m and m.group(2).startswith(starts):
            out[float(m.group(1))] = c.verdict
    if not out and required:
        raise ValueError(f"no check under {item!r} starts with {starts!r} after its 'p=...: ' prefix")
    return out


def p_words(ps, every) -> str:
    """The p values `ps` in words for a sentence '... at <words>': "every p" when they are all of `every`,
    "no p" when none, else "p = 0.1", "p = 0.1 and 0.5", "p = 0.01, 0.1 and 0.5"."""
    ps = sorted(float(p) for p in ps)
    if not ps:
        return "no p"
    if set(ps) == {float(p) for p in every}:
        return "every p"
    s = [f"{p:g}" for p in ps]
    return "p = " + (s[0] if len(s) == 1 else ", ".join(s[:-1]) + " and " + s[-1])


def where(verdicts: dict[float, str], *also: dict[float, str], ok=OK) -> list[float]:
    """The p at which the verdict (and the verdict in every dict of `also`) is one of `ok`."""
    return sorted(p for p, v in verdicts.items() if v in ok and all(a.get(p) in ok for a in also))


def item_word(checks: dict, item: str, yes: str, no: str, partly: str | None = None) -> str:
    """`yes` when every check under `item` agrees or is confirmed, `partly` (default `no`) when some do,
    `no` when none does."""
    if not checks.get(item):
        raise ValueError(f"no checks under item {item!r}; items: {sorted(checks)}")
    k = sum(c.verdict in OK for c in checks[item])
    return yes if k == len(checks[item]) else (no if k == 0 or partly is None else partly)


def check_word(checks: dict, item: str, starts: str, yes: str, no: str, unclear: str | None = None) -> str:
    """The word for the one check under `item` whose text starts with `starts` (no 'p=' prefix needed):
    `yes` when it agrees or is confirmed, `unclear` (default `no`) when not testable at this scale, else `no`."""
    hits = [c for c in checks.get(item, []) if c.what.startswith(starts)]
    if len(hits) != 1:
        raise ValueError(f"{len(hits)} checks under {item!r} start with {starts!r}; expected exactly one")
    v = hits[0].verdict
    return yes if v in OK else (unclear if unclear is not None and v.startswith("not testable") else no)


def and_list(words) -> str:
    """'a', 'a and b', 'a, b and c' ('' for none)."""
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1] if words else ""


def two_decimals(x) -> str:
    """x with two decimals, without a minus sign on a value that rounds to zero."""
    return f"{x:.2f}".replace("-0.00", "0.00")


def spread(v) -> str:
    """The range of the finite values of `v` with two decimals: "a to b", or "a" when both ends read the same."""
    return " to ".join(dict.fromkeys((two_decimals(np.nanmin(v)), two_decimals(np.nanmax(v)))))


def diverged_runs(df: pd.DataFrame, methods: Sequence[str], metric: str = "gap") -> tuple[int, int]:
    """(runs declared diverged, runs) of `methods` in a page's tidy table: a run (method, seed) is diverged
    when its `metric` is not finite at some recorded round."""
    g = df[(df["metric"] == metric) & df["method"].isin(list(methods))]
    bad = g.groupby(["method", "seed"])["value"].apply(lambda v: not np.isfinite(v.to_numpy(dtype=float)).all())
    return int(bad.sum()), int(len(bad))


def umifam_claim_word(as_written, saga, every) -> str:
    """The verdict on "U-MIFAm works better in practice" in words, from the p at which U-MIFAm as written
    wins (`as_written`) and at which the SAGA-memory reading wins (`saga`), out of the p of `every`."""
    if as_written:
        return f"holds for U-MIFAm as written at {p_words(as_written, every)}"
    if not saga:
        return "holds in neither reading"
    where_ = "" if p_words(saga, every) == "every p" else f", and only at {p_words(saga, every)}"
    return f"holds only in the SAGA-memory reading{where_}"


def momentum_answer(ps, every) -> str:
    """The answer to "Can we speed things up with momentum?" in words, from the p at which momentum speeds
    up a momentum method (`ps`: at least one of those tested) out of the p of `every`."""
    ps, every = sorted(float(p) for p in ps), sorted(float(p) for p in every)
    if not ps:
        return "No"
    if ps == every:
        return "Yes, at every p"
    return "Yes where enough clients participate" if ps == every[-len(ps):] else f"Yes at {p_words(ps, every)}"
