"""DivFL, diverse client selection (Balakrishnan, Li, Zhou, Himayat, Smith & Bilmes, ICLR 2022): greedy
facility location over the clients' updates, :class:`DivFL`. Authors' code: github.com/melodi-lab/divfl, commit
4a5b80df85a72b97751ce1130ee5c7d76a2c1540."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from flkit.sample.base import SamplerState, _available, _base_state, _counts, _positive_int, _store_latest

__all__ = ["DivFLState", "DivFL", "update_distances", "facility_location_greedy"]


@dataclass
class DivFLState(SamplerState):
    """Adds, for ``proxy="stale"``, the latest observed update of each (run, client): ``updates``
    (R, N, d), allocated at the first ``observe`` on the device and dtype of ``delta`` (zeros for
    clients never observed). Stays None with ``proxy="gradient"`` and ``proxy="update"``."""

    updates: torch.Tensor | None = None


def update_distances(u: torch.Tensor) -> np.ndarray:
    """D[i, j] = ||u_i - u_j||_2 for the rows of u (n, d), as a float64 (n, n) array.

    Computed from the differences (``torch.cdist`` without the Gram-matrix shortcut), on u's device:
    identical updates are at distance exactly 0 and D is exactly symmetric, so ties are exact. A
    non-finite distance (an update with NaN or inf) counts as +inf.
    """
    if u.shape[0] == 0:
        return np.zeros((0, 0))
    d = torch.cdist(u[None], u[None], compute_mode="donot_use_mm_for_euclid_dist")[0]
    d = d.double().cpu().numpy()
    return np.where(np.isfinite(d), d, np.inf)


def facility_location_greedy(D: np.ndarray, k: int, g: np.random.Generator | None = None,
                             subsample: float | None = None) -> np.ndarray:
    """Greedy minimisation of L(S) = sum_i min_{j in S} D[i, j] over |S| = min(k, n) columns of D (n, n).

    Each of the k steps adds the column j not yet in S with the smallest L(S + j), ties to the lowest j.
    Each sum is taken over its sorted terms, so two candidates whose terms are the same numbers in
    another order (as j and j' often are, D being symmetric) tie exactly. Equivalently the greedy
    maximises the facility-location function G(S) = sum_i max_{j in S} (C - D[i, j]) for any C >= max D
    (monotone submodular, G(empty) = 0), so G(S_greedy) >= (1 - 1/e) max_{|S|=k} G(S).
    ``subsample`` (stochastic greedy, as the authors' ``stochastic_greedy``): each step looks only at
    m = max(k, int(subsample * n)) columns drawn uniformly without replacement from those not yet in S
    (``g.choice``), or at all of them when at most m are left. Returns the chosen columns in the
    order they were added.
    """
    n = D.shape[1]
    best = np.full(D.shape[0], np.inf)  # min_{j in S} D[i, j]; +inf while S is empty
    left = np.ones(n, dtype=bool)
    chosen = []
    m = n if subsample is None else max(k, int(subsample * n))
    for _ in range(min(k, n)):
        cand = np.flatnonzero(left)
        if m < cand.size:
            cand = np.sort(g.choice(cand, size=m, replace=False))
        # L(S + j) for each candidate j, summed in sorted order: equal multisets of terms tie exactly
        cost = np.sort(np.minimum(best[:, None], D[:, cand]), axis=0).sum(axis=0)
        j = int(cand[np.argmin(cost)])                             # first minimum: lowest index
        chosen.append(j)
        left[j] = False
        best = np.minimum(best, D[:, j])
    return np.array(chosen, dtype=np.int64)


PROXIES = ("gradient", "update", "stale")     # DivFL's vectors: the document's one-step gradient first


@dataclass(frozen=True)
class DivFL:
    """Diverse client selection (Balakrishnan, Li, Zhou, Himayat, Smith & Bilmes, ICLR 2022).

    Rule: S_t maximises the facility-location function G(S) = sum_{i in V} max_{j in S} f(i, j) over
    |S| = k, with the similarity f given by the clients' gradient dissimilarity, i.e. S_t minimises
    sum_{i in V} min_{j in S} ||Delta_i - Delta_j||: every client i is "represented" by its closest
    selected client, so the selected updates summarise all of them. Solved greedily
    (:func:`facility_location_greedy`): k steps, each adding the client that most decreases the sum,
    ties to the lowest client index; each selected client trains once (counts 1). The distance is
    Euclidean (:func:`update_distances`), as the authors' ``pairwise_distances(..., metric="euclidean")``
    with a zero diagonal; the sum over i is unweighted (no n_i).

    ``proxy`` = the vectors Delta_i the distances are taken on:

    * ``"gradient"`` (default): every available client's gradient of its local objective over all its
      data at the current global model x_t, :math:`\nabla F_i(x_t)`, asked through the probe each round
      (one ``probe.gradients(mask)`` call per round, mask = A_t of the runs with |A_t| > k). This is the
      idealized DivFL of the HiCS-FL document (appendix 6.1.2: "1-step gradients were requested from all
      client[s] in each round (regardless of their participation status)"), read as the gradient of one
      full-batch step at the received model, which is also what DivFL's own code computes at round 0 and
      what the DivFL paper's analysis uses. The sign (gradient, not step) and a step size common to all
      clients leave the distances' order, hence S_t, unchanged.
    * ``"update"``: every available client's full local update from x_t (the task's local training:
      epochs or steps of minibatch SGD), asked through ``probe.updates(mask)``; Delta_i = x_t minus the local
      model. A labelled variant: a richer vector than the document's one-step gradient, at the cost of
      every client's full local training every round. Because local training is keyed by
      (seed, round, client), the updates the chosen clients then send are the probed ones.
    * ``"stale"``: Delta_i = the last update client i sent (through ``observe``), zeros for a client
      never observed; no probe call. The authors' code works this way after round 0: the table of
      per-client gradients is refreshed only for the clients selected in a round.

    ``subsample`` (default None: plain greedy): stochastic greedy, each step choosing among
    max(k, int(subsample |A_t|)) random remaining clients, drawn with the run's generator.

    Departures. The paper's V is all N clients, all available; we take V = A_t, both as the clients
    that may be chosen and as the clients to be represented (the probed proxies have no vector for an
    unavailable client). If |A_t| <= k every available client is taken and nothing is asked. The
    paper's vector is the full local gradient at the received model (``proxy="gradient"``).

    Authors' code (github.com/melodi-lab/divfl, commit 4a5b80df85a72b97751ce1130ee5c7d76a2c1540,
    ``flearn/trainers/fedavg.py``, ``flearn/trainers/fedbase.py``: ``select_cl_submod``, ``lazy_greedy``,
    ``greedy``, ``stochastic_greedy``): at round 0 every client's full-batch gradient at the global model
    is computed; afterwards only the selected clients' rows are refreshed, each with the gradient at
    the model it received that round (the scripts' ``m_interval`` flag does not reach this condition).
    Our "stale" starts from zeros instead of that round-0 probe. The default solver is lazy greedy
    (the plain greedy's choices, up to ties, which follow numpy's argmin/argsort order).
    The HiCS-FL code (github.com/CityChan/HiCS-FL, commit 25f309d118d72c8ca176b6551704f648b304e100,
    ``server/server_divfl.py``) trains all N clients every round but selects with the updates of the
    previous round (zeros at round 0), by stochastic greedy with subsample 0.1, and aggregates only
    the selected clients; our "gradient" and "update" use the current round's vectors, as the HiCS-FL
    document says.
    """

    k: int
    proxy: str = "gradient"
    subsample: float | None = None

    def __post_init__(self):
        _positive_int(self.k, "k")
        if self.proxy not in PROXIES:
            raise ValueError(f"proxy must be 'gradient' (every available client's gradient at the global model, "
                             f"through the probe), 'update' (every available client's full local update, through "
                             f"the probe) or 'stale' (the last observed updates), got {self.proxy!r}")
        s = self.subsample
        if s is not None and (isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, float, np.floating))
                              or not 0 < s <= 1):
            raise ValueError(f"subsample must be None (plain greedy) or a number in (0, 1], got {s!r}")

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> DivFLState:
        base = _base_state(runs, num_clients, sizes, seeds, k=self.k)
        return DivFLState(rngs=base.rngs, sizes=base.sizes)

    def select(self, state: DivFLState, t: int, available, probe=None):
        avail = _available(available, state)
        R, N = avail.shape
        ask = avail & (avail.sum(axis=1, keepdims=True) > self.k)  # runs with a choice to make
        vectors = self._vectors(state, ask, probe)
        chosen = []
        for r in range(R):
            idx = np.flatnonzero(avail[r])
            if not ask[r].any():
                chosen.append(idx)
                continue
            D = update_distances(vectors[r])
            chosen.append(idx[facility_location_greedy(D, self.k, state.rngs[r], self.subsample)])
        return _counts(chosen, N), state

    def _vectors(self, state: DivFLState, ask: np.ndarray, probe) -> list:
        """Per run, the (|A_t|, d) updates of its asked clients in client order (None if not asked)."""
        R, N = ask.shape
        out = [None] * R
        if not ask.any():
            return out
        if self.proxy == "stale":
            for r in np.flatnonzero(ask.any(axis=1)):
                idx = torch.from_numpy(np.flatnonzero(ask[r]))
                out[r] = (torch.zeros(len(idx), 1, dtype=torch.float64) if state.updates is None
                          else state.updates[r][idx.to(state.updates.device)])
            return out
        ask_of = probe.gradients if self.proxy == "gradient" else probe.updates
        what = "gradients" if self.proxy == "gradient" else "updates"
        pairs, delta = ask_of(torch.from_numpy(ask))
        pairs = torch.as_tensor(pairs).detach().cpu().long()
        if pairs.ndim != 2 or pairs.shape[1] != 2 or delta.ndim != 2 or delta.shape[0] != pairs.shape[0]:
            raise ValueError(f"probe.{what} must return pairs (P, 2) and vectors (P, d) with the same P, "
                             f"got {tuple(pairs.shape)} and {tuple(delta.shape)}")
        got = np.zeros((R, N), dtype=bool)
        pos = np.full((R, N), -1, dtype=np.int64)
        if len(pairs):
            got[pairs[:, 0].numpy(), pairs[:, 1].numpy()] = True
            pos[pairs[:, 0].numpy(), pairs[:, 1].numpy()] = np.arange(len(pairs))
        if not np.array_equal(got, ask) or len(pairs) != ask.sum():
            raise ValueError(f"probe.{what} returned {len(pairs)} {what} for {int(ask.sum())} asked "
                             f"(run, client) pairs; it must return each asked pair once and no other")
        for r in np.flatnonzero(ask.any(axis=1)):
            out[r] = delta[torch.from_numpy(pos[r, ask[r]]).to(delta.device)]
        return out

    def observe(self, state: DivFLState, t: int, pairs, delta) -> DivFLState:
        """``proxy="stale"``: keep each trained client's update (the last one when a pair repeats)."""
        if self.proxy == "stale":
            state.updates, _, _ = _store_latest(state.updates, pairs, delta, state.sizes.shape)
        return state
