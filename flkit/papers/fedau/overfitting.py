r"""Overfitting when only training on a single device's data (document 000, slide of that title).

The slide shows, for one model trained on a single device's data and one trained on all devices' data,
the training accuracy (solid) and the test accuracy (dashed) over training, and reads: with one device's
data the model fits its training data but does not generalize; with all data the two curves stay close.
The document states neither the data set, the model, nor the training settings of that slide, and the
authors' code has no script for it (IBM/fedau@6e9cce9 holds only the federated runs of ``main.py``).

Our stand-in (labelled as such on the page):

* data: Fashion-MNIST (60,000 training and 10,000 test images), one of the data sets of the authors' code;
* devices: FedAU's split, N = 250 clients, Dirichlet alpha = 0.1 (`flkit.partition.fedau_dirichlet`,
  IBM/fedau@6e9cce9 ``util/util.py``); "a single device" is one client of that split drawn uniformly at
  random per seed (about 240 samples, most of them from one to three classes); "all devices" is the union,
  i.e. the whole training set;
* model and training: FedAU's Fashion-MNIST CNN (`flkit.models.fedau_fmnist`, IBM/fedau@6e9cce9
  ``model/cnn_mnist.py``), plain SGD with step size 0.1 and minibatches of 16 (FedAU's defaults,
  IBM/fedau@6e9cce9 ``config.py``), minibatches walked as FedAU's per-client shuffled loader
  (`flkit.batches.BatchStream`), trained with `flkit.engine.local_train` and measured with
  `flkit.engine.evaluate`; the single-device model and the all-data model of a seed start from the same
  initialization.
* measurement: training accuracy = accuracy on the model's own training data (the whole client for the
  single device; for all data, a fixed random subset of the 60,000 training images along the curve and a
  larger one at the end); test accuracy = on a fixed random subset of the test set along the curve and on
  the whole test set at the end. The subsets are the same for every model and seed.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from flkit import datasets, engine, models, partition, plots, results
from flkit.batches import BatchStream
from flkit.papers import claims, settings
from flkit.seeding import rng, torch_gen

__all__ = ["PROFILES", "profile", "load_data", "SingleClient", "single_client", "main_classes", "client_table",
           "train_curves", "cached_curves", "final_table", "gap_table", "checks", "glue_values", "plot_overfitting",
           "SETTINGS"]

SETTINGS = {"single": "single device's data", "all": "all devices' data"}
METRICS = {"train_acc": "training accuracy", "test_acc": "test accuracy"}

PROFILES = {
    "smoke": dict(seeds=[0, 1], steps=30, checkpoints=[0, 15, 30], lr=0.1, batch_size=16, num_clients=250,
                  alpha=0.1, train_subset=200, test_subset=200, final_train_subset=300, final_test_subset=300,
                  model="fedau_fmnist"),
    "paper": dict(seeds=[0, 1, 2], steps=1000, checkpoints=[0, 25, 50, 100, 150, 200, 300, 400, 500, 600, 800, 1000],
                  lr=0.1, batch_size=16, num_clients=250, alpha=0.1, train_subset=2000, test_subset=2000,
                  final_train_subset=10000, final_test_subset=None, model="fedau_fmnist"),
}


def profile(name: str, **overrides) -> dict:
    """The page's settings under profile `name` ("smoke": seconds, for CI; "paper": the page). Overrides
    that are not None replace the profile's values; every setting is checked before any work."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    cfg = settings.with_overrides(copy.deepcopy(PROFILES[name]), overrides, f"overfitting profile {name!r}")
    settings.positive_int(cfg["num_clients"], "num_clients", 2)
    settings.positive(cfg["alpha"], "alpha")
    for k in ("final_train_subset", "final_test_subset"):
        if cfg[k] is not None:
            settings.positive_int(cfg[k], k)
    cp = cfg["checkpoints"]
    if (not isinstance(cp, (list, tuple)) or not cp or any(not settings._is_int(c) for c in cp)
            or list(cp) != sorted(set(cp)) or cp[0] != 0 or cp[-1] != cfg["steps"]):
        raise ValueError(f"overfitting profile {name!r}: checkpoints must be increasing ints from 0 to steps = "
                         f"{cfg['steps']}, got {cp!r}")
    if cfg["model"] not in ("fedau_fmnist", "logreg"):
        raise ValueError(f"overfitting profile {name!r}: model must be 'fedau_fmnist' or 'logreg', "
                         f"got {cfg['model']!r}")
    return cfg


def load_data(root=None):
    """Fashion-MNIST, normalised as in FedAU's code (the MNIST statistics, `datasets.PAPER_STATS`)."""
    data = datasets.load("fashion-mnist", root)
    mean, std = datasets.PAPER_STATS[("fedau", "fashion-mnist")]
    data.x_train, data.x_test = datasets.normalize(data.x_train, mean, std), datasets.normalize(data.x_test, mean, std)
    return data


# ================================================================================================
# the single device
# ================================================================================================
@dataclass(frozen=True)
class SingleClient:
    """One client of FedAU's split: its id, its training indices and its label counts (C,)."""
    client: int
    indices: np.ndarray
    counts: np.ndarray

    @property
    def size(self) -> int:
        return int(self.counts.sum())


def single_client(labels, seed: int, num_clients: int = 250, alpha: float = 0.1) -> SingleClient:
    """FedAU's split of `labels` with `seed` (`partition.fedau_dirichlet`) and one of its clients drawn
    uniformly at random from the stream ``rng(seed, "overfitting/client")``."""
    part = partition.fedau_dirichlet(labels, num_clients, alpha, seed=seed)
    n = int(rng(seed, "overfitting/client").integers(num_clients))
    return SingleClient(n, part.indices[n], part.counts[n])


def main_classes(counts, share: float = 0.05) -> list[int]:
    """The classes that hold at least `share` of a client's samples (largest first)."""
    c = np.asarray(counts, dtype=float)
    order = np.argsort(-c, kind="stable")
    return [int(k) for k in order if c[k] >= share * c.sum()]


def client_table(labels, cfg: dict, seeds) -> pd.DataFrame:
    """One row per seed: the drawn client, its size, the classes it holds and its main classes (>= 5% of
    its samples, with their counts)."""
    rows = []
    for s in settings.seeds(seeds):
        c = single_client(labels, s, cfg["num_clients"], cfg["alpha"])
        main = main_classes(c.counts)
        rows.append({"seed": s, "client": c.client, "samples": c.size, "classes present": int((c.counts > 0).sum()),
                     "main classes (samples)": ", ".join(f"{k} ({int(c.counts[k])})" for k in main),
                     "share of main classes (%)": round(100 * float(c.counts[main].sum()) / c.size, 1)})
    return pd.DataFrame(rows)


# ================================================================================================
# training and measurement
# ================================================================================================
def _subset(n_total: int, n: int | None, seed: int, what: str) -> torch.Tensor:
    """A fixed random subset of range(n_total) of size n (all of it for None)."""
    if n is None or n >= n_total:
        return torch.arange(n_total)
    return torch.as_tensor(np.sort(rng(seed, f"overfitting/{what}").choice(n_total, n, replace=False)))


def _build(name: str) -> torch.nn.Module:
    return models.fedau_fmnist() if name == "fedau_fmnist" else models.logreg(784, 10)


def _accuracies(net, P, data, single: list[torch.Tensor], train_idx, test_idx) -> dict:
    """Training and test accuracy (and loss) of the M = 2 x seeds models, rows (single, all) per seed."""
    M = next(iter(P.values())).shape[0]
    train_acc, train_loss = torch.empty(M), torch.empty(M)
    kw = dict(batch_size=500, vectorized=False)
    for m, idx in enumerate(single):                       # rows 0, 2, 4, ...: each on its own client's data
        loss, acc = engine.evaluate(net, engine.take(P, [2 * m]), data.x_train[idx], data.y_train[idx], **kw)
        train_loss[2 * m], train_acc[2 * m] = loss[0], acc[0]
    rows = list(range(1, M, 2))
    loss, acc = engine.evaluate(net, engine.take(P, rows), data.x_train[train_idx], data.y_train[train_idx], **kw)
    train_loss[rows], train_acc[rows] = loss, acc
    test_loss, test_acc = engine.evaluate(net, P, data.x_test[test_idx], data.y_test[test_idx], **kw)
    return dict(train_acc=train_acc, test_acc=test_acc, train_loss=train_loss, test_loss=test_loss)


def train_curves(data, cfg: dict, seeds, progress=None) -> pd.DataFrame:
    """Train, per seed, the single-device model and the all-data model side by side (one `local_train`
    call per stretch between checkpoints), and measure them at every checkpoint (subsets) and at the end
    (``final_*`` metrics: whole test set, larger training subset).

    Returns a tidy table: setting ("single" | "all"), seed, step, metric, value; plus one row per seed with
    metric "client" (the drawn client's id), "client_size", "client_main_classes" (classes with >= 5% of its
    samples) and "client_classes" (classes present) at step 0 under setting "single"."""
    seeds = settings.seeds(seeds)
    y = data.y_train.numpy()
    net = _build(cfg["model"])
    clients = [single_client(y, s, cfg["num_clients"], cfg["alpha"]) for s in seeds]
    single = [torch.as_tensor(c.indices) for c in clients]
    everyone = torch.arange(len(y))
    streams = [BatchStream([single[k], everyone], cfg["batch_size"], torch_gen(s, "batch"))
               for k, s in enumerate(seeds)]
    P = _init(net, seeds)                                   # rows: (seed 0 single, seed 0 all, seed 1 single, ...)
    s0 = seeds[0]
    sub = dict(train_idx=_subset(len(y), cfg["train_subset"], s0, "train-subset"),
               test_idx=_subset(len(data.y_test), cfg["test_subset"], s0, "test-subset"))
    rows, done = [], 0
    for step in cfg["checkpoints"]:
        if step > done:
            made = [st.next(torch.tensor([0, 1]), step - done) for st in streams]
            batches = torch.cat([b for b, _ in made])
            P, _ = engine.local_train(net, P, data.x_train, data.y_train, batches, lr=cfg["lr"])
            done = step
        acc = _accuracies(net, P, data, single, **sub)
        rows += _rows(acc, seeds, step, "")
        if progress is not None:
            progress(step)
    final = dict(train_idx=_subset(len(y), cfg["final_train_subset"], s0, "final-train-subset"),
                 test_idx=_subset(len(data.y_test), cfg["final_test_subset"], s0, "final-test-subset"))
    rows += _rows(_accuracies(net, P, data, single, **final), seeds, done, "final_")
    for s, c in zip(seeds, clients):
        for metric, v in (("client", c.client), ("client_size", c.size),
                          ("client_main_classes", len(main_classes(c.counts))),
                          ("client_classes", int((c.counts > 0).sum()))):
            rows.append(dict(setting="single", seed=s, step=0, metric=metric, value=float(v)))
    return pd.DataFrame(rows)


def cached_curves(data, cfg: dict, seeds, store: results.Store) -> pd.DataFrame:
    """`train_curves` through the results store (computed once per configuration; the store's "round"
    column holds the SGD step)."""
    config = dict(experiment="overfitting", data="fashion-mnist", normalization="fedau",
                  **(cfg | dict(seeds=settings.seeds(seeds))))
    out = results.sweep([config], lambda c: train_curves(data, cfg, seeds).rename(columns={"step": "round"}),
                        store, progress=False)
    return out[["setting", "seed", "round", "metric", "value"]].rename(columns={"round": "step"})


def _init(net, seeds) -> dict:
    """Each seed's initialization (its "init" stream), twice: the single-device and the all-data model."""
    per = [engine.stack(net, 1, torch_gen(s, "init")) for s in seeds]
    return {k: torch.cat([p[k].repeat(2, *([1] * (p[k].dim() - 1))) for p in per]) for k in per[0]}


def _rows(acc: dict, seeds, step: int, prefix: str) -> list[dict]:
    out = []
    for k, s in enumerate(seeds):
        for j, setting in enumerate(("single", "all")):
            for metric, v in acc.items():
                out.append(dict(setting=setting, seed=s, step=step, metric=prefix + metric, value=float(v[2 * k + j])))
    return out


# ================================================================================================
# the reading: tables and checks
# ================================================================================================
def final_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per setting and seed: final training and test accuracy (%) and the gap (points)."""
    f = df[df["metric"].isin(["final_train_acc", "final_test_acc"])]
    t = f.pivot_table(index=["setting", "seed"], columns="metric", values="value").reset_index()
    t = t.rename(columns={"final_train_acc": "train", "final_test_acc": "test"})
    t.columns.name = None
    t = t.sort_values(["setting", "seed"], key=lambda c: c.map({s: k for k, s in enumerate(SETTINGS)})
                      if c.name == "setting" else c, ignore_index=True)
    t[["train", "test"]] *= 100
    t["gap"] = t["train"] - t["test"]
    return t[["setting", "seed", "train", "test", "gap"]]


def gap_table(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds of the final accuracies and the gap, one row per setting."""
    t = final_table(df)
    g = t.groupby("setting")[["train", "test", "gap"]].agg(["mean", "std"])
    g.columns = [f"{a} ({'mean' if b == 'mean' else 'sd'})" for a, b in g.columns]
    g = g.loc[[s for s in SETTINGS if s in g.index]]
    g.index = [SETTINGS[s] for s in g.index]
    return g


def checks(df: pd.DataFrame, fit_threshold: float = 2.0, close_threshold: float = 3.0) -> list[claims.Check]:
    """The slide's reading as claim checks (accuracies in %):

    1. single device: the final training accuracy is ~100% (within `fit_threshold` points or 2 se);
    2. all data: training and test accuracy stay close (gap within `close_threshold` points of 0);
    3. the single device's gap exceeds the all-data gap (paired over seeds, 2 se);
    4. the single device's test accuracy is below the all-data model's (paired over seeds, 2 se)."""
    t = final_table(df)
    one, alln = (t[t["setting"] == s].sort_values("seed") for s in ("single", "all"))
    return [
        claims.agree("single device: final training accuracy (%) ~ 100", one["train"].to_numpy(), 100.0,
                     threshold=fit_threshold),
        claims.agree("all devices: final gap training - test (points) ~ 0", alln["gap"].to_numpy(), 0.0,
                     threshold=close_threshold),
        claims.compare("gap of the single device > gap with all data (points)", one["gap"].to_numpy(),
                       alln["gap"].to_numpy()),
        claims.compare("test accuracy with all data > with a single device (%)", alln["test"].to_numpy(),
                       one["test"].to_numpy()),
    ]


def glue_values(df: pd.DataFrame, cfg: dict, n_train: int = 60000, fit_level: float = 99.0) -> dict:
    """The numbers the page's prose quotes (accuracies in %, gaps in points): passes over the data, the
    first checkpoint where the single-device training accuracy (mean over seeds) reaches `fit_level`, the
    final accuracies and gaps (mean, sd, range over seeds), how far the single device's test accuracy ends
    below its best value along the curve (mean over seeds) and the verdicts of :func:`checks`."""
    t = final_table(df)
    one, alln = t[t["setting"] == "single"], t[t["setting"] == "all"]
    size = df[df["metric"] == "client_size"]["value"]
    curve = df[(df["setting"] == "single") & (df["metric"] == "train_acc")].groupby("step")["value"].mean() * 100
    fit = curve[curve >= fit_level]
    out = dict(n_seeds=int(t["seed"].nunique()), steps=int(cfg["steps"]), batch=int(cfg["batch_size"]),
               lr=float(cfg["lr"]), size_min=int(size.min()), size_max=int(size.max()),
               passes_single=float(cfg["steps"] * cfg["batch_size"] / size.mean()),
               passes_all=float(cfg["steps"] * cfg["batch_size"] / n_train),
               step_fit=int(fit.index[0]) if len(fit) else -1, fit_level=fit_level)
    for name, d in (("single", one), ("all", alln)):
        for col in ("train", "test", "gap"):
            out[f"{col}_{name}"] = float(d[col].mean())
            out[f"{col}_{name}_sd"] = float(d[col].std(ddof=1)) if len(d) > 1 else 0.0
        out[f"test_{name}_min"], out[f"test_{name}_max"] = float(d["test"].min()), float(d["test"].max())
    test = df[(df["setting"] == "single") & (df["metric"] == "test_acc")].pivot_table(index="step", columns="seed",
                                                                                      values="value") * 100
    out["test_single_drop"] = float((test.max() - test.iloc[-1]).mean())     # best along the curve - last
    for key, c in zip(("v_fit", "v_close", "v_gap", "v_test"), checks(df)):
        out[key] = c.verdict
    return out


# ================================================================================================
# figure
# ================================================================================================
def plot_overfitting(axes, df: pd.DataFrame) -> None:
    """The slide's two panels: single device (left), all devices (right); training accuracy solid, test
    accuracy dashed; mean over seeds with a band of +- one standard deviation; one legend below the panels."""
    colors = {"train_acc": "tab:blue", "test_acc": "tab:orange"}
    for k, (ax, setting) in enumerate(zip(axes, SETTINGS)):
        d = df[(df["setting"] == setting) & df["metric"].isin(list(METRICS))].rename(columns={"metric": "quantity"})
        d["value"] *= 100
        plots.curves(d, x="step", hue="quantity", ax=ax, units="seed", palette=colors, label_map=METRICS,
                     order=list(METRICS))
        for line in ax.get_lines():
            if line.get_label() == METRICS["test_acc"]:
                line.set_linestyle("--")
        ax.set(xlabel="SGD steps (minibatches of 16)", ylabel="accuracy (%)" if k == 0 else "", ylim=(0, 102),
               title=f"using {SETTINGS[setting]}")
        ax.get_legend().remove()
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    axes[0].figure.legend(handles, [f"{lab} (mean, band: ±1 sd over seeds)" for lab in labels], loc="upper center",
                          bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=9, frameon=False)
