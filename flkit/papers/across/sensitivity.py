r"""Where a claim hinges on one parameter: chapter code of the page of that name.

Four claims of the documents, each read again, from runs already stored by its chapter (nothing is trained
here), along the one parameter it hinges on:

1. **Fed-CVaR-Avg (003, Figs. 3-4), alpha = gamma.** Fed-CVaR-Avg's rare-class and overall accuracy against
   FedAvg (alpha = gamma = 1) at the document's alpha = gamma = 0.3 and at 0.1, for r = 90 % (Fig. 3) and 80 %
   (Fig. 4), paired by seed; FedAvg with its step multiplied by 2.63, the largest weight Algorithm 1 gives a step
   at 0.3, as a reference (:func:`cvar_select`, :func:`cvar_gains`). The accuracies are read as the MNIST page
   reads them (:func:`flkit.papers.cvar.common.final_accuracies`, the mean over the last 10 % of the rounds;
   the rare classes of :data:`flkit.papers.cvar.common.RARE_CLASSES`).
2. **HiCS-FL (004, Sec. 4.1, FMNIST setting (3)), the temperature T and gamma^0.** The late training loss of
   HiCS-FL against CS's, paired by seed, for the document's (T, gamma^0) = (0.0025, 4), T/2 and gamma^0 = 0: the
   variants of :mod:`flkit.papers.hics.diagnosis`, read as its :func:`~flkit.papers.hics.diagnosis.late_table`
   reads them (:func:`hics_runs`, :func:`hics_gaps`).
3. **MIFA with momentum (002, "Can we speed things up with momentum?"), beta.** The final optimality gap of
   MIFAm, U-MIFAm and U-MIFAm with SAGA memory at every beta of the logistic page's grid against beta = 0, the
   method without momentum, paired by seed (:func:`mifa_runs`, :func:`mifa_effects`; the grid of
   :func:`flkit.papers.mifa.common.momentum_table`). The data: real MNIST, multinomial logistic regression, 100
   clients of two classes each (document 002 names no data set; the choice is the MIFA authors' own experiment).
4. **FedAU (000, main table), the server step eta.** The validation accuracy of every method over the step
   sizes of the FedAU table's stand-in tuning grid (:func:`flkit.papers.fedau.table.tune`, one tuning seed), at
   each method's selected local step gamma (:func:`fedau_curves`), and whether FedAU (K = inf) stays ahead of
   average participating and average all at every eta of its grid (:func:`fedau_checks`).

Each claim's checks carry the scale of the runs they read (:func:`claim_scale`), from the page that stored them
(:func:`flkit.papers.scorecard.page_scale`).
"""
from __future__ import annotations

import copy
import dataclasses
import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from flkit import plots
from flkit.papers import claims, scales, settings
from flkit.papers.across.items import DOC, ITEM
from flkit.papers.cvar import diagnosis
from flkit.papers.cvar import common as ex
from flkit.papers.cvar.diagnosis import STEP_FACTOR
from flkit.papers.cvar.common import RARE_CLASSES, final_accuracies
from flkit.papers.fedau import table as tb
from flkit.papers.hics import diagnosis as G
from flkit.papers.hics import entropy as E
from flkit.papers.hics import fmnist as X
from flkit.papers.mifa import logistic
from flkit.papers.mifa.common import MOMENTUM_BASE, PALETTE, momentum_table
from flkit.papers.mifa.methods import LABELS
from flkit.papers.verdicts import DOCUMENT_SCALE, page_verdicts

__all__ = ["PROFILES", "BOX", "profile", "CLAIMS", "claim_scale", "claim_scales", "scale_numbers", "scale_parts",
           "paired", "select_runs",
           "CVAR_ALPHAS", "cvar_select", "cvar_runs", "cvar_gains", "cvar_checks", "plot_cvar",
           "HICS_VARIANTS", "hics_runs", "hics_gaps", "hics_checks", "plot_hics",
           "mifa_runs", "mifa_effects", "mifa_checks", "plot_mifa",
           "fedau_tuning", "fedau_curves", "fedau_leads", "fedau_checks", "plot_fedau", "verdicts"]

# smoke: a subset of the stored runs (the first seeds, Fig. 3's setting only), for the tests; paper: every stored
# seed of every setting. Nothing is trained under either.
PROFILES = {
    "smoke": dict(read_seeds=[0, 1], cvar_settings=[0.9]),
    "paper": dict(read_seeds=None, cvar_settings=[0.9, 0.8]),
}

# the four claims: the page their runs come from (its scale) and the parameters it was executed with
CLAIMS = {
    "cvar": ("cvar/mnist", dict(profile="paper")),
    "hics": ("hics/fmnist", dict(profile="reduced")),
    "mifa": ("mifa/logistic", dict(profile="paper")),
    "fedau": ("fedau/table", dict(profile="reduced")),     # the tuning grid itself: not the retuned reading
}
_NOT_READ = {"hics": ("DivFL",)}        # departures of the source page that the runs read here do not have
# the page's verdict box (scorecard.box)
BOX = dict(page="across/sensitivity", headline=ITEM["cvar_alpha"],
           tests="four claims read again from their chapters' stored runs along the one parameter each hinges on: "
                 "Fed-CVaR-Avg's alpha = gamma (003), HiCS-FL's T and gamma^0 (004), the momentum beta of MIFAm and "
                 "U-MIFAm (002) and FedAU's server step eta (000)")


def profile(name: str, seeds: Sequence[int] | None = None, **overrides) -> dict:
    """The page's settings under profile `name` ("smoke", "paper"): ``seeds``, the stored seeds read (`seeds`, or
    the profile's ``read_seeds``; None: every stored seed; else at least two distinct seeds, the pairing needs
    two), and ``cvar_settings``, the r of Figs. 3-4 read; `overrides` (None: the profile's) replace them."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    out = settings.with_overrides(copy.deepcopy(PROFILES[name]), overrides, f"sensitivity profile {name!r}")
    out["seeds"] = out.pop("read_seeds") if seeds is None else [int(s) for s in seeds]
    if out["seeds"] is not None:
        settings.seeds(out["seeds"], "seeds")
        if len(out["seeds"]) < 2:
            raise ValueError(f"seeds: give at least two (every comparison is paired over seeds), got {out['seeds']}")
    bad = [r for r in out["cvar_settings"] if r not in (0.9, 0.8)]
    if bad or not out["cvar_settings"]:
        raise ValueError(f"cvar_settings must list r of Figs. 3-4 (0.9, 0.8), got {out['cvar_settings']!r}")
    out["profile"] = name
    return out


def claim_scale(claim: str, profile_name: str = "paper") -> str:
    """The scale of one claim's checks: the departures of the page whose stored runs it reads
    (:func:`flkit.papers.scales.page_scale` with that page's published parameters), and, under the smoke
    profile, that only a subset of them is read."""
    if claim not in CLAIMS:
        raise ValueError(f"unknown claim {claim!r}; choose one of {sorted(CLAIMS)}")
    page, params = CLAIMS[claim]
    parts = [p for p in scales.page_scale(page, params).split("; ")
             if p != DOCUMENT_SCALE and not any(w in p for w in _NOT_READ.get(claim, ()))]
    if profile_name != "paper":
        parts.append(f"reduced: the '{profile_name}' profile (a subset of the stored runs)")
    return "; ".join(dict.fromkeys(parts)) or DOCUMENT_SCALE


def claim_scales(profile_name: str = "paper") -> dict[str, str]:
    """{claim: :func:`claim_scale`} for the four claims under profile `profile_name`."""
    return {c: claim_scale(c, profile_name) for c in CLAIMS}


def scale_numbers(scales_: Mapping[str, str]) -> dict[str, str]:
    """The claims' scales (:func:`claim_scales`) for the prose, as ``scale_<claim>``."""
    return {f"scale_{c}": s for c, s in scales_.items()}


def scale_parts(params: Mapping) -> list[str]:
    """The page's departures for :func:`flkit.papers.scorecard.page_scale`: those of its four claims."""
    name = params.get("profile") or "paper"
    return [p for c in CLAIMS for p in claim_scale(c, name).split("; ") if p != "document's setting"]


def _scaled(c: claims.Check, scale: str) -> claims.Check:
    return dataclasses.replace(c, scale=scale) if scale and scale != "document's setting" else c


def paired(a: pd.Series, b: pd.Series) -> tuple[np.ndarray, np.ndarray, list]:
    """Two per-seed series (index: seed) aligned on the seeds both have, with those seeds: a seed's value in
    `a` is compared with the same seed's value in `b` (the same split, participation and minibatches)."""
    a, b = a.groupby(level=0).mean(), b.groupby(level=0).mean()
    seeds = sorted(set(a.index) & set(b.index))
    return a.loc[seeds].to_numpy(float), b.loc[seeds].to_numpy(float), seeds


def _row(what: str, a: pd.Series, b: pd.Series, **extra) -> dict:
    """A paired comparison "a above b" (:func:`flkit.papers.claims.compare`) as a row: the mean paired
    difference, its standard error, two of them, the seeds and the check."""
    x, y, seeds = paired(a, b)
    c = claims.compare(what, x, y)
    return dict(extra, seeds=len(seeds), a=float(x.mean()) if len(x) else math.nan,
                b=float(y.mean()) if len(y) else math.nan, difference=c.ours, se=c.spread,
                two_se=2 * c.spread if math.isfinite(c.spread) else math.nan, verdict=c.verdict, check=c)


def select_runs(store, keep) -> list[dict]:
    """The configs of the complete runs of `store` for which `keep(config)` is true (an empty store, or none
    kept: an empty list)."""
    return [m["config"] for m in store.manifests() if keep(m["config"])]


def _seeds(df: pd.DataFrame, seeds: Sequence[int] | None) -> pd.DataFrame:
    return df if seeds is None or df.empty else df[df["seed"].isin(list(seeds))]


# ================================================================================================
# 1. Fed-CVaR-Avg, Figs. 3-4: alpha = gamma
# ================================================================================================
CVAR_ALPHAS = (1.0, 0.3, 0.1)       # FedAvg, the document's, the stronger risk setting of the MNIST page


def cvar_select(configs: Iterable[Mapping]) -> tuple[list[dict], list[dict]]:
    """Of the stored MNIST configs: (the alpha curve, the larger-step reference). The curve: the document's
    inputs (no ``input_scaling``, or "document"), rounds and step ``lr_theta``, FedAvg (alpha = gamma = 1) and
    Fed-CVaR-Avg at alpha = gamma in :data:`CVAR_ALPHAS`. The reference: FedAvg with ``lr_theta`` multiplied by
    :data:`flkit.papers.cvar.diagnosis.STEP_FACTOR` (a diagnosis run, not a point of the curve). Runs with the
    authors' input scaling (a different variant) are in neither."""
    doc = ex.PAPER["mnist"]
    curve, step = [], []
    for c in configs:
        if c.get("experiment") != "mnist" or c.get("input_scaling", "document") != "document":
            continue
        if c.get("rounds") != doc["rounds"] or c.get("alpha") != c.get("gamma"):
            continue
        lr = float(c["lr_theta"])
        if math.isclose(lr, doc["lr_theta"], rel_tol=1e-9) and c["alpha"] in CVAR_ALPHAS:
            curve.append(dict(c))
        elif c["method"] == "fedavg" and math.isclose(lr, doc["lr_theta"] * diagnosis.STEP_FACTOR, rel_tol=1e-3):
            step.append(dict(c))
    return curve, step


def cvar_runs(store, settings_r: Sequence[float] = (0.9, 0.8), seeds=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the alpha curve's runs, the larger-step runs) of `store` (``results/cvar/mnist``) in the settings of r
    `settings_r` and `seeds` (None: every stored seed), tidy with the config fields as columns; empty frames
    when none is stored."""
    curve, step = cvar_select(select_runs(store, lambda c: c.get("pattern_frac") in set(settings_r)
                                          and (seeds is None or c.get("seed") in set(seeds))))
    load = lambda cs: store.load_many(cs) if cs else pd.DataFrame()  # noqa: E731
    return load(curve), load(step)


def _cvar_values(acc: pd.DataFrame, r: float, q) -> pd.Series:
    g = acc[acc["pattern_frac"] == r]
    g = g[g["metric"] == "test_acc"] if q == "overall" else g[(g["metric"] == "test_acc_class") & (g["class"] == q)]
    return g


def cvar_gains(df: pd.DataFrame, step: pd.DataFrame | None = None, last_frac: float = 0.1) -> pd.DataFrame:
    """Per r, alpha = gamma of the curve (other than 1) and quantity (each rare class of r, overall): the accuracy
    (%, mean over the last `last_frac` of the rounds, ``report.final_accuracies``) of Fed-CVaR-Avg (``a``) and of
    FedAvg (``b``) on the seeds both have, the paired difference, its s.e., two s.e. and the verdict of "above
    FedAvg" (``check``). Rows with alpha = 1 and ``method`` "fedavg, 2.63x step": the larger-step FedAvg against
    FedAvg (`step`)."""
    cols = ["r", "alpha", "method", "quantity", "seeds", "a", "b", "difference", "se", "two_se", "verdict", "check"]
    if df is None or df.empty:
        return pd.DataFrame(columns=cols)
    acc = final_accuracies(df, last_frac)
    big = final_accuracies(step, last_frac) if step is not None and not step.empty else None
    rows = []
    for r in sorted(set(acc["pattern_frac"]), reverse=True):
        for q in [*RARE_CLASSES[r], "overall"]:
            name = "overall" if q == "overall" else f"class {q}"
            v = _cvar_values(acc, r, q)
            fed = v[v["method"] == "fedavg"].set_index("seed")["value"]
            for a in sorted({x for x in v["alpha"] if x != 1.0}, reverse=True):
                cv = v[(v["method"] != "fedavg") & (v["alpha"] == a)].set_index("seed")["value"]
                rows.append(_row(f"r = {r:g}, {name}: Fed-CVaR-Avg (alpha = gamma = {a:g}) above FedAvg", cv, fed,
                                 r=r, alpha=a, method="fed-cvar-avg", quantity=name))
            if big is not None:
                s = _cvar_values(big, r, q).set_index("seed")["value"]
                if len(s):
                    rows.append(_row(f"r = {r:g}, {name}: FedAvg with a {STEP_FACTOR:.2f}x step above FedAvg", s, fed,
                                     r=r, alpha=1.0, method=f"fedavg, {STEP_FACTOR:.2f}x step", quantity=name))
    return pd.DataFrame(rows, columns=cols)


def cvar_checks(gains: pd.DataFrame, scale: str = "") -> list[claims.Check]:
    """Item "cvar_alpha": Fed-CVaR-Avg above FedAvg on every rare class and overall, at every tested alpha =
    gamma < 1 (the larger-step reference is not a point of the claim). No runs: one check that is not testable."""
    g = gains[gains["method"] == "fed-cvar-avg"] if len(gains) else gains
    if g.empty:
        return [_scaled(claims.compare("Fed-CVaR-Avg above FedAvg at every tested alpha = gamma: no stored runs",
                                       [], []), scale)]
    return [_scaled(c, scale) for c in g["check"]]


def plot_cvar(gains: pd.DataFrame, title: str, axes=None):
    """One panel per r: the paired difference to FedAvg (points, mean +- 2 s.e. over seeds) of each rare class
    and of the overall accuracy against alpha = gamma (log scale; 1 is FedAvg itself, 0 by definition); the
    larger-step FedAvg as a marked point at alpha = 1."""
    rs = sorted(set(gains["r"]), reverse=True) if len(gains) else [0.9]
    if axes is None:
        axes = plots.figure(1, len(rs), width=7.0, row_height=3.0, sharey=True)[1][0]
    colors = {"class 9": "tab:red", "class 8": "tab:orange", "overall": "tab:blue"}
    for ax, r in zip(axes, rs):
        g = gains[gains["r"] == r] if len(gains) else gains
        for q in dict.fromkeys(g["quantity"]) if len(g) else []:
            c = g[(g["quantity"] == q) & (g["method"] == "fed-cvar-avg")].sort_values("alpha", ascending=False)
            x, y, e = [1.0, *c["alpha"]], [0.0, *c["difference"]], [0.0, *c["two_se"].fillna(0)]
            ax.errorbar(x, y, yerr=e, marker="o", capsize=3, color=colors.get(q, "0.3"), label=q)
            s = g[(g["quantity"] == q) & (g["method"] != "fed-cvar-avg")]
            if len(s):
                ax.errorbar(s["alpha"] * 1.06, s["difference"], yerr=s["two_se"].fillna(0), marker="D", mfc="white",
                            ls="none", capsize=3, color=colors.get(q, "0.3"),
                            label=f"{q}: FedAvg, {s['method'].iloc[0].split(', ')[1]}")
        ax.axhline(0, color="0.5", lw=0.8)
        ax.axvline(0.3, color="0.7", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xticks(list(CVAR_ALPHAS), [f"{a:g}" for a in CVAR_ALPHAS])
        ax.minorticks_off()
        ax.set(xlabel=r"$\alpha = \gamma$ (1: FedAvg; dotted: the document's 0.3)",
               title=f"r = {100 * r:.0f} % ({'Fig. 3' if r == 0.9 else 'Fig. 4'})")
        if not len(g):
            ax.text(0.5, 0.5, "no stored runs", transform=ax.transAxes, ha="center")
        elif ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7.5)
    axes[0].set_ylabel("Fed-CVaR-Avg minus FedAvg (points)")
    axes[0].figure.suptitle(textwrap.fill(title, 95), fontsize=9.5)
    return axes


# ================================================================================================
# 2. HiCS-FL, FMNIST setting (3): the temperature T and gamma^0
# ================================================================================================
HICS_VARIANTS = ("paper", "T/2", "gamma0 = 0")


def _hics_labels() -> dict[str, str]:
    T, g0 = E.HICS["T"], E.HICS["gamma0"]
    out = {}
    for v in HICS_VARIANTS:
        kw = G.VARIANTS[v]
        out[v] = (f"T = {kw.get('temperature', T):g}, gamma0 = {kw.get('gamma0', g0):g}"
                  + (" (the document's)" if v == "paper" else ""))
    return out


def hics_runs(store, seeds=None) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """(CS's and HiCS-FL's stored runs of setting (3) on the rounds the diagnosis evaluates, the diagnosis
    variants of :data:`HICS_VARIANTS`, the rounds): the FMNIST page's published profile ("reduced"), its jobs
    (:func:`flkit.papers.hics.fmnist.jobs`, :func:`flkit.papers.hics.diagnosis.jobs`), those stored in
    `store` (``results/hics``) and of `seeds`; empty frames when none is."""
    cfg = X.profile(CLAIMS["hics"][1]["profile"])
    main = [j for j in X.jobs(X.profile(CLAIMS["hics"][1]["profile"], settings=[G.SETTING])) if j["group"] == "main"]
    diag = G.jobs(cfg, variants=HICS_VARIANTS)
    pick = lambda js: [j for j in js if store.done(j) and (seeds is None or j["seed"] in set(seeds))]  # noqa: E731
    ref = store.load_many(pick(main)) if pick(main) else pd.DataFrame()
    var = store.load_many(pick(diag)) if pick(diag) else pd.DataFrame()
    if len(ref):
        ref = G.reference_runs(X.truncate(ref, cfg["rounds"]), ("CS", "HiCS-FL"))
        ref = ref[ref["round"] % G.EVERY == 0]
    return ref, var, cfg["rounds"]


def hics_gaps(ref: pd.DataFrame, var: pd.DataFrame, rounds: int) -> pd.DataFrame:
    """Per variant: HiCS-FL's late training loss (rounds >= rounds/2, ``diagnosis.late_table``) and final test
    accuracy against CS's, paired by seed (mean difference, s.e., two s.e.), the variant's (T, gamma^0), and the
    check of document 004's "HiCS-FL performs similarly to CS" on the late loss (``claims.close`` within
    ``diagnosis.SIMILAR`` x CS's mean late loss, the diagnosis's tolerance)."""
    cols = ["variant", "setting", "seeds", "late_gap", "late_se", "late_2se", "acc_gap", "acc_2se", "cs_late",
            "threshold", "verdict", "check"]
    if ref is None or ref.empty or var is None or var.empty:
        return pd.DataFrame(columns=cols)
    start = rounds // 2
    late = pd.concat([G.late_table(ref, start), G.late_table(var, start)], ignore_index=True)
    cs = late[late.method == "CS"].set_index("seed")
    thr = G.SIMILAR * float(cs["late_loss"].mean())
    labels, rows = _hics_labels(), []
    for v in HICS_VARIANTS:
        d = late[late.method == v].set_index("seed")
        if d.empty:
            continue
        x, y, seeds = paired(d["late_loss"], cs["late_loss"])
        c = claims.close(f"setting (3), {labels[v]}: HiCS-FL's late training loss similar to CS's (within "
                         f"{G.SIMILAR:.0%} of CS's, {thr:.3f})", x, y, threshold=thr)
        acc = _row("final accuracy", 100 * d["final_acc"], 100 * cs["final_acc"])
        rows.append(dict(variant=v, setting=labels[v], seeds=len(seeds), late_gap=c.ours, late_se=c.spread,
                         late_2se=2 * c.spread, acc_gap=acc["difference"], acc_2se=acc["two_se"],
                         cs_late=float(y.mean()), threshold=thr, verdict=c.verdict, check=c))
    return pd.DataFrame(rows, columns=cols)


def hics_checks(gaps: pd.DataFrame, scale: str = "") -> list[claims.Check]:
    """Item "hics_T": "similar to CS" at every tested (T, gamma^0); no runs: one check that is not testable."""
    if gaps.empty:
        return [_scaled(claims.close("HiCS-FL similar to CS at every tested T and gamma0: no stored runs", [], [],
                                     threshold=0.0), scale)]
    return [_scaled(c, scale) for c in gaps["check"]]


def plot_hics(gaps: pd.DataFrame, title: str, axes=None):
    """Two panels, one bar per (T, gamma^0): HiCS-FL's late training loss minus CS's (the band: the tolerance
    of "similar") and its final test accuracy minus CS's, mean +- 2 s.e. of the paired differences."""
    if axes is None:
        axes = plots.figure(1, 2, width=7.0, row_height=3.0)[1][0]
    x = np.arange(len(gaps))
    names = [s.replace(", ", "\n").replace(" (the document's)", "\n(document)").replace("gamma0", "$\\gamma^0$")
             for s in gaps["setting"]]
    colors = ["0.35" if v == "paper" else "tab:purple" for v in gaps["variant"]]
    for ax, (col, err, lab) in zip(axes, (("late_gap", "late_2se", "late training loss minus CS's"),
                                          ("acc_gap", "acc_2se", "final test accuracy minus CS's (points)"))):
        if len(gaps):
            ax.bar(x, gaps[col], yerr=gaps[err].fillna(0), capsize=4, color=colors, width=0.6)
        else:
            ax.text(0.5, 0.5, "no stored runs", transform=ax.transAxes, ha="center")
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set_xticks(x, names, fontsize=8)
        ax.set_ylabel(lab)
    if len(gaps):
        thr = float(gaps["threshold"].iloc[0])
        axes[0].axhspan(-thr, thr, color="tab:green", alpha=0.12, lw=0, label="'similar' (within 10 % of CS's)")
        axes[0].legend(fontsize=7.5, loc="upper left")
    axes[0].figure.suptitle(textwrap.fill(title, 95), fontsize=9.5)
    return axes


# ================================================================================================
# 3. MIFA with momentum (002): beta
# ================================================================================================
def mifa_runs(store, seeds=None) -> dict[float, pd.DataFrame]:
    """{p: the momentum grid} (``flkit.papers.mifa.common.momentum_table``: one row per method, beta, seed with the
    final gap; beta = 0 the method without momentum) from the logistic page's stored runs on MNIST at its published
    profile (its Figures 4-6 at beta = 0.5 and its beta sweep), for the seeds `seeds` (None: every stored one). A
    p without stored curves is left out."""
    cfg = logistic.profile(CLAIMS["mifa"][1]["profile"])

    def keep(c, exp):
        return (c.get("experiment") == exp and (c.get("data") or {}).get("dataset") == "mnist"
                and (c.get("data") or {}).get("subset") is None and c.get("eta") == cfg["eta"]
                and list(c.get("seeds", [])) == list(cfg["seeds"]))
    curves = [c for c in select_runs(store, lambda c: keep(c, "logistic_curves")) if c["beta"] == cfg["beta"]]
    sweeps = select_runs(store, lambda c: keep(c, "logistic_beta_sweep"))
    out = {}
    for p in cfg["p_values"]:
        cc = [c for c in curves if c["p"] == p]
        if not cc:
            continue
        sw = [c for c in sweeps if c["p"] == p]
        tab = momentum_table(_seeds(store.load_many(cc), seeds),
                             _seeds(store.load_many(sw), seeds) if sw else None, cfg["beta"])
        out[p] = tab
    return out


def mifa_effects(tables: Mapping[float, pd.DataFrame]) -> pd.DataFrame:
    """Per p, momentum method and beta > 0 of its grid: log10 of the final gap at beta minus at beta = 0, paired
    by seed (mean, s.e., two s.e.; a diverged run's pair is dropped, ``diverged`` counts them) and the check
    "momentum at beta lowers the final gap" (``claims.compare`` of beta = 0 against beta, on log10)."""
    cols = ["p", "method", "beta", "seeds", "diverged", "difference", "se", "two_se", "verdict", "check"]
    rows = []
    for p, tab in tables.items():
        for m in MOMENTUM_BASE:
            g = tab[tab["method"] == m]
            zero = g[g["beta"] == 0].set_index("seed")["value"]
            if zero.empty:
                continue
            for b in sorted(set(g["beta"]) - {0.0}):
                at = g[g["beta"] == b].set_index("seed")["value"]
                with np.errstate(invalid="ignore"):
                    x, y, seeds = paired(np.log10(zero), np.log10(at))
                    bad = int((~np.isfinite(x - y)).sum())
                    c = claims.compare(f"p = {p:g}: {LABELS[m]} at beta = {b:g} ends below beta = 0 "
                                       f"({LABELS[MOMENTUM_BASE[m]]}) in final gap (log10, paired over "
                                       "seeds)", x, y)
                rows.append(dict(p=p, method=m, beta=b, seeds=len(seeds), diverged=bad,
                                 difference=-c.ours if math.isfinite(c.ours) else c.ours, se=c.spread,
                                 two_se=2 * c.spread, verdict=c.verdict, check=c))
    return pd.DataFrame(rows, columns=cols)


def mifa_checks(effects: pd.DataFrame, scale: str = "") -> list[claims.Check]:
    """Item "mifa_beta": momentum lowers the final gap at every tested beta, for every momentum method and p. A
    (method, p, beta) whose runs all diverged, at beta or at beta = 0, has no paired value and is left out (the
    literal U-MIFAm for p < 1/2, whose table diverges whatever the momentum, see the theory page)."""
    e = effects[effects["seeds"] > effects["diverged"]] if len(effects) else effects
    if e.empty:
        return [_scaled(claims.compare("momentum below beta = 0 at every tested beta: no stored runs", [], []), scale)]
    return [_scaled(c, scale) for c in e["check"]]


def plot_mifa(effects: pd.DataFrame, title: str, axes=None):
    """One panel per p: log10 (final gap at beta / final gap at beta = 0), mean +- 2 s.e. over seeds, per momentum
    method against beta (0: the method without momentum; below 0: momentum helps)."""
    ps = sorted(set(effects["p"])) if len(effects) else [None]
    if axes is None:
        axes = plots.figure(1, len(ps), width=7.0, row_height=3.0, sharey=True)[1][0]
    for ax, p in zip(axes, ps):
        g = effects[effects["p"] == p] if len(effects) else effects
        for m in dict.fromkeys(g["method"]) if len(g) else []:
            d = g[(g["method"] == m)].sort_values("beta")
            ok = np.isfinite(d["difference"].to_numpy(float))
            ax.errorbar([0.0, *d["beta"][ok]], [0.0, *d["difference"][ok]], yerr=[0.0, *d["two_se"][ok].fillna(0)],
                        marker="o", capsize=3, color=PALETTE[m], label=LABELS[m])
            for b in d["beta"][~ok]:
                ax.plot([b], [0], marker="x", color=PALETTE[m], ms=8, ls="none")
        ax.axhline(0, color="0.5", lw=0.8)
        ax.axvline(0.5, color="0.7", ls=":", lw=1)
        ax.set(xlabel=r"momentum $\beta$", title=f"p = {p:g}" if p is not None else "")
        if not len(g):
            ax.text(0.5, 0.5, "no stored runs", transform=ax.transAxes, ha="center")
    axes[0].set_ylabel(r"$\log_{10}$ final gap, $\beta$ minus $\beta = 0$")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=7.5)
    axes[0].figure.suptitle(textwrap.fill(title, 95), fontsize=9.5)
    return axes


# ================================================================================================
# 4. FedAU's stand-in step sizes (000, main table): eta
# ================================================================================================
FEDAU = "FedAU (K = inf)"
FEDAU_RIVALS = ("Average participating", "Average all")


def fedau_tuning(profile_name: str | None = None) -> tuple[dict, dict]:
    """(the step-size study of the FedAU table's published profile, read from the store only:
    :func:`flkit.papers.fedau.table.tune` with ``compute_missing=False``; the profile's settings). A study
    that is not stored raises (the table page stores it)."""
    s = tb.profile(profile_name or CLAIMS["fedau"][1]["profile"])
    return tb.tune(s, compute_missing=False), s


def fedau_curves(res: Mapping) -> pd.DataFrame:
    """Per tuned method, the validation accuracy (%) over the server step eta at the method's selected local
    step gamma (``kind`` "selected gamma"), and the two marked pairs: the selection and the authors' CIFAR-10
    pair (``kind`` "selected", "authors'"; the authors' pair at its own gamma, NaN when off the grid)."""
    sc, sel = res["scores"], res["selected"].set_index("method")
    rows = []
    for m in sel.index:
        g = sc[(sc.method == m) & (sc.gamma == sel.loc[m, "gamma"])].sort_values("eta")
        rows += [dict(method=m, kind="selected gamma", gamma=r.gamma, eta=r.eta, val_acc=r.val_acc)
                 for r in g.itertuples()]
        rows.append(dict(method=m, kind="selected", gamma=sel.loc[m, "gamma"], eta=sel.loc[m, "eta"],
                         val_acc=sel.loc[m, "val_acc"]))
        ag, ae = tb.METHODS[m][2], tb.METHODS[m][3]
        hit = sc[(sc.method == m) & (sc.gamma == ag) & (sc.eta == ae)]["val_acc"]
        rows.append(dict(method=m, kind="authors'", gamma=ag, eta=ae,
                         val_acc=float(hit.iloc[0]) if len(hit) else math.nan))
    return pd.DataFrame(rows, columns=["method", "kind", "gamma", "eta", "val_acc"])


def fedau_leads(curves: pd.DataFrame, tol: float) -> pd.DataFrame:
    """FedAU (K = inf) at every eta of its grid (its selected gamma) against each of :data:`FEDAU_RIVALS` at
    its own selection: the lead in validation accuracy (points), and whether it exceeds `tol` (the tuning
    rule's tie tolerance; one tuning seed gives no standard error)."""
    cols = ["eta", "rival", "fedau", "rival_acc", "lead", "holds"]
    if curves.empty or FEDAU not in set(curves["method"]):
        return pd.DataFrame(columns=cols)
    f = curves[(curves.method == FEDAU) & (curves.kind == "selected gamma")]
    rows = []
    for rival in FEDAU_RIVALS:
        r = curves[(curves.method == rival) & (curves.kind == "selected")]
        if r.empty:
            continue
        best = float(r["val_acc"].iloc[0])
        rows += [dict(eta=e, rival=rival, fedau=v, rival_acc=best, lead=v - best, holds=bool(v - best > tol))
                 for e, v in zip(f["eta"], f["val_acc"])]
    return pd.DataFrame(rows, columns=cols)


def fedau_checks(leads: pd.DataFrame, tol: float, scale: str = "") -> list[claims.Check]:
    """Item "fedau_eta": one check per (eta, rival) of :func:`fedau_leads` (``claims.holds``: the lead above the
    tie tolerance `tol`); no stored study: one check that is not testable."""
    if leads.empty:
        return [_scaled(claims.compare("FedAU ahead at every tested eta: no stored tuning runs", [], []), scale)]
    rule = (f"validation accuracy of FedAU (K = inf) minus the rival's > {tol:g} points, the tuning rule's tie "
            "tolerance (one tuning seed: no standard error)")
    return [_scaled(claims.holds(f"FedAU (K = inf) at eta = {r.eta:g} (its selected gamma) ahead of {r.rival} at its "
                                 f"selected step sizes (validation accuracy)", r.holds, rule, ours=r.lead,
                                 reference=tol), scale) for r in leads.itertuples()]


def plot_fedau(curves: pd.DataFrame, title: str, ax=None):
    """Validation accuracy (%) against eta (log scale), one line per method at its selected gamma; a star: the
    selected pair; an open circle: the authors' CIFAR-10 pair (at the authors' gamma)."""
    if ax is None:
        ax = plots.figure(1, 1, width=7.0, row_height=4.2)[1][0, 0]
    cmap = dict(zip(dict.fromkeys(curves["method"]), ("tab:red", "tab:blue", "tab:green", "tab:purple",
                                                         "tab:orange", "tab:brown", "0.3")))
    for m, col in cmap.items():
        g = curves[curves.method == m]
        line = g[g.kind == "selected gamma"]
        sel, auth = g[g.kind == "selected"].iloc[0], g[g.kind == "authors'"].iloc[0]
        ax.plot(line["eta"], line["val_acc"], marker=".", color=col, lw=2 if m == FEDAU else 1.2,
                label=f"{m} (gamma = {sel.gamma:g})")
        ax.plot([sel.eta], [sel.val_acc], marker="*", ms=13, color=col, ls="none")
        if np.isfinite(auth.val_acc):
            ax.plot([auth.eta], [auth.val_acc], marker="o", ms=9, mfc="none", mew=1.5, color=col, ls="none")
    if curves.empty:
        ax.text(0.5, 0.5, "no stored tuning runs", transform=ax.transAxes, ha="center")
    ax.plot([], [], marker="*", ms=11, color="0.3", ls="none", label="selected (gamma, eta)")
    ax.plot([], [], marker="o", ms=8, mfc="none", color="0.3", ls="none", label="authors' CIFAR-10 (gamma, eta)")
    ax.set_xscale("log")
    marked = curves.loc[curves["kind"] != "selected gamma", "val_acc"].to_numpy(float)
    lo = min(np.nanmax(curves["val_acc"]) - 6, np.nanmin(marked) - 0.5) if len(curves) else math.nan
    if np.isfinite(lo):
        ax.set_ylim(bottom=lo)
    ax.set(xlabel=r"server step $\eta$ (lattice $10^{k/4}$)", ylabel="validation accuracy (%)")
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    ax.set_title(textwrap.fill(title, 95), fontsize=9.5)
    return ax


# ================================================================================================
# the page's record
# ================================================================================================
def verdicts(checks: Mapping[str, list[claims.Check]]) -> dict[str, str]:
    """{short name: the verdict of its item} (:func:`flkit.papers.scorecard.page_verdicts`, the one rule)."""
    vs = page_verdicts(DOC, {ITEM[k]: v for k, v in checks.items()})
    return {k: vs[ITEM[k]] for k in checks}


# ================================================================================================
# the numbers the page's prose reads (every key present, NaN or "none" where a run is missing)
# ================================================================================================
def _slug(x) -> str:
    return f"{x:g}".replace(".", "")


def _get(df: pd.DataFrame, col: str, **where) -> float:
    if df is None or df.empty:
        return math.nan
    m = np.ones(len(df), dtype=bool)
    for k, v in where.items():
        m &= (df[k] == v).to_numpy()
    return float(df.loc[m, col].iloc[0]) if m.any() else math.nan


CVAR_QUANTITIES = {0.9: ("class 9", "overall"), 0.8: ("class 8", "class 9", "overall")}


def cvar_numbers(gains: pd.DataFrame) -> dict[str, float]:
    """``cv<r>_<quantity>_<alpha>`` (paired difference to FedAvg, points), with ``_2se`` and ``_n`` (seeds), for
    r of Figs. 3-4, their quantities and alpha = gamma 0.3, 0.1; ``cv90_<quantity>_step`` (FedAvg with the larger
    step, with ``_2se``)."""
    out = {}
    for r, qs in CVAR_QUANTITIES.items():
        for q in qs:
            k = f"cv{int(100 * r)}_{q.replace('class ', 'c')}"
            for a in CVAR_ALPHAS[1:]:
                sel = dict(r=r, quantity=q, alpha=a, method="fed-cvar-avg")
                out[f"{k}_{_slug(a)}"] = _get(gains, "difference", **sel)
                out[f"{k}_{_slug(a)}_2se"] = _get(gains, "two_se", **sel)
                out[f"{k}_{_slug(a)}_n"] = _get(gains, "seeds", **sel)
            if r == 0.9:
                sel = dict(r=r, quantity=q, alpha=1.0)
                out[f"{k}_step"] = _get(gains, "difference", **sel)
                out[f"{k}_step_2se"] = _get(gains, "two_se", **sel)
    return out


def hics_numbers(gaps: pd.DataFrame) -> dict[str, float]:
    """``hx_<variant>_late`` / ``_late2se`` / ``_acc`` / ``_acc2se`` per variant of :data:`HICS_VARIANTS`
    (paired against CS), ``hx_thr`` (the tolerance of "similar"), ``hx_cs`` (CS's mean late loss), ``hx_n``."""
    out = {}
    for v in HICS_VARIANTS:
        k = "hx_" + {"paper": "doc", "T/2": "half", "gamma0 = 0": "g0"}[v]
        for col, name in (("late_gap", "late"), ("late_2se", "late2se"), ("acc_gap", "acc"), ("acc_2se", "acc2se")):
            out[f"{k}_{name}"] = _get(gaps, col, variant=v)
    out["hx_thr"] = float(gaps["threshold"].iloc[0]) if len(gaps) else math.nan
    out["hx_cs"] = float(gaps["cs_late"].iloc[0]) if len(gaps) else math.nan
    out["hx_n"] = int(gaps["seeds"].min()) if len(gaps) else 0
    return out


def mifa_numbers(effects: pd.DataFrame) -> dict:
    """``mf_<p>_<method>_<beta>`` (log10 change of the final gap against beta = 0) and ``_2se`` on the logistic
    page's whole grid (p, momentum method, beta 0.5 and the sweep's), NaN where not stored or diverged; counts
    ``mf_n``, ``mf_ok``, ``mf_bad``, ``mf_nt`` of the checks; ``mf_helps`` / ``mf_hurts``: in words, per p and
    method, the betas where momentum lowers / raises the final gap beyond 2 s.e."""
    cfg = logistic.profile(CLAIMS["mifa"][1]["profile"])
    out = {}
    for p in cfg["p_values"]:
        for m in MOMENTUM_BASE:
            for b in [cfg["beta"], *cfg["betas"]]:
                k = f"mf_{_slug(p)}_{m}_{_slug(b)}"
                out[k] = _get(effects, "difference", p=p, method=m, beta=b)
                out[k + "_2se"] = _get(effects, "two_se", p=p, method=m, beta=b)
    e = effects[effects["seeds"] > effects["diverged"]] if len(effects) else effects
    out.update(mf_n=len(e), mf_ok=int((e["verdict"] == "confirmed").sum()) if len(e) else 0,
               mf_bad=int((e["verdict"] == "contradicted").sum()) if len(e) else 0,
               mf_nt=int((e["verdict"] == claims.NOT_TESTABLE).sum()) if len(e) else 0)

    def words(verdict):
        parts = []
        for (p, m), g in (e.groupby(["p", "method"], sort=True) if len(e) else []):
            bs = [f"{b:g}" for b in g.loc[g["verdict"] == verdict, "beta"]]
            if bs:
                parts.append(f"{LABELS[m]} at p = {p:g}: beta = {', '.join(bs)}")
        return "; ".join(parts) or "none"
    out.update(mf_helps=words("confirmed"), mf_hurts=words("contradicted"))
    return out


def fedau_numbers(curves: pd.DataFrame, leads: pd.DataFrame) -> dict:
    """``fa_sel_eta``, ``fa_sel_acc`` (FedAU's selection), ``fa_hold`` / ``fa_fail`` (the etas of its grid where its
    lead over both rivals holds / fails, in words), ``fa_lead_min`` (the smallest lead where it holds),
    ``fa_lead_worst`` (the lowest lead of all, points), ``fa_worst_eta``; ``fa_moved`` (methods whose selected pair
    differs from the authors'), ``fa_auth_loss_max`` and ``fa_auth_loss_method`` (the largest loss of validation
    accuracy at the authors' pair against the selection)."""
    out = dict(fa_sel_eta=math.nan, fa_sel_acc=math.nan, fa_hold="none", fa_fail="none", fa_lead_min=math.nan,
               fa_lead_worst=math.nan, fa_worst_eta=math.nan, fa_moved="none", fa_auth_loss_max=math.nan,
               fa_auth_loss_method="none")
    if curves.empty:
        return out
    out["fa_sel_eta"] = _get(curves, "eta", method=FEDAU, kind="selected")
    out["fa_sel_acc"] = _get(curves, "val_acc", method=FEDAU, kind="selected")
    if len(leads):
        ok = leads.groupby("eta")["holds"].all()
        out["fa_hold"] = ", ".join(f"{e:g}" for e in ok.index[ok]) or "none"
        out["fa_fail"] = ", ".join(f"{e:g}" for e in ok.index[~ok]) or "none"
        held = leads[leads["holds"]]
        out["fa_lead_min"] = float(held["lead"].min()) if len(held) else math.nan
        w = leads.loc[leads["lead"].idxmin()]
        out["fa_lead_worst"], out["fa_worst_eta"] = float(w["lead"]), float(w["eta"])
    p = curves.pivot_table(index="method", columns="kind", values=["gamma", "eta", "val_acc"])
    moved = [m for m in p.index if (p.loc[m, ("gamma", "selected")], p.loc[m, ("eta", "selected")])
             != (p.loc[m, ("gamma", "authors'")], p.loc[m, ("eta", "authors'")])]
    out["fa_moved"] = ", ".join(moved) or "none"
    loss = (p[("val_acc", "selected")] - p[("val_acc", "authors'")]).dropna()
    if len(loss):
        out["fa_auth_loss_max"], out["fa_auth_loss_method"] = float(loss.max()), str(loss.idxmax())
    return out
