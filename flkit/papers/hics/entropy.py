r"""Page "data and entropy" of the HiCS-FL chapter (document 004: appendix 6.3-6.5, 6.10-6.11, Figs. 7-9).

The document's symbols: C classes; client k with label distribution :math:`\mathcal D^{(k)}` (fractions
:math:`D_i^{(k)}`) and :math:`n_k` samples; the output layer :math:`\mathbf q = \mathbf W\mathbf z + \mathbf b`;
the bias update :math:`\Delta\mathbf b^{(k)} = \theta_k - \theta` (local minus global model) after R local
epochs of SGD with learning rate :math:`\eta`, batch size B and l mini-batches per epoch; :math:`\mathcal E_i`
(Definition 1) the mean predicted probability of class i over the samples of the other classes; the
temperature T of Eq. 7; :math:`H` the Shannon entropy in nats.

No algorithm lives here: the estimate of Eq. 7, the distance of Eq. 9, Ward clustering and the annealed
probabilities are :func:`flkit.sample.entropy_estimate`, :func:`~flkit.sample.hics_distances`,
:func:`~flkit.sample.ward_clusters` and :func:`~flkit.sample.annealed_probs`, the sampler
:class:`flkit.sample.HiCS`. This module holds the page's settings (:data:`PROFILES`, :func:`profile`), the
partitions, one local training of every client from a common initial model (:func:`first_round`), the
document's formulas for the bias update (Eqs. 4, 6, 22) and the privacy remark (Eqs. 23-24), and the
figure helpers.

Settings (appendix 6.1): FMNIST with 50 clients in 5 groups of 10, 10% sampled per round (K = 5 = M),
two 5x5 convolutions and one linear layer (:func:`flkit.models.hics_fmnist_paper`), mini-batch SGD with
:math:`\eta` = 0.001, R = 2 local epochs, B = 64; T = 0.0025, :math:`\lambda` = 0.1, :math:`\gamma^0` = 4, 200
rounds. Inputs are normalised as in the authors' code, (x - 0.5)/0.5 (CityChan/HiCS-FL@25f309d
``sampling.py``); the document does not say. The learning-rate decay of appendix 6.1.1 ("decreased every 10
iterations") does not reach a first round read as 10 communication rounds; read as 10 SGD steps it would,
and the code never steps its scheduler: we keep :math:`\eta` constant.
"""
from __future__ import annotations

import copy
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from scipy import stats

from flkit import engine, models, results, sample
from flkit.fl import Runs
from flkit.papers import claims, settings
from flkit.partition import Partition, grouped_dirichlet, plot_counts
from flkit.seeding import rng
from flkit.tasks import EngineTask

__all__ = [
    "FMNIST", "CIFAR10", "CIFAR100", "FIG9", "LOCAL", "HICS", "CIFAR_T", "PROFILES", "profile",
    "labels_from_counts", "make_partition", "empty_clients", "plot_partitions", "fmnist_task", "first_round",
    "first_rounds",
    "matrix", "label_fractions", "true_entropy", "entropy_frame", "rank_table", "temperature_table", "single_class_frame", "class_share", "plot_fig9",
    "eq4_check", "sum_E", "eq6_frame", "direction_cosine", "feature_norm", "slope", "plot_eq6", "project_simplex", "recover_labels",
    "total_variation", "privacy_frame", "first_clustering", "CLOSE", "closeness_check", "separation_frame", "SEPARATE",
    "separation_checks", "assignment_error", "by_item", "SCORECARD", "scorecard_checks",
]

# ------------------------------------------------------------------------------------------ settings
FMNIST = dict(clients=50, classes=10, lists={                         # Sec. 4.1, settings (1)-(3)
    "(1)": (0.001, 0.002, 0.005, 0.01, 0.5), "(2)": (0.001, 0.002, 0.005, 0.01, 0.2), "(3)": (0.001,)})
FIG9 = {"(a)": (0.01, 0.02, 0.05, 0.1, 0.2), "(b)": (0.001, 0.002, 0.005, 0.01, 0.5)}   # Fig. 9 caption
CIFAR10 = dict(clients=50, classes=10, per_class=5000, lists={        # Fig. 7, Sec. 4.1
    "(1)": (0.001, 0.01, 0.1, 0.5, 1.0), "(2)": (0.001, 0.002, 0.005, 0.01, 0.5),
    "(3)": (0.001, 0.002, 0.005, 0.01, 0.1)})
CIFAR100 = dict(clients=100, classes=100, per_class=500, lists={      # Fig. 8, Sec. 4.1
    "(1)": (0.001, 0.01, 0.1, 0.5, 1.0), "(2)": (0.001, 0.005, 0.01, 0.1, 1.0)})
LOCAL = dict(epochs=2, batch_size=64, lr=0.001)                       # appendix 6.1.1
HICS = dict(T=0.0025, lam=0.1, gamma0=4.0, K=5, M=5, rounds=200)      # appendix 6.1.2, Sec. 4.1
CIFAR_T = 0.0015        # appendix 6.1.2: the temperature of the CIFAR experiments (Figs. 11-12 use CIFAR-10)
NORM = (0.5, 0.5)                                                     # the code's FMNIST normalisation

_BASE = dict(fig9=["(a)", "(b)"], privacy="(b)", **LOCAL)
PROFILES = {
    # seconds: 10 clients on the first 4,000 training images, one local epoch
    "smoke": dict(_BASE, seeds=[0], clients=10, subset=4000, epochs=1),
    # the document's setting: 50 clients on all 60,000 images, R = 2, B = 64, eta = 0.001; two seeds
    "paper": dict(_BASE, seeds=[0, 1], clients=50, subset=None),
    # the same with one seed (half the time; the seed-based checks become "not testable at this scale")
    "reduced": dict(_BASE, seeds=[0], clients=50, subset=None),
}


def profile(name: str, **overrides) -> dict:
    """The page's settings ("smoke": seconds; "paper": the document's FMNIST setting). Overrides that are
    not None replace the profile's, checked before any work."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    cfg = settings.with_overrides(copy.deepcopy(PROFILES[name]), overrides, f"hics entropy profile {name!r}")
    if cfg["clients"] % 5:
        raise ValueError(f"clients must be a multiple of 5 (five alpha groups), got {cfg['clients']!r}")
    bad = [k for k in cfg["fig9"] if k not in FIG9]
    if bad or not cfg["fig9"]:
        raise ValueError(f"fig9 must list panels from {sorted(FIG9)}, got {cfg['fig9']!r}")
    if cfg["privacy"] not in FIG9:
        raise ValueError(f"privacy must name a Fig. 9 list {sorted(FIG9)}, got {cfg['privacy']!r}")
    if cfg["subset"] is not None and cfg["subset"] < 100 * cfg["clients"]:
        raise ValueError(f"subset must be None (all images) or >= 100 x clients = {100 * cfg['clients']}, "
                         f"got {cfg['subset']!r}")
    return cfg


# ---------------------------------------------------------------------------------------- partitions
def labels_from_counts(classes: int, per_class: int) -> np.ndarray:
    """Labels of a training set with ``per_class`` images of each class (CIFAR-10: 10 x 5000; CIFAR-100:
    100 x 500). The grouped Dirichlet split depends on the labels only through these counts (and each
    class's storage order, which changes which images go where, not how many), so this gives the exact
    clients x classes counts of the real data sets without loading them."""
    return np.repeat(np.arange(classes), per_class)


def make_partition(labels, clients: int, alphas, seed: int, *, literal: bool = False) -> Partition:
    """The document's multi-alpha split (appendix 6.10): the training set cut into len(alphas) equal parts,
    part g split over its clients by per-class Dirichlet(alpha_g) proportions. ``literal=False``: with
    the code's balancing and 20% minimum size (:func:`flkit.partition.grouped_dirichlet`'s defaults, as
    CityChan/HiCS-FL@25f309d ``sampling.py``, ``partition_data_various_alpha``); ``literal=True``: the
    text's rule alone (one draw, no cap, no minimum)."""
    extra = dict(balance=False, min_frac=0.0) if literal else {}
    return grouped_dirichlet(labels, clients, alphas, seed=seed, **extra)


def empty_clients(labels, clients: int, alphas, seeds) -> pd.DataFrame:
    """Per seed: clients left without any sample, and the smallest client, under the text's rule and
    under the code's."""
    rows = []
    for s in seeds:
        for rule, literal in (("document text", True), ("code (balanced, 20% minimum)", False)):
            p = make_partition(labels, clients, alphas, s, literal=literal)
            rows.append(dict(seed=s, rule=rule, empty_clients=int((p.sizes == 0).sum()),
                             smallest=int(p.sizes.min()), largest=int(p.sizes.max())))
    return pd.DataFrame(rows)


def plot_partitions(parts: dict, title: str, *, panel_height: float = 2.4):
    """Clients x classes heat maps (Figs. 7-8), one panel per setting, stacked, each with its colour bar."""
    fig, axes = plt.subplots(len(parts), 1, figsize=(7.5, panel_height * len(parts)), squeeze=False)
    for ax, (name, part) in zip(axes[:, 0], parts.items()):
        plot_counts(part, ax=ax, annotate=False)
        ax.set_title(name, fontsize=10)
        ax.tick_params(labelsize=9)
        ax.tick_params(axis="y", labelrotation=0)
        ax.set_xlabel("client", fontsize=10)
        ax.set_ylabel("class", fontsize=10)
        ax.collections[0].colorbar.ax.tick_params(labelsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------- one local training
def fmnist_task(data, part: Partition, cfg: dict) -> EngineTask:
    """The FMNIST clients of ``part`` (indices into the first ``cfg['subset']`` training images) training
    the document's network with plain mini-batch SGD (``cfg``: epochs, batch_size, lr), one epoch being a
    pass over the client's data in a fresh random order with a short last batch (as a shuffling
    DataLoader)."""
    n = len(data.y_train) if cfg["subset"] is None else cfg["subset"]
    mean, std = NORM
    x = (data.x_train[:n] - mean) / std
    return EngineTask(models.hics_fmnist_paper(), x, data.y_train[:n], part.indices, (data.x_test - mean) / std,
                      data.y_test, batch_size=cfg["batch_size"], epochs=cfg["epochs"], local_lr=cfg["lr"],
                      vectorized=False)


def first_round(task: EngineTask, seed: int, *, mean_pred: bool = True) -> pd.DataFrame:
    r"""Every client's first local training from the run's initial model :math:`\theta^0` (the "init"
    stream of ``seed``; dropout from torch's global generator, seeded from ``seed``). Tidy rows (round 0):
    ``delta_b`` = :math:`\Delta b_i^{(k)}` in the document's sign, and with ``mean_pred`` ``mean_pred`` =
    :math:`\bar s_i^{(k)}`, the mean softmax output of :math:`\theta^0` over client k's data, in training
    mode (batch statistics, dropout) on batches of B in storage order."""
    N = task.num_clients
    w0 = task.init_params([seed])
    torch.manual_seed(int(rng(seed, "dropout").integers(2**31)))
    runs = Runs([seed], torch.tensor([float(task.local_lr)], dtype=task.dtype), ["first round"])
    pairs, delta, _ = task.client_updates(w0, torch.ones(1, N, dtype=torch.bool), 0, runs)
    _, bias = sample.output_layer(task)
    db = (-delta[:, bias]).double().cpu().numpy()[np.argsort(pairs[:, 1].numpy())]
    frames = [_tidy("delta_b", db)]
    if mean_pred:
        net = engine.to_module(task.model, task.unflatten(w0), 0).train()
        s_bar = np.zeros_like(db)
        with torch.no_grad():
            for k in range(N):
                idx = torch.as_tensor(np.asarray(task.clients[k]), dtype=torch.long, device=task.x.device)
                probs = [F.softmax(net(task.x[idx[i:i + task.batch_size]]), 1)
                         for i in range(0, len(idx), task.batch_size)]
                s_bar[k] = torch.cat(probs).double().mean(0).cpu().numpy()
        frames.append(_tidy("mean_pred", s_bar))
    return pd.concat(frames, ignore_index=True)


def first_rounds(cfg: dict, data, store) -> tuple[dict, dict, float]:
    """The page's :func:`first_round` runs, one per (Fig. 9 list, seed), cached in ``store``
    (:func:`flkit.results.sweep`). Returns ({(list, seed): table}, {(list, seed): partition}, seconds the
    runs took when they were computed, from the store's manifests); the mean predictions are computed for
    the privacy list only."""
    n = len(data.y_train) if cfg["subset"] is None else cfg["subset"]
    labels = data.y_train[:n].cpu().numpy()
    keys = [(name, s) for name in cfg["fig9"] for s in cfg["seeds"]]
    parts = {(name, s): make_partition(labels, cfg["clients"], FIG9[name], s) for name, s in keys}
    configs = [dict(experiment="first_round", list=name, alphas=list(FIG9[name]), seed=s, clients=cfg["clients"],
                    subset=cfg["subset"], epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=cfg["lr"],
                    model="hics_fmnist_paper", mean_pred=name == cfg["privacy"]) for name, s in keys]

    def run(c):
        task = fmnist_task(data, parts[(c["list"], c["seed"])], cfg)
        return first_round(task, c["seed"], mean_pred=c["mean_pred"])

    table = results.sweep(configs, run, store, progress=False)
    out = {(name, s): table[(table["list"] == name) & (table["seed"] == s)] for name, s in keys}
    return out, parts, float(sum(store.manifest(c)["wall_time_s"] for c in configs))


def _tidy(metric: str, a: np.ndarray) -> pd.DataFrame:
    N, C = a.shape
    return pd.DataFrame({"round": 0, "metric": metric, "client": np.repeat(np.arange(N), C),
                         "class": np.tile(np.arange(C), N), "value": a.reshape(-1)})


def matrix(table: pd.DataFrame, metric: str) -> np.ndarray:
    """(N, C) array of one metric of a :func:`first_round` table."""
    t = table[table["metric"] == metric]
    return t.pivot(index="client", columns="class", values="value").sort_index().to_numpy()


# --------------------------------------------------------------------------------- entropy (Fig. 9)
def label_fractions(part: Partition) -> np.ndarray:
    """(N, C) label distributions :math:`\\mathcal D^{(k)}`."""
    return part.counts / part.counts.sum(1, keepdims=True)


def true_entropy(D: np.ndarray) -> np.ndarray:
    """H(D^(k)) = -sum_i D_i ln D_i (nats, 0 ln 0 = 0), one per row."""
    D = np.asarray(D, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(D > 0, D * np.log(D), 0.0).sum(1)


def entropy_frame(runs: dict, parts: dict, alphas: dict, T: float) -> pd.DataFrame:
    """One row per (list, seed, client): the group's alpha, the true entropy and Eq. 7's estimate
    from the first-round bias update. ``runs[(list, seed)]`` is a :func:`first_round` table,
    ``parts[(list, seed)]`` its partition."""
    rows = []
    for (name, seed), table in runs.items():
        part = parts[(name, seed)]
        N = part.num_clients
        rows.append(pd.DataFrame({"list": name, "seed": seed, "client": np.arange(N),
                                  "alpha": np.repeat(alphas[name], N // len(alphas[name])),
                                  "H": true_entropy(label_fractions(part)),
                                  "H_hat": sample.entropy_estimate(matrix(table, "delta_b"), T)}))
    return pd.concat(rows, ignore_index=True)


def rank_table(ef: pd.DataFrame) -> pd.DataFrame:
    """Per (list, seed): Spearman's rank correlation of H_hat with H, the mean |H_hat - H| (nats), and the
    mean H_hat of the most and least concentrated alpha groups."""
    rows = []
    for (name, seed), g in ef.groupby(["list", "seed"], sort=False):
        lo, hi = g["alpha"].min(), g["alpha"].max()
        rows.append(dict(list=name, seed=seed, spearman=float(stats.spearmanr(g["H"], g["H_hat"]).statistic),
                         mean_abs_error=float((g["H_hat"] - g["H"]).abs().mean()),
                         H_hat_smallest_alpha=float(g.loc[g["alpha"] == lo, "H_hat"].mean()),
                         H_hat_largest_alpha=float(g.loc[g["alpha"] == hi, "H_hat"].mean())))
    return pd.DataFrame(rows)


def temperature_table(runs: dict, parts: dict, alphas: dict, factors) -> pd.DataFrame:
    """Spearman's rho and the mean |H_hat - H| (means over lists and seeds) when Eq. 7 uses T = f x T_doc
    for each factor f, on the same bias updates (no retraining)."""
    rows = []
    for f in factors:
        rk = rank_table(entropy_frame(runs, parts, alphas, f * HICS["T"]))
        rows.append(dict(factor=f, T=f * HICS["T"], spearman=float(rk["spearman"].mean()),
                         mean_abs_error=float(rk["mean_abs_error"].mean())))
    return pd.DataFrame(rows)


def single_class_frame(runs: dict, parts: dict, T: float) -> pd.DataFrame:
    """The clients that hold a single class (H < 0.05 nats): list, seed, client, their class y, the label's
    bias update Delta b_y and the estimate H_hat."""
    rows = []
    for (name, seed), table in runs.items():
        D = label_fractions(parts[(name, seed)])
        db = matrix(table, "delta_b")
        one = np.flatnonzero(true_entropy(D) < 0.05)
        y = D[one].argmax(1)
        rows.append(pd.DataFrame({"list": name, "seed": seed, "client": one, "label": y, "delta_b_y": db[one, y],
                                  "H_hat": sample.entropy_estimate(db[one], T)}))
    return pd.concat(rows, ignore_index=True)


def class_share(sc: pd.DataFrame) -> float:
    """Share of the variance of H_hat among single-class clients that lies between their classes
    (correlation ratio eta^2 within each (list, seed), averaged)."""
    out = []
    for _, g in sc.groupby(["list", "seed"]):
        total = ((g["H_hat"] - g["H_hat"].mean()) ** 2).sum()
        within = sum(((h - h.mean()) ** 2).sum() for _, h in g.groupby("label")["H_hat"])
        if total > 0:
            out.append(1 - within / total)
    return float(np.mean(out))


def plot_fig9(ef: pd.DataFrame, alphas: dict, C: int, title: str = ""):
    """Fig. 9: estimated against true entropy, one panel per alpha list, clients coloured by alpha."""
    names = list(dict.fromkeys(ef["list"]))
    fig, axes = plt.subplots(1, len(names), figsize=(3.5 * len(names), 3.8), squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, name in zip(axes[0], names):
        g = ef[ef["list"] == name]
        for j, a in enumerate(alphas[name]):
            h = g[g["alpha"] == a]
            ax.scatter(h["H"], h["H_hat"], s=14, color=cmap(j / max(1, len(alphas[name]) - 1)),
                       label=rf"$\alpha$ = {a:g}", alpha=0.8)
        ax.plot([0, math.log(C)], [0, math.log(C)], "k--", lw=0.8, label=r"$\hat H = H$")
        ax.set(xlabel=r"true entropy $H(\mathcal{D})$ (nats)", ylabel=r"estimated entropy $\hat H$ (nats)",
               title=rf"{name}: $\alpha \in$ {{{', '.join(f'{a:g}' for a in alphas[name])}}}")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


# --------------------------------------------------------------------------------- Eqs. 4, 6 and 22
def eq4_check(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Largest |autograd d CE / d b - (softmax(q) - onehot(y))| over the samples and classes of (x, y),
    one backward pass per sample, in float64 and eval mode (Eq. 4 / Eq. 20 per sample)."""
    m = copy.deepcopy(net).double().eval()
    bias = [mod for mod in m.modules() if isinstance(mod, torch.nn.Linear)][-1].bias
    err = 0.0
    for i in range(len(y)):
        m.zero_grad()
        logits = m(x[i:i + 1].double())
        F.cross_entropy(logits, y[i:i + 1]).backward()
        want = F.softmax(logits.detach(), 1)[0] - F.one_hot(y[i], logits.shape[1]).double()
        err = max(err, float((bias.grad - want).abs().max()))
    return err


def sum_E(s: np.ndarray, y: np.ndarray, C: int) -> tuple[float, float]:
    r"""(:math:`\sum_i \mathcal E_i`, :math:`\frac{C}{C-1}(1 - \overline{s_y})`) for predicted
    probabilities s (n, C) and labels y (n,): :math:`\mathcal E_i` = mean of :math:`s_i` over the samples
    whose label is not i (Definition 1), :math:`\overline{s_y}` the mean probability of the true label.
    Eq. 22 says the two are equal; they are when every class has the same number of samples."""
    E = np.array([s[y != i, i].mean() for i in range(C)])
    return float(E.sum()), float(C / (C - 1) * (1 - s[np.arange(len(y)), y].mean()))


def eq6_frame(table: pd.DataFrame, part: Partition, cfg: dict, C: int) -> pd.DataFrame:
    r"""One row per (client, class): the measured :math:`\Delta b_i`, Eq. 6 as printed at initialisation
    (:math:`\mathcal E_i = 1/C`, so :math:`\eta R(D_i - 1/C)`), and the per-step form
    :math:`\eta S_k (D_i - \bar s_i)`, :math:`S_k = R\lceil n_k/B\rceil` SGD steps, :math:`\bar s` the initial
    model's mean prediction on the client's data (each step adds :math:`-\eta` times a batch mean of
    :math:`s - \mathrm{onehot}`, Eq. 4)."""
    D = label_fractions(part)
    steps = cfg["epochs"] * np.ceil(part.sizes / cfg["batch_size"])
    N = D.shape[0]
    return pd.DataFrame({"client": np.repeat(np.arange(N), C), "class": np.tile(np.arange(C), N),
                         "measured": matrix(table, "delta_b").reshape(-1),
                         "eq6_printed": (cfg["lr"] * cfg["epochs"] * (D - 1 / C)).reshape(-1),
                         "per_step": (cfg["lr"] * steps[:, None] * (D - matrix(table, "mean_pred"))).reshape(-1),
                         "steps": np.repeat(steps, C)})


def direction_cosine(ef6: pd.DataFrame) -> float:
    r"""Mean over clients of the cosine between the measured bias update and the per-step prediction
    (the direction of :math:`\mathcal D^{(k)} - \bar s^{(k)}`); clients with a zero vector are skipped."""
    cos = []
    for _, g in ef6.groupby("client"):
        a, b = g["measured"].to_numpy(), g["per_step"].to_numpy()
        den = np.linalg.norm(a) * np.linalg.norm(b)
        if den > 0:
            cos.append(float(a @ b / den))
    return float(np.mean(cos))


def feature_norm(task: EngineTask, seed: int, n: int = 1024) -> float:
    """Mean squared norm of the output layer's input z over the first n training images, at the initial
    model of ``seed`` in training mode: a step on W moves a sample's logits about ||z||^2 times as far as
    the same step on b."""
    net = engine.to_module(task.model, task.unflatten(task.init_params([seed])), 0).train()
    torch.manual_seed(int(rng(seed, "dropout").integers(2**31)))
    with torch.no_grad():
        z = torch.cat([net[:-1](task.x[i:i + task.batch_size]) for i in range(0, n, task.batch_size)])
    return float((z.double() ** 2).sum(1).mean())


def slope(x, y) -> float:
    """Least-squares slope through the origin of y on x."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    return float((x * y).sum() / (x * x).sum())


def plot_eq6(ef6: pd.DataFrame, title: str = ""):
    """Measured bias updates against the two predictions (all clients and classes)."""
    fig, axes = plt.subplots(1, 2, figsize=(7.0, 3.4), layout="constrained")
    for ax, col, name in zip(axes, ("eq6_printed", "per_step"),
                             (r"Eq. 6 as printed: $\eta R(D_i - 1/C)$", r"per step: $\eta S_k(D_i - \bar s_i)$")):
        ax.scatter(ef6[col], ef6["measured"], s=6, alpha=0.5)
        lim = [min(ef6[col].min(), ef6["measured"].min()), max(ef6[col].max(), ef6["measured"].max())]
        ax.plot(lim, lim, "k--", lw=0.8, label="measured = predicted")
        ax.set(xlabel="predicted bias update", ylabel=r"measured $\Delta b_i$")
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


# ------------------------------------------------------------------------- privacy (appendix 6.5)
def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row of v onto the probability simplex (sort-based, exact)."""
    v = np.atleast_2d(np.asarray(v, dtype=np.float64))
    u = -np.sort(-v, axis=1)
    css = np.cumsum(u, axis=1) - 1.0
    k = np.arange(1, v.shape[1] + 1)
    rho = (u - css / k > 0).sum(axis=1)
    theta = css[np.arange(len(v)), rho - 1] / rho
    return np.maximum(v - theta[:, None], 0.0)


def recover_labels(delta_b: np.ndarray, lr: float, steps, C: int) -> np.ndarray:
    r"""The server's estimate of the label distributions from first-round bias updates: Eq. 23 at
    initialisation (:math:`\mathcal E_i = 1/C`, :math:`\sum_c\mathcal E_c = 1`) solved for :math:`D_i`,
    :math:`\hat D_i = 1/C + \Delta b_i/(\eta S)`, projected onto the simplex. ``steps`` S (scalar or (N,)):
    R for Eq. 6 as printed, :math:`R\lceil n_k/B\rceil` per SGD step (the server knows :math:`n_k`, R and B
    in FedAvg)."""
    S = np.broadcast_to(np.asarray(steps, dtype=np.float64), (delta_b.shape[0],))
    return project_simplex(1.0 / C + delta_b / (lr * S[:, None]))


def total_variation(P: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """TV(P_k, Q_k) = (1/2) sum_i |P_ki - Q_ki| per row."""
    return 0.5 * np.abs(np.asarray(P) - np.asarray(Q)).sum(1)


def privacy_frame(table: pd.DataFrame, part: Partition, cfg: dict, C: int, seed: int, *, T: float) -> pd.DataFrame:
    """Per client: TV between the true label distribution and (i) the uniform guess, (ii) the estimate
    with Eq. 6 as printed, (iii) the per-step estimate, (iv) softmax(Delta b / T), the distribution whose
    entropy is Eq. 7; and whether the best of (ii)-(iv) (smallest mean TV over the clients) has its most
    likely class among the client's most frequent classes."""
    D = label_fractions(part)
    db = matrix(table, "delta_b")
    steps = cfg["epochs"] * np.ceil(part.sizes / cfg["batch_size"])
    z = db / T - (db / T).max(1, keepdims=True)
    est = {"eq6_printed": recover_labels(db, cfg["lr"], cfg["epochs"], C),
           "per_step": recover_labels(db, cfg["lr"], steps, C),
           "softmax": np.exp(z) / np.exp(z).sum(1, keepdims=True)}
    tv = {k: total_variation(v, D) for k, v in est.items()}
    best = min(tv, key=lambda k: tv[k].mean())
    top = D == D.max(1, keepdims=True)
    return pd.DataFrame({"seed": seed, "client": np.arange(D.shape[0]),
                         "tv_uniform": total_variation(np.full_like(D, 1 / C), D),
                         **{f"tv_{k}": v for k, v in tv.items()},
                         "top_class_found": top[np.arange(len(D)), est[best].argmax(1)]})


# ------------------------------------------------------------------ HiCS-FL's first clustering
def first_clustering(table: pd.DataFrame, part: Partition, alphas, *, t: int, hics: dict = HICS) -> pd.DataFrame:
    r"""What HiCS-FL (paper variant) makes of these first-round updates at round t: :math:`\hat H` (Eq. 7),
    the distance of Eq. 9 on the bias updates, Ward clustering into M groups, :math:`\pi^t` (Eq. 10). One
    row per group: its size, its clients' alphas, mean true and estimated entropy, :math:`\pi^t`."""
    db = matrix(table, "delta_b")
    H_hat = sample.entropy_estimate(db, hics["T"])
    labels = sample.ward_clusters(sample.hics_distances(db, H_hat, hics["lam"]), min(hics["M"], len(db)))
    H_bar = np.array([H_hat[labels == m].mean() for m in range(labels.max() + 1)])
    pi = sample.annealed_probs(H_bar, hics["gamma0"], t, hics["rounds"])
    alpha = np.repeat(alphas, len(db) // len(alphas))
    H = true_entropy(label_fractions(part))
    rows = [dict(group=m, clients=int((labels == m).sum()), largest_alpha=int((alpha[labels == m] == max(alphas)).sum()),
                 alphas=", ".join(f"{a:g} x{int(c)}" for a, c in zip(*np.unique(alpha[labels == m], return_counts=True))),
                 mean_H=float(H[labels == m].mean()), H_bar=float(H_bar[m]), pi=float(pi[m]))
            for m in range(len(H_bar))]
    return pd.DataFrame(rows).sort_values("H_bar", ascending=False, ignore_index=True)


# ------------------------------------------------------------- closeness (appendix 6.11) and Sec. 3.3
CLOSE = 0.1    # "close to the true entropy": mean |H_hat - H| within 10 % of the entropy range ln C (our reading)


def closeness_check(name: str, mean_abs_error, C: int = 10, tolerance: float = CLOSE):
    r"""Appendix 6.11: "the entropy estimated by the proposed method is close to the true entropy" (Figs. 9-10).
    The document gives no number; we read "close" as a mean absolute error :math:`|\hat H - H|` (per seed,
    over the clients) within ``tolerance`` of the entropy range :math:`[0, \ln C]`, one-sided
    (:func:`flkit.papers.claims.agree` with ``side="upper"``: an error below the tolerance agrees however small)."""
    import dataclasses
    thr = tolerance * math.log(C)
    c = claims.agree(f"closeness, list {name}: mean |H_hat - H| within {tolerance:.0%} of ln C ({thr:.2f} nats)",
                     np.asarray(mean_abs_error, dtype=float), 0.0, threshold=thr, side="upper")
    # the reference shown is our tolerance, not a number of the document (it gives none)
    return dataclasses.replace(c, reference=thr, rule=f"tested against our tolerance, {tolerance:.0%} of ln C (the "
                               f"document gives no number for 'close'): the mean over seeds <= max(2 se, {thr:.3g}) nats")


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(a random value of ``pos`` > a random value of ``neg``), ties counted 1/2 (the Mann-Whitney AUC)."""
    d = pos[:, None] - neg[None, :]
    return float(((d > 0) + 0.5 * (d == 0)).mean())


def separation_frame(runs: dict, parts: dict, alphas: dict, T: float, lam: float = HICS["lam"]) -> pd.DataFrame:
    r"""Sec. 3.3: "cosine similarity cannot help distinguish between clients with balanced and those with
    imbalanced datasets". Per (list, seed), the clients of the largest-:math:`\alpha` group (balanced) and of
    the smallest (imbalanced), their first-round output-bias updates (the vectors of Eq. 9's cosine term) and
    :math:`\hat H` (Eq. 7 at ``T``). For each similarity, the AUC of telling same-type pairs (balanced-balanced,
    imbalanced-imbalanced) from mixed pairs by it: 0.5 = no help, 1 = always more similar within a type.
    Similarities: the cosine, :math:`-|\hat H_u - \hat H_k|` (Eq. 9's entropy term), and minus Eq. 9's distance
    with :math:`\lambda` = ``lam`` (:func:`flkit.sample.hics_distances`)."""
    rows = []
    for (name, seed), table in runs.items():
        db = matrix(table, "delta_b")
        N, al = len(db), np.asarray(alphas[name])
        alpha = np.repeat(al, N // len(al))
        keep = np.flatnonzero((alpha == al.max()) | (alpha == al.min()))
        u, bal = db[keep], alpha[keep] == al.max()
        H_hat = sample.entropy_estimate(u, T)
        nrm = np.linalg.norm(u, axis=1)
        cos = (u @ u.T) / np.outer(nrm, nrm)
        sims = {"cosine": cos, "entropy_term": -np.abs(H_hat[:, None] - H_hat[None, :]),
                "eq9": -sample.hics_distances(u, H_hat, lam)}
        iu = np.triu_indices(len(keep), 1)
        same = (bal[:, None] == bal[None, :])[iu]
        rows.append(dict(list=name, seed=seed, **{f"auc_{k}": _auc(v[iu][same], v[iu][~same]) for k, v in sims.items()}))
    return pd.DataFrame(rows)


SEPARATE = 0.1   # "cannot help distinguish": the cosine's AUC within 0.1 of a coin flip (0.5) (our tolerance)


def separation_checks(sf: pd.DataFrame, tolerance: float = SEPARATE) -> list:
    """Sec. 3.3 on :func:`separation_frame` (one value per list and seed): the cosine's AUC within ``tolerance``
    of 0.5 (:func:`flkit.papers.claims.close`: confirmed when it is, contradicted when the cosine does separate
    the two types beyond it), and Eq. 9's distance separating them better than the cosine
    (:func:`flkit.papers.claims.compare`)."""
    return [claims.close(f"Sec. 3.3: cosine similarity of the bias updates cannot tell balanced from imbalanced "
                         f"clients (AUC within {tolerance:g} of 0.5)", sf["auc_cosine"], np.full(len(sf), 0.5),
                         threshold=tolerance),
            claims.compare("Sec. 3.3: Eq. 9's distance tells balanced from imbalanced clients better than the cosine "
                           "(AUC, Eq. 9 minus cosine)", sf["auc_eq9"], sf["auc_cosine"])]


# ------------------------------------------------------------------------------------------ the scorecard
def assignment_error(parts, labels) -> int:
    """The largest |number of images of a class - images of that class assigned to clients| over the splits
    ``parts`` of ``labels`` (0: every image is assigned exactly once, the rule of appendix 6.10)."""
    parts = list(parts)
    if not parts:
        raise ValueError("parts is empty: give at least one Partition")
    C = int(np.max(labels)) + 1
    return int(max(np.abs(p.counts.sum(0) - np.bincount(labels, minlength=C)).max() for p in parts))


def by_item(checks, rules) -> dict:
    """File each check under the document item its ``what`` names, for :func:`flkit.papers.scorecard.record`:
    ``rules`` lists (prefix of ``what``, item id), the first matching prefix wins. A check that no rule names
    raises ValueError, so a check the page adds cannot be left out of the scorecard."""
    out: dict = {}
    for c in checks:
        item = next((it for prefix, it in rules if c.what.startswith(prefix)), None)
        if item is None:
            raise ValueError(f"check {c.what!r} names no item of document 004; prefixes known: {[p for p, _ in rules]}")
        out.setdefault(item, []).append(c)
    return out


PRIVACY = "Claim (appendix 6.5): the server cannot infer the clients' label distributions from the bias updates"
PARTITION = ("Claim (appendix 6.10): client k gets X_i^(k) N_i / sum_j X_i^(j) of the N_i samples of label i, "
             "each sample once")
CLOSE_ITEM = "Claim (appendix 6.11): the estimated entropy is close to the true entropy (Figs. 9-10)"
COSINE_ITEM = "Claim (Sec. 3.3): cosine similarity cannot distinguish balanced from imbalanced clients"
SCORECARD = [("Fig. 7:", "Fig. 7"), ("Fig. 8:", "Fig. 8"), ("FMNIST splits", PARTITION), ("Eq. 4:", "Eq. (4)"),
             ("Eq. 22", "Eq. (22)"), ("sum_i E_i = 1 at initialisation", "Claim (Sec. 3.2.1): at initialisation E_i = 1/C"),
             ("Eq. 6", "Eq. (6)"), ("summed per-step form", "Eq. (6)"), ("direction:", "Eq. (6)"),
             ("closeness, list (a):", "Fig. 9(a)"), ("closeness, list (b):", "Fig. 9(b)"),
             ("list (a):", "Fig. 9(a)"), ("list (b):", "Fig. 9(b)"), ("document: the server cannot infer", PRIVACY),
             ("Sec. 3.3:", COSINE_ITEM)]


def scorecard_checks(checks) -> dict:
    """The entropy page's checks by document item (:data:`SCORECARD`): the partitions of Figs. 7-8 and of
    appendix 6.10's rule, Eqs. 4, 6 and 22, E_i = 1/C at initialisation, Fig. 9's panels and appendix 6.5's
    privacy claim, and Sec. 3.3's cosine claim. The "summed per-step form" of Eq. 6 is our reading of Eq. 5
    (steps summed); it is filed with Eq. (6), whose scale it tests. The closeness checks of Fig. 9 are filed
    under their panel and under appendix 6.11's claim of closeness (:data:`CLOSE_ITEM`): a figure whose
    estimates rank the clients but sit far from the diagonal is not reproduced by the ranking alone."""
    out = by_item(checks, SCORECARD)
    close = [c for c in checks if c.what.startswith("closeness, ")]
    if close:
        out[CLOSE_ITEM] = close
    return out
