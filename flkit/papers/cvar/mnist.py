"""The page of Figs. 3 and 4 (notebooks/cvar/mnist.ipynb): MNIST with three rare users, FedAvg against
Fed-CVaR-Avg (alpha = gamma = 0.3) at r = 90 % (the rare users hold class 9) and r = 80 % (classes 8 and 9).
The document's reading checked on our runs (`confirm_mnist`), the diagnosis of the accuracy metric and of the
horizon (`mnist_metrics`, `mnist_slopes`), and the numbers the page's prose reads off the diagnosis runs
(`flkit.papers.cvar.diagnosis`, `flkit.papers.cvar.weights`)."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from flkit import plots
from flkit.papers import claims
from flkit.papers.claims import se
from flkit.papers.cvar import common, diagnosis, weights
from flkit.papers.cvar.common import (METHOD_LABELS, RARE_CLASSES, curve_panel, final_accuracies, legend_below,
                                      settings, span)
from flkit.papers.cvar.runs import store_for

__all__ = ["PROFILES", "profile", "MNIST_CLAIMS", "confirm_mnist", "reading_values", "mnist_metrics", "metric_values",
           "run_slopes", "mnist_slopes", "slope_values", "mnist_figure", "horizon", "horizon_title", "strong_gains",
           "strong_values", "scaling_values"]

EXPERIMENT = "mnist"
PROFILES = common.PROFILES[EXPERIMENT]   # "paper": the document's setting; "reduced": 1000 rounds, 3 seeds; "smoke"


def profile(name: str, **overrides) -> dict:
    """The page's settings under profile `name` (`PROFILES`), `overrides` winning (None: the profile's value);
    a ValueError naming the profiles for any other name (`common.settings`)."""
    return settings(EXPERIMENT, name, **overrides)


# ================================================================================================
# The document's reading of Figs. 3-4
# ================================================================================================
# Figs. 3-4: the document's reading ("from around 50 % (Fig. 3(c)), 60 % (Fig. 4(c)) and 30 % (Fig. 4(d))
# to over 80 %").
MNIST_CLAIMS = [(0.9, 9, "Fig. 3(c)", 50.0), (0.8, 8, "Fig. 4(c)", 60.0), (0.8, 9, "Fig. 4(d)", 30.0)]


def confirm_mnist(df: pd.DataFrame, last_frac: float = 0.1) -> pd.DataFrame:
    """The document's reading of Figs. 3-4 checked on our runs: test accuracy on each rare class
    (mean over the evaluations of the last `last_frac` of the rounds, then over seeds), FedAvg vs
    Fed-CVaR-Avg: "over 80 %" one-sided against the seeds' values (`level`, `claims.agree(side="lower")`) and
    "above FedAvg" paired over seeds (`check`, `claims.compare`); `confirmed` when both hold; and the overall
    accuracy, "better overall" on the paired per-seed values
    (`claims.compare`: `difference` the mean paired difference, `two_se` two standard errors of it, `paired`
    the verdict, `check` the claims.Check; `confirmed` when it is "confirmed")."""
    acc = final_accuracies(df, last_frac)
    rows = []
    for r, c, fig, doc_from in MNIST_CLAIMS:
        if r not in set(acc["pattern_frac"]):
            continue
        sel = acc[(acc["pattern_frac"] == r) & (acc["metric"] == "test_acc_class") & (acc["class"] == c)]
        fed = sel[sel["method"] == "fedavg"].set_index("seed")["value"]
        prop = sel[sel["method"] == "fed-cvar-avg"].set_index("seed")["value"]
        seeds = sorted(set(fed.index) & set(prop.index))
        # "over 80 %": one-sided against the document's level; "from around x % (FedAvg)": paired over seeds
        level = claims.agree(f"r = {r}: rare class {c}, Fed-CVaR-Avg over 80 %", prop.to_numpy(float), 80.0,
                             side="lower")
        above = claims.compare(f"r = {r}: rare class {c}, Fed-CVaR-Avg above FedAvg ({fed.mean():.2f} %)",
                               prop.loc[seeds].to_numpy(float), fed.loc[seeds].to_numpy(float))
        rows.append(dict(figure=fig, r=r, rare_class=c, document=f"~{doc_from:.0f} % -> > 80 %",
                         fedavg=fed.mean(), fed_cvar_avg=prop.mean(), seeds=len(prop),
                         better_every_seed=bool((prop - fed).dropna().gt(0).all()),
                         difference=above.ours, two_se=above.margin, paired=above.verdict,
                         confirmed=level.ok and above.verdict == "confirmed", check=above, level=level))
    for r in sorted(set(acc["pattern_frac"]), reverse=True):
        sel = acc[(acc["pattern_frac"] == r) & (acc["metric"] == "test_acc")]
        fed = sel[sel["method"] == "fedavg"].set_index("seed")["value"]
        prop = sel[sel["method"] == "fed-cvar-avg"].set_index("seed")["value"]
        seeds = sorted(set(fed.index) & set(prop.index))
        # "better overall" on paired runs (the same seed: the same split and relayed users): claims.compare
        paired = claims.compare(f"r = {r}: overall accuracy, Fed-CVaR-Avg above FedAvg ({fed.mean():.2f} %)",
                                prop.loc[seeds].to_numpy(float), fed.loc[seeds].to_numpy(float))
        rows.append(dict(figure="Fig. 3(b)" if r == 0.9 else "Fig. 4(b)", r=r, rare_class="overall",
                         document="Algorithm 1 better overall", fedavg=fed.mean(), fed_cvar_avg=prop.mean(),
                         seeds=len(prop), better_every_seed=bool((prop - fed).dropna().gt(0).all()),
                         difference=paired.ours, two_se=paired.margin, paired=paired.verdict,
                         confirmed=paired.verdict == "confirmed", check=paired))
    return pd.DataFrame(rows)


def reading_values(check: pd.DataFrame) -> dict:
    """The numbers of `confirm_mnist` for the page's prose: the rare-class claims confirmed ("k of n", which),
    the overall ones, the paired overall differences and their two standard errors, both methods' rare-class
    accuracies, and the rare classes where Fed-CVaR-Avg is above FedAvg beyond two standard errors."""
    rare, overall = check[check["rare_class"] != "overall"], check[check["rare_class"] == "overall"]
    prop_w = rare["fed_cvar_avg"]
    return dict(m_rare_ok=f"{int(rare['confirmed'].sum())} of {len(rare)}",
                m_rare_which=", ".join(f for f, ok in zip(rare["figure"], rare["confirmed"]) if ok) or "none",
                m_overall_ok=f"{int(overall['confirmed'].sum())} of {len(overall)}",
                m_overall_diff=span(overall["difference"], 2, signed=True), m_overall_2se=span(overall["two_se"], 2),
                m_rare_prop=f"{prop_w.min():.0f} to {prop_w.max():.0f} %",
                m_rare_fed=f"{rare['fedavg'].min():.0f} to {rare['fedavg'].max():.0f} %",
                m_rare_above=f"{int((rare['paired'] == 'confirmed').sum())} of {len(rare)}")


# ================================================================================================
# Diagnosis: which accuracy, and is the horizon long enough?
# ================================================================================================
# Figs. 3-4, diagnosis: the accuracy metric (final round vs the mean over a window) and whether the curves
# are still rising at the end of the horizon.
DIAG_QUANTITIES = [(0.9, 9, "Fig. 3(c)"), (0.9, "overall", "Fig. 3(b)"), (0.8, 8, "Fig. 4(c)"),
                   (0.8, 9, "Fig. 4(d)"), (0.8, "overall", "Fig. 4(b)")]


def _curves(df: pd.DataFrame) -> pd.DataFrame:
    """Per run and evaluation round: accuracy in % of the overall test set ("overall") and of each class,
    with columns seed, method, pattern_frac, quantity, round, value."""
    keep = df[df["metric"].isin(["test_acc", "test_acc_class"])]
    q = np.where(keep["metric"] == "test_acc", "overall", keep["class"].astype(int).astype(str))
    return keep.assign(quantity=q, value=keep["value"] * 100)[["seed", "method", "pattern_frac", "quantity",
                                                                "round", "value"]]


def _select(cur: pd.DataFrame, r: float, quantity) -> pd.DataFrame:
    return cur[(cur["pattern_frac"] == r) & (cur["quantity"] == str(quantity))]


def mnist_metrics(df: pd.DataFrame, window_frac: float = 0.1) -> pd.DataFrame:
    """Figs. 3-4, both accuracy metrics per run, then over seeds: "final" = the global model's test accuracy
    (%) at the last round T, "window" = the mean of the evaluations in the last `window_frac` of the rounds
    (rounds > (1 - window_frac) T; the metric `confirm_mnist` uses). Rows: figure, r, quantity (rare class
    or "overall"), method; columns final, final sd, window, window sd (sd over seeds, ddof = 1), seeds."""
    if not 0 < window_frac <= 1:
        raise ValueError(f"window_frac must be in (0, 1], got {window_frac!r}")
    cur = _curves(df)
    T = int(df["rounds"].max())
    rows = []
    for r, qty, fig in DIAG_QUANTITIES:
        sel = _select(cur, r, qty)
        for method, g in sel.groupby("method"):
            final = g[g["round"] == T].groupby("seed")["value"].mean()
            window = g[g["round"] > T - window_frac * T].groupby("seed")["value"].mean()
            rows.append({"figure": fig, "r": r, "quantity": str(qty), "method": method,
                         "final": final.mean(), "final sd": final.std(ddof=1), "window": window.mean(),
                         "window sd": window.std(ddof=1), "seeds": len(final)})
    return pd.DataFrame(rows)


def metric_values(metrics: pd.DataFrame, check: pd.DataFrame, final_check: pd.DataFrame) -> dict:
    """For the prose of the diagnosis: Fed-CVaR-Avg's rare-class accuracy at the final round and over the last
    window (`mnist_metrics`), their sds over seeds, its lead over FedAvg in both, and the rare-class claims
    confirmed on the window (`check`) and on the final round (`final_check`)."""
    rare_m = metrics[metrics["quantity"] != "overall"]
    prop = rare_m[rare_m["method"] == "fed-cvar-avg"]
    fed = rare_m[rare_m["method"] == "fedavg"].set_index("figure")
    gap = lambda col: prop.set_index("figure")[col] - fed[col]  # noqa: E731
    rng = lambda v, fmt=".0f": f"{v.min():{fmt}} to {v.max():{fmt}}"  # noqa: E731
    return dict(diag_final=rng(prop["final"]) + " %", diag_window=rng(prop["window"]) + " %",
                diag_final_sd=rng(prop["final sd"]), diag_window_sd=rng(prop["window sd"]),
                diag_gap_final=rng(gap("final"), ".1f"), diag_gap_window=rng(gap("window"), ".1f"),
                diag_window_ok=f"{int(check['confirmed'][check['rare_class'] != 'overall'].sum())} of 3",
                diag_final_ok=f"{int(final_check['confirmed'][final_check['rare_class'] != 'overall'].sum())} of 3")


def run_slopes(df: pd.DataFrame, last_frac: float = 0.25) -> pd.DataFrame:
    """Per run (seed, method, r, quantity): the least-squares slope of its test accuracy (%) on the round,
    over the evaluations in the last `last_frac` of the rounds (rounds >= (1 - last_frac) T), in percentage
    points per 1000 rounds."""
    if not 0 < last_frac <= 1:
        raise ValueError(f"last_frac must be in (0, 1], got {last_frac!r}")
    cur = _curves(df)
    T = int(df["rounds"].max())
    cur = cur[cur["round"] >= T - last_frac * T]
    rows = []
    for r, qty, fig in DIAG_QUANTITIES:
        for (method, seed), g in _select(cur, r, qty).groupby(["method", "seed"]):
            slope = np.polyfit(g["round"].to_numpy(float), g["value"].to_numpy(float), 1)[0]
            rows.append(dict(figure=fig, r=r, quantity=str(qty), method=method, seed=seed, slope=1000 * slope))
    return pd.DataFrame(rows)


def mnist_slopes(df: pd.DataFrame, last_frac: float = 0.25) -> pd.DataFrame:
    """`run_slopes` over seeds: mean slope (pp per 1000 rounds), its standard error over seeds (sd / sqrt n),
    "still rising": the mean slope exceeds 2 standard errors (the book's rule for a difference); `verdict` and
    `check`: the claim "no longer rising" (`claims.not_rising`: not testable at this scale when the slope is
    inside two standard errors of zero)."""
    per = run_slopes(df, last_frac)
    out = per.groupby(["figure", "r", "quantity", "method"], sort=False)["slope"].agg(
        slope="mean", se=se, seeds="size").reset_index()
    # a flat curve's least-squares slope is floating-point noise (~1e-13), its se as small: 1e-6 pp per 1000
    # rounds is the floor below which a slope counts as zero
    out["still_rising"] = out["slope"] > np.maximum(2 * out["se"], 1e-6)
    checks = []
    for r in out.itertuples():
        sel = per[(per["figure"] == r.figure) & (per["method"] == r.method) & (per["quantity"] == r.quantity)]
        who = "overall" if r.quantity == "overall" else "rare class " + r.quantity
        checks.append(claims.not_rising(f"r = {r.r}, {who}, {METHOD_LABELS[r.method]}: no longer rising at the last "
                                        f"round (slope {r.slope:.2f} ± {r.se:.2f} pp per 1000 rounds)",
                                        sel["slope"].to_numpy(float), floor=1e-6))
    out["verdict"] = [c.verdict for c in checks]
    out["check"] = checks
    return out


def slope_values(slopes: pd.DataFrame, half: pd.DataFrame) -> dict:
    """For the prose: the rare-class slopes over the last 25 % of the rounds (`slopes`) and the last 50 % (`half`),
    their standard errors, the curves still rising and not testable, and Fed-CVaR-Avg's slope minus FedAvg's."""
    rs, rh = slopes[slopes["quantity"] != "overall"], half[half["quantity"] != "overall"]
    rng = lambda v: f"{v.min():.1f} to {v.max():.1f}"  # noqa: E731
    gap_slope = (rs[rs["method"] == "fed-cvar-avg"].set_index("figure")["slope"]
                 - rs[rs["method"] == "fedavg"].set_index("figure")["slope"])
    return dict(slope_range=rng(rs["slope"]), slope_se=rng(rs["se"]),
                slope_rising=f"{int(rs['still_rising'].sum())} of {len(rs)}",
                slope_untestable=f"{int((rs['verdict'] == 'not testable at this scale').sum())} of {len(rs)}",
                half_range=rng(rh["slope"]), half_se=rng(rh["se"]),
                half_rising=f"{int(rh['still_rising'].sum())} of {len(rh)}", slope_gap=rng(gap_slope))


def mnist_figure(df: pd.DataFrame, pattern_frac: float, smooth: float = 0.9, title: str = ""):
    """Fig. 3 (r = 0.9: t, overall accuracy, rare class 9) or Fig. 4 (r = 0.8: t, overall, classes 8
    and 9) of the document: FedAvg vs Fed-CVaR-Avg, raw runs faint, EMA-smoothed mean +- sd over seeds."""
    sub = df[df["pattern_frac"] == pattern_frac]
    rare = RARE_CLASSES[pattern_frac]
    n = 2 + len(rare)
    fig, grid = plots.figure(1 if n <= 3 else 2, n if n <= 3 else 2, row_height=2.6)  # 4 panels: a 2 x 2 grid
    axes = grid.ravel()
    # t is logged more often than the accuracy: smooth it with the same time constant in rounds
    spacing = lambda m: np.median(np.diff(np.unique(sub.loc[sub["metric"] == m, "round"])))  # noqa: E731
    smooth_t = smooth ** (spacing("t") / spacing("test_acc"))
    curve_panel(axes[0], sub, "t", smooth=float(smooth_t), title="(a) global CVaR threshold t")
    curve_panel(axes[1], sub, "test_acc", smooth=smooth, scale=100, title="(b) overall test accuracy (%)")
    for i, c in enumerate(rare):
        curve_panel(axes[2 + i], sub, "test_acc_class", cls=c, smooth=smooth, scale=100,
                    title=f"({'cd'[i]}) test accuracy, rare class {c} (%)")
    for ax in axes[1:]:
        ax.set_ylim(0, 100)
    for ax in axes:
        ax.set_xlabel("round")
    legend_below(fig, axes)
    fig.suptitle(title, fontsize=9.5)
    return fig


# ================================================================================================
# The diagnosis runs: twice the horizon, a stronger risk setting, the authors' input scaling
# ================================================================================================
def horizon(s: Mapping) -> tuple[dict, pd.DataFrame, pd.DataFrame, list]:
    """Fig. 3's setting run for twice the rounds of the page's settings `s` (`diagnosis.long_horizon`), stored runs
    only (nothing is computed): (its settings, its runs, `diagnosis.horizon_effect` of them, its checks)."""
    s_long = diagnosis.long_horizon(s)
    df_long = diagnosis.horizon_runs(store_for(s_long), s_long)
    effect = diagnosis.horizon_effect(None, s_long, df=df_long)
    return s_long, df_long, effect, diagnosis.horizon_checks(effect)


def horizon_title(s: Mapping, s_long: Mapping) -> str:
    return (f"Fig. 3's setting run for {s_long['rounds']} rounds: accuracy (%) over the last 10 % of the rounds "
            f"ending at round {s['rounds']} (read) and at round {s_long['rounds']} (end), per seed")


def strong_gains(df: pd.DataFrame, df_strong: pd.DataFrame, s_strong: Mapping) -> pd.DataFrame:
    """Every Fed-CVaR-Avg cell of the page's runs `df` and the stronger-risk runs `df_strong` against FedAvg on the
    same seeds (`diagnosis.paired_gains`), in the settings of r of `s_strong`."""
    both = pd.concat([df, df_strong]).drop_duplicates(subset=["run_key", "round", "metric", "class"])
    return diagnosis.paired_gains(both[both["pattern_frac"].isin(s_strong["settings"])])


def strong_values(gains: pd.DataFrame, shares: pd.DataFrame, runs: list) -> dict:
    """For the prose of the stronger risk setting: its gains over FedAvg in words at r = 90 % ("strong_") and 80 %
    ("strong80_"), the page's cell's ("base_"), and the gradient weights of its runs `runs` (`shares`:
    `weights.summary` of their `group_weights`)."""
    after = weights.summary(weights.after_rare(runs), ("after_rare", "other"))
    parts = [("strong_", diagnosis.gain_words(gains, 0.1, 0.1)),
             ("strong80_", diagnosis.gain_words(gains, 0.1, 0.1, r=0.8)),
             ("base_", diagnosis.gain_words(gains, 0.3, 0.3)),
             ("strong_", weights.reading(shares, after, 0.1, 0.1))]
    return {prefix + k: v for prefix, words in parts for k, v in words.items()}


def scaling_values(effect: pd.DataFrame, gains_raw: pd.DataFrame, by_seed: pd.DataFrame | None) -> dict:
    """For the prose of the authors' input scaling ("raw90_", "raw80_"): per r, the seeds where Fed-CVaR-Avg's rare
    classes reach 80 % with it, their range and FedAvg's, the overall range (`by_seed`, `diagnosis.scaling_by_seed`);
    the effect in words (`diagnosis.scaling_words`) and, on more than one seed, Fed-CVaR-Avg's overall accuracy
    with the authors' scaling minus the document's, two standard errors of it, and its rare classes' mean."""
    out = {}
    if by_seed is not None:
        for r in sorted(set(by_seed.index.get_level_values("r"))):
            tag = f"raw{int(100 * r)}"
            rare_rows = by_seed.loc[r].drop(index="overall", level="quantity")
            cv, fa = rare_rows[("Fed-CVaR-Avg", "authors'")], rare_rows[("FedAvg", "authors'")]
            raw_over = by_seed.loc[r].xs("overall", level="quantity").xs("authors'", axis=1, level="inputs")
            out.update({f"{tag}_over80": f"{int((cv > 80).sum())} of {len(cv)}",
                        f"{tag}_rare_span": (f"{cv.min():.0f} to {cv.max():.0f} % "
                                             f"(FedAvg {fa.min():.0f} to {fa.max():.0f} %)"),
                        f"{tag}_rare_max": float(cv.max()),
                        f"{tag}_overall_span": f"{raw_over.min().min():.0f} to {raw_over.max().max():.0f} %"})
    for r in (0.9, 0.8):
        tag = f"raw{int(100 * r)}"
        out.update({f"{tag}_{k}": v for k, v in diagnosis.scaling_words(effect, gains_raw, r).items()})
        at = effect[(effect["r"] == r) & (effect["method"] == "fed-cvar-avg")]
        cv_all = at[at["quantity"] == "overall"]
        if len(cv_all) and cv_all["seeds"].iloc[0] > 1:   # Fed-CVaR-Avg's overall accuracy: authors' minus document's
            out.update({f"{tag}_overall_drop": float(cv_all["difference"].iloc[0]),
                        f"{tag}_overall_drop_bound": -float(cv_all["two_se"].iloc[0]),
                        f"{tag}_overall_2se": float(cv_all["two_se"].iloc[0]),
                        f"{tag}_rare_doc": float(at[at["quantity"] != "overall"]["document_inputs"].mean())})
    return out
