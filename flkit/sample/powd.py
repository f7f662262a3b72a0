"""Power-of-choice client selection (Cho, Wang & Joshi 2020, arXiv:2010.01243; AISTATS 2022):
:class:`PowD`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from flkit.sample.base import SamplerState, _available, _base_state, _counts, _draw, _positive_int

__all__ = ["PowD"]


@dataclass(frozen=True)
class PowD:
    """Power-of-choice (Cho, Wang & Joshi 2020, arXiv:2010.01243; AISTATS 2022).

    Each round: (1) draw a candidate set C_t of d distinct clients from A_t, each draw proportional to
    p_i (successive sampling, as ``ProportionalK(replace=False)``); (2) the candidates report F_i(w_t),
    the current global model's training loss on their local data (one ``probe.losses`` call per round,
    asking the candidates only); (3) S_t = the k candidates with the highest F_i(w_t), each drawn once.
    Ties are broken by the lowest client index (the paper does not say); a NaN loss ranks below every
    number. The HiCS-FL document runs pow-d with d = N ("ideal" pow-d: every client reports its loss).

    Departures for partial availability: candidates come from A_t and C_t = A_t when |A_t| <= d; when
    |A_t| <= k all of A_t is taken with no loss asked. Runs whose candidate set has at most k clients
    are left out of the probe's mask, and the probe is not called when no run needs losses.
    """

    k: int
    d: int

    def __post_init__(self):
        _positive_int(self.k, "k")
        _positive_int(self.d, "d")
        if self.d < self.k:
            raise ValueError(f"d = {self.d} must be >= k = {self.k} (the k winners come from d candidates)")

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> SamplerState:
        if isinstance(num_clients, (int, np.integer)) and self.d > num_clients:
            raise ValueError(f"d = {self.d} exceeds num_clients = {num_clients}; choose d <= num_clients")
        return _base_state(runs, num_clients, sizes, seeds, k=self.k)

    def select(self, state: SamplerState, t: int, available, probe):
        avail = _available(available, state)
        R, N = avail.shape
        cand = []
        for g, a, n in zip(state.rngs, avail, state.sizes):
            idx = np.flatnonzero(a)
            cand.append(idx if idx.size <= self.d else np.sort(_draw(g, idx, self.d, n[idx], replace=False)))
        ask = np.zeros((R, N), dtype=bool)
        for r, c in enumerate(cand):
            if c.size > self.k:
                ask[r, c] = True
        loss = None
        if ask.any():
            loss = torch.as_tensor(probe.losses(torch.from_numpy(ask))).detach().cpu().numpy()
            loss = loss.astype(np.float64)
            if loss.shape != (R, N):
                raise ValueError(f"probe.losses must return shape {(R, N)}, got {loss.shape}")
        chosen = []
        for r, c in enumerate(cand):
            if c.size <= self.k:
                chosen.append(c)
            else:  # highest loss first; np.lexsort puts NaN last; c is sorted, so ties -> lowest index
                chosen.append(c[np.lexsort((c, -loss[r, c]))[: self.k]])
        return _counts(chosen, N), state

    def observe(self, state, t, pairs, delta):
        return state
