r"""Table 1's "extra comp." and "extra comm." columns (document 004, Sec. 4.2 and appendix 6.13): the computation and
communication each sampler adds to a round of random sampling, as complexity orders: pow-d (ideal) and DivFL
(ideal) :math:`\mathcal O(|\theta^t|)` in both, CS :math:`\mathcal O(|\theta^t|)` computation and no extra
communication, HiCS-FL :math:`\mathcal O(C)` computation ("scales with the total number of classes but does not
increase with the size of the neural network model") and no extra communication.

Measured here on the samplers of :mod:`flkit.sample` (those the FMNIST page runs), with synthetic updates of
growing size :math:`|\theta|` (``dims``), N = 50 clients, K = 5, C = 10 (the document's FMNIST numbers), one run:

* **server computation**: the wall time of a round's ``select`` plus ``observe`` (CS builds its Gram matrix of
  the updates in ``observe``), the least over the timed rounds after the warm-up (HiCS-FL's ceil(N/K) rounds):
  on a shared CPU the least time is the one least disturbed by other work;
* **client computation**: the extra passes over a model-sized vector the clients make beyond the K trainings
  of random sampling, counted from what the sampler asks the round loop's probe: a loss (pow-d) or a gradient
  (DivFL's default proxy) per asked client, a full local update per asked client not then selected (DivFL's
  full-update proxy), in units of :math:`|\theta|` numbers;
* **communication**: the numbers sent beyond random sampling's (the model to K clients, K updates back),
  counted from the same requests: the model to every asked client that is not selected, plus one number per
  loss, :math:`|\theta|` per gradient, :math:`|\theta|` per update of an asked client not then selected.

The growth with :math:`|\theta|` is the least-squares slope of log(cost) on log(:math:`|\theta|`) over ``dims``
(1: linear, 0: constant). A check per Table 1 cell (:func:`cost_checks`): an :math:`\mathcal O(|\theta^t|)` cell
agrees when the slope of the larger of the method's server time and client work is within 0.5 of 1; an
:math:`\mathcal O(C)` or "-" computation cell when that slope is at most 0.25 and no client work is asked; a "-"
communication cell when no extra number is sent. Random sampling is the baseline the columns are measured
against, so its cells are not checked.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import torch

from flkit import sample
from flkit.papers import claims

__all__ = ["DIMS", "DOC", "measure", "slopes", "cost_checks", "ITEMS"]

DIMS = (5_000, 20_000, 80_000)
# Table 1 as printed: (extra comp., extra comm.) per method
DOC = {"pow-d": ("O(|theta^t|)", "O(|theta^t|)"), "CS": ("O(|theta^t|)", "-"),
       "DivFL": ("O(|theta^t|)", "O(|theta^t|)"), "HiCS-FL": ("O(C)", "-")}
_NAMES = {"pow-d": "pow-d (ideal)", "CS": "CS", "DivFL": "DivFL (ideal)", "HiCS-FL": "HiCS-FL"}
ITEMS = {(m, col): f"Table 1: extra {col}., {_NAMES[m]}" for m in DOC for col in ("comp", "comm")}


class _Probe:
    """Answers the sampler's requests with fixed vectors, instantly, and records them."""

    def __init__(self, vectors: torch.Tensor, losses: torch.Tensor):
        self.vectors, self.losses_table, self.asked = vectors, losses, []

    def losses(self, mask):
        self.asked.append(("losses", mask.clone()))
        return torch.where(mask, self.losses_table, torch.full_like(self.losses_table, float("nan")))

    def gradients(self, mask):
        self.asked.append(("gradients", mask.clone()))
        pairs = mask.nonzero()
        return pairs, self.vectors[pairs[:, 1]]

    def updates(self, mask):
        self.asked.append(("updates", mask.clone()))
        pairs = mask.nonzero()
        return pairs, self.vectors[pairs[:, 1]]


def _sampler(method: str, N: int, K: int, C: int, rounds: int, divfl_proxy: str):
    if method == "pow-d":
        return sample.PowD(K, N)
    if method == "CS":
        return sample.ClusteredSampling(K)
    if method == "DivFL":
        return sample.DivFL(K, proxy=divfl_proxy)
    if method == "HiCS-FL":
        return sample.HiCS(k=K, rounds=rounds, bias=slice(0, C))
    if method == "random":
        return sample.ProportionalK(K, replace=False)
    raise ValueError(f"unknown method {method!r}")


def measure(dims=DIMS, *, N: int = 50, K: int = 5, C: int = 10, timed: int = 5, seed: int = 0,
            methods=("random", "pow-d", "CS", "DivFL", "HiCS-FL"), divfl_proxy: str = "gradient") -> pd.DataFrame:
    """Per (method, |theta|): the least server time per round (select + observe, seconds) over ``timed`` rounds
    after the warm-up, and the extra client passes and extra numbers sent per round (module docstring), from
    one run with random float32 updates."""
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d <= C for d in dims) or len(dims) < 2:
        raise ValueError(f"dims must hold at least two ints > C = {C}, got {dims!r}")
    warm = -(-N // K)
    rounds = warm + timed
    rows = []
    for d in dims:
        g = torch.Generator().manual_seed(seed)
        vectors = torch.randn(N, int(d), generator=g)
        losses = torch.rand(1, N, generator=g, dtype=torch.float64)
        for m in methods:
            s = _sampler(m, N, K, C, rounds, divfl_proxy)
            state = s.init(1, N, torch.full((1, N), 1200.0, dtype=torch.float64), [seed])
            everyone = torch.ones(1, N, dtype=torch.bool)
            times, passes, sent = [], [], []
            for t in range(rounds):
                probe = _Probe(vectors, losses)
                tic = time.perf_counter()
                c, state = s.select(state, t, everyone, probe)
                elapsed = time.perf_counter() - tic
                pairs = c.nonzero()
                delta = vectors[pairs[:, 1]] + 0.01 * t          # this round's updates of the selected clients
                tic = time.perf_counter()
                state = s.observe(state, t, pairs, delta)
                elapsed += time.perf_counter() - tic
                if t < warm:
                    continue
                chosen = c[0] > 0
                p = n = 0.0
                for kind, mask in probe.asked:
                    asked = mask[0]
                    others = int((asked & ~chosen).sum())
                    n += others * d                                     # the model to the clients not selected
                    if kind == "losses":
                        p += int(asked.sum())                          # one forward pass over the model each
                        n += int(asked.sum())                          # one number back each
                    elif kind == "gradients":
                        p += int(asked.sum())
                        n += int(asked.sum()) * d
                    else:                                              # full updates: the unselected are extra
                        p += others
                        n += others * d
                times.append(elapsed)
                passes.append(p * d)
                sent.append(n)
            rows.append(dict(method=m, dim=int(d), server_s=float(np.min(times)),
                             client_numbers=float(np.mean(passes)), comm_numbers=float(np.mean(sent))))
    return pd.DataFrame(rows)


def _slope(x, y) -> float:
    x, y = np.log(np.asarray(x, dtype=float)), np.asarray(y, dtype=float)
    if np.any(y <= 0):
        return 0.0 if np.all(y == 0) else math.nan
    return float(np.polyfit(x, np.log(y), 1)[0])


def slopes(costs: pd.DataFrame) -> pd.DataFrame:
    """Per method: the growth exponents in |theta| of the server time, the client work and the communication
    (0 for a cost that is 0 at every size), and the client work and communication at the largest size."""
    rows = []
    for m, d in costs.groupby("method", sort=False):
        d = d.sort_values("dim")
        rows.append(dict(method=m, server=_slope(d.dim, d.server_s), client=_slope(d.dim, d.client_numbers),
                         comm=_slope(d.dim, d.comm_numbers), client_at_max=float(d.client_numbers.iloc[-1]),
                         comm_at_max=float(d.comm_numbers.iloc[-1]), server_s_at_max=float(d.server_s.iloc[-1])))
    return pd.DataFrame(rows).set_index("method")


def cost_checks(sl: pd.DataFrame, dims=DIMS, scale: str | None = None) -> dict:
    """{Table 1 item: [check]} for the eight non-baseline cells (module docstring). ``scale``: the checks' scale
    text (default: synthetic updates of ``dims``)."""
    import dataclasses
    scale = scale or (f"stand-in: synthetic updates of |theta| = {', '.join(f'{d:,}' for d in dims)} with N = 50, "
                      "K = 5, C = 10 for the document's models")
    out = {}
    for m, (comp, comm) in DOC.items():
        if m not in sl.index:
            continue
        r = sl.loc[m]
        # the larger of the two kinds of extra computation decides the growth
        grow = max(r.server, r.client if r.client_at_max > 0 else -math.inf)
        if comp.startswith("O(|theta"):
            c1 = claims.bound(f"Table 1, {_NAMES[m]}: extra computation grows linearly with |theta| (slope of log cost "
                              "on log |theta|, the larger of server time and client work)", grow, 1.0, tol=0.5,
                              side="two-sided")
        else:
            c1 = claims.bound(f"Table 1, {_NAMES[m]}: extra computation does not grow with |theta| (slope of the "
                              "server time; no client work asked)", r.server if r.client_at_max == 0 else math.inf,
                              0.0, tol=0.25, side="upper")
        if comm.startswith("O(|theta"):
            c2 = claims.bound(f"Table 1, {_NAMES[m]}: extra communication grows linearly with |theta| (slope of the "
                              "numbers sent per round)", r.comm, 1.0, tol=0.5, side="two-sided")
        else:
            c2 = claims.bound(f"Table 1, {_NAMES[m]}: no extra communication (numbers sent per round beyond random "
                              "sampling's, at the largest |theta|)", r.comm_at_max, 0.0, tol=0.0, side="upper")
        out[ITEMS[(m, "comp")]] = [dataclasses.replace(c1, scale=scale)]
        out[ITEMS[(m, "comm")]] = [dataclasses.replace(c2, scale=scale)]
    return out
