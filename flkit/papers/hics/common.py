r"""What the pages of the HiCS-FL chapter share (document 004: Chen & Vikalo, "Accelerating Non-IID Federated
Learning via Heterogeneity-Guided Client Sampling"): the document's settings, the numbers it prints that the
pages compare with, and the pieces every page builds on.

* Settings: the alpha lists of the Fashion-MNIST, CIFAR-10 and CIFAR-100 splits (Sec. 4.1, Figs. 7-9), local
  training (appendix 6.1.1), HiCS-FL's hyperparameters (appendix 6.1.2), the input normalisation of the
  authors' code (CityChan/HiCS-FL@25f309d ``sampling.py``) and the data sets of the training comparisons.
* The document's numbers: Table 1 (rounds to the target accuracy, speed-up over random sampling, the extra
  computation and communication columns) and the two envelope curves of Fig. 6(a).
* The partitions (appendix 6.10), the label distributions and their entropies, the Savitzky-Golay smoothing of
  the curves (Sec. 4) and the clients' training task of the comparisons (:func:`make_task`).
"""
from __future__ import annotations

import numpy as np
import torch

from flkit import datasets, models, seeding
from flkit.partition import Partition, grouped_dirichlet
from flkit.tasks import EngineTask

__all__ = ["DOC", "FMNIST", "FIG9", "CIFAR10", "CIFAR100", "LOCAL", "HICS", "CIFAR_T", "NORM", "DATASETS", "MODELS",
           "METHODS", "DOC_NAMES", "DOC_TABLE1", "DOC_SPEEDUP", "DOC_TARGET", "TABLE1_SETTING", "DOC_TABLE1_CIFAR",
           "TABLE1_COSTS", "DOC_CURVES", "SG", "DROPOUT_STREAM",
           "labels_from_counts", "make_partition", "label_fractions", "true_entropy", "split_alphas", "savgol",
           "rounds_to_target", "train_loss_sample", "train_loss_idx", "batch_clients", "eval_batch",
           "make_task"]

DOC = "004"

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

# per data set: the alpha lists, the stored jobs' experiment name, the input normalisation (mean, std)
DATASETS = {
    "fashion-mnist": dict(lists=FMNIST["lists"], experiment="fmnist_training", norm=NORM),
    "cifar10": dict(lists=CIFAR10["lists"], experiment="cifar10_training",
                    norm=datasets.PAPER_STATS[("hics", "cifar10")]),
    "cifar100": dict(lists=CIFAR100["lists"], experiment="cifar100_training",     # the code has no CIFAR-100:
                     norm=datasets.PAPER_STATS[("hics", "cifar10")]),                 # its CIFAR-10 statistics
}
MODELS = {"logreg": models.logreg, "hics_fmnist_paper": models.hics_fmnist_paper, "hics_cifar10": models.hics_cifar10,
          "hics_cifar100": models.hics_cifar100}
DROPOUT_STREAM = "dropout/{t}/{client}"   # the Fashion-MNIST CNN's dropout masks: one stream per (seed, round, client)

# ------------------------------------------------------------------------------------------ the document's numbers
METHODS = ("random", "pow-d", "CS", "DivFL", "HiCS-FL")
DOC_TABLE1 = {"random": 149, "pow-d": 79, "CS": 114, "DivFL": 478, "HiCS-FL": 60}   # Table 1, FMNIST, setting (2)
DOC_SPEEDUP = {"random": 1.0, "pow-d": 1.8, "CS": 1.3, "DivFL": 0.3, "HiCS-FL": 2.5}   # as printed in Table 1
DOC_TARGET = 0.75
TABLE1_SETTING = "(2)"                                                              # Table 1's columns
SG = (13, 3)                                                                        # window, order (Sec. 4)
# Table 1's CIFAR columns (setting (2)): target accuracy, rounds to it, speed-up over random, as printed
DOC_TABLE1_CIFAR = {
    "cifar10": dict(target=0.6, rounds={"random": 898, "pow-d": 1037, "CS": 748, "DivFL": 1417, "HiCS-FL": 123},
                    speedup={"random": 1.0, "pow-d": 0.9, "CS": 1.2, "DivFL": 0.6, "HiCS-FL": 7.3}),
    "cifar100": dict(target=0.3, rounds={"random": 549, "pow-d": 770, "CS": 530, "DivFL": 1345, "HiCS-FL": 336},
                     speedup={"random": 1.0, "pow-d": 0.71, "CS": 1.03, "DivFL": 0.4, "HiCS-FL": 1.63})}
DOC_NAMES = {"random": "Random", "pow-d": "pow-d (ideal)", "CS": "CS", "DivFL": "DivFL (ideal)", "HiCS-FL": "HiCS-FL"}
# Table 1 as printed: (extra comp., extra comm.) per method
TABLE1_COSTS = {"pow-d": ("O(|theta^t|)", "O(|theta^t|)"), "CS": ("O(|theta^t|)", "-"),
                "DivFL": ("O(|theta^t|)", "O(|theta^t|)"), "HiCS-FL": ("O(C)", "-")}
# Fig. 6(a): the two envelope curves drawn in the figure (flkit.papers.hics.dissimilarity.envelope_curve)
DOC_CURVES = {"blue": dict(beta=1.0, rho=0.13, kappa=0.14), "green": dict(beta=1.5, rho=0.025, kappa=0.022)}


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


def label_fractions(part: Partition) -> np.ndarray:
    """(N, C) label distributions :math:`\\mathcal D^{(k)}`."""
    return part.counts / part.counts.sum(1, keepdims=True)


def true_entropy(D: np.ndarray) -> np.ndarray:
    """H(D^(k)) = -sum_i D_i ln D_i (nats, 0 ln 0 = 0), one per row."""
    D = np.asarray(D, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(D > 0, D * np.log(D), 0.0).sum(1)


def split_alphas(setting: str, dataset: str = "fashion-mnist") -> list[float]:
    """The alpha of each of the five client groups. FMNIST's setting (3), {0.001}, has one value: five groups
    of 10 clients, each split with alpha = 0.001 (one group of 50 at alpha = 0.001 cannot give every client the
    code's minimum of 20% of the average size; the document does not say how it split this setting)."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {sorted(DATASETS)}")
    lists = DATASETS[dataset]["lists"]
    if setting not in lists:
        raise ValueError(f"unknown setting {setting!r} of {dataset}; choose one of {sorted(lists)}")
    al = list(lists[setting])
    return al * 5 if len(al) == 1 else al


# ------------------------------------------------------------------------------------------ smoothing
def savgol(y, window: int = SG[0], order: int = SG[1]) -> np.ndarray:
    """Savitzky-Golay smoothing (Schafer 2011, the document's ref. [29]): each point replaced by the value at
    its position of the degree-``order`` least-squares polynomial through the ``window`` points centred on
    it; the first and last window//2 points take the values of the polynomial fitted to the first (last)
    window (scipy's ``mode="interp"``)."""
    y = np.asarray(y, dtype=np.float64)
    if window % 2 == 0 or not order < window <= len(y):
        raise ValueError(f"need an odd window > order and <= len(y) = {len(y)}, got window={window}, order={order}")
    h = window // 2
    V = np.vander(np.arange(-h, h + 1, dtype=np.float64), order + 1, increasing=True)
    P = np.linalg.pinv(V)                                   # (order+1, window): window values -> coefficients
    out = np.convolve(y, P[0][::-1], mode="same")
    for lo, pos in ((0, np.arange(h)), (len(y) - window, np.arange(h + 1, window))):
        coef = P @ y[lo:lo + window]
        out[lo + pos] = np.vander(pos - h, order + 1, increasing=True).astype(np.float64) @ coef
    return out


def rounds_to_target(acc, target: float, rounds=None, *, smooth: bool = True) -> float:
    """First round whose (Savitzky-Golay smoothed) test accuracy is >= ``target``; NaN when never.
    ``rounds``: the round numbers of ``acc`` (default 0, 1, ...)."""
    a = savgol(acc) if smooth else np.asarray(acc, dtype=np.float64)
    r = np.arange(len(a)) if rounds is None else np.asarray(rounds)
    hit = np.flatnonzero(a >= target)
    return float(r[hit[0]]) if hit.size else float("nan")


# ------------------------------------------------------------------------------------------ the training loss
def train_loss_sample(labels, images: int, seed: int = 0) -> np.ndarray:
    """``images`` indices of the training set with ``labels``, class-stratified: one image of each class, the
    rest by the classes' shares (largest remainders), drawn without replacement from ``rng(seed,
    "train-loss-sample")``; sorted. The ``paper`` profiles' training loss is taken over seed 0's sample in every
    run (:func:`train_loss_idx`), so methods and seeds are compared on the same images and the spread over seeds
    holds no sampling noise (flkit.papers.hics.fmnist's docstring: what such a sample reproduces)."""
    y = np.asarray(labels)
    classes, counts = np.unique(y, return_counts=True)
    if not len(classes) <= images <= len(y):
        raise ValueError(f"train_loss_images must lie in [{len(classes)}, {len(y)}] (the classes, the training "
                         f"images), got {images!r}")
    quota = (images - len(classes)) * counts / len(y)           # one image of each class, the rest by shares
    take = 1 + np.floor(quota).astype(int)
    take[np.argsort(-(quota - np.floor(quota)), kind="stable")[:images - take.sum()]] += 1
    g = seeding.rng(seed, "train-loss-sample")
    return np.sort(np.concatenate([g.choice(np.flatnonzero(y == c), size=k, replace=False)
                                   for c, k in zip(classes, take)]))


def train_loss_idx(labels, images: int | None, device="cpu") -> torch.Tensor | None:
    """The training images whose loss a job records (``make_task``'s ``train_idx``): None (all of them) when
    ``images`` is None, else :func:`train_loss_sample` (seed 0's, the same for every run) on ``device``."""
    if images is None:
        return None
    return torch.as_tensor(train_loss_sample(labels, images), device=device)


# ------------------------------------------------------------------------------------------ training
def make_task(data, part, cfg: dict, *, train_idx=None) -> EngineTask:
    """The clients of ``part`` training ``cfg['model']`` (R epochs, batch B, lr) with plain SGD, or with
    ``cfg['opt']`` and the FedProx term ``cfg['prox_mu']`` where given (CIFAR), recording the test accuracy and
    the training loss over all clients' data (or over the training images ``train_idx``, a sample of them,
    :func:`train_loss_idx`). Evaluation in chunks of :func:`eval_batch` images. A
    round's clients train together or one at a time (``cfg['vectorized']``: True, False, or "auto", the default,
    :func:`batch_clients`); the two give the same numbers up to rounding (tests/test_hics_batched.py)."""
    n = len(data.y_train) if cfg["subset"] is None else cfg["subset"]
    name = cfg.get("dataset", "fashion-mnist")
    if name == "fashion-mnist":
        mean, std = NORM
        x, x_test = (data.x_train[:n] - mean) / std, (data.x_test - mean) / std
    else:
        mean, std = DATASETS[name]["norm"]
        x, x_test = datasets.normalize(data.x_train[:n], mean, std), datasets.normalize(data.x_test, mean, std)
    # The Fashion-MNIST CNN's BatchNorm keeps per-client batch and running statistics when a round's clients train
    # together (short last batches: statistics over their own samples), and its dropout masks come from each
    # client's own stream in both paths, so the batched path gives the one-client loop's numbers
    # (tests/test_hics_batched.py); a batched step computes only the clients that still have steps (their sizes
    # differ tenfold). The CIFAR CNNs keep torch's RNG for dropout (per-client masks of their three dropout
    # layers would take ~20 MB per client and round).
    fmnist_cnn = name == "fashion-mnist" and cfg["model"] != "logreg"
    vec = cfg.get("vectorized", "auto")
    vec = batch_clients(cfg["model"], data.x_train.device) if vec == "auto" else vec
    return EngineTask(MODELS[cfg["model"]]().to(data.x_train.device), x, data.y_train[:n], part.indices,
                      x_test, data.y_test, batch_size=cfg["batch_size"], epochs=cfg["epochs"],
                      local_lr=cfg["lr"], opt=cfg.get("opt", "sgd"), prox_mu=cfg.get("prox_mu", 0.0),
                      train_metrics=True, train_idx=train_idx, vectorized=vec,
                      eval_batch_size=eval_batch(cfg["model"], data.x_train.device),
                      dropout_stream=DROPOUT_STREAM if fmnist_cnn else None, skip_done=fmnist_cnn)


def eval_batch(model: str, device) -> int:
    """Images per chunk when the test accuracy and the training loss are evaluated: 64 for the Fashion-MNIST CNN
    on a CPU, 1,024 (EngineTask's default) elsewhere; the numbers are the same up to rounding of the sums. A
    chunk of 1,024 images of this CNN, for the 4 models a job evaluates together, makes ~300 MB activations
    that the allocator maps afresh and the kernel zero-fills at every chunk: on one thread of this book's CPU
    an evaluation then spent more time in the kernel than computing, 3.9 s per model for the 10,000 test
    images against 1.5 s in chunks of 64 (results/benchmarks/hics_eval_cpu.csv)."""
    return 64 if model == "hics_fmnist_paper" and torch.device(device).type == "cpu" else 1024


def batch_clients(model: str, device) -> bool:
    """Whether a round's clients train together (the engine's grouped path) by default: always for logistic
    regression and the CIFAR CNNs; for the Fashion-MNIST CNN (BatchNorm, PReLU, dropout) on a GPU only, where one
    step of all clients replaces one step per client (~30x the loop's rate on an H100 for CNNs of this size,
    results/benchmarks/engine_h100.csv). On a CPU its batched steps cost 1.1x (5 clients) to 2x (50 clients) the
    loop's CPU time (activations of all clients at once, out of the caches: results/benchmarks/hics_batched_cpu.csv),
    so the CPU keeps the one-client loop; the numbers are the same up to rounding either way."""
    return model != "hics_fmnist_paper" or torch.device(device).type != "cpu"
