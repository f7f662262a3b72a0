"""Samplers that do not learn: every available client (:class:`AllAvailable`), k distinct clients
uniformly (:class:`UniformK`; McMahan et al. 2017, Li et al. 2020 scheme II) and k clients proportionally to
their data size (:class:`ProportionalK`; Li et al. 2020 scheme I, the "MD sampling" of Fraboni et al. 2021)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from flkit.sample.base import SamplerState, _available, _base_state, _counts, _draw, _positive_int

__all__ = ["AllAvailable", "UniformK", "ProportionalK"]


@dataclass(frozen=True)
class AllAvailable:
    """Every available client trains once: S_t = A_t (full participation when all are available)."""

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> SamplerState:
        return _base_state(runs, num_clients, sizes, seeds)

    def select(self, state: SamplerState, t: int, available, probe=None):
        return torch.from_numpy(_available(available, state).astype(np.int64)), state

    def observe(self, state, t, pairs, delta):
        return state


@dataclass(frozen=True)
class UniformK:
    """k distinct clients uniformly at random among the available: P(i in S_t) = k / |A_t|.

    FedAvg's sampling (McMahan et al. 2017; Li et al. 2020 "scheme II") applied to A_t. When
    |A_t| <= k every available client is taken.
    """

    k: int

    def __post_init__(self):
        _positive_int(self.k, "k")

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> SamplerState:
        return _base_state(runs, num_clients, sizes, seeds, k=self.k)

    def select(self, state: SamplerState, t: int, available, probe=None):
        avail = _available(available, state)
        chosen = []
        for g, a in zip(state.rngs, avail):
            idx = np.flatnonzero(a)
            chosen.append(idx if idx.size <= self.k else _draw(g, idx, self.k, None, replace=False))
        return _counts(chosen, avail.shape[1]), state

    def observe(self, state, t, pairs, delta):
        return state


@dataclass(frozen=True)
class ProportionalK:
    """k clients drawn with probability proportional to their data size, p_i = n_i / sum_{A_t} n_j.

    ``replace=True`` (default): Li et al. 2020 ("On the convergence of FedAvg on non-IID data"),
    sampling scheme I, the "MD sampling" of Fraboni et al. 2021: k i.i.d. draws from p, so
    counts ~ Multinomial(k, p), E[counts_i] = k p_i and P(i drawn) = 1 - (1 - p_i)^k; the unbiased
    aggregate averages the k drawn updates with weight 1/k each (counts_i / k). The k draws are made
    even when |A_t| < k.

    ``replace=False``: k distinct clients by successive sampling (each draw proportional to n_i among
    the clients not yet drawn, numpy's ``choice(replace=False, p=...)``), as the "random" baseline of
    the HiCS-FL code. Its inclusion probability is not k p_i: for k = 2,
    P(i in S_t) = p_i (1 + sum_{j != i} p_j / (1 - p_j)); in general it is the sum, over the ordered
    k-tuples that contain i, of prod_l p_{s_l} / (1 - p_{s_1} - ... - p_{s_{l-1}}). When |A_t| <= k
    every available client is taken.
    """

    k: int
    replace: bool = True

    def __post_init__(self):
        _positive_int(self.k, "k")
        if not isinstance(self.replace, (bool, np.bool_)):
            raise ValueError(f"replace must be True or False, got {self.replace!r}")

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> SamplerState:
        return _base_state(runs, num_clients, sizes, seeds, k=None if self.replace else self.k)

    def select(self, state: SamplerState, t: int, available, probe=None):
        avail = _available(available, state)
        chosen = []
        for g, a, n in zip(state.rngs, avail, state.sizes):
            idx = np.flatnonzero(a)
            if idx.size == 0 or (not self.replace and idx.size <= self.k):
                chosen.append(idx)
            else:
                chosen.append(_draw(g, idx, self.k, n[idx], replace=self.replace))
        return _counts(chosen, avail.shape[1]), state

    def observe(self, state, t, pairs, delta):
        return state
