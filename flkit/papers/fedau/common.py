"""What the FedAU chapter's pages share: the participation patterns of the document's experiments, the
clients of its CIFAR-10 setting (exact: the split depends on the data only through the class counts), and
the formulas of the cutoff K (document 000, proof of Theorem 3 and Corollary 4)."""
from __future__ import annotations

import math

import numpy as np

from flkit import participation
from flkit.partition import fedau_dirichlet, fedau_participation_probs
from flkit.seeding import rng

__all__ = ["PATTERNS", "CIFAR10_COUNTS", "k_label", "cifar10_split", "cifar10_probs", "masks", "cutoff_mean",
           "cutoff_var", "corollary4_K"]

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
