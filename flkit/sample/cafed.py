"""CA-Fed, Correlation-Aware FL (Rodio, Faticanti, Marfoq, Neglia & Leonardi, INFOCOM 2023): greedy
exclusion of clients (:class:`CAFed`), and its F3AST baseline (Ribero, Vikalo & de Veciana 2022,
arXiv:2205.06730; :class:`F3AST`), both as run by the authors' code, arodio/CA-Fed@e673587."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from flkit.sample.base import SamplerState, _available, _base_state, _counts, _positive_int

__all__ = ["CAFedState", "CAFed", "cafed_error", "cafed_allocation", "F3ASTState", "F3AST"]


def _client_vector(values, name: str, low: float, high: float, *, low_open: bool = False) -> tuple:
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a 1-D sequence with one value per client, got shape {a.shape}")
    bad = ~np.isfinite(a) | (a <= low if low_open else a < low) | (a > high)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        lo = "(" if low_open else "["
        raise ValueError(f"{name}[{i}] = {a[i]!r} is outside {lo}{low}, {high}]")
    return tuple(float(v) for v in a)


def _fraction(value, name: str, *, high_open: bool = False) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not (0 <= value < 1 if high_open else 0 <= value <= 1):
        raise ValueError(f"{name} must be a number in [0, 1{')' if high_open else ']'}, got {value!r}")
    return float(value)


def cafed_error(a: np.ndarray, q: np.ndarray, pi: np.ndarray, gap: np.ndarray, c: float = 1.0) -> float:
    r"""CA-Fed's estimate of the total error of allocation ``a`` (N,):

    .. math:: E(a) = \sum_k w_k\,(\hat F_k - F_k^*) + c\,\max_k(\hat F_k - F_k^*)\;\mathrm{TV}(q, w)^2,
       \qquad w_k = \frac{\pi_k a_k}{\sum_h \pi_h a_h},\quad \mathrm{TV}(q, w) = \tfrac12\|q - w\|_1 .

    ``gap`` = :math:`\hat F_k - F_k^*` (the smoothed loss estimates minus the local optima). The first
    term estimates the optimisation error of the biased objective :math:`F_B` (whose weights are w, the
    notes' :math:`p_k \propto \pi_k q_k`), the second the bias term of Theorem 1 with the notes'
    :math:`\Gamma` estimated by the largest gap and :math:`\chi^2_{\alpha\|p}` replaced by the squared
    total-variation distance (as the authors' code, arodio/CA-Fed@e673587 ``clients_sampler.py``,
    ``_estimate_optimization_objective``; ``utils/divergence.py``, ``tv_distance``). The max runs over
    every client, excluded or not. ``a`` must have a positive entry."""
    w = pi * a
    total = w.sum()
    if not total > 0:
        raise ValueError("the allocation gives no weight to any client (sum_k pi_k a_k = 0)")
    w = w / total
    tv = 0.5 * np.abs(q - w).sum()
    return float(gap @ w + c * gap.max() * tv ** 2)


def cafed_allocation(q, pi, lam, gap, c: float = 1.0, tolerance: float = 0.0,
                     trace: list | None = None) -> tuple[np.ndarray, list[int]]:
    r"""CA-Fed's allocation: start from :math:`a_k = q_k/\pi_k` for every client, then visit the clients
    twice, first by decreasing :math:`|\lambda_k|` (most correlated first), then by increasing
    :math:`\pi_k` (least available first), ties in client order, and set :math:`a_k = 0` whenever
    :math:`E(a) - E(a') \ge` ``tolerance`` for the candidate a' (:func:`cafed_error`; tolerance 0: a
    tie excludes). A pass stops at the first candidate that would leave no client (sum a' = 0), as in
    the authors' ``_truncate_clients`` (arodio/CA-Fed@e673587 ``clients_sampler.py``). An excluded
    client visited again in the second pass stays excluded.

    Returns (a (N,), excluded): the final allocation and the clients excluded, in the order they were.
    ``trace``: a list to which one dict per visit is appended (pass 1 or 2, client, E of the current
    allocation, E of the candidate, whether the candidate was taken; a visit that stops the pass has
    candidate E = NaN).
    All inputs are (N,) arrays; the whole computation is float64 (the authors keep the loss estimates in
    float32)."""
    q, pi, lam, gap = (np.asarray(v, dtype=np.float64) for v in (q, pi, lam, gap))
    if not (q.shape == pi.shape == lam.shape == gap.shape) or q.ndim != 1:
        raise ValueError(f"q, pi, lam and gap must be 1-D of one length, got {q.shape}, {pi.shape}, "
                         f"{lam.shape}, {gap.shape}")
    if not np.all(pi > 0):
        raise ValueError(f"every pi_k must be > 0, got {pi}")
    a = q / pi
    best = cafed_error(a, q, pi, gap, c)
    excluded: list[int] = []
    by_correlation = np.argsort(-np.abs(lam), kind="stable")
    by_availability = np.argsort(pi, kind="stable")
    for npass, order in ((1, by_correlation), (2, by_availability)):
        for k in order.tolist():
            cand = a.copy()
            cand[k] = 0.0
            if cand.sum() == 0:
                if trace is not None:
                    trace.append(dict(pass_=npass, client=k, current=best, candidate=np.nan, taken=False))
                break
            err = cafed_error(cand, q, pi, gap, c)
            taken = best - err >= tolerance
            if trace is not None:
                trace.append(dict(pass_=npass, client=k, current=best, candidate=err, taken=taken and a[k] != 0))
            if taken:
                if a[k] != 0:
                    excluded.append(k)
                a, best = cand, err
    return a, excluded


@dataclass
class CAFedState(SamplerState):
    r"""Adds, per run: ``loss`` (R, N) the smoothed loss estimates :math:`\hat F_k`, ``started`` (R,)
    whether they were initialised, ``allocation`` (R, N) the last allocation a, ``kept`` (R, N) how many
    rounds each client had a_k > 0 and ``available`` (R, N) how many rounds it was available."""

    loss: np.ndarray | None = None
    started: np.ndarray | None = None
    allocation: np.ndarray | None = None
    kept: np.ndarray | None = None
    available: np.ndarray | None = None


@dataclass(frozen=True)
class CAFed:
    r"""CA-Fed, Correlation-Aware FL (Rodio, Faticanti, Marfoq, Neglia & Leonardi, INFOCOM 2023).

    Each round t, per run:

    1. The available clients report :math:`F_k(w_t)`, the current global model's loss on their data (one
       ``probe.losses`` call, asking the available clients). Loss estimates: at the first round with an
       available client, :math:`\hat F_k = F_k(w_t)` for the available clients and the mean of those for
       the others; afterwards :math:`\hat F_k \leftarrow \beta\hat F_k + (1-\beta)F_k(w_t)` for the
       available clients (``beta`` = the authors' ``smoothness_param``), the others keep theirs.
    2. :func:`cafed_allocation` with :math:`q_k = n_k/\sum_j n_j` (``objective_type weighted``), the
       oracle :math:`\pi_k, \lambda_k` (``pi``, ``lam``: the authors' default ``--estimator_type oracle``),
       the local optima :math:`F_k^*` (``optima``) and ``c`` (``bias_const``, 1 in every script).
    3. :math:`S_t` = the available clients with :math:`a_k > 10^{-10}`, each drawn once. The rule that
       goes with it is ``flkit.aggregate.InverseAvailability()`` (weights :math:`a_k = q_k/\pi_k`, not
       normalised).

    Departures from the authors' code (arodio/CA-Fed@e673587 ``clients_sampler.py``,
    ``MarkovianClientsSampler``; ``aggregator.py``, ``gather_loss_dict``; ``utils/utils.py``,
    ``get_local_optimums``): the reported loss is the training loss (``probe.losses``); the code
    evaluates each client's *validation* loader, which is its test split. A run whose first round has no
    available client waits for one to initialise the estimates (the code would divide by zero). Its
    :math:`F_k^*` come from scikit-learn (see the chapter code); here they are an input.
    """

    pi: tuple
    lam: tuple
    optima: tuple
    beta: float = 0.0
    c: float = 1.0
    tolerance: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "pi", _client_vector(self.pi, "pi", 0.0, 1.0, low_open=True))
        object.__setattr__(self, "lam", _client_vector(self.lam, "lam", -1.0, 1.0))
        object.__setattr__(self, "optima", _client_vector(self.optima, "optima", -np.inf, np.inf))
        if not len(self.pi) == len(self.lam) == len(self.optima):
            raise ValueError(f"pi, lam and optima need one value per client, got lengths "
                             f"{len(self.pi)}, {len(self.lam)}, {len(self.optima)}")
        object.__setattr__(self, "beta", _fraction(self.beta, "beta (loss smoothing)", high_open=True))
        for name in ("c", "tolerance"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> CAFedState:
        base = _base_state(runs, num_clients, sizes, seeds)
        if len(self.pi) != base.sizes.shape[1]:
            raise ValueError(f"CAFed was given {len(self.pi)} clients' pi, lam and optima; the task has "
                             f"{base.sizes.shape[1]} clients")
        R, N = base.sizes.shape
        return CAFedState(rngs=base.rngs, sizes=base.sizes, loss=np.zeros((R, N)), started=np.zeros(R, bool),
                          allocation=np.zeros((R, N)), kept=np.zeros((R, N)), available=np.zeros((R, N)))

    def select(self, state: CAFedState, t: int, available, probe):
        avail = _available(available, state)
        R, N = avail.shape
        chosen = np.zeros((R, N), dtype=np.int64)
        if not avail.any():
            return torch.from_numpy(chosen), state
        loss = torch.as_tensor(probe.losses(torch.from_numpy(avail))).detach().cpu().numpy().astype(np.float64)
        if loss.shape != (R, N):
            raise ValueError(f"probe.losses must return shape {(R, N)}, got {loss.shape}")
        pi, lam, opt = (np.asarray(v) for v in (self.pi, self.lam, self.optima))
        for r in range(R):
            a_r = avail[r]
            if not a_r.any():
                continue
            if not state.started[r]:
                state.loss[r] = loss[r, a_r].mean()
                state.loss[r, a_r] = loss[r, a_r]
                state.started[r] = True
            else:
                state.loss[r, a_r] = self.beta * state.loss[r, a_r] + (1 - self.beta) * loss[r, a_r]
            q = state.sizes[r] / state.sizes[r].sum()
            alloc, _ = cafed_allocation(q, pi, lam, state.loss[r] - opt, self.c, self.tolerance)
            state.allocation[r] = alloc
            chosen[r] = a_r & (alloc > 1e-10)
        state.kept += state.allocation > 1e-10
        state.available += avail
        return torch.from_numpy(chosen), state

    def observe(self, state, t, pairs, delta):
        return state


@dataclass
class F3ASTState(SamplerState):
    """Adds ``pi_hat`` (R, N), the availability estimates of the last round."""

    pi_hat: np.ndarray | None = None


@dataclass(frozen=True)
class F3AST:
    r"""F3AST (Ribero, Vikalo & de Veciana 2022, arXiv:2205.06730) as run by the CA-Fed code.

    Each round: :math:`\hat\pi_k = (1-s)\,\pi_k + s\,\mathbb 1[k \in A_t]` (``smoothness`` s), then
    :math:`S_t` = the k available clients with the largest :math:`q_k^2/\hat\pi_k^2` (ties: lowest client
    index; every available client when :math:`|A_t| \le k`), each drawn once. The rule that goes with it
    is ``flkit.aggregate.InverseAvailability(ema=s)`` (weights :math:`q_k/\hat\pi_k`, not normalised).

    As in arodio/CA-Fed@e673587 (``clients_sampler.py``, ``F3AST._update_estimates``; ``utils/utils.py``,
    ``get_clients_sampler``): the estimator is the oracle, which returns the true :math:`\pi_k` afresh every
    round, so :math:`\hat\pi` is one smoothing step from :math:`\pi`, not a running average over rounds (the
    F3AST paper's estimate); and s = 1 / (number of rounds), whatever ``--smoothness_param`` says. For a
    selected (hence available) client :math:`\hat\pi_k = (1-s)\pi_k + s`, increasing in :math:`\pi_k`, so
    with equal :math:`q_k` the rule takes the k least available of the available clients.
    """

    k: int
    pi: tuple
    smoothness: float

    def __post_init__(self):
        _positive_int(self.k, "k")
        object.__setattr__(self, "pi", _client_vector(self.pi, "pi", 0.0, 1.0, low_open=True))
        object.__setattr__(self, "smoothness", _fraction(self.smoothness, "smoothness", high_open=True))

    def init(self, runs: int, num_clients: int, sizes, seeds: Sequence[int]) -> F3ASTState:
        base = _base_state(runs, num_clients, sizes, seeds, k=self.k)
        if len(self.pi) != base.sizes.shape[1]:
            raise ValueError(f"F3AST was given {len(self.pi)} clients' pi; the task has {base.sizes.shape[1]} clients")
        return F3ASTState(rngs=base.rngs, sizes=base.sizes, pi_hat=np.zeros_like(base.sizes))

    def select(self, state: F3ASTState, t: int, available, probe=None):
        avail = _available(available, state)
        s = self.smoothness
        state.pi_hat = (1 - s) * np.asarray(self.pi)[None, :] + s * avail
        q = state.sizes / state.sizes.sum(axis=1, keepdims=True)
        score = (q / state.pi_hat) ** 2
        chosen = []
        for r in range(avail.shape[0]):
            idx = np.flatnonzero(avail[r])
            chosen.append(idx if idx.size <= self.k else idx[np.argsort(-score[r, idx], kind="stable")[: self.k]])
        return _counts(chosen, avail.shape[1]), state

    def observe(self, state, t, pairs, delta):
        return state
