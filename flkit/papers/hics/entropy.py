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
:class:`flkit.sample.HiCS`; the alpha lists, local training, HiCS-FL's hyperparameters and the partitions
are the chapter's (:mod:`flkit.papers.hics.common`). This module holds the page's settings (:data:`PROFILES`,
:func:`profile`), one local training of every client from a common initial model (:func:`first_round`), the
document's formulas for the bias update (Eqs. 4, 6, 22) and the privacy remark (Eqs. 23-24), the figure
helpers, and the page's tables, checks and values for its prose.

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
from flkit.papers.hics.common import (CIFAR10, CIFAR100, FIG9, HICS, LOCAL, NORM, label_fractions, labels_from_counts,
                                      make_partition, true_entropy)
from flkit.partition import Partition, plot_counts
from flkit.seeding import rng
from flkit.tasks import EngineTask

__all__ = [
    "PROFILES", "profile", "empty_clients", "plot_partitions", "assignment_error", "fmnist_task", "first_round",
    "first_rounds", "matrix", "entropy_frame", "rank_table", "temperature_table", "single_class_frame", "class_share",
    "plot_fig9", "eq4_check", "sum_E", "eq6_frame", "direction_cosine", "feature_norm", "slope", "plot_eq6",
    "project_simplex", "recover_labels", "total_variation", "privacy_frame", "first_clustering", "CLOSE",
    "closeness_check", "separation_frame", "SEPARATE", "separation_checks",
    # the page
    "describe", "labels", "empty_table", "partitions", "partition_checks", "partition_values", "initial_model",
    "eq6_table", "fig9_checks", "single_class_values", "temperature_values", "clustering_round", "clustering_values",
    "separation_values", "privacy_table", "privacy_checks",
]

# ------------------------------------------------------------------------------------------ settings
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


def assignment_error(parts, labels) -> int:
    """The largest |number of images of a class - images of that class assigned to clients| over the splits
    ``parts`` of ``labels`` (0: every image is assigned exactly once, the rule of appendix 6.10)."""
    parts = list(parts)
    if not parts:
        raise ValueError("parts is empty: give at least one Partition")
    C = int(np.max(labels)) + 1
    return int(max(np.abs(p.counts.sum(0) - np.bincount(labels, minlength=C)).max() for p in parts))


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
    rows = [dict(group=m, clients=int((labels == m).sum()),
                 largest_alpha=int((alpha[labels == m] == max(alphas)).sum()),
                 alphas=", ".join(f"{a:g} x{int(c)}"
                                  for a, c in zip(*np.unique(alpha[labels == m], return_counts=True))),
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
                               f"document gives no number for 'close'): the mean over seeds <= max(2 se, {thr:.3g}) "
                               "nats")


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
        rows.append(dict(list=name, seed=seed,
                         **{f"auc_{k}": _auc(v[iu][same], v[iu][~same]) for k, v in sims.items()}))
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


# ------------------------------------------------------------------------------------------ the page
def describe(name: str, cfg: dict, data) -> str:
    """One line: the profile ``name`` and its settings ``cfg`` on ``data``."""
    return (f"profile={name}: {cfg['clients']} FMNIST clients, seeds {cfg['seeds']}, R = {cfg['epochs']}, "
            f"B = {cfg['batch_size']}, eta = {cfg['lr']}, images: {cfg['subset'] or len(data.y_train)}")


def labels(data, cfg: dict) -> dict:
    """{data set: labels}: the FMNIST training labels the page's clients hold (the first ``subset``), and the
    exact class counts of CIFAR-10 and CIFAR-100 (:func:`~flkit.papers.hics.common.labels_from_counts`)."""
    return {"FMNIST": data.y_train[: cfg["subset"] or len(data.y_train)].cpu().numpy(),
            "CIFAR-10": labels_from_counts(CIFAR10["classes"], CIFAR10["per_class"]),
            "CIFAR-100": labels_from_counts(CIFAR100["classes"], CIFAR100["per_class"])}


def empty_table(lab: dict, clients: int, seeds=range(10)) -> tuple[pd.DataFrame, dict]:
    """Clients left empty and the smallest and largest clients under the text's rule and the code's
    (:func:`empty_clients`, ``seeds``), for FMNIST's list (b) with ``clients`` clients and CIFAR-10's setting (2)
    with 50: the table for display (mean and max over seeds), and the text rule's mean and largest number of
    empty clients and the share of its splits that leave one (``empty_*``)."""
    emp = pd.concat([empty_clients(lab["FMNIST"], clients, FIG9["(b)"], seeds).assign(data="FMNIST, list (b)"),
                     empty_clients(lab["CIFAR-10"], 50, CIFAR10["lists"]["(2)"], seeds).assign(
                         data="CIFAR-10, setting (2)")])
    tab = emp.groupby(["data", "rule"])[["empty_clients", "smallest", "largest"]].agg(["mean", "max"]).round(1)
    lit = emp[emp.rule == "document text"]
    return tab, dict(empty_mean=float(lit.empty_clients.mean()), empty_max=int(lit.empty_clients.max()),
                     empty_share=100 * float((lit.empty_clients > 0).mean()))


def _alphas(al) -> str:
    return f"$\\alpha \\in$ {{{', '.join(f'{a:g}' for a in al)}}}"


def partitions(lab: dict, cfg: dict, seed: int) -> dict:
    """{data set: {panel title: Partition}} of seed ``seed``: CIFAR-10's three settings (Fig. 7, 50 clients),
    CIFAR-100's two (Fig. 8, 100 clients), and FMNIST's lists of Fig. 9 that ``cfg`` names (``clients``)."""
    return {"CIFAR-10": {f"setting {k}: {_alphas(al)}": make_partition(lab["CIFAR-10"], 50, al, seed)
                         for k, al in CIFAR10["lists"].items()},
            "CIFAR-100": {f"setting {k}: {_alphas(al)}": make_partition(lab["CIFAR-100"], 100, al, seed)
                          for k, al in CIFAR100["lists"].items()},
            "FMNIST": {f"list {k}: {_alphas(FIG9[k])}": make_partition(lab["FMNIST"], cfg["clients"], FIG9[k], seed)
                       for k in cfg["fig9"]}}


def partition_checks(splits: dict, lab: dict) -> list:
    """Appendix 6.10's rule on the splits of :func:`partitions`: every image assigned once (Figs. 7 and 8, and
    FMNIST's splits)."""
    return [claims.agree(f"{name}: every image assigned once (max |class total - assigned| over its splits)",
                         [assignment_error(splits[key].values(), lab[key])], 0.0, threshold=0.0)
            for name, key in (("Fig. 7", "CIFAR-10"), ("Fig. 8", "CIFAR-100"),
                              ("FMNIST splits (appendix 6.10 rule)", "FMNIST"))]


def _classes(part: Partition, group: int, size: int) -> float:
    """Mean number of classes a client of alpha group ``group`` (``size`` clients each) holds."""
    return float((part.counts[group * size:(group + 1) * size] > 0).sum(1).mean())


def partition_values(splits: dict, clients: int) -> dict:
    """Mean classes per client in the smallest- and largest-alpha groups: FMNIST's last list and CIFAR-10's
    setting (1)."""
    fm, c10 = list(splits["FMNIST"].values())[-1], list(splits["CIFAR-10"].values())[0]
    m = clients // 5
    return dict(fm_cls_lo=_classes(fm, 0, m), fm_cls_hi=_classes(fm, 4, m), c10_cls_lo=_classes(c10, 0, 10),
                c10_cls_hi=_classes(c10, 4, 10))


def initial_model(task: EngineTask, y: np.ndarray, seed: int) -> tuple[pd.DataFrame, list, dict]:
    r"""Eqs. 4 and 22 at the initial model of ``seed``: the autograd bias gradient against softmax - onehot on
    32 images (:func:`eq4_check`), and :math:`\sum_i\mathcal E_i` against Eq. 22's right side on a balanced set
    (100 images per class) and an imbalanced one (20 to 200 per class) of the training labels ``y``
    (:func:`sum_E`; softmax in float64, eval mode). Returns the table for display, the checks and the values."""
    net = engine.to_module(task.model, task.unflatten(task.init_params([seed])), 0)
    err4 = eq4_check(net, task.x[:32], task.y[:32])
    bal = np.concatenate([np.flatnonzero(y == c)[:100] for c in range(10)])
    imb = np.concatenate([np.flatnonzero(y == c)[: 20 * (c + 1)] for c in range(10)])
    with torch.no_grad():
        s_bal, s_imb = (torch.softmax(net.double().eval()(task.x[i].double()), 1).cpu().numpy() for i in (bal, imb))
    sE_bal, rhs_bal = sum_E(s_bal, y[bal], 10)
    sE_imb, rhs_imb = sum_E(s_imb, y[imb], 10)
    table = pd.DataFrame({"sum_i E_i": [sE_bal, sE_imb], "C/(C-1) (1 - mean s_y)": [rhs_bal, rhs_imb],
                          "difference": [sE_bal - rhs_bal, sE_imb - rhs_imb]},
                         index=["balanced, 100 per class", "imbalanced, 20 to 200 per class"])
    checks = [claims.agree("Eq. 4: autograd bias gradient = softmax - onehot (max abs, float64)", [err4], 0.0,
                           threshold=1e-12),
              claims.agree("Eq. 22 on balanced data (difference)", [sE_bal - rhs_bal], 0.0, threshold=1e-12),
              claims.agree("sum_i E_i = 1 at initialisation (balanced set)", [sE_bal], 1.0, threshold=0.05)]
    values = dict(err4=err4, sE_bal=sE_bal, spred_lo=float(s_bal.mean(0).min()), spred_hi=float(s_bal.mean(0).max()),
                  d22_bal=abs(sE_bal - rhs_bal), d22_imb=abs(sE_imb - rhs_imb))
    return table, checks, values


def eq6_table(e6: dict) -> tuple[pd.DataFrame, list, dict]:
    """Per seed (``e6``: {seed: :func:`eq6_frame`}): the slope of the measured bias updates on Eq. 6 as printed and
    on the per-step form, the mean number of SGD steps and the mean direction cosine; the three checks of Eq. 6
    (slopes and cosine within 0.1 of 1) and the means over seeds."""
    stat = pd.DataFrame([dict(seed=s, slope_printed=slope(f.eq6_printed, f.measured),
                              slope_per_step=slope(f.per_step, f.measured),
                              mean_steps=f.groupby("client").steps.first().mean(),
                              cosine=direction_cosine(f)) for s, f in e6.items()])
    checks = [claims.agree("Eq. 6 as printed, scale: slope of measured on eta R (D - 1/C)", stat.slope_printed, 1.0,
                           threshold=0.1),
              claims.agree("summed per-step form, scale: slope of measured on eta S_k (D - s_bar)", stat.slope_per_step,
                           1.0, threshold=0.1),
              claims.agree("direction: mean cosine(measured Delta b, D - s_bar) over clients", stat.cosine, 1.0,
                           threshold=0.1)]
    return stat, checks, {col: float(stat[col].mean()) for col in ("slope_printed", "slope_per_step", "mean_steps",
                                                                     "cosine")}


def fig9_checks(ef: pd.DataFrame, rk: pd.DataFrame) -> tuple[list, dict]:
    """Fig. 9 per list (``ef``: :func:`entropy_frame`, ``rk``: :func:`rank_table`): the estimates close to the true
    entropy (:func:`closeness_check`), ranked as it (Spearman's rho > 0 in every seed), and higher for the
    largest-alpha group than for the smallest; with the values of each list (``rho_``, ``mae_`` ...) and the
    scale of the closeness rule."""
    checks, values = [], {}
    for name, g in rk.groupby("list", sort=False):
        mine = ef[ef.list == name]
        close = closeness_check(name, g.mean_abs_error)
        rho = claims.correlated(f"list {name}: Spearman rho(H_hat, H) > 0, every seed",
                                [s.H for _, s in mine.groupby("seed")], [s.H_hat for _, s in mine.groupby("seed")])
        checks += [close, rho,
                   claims.compare(f"list {name}: mean H_hat of the largest-alpha group > that of the smallest-alpha "
                                  "group", g.H_hat_largest_alpha, g.H_hat_smallest_alpha)]
        tag = name.strip("()")
        values.update({f"rho_{tag}": float(g.spearman.mean()), f"rhop_{tag}": f"{rho.margin:.2g}",
                       f"close_{tag}": close.verdict, f"mae_{tag}": float(g.mean_abs_error.mean()),
                       f"hi_{tag}": float(g.H_hat_largest_alpha.mean()),
                       f"lo_{tag}": float(g.H_hat_smallest_alpha.mean())})
    values.update(lnC=math.log(10), close_tol=CLOSE * math.log(10),
                  mae_share=float(rk.mean_abs_error.mean()) / math.log(10))
    return checks, values


def single_class_values(sc: pd.DataFrame) -> dict:
    """The single-class clients (``sc``: :func:`single_class_frame`): how many, the range of their estimates, the
    share of its variance between their classes (:func:`class_share`), and the mean rank correlation of the
    estimate with the label's bias update."""
    return dict(one_n=len(sc), one_lo=float(sc.H_hat.min()), one_hi=float(sc.H_hat.max()),
                one_share=100 * class_share(sc),
                one_rho=float(np.mean([stats.spearmanr(g.delta_b_y, g.H_hat).statistic
                                       for _, g in sc.groupby(["list", "seed"])])))


def temperature_values(tt: pd.DataFrame) -> dict:
    """The temperature of :func:`temperature_table` with the least mean error, its error and rank correlation."""
    best = tt.loc[tt.mean_abs_error.idxmin()]
    return dict(bestT=float(best["T"]), bestT_mae=float(best.mean_abs_error), bestT_rho=float(best.spearman))


def clustering_round(clients: int) -> int:
    """The first round of HiCS-FL's clustering: after the warm-up of ceil(N / K) rounds."""
    return math.ceil(clients / HICS["K"]) + 1


def clustering_values(fc: pd.DataFrame, clients: int, t: int) -> dict:
    """The group HiCS-FL favours at round ``t`` (``fc``: :func:`first_clustering`): its probability, mean true
    entropy, clients of the largest-alpha group and size; the size of an alpha group and ``t``."""
    return dict(pi_top=float(fc.pi.iloc[0]), pi_top_H=float(fc.mean_H.iloc[0]), top_bal=int(fc.largest_alpha.iloc[0]),
                top_n=int(fc.clients.iloc[0]), n_bal=clients // 5, t_first=t)


def separation_values(sf: pd.DataFrame, checks: list) -> dict:
    """The mean AUCs of :func:`separation_frame`, the cosine's range, and the verdicts of
    :func:`separation_checks`."""
    v = {col: float(sf[col].mean()) for col in ("auc_cosine", "auc_entropy_term", "auc_eq9")}
    v.update(auc_cos_lo=float(sf.auc_cosine.min()), auc_cos_hi=float(sf.auc_cosine.max()), c33_cos=checks[0].verdict,
             c33_eq9=checks[1].verdict)
    return v


def privacy_table(runs: dict, parts: dict, cfg: dict, T: float) -> pd.DataFrame:
    """Per seed, the means over the clients of :func:`privacy_frame` on the privacy list's first rounds."""
    priv = cfg["privacy"]
    pf = pd.concat([privacy_frame(runs[(priv, s)], parts[(priv, s)], cfg, 10, s, T=T) for s in cfg["seeds"]])
    return pf.groupby("seed").mean(numeric_only=True).drop(columns="client")


_ESTIMATES = {"tv_eq6_printed": "Eq. 23 with Eq. 6 as printed", "tv_per_step": "Eq. 23 per SGD step",
              "tv_softmax": "softmax(Delta b / T)"}


def privacy_checks(per_seed: pd.DataFrame) -> tuple[list, dict]:
    """Appendix 6.5 on :func:`privacy_table`: the best of the three estimates (least mean TV) and the printed-Eq. 6
    estimate, each no better than the uniform guess; with every column's mean (``priv_*``) and the best estimate
    in words."""
    best = per_seed[list(_ESTIMATES)].mean().idxmin()
    checks = [claims.compare("document: the server cannot infer the label distribution (TV of the best estimate, "
                             f"{best}, not better than uniform)", per_seed[best], per_seed.tv_uniform),
              claims.compare("document: the server cannot infer the label distribution (TV of the printed-Eq. 6 "
                             "estimate not better than uniform)", per_seed.tv_eq6_printed, per_seed.tv_uniform)]
    values = {f"priv_{col}": float(per_seed[col].mean()) for col in per_seed.columns}
    values["priv_best"] = _ESTIMATES[best]
    return checks, values
