"""Reading the stored runs of document 003: the document's Table 1 beside ours, the document's claims
checked on our numbers, and the figures (Fig. 2 decision regions, Figs. 3-4 curves)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch

from flkit import plots
from flkit.engine import grouped_forward
from flkit.papers import claims, verdicts
from flkit.papers.claims import se
from flkit.papers.cvar.experiments import (PAPER, blobs_split, build_model, method_of, params_from_table,
                                           variant_of)
from flkit.plots import curves, reference_table

# Table 1 of the document (FashionMNIST), copied from the seed text: for each gamma, then each alpha in
# (1.0, 0.3, 0.2, 0.1): (overall, pattern 1, pattern 2) as (mean, +-). tests/test_cvar.py re-reads the
# seed text and checks every number.
_DOC_TABLE1 = {
    0.0: [(85.147, 0.546, 85.473, 1.548, 61.041, 3.554), (86.157, 0.559, 88.323, 1.140, 67.164, 3.344),
          (86.453, 0.592, 88.736, 1.472, 68.926, 2.716), (86.089, 0.923, 87.536, 2.449, 70.601, 3.523)],
    0.1: [(84.895, 0.605, 84.583, 1.597, 59.649, 3.795), (86.276, 0.519, 88.353, 1.058, 66.676, 2.883),
          (86.432, 0.653, 88.619, 1.674, 68.801, 2.835), (86.546, 0.540, 88.681, 1.454, 71.681, 2.419)],
    0.2: [(84.783, 0.474, 84.533, 1.294, 59.223, 2.580), (86.174, 0.552, 88.029, 1.572, 66.372, 3.116),
          (86.110, 0.573, 88.061, 1.663, 67.659, 3.156), (86.132, 0.860, 88.093, 1.990, 69.698, 4.351)],
    0.3: [(84.983, 0.419, 84.969, 1.042, 60.330, 2.104), (86.036, 0.483, 87.611, 1.316, 65.958, 2.492),
          (86.263, 0.517, 88.300, 1.772, 68.076, 3.054), (86.197, 0.533, 87.776, 2.026, 69.883, 2.674)],
    1.0: [(84.915, 0.497, 84.514, 1.620, 60.252, 3.074), (84.822, 0.630, 84.481, 2.003, 59.008, 3.138),
          (84.916, 0.454, 85.459, 2.870, 60.805, 2.399), (84.956, 0.462, 85.561, 1.443, 59.839, 3.168)],
}
TABLE1_ALPHAS = (1.0, 0.3, 0.2, 0.1)
TABLE1_GAMMAS = (0.0, 0.1, 0.2, 0.3, 1.0)
QUANTITIES = ("overall", "pattern 1", "pattern 2")
RARE_CLASSES = {0.9: (9,), 0.8: (8, 9)}  # r -> the rare users' classes (pattern 1 = 8, pattern 2 = 9)


def table1_reference() -> pd.DataFrame:
    """The document's Table 1 as a tidy frame: gamma, alpha, quantity, value (mean %), sd (the +-)."""
    rows = []
    for g, cells in _DOC_TABLE1.items():
        for a, cell in zip(TABLE1_ALPHAS, cells):
            for q, (mean, sd) in zip(QUANTITIES, zip(cell[0::2], cell[1::2])):
                rows.append(dict(gamma=g, alpha=a, quantity=q, value=mean, sd=sd))
    return pd.DataFrame(rows)


def final_accuracies(df: pd.DataFrame, last_frac: float = 0.0) -> pd.DataFrame:
    """Per run: overall and per-class test accuracy (in %) of the global model at the last round
    (last_frac=0), or averaged over the evaluations in the last `last_frac` of the rounds.
    Columns: the run's config fields (alpha, gamma, seed, pattern_frac, method), metric, class, value."""
    keep = df[df["metric"].isin(["test_acc", "test_acc_class"])].copy()
    T = keep["rounds"].max()
    lo = T - last_frac * T if last_frac else T
    keep = keep[keep["round"] >= lo]
    cols = [c for c in ("run_key", "method", "alpha", "gamma", "seed", "pattern_frac") if c in keep.columns]
    out = keep.groupby(cols + ["metric", "class"], as_index=False)["value"].mean()
    out["value"] *= 100
    return out


def table1_ours(df: pd.DataFrame) -> pd.DataFrame:
    """Our Table 1 from the stored fmnist runs: one row per (gamma, alpha, quantity, seed), final-round
    accuracy in %. The risk-neutral cells (alpha = 1 or gamma = 1) all show the FedAvg run."""
    acc = final_accuracies(df)
    acc["quantity"] = np.select([acc["metric"] == "test_acc", acc["class"] == 8, acc["class"] == 9],
                                list(QUANTITIES), default="")
    acc = acc[acc["quantity"] != ""]
    gammas = sorted((set(TABLE1_GAMMAS) | set(acc["gamma"])) - {1.0}) + [1.0]
    alphas = sorted(set(TABLE1_ALPHAS) | set(acc["alpha"]), reverse=True)
    rows = []
    for g in gammas:
        for a in alphas:
            run = (1.0, 1.0) if method_of(a, g) == "fedavg" else (a, g)
            sel = acc[(acc["alpha"] == run[0]) & (acc["gamma"] == run[1])]
            if len(sel):
                rows.append(sel.assign(gamma=g, alpha=a)[["gamma", "alpha", "quantity", "seed", "value"]])
    return pd.concat(rows, ignore_index=True)


def table1_compare(ours: pd.DataFrame) -> pd.DataFrame:
    """Document vs ours, cell by cell: gamma, alpha, quantity, document (mean), document sd, ours
    (mean over seeds), ours sd (ddof=1), n (seeds), difference = ours - document."""
    ref = table1_reference().rename(columns={"sd": "document sd"})
    out = reference_table(ours, ref, on=["gamma", "alpha", "quantity"], value="value")
    cols = ["gamma", "alpha", "quantity", "document", "document sd", "ours", "ours sd", "n", "difference"]
    return out[cols + [c for c in out.columns if c not in cols]]


def table1_wide(cmp: pd.DataFrame, decimals: int = 2) -> pd.DataFrame:
    """The comparison laid out like the document's table: rows gamma, columns (alpha, quantity), each
    cell "ours ± sd | document (difference)" in % (difference in points); "n/a" where we have no run of
    the cell at this profile, no "± sd" where we have one seed."""
    def cell(r):
        if not np.isfinite(r["ours"]):
            return f"n/a (not run) | {r['document']:.{decimals}f}"
        sd = f" ± {r['ours sd']:.{decimals}f}" if np.isfinite(r["ours sd"]) else ""
        return f"{r['ours']:.{decimals}f}{sd} | {r['document']:.{decimals}f} ({r['difference']:+.{decimals}f})"
    wide = cmp.assign(cell=cmp.apply(cell, axis=1)).pivot_table(
        index="gamma", columns=["alpha", "quantity"], values="cell", aggfunc="first")
    return wide.reindex(columns=[(a, q) for a in TABLE1_ALPHAS for q in QUANTITIES if (a, q) in wide.columns])


def table1_long(cmp: pd.DataFrame, decimals: int = 2) -> pd.DataFrame:
    """The comparison for reading, one row per number of the document's Table 1: γ, α, quantity, the
    document's mean and ±, our mean and sd over seeds (all in %), the seeds, our difference (points), as
    text rounded to `decimals`; "n/a" with the reason where a number is missing (a cell not run at this
    profile; an sd of one seed)."""
    def num(x, why, signed=False):
        if not np.isfinite(x):
            return f"n/a ({why})"
        return f"{x:+.{decimals}f}" if signed else f"{x:.{decimals}f}"
    out = pd.DataFrame({"γ": cmp["gamma"], "α": cmp["alpha"], "quantity": cmp["quantity"],
                        "document (%)": [num(x, "") for x in cmp["document"]],
                        "document ± (%)": [num(x, "") for x in cmp["document sd"]],
                        "ours (%)": [num(x, "not run") for x in cmp["ours"]],
                        "ours sd (%)": [num(x, "not run" if not np.isfinite(m) else "one seed")
                                        for x, m in zip(cmp["ours sd"], cmp["ours"])],
                        "seeds": [int(n) if np.isfinite(n) else 0 for n in cmp["n"].astype(float)],
                        "ours − document (points)": [num(x, "not run", signed=True) for x in cmp["difference"]]})
    return out


def table1_figure(cmp: pd.DataFrame, title: str = ""):
    """Table 1 as heat maps, rows overall and pattern 2, columns the document's and ours, one colour scale per
    row; each cell labelled with its accuracy (%), "n/a" where we have no run of it."""
    fig, grid = plots.figure(2, 2, row_height=2.8)
    for row, q in enumerate(["overall", "pattern 2"]):
        sel = cmp[cmp["quantity"] == q]
        vmin, vmax = np.nanmin(sel[["document", "ours"]].to_numpy()), np.nanmax(sel[["document", "ours"]].to_numpy())
        for col, who in enumerate(["document", "ours"]):
            ax = grid[row, col]
            m = sel.pivot(index="gamma", columns="alpha", values=who)
            m = m[sorted(m.columns, reverse=True)]
            im = ax.imshow(m.to_numpy(), cmap="viridis", aspect="auto", vmin=vmin, vmax=vmax)
            ax.grid(False)
            ax.set_xticks(range(m.shape[1]), [str(a) for a in m.columns])
            ax.set_yticks(range(m.shape[0]), [str(g) for g in m.index])
            ax.set_xlabel(r"$\alpha$")
            ax.set_ylabel(r"$\gamma$")
            for (i, j), v in np.ndenumerate(m.to_numpy()):
                light = np.isfinite(v) and (v - vmin) > 0.6 * (vmax - vmin)  # dark text on the yellow end
                ax.text(j, i, f"{v:.1f}" if np.isfinite(v) else "n/a", ha="center", va="center",
                        color="k" if light else "w", fontsize=8.5)
            ax.set_title(f"{q}: {who}")
        fig.colorbar(im, ax=grid[row, :], label="test accuracy (%)")
    fig.suptitle(title, fontsize=9.5)
    return fig


def _paired(what: str, a: np.ndarray, b: np.ndarray):
    """The claim "a > b" on per-seed values (the book's rule, `flkit.papers.claims.compare`); with fewer
    than two paired seeds, the sign of the difference of the means (stated in the rule)."""
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() >= 2:
        return claims.compare(what, a[ok], b[ok])
    d = float(np.nanmean(a) - np.nanmean(b))
    verdict = "confirmed" if d > 0 else "contradicted" if d < 0 else "not testable at this scale"
    return claims.Check(what, verdict, d, 0.0, 0.0, "one value per cell: the sign of the difference")


def _combine(checks) -> tuple[str, str]:
    """All confirmed -> confirmed; any contradicted -> contradicted; else not testable."""
    vs = [c.verdict for c in checks]
    verdict = ("confirmed" if all(v == "confirmed" for v in vs) else
               "contradicted" if "contradicted" in vs else "not testable at this scale")
    return verdict, checks[0].rule


def _at_horizon(check, rounds: int | None):
    """`check` of a Table 1 reading measured on runs of `rounds` rounds: not testable at this scale when they stop
    before the document's horizon (`claims.horizon`; the numbers kept beside it)."""
    return claims.horizon(check, rounds, PAPER["fmnist"]["rounds"])


def _table1_reading(ours: pd.DataFrame, rounds: int | None = None) -> dict:
    """The checks behind `confirm_table1`: the per-seed paired claims (claims.Check) and the means shown;
    `rounds`: the runs' horizon, when it is shorter than the document's every check is not testable at this
    scale (`claims.horizon`)."""
    m = ours.groupby(["gamma", "alpha", "quantity"])["value"].mean()
    per = ours.pivot_table(index=["gamma", "alpha", "quantity"], columns="seed", values="value")
    v = lambda g, a, q: per.loc[(g, a, q)].to_numpy(dtype=float)  # noqa: E731
    overall = m.xs("overall", level="quantity")
    best = overall.idxmax()
    fed = {q: m[(1.0, 1.0, q)] for q in QUANTITIES}
    cell = {q: m.get((0.1, 0.1, q), np.nan) for q in QUANTITIES}
    aware = [(g, a) for g, a in overall.index if g < 1 and a < 1]
    if best == (0.1, 0.1):
        rival = overall.drop(best).idxmax()
        best_check = _paired("best cell", v(0.1, 0.1, "overall"), v(*rival, "overall"))
    else:   # the claim fails when the best cell is ahead beyond the noise
        c = _paired("best cell", v(*best, "overall"), v(0.1, 0.1, "overall"))
        best_check = c.__class__(c.what, {"confirmed": "contradicted"}.get(c.verdict, "not testable at this scale"),
                                 c.ours, c.reference, c.margin, c.rule)
    n = per.shape[1]
    level = _paired("pattern 2 at (gamma, alpha) = (0.1, 0.1) above 71 %", v(0.1, 0.1, "pattern 2"), np.full(n, 71.0))
    rise = _paired("pattern 2: (0.1, 0.1) above FedAvg", v(0.1, 0.1, "pattern 2"), v(1.0, 1.0, "pattern 2"))
    beats = [_paired(f"overall: (gamma, alpha) = ({g}, {a}) above FedAvg", v(g, a, "overall"), v(1.0, 1.0, "overall"))
             for g, a in aware]
    p1 = _paired("pattern 1: (0.1, 0.1) above FedAvg", v(0.1, 0.1, "pattern 1"), v(1.0, 1.0, "pattern 1"))
    harder = _paired("FedAvg: pattern 1 above pattern 2", v(1.0, 1.0, "pattern 1"), v(1.0, 1.0, "pattern 2"))
    best_check = dataclasses.replace(best_check, what=f"best overall cell is (gamma, alpha) = (0.1, 0.1); ours: ({best[0]:g}, {best[1]:g})")
    h = lambda c: _at_horizon(c, rounds)  # noqa: E731
    best_check, level, rise, p1, harder, beats = h(best_check), h(level), h(rise), h(p1), h(harder), [h(b) for b in beats]
    return dict(m=m, overall=overall, best=best, fed=fed, cell=cell, aware=aware, best_check=best_check,
                level=level, rise=rise, beats=beats, p1=p1, harder=harder)


def confirm_table1(ours: pd.DataFrame, rounds: int | None = None) -> pd.DataFrame:
    """The document's reading of Table 1, checked on our per-seed numbers with the book's agreement rule
    (`flkit.papers.claims`): paired over seeds, a difference counts when it exceeds two standard errors;
    verdict "confirmed", "contradicted" or "not testable at this scale" (``confirmed``: the first). `rounds`:
    the runs' horizon; shorter than the document's, every statement is not testable at this scale."""
    r = _table1_reading(ours, rounds)
    overall, best, fed, cell, aware = r["overall"], r["best"], r["fed"], r["cell"], r["aware"]
    best_check, level, rise, beats = r["best_check"], r["level"], r["rise"], r["beats"]
    rows = [
        dict(claim="best overall cell is (gamma, alpha) = (0.1, 0.1)", document="(0.1, 0.1): 86.55",
             ours=f"({best[0]}, {best[1]}): {overall[best]:.2f}", check=(best_check.verdict, best_check.rule)),
        dict(claim="pattern 2: from ~60 % (FedAvg) to > 71 % at (0.1, 0.1)", document="60.25 -> 71.68",
             ours=f"{fed['pattern 2']:.2f} -> {cell['pattern 2']:.2f}", check=_combine([rise, level])),
        dict(claim="pattern 1 also improves over FedAvg at (0.1, 0.1)", document="84.51 -> 88.68",
             ours=f"{fed['pattern 1']:.2f} -> {cell['pattern 1']:.2f}",
             check=_combine([r["p1"]])),
        dict(claim="pattern 2 is harder than pattern 1 for FedAvg", document="60.25 < 84.51",
             ours=f"{fed['pattern 2']:.2f} vs {fed['pattern 1']:.2f}",
             check=_combine([r["harder"]])),
        dict(claim="every risk-aware cell (gamma < 1, alpha < 1) beats FedAvg overall", document="12 of 12",
             ours=f"{sum(overall[c] > fed['overall'] for c in aware)} of {len(aware)} (means), "
                  f"{sum(c.verdict == 'confirmed' for c in beats)} confirmed",
             check=_combine(beats)),
    ]
    out = pd.DataFrame(rows)
    out["verdict"] = [c[0] for c in out.pop("check")]
    out["rule"] = [r["check"][1] if isinstance(r.get("check"), tuple) else "" for r in rows]
    out["confirmed"] = out["verdict"] == "confirmed"
    return out


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


# ================================================================================================
# The scorecard's record: each page's checks under the items of flkit/papers/items/003.yaml
# ================================================================================================
TABLE1_CLAIMS = {
    "rise": "Claim (Sec. 4): Table 1, pattern 2 improves from ~60 % (standard FL) to > 71 % at (γ, α) = (0.1, 0.1)",
    "p1": "Claim (Sec. 4): Table 1, pattern 1 also improves over FedAvg",
    "harder": "Claim (Sec. 4): Table 1, pattern 2 is harder to learn than pattern 1, even for standard FL",
    "beats": "Claim (Sec. 4): Table 1, overall performance improves as α → 0",
    "best": "Claim (Sec. 4): Table 1, (γ, α) = (0.1, 0.1) performs best",
}


def table1_item(gamma: float, alpha: float, quantity: str) -> str:
    """The scorecard id of one number of the document's Table 1, e.g. "Table 1: γ=0.1, α=0.1, pattern 2"."""
    return f"Table 1: γ={gamma}, α={alpha}, {quantity}"


def scorecard_table1(ours: pd.DataFrame, rounds: int | None = None) -> dict[str, list]:
    """The fmnist_table page's checks, by item: each of the 60 numbers of Table 1 against ours
    (`claims.agree`: our per-seed values vs the document's mean, its ± read as an sd over 5 repetitions,
    a number the document does not state), and the text's reading of the table (the paired checks of
    `confirm_table1`, unchanged). `rounds`: the runs' horizon; when it is shorter than the document's (6000),
    every check is "not testable at this scale", its numbers kept beside it (`claims.horizon`): the document
    reads Table 1 after its last round."""
    ref = table1_reference()
    out: dict[str, list] = {}
    for r in ref.itertuples():
        vals = ours[(ours["gamma"] == r.gamma) & (ours["alpha"] == r.alpha) & (ours["quantity"] == r.quantity)]
        vals = vals.sort_values("seed")["value"].to_numpy(dtype=float)
        what = f"γ={r.gamma}, α={r.alpha}, {r.quantity}: ours vs the document's (%)"
        out[table1_item(r.gamma, r.alpha, r.quantity)] = [_at_horizon(claims.agree(what, vals, r.value, ref_sd=r.sd),
                                                                      rounds)]
    rd = _table1_reading(ours, rounds)
    out[TABLE1_CLAIMS["rise"]] = [rd["rise"], rd["level"]]
    out[TABLE1_CLAIMS["p1"]] = [rd["p1"]]
    out[TABLE1_CLAIMS["harder"]] = [rd["harder"]]
    out[TABLE1_CLAIMS["beats"]] = list(rd["beats"])
    out[TABLE1_CLAIMS["best"]] = [rd["best_check"]]
    return out


# ------------------------------------------------------------------------------ Table 1 in words
TABLE1_SHORT = {   # the statements of TABLE1_CLAIMS in a few words, for the page's prose
    "rise": "pattern 2 rises from about 60 % (FedAvg) to over 71 % at (γ, α) = (0.1, 0.1)",
    "p1": "pattern 1 improves over FedAvg too",
    "harder": "pattern 2 is harder than pattern 1",
    "beats": "overall accuracy improves as α → 0",
    "best": "(γ, α) = (0.1, 0.1) performs best",
}
TABLE1_OWED = "cvar-table1-paper"   # the ledger item that runs Table 1 at the document's scale (flkit.owed)


def in_words(names) -> str:
    """"a", "a and b", "a, b and c"; "none" when there is no name."""
    names = [str(n) for n in names]
    if not names:
        return "none"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def span(values, decimals: int = 1, signed: bool = False) -> str:
    """The range of the finite `values` as text, "lo to hi" (one number when both round alike), rounded
    to `decimals`, with a sign when `signed`; "n/a" when no value is finite."""
    v = np.asarray(values, dtype=float).reshape(-1)
    v = v[np.isfinite(v)]
    if not v.size:
        return "n/a"
    sign = "+" if signed else ""
    fmt = lambda x: f"{round(float(x), decimals) + 0.0:{sign}.{decimals}f}"  # noqa: E731 (+ 0.0: no "-0.0")
    lo, hi = fmt(v.min()), fmt(v.max())
    return lo if lo == hi else f"{lo} to {hi}"


def table1_statements(checks: Mapping[str, list]) -> pd.DataFrame:
    """The document's five statements about Table 1 (`TABLE1_CLAIMS`), each with the verdict of the checks
    `scorecard_table1` files under it, combined by the rule of `confirm_table1` (all confirmed: confirmed;
    any contradicted: contradicted; else not testable at this scale). Columns: key, statement, verdict,
    checks, confirmed, contradicted (the counts of its checks)."""
    rows = []
    for key, item in TABLE1_CLAIMS.items():
        cs = list(checks.get(item, []))
        if not cs:
            raise ValueError(f"no check filed under {item!r}: pass the checks of scorecard_table1")
        vs = [c.verdict for c in cs]
        rows.append(dict(key=key, statement=TABLE1_SHORT[key], verdict=_combine(cs)[0], checks=len(cs),
                         confirmed=vs.count("confirmed"), contradicted=vs.count("contradicted")))
    return pd.DataFrame(rows)


_MEASURED = ("beyond two standard errors in the claimed direction", "beyond two standard errors against the claim",
             "inside two standard errors")


def _measured(c) -> str:
    """What a paired check measured, whatever its verdict: its mean difference beyond two standard errors
    (its margin) for the claim, against it, or inside."""
    if not (np.isfinite(c.ours) and np.isfinite(c.margin)):
        return _MEASURED[2]
    return _MEASURED[0] if c.ours > c.margin else _MEASURED[1] if c.ours < -c.margin else _MEASURED[2]


def _pp(x: float) -> str:
    return span([x], signed=True)


def table1_words(ours: pd.DataFrame, checks: Mapping[str, list]) -> dict:
    """The values the page's "What we found" glues (plain str/int), from our per-seed Table 1
    (`table1_ours`) and the page's checks (`scorecard_table1(ours)`). Keys:
    gap_<q> (q = overall, p1, p2): the range over the cells of ours - document (points); gap_<q>_mean: its
    mean; doc_spread_<q>: the document's largest minus smallest cell (points);
    rare, rare_sd, doc_rare_sd: the range of our pattern 1 and 2 accuracies (%), of their sd over seeds, and
    of the document's ± (points);
    agree: "k of n" of the document's numbers that agree (the `claims.agree` checks); run: "k of 60" numbers
    we have; below: "k of n" of ours below the document's;
    v_<key>: the verdict of each statement (`table1_statements`); n_<v>, list_<v> (v = confirmed,
    contradicted, untestable): how many and which;
    the numbers behind each statement: <check>_d (paired difference, points), <check>_2se, <check>_verdict
    for rise, level, p1, harder, best; the means fed_*, cell_* (%), best_cell, beats_* (counts and ranges);
    pattern_2se: the range of 2 se of the three paired pattern checks."""
    cmp = table1_compare(ours)
    st = table1_statements(checks)
    rd = _table1_reading(ours)
    fed, cell = rd["fed"], rd["cell"]
    out: dict = {}
    for q, k in zip(QUANTITIES, ("overall", "p1", "p2")):
        d = cmp.loc[cmp["quantity"] == q, "difference"]
        out[f"gap_{k}"], out[f"gap_{k}_mean"] = span(d, signed=True), _pp(float(d.mean()))
        doc = cmp.loc[cmp["quantity"] == q, "document"]
        out[f"doc_spread_{k}"] = f"{doc.max() - doc.min():.1f}"
    rare = cmp[cmp["quantity"] != "overall"]
    out["rare"], out["rare_sd"] = span(rare["ours"], 0), span(rare["ours sd"], 0)
    out["doc_rare_sd"] = span(rare["document sd"], 1)
    agree = [c for item, cs in checks.items() if item.startswith("Table 1: ") for c in cs]
    # within the agreement rule's margin at the runs' horizon (the verdict itself may be "not testable at this
    # scale" when the runs stop before the document's horizon: claims.horizon)
    out["agree"] = f"{sum(bool(abs(c.ours - c.reference) <= c.margin) for c in agree)} of {len(agree)}"
    out["run"] = f"{int(np.isfinite(cmp['ours']).sum())} of {len(cmp)}"
    out["below"] = f"{int((cmp['difference'] < 0).sum())} of {int(np.isfinite(cmp['difference']).sum())}"
    for v, name in (("confirmed", "confirmed"), ("contradicted", "contradicted"),
                    ("not testable at this scale", "untestable")):
        sel = st[st["verdict"] == v]
        out[f"n_{name}"], out[f"list_{name}"] = int(len(sel)), in_words(f"“{s}”" for s in sel["statement"])
    for r in st.itertuples():
        out[f"v_{r.key}"] = r.verdict
    c = lambda key, i=0: checks[TABLE1_CLAIMS[key]][i]  # noqa: E731
    for key, i, name in (("rise", 0, "rise"), ("rise", 1, "level"), ("p1", 0, "p1"), ("harder", 0, "harder"),
                         ("best", 0, "best")):
        out[f"{name}_d"], out[f"{name}_2se"] = _pp(c(key, i).ours), f"{c(key, i).margin:.1f}"
        out[f"{name}_verdict"] = c(key, i).verdict
        out[f"{name}_measured"] = _measured(c(key, i))
    out["fed_p1"], out["fed_p2"] = f"{fed['pattern 1']:.1f}", f"{fed['pattern 2']:.1f}"
    out["cell_p1"], out["cell_p2"] = f"{cell['pattern 1']:.1f}", f"{cell['pattern 2']:.1f}"
    best, overall = rd["best"], rd["overall"]
    out["best_cell"], out["best_overall"] = f"({best[0]}, {best[1]})", f"{overall[best]:.1f}"
    out["cell_overall"], out["fed_overall"] = f"{cell['overall']:.1f}", f"{fed['overall']:.1f}"
    beats = checks[TABLE1_CLAIMS["beats"]]
    out["beats_means"] = f"{sum(overall[a] > fed['overall'] for a in rd['aware'])} of {len(rd['aware'])}"
    out["beats_n"] = len(beats)
    # measured at the runs' horizon: ahead / behind beyond two standard errors (the verdict may be "not
    # testable at this scale" all the same, when the runs stop before the document's horizon)
    out["beats_confirmed"] = int(sum(_measured(b) == _MEASURED[0] for b in beats))
    out["beats_contradicted"] = int(sum(_measured(b) == _MEASURED[1] for b in beats))
    out["beats_2se"] = span([b.margin for b in beats])
    out["beats_d"] = span([b.ours for b in beats], signed=True)
    out["pattern_2se"] = span([c("rise").margin, c("p1").margin, c("harder").margin])
    return out


def table1_item_verdicts(checks: Mapping[str, list]) -> str:
    """The scorecard's verdict (`scorecard.verdict`, the book's one rule) on each item the page's `checks` are
    filed under: the verdicts with their counts in words, e.g. "not reproduced (61 of 65 items)". The scale of
    the runs and the runs still owed at the document's scale are stated beside it, never folded into it."""
    known = {it.id: it for it in verdicts.items("003")}
    unknown = sorted(set(checks) - set(known))
    if unknown:
        raise ValueError(f"item id(s) {unknown} are not in flkit/papers/items/003.yaml")
    got = []
    for item, cs in checks.items():
        got.append(verdicts.verdict(known[item], pd.DataFrame(verdicts.rows("003", {item: cs}))))
    n = pd.Series(got).value_counts()
    return in_words(f"{v} ({k} of {len(got)} items)" for v, k in n.items())


MNIST_HORIZON_ITEM = "Setting (Sec. 4): 4000 global rounds for MNIST, curves read at their end"


def _mnist_holds(check: pd.DataFrame, when: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in check.itertuples():
        checks = [r.check] if r.rare_class == "overall" else [r.level, r.check]
        for c in checks:
            out.setdefault(r.figure, []).append(dataclasses.replace(
                c, what=f"{c.what}, {when}", rule=f"{c.rule} ({'paired ' if c is r.check else ''}over seeds, {when})"))
    return out


def scorecard_mnist(check: pd.DataFrame, final: pd.DataFrame | None = None,
                    slopes: pd.DataFrame | None = None, horizon: list | None = None) -> dict[str, list]:
    """The mnist page's checks, by item (Fig. 3(b), 3(c), 4(b), 4(c), 4(d)): the checks of `confirm_mnist`'s
    rows (last 10 % of the rounds: rare class, "over 80 %" one-sided over seeds and "above FedAvg" paired over
    seeds; overall, "above FedAvg" paired); `final`:
    the same rows on the final-round accuracy (`confirm_mnist(df, last_frac=0)`), filed beside them; the
    overall rows are the paired check of `confirm_mnist` (`claims.compare`, a difference inside two standard
    errors is not testable, not "confirmed");
    `slopes` (`mnist_slopes`): under `MNIST_HORIZON_ITEM`, one `claims.not_rising` per curve: "no longer rising
    at the last round" is confirmed only when the mean slope over the last 25 % of the rounds is below zero by
    more than 2 se over seeds, contradicted when above zero by more than 2 se, else not testable at this scale;
    `horizon` (`diagnosis.horizon_checks` of the runs twice as long): filed under `MNIST_HORIZON_ITEM` too, beside
    the slopes (none when no such run is stored)."""
    out = _mnist_holds(check, "last 10 % of the rounds")
    if final is not None:
        for k, v in _mnist_holds(final, "final round").items():
            out.setdefault(k, []).extend(v)
    if slopes is not None:
        out[MNIST_HORIZON_ITEM] = [
            dataclasses.replace(r.check, rule="least-squares slope of the accuracy (%) on the round over the last "
                                f"25 % of the rounds, per run (pp per 1000 rounds); {r.check.rule}")
            for r in slopes.itertuples()]
    if horizon:
        out.setdefault(MNIST_HORIZON_ITEM, []).extend(horizon)
    return out


def scorecard_fig2(check: pd.DataFrame) -> dict[str, list]:
    """The synthetic_2d page's checks, by item (Fig. 2(a), 2(b), 2(c)): each row of `confirm_fig2` (one
    panel, one model variant) as two `claims.holds`, its two criteria unchanged: FedAvg fails on the
    least available user's pattern(s) (final test accuracy on them < 50 %, mean over seeds), Fed-CVaR-Avg
    classifies every pattern (> 90 % on each class)."""
    out: dict[str, list] = {}
    for r in check.itertuples():
        who = f"{r.model}, {r.seeds} seed{'s' if r.seeds > 1 else ''}"
        out.setdefault(f"Fig. 2({r.panel})", []).extend([
            claims.holds(f"FedAvg fails on the rare pattern(s) {r.rare_classes} ({who})", r.fedavg_fails,
                         "final test accuracy on the rare class(es), mean over seeds, < 50 %",
                         ours=r.fedavg_rare, reference=50.0),
            claims.holds(f"Fed-CVaR-Avg classifies every pattern ({who})", r.proposed_classifies_all,
                         "final test accuracy of the worst class, mean over seeds, > 90 %",
                         ours=r.proposed_worst_class, reference=90.0)])
    return out


# ================================================================================================
# Figures
# ================================================================================================
METHOD_LABELS = {"fedavg": "FedAvg (alpha = 1)", "fed-cvar-avg": "Fed-CVaR-Avg"}
METHOD_COLORS = {"fedavg": "tab:blue", "fed-cvar-avg": "tab:red"}


def curve_panel(ax, df: pd.DataFrame, metric: str, cls: int | None = None, smooth: float = 0.9,
                scale: float = 1.0, title: str = ""):
    """Learning curves of FedAvg and Fed-CVaR-Avg on `ax`: each run raw (faint), and the mean over seeds
    of the EMA-smoothed runs (`flkit.plots.smooth_ema`, weight `smooth` per evaluation) with a +-1 sd band."""
    sel = df[df["metric"] == metric]
    if cls is not None:
        sel = sel[sel["class"] == cls]
    sel = sel.assign(value=sel["value"] * scale)
    for (method, _), run in sel.groupby(["method", "seed"]):
        ax.plot(run["round"], run["value"], color=METHOD_COLORS[method], alpha=0.12, lw=0.6)
    curves(sel, hue="method", ax=ax, smooth=smooth, band="sd", units="seed", label_map=METHOD_LABELS,
           palette=METHOD_COLORS, order=[m for m in ("fedavg", "fed-cvar-avg") if m in set(sel["method"])])
    ax.set_title(title)
    ax.set_ylabel("")
    if scale == 100:  # accuracies in %: the sd band must not suggest values outside [0, 100]
        ax.set_ylim(-2, 102)
    return ax


def decision_regions(ax, model: torch.nn.Module, params: Mapping[str, torch.Tensor], X: torch.Tensor,
                     y: torch.Tensor, step: float = 0.02, cmap: str = "viridis"):
    """Decision regions of one model (params stacked with M = 1) on a `step` grid (the authors' 0.02),
    with the points (x: test set, coloured by class)."""
    X, y = X.cpu(), y.cpu()
    lo, hi = X.min(0).values - 0.5, X.max(0).values + 0.5
    gx, gy = torch.meshgrid(torch.arange(lo[0], hi[0], step), torch.arange(lo[1], hi[1], step), indexing="xy")
    grid = torch.stack([gx.reshape(-1), gy.reshape(-1)], 1)
    with torch.no_grad():
        pred = grouped_forward(model, {k: v.cpu() for k, v in params.items()}, grid, shared=True)[0].argmax(-1)
    C = int(y.max()) + 1
    ax.contourf(gx, gy, pred.reshape(gx.shape).float(), levels=np.arange(C + 1) - 0.5, cmap=cmap, alpha=0.3)
    ax.scatter(X[:, 0], X[:, 1], c=y, cmap=cmap, vmin=0, vmax=C - 1, s=4, edgecolors="none")
    ax.set_xticks([])
    ax.set_yticks([])
    return ax


def rare_classes_2d(config: Mapping) -> list[int]:
    """Classes held by the least available user(s) of a Fig. 2 panel (the last user's classes)."""
    return sorted(set(config["assignment"][-1]))


def fig2(df: pd.DataFrame, authors_model: bool = False, seed: int = 0, title: str = ""):
    """Fig. 2 layout: one row per panel, Left FedAvg (alpha = 1) | Center RAM distribution | Right
    Fed-CVaR-Avg (alpha = 0.1, gamma = 0.1): decision regions of the final global model of run `seed`
    over all the panel's points (train and test), coloured by class."""
    sub = df[(df["authors_model"] == authors_model) & (df["seed"] == seed)]
    panels = sorted(sub["panel"].unique())
    fig, axes = plots.figure(len(panels), 3, row_height=2.6, gridspec_kw={"width_ratios": [1, 0.8, 1]})
    for row, panel in zip(axes, panels):
        runs = sub[sub["panel"] == panel]
        cfg = config_of(runs[runs["method"] == "fedavg"])
        xtr, ytr, xte, yte = blobs_split(cfg)
        X, y = torch.cat([xtr, xte]), torch.cat([ytr, yte])
        model = build_model(cfg)
        for ax, method in ((row[0], "fedavg"), (row[2], "fed-cvar-avg")):
            run = runs[runs["method"] == method]
            c = config_of(run)
            decision_regions(ax, model, params_from_table(run, model), X, y)
            ax.set_title(f"({panel}) FedAvg\n$\\alpha$ = 1" if method == "fedavg" else
                         f"({panel}) Fed-CVaR-Avg\n$\\alpha$ = {c['alpha']}, $\\gamma$ = {c['gamma']}")
        rho = np.asarray(cfg["rho"])
        colors = ["tab:orange" if any(cl in rare_classes_2d(cfg) for cl in a) else "tab:gray"
                  for a in cfg["assignment"]]
        row[1].bar(np.arange(1, len(rho) + 1), rho, color=colors)
        row[1].set_xlabel("user i")
        row[1].set_ylabel(r"$\rho_i$")
        row[1].set_title(f"({panel}) RAM distribution\norange: users of class {rare_classes_2d(cfg)}")
    fig.suptitle(title, fontsize=9.5)
    return fig


def config_of(run: pd.DataFrame) -> dict:
    """The config of one stored run (a frame of rows of that run, config fields as columns)."""
    if run["run_key"].nunique() != 1:
        raise ValueError(f"expected rows of one run, got {run['run_key'].nunique()}")
    row = run.iloc[0]
    out = {}
    for k in ("panel", "centers", "n_per_class", "std", "data_seed", "test_frac", "assignment", "rho", "model",
              "hidden", "authors_model", "alpha", "gamma", "seed", "rounds"):
        if k in run.columns:
            v = row[k]
            out[k] = [list(x) if isinstance(x, tuple) else x for x in v] if isinstance(v, tuple) else v
    return out


def fig2_accuracy(df: pd.DataFrame) -> pd.DataFrame:
    """Final test accuracy (%) per panel, model variant, method and class: mean and sd over seeds."""
    acc = df[(df["metric"] == "test_acc_class") & (df["round"] == df["rounds"])]
    out = (acc.groupby(["panel", "authors_model", "method", "class"])["value"]
           .agg(mean=lambda v: 100 * v.mean(), sd=lambda v: 100 * v.std(ddof=1), seeds="size").reset_index())
    return out


def confirm_fig2(df: pd.DataFrame) -> pd.DataFrame:
    """The document's reading of Fig. 2, per panel and model variant: FedAvg fails to classify the least
    frequent user's pattern(s) (final test accuracy on them < 50 %, mean over seeds) while Fed-CVaR-Avg
    classifies every pattern (> 90 % on each class)."""
    acc = fig2_accuracy(df)
    rows = []
    for (panel, quirks), g in acc.groupby(["panel", "authors_model"]):
        cfg = config_of(df[(df["panel"] == panel) & (df["authors_model"] == quirks)].iloc[:1])
        rare = rare_classes_2d(cfg)
        fed = g[g["method"] == "fedavg"].set_index("class")["mean"]
        prop = g[g["method"] == "fed-cvar-avg"].set_index("class")["mean"]
        fails = bool(fed[rare].min() < 50)
        solves = bool(prop.min() > 90)
        rows.append(dict(panel=panel, model="authors' notebook model" if quirks else "ours",
                         rare_classes=str(rare), fedavg_rare=fed[rare].mean(), proposed_rare=prop[rare].mean(),
                         proposed_worst_class=prop.min(), seeds=int(g["seeds"].max()),
                         fedavg_fails=fails, proposed_classifies_all=solves, confirmed=fails and solves))
    return pd.DataFrame(rows)


FIG2_CAUSES_ITEM = "Claim (Sec. 2): under a highly skewed RAM, solving (2) generally fails to classify accurately"


def cause_accuracy(df: pd.DataFrame) -> pd.DataFrame:
    """Fig. 2, the model variants of `experiments.CAUSES` (the `causes` runs): per run, the final test
    accuracy (%) on the panel's rare class(es) (mean over them) and on the worst class. Columns: panel,
    variant, method, seed, rare, worst."""
    fin = df[(df["metric"] == "test_acc_class") & (df["round"] == df["rounds"])]
    rows = []
    for (panel, key), run in fin.groupby(["panel", "run_key"]):
        cfg = config_of(df[df["run_key"] == key].iloc[:1])
        rare = rare_classes_2d(cfg)
        v = run.set_index("class")["value"] * 100
        rows.append(dict(panel=panel, variant=variant_of(cfg), method=run["method"].iloc[0], seed=int(run["seed"].iloc[0]),
                         rare=float(v[rare].mean()), worst=float(v.min())))
    return pd.DataFrame(rows).sort_values(["panel", "variant", "method", "seed"], ignore_index=True)


def confirm_causes(df: pd.DataFrame) -> pd.DataFrame:
    """Per panel, model variant and method: the rare-class final accuracy, mean and sd over seeds, the
    seeds, and whether it "misses" the rare class (mean below 50 %, the criterion of `confirm_fig2`)."""
    acc = cause_accuracy(df)
    out = (acc.groupby(["panel", "variant", "method"])
           .agg(rare=("rare", "mean"), rare_sd=("rare", lambda v: v.std(ddof=1)), seeds=("seed", "size"),
                per_seed=("rare", lambda v: " ".join(f"{x:.0f}" for x in v)))
           .reset_index())
    out["misses_rare"] = out["rare"] < 50
    return out


def scorecard_causes(df: pd.DataFrame, single=("zero-init", "double-softmax"),
                     against: str = "neither") -> dict[str, list]:
    """The synthetic_2d page's checks of the two quirks' separate effects, filed under `FIG2_CAUSES_ITEM`
    (the document's reading that FedAvg, solving (2), fails under a skewed RAM; panel named in each check):
    for each variant of `single`, FedAvg's rare-class final accuracy below 50 % (mean
    over seeds, `claims.holds`), and paired over the seeds both have, `against` (our model) above the
    variant on it (`claims.compare`: the variant lowers FedAvg's rare-class accuracy)."""
    acc = cause_accuracy(df)
    acc = acc[acc["method"] == "fedavg"]
    out: dict[str, list] = {}
    for panel, g in acc.groupby("panel"):
        per = g.pivot_table(index="seed", columns="variant", values="rare")
        for v in single:
            if v not in per:
                continue
            vals = per[v].dropna()
            what = f"{v} alone" if v in ("zero-init", "double-softmax") else f"the {v} model"
            out.setdefault(FIG2_CAUSES_ITEM, []).append(claims.holds(
                f"Fig. 2({panel}): FedAvg with {what} fails on the rare pattern(s) ({len(vals)} seeds)",
                vals.mean() < 50,
                "final test accuracy on the rare class(es), mean over seeds, < 50 %", ours=vals.mean(), reference=50.0))
            if against in per:
                both = per[[against, v]].dropna()
                out[FIG2_CAUSES_ITEM].append(claims.compare(
                    f"Fig. 2({panel}): FedAvg, rare class: our model above {what} (paired over {len(both)} seeds)",
                    both[against].to_numpy(), both[v].to_numpy()))
    return out


def causes_table(df: pd.DataFrame) -> pd.DataFrame:
    """The full Fig. 2 design for reading: per panel and model variant (rows), per method (columns), the
    rare-class final accuracy "mean ± sd" over seeds (%) and the seeds in which it misses the rare class
    (below 50 %) as "k of n"."""
    acc = cause_accuracy(df)
    rows = []
    for (panel, variant), g in acc.groupby(["panel", "variant"], sort=True):
        row = dict(panel=panel, variant=variant)
        for method, m in g.groupby("method"):
            name = {"fedavg": "FedAvg"}.get(method, METHOD_LABELS.get(method, method))
            sd = f" ± {m['rare'].std(ddof=1):.0f}" if len(m) > 1 else ""
            row[f"{name}: rare class (%)"] = f"{m['rare'].mean():.0f}{sd}"
            row[f"{name}: misses it"] = f"{int((m['rare'] < 50).sum())} of {len(m)}"
        rows.append(row)
    return pd.DataFrame(rows).fillna("n/a: not run yet")


def causes_reading(df: pd.DataFrame, method: str) -> str:
    """In words, for `method`: the model variants with which it misses the rare class in at least one
    seed, per panel, with the seed counts ("none" when it never does)."""
    acc = cause_accuracy(df)
    acc = acc[acc["method"] == method]
    parts = []
    for panel, g in acc.groupby("panel"):
        miss = [(v, int((m["rare"] < 50).sum()), len(m)) for v, m in g.groupby("variant")]
        miss = [f"{v} {k} of {n}" for v, k, n in miss if k]
        parts.append(f"({panel}) " + (", ".join(miss) if miss else "none"))
    return "; ".join(parts) if parts else "no runs"


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


def legend_below(fig, axes) -> None:
    """One legend of the methods under the figure (in place of one per panel), alpha and gamma as symbols."""
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes:
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    labels = [lab.replace("alpha", "$\\alpha$").replace("gamma", "$\\gamma$") for lab in labels]
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels))


def titled(label: str, title: str, width: int = 150) -> str:
    """A figure/table title that starts with the profile's label ("REDUCED: ...") when there is one."""
    import textwrap
    return "\n".join(textwrap.wrap(label, width) + [title]) if label else title
