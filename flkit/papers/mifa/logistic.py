"""The logistic page of the MIFA chapter (``notebooks/mifa/logistic.ipynb``): Figures 4-6 of document 002 (softmax
regression on MNIST, 100 clients with two classes each), the momentum sweep at each figure's p, and the words of
the page's "What we found".

The page's runs are stored by configuration (experiments "logistic_fstar", "logistic_curves" and
"logistic_beta_sweep"); the configurations built here are those the page has always stored its runs under.
"""
from __future__ import annotations

from textwrap import fill

import numpy as np
import pandas as pd

from flkit import datasets, partition, plots, results
from flkit.papers.mifa import items
from flkit.papers.mifa.common import (FIGURES, PALETTE, and_list, best_betas, diverged_runs, momentum_answer,
                                      momentum_table, outcomes, p_words, page_profile, plot_curves, summary,
                                      umifam_claim_word, where)
from flkit.papers.mifa.methods import LABELS, simulate
from flkit.tasks import softmax_task

__all__ = ["PROFILES", "profile", "synthetic_data", "LOCAL", "METHODS", "SWEEP", "data_config", "task", "label_counts",
           "data_table", "plot_label_counts", "optimum", "curve_configs", "curves", "run_notes", "figure",
           "ranking", "figure_values", "sweep_configs", "beta_sweep", "plot_beta_sweep", "best_beta_table",
           "findings"]

# "smoke": seconds, small MNIST subset; "paper": the setting of the document
PROFILES = {
    "smoke": dict(seeds=[0], p_values=[0.01, 0.1, 0.5], rounds={0.01: 40, 0.1: 10, 0.5: 6}, eta=0.01, beta=0.5,
                  subset=40, betas=[0.9]),
    "paper": dict(seeds=[0, 1, 2], p_values=[0.01, 0.1, 0.5], rounds={0.01: 2000, 0.1: 200, 0.5: 200},
                  eta=0.01, beta=0.5, subset=None, betas=[0.7, 0.9, 0.95]),
}


def profile(name: str, **overrides) -> dict:
    """The page's settings under profile `name` ("smoke" or "paper"), with the notebook's parameters as
    `overrides` (None keeps the profile's value): seeds, p_values (Figures 4-6), rounds (p -> T), eta, beta
    (Figures 4-6), betas (the sweep's other momentum values), subset (samples kept per client, None: all).
    Checked before any work (`common.page_profile`); numbers come back as the page uses them."""
    cfg = page_profile(PROFILES, "logistic", name, overrides)
    return dict(cfg, seeds=[int(s) for s in cfg["seeds"]], p_values=[float(p) for p in cfg["p_values"]],
                rounds={float(k): int(v) for k, v in cfg["rounds"].items()}, eta=float(cfg["eta"]),
                beta=float(cfg["beta"]), betas=[float(b) for b in cfg["betas"]],
                subset=None if cfg["subset"] is None else int(cfg["subset"]))


def synthetic_data(profile: str, synthetic: bool | None = None) -> bool:
    """Whether the page runs on the labelled synthetic stand-in: `synthetic`, or (None) when the real MNIST is
    not present. The paper profile needs the real MNIST (a RuntimeError says how to import it)."""
    if synthetic is None:
        synthetic = not datasets.available("mnist")
    if synthetic and profile == "paper":
        raise RuntimeError("the paper profile needs the real MNIST: run `python -m flkit.datasets import "
                           "/path/to/data` or set FLKIT_DATA")
    return synthetic


# ================================================================================================
# data, model, optimum
# ================================================================================================
LOCAL = dict(epochs=2, batch_size=100, weight_decay=0.001)
METHODS = ["fedavg_is", "fedavg", "mifa", "umifa", "mifam", "umifam", "umifa_saga", "umifam_saga"]
SWEEP = ["mifam", "umifam", "umifam_saga"]


def data_config(subset: int | None, synthetic: bool) -> dict:
    """The data of the stored runs' configurations."""
    return dict(dataset="synthetic" if synthetic else "mnist", split="shards", clients=100, classes_per_client=2,
                data_seed=0, subset=subset, pixels="[0,1], flattened, +1 bias column")


def task(data: dict):
    """The softmax regression task of `data` (`flkit.tasks.softmax_task`, 100 clients x 2 classes, :data:`LOCAL`)."""
    return softmax_task(100, 2, seed=0, subset=data["subset"], synthetic=data["dataset"] == "synthetic", **LOCAL)


def label_counts(task) -> np.ndarray:
    """(clients, 10) label counts."""
    return np.stack([np.bincount(task.y[i].numpy(), minlength=10) for i in range(task.n)])


def data_table(task) -> pd.DataFrame:
    counts = label_counts(task)
    return pd.Series({"clients": task.n, "samples per client": task.x.shape[1], "classes per client":
                      int((counts > 0).sum(1).max()), "parameters d = 785 x 10": task.dim,
                      "test images": len(task.y_test)}).to_frame("value")


def plot_label_counts(task):
    """The label counts per client (`flkit.partition.plot_counts`) on a new figure."""
    fig, ax = plots.figure(1, 1, row_height=2.4)
    ax = partition.plot_counts(label_counts(task), ax=ax[0, 0], title="label counts per client (MIFA 2-class shards)")
    ax.grid(False)
    return fig


def _solve(task) -> pd.DataFrame:
    info = task.solve()
    return pd.DataFrame([{"round": 0, "metric": k, "value": v} for k, v in info.items()])


def optimum(task, data: dict, store) -> pd.Series:
    """f* of the regularized objective (``task.solve``, stored as "logistic_fstar"), set as ``task.f_star``;
    returns the solver's numbers (f_star, grad_norm2, suboptimality_bound)."""
    fs = results.sweep([dict(experiment="logistic_fstar", data=data, local=LOCAL)], lambda c: _solve(task), store,
                       progress=False)
    fs = fs.set_index("metric")["value"]
    task.f_star = float(fs["f_star"])
    return fs


# ================================================================================================
# Figures 4-6
# ================================================================================================
def _run_curves(task, config: dict) -> pd.DataFrame:
    T = config["rounds"]
    res = simulate(task, config["methods"], seeds=config["seeds"], eta=config["eta"], p=config["p"],
                   beta=config["beta"], rounds=T, every=config["every"], progress=False)
    return res.tidy(pd.DataFrame({"seed": config["seeds"]})).drop(columns="run")


def curve_configs(cfg: dict, data: dict, f_star: float) -> dict[float, dict]:
    """{p: the stored run of that figure}: every method of :data:`METHODS` on every seed, 25 recorded rounds."""
    return {p: dict(experiment="logistic_curves", data=data, local=LOCAL, p=p, eta=cfg["eta"], beta=cfg["beta"],
                    rounds=cfg["rounds"][p], every=max(1, cfg["rounds"][p] // 25), seeds=cfg["seeds"],
                    methods=METHODS, f_star=f_star) for p in cfg["p_values"]}


def curves(task, configs: dict, store) -> dict[float, pd.DataFrame]:
    """{p: the figure's tidy runs (gap, test accuracy, ...)}, read from `store` or computed and stored."""
    return {p: results.sweep([c], lambda c: _run_curves(task, c), store, progress=False) for p, c in configs.items()}


def run_notes(store, configs: dict, what: str = "computed", where_stored: bool = True) -> str:
    """One line per stored run of `configs` ({p: config}): the compute time its manifest records."""
    return "\n".join(f"p={p}: {what} in {store.manifest(c)['wall_time_s']:.0f} s"
                     + (f" (stored in {store.path(c).name})" if where_stored else "") for p, c in configs.items())


def figure(data: dict, p: float, number: int, cfg: dict, data_cfg: dict) -> pd.DataFrame:
    """Figure `number` of the document (ours: gap and test accuracy) on a new figure, and its table: per method
    the median final gap, the runs that diverged and the median final test accuracy."""
    df = data[p]
    fig, axes = plots.figure(1, 2, row_height=3.0)
    axes = axes[0]
    plot_curves(df, "gap", ax=axes[0], methods=METHODS)
    axes[0].set_ylabel(r"$f(w_t) - f^\star$")
    handles, labels = axes[0].get_legend_handles_labels()  # diverged runs: x on the gap panel only
    axes[0].get_legend().remove()
    plot_curves(df, "test_acc", ax=axes[1], methods=METHODS, log=False, mark_diverged=False)
    axes[1].set_ylabel("test accuracy")
    axes[1].set_title("diverged runs left out (x: left panel)", fontsize=9)
    axes[1].get_legend().remove()
    fig.legend(handles, labels, loc="outside lower center", ncol=3)
    fig.suptitle(fill(f"Fig. {number} of document 002 (ours): {data_cfg['dataset']} logistic regression, 100 "
                      f"clients x 2 classes, p={p}, T={cfg['rounds'][p]}, eta={cfg['eta']}, K=2 epochs, B=100, "
                      f"wd=0.001, beta={cfg['beta']}, {len(cfg['seeds'])} seeds", 100), fontsize=9)
    tab = summary(df, "gap")
    acc = summary(df, "test_acc")["final (median)"].rename("final test accuracy (median)")
    return tab.join(acc)


def ranking(tab: pd.DataFrame) -> list[str]:
    """The methods without a diverged run, lowest median final gap first."""
    ok = tab[tab["diverged runs"].str.startswith("0/")]
    return list(ok["final (median)"].sort_values().index)


def figure_values(tab: pd.DataFrame, number: int, rounds: int) -> dict:
    """The figure's numbers for the prose below it (l<number>_...)."""
    rank = ranking(tab)
    div = [LABELS[m] for m in tab.index if m not in rank]
    return {f"l{number}_T": rounds, f"l{number}_div": and_list(div) or "none",
            f"l{number}_first": LABELS[rank[0]], f"l{number}_second": LABELS[rank[1]],
            **{f"l{number}_{m}": tab.loc[m, "final (median)"] for m in tab.index},
            **{f"l{number}_acc_{m}": tab.loc[m, "final test accuracy (median)"] for m in tab.index}}


# ================================================================================================
# the momentum sweep
# ================================================================================================
def _run_beta_sweep(task, config: dict) -> pd.DataFrame:
    runs = pd.DataFrame([(s, b) for b in config["betas"] for s in config["seeds"]], columns=["seed", "beta"])
    res = simulate(task, config["methods"], seeds=runs["seed"].tolist(), beta=runs["beta"].to_numpy(),
                   eta=config["eta"], p=config["p"], rounds=config["rounds"], every=config["rounds"])
    return res.tidy(runs).drop(columns="run")


def sweep_configs(cfg: dict, data: dict, f_star: float) -> dict[float, dict]:
    """{p: the stored sweep}: MIFAm and U-MIFAm with SAGA memory (U-MIFAm as written at p >= 0.5 only) at every
    beta of the profile's `betas` and seed."""
    return {p: dict(experiment="logistic_beta_sweep", data=data, local=LOCAL, p=p, eta=cfg["eta"], betas=cfg["betas"],
                    rounds=cfg["rounds"][p], seeds=cfg["seeds"],
                    methods=[m for m in SWEEP if m != "umifam" or p >= 0.5], f_star=f_star) for p in cfg["p_values"]}


def beta_sweep(task, configs: dict, data: dict, beta: float, store) -> dict[float, pd.DataFrame]:
    """{p: the momentum grid} (`common.momentum_table`: beta = 0 and the figure's beta from the figure's runs,
    the other betas from the stored sweep)."""
    return {p: momentum_table(data[p], results.sweep([c], lambda c: _run_beta_sweep(task, c), store, progress=False),
                              beta) for p, c in configs.items()}


def plot_beta_sweep(tuned: dict, cfg: dict, data_cfg: dict):
    """Median final gap against beta per momentum method, one panel per p (bars: min-max over seeds)."""
    p_values = cfg["p_values"]
    fig, axes = plots.figure(1, len(p_values), row_height=3.0, sharey=True)
    for ax, p in zip(axes[0], p_values):
        tab = tuned[p]
        for m in SWEEP:
            g = tab[tab["method"] == m]
            if g.empty:
                continue
            med = g.groupby("beta")["value"].median()
            lo, hi = g.groupby("beta")["value"].min(), g.groupby("beta")["value"].max()
            ok = np.isfinite(med) & np.isfinite(hi)
            ax.errorbar(med.index[ok], med[ok], yerr=[(med - lo)[ok], (hi - med)[ok]], marker="o", capsize=3, ls="--",
                        color=PALETTE[m], label=LABELS[m])
        ax.set(yscale="log", xlabel=r"momentum $\beta$", title=f"p={p}, T={cfg['rounds'][p]}")
    axes[0][0].set_ylabel(r"final $f(w_T) - f^\star$")
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=3)
    fig.suptitle(fill(f"Momentum sweep on {data_cfg['dataset']} logistic regression (our addition): median final gap "
                      f"over {len(cfg['seeds'])} seeds, bars min-max; beta = 0: the method without momentum; a missing "
                      f"point: some run diverged", 100), fontsize=9)
    return fig


def best_beta_table(tuned: dict, p_values, betas) -> tuple[pd.DataFrame, dict]:
    """Per p and momentum method: the best beta > 0 of the grid, the median final gap there and at beta = 0;
    with the page's numbers on it (l_saga_beta_max, l_grid_max)."""
    best = {p: best_betas(tuned[p][tuned[p]["beta"] > 0]) for p in p_values}
    zero = {p: tuned[p][tuned[p]["beta"] == 0].groupby("method")["value"].median() for p in p_values}
    tab = pd.concat({p: b.assign(at_zero=zero[p].reindex(b.index)) for p, b in best.items()}, names=["p"])
    tab = tab.rename(index=LABELS, level=1).rename(columns={"beta": "best beta", "median": "median final gap at it",
                                                            "at_zero": "at beta = 0"})
    saga_max = [p for p in p_values
                if "umifam_saga" in best[p].index and best[p].loc["umifam_saga", "beta"] == max(betas)]
    return tab, dict(l_saga_beta_max=p_words(saga_max, p_values), l_grid_max=max(betas))


# ================================================================================================
# "What we found"
# ================================================================================================
def _final_median(df: pd.DataFrame, m: str) -> float:
    """Median over seeds of the last recorded gap of method `m`."""
    return df[(df["metric"] == "gap") & (df["method"] == m)].groupby("seed")["value"].last().median()


def findings(checks: dict, data: dict, p_values) -> dict:
    """The words and numbers of the page's "What we found" (l_...), read from its checks
    (`items.logistic_checks`) and the figures' runs."""
    Q, B, FIG = items.MOMENTUM, items.UMIFAM_BETTER, FIGURES["logistic"]
    NT, CO = ("not testable at this scale",), ("contradicted",)

    def o(item, starts, required=True):
        return outcomes(checks, item, starts, required)

    def pw(ps):
        return p_words(ps, p_values)

    def at_figs(starts):
        return {p: v for p in data for p, v in o(FIG[p], starts).items()}

    def fin(p, ms):
        return [_final_median(data[p], m) for m in ms]

    rank = {p: ranking(summary(df, "gap")) for p, df in data.items()}
    floor, b05 = at_figs("FedAvg (IS) ends above MIFA"), at_figs("U-MIFAm with SAGA memory ends below MIFAm")
    mom = {m: o(Q, f"{LABELS[m]} at its best", False) for m in ("mifam", "umifam_saga")}
    saga = o(B, "U-MIFAm (SAGA memory) at its best", False)
    lit_t = o(B, "U-MIFAm at its best", False) if 0.5 in data else {}
    lit = where(at_figs("U-MIFAm as written ends with the lowest"))
    nomom = [v for p in p_values if p >= 0.1 for v in fin(p, ["fedavg_is", "fedavg", "mifa", "umifa_saga"])]
    half = fin(0.5, ["umifa", "umifam", "umifa_saga", "umifam_saga"]) if 0.5 in data else [np.nan] * 4
    lit_div = [diverged_runs(data[p], ["umifa", "umifam"]) for p in p_values if p < 0.5]
    return dict(
        l_floor=pw(where(floor)), l_floor_tie=pw(where(floor, ok=NT)),
        l_top2=pw([p for p in rank if set(rank[p][:2]) == {"mifam", "umifam_saga"}]),
        l_nomom_spread=max(nomom) / min(nomom) if nomom else np.nan, l_b05_beats=pw(where(b05)),
        l_b05_loses=pw(where(b05, ok=CO)), l_b05_tie=pw(where(b05, ok=NT)), l_lit_div=sum(k for k, _ in lit_div),
        l_lit_runs=sum(n for _, n in lit_div),
        l_lit_half="end higher than" if half[0] > half[2] and half[1] > half[3] else "do not both end higher than",
        l_mom_mifam=pw(where(mom["mifam"])), l_mom_saga=pw(where(mom["umifam_saga"])),
        l_mom_saga_tie=pw(where(mom["umifam_saga"], ok=NT)),
        l_saga_beats=pw(where(saga)), l_saga_loses=pw(where(saga, ok=CO)), l_saga_tie=pw(where(saga, ok=NT)),
        l_lit_tuned={"confirmed": "below", "contradicted": "above"}.get(lit_t.get(0.5),
                                                                        "level (within the seed noise) with"),
        l_lit_lowest=pw(lit),
        l_mom_answer=momentum_answer(sorted(set(where(mom["mifam"])) | set(where(mom["umifam_saga"]))), p_values),
        l_claim=umifam_claim_word(lit, where(saga), p_values),
        l_n_ok=sum(c.ok for cs in checks.values() for c in cs), l_n_checks=sum(len(cs) for cs in checks.values()))
