"""The page of Fig. 2 (notebooks/cvar/synthetic_2d.ipynb): the motivating 2-D example of document 003. FedAvg
(alpha = 1) against Fed-CVaR-Avg (alpha = gamma = 0.1) on three panels of Gaussian patterns, the decision regions
of the final global models, and which of the two quirks of the authors' notebook model (zero-initialised weight
matrices, a softmax before the cross-entropy) makes FedAvg miss the rare pattern (the `causes` runs)."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import torch

from flkit import plots
from flkit.engine import grouped_forward
from flkit.papers.cvar import common
from flkit.papers.cvar.common import CAUSES, METHOD_LABELS, curve_panel, legend_below, settings, titled, variant_of
from flkit.papers.cvar.runs import blobs_split, build_model, params_from_table

__all__ = ["PROFILES", "profile", "quirk_settings", "design_settings", "decision_regions", "rare_classes_2d", "fig2",
           "config_of", "fig2_accuracy", "confirm_fig2", "confirm_values", "rare_curves", "cause_accuracy",
           "confirm_causes", "cause_values", "causes_table", "causes_reading", "design_values"]

EXPERIMENT = "synthetic_2d"
PROFILES = common.PROFILES[EXPERIMENT]   # "paper": the document's setting; "reduced": 1000 rounds; "smoke"
QUIRK_SEEDS = [0, 1, 2, 3, 4]          # the seeds of the quirks' runs at the document's scale


def profile(name: str, **overrides) -> dict:
    """The page's settings under profile `name` (`PROFILES`), `overrides` winning (None: the profile's value);
    a ValueError naming the profiles for any other name (`common.settings`)."""
    return settings(EXPERIMENT, name, **overrides)


def quirk_settings(s: Mapping) -> dict:
    """The runs that separate the two quirks beside the page's settings `s`: FedAvg on panel (a), zero init alone
    and the double softmax alone, on `QUIRK_SEEDS` at the document's scale (else the page's seeds)."""
    seeds = QUIRK_SEEDS if s["profile"] == "paper" else s["seeds"]
    return profile(s["profile"], panels=["a"], alphas=[1.0], seeds=seeds, rounds=s["rounds"],
                   causes=["zero-init", "double-softmax"], cause_seeds=seeds)


def design_settings(s: Mapping) -> dict:
    """The full design beside the page's settings `s`: every model variant of `CAUSES` on every panel, both
    methods, on the seeds of `quirk_settings`."""
    seeds = QUIRK_SEEDS if s["profile"] == "paper" else s["seeds"]
    return profile(s["profile"], seeds=s["seeds"], rounds=s["rounds"], causes=list(CAUSES), cause_seeds=seeds)


# ================================================================================================
# Fig. 2: decision regions
# ================================================================================================
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


def confirm_values(check: pd.DataFrame) -> dict:
    """The numbers of `confirm_fig2` for the page's prose: per model (ours, the authors'), "k of n" panels
    where the document's reading holds and which; the panels where Fed-CVaR-Avg classifies every pattern."""
    out = {}
    for key, model in (("ours", "ours"), ("authors", "authors' notebook model")):
        g = check[check["model"] == model]
        out[f"fig2_{key}"] = f"{int(g['confirmed'].sum())} of {len(g)}" if len(g) else "n/a (not run)"
        out[f"fig2_{key}_panels"] = ", ".join(p for p, ok in zip(g["panel"], g["confirmed"]) if ok) or "none"
    out["fig2_cvar_all"] = f"{int(check['proposed_classifies_all'].sum())} of {len(check)}"
    return out


def rare_curves(df: pd.DataFrame, label: str = ""):
    """Test accuracy on the class(es) of the least available user along training, per panel (our model, then the
    authors' notebook model when it was run): each run faint, the EMA-smoothed mean over seeds with a +-1 sd band."""
    variants = [v for v in (False, True) if (df["authors_model"].astype(bool) == v).any()]
    panels = sorted(df["panel"].unique())
    rare = {p: rare_classes_2d(config_of(df[df["panel"] == p].iloc[:1])) for p in panels}
    n = sum(len(v) for v in rare.values())
    per = -(-n // 2)  # rows of two panels per model variant
    fig, grid = plots.figure(len(variants) * per, 2, row_height=2.4)
    for k, v in enumerate(variants):
        sub = df[df["authors_model"].astype(bool) == v]
        who = "the authors' model" if v else "our model"
        cells = iter(grid[k * per:(k + 1) * per].ravel())
        for p in panels:
            for c in rare[p]:
                curve_panel(next(cells), sub[sub["panel"] == p], "test_acc_class", cls=c, smooth=0.6, scale=100,
                            title=f"({p}) rare class {c}, {who} (%)")
    for ax in grid.ravel()[n * len(variants):]:
        ax.set_visible(False)
    legend_below(fig, grid.ravel())
    fig.suptitle(titled(label, "Test accuracy on the rare classes along training"), fontsize=9.5)
    return fig


# ================================================================================================
# Which quirk makes FedAvg miss the rare class? (the `causes` runs)
# ================================================================================================
def cause_accuracy(df: pd.DataFrame) -> pd.DataFrame:
    """Fig. 2, the model variants of `common.CAUSES` (the `causes` runs): per run, the final test
    accuracy (%) on the panel's rare class(es) (mean over them) and on the worst class. Columns: panel,
    variant, method, seed, rare, worst."""
    fin = df[(df["metric"] == "test_acc_class") & (df["round"] == df["rounds"])]
    rows = []
    for (panel, key), run in fin.groupby(["panel", "run_key"]):
        cfg = config_of(df[df["run_key"] == key].iloc[:1])
        rare = rare_classes_2d(cfg)
        v = run.set_index("class")["value"] * 100
        rows.append(dict(panel=panel, variant=variant_of(cfg), method=run["method"].iloc[0],
                         seed=int(run["seed"].iloc[0]),
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


def cause_values(df: pd.DataFrame, causes: pd.DataFrame) -> dict:
    """For the prose: per model variant of the quirks' runs `df` (`confirm_causes` of them: `causes`), the seeds
    in which FedAvg misses the rare class, "k of n"."""
    acc = cause_accuracy(df)
    row = causes.set_index("variant")
    out = {}
    for v in ("zero-init", "double-softmax", "neither", "both"):
        if v in row.index:
            miss = int((acc[acc["variant"] == v]["rare"] < 50).sum())
            out[f"cause_{v.replace('-', '_')}"] = f"{miss} of {int(row.loc[v, 'seeds'])}"
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


def design_values(df: pd.DataFrame, n_stored: int, n_design: int) -> dict:
    """For the prose of the full design (its stored runs `df`, `n_stored` of `n_design`): the runs stored, in
    words per method the variants that miss the rare class (`causes_reading`), and per model variant the runs
    (all panels and seeds) in which FedAvg misses it, and Fed-CVaR-Avg's."""
    out = dict(full_stored=f"{n_stored} of {n_design}", full_fedavg=causes_reading(df, "fedavg"),
               full_cvar=causes_reading(df, "fed-cvar-avg"))
    acc = cause_accuracy(df)
    for v in CAUSES:
        g = acc[(acc["variant"] == v) & (acc["method"] == "fedavg")]
        out[f"miss_{v.replace('-', '_')}"] = f"{int((g['rare'] < 50).sum())} of {len(g)}" if len(g) else "n/a (not run)"
    g = acc[acc["method"] == "fed-cvar-avg"]
    out["miss_cvar"] = f"{int((g['rare'] < 50).sum())} of {len(g)}"
    return out
