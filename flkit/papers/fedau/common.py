"""What the FedAU chapter's pages share: the participation patterns of the document's experiments, the
clients of its CIFAR-10 setting (exact: the split depends on the data only through the class counts), the
formulas of the cutoff K (document 000, proof of Theorem 3 and Corollary 4), the data sets of its experiments
with the authors' normalizations, the data split and participation of a run (the table's and the cutoff
study's, :mod:`flkit.papers.fedau.table`), and the document's table of results."""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from flkit import datasets, participation
from flkit.partition import Partition, fedau_dirichlet, fedau_participation_probs
from flkit.seeding import rng

__all__ = ["PATTERNS", "CIFAR10_COUNTS", "k_label", "cifar10_split", "cifar10_probs", "masks", "cutoff_mean",
           "cutoff_var", "corollary4_K", "DATASETS", "DOCUMENT_DATASETS", "NAMES", "load_data", "validation_split",
           "split", "mask", "REFERENCE"]

PATTERNS = ("bernoulli", "markov", "cyclic")
CIFAR10_COUNTS = (10, 5000)          # classes, training images per class


def k_label(K) -> str:
    return "K = inf" if K is None or K == math.inf else f"K = {int(K)}"


def cifar10_split(seed: int, clients: int = 250):
    """FedAU's split of CIFAR-10's training set (``fedau_dirichlet(labels, N, 0.1)``, IBM/fedau@6e9cce9
    ``util/util.py``) on the exact class counts: the Partition (indices into the class-sorted labels)."""
    C, per = CIFAR10_COUNTS
    return fedau_dirichlet(np.repeat(np.arange(C), per), clients, 0.1, seed=seed)


def cifar10_probs(seed: int, clients: int = 250) -> np.ndarray:
    """FedAU's p_n on CIFAR-10's split: ``fedau_participation_probs(counts)`` (mean 0.1, floor 0.02)."""
    return fedau_participation_probs(cifar10_split(seed, clients).counts, alpha=0.1, mean=0.1, p_min=0.02, seed=seed)


def masks(pattern: str, p, rounds: int, seed: int, *, x: float = 0.05, period: int = 100) -> np.ndarray:
    """(rounds, N) participation mask of `pattern` with stationary probabilities p (FedAU's ``bernoulli``,
    ``markov-x``, ``cyclic-period``; ``flkit.participation``).

    Each pattern draws from its own stream ``rng(seed, "participation-<pattern>")``: with one shared stream
    the Markov chain would reuse the Bernoulli draw's uniforms (shifted by one round), and for the many
    clients at the floor p_n = 0.02, whose chain has lag-1 correlation -0.02, the two masks would nearly
    coincide."""
    if pattern not in PATTERNS:
        raise ValueError(f"unknown participation pattern {pattern!r}; choose one of {PATTERNS}")
    g = rng(seed, f"participation-{pattern}")
    if pattern == "bernoulli":
        return participation.bernoulli(p, rounds, g)
    if pattern == "markov":
        return participation.markov(p, rounds, g, x=x)
    return participation.cyclic(p, rounds, g, period=period)


def cutoff_mean(p, K: int | None):
    r""":math:`\mathbb E[S] = (1-(1-p)^K)/p` of the cutoff geometric interval (K None: 1/p). Works on arrays
    and on Fractions."""
    if K is None:
        return 1 / np.asarray(p, dtype=float)
    return (1 - (1 - p) ** K) / p


def cutoff_var(p, K: int):
    r"""The document's :math:`\mathrm{Var}[S] = \frac{1-p}{p^2} - \frac{(2K-1)(1-p)^K}{p} -
    \frac{(1-p)^{2K}}{p^2}`, as printed (slide "Main Result (cont'd)")."""
    q = 1 - p
    return q / p ** 2 - (2 * K - 1) * q ** K / p - q ** (2 * K) / p ** 2


def corollary4_K(p_min: float, T: float) -> float:
    r"""Corollary 4's cutoff :math:`K = \log_c T`, :math:`c = 1/(1-\min_n p_n)^2`."""
    return math.log(T) / (-2 * math.log1p(-p_min))


# ------------------------------------------------------------------------------------- the data of a run
# dataset -> the authors' model and input normalization (IBM/fedau@6e9cce9 model/*.py, dataset/dataset.py)
DATASETS = {
    "svhn": dict(model="fedau_svhn", mean=(0.4376821, 0.4437697, 0.47280442),
                 std=(0.19803012, 0.20101562, 0.19703614)),
    "cifar10": dict(model="fedau_cifar10", mean=(0.4914, 0.4822, 0.4465), std=(0.2023, 0.1994, 0.2010)),
    "cifar100": dict(model="fedau_cifar100", mean=(0.4914, 0.4822, 0.4465), std=(0.2023, 0.1994, 0.2010)),
    "cinic10": dict(model="fedau_cinic10", mean=(0.47889522, 0.47227842, 0.43047404),
                    std=(0.24205776, 0.23828046, 0.25874835)),
    "fashion-mnist": dict(model="fedau_fmnist", mean=(0.1307,), std=(0.3081,)),
}
DOCUMENT_DATASETS = ("svhn", "cifar10", "cifar100", "cinic10")
# the data sets by the names readers know
NAMES = {"svhn": "SVHN", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "cinic10": "CINIC-10",
         "fashion-mnist": "Fashion-MNIST"}

_DATA: dict = {}            # the data last loaded (one set at a time)


def load_data(c: Mapping, device) -> tuple:
    """(x, y, x_test, y_test) of the config's dataset, normalized as the authors do, on `device` (cached).
    A config with ``validation`` = v (the tuning runs) holds v images of the training set out (a fixed random
    draw, the same for every seed) and evaluates on them in place of the test set, which it never reads."""
    key = (c["dataset"], c["train_subset"], c["test_subset"], c.get("validation"), str(device))
    if key not in _DATA:
        ds = datasets.load(c["dataset"])
        spec = DATASETS[c["dataset"]]
        x, y = datasets.normalize(ds.x_train, spec["mean"], spec["std"]), ds.y_train
        xt, yt = datasets.normalize(ds.x_test, spec["mean"], spec["std"]), ds.y_test
        if c["train_subset"]:
            x, y = x[:c["train_subset"]], y[:c["train_subset"]]
        if c["test_subset"]:
            xt, yt = xt[:c["test_subset"]], yt[:c["test_subset"]]
        if c.get("validation"):
            held, kept = validation_split(len(y), c["validation"])
            xt, yt, x, y = x[held], y[held], x[kept], y[kept]
        _DATA.clear()
        _DATA[key] = tuple(t.to(device) for t in (x, y, xt, yt))
    return _DATA[key]


def validation_split(n: int, v: int) -> tuple[np.ndarray, np.ndarray]:
    """(held-out, kept) indices of a training set of n images: v held out by a fixed draw (stream
    "validation" of seed 0), the rest kept in their order."""
    if not 0 < v < n:
        raise ValueError(f"the validation split needs 0 < v < n, got v = {v}, n = {n}")
    idx = rng(0, "validation").permutation(n)
    return np.sort(idx[:v]), np.sort(idx[v:])


def split(c: Mapping, y: np.ndarray) -> tuple[Partition, np.ndarray]:
    """The seed's data split (FedAU's Dirichlet split) and participation probabilities p_n of a run's config."""
    part = fedau_dirichlet(y, c["clients"], c["data_alpha"], seed=c["seed"])
    p = fedau_participation_probs(part.counts, c["part_alpha"], c["p_mean"], c["p_min"], seed=c["seed"])
    return part, p


def mask(c: Mapping, p: np.ndarray) -> np.ndarray:
    """(rounds, N) participation of the config's pattern (:func:`masks`: one stream per pattern)."""
    return masks(c["pattern"], p, c["rounds"], c["seed"], x=c.get("markov_x", 0.05), period=c.get("cycle", 100))


# ------------------------------------------------------------------------ the document's numbers
# The table of slide "Experiments (cont'd)": (pattern, method) -> 8 values "mean ± sd" in the column order
# SVHN train, test, CIFAR-10 train, test, CIFAR-100 train, test, CINIC-10 train, test. Typed once from the
# document; the extraction repeats the cyclic FedAU (K -> inf) row after the table (a duplicate, dropped).
_DOC = """
bernoulli|FedAU (K = inf)|90.4 0.5|89.3 0.5|85.4 0.4|77.1 0.4|63.4 0.6|52.3 0.4|65.2 0.5|61.5 0.4
bernoulli|FedAU (K = 50)|90.6 0.4|89.6 0.4|86.0 0.5|77.3 0.3|63.8 0.3|52.1 0.6|66.7 0.3|62.7 0.2
bernoulli|Average participating|89.1 0.3|87.2 0.3|83.5 0.9|74.1 0.8|59.3 0.4|48.8 0.7|61.1 2.3|56.6 2.0
bernoulli|Average all|88.5 0.5|87.0 0.3|81.0 0.9|72.7 0.9|58.2 0.4|47.9 0.5|60.5 2.3|56.2 2.0
bernoulli|FedVarp|89.6 0.5|88.9 0.5|84.2 0.3|77.9 0.2|57.2 0.9|49.2 0.8|64.4 0.6|62.0 0.5
bernoulli|MIFA|89.4 0.3|88.7 0.2|83.5 0.6|77.5 0.3|55.8 1.1|48.4 0.7|63.8 0.7|61.5 0.5
bernoulli|Known p|89.2 0.5|88.4 0.5|84.3 0.5|77.0 0.5|59.4 0.7|50.6 0.4|63.2 0.6|60.5 0.5
markov|FedAU (K = inf)|90.5 0.4|89.3 0.4|85.3 0.3|77.1 0.3|63.2 0.5|51.8 0.3|64.9 0.3|61.2 0.2
markov|FedAU (K = 50)|90.6 0.3|89.5 0.3|85.9 0.5|77.2 0.3|63.5 0.4|51.7 0.3|66.3 0.4|62.3 0.2
markov|Average participating|89.0 0.3|87.1 0.2|83.4 0.9|74.2 0.7|59.2 0.4|48.6 0.4|61.5 2.3|56.9 1.9
markov|Average all|88.4 0.6|86.8 0.7|80.8 1.0|72.5 0.5|57.8 0.9|47.7 0.5|59.9 2.8|55.7 2.2
markov|FedVarp|89.6 0.3|88.6 0.2|84.0 0.3|77.8 0.2|56.4 1.1|48.8 0.5|64.6 0.4|62.1 0.4
markov|MIFA|89.1 0.3|88.4 0.2|83.0 0.4|77.2 0.4|55.1 1.2|48.1 0.6|63.5 0.7|61.2 0.6
markov|Known p|89.5 0.2|88.6 0.2|84.5 0.4|76.9 0.3|59.7 0.5|50.3 0.5|63.5 0.9|60.7 0.6
cyclic|FedAU (K = inf)|89.8 0.6|88.7 0.6|84.2 0.8|76.3 0.7|60.9 0.6|50.6 0.3|63.5 1.0|60.0 0.8
cyclic|FedAU (K = 50)|89.9 0.6|88.8 0.6|84.8 0.6|76.6 0.4|61.3 0.8|51.0 0.5|64.5 0.9|60.9 0.7
cyclic|Average participating|87.4 0.5|85.5 0.7|81.6 1.2|73.3 0.8|58.1 1.0|48.3 0.8|58.9 2.1|55.0 1.6
cyclic|Average all|89.1 0.8|87.4 0.8|83.1 1.0|73.8 0.8|59.7 0.3|48.8 0.4|62.9 1.7|57.6 1.5
cyclic|FedVarp|84.8 0.5|83.9 0.6|79.7 0.9|75.3 0.7|50.9 0.5|45.9 0.4|60.4 0.7|58.5 0.6
cyclic|MIFA|78.6 1.2|77.4 1.1|73.0 1.3|70.6 1.1|44.8 0.6|41.1 0.6|51.2 1.0|50.2 0.9
cyclic|Known p|89.9 0.7|88.7 0.6|83.6 0.7|76.1 0.5|60.2 0.4|50.8 0.4|62.6 0.8|59.8 0.7
"""


def _reference() -> pd.DataFrame:
    rows = []
    cols = [(d, sp) for d in DOCUMENT_DATASETS for sp in ("train", "test")]
    for line in _DOC.strip().splitlines():
        pattern, method, *cells = line.split("|")
        for (d, sp), cell in zip(cols, cells, strict=True):
            m, sd = map(float, cell.split())
            rows.append(dict(pattern=pattern, method=method, dataset=d, split=sp, mean=m, sd=sd))
    return pd.DataFrame(rows)


REFERENCE = _reference()
