r"""ZeroSARAH (Li, Hanzely and Richtarik 2021) in the federated reading: the "ZeroSarah" row of document 002's
non-convex complexity table, measured on the theory page of the MIFA chapter.

Its round keeps, besides the model, the previous model and a per-client table, and a sampled client computes
its gradient at two models; it runs in its own loop here (:func:`run`), on the quadratic problems of
`flkit.tasks` (their client gradients in closed form), and returns the same :class:`~flkit.papers.mifa.methods.Result`
as the chapter's other methods.
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from flkit.papers import settings
from flkit.papers.mifa.methods import ZEROSARAH, Result, first_median_hit
from flkit.tasks import QuadraticTask, _dpsi

__all__ = ["ZEROSARAH", "run"]


def run(task: QuadraticTask, *, eta, mask: Tensor, lam: float | None = None, lam0: float = 1.0,
        w0: Tensor | None = None, every: int = 1, target: tuple[str, float] | None = None,
        stop_factor: float | None = None, stop_groups: Sequence[int] | None = None,
        diverge_factor: float = 1e6, diverge_ref: float | None = None) -> Result:
    r"""ZeroSARAH in the federated reading, R runs side by side (run r: step eta[r], clients mask[r]).

    Client i is component f_i; S_t = the b clients of round t in `mask` (R, T, n), b the same in every run
    and round (`uniform_k_masks`); the server keeps v, the previous model x_{t-1} and a table y (n x d per
    run, as SAGA), and steps x_{t+1} = x_t - eta v_t with

    .. math:: v_t = \tfrac1b\sum_{i\in S_t}(\nabla f_i(x_t)-\nabla f_i(x_{t-1})) + (1-\lambda_t)v_{t-1}
              + \lambda_t\Big[\tfrac1b\sum_{i\in S_t}(\nabla f_i(x_{t-1})-y_i^{t-1}) + \tfrac1n\sum_j y_j^{t-1}\Big],

    then y_i^t = grad f_i(x_t) for i in S_t. Start: x_{-1} = x_0, v_{-1} = 0, y^{-1} = 0 (no full gradient
    anywhere), lambda_0 = `lam0` (1: v_0 is the sampled clients' mean gradient), lambda_t = `lam` (default
    b/(2n)) for t >= 1. A sampled client computes its gradient at two models (x_t and x_{t-1}): "evals"
    counts 2 per participation (b in round 0, where x_{-1} = x_0). Metrics, targets, divergence (the first
    metric of `task.metrics` beyond diverge_factor x its initial value, or x diverge_ref) and stop_factor /
    stop_groups as in :func:`flkit.papers.mifa.methods.simulate`; a diverged run is frozen. Returns a
    :class:`Result` with the one method "zerosarah"."""
    if mask.dim() != 3 or mask.shape[-1] != task.n:
        raise ValueError(f"mask must be (runs, rounds, n={task.n}) bool, got shape {tuple(mask.shape)}")
    R, T, n = mask.shape
    counts = mask.sum(-1)
    b = int(counts[0, 0]) if T else 0
    if not 1 <= b <= n or not bool((counts == b).all()):
        raise ValueError(f"mask must select the same b clients per round in every run, b in [1, {n}] "
                         f"(got per-round counts from {int(counts.min())} to {int(counts.max())})")
    eta_r = torch.as_tensor(np.broadcast_to(settings.positive(eta, "eta (step size)"), (R,)).copy())
    lam = b / (2 * n) if lam is None else lam
    for name, v in (("lam", lam), ("lam0", lam0)):
        if not (isinstance(v, (int, float)) and 0 < v <= 1):
            raise ValueError(f"{name} (ZeroSARAH's weight of the table term) must lie in (0, 1], got {v!r}")
    settings.positive_int(every, "every")
    A, B = task.problem.A, task.problem.b
    dt = A.dtype
    x = (torch.zeros(R, task.dim, dtype=dt) if w0 is None else torch.as_tensor(w0, dtype=dt).expand(R, -1)).clone()
    xp, v, ybar = x.clone(), torch.zeros_like(x), torch.zeros_like(x)
    y = torch.zeros(R, n, task.dim, dtype=dt)
    rows = torch.arange(R).unsqueeze(1)

    def grads(w, idx):                   # (R, b, d): grad f_i(w_r) of the clients idx[r]
        g = A[idx] * (w.unsqueeze(1) - B[idx])
        return g + task.lam * _dpsi(w).unsqueeze(1) if task.lam else g

    H, h = A.mean(0), (A * B).mean(0)
    c = 0.5 * (A * B * B).mean(0).sum()

    def metrics(w):                      # task.metrics, f in closed form (not a sum over the n clients)
        if not task.lam:
            return task.metrics(w)
        return {"f": 0.5 * (H * w * w).sum(-1) - (h * w).sum(-1) + c + task.lam * (w * w / (1 + w * w)).sum(-1),
                "grad_norm2": task.grad(w).pow(2).sum(-1)}

    hit = torch.full((R,), -1, dtype=torch.long)
    diverged = torch.full((R,), -1, dtype=torch.long)
    evals = torch.zeros(R, dtype=torch.float64)
    met = metrics(x)
    first = next(iter(met.values())).abs().clone() if diverge_ref is None else torch.full((R,), float(diverge_ref))

    def check(met, t):
        m0 = next(iter(met.values()))
        if diverge_factor is not None:
            diverged[(~torch.isfinite(m0) | (m0.abs() > diverge_factor * first)) & (diverged < 0)] = t
        if target is not None:
            hit[(met[target[0]] <= target[1]) & (hit < 0) & (diverged < 0)] = t

    def record(met):
        return {k: torch.where(diverged >= 0, math.inf, vv).numpy().copy() for k, vv in met.items()}

    labels = np.arange(R) if stop_groups is None else np.asarray(stop_groups)
    groups = [torch.as_tensor(np.flatnonzero(labels == g)) for g in np.unique(labels)]
    tic = time.perf_counter()
    check(met, 0)
    store = [(0, record(met))]
    sampled = mask.nonzero()[:, 2].view(R, T, b)      # the clients of every run and round
    for t in range(T):
        alive = diverged < 0
        evals += (b if t == 0 else 2 * b) * ((hit < 0) & alive).double()
        idx = sampled[:, t]
        gx, gp, ys = grads(x, idx), grads(xp, idx), y[rows, idx]
        lt = lam0 if t == 0 else lam
        v = (gx - gp).mean(1) + (1 - lt) * v + lt * ((gp - ys).mean(1) + ybar)
        ybar = ybar + (gx - ys).sum(1) / n
        y[rows, idx] = gx
        a = alive.unsqueeze(1)
        xp, x = torch.where(a, x, xp), torch.where(a, x - eta_r.unsqueeze(1) * v, x)
        met = metrics(x)
        check(met, t + 1)
        done = target is not None and stop_factor is not None and (
            bool(((hit >= 0) | (diverged >= 0)).all())
            or (bool((hit >= 0).any()) and t + 1 >= stop_factor * first_median_hit(hit.unsqueeze(0), groups)))
        if (t + 1) % every == 0 or t + 1 == T or done:
            store.append((t + 1, record(met)))
        if done:
            break
    out = {k: np.stack([s[k] for _, s in store]) for k in store[0][1]}
    return Result(rounds=np.array([t for t, _ in store]), values={ZEROSARAH: out}, hit={ZEROSARAH: hit.numpy()},
                  diverged={ZEROSARAH: diverged.numpy()}, evals={ZEROSARAH: evals.numpy()},
                  wall_s=time.perf_counter() - tic)
