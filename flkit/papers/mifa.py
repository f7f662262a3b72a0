r"""MIFA, unbiased MIFA (U-MIFA) and their momentum variants: the update rules of document 002.

Notation (document 002). n clients, client i is active in round t with probability :math:`p_i`;
:math:`\mathcal A(t)` is the set of active clients. Client i trains :math:`\tau` local steps from
:math:`w_t` and sends the lr-normalised update

.. math:: \Delta w_t^{(i)} = \tfrac1\eta\,(w_t - w_{t,\tau}^{(i)})

(with :math:`\tau = 1` local gradient step, :math:`\Delta w_t^{(i)} = \nabla f_i(w_t)`). The server forms
an aggregate :math:`G_t` and steps :math:`w_{t+1} = w_t - \eta G_t` (momentum variants:
:math:`v_t = \beta v_{t-1} + G_t`, :math:`w_t = w_{t-1} - \eta v_t`).

=====================  =========================================================================  =========
method                 aggregate :math:`G_t`                                                       memory
=====================  =========================================================================  =========
``fedavg_is``          :math:`\frac1n\sum_{i\in\mathcal A(t)} \Delta_i / p_i` (unbiased)            none
``fedavg``             mean of :math:`\Delta_i` over :math:`\mathcal A(t)` (biased; 0 if empty)     none
``mifa``               :math:`\frac1n\sum_i G^{(i)}`, :math:`G^{(i)}\leftarrow\Delta_i` if active    n x d
``umifa``              :math:`G^{(i)}\leftarrow \Delta_i/p_i-(1/p_i-1)G^{(i)}` if active (as written) n x d
``mifam`` / ``umifam``  the same two rules with heavy-ball momentum :math:`\beta`                   n x d (+d)
``umifa_saga``         SAGA form: :math:`G_t=\frac1n\sum_i\big[y_i+\frac{1_{i\in\mathcal A}}{p_i}
                       (\Delta_i-y_i)\big]`, then :math:`y_i\leftarrow\Delta_i` if active             n x d
``umifam_saga``        ``umifa_saga`` with momentum                                                  n x d (+d)
``fedgd``              mean over all n clients (full participation)                                 none
``fedpgd``             mean over b clients drawn uniformly without replacement                      none
=====================  =========================================================================  =========

Memory. Every MIFA-type method keeps one stored update per client on the server: an (n, d) table
per run (here an (R, n, d) tensor for R runs side by side), i.e. as many floats as n copies of the
model. FedAvg, FedGD and FedPGD keep none.

Where we depart from (or add to) the document, and why
  * ``umifa`` is the document's rule read literally: the *stored* entry is the unbiased estimate
    itself. Then, for an active client, :math:`G_t^{(i)} - \Delta_t^{(i)} = (1 - 1/p_i)(G_{t-1}^{(i)} -
    \Delta_t^{(i)})`; for :math:`p_i < 1/2` the factor exceeds 1 in modulus and the stored entries grow
    geometrically (we measure it). ``umifa_saga`` keeps the same unbiased per-client estimate but stores
    the raw update (SAGA; the document's own complexity table is titled "SAGA/U-MIFA"). Both are shown.
  * Memory starts at zero and the run starts at once (the authors' ``fdu_no_wait``; their ``fdu`` waits
    until every client was seen once; hmgxr128/MIFA_code@c1099d9, src/trainers/fdu.py and fdu_no_wait.py).
  * An empty round (no active client) leaves w unchanged for ``fedavg``; MIFA-type methods still step with
    their stored table (momentum methods with their buffer).

Everything runs through the package's one round loop, `flkit.fl.run`, with the rules of
`flkit.aggregate`: :func:`simulate` maps this chapter's methods and step sizes to `fl.Algorithm` s, all
of them rows of one runs axis. The two problems train their clients in closed form (declared fast
tasks): the quadratics exactly, the softmax regression with a batched closed-form gradient that trains the
models of all methods side by side (one matrix product per minibatch). Everything runs on the CPU (the
problems are small): the notebooks' ``device`` parameter is accepted and not used.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from flkit import aggregate, participation
from flkit.papers import settings as _settings
from flkit.seeding import rng
from flkit.tasks import (QuadraticTask, SoftmaxTask, quadratic_task, softmax_task,  # noqa: F401  (the chapter's tasks)
                         symmetric_quadratic, heterogeneous_quadratic, flat_quadratic)
from flkit.tasks import _dpsi

__all__ = [
    "Method", "METHODS", "LABELS", "PROFILES", "profile",
    "QuadraticTask", "quadratic_task", "symmetric_quadratic", "heterogeneous_quadratic", "flat_quadratic", "SoftmaxTask", "softmax_task",
    "bernoulli_masks", "uniform_k_masks", "simulate", "Result", "ZEROSARAH", "zerosarah",
    "umifa_growth_rate", "fit_slope", "PALETTE", "plot_curves", "summary",
    "error_floor", "one_round_monte_carlo", "MOMENTUM_BASE", "best_betas", "momentum_table", "tuned_momentum_checks", "table_error_growth", "step_size_sweep", "rounds_to_epsilon", "EPS_EXPONENT", "epsilon_checks",
]


# ================================================================================================
# methods: each is an flkit.fl.Algorithm built from the rules of flkit.aggregate
# ================================================================================================
@dataclass(frozen=True)
class Method:
    """A method of document 002: its aggregation rule, momentum, and own participation (if any).

    rule: "is" | "active" | "mifa" | "umifa" | "saga" (the `flkit.aggregate` rules KnownP, FedAvg, MIFA,
    UMIFA("literal"), UMIFA("saga")); momentum: server heavy-ball momentum (`aggregate.Momentum`).
    participation: None = the experiment's mask (the same clients on the same rounds for every method);
    "full" = every client every round (FedGD); "uniform_k" = b clients uniformly without replacement (FedPGD)."""
    name: str
    label: str
    rule: str
    momentum: bool = False
    participation: str | None = None

    @property
    def memory(self) -> bool:
        """True when the server keeps one stored update per client (n x d floats per run)."""
        return self.rule in ("mifa", "umifa", "saga")

    def aggregator(self, beta: float = 0.0):
        base = {"is": aggregate.KnownP, "active": aggregate.FedAvg, "mifa": aggregate.MIFA,
                "umifa": lambda: aggregate.UMIFA("literal"), "saga": lambda: aggregate.UMIFA("saga")}[self.rule]()
        return aggregate.Momentum(base, float(beta)) if self.momentum else base


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("fedavg_is", "FedAvg (unbiased, IS)", "is"),
    Method("fedavg", "FedAvg (active clients)", "active"),
    Method("mifa", "MIFA", "mifa"),
    Method("umifa", "U-MIFA", "umifa"),
    Method("mifam", "MIFAm", "mifa", momentum=True),
    Method("umifam", "U-MIFAm", "umifa", momentum=True),
    Method("umifa_saga", "U-MIFA (SAGA memory)", "saga"),
    Method("umifam_saga", "U-MIFAm (SAGA memory)", "saga", momentum=True),
    Method("fedgd", "FedGD (all clients)", "active", participation="full"),
    Method("fedpgd", "FedPGD (b clients)", "active", participation="uniform_k"),
)}
LABELS = {k: m.label for k, m in METHODS.items()} | {"zerosarah": "ZeroSARAH"}   # ZeroSARAH: `zerosarah`, not `simulate`


def _method(method) -> Method:
    if isinstance(method, Method):
        return method
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
    return METHODS[method]


def _apply(rule, table: Tensor, delta: Tensor, active: Tensor, p) -> tuple[Tensor, Tensor]:
    """One `flkit.aggregate` rule on dense inputs: table/delta (R, n, d), active (R, n), p float or (R, n).
    Returns (G (R, d), new table)."""
    from flkit.aggregate import TableState, Updates
    R, n, _ = delta.shape
    pairs = active.nonzero()
    pt = torch.as_tensor(p, dtype=delta.dtype).expand(R, n)
    upd = Updates(pairs, delta[pairs[:, 0], pairs[:, 1]], torch.ones(len(pairs), dtype=delta.dtype), R, n, pt)
    G, st = rule.apply(TableState(table), upd)
    return G, st.table
# ================================================================================================
# participation masks and the simulation loop
# ================================================================================================
def bernoulli_masks(seeds: Sequence[int], p, rounds: int, num_clients: int) -> Tensor:
    """(R, T, n) bool: `flkit.participation.bernoulli(p, rounds, seed)` for every seed (p scalar or (n,))."""
    seeds = _settings.seeds(seeds, distinct=False)
    pv = np.broadcast_to(np.asarray(p, dtype=float), (num_clients,))
    return torch.as_tensor(np.stack([participation.bernoulli(pv, rounds, int(s)) for s in seeds]))


def uniform_k_masks(seeds: Sequence[int], k: int, rounds: int, num_clients: int) -> Tensor:
    """(R, T, n) bool: `flkit.participation.uniform_k(n, k, rounds, seed)` for every seed."""
    seeds = _settings.seeds(seeds, distinct=False)
    one = {int(s): participation.uniform_k(num_clients, k, rounds, int(s)) for s in dict.fromkeys(seeds)}
    return torch.as_tensor(np.stack([one[int(s)] for s in seeds]))


@dataclass
class Result:
    """Output of :func:`simulate`. values[method][metric]: (K, R) array at rounds `rounds` (K,);
    hit[method]: (R,) first round at which the target was met (-1: never); diverged[method]: (R,) first
    round at which the run was declared diverged (-1: never); evals[method]: (R,) client updates computed
    until the target was hit (or until the end); wall_s: seconds."""
    rounds: np.ndarray
    values: dict
    hit: dict
    diverged: dict
    evals: dict
    wall_s: float

    def outcomes(self, runs: pd.DataFrame | None = None) -> pd.DataFrame:
        """Tidy table of per-run outcomes (round column = 0): metrics "hit_round" (first round meeting the
        target, -1: never), "diverged_round" (-1: never) and "client_updates" (client updates computed
        until the target was met or the end)."""
        frames = []
        for meth in self.hit:
            R = len(self.hit[meth])
            for met, arr in (("hit_round", self.hit[meth]), ("diverged_round", self.diverged[meth])):
                v = arr.astype(float)                     # -1: never (kept finite for the store)
                frames.append(pd.DataFrame({"method": meth, "run": np.arange(R), "round": 0, "metric": met, "value": v}))
            frames.append(pd.DataFrame({"method": meth, "run": np.arange(R), "round": 0, "metric": "client_updates",
                                        "value": self.evals[meth].astype(float)}))
        df = pd.concat(frames, ignore_index=True)
        if runs is not None:
            df = df.merge(runs.reset_index(drop=True).rename_axis("run").reset_index(), on="run")
        return df

    def tidy(self, runs: pd.DataFrame | None = None) -> pd.DataFrame:
        """One row per method x run x round x metric; `runs` (one row per run, e.g. seed/eta/p columns)
        is joined on the run index."""
        frames = []
        for meth, mets in self.values.items():
            for met, arr in mets.items():
                K, R = arr.shape
                frames.append(pd.DataFrame({"method": meth, "run": np.tile(np.arange(R), K),
                                            "round": np.repeat(self.rounds, R), "metric": met,
                                            "value": arr.reshape(-1)}))
        df = pd.concat(frames, ignore_index=True)
        if runs is not None:
            df = df.merge(runs.reset_index(drop=True).rename_axis("run").reset_index(), on="run")
        return df


def simulate(task, methods: Sequence[str], *, seeds: Sequence[int], eta, p, rounds: int, mask: Tensor | None = None,
             beta=0.0, b: int | None = None, w0: Tensor | None = None, every: int = 1,
             target: tuple[str, float] | None = None, stop_early: bool = True, stop_factor: float | None = None,
             stop_groups: Sequence[int] | None = None, diverge_factor: float = 1e6, diverge_ref: float | None = None,
             progress: bool = False, desc: str | None = None) -> Result:
    """Run `methods` side by side for R = len(seeds) runs (run r uses seeds[r], eta[r], p[r], beta[r]) through
    `flkit.fl.run`: each method at each distinct (eta, beta, p) is one `fl.Algorithm` (server and local step
    size eta, the method's `flkit.aggregate` rule), run r one row of the runs axis.

    mask: (R, rounds, n) bool participation shared by every method whose participation is None (default:
    Bernoulli(p) masks from `bernoulli_masks`); FedGD uses all clients; FedPGD draws b clients per round
    with `uniform_k_masks`. p: the p_i the server divides by (float, (n,) or (R, n)). Metrics are recorded at
    rounds 0, every, 2 every, ..., rounds; divergence and targets as in `flkit.fl.run`. stop_factor: the loop
    also ends at round stop_factor x (the first round by which the median run of some group of
    `stop_groups` (R,) labels, e.g. one step size over all seeds, has hit, for every method; each run is
    its own group by default): enough to find the fastest configuration of a step-size grid (by median
    over seeds) without waiting for the slowest one."""
    from flkit import fl
    if not len(methods):
        raise ValueError(f"methods is empty: choose among {sorted(METHODS)}")
    meths = [_method(mm) for mm in methods]
    seeds = _settings.seeds(seeds, "seeds (one per run)", distinct=False)
    R, n = len(seeds), task.n
    _settings.positive_int(rounds, "rounds")
    eta_r = np.broadcast_to(_settings.positive(eta, "eta (step size)"), (R,))
    beta_r = np.broadcast_to(_settings.momentum(beta, "beta (momentum)"), (R,))
    p_arr = _settings.probabilities(p, "p").reshape(np.shape(p))
    p_rn = np.broadcast_to(p_arr if p_arr.ndim == 2 else p_arr.reshape(1, -1), (R, n))
    if mask is None and any(mm.participation is None for mm in meths):
        if not np.allclose(p_rn, p_rn[:1]):
            raise ValueError("give `mask` explicitly when p differs between runs")
        mask = bernoulli_masks(seeds, p_rn[0], rounds, n)
    if any(mm.participation == "uniform_k" for mm in meths) and b is None:
        raise ValueError("fedpgd needs b (clients per round)")
    hyper = {}                                   # (eta, beta, p) -> run indices, in order of appearance
    for r in range(R):
        hyper.setdefault((eta_r[r], beta_r[r], tuple(p_rn[r])), []).append(r)
    algorithms, seed_lists, where = {}, {}, {}
    for mm in meths:
        for j, (key, idx) in enumerate(hyper.items()):
            run_seeds = [seeds[r] for r in idx]
            if len(set(run_seeds)) != len(run_seeds):
                raise ValueError("each seed may appear once per (eta, beta, p) setting")
            if mm.participation == "full":
                avail = "all"
            elif mm.participation == "uniform_k":
                avail = {s: participation.uniform_k(n, b, rounds, s) for s in run_seeds}
            else:
                avail = {seeds[r]: mask[r].numpy() for r in idx}
            name = f"{mm.name}|{j}"
            algorithms[name] = fl.Algorithm(mm.aggregator(key[1]), lr=key[0], local_lr=key[0], availability=avail,
                                            p=np.asarray(key[2]))
            seed_lists[name] = run_seeds
            where.update({(mm.name, r): (name, k) for k, r in enumerate(idx)})
    stop_when = None
    if stop_factor is not None:
        labels = np.arange(R) if stop_groups is None else np.asarray(stop_groups)
        groups = [torch.as_tensor(np.flatnonzero(labels == g)) for g in np.unique(labels)]
        order = _row_order(algorithms, seed_lists, where, meths, R)

        def stop_when(hit, diverged, t):
            h = hit[order]
            done = stop_early and bool(((h >= 0) | (diverged[order] >= 0)).all())
            return done or (bool((h >= 0).any()) and t >= stop_factor * _first_median_hit(h, groups))
    res = fl.run(task, algorithms, seeds=seed_lists, rounds=rounds, w0=_w0_rows(w0, where, meths, algorithms,
                 seed_lists, task), every=every, target=target, stop_early=stop_early or stop_factor is not None,
                 stop_when=stop_when, diverge_factor=diverge_factor, diverge_ref=diverge_ref, progress=progress,
                 desc=desc)
    back = lambda d, mm: np.stack([d[where[(mm.name, r)][0]][..., where[(mm.name, r)][1]] for r in range(R)], -1)  # noqa: E731
    values = {mm.name: {k: back({a: res.values[a][k] for a in algorithms}, mm)
                        for k in next(iter(res.values.values()))} for mm in meths}
    return Result(rounds=res.rounds, values=values, hit={mm.name: back(res.hit, mm) for mm in meths},
                  diverged={mm.name: back(res.diverged, mm) for mm in meths},
                  evals={mm.name: back(res.evals, mm) for mm in meths}, wall_s=res.wall_s)


def _row_order(algorithms, seed_lists, where, meths, R) -> Tensor:
    """(M, R) indices into fl.run's rows of (method m, run r)."""
    start, pos = {}, 0
    for a in algorithms:
        start[a] = pos
        pos += len(seed_lists[a])
    return torch.tensor([[start[where[(mm.name, r)][0]] + where[(mm.name, r)][1] for r in range(R)] for mm in meths])


def _w0_rows(w0, where, meths, algorithms, seed_lists, task):
    """w0 (d,) or (R, d) of the simulate runs, laid out on fl.run's rows."""
    if w0 is None:
        return None
    w0 = torch.as_tensor(w0)
    if w0.dim() == 1 or w0.shape[0] == 1:
        return w0.reshape(-1)
    order = _row_order(algorithms, seed_lists, where, meths, w0.shape[0])
    out = torch.empty(sum(len(s) for s in seed_lists.values()), w0.shape[-1], dtype=w0.dtype)
    for m in range(len(meths)):
        out[order[m]] = w0
    return out


# ================================================================================================
# ZeroSARAH (Li, Hanzely and Richtarik 2021): the "ZeroSarah" row of the non-convex table
# ================================================================================================
ZEROSARAH = "zerosarah"


def zerosarah(task: QuadraticTask, *, eta, mask: Tensor, lam: float | None = None, lam0: float = 1.0,
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
    stop_groups as in :func:`simulate`; a diverged run is frozen. Returns a :class:`Result` with the one
    method "zerosarah"."""
    if mask.dim() != 3 or mask.shape[-1] != task.n:
        raise ValueError(f"mask must be (runs, rounds, n={task.n}) bool, got shape {tuple(mask.shape)}")
    R, T, n = mask.shape
    counts = mask.sum(-1)
    b = int(counts[0, 0]) if T else 0
    if not 1 <= b <= n or not bool((counts == b).all()):
        raise ValueError(f"mask must select the same b clients per round in every run, b in [1, {n}] "
                         f"(got per-round counts from {int(counts.min())} to {int(counts.max())})")
    eta_r = torch.as_tensor(np.broadcast_to(_settings.positive(eta, "eta (step size)"), (R,)).copy())
    lam = b / (2 * n) if lam is None else lam
    for name, v in (("lam", lam), ("lam0", lam0)):
        if not (isinstance(v, (int, float)) and 0 < v <= 1):
            raise ValueError(f"{name} (ZeroSARAH's weight of the table term) must lie in (0, 1], got {v!r}")
    _settings.positive_int(every, "every")
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
            or (bool((hit >= 0).any()) and t + 1 >= stop_factor * _first_median_hit(hit.unsqueeze(0), groups)))
        if (t + 1) % every == 0 or t + 1 == T or done:
            store.append((t + 1, record(met)))
        if done:
            break
    out = {k: np.stack([s[k] for _, s in store]) for k in store[0][1]}
    return Result(rounds=np.array([t for t, _ in store]), values={ZEROSARAH: out}, hit={ZEROSARAH: hit.numpy()},
                  diverged={ZEROSARAH: diverged.numpy()}, evals={ZEROSARAH: evals.numpy()},
                  wall_s=time.perf_counter() - tic)


# ================================================================================================
# small analysis helpers
# ================================================================================================
def _first_median_hit(hit: Tensor, group_idx) -> float:
    """Earliest round at which the median run of some group has hit, taken over methods (max): inf if none."""
    out = 0.0
    for j in range(hit.shape[0]):
        best = math.inf
        for idx in group_idx:
            h = hit[j, idx]
            k = (len(idx) + 1) // 2
            if int((h >= 0).sum()) >= k:
                best = min(best, float(torch.sort(torch.where(h >= 0, h, torch.iinfo(h.dtype).max)).values[k - 1]))
        out = max(out, best)
    return out


def umifa_growth_rate(p: float) -> float:
    r"""Almost-sure growth rate per round of the literal U-MIFA table error with a fixed target:
    when active (prob. p) the error is multiplied by :math:`1 - 1/p`, so
    :math:`\frac1t\log|e_t| \to p\log|1/p - 1|` (> 0 iff p < 1/2; -inf at p = 1, where one
    participation makes the entry exact)."""
    p = float(_settings.probabilities(p, "p")[0])
    if p == 1.0:
        return -math.inf
    return p * math.log(abs(1.0 / p - 1.0)) if p != 0.5 else 0.0


def fit_slope(x, y) -> tuple[float, float]:
    """Least-squares slope and intercept of log(y) against log(x) (finite, positive points only)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    if ok.sum() < 2:
        return float("nan"), float("nan")
    s, c = np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)
    return float(s), float(c)


# ================================================================================================
# plotting and reading helpers for the notebooks
# ================================================================================================
PALETTE = {"fedavg_is": "0.45", "fedavg": "tab:brown", "mifa": "tab:blue", "mifam": "tab:cyan",
           "umifa": "tab:red", "umifam": "tab:orange", "umifa_saga": "tab:green", "umifam_saga": "tab:olive",
           "fedgd": "black", "fedpgd": "tab:purple", "zerosarah": "tab:pink"}


def plot_curves(df: pd.DataFrame, metric: str, ax=None, methods: Sequence[str] | None = None, log: bool = True,
                band: str = "minmax", mark_diverged: bool = True):
    """Mean over seeds per method with a min-max band (`flkit.plots.curves`), momentum methods dashed,
    diverged runs marked with an x at their round of divergence (``mark_diverged=False`` leaves the marks
    out, e.g. on an accuracy axis where an x at the top would read as a value; the means are the same)."""
    from flkit import plots
    methods = [m for m in (methods or METHODS) if m in set(df["method"])]
    data = df[(df["metric"] == metric) & df["method"].isin(methods)]
    ax = plots.curves(data, hue="method", metric=metric, band=band, log=log, label_map=LABELS,
                      palette=PALETTE, order=methods, units="seed" if "seed" in data else None, ax=ax)
    momentum = {LABELS[m] for m in methods if METHODS[m].momentum}
    for line in ax.get_lines():
        if any(str(line.get_label()).startswith(lab) for lab in momentum) and line.get_linestyle() != "None":
            line.set_linestyle("--")
    if not mark_diverged:
        for line in ax.get_lines():
            if line.get_marker() == "x" and line.get_linestyle() == "None":
                line.remove()
    ax.legend(ncol=1, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return ax


def summary(df: pd.DataFrame, metric: str, threshold: float | None = None) -> pd.DataFrame:
    """Per method: median final value over seeds, runs that diverged, and (with `threshold`) the median
    first recorded round at which the metric is <= threshold (NaN when a majority never gets there)."""
    rows = []
    d = df[df["metric"] == metric]
    for meth, g in d.groupby("method", sort=False):
        last = g[g["round"] == g["round"].max()]
        runs = g.groupby("seed")
        div = int(sum(1 for _, r in runs if not np.isfinite(r["value"]).all()))
        row = {"method": meth, "label": LABELS.get(meth, meth), "final (median)": float(np.median(last["value"])),
               "diverged runs": f"{div}/{runs.ngroups}"}
        if threshold is not None:
            firsts = [r.loc[r["value"] <= threshold, "round"].min() for _, r in runs]
            row[f"rounds to {threshold:g} (median)"] = float(np.median([np.inf if pd.isna(f) else f for f in firsts]))
        rows.append(row)
    return pd.DataFrame(rows).set_index("method")


# ================================================================================================
# experiments of the theory page (each returns a tidy table: round, metric, value + columns)
# ================================================================================================
def error_floor(task: QuadraticTask, methods: Sequence[str], *, etas, ps, seeds, rounds: int,
                start: str = "zero") -> pd.DataFrame:
    """Constant-step runs on a grid eta x p x seed (Bernoulli(p) participation, masks per run from
    `flkit.participation.bernoulli`). Per run and method: "avg_all" = (1/T) sum_{t<T} ||grad f(w_t)||^2,
    "avg_tail" = the same over t in [T/2, T) (the stationary floor), "avg_from1" = (1/(T-1)) sum_{1<=t<T},
    "avg_q2" / "avg_q4" = the same over the second / last quarter, "gap0" = f(w_0) - f*,
    "gap1" = f(w_1) - f*, "tau_max" = longest run of rounds any client was absent. Needs rounds >= 4 (every
    quarter non-empty)."""
    _settings.positive_int(rounds, "rounds", 4)
    etas, ps, seeds = _settings.positive(etas, "etas"), _settings.probabilities(ps, "ps"), _settings.seeds(seeds)
    if start not in ("zero", "optimum"):
        raise ValueError(f"start must be 'zero' or 'optimum', got {start!r}")
    runs = pd.DataFrame([(int(s), float(e), float(p)) for p in ps for e in etas for s in seeds],
                        columns=["seed", "eta", "p"])
    n, d, T = task.n, task.dim, int(rounds)
    mask = torch.as_tensor(np.stack([participation.bernoulli(np.full(n, r.p), T, r.seed) for r in runs.itertuples()]))
    p_rn = torch.tensor(runs["p"].to_numpy())[:, None].expand(-1, n)
    w0 = (torch.zeros(len(runs), d, dtype=torch.float64) if start == "zero"
          else task.problem.w_star.expand(len(runs), -1).clone())
    ref = float(task.metrics(torch.zeros(1, d, dtype=torch.float64))["gap"][0])
    res = simulate(task, methods, seeds=runs["seed"].tolist(), eta=runs["eta"].to_numpy(), p=p_rn, mask=mask,
                   rounds=T, every=1, w0=w0, diverge_ref=ref)
    tau = _longest_absence(mask.numpy())
    frames = []
    for m in methods:
        g = res.values[m]["grad_norm2"]
        gap = res.values[m]["gap"]
        vals = {"avg_all": g[:T].mean(0), "avg_tail": g[T // 2:T].mean(0), "avg_from1": g[1:T].mean(0),
                "avg_q2": g[T // 4:T // 2].mean(0), "avg_q4": g[3 * T // 4:T].mean(0),
                "gap0": gap[0], "gap1": gap[1], "tau_max": tau}
        for k, v in vals.items():
            frames.append(runs.assign(method=m, round=T, metric=k, value=np.asarray(v, dtype=float)))
    return pd.concat(frames, ignore_index=True).assign(start=start)


def _longest_absence(mask: np.ndarray) -> np.ndarray:
    """(R,) longest stretch of consecutive rounds in which some client was absent (mask (R, T, n))."""
    R, T, n = mask.shape
    best = np.zeros(R)
    run = np.zeros((R, n))
    for t in range(T):
        run = np.where(mask[:, t], 0, run + 1)
        best = np.maximum(best, run.max(1))
    return best


def one_round_monte_carlo(task: QuadraticTask, *, p: float, t0: int, draws: int, seed: int = 0,
                          eta: float = 0.02) -> pd.DataFrame:
    """Conditional (one-round) Monte Carlo of the stored entries G_t^(i).

    A MIFA run (seed `seed`, Bernoulli(p), step eta) gives the state at round t0: the table G_{t-1} and
    w_t, hence Delta_t^(i) = grad f_i(w_t). From that fixed state the round-t participation is redrawn
    `draws` times and the new entry is formed by MIFA, by U-MIFA as written, and by the SAGA-form estimate
    (all three from the same G_{t-1}). Rows per rule, client i and coordinate j: "mean_minus_delta"
    (Monte Carlo E[G_t^(i)] - Delta_t^(i)), "std_error", "predicted" ((1-p)(G_{t-1} - Delta) for MIFA, 0
    for the unbiased rules); per rule: "mse" = E||grad f(w_t) - G_t||^2 with its standard error "mse_se",
    and the document's expressions "mse_formula" ((1-p)/n sum_i ||grad f_i - G_{t-1}^(i)||^2 for MIFA,
    an upper bound; (1-p)/(n^2 p) sum_i ||...||^2 for U-MIFA, exact)."""
    from flkit import aggregate, fl
    n, d = task.n, task.dim
    _settings.positive_int(t0, "t0 (rounds of MIFA before the Monte Carlo round)")
    _settings.positive_int(draws, "draws", 2)
    _settings.probabilities(p, "p")
    _settings.positive(eta, "eta")
    mask = bernoulli_masks([seed], p, t0, n)
    res = fl.run(task, {"mifa": fl.Algorithm(aggregate.MIFA(), lr=eta, local_lr=eta)}, seeds=[seed], rounds=t0,
                 availability={seed: mask[0].numpy()}, every=t0)
    G_prev, w = res.final["mifa"].table[0], res.final_w[:1]
    delta = task.client_grads(w)[0]
    grad = delta.mean(0)
    gen = torch.Generator().manual_seed(int(rng(seed, "monte-carlo").integers(2**62)))
    act = torch.rand(draws, n, generator=gen, dtype=torch.float64) < p
    mem = G_prev.expand(draws, -1, -1)
    dl = delta.expand(draws, -1, -1)
    rules = {"mifa": lambda: _apply(aggregate.MIFA(), mem, dl, act, p),
             "umifa": lambda: _apply(aggregate.UMIFA("literal"), mem, dl, act, p),
             "umifa_saga": lambda: _saga_estimates(mem, dl, act, p)}
    rows = []
    base = (G_prev - delta).pow(2).sum(-1).sum()
    for name, fn in rules.items():
        g_t, entries = fn()
        mean, se = entries.mean(0) - delta, entries.std(0) / math.sqrt(draws)
        pred = (1 - p) * (G_prev - delta) if name == "mifa" else torch.zeros_like(delta)
        for metric, arr in (("mean_minus_delta", mean), ("std_error", se), ("predicted", pred)):
            for i in range(n):
                for j in range(d):
                    rows.append({"rule": name, "client": i, "coord": j, "metric": metric, "value": float(arr[i, j])})
        err = (g_t - grad).pow(2).sum(-1)
        formula = (1 - p) / n * base if name == "mifa" else (1 - p) / (n * n * p) * base
        for metric, v in (("mse", err.mean()), ("mse_se", err.std() / math.sqrt(draws)), ("mse_formula", formula)):
            rows.append({"rule": name, "client": -1, "coord": -1, "metric": metric, "value": float(v)})
    return pd.DataFrame(rows).assign(round=t0, p=p)


def _saga_estimates(memory, delta, active, p):
    """U-MIFA's per-client unbiased estimates y_i + 1_{i active}/p (Delta_i - y_i) and their mean."""
    a = active.unsqueeze(-1)
    est = memory + torch.where(a, (delta - memory) / p, torch.zeros((), dtype=delta.dtype))
    return est.mean(1), est


def table_error_growth(ps, *, rounds: int, runs: int, n: int = 10, seed: int = 0) -> pd.DataFrame:
    """Stored-entry error |G_t^(i) - Delta^(i)| with a fixed target Delta = 1 (the server does not move):
    U-MIFA as written multiplies it by (1 - 1/p) at each participation; with SAGA memory it is 0 after the
    first one. Rows per p and round: "log10_median_err" (median over runs x clients; literal rule),
    "predicted_log10" (t p log10|1/p - 1|), "saga_frac_nonzero" (fraction of SAGA entries not yet exact)."""
    from flkit import aggregate
    ps = _settings.probabilities(ps, "ps")
    _settings.positive_int(rounds, "rounds")
    _settings.positive_int(runs, "runs")
    _settings.positive_int(n, "n")
    frames = []
    for p in ps:
        mask = bernoulli_masks(list(range(seed, seed + runs)), p, rounds, n)
        delta = torch.ones(runs, n, 1, dtype=torch.float64)
        mem = torch.zeros(runs, n, 1, dtype=torch.float64)
        y = torch.zeros(runs, n, 1, dtype=torch.float64)
        out = []
        for t in range(rounds + 1):
            err = (mem - delta).abs().flatten()
            out.append((t, float(torch.log10(err).median()), t * umifa_growth_rate(p) / math.log(10),
                        float(((y - delta).abs() > 0).double().mean())))
            if t < rounds:
                _, mem = _apply(aggregate.UMIFA("literal"), mem, delta, mask[:, t], p)
                _, y = _apply(aggregate.UMIFA("saga"), y, delta, mask[:, t], p)
        df = pd.DataFrame(out, columns=["round", "log10_median_err", "predicted_log10", "saga_frac_nonzero"])
        frames.append(df.melt(id_vars="round", var_name="metric", value_name="value").assign(p=p))
    return pd.concat(frames, ignore_index=True)


def step_size_sweep(task: QuadraticTask, methods: Sequence[str], *, eta_L, seeds, rounds: int, b: int = 1,
                    tol: float = 1e-3) -> pd.DataFrame:
    """Every method at every step size eta = eta_L / L and seed, b clients per round uniformly without
    replacement (p_i = b/n; the same masks for every method), for `rounds` rounds from w_0 = 0; "zerosarah"
    runs through :func:`zerosarah` (lambda = b/(2n)), the others through :func:`simulate`. "stable" = 1 when the run never diverged and
    ends with ||grad f||^2 <= tol x its initial value (a bounded but non-converging orbit does not count);
    "final_ratio" = final / initial ||grad f||^2 (-1: diverged)."""
    eta_L, seeds = _settings.positive(eta_L, "eta_L"), _settings.seeds(seeds)
    _settings.positive_int(rounds, "rounds")
    _settings.positive(tol, "tol")
    if not 1 <= _settings.positive_int(b, "b") <= task.n:
        raise ValueError(f"b (clients per round) must lie in [1, {task.n}], got {b}")
    runs = pd.DataFrame([(int(s), float(e)) for e in eta_L for s in seeds], columns=["seed", "eta_L"])
    n = task.n
    mask = uniform_k_masks(runs["seed"].tolist(), b, rounds, n)
    eta = runs["eta_L"].to_numpy() / task.L
    others = [m for m in methods if m != ZEROSARAH]
    res = (simulate(task, others, seeds=runs["seed"].tolist(), eta=eta, p=b / n, mask=mask, rounds=rounds, every=rounds)
           if others else None)
    zs = zerosarah(task, eta=eta, mask=mask, every=rounds) if ZEROSARAH in methods else None
    frames = []
    for m in methods:
        r = zs if m == ZEROSARAH else res
        g = r.values[m]["grad_norm2"]
        ratio = g[-1] / g[0]
        stable = (r.diverged[m] < 0) & np.isfinite(ratio) & (ratio <= tol)
        for k, v in (("stable", stable.astype(float)), ("final_ratio", np.where(np.isfinite(ratio), ratio, -1.0))):
            frames.append(runs.assign(method=m, round=rounds, metric=k, value=v))
    return pd.concat(frames, ignore_index=True).assign(n=n)


def rounds_to_epsilon(task: QuadraticTask, method: str, *, eta_L, seeds, max_rounds: int, metric: str, eps_rel: float,
                      b: int = 1, stop_factor: float = 4.0) -> pd.DataFrame:
    """First round with metric <= eps_rel x its initial value, for every step size eta = eta_L / L and
    seed; b clients per round uniformly without replacement (FedPGD, SAGA/U-MIFA, MIFA) or all (FedGD).
    The runs stop at stop_factor x the first round by which the median seed of some step size has hit.
    Rows: "hit_round" (-1: not within the rounds run) and "client_updates" (client gradients computed
    until then: one per participation; ZeroSARAH, method "zerosarah" (:func:`zerosarah`, lambda = b/(2n)),
    computes two, at x_t and x_{t-1}) per run."""
    eta_L, seeds = _settings.positive(eta_L, "eta_L"), _settings.seeds(seeds)
    _settings.positive_int(max_rounds, "max_rounds")
    if not 0 < eps_rel < 1:
        raise ValueError(f"eps_rel (target relative to the initial {metric}) must lie in (0, 1), got {eps_rel}")
    if not 1 <= _settings.positive_int(b, "b") <= task.n:
        raise ValueError(f"b (clients per round) must lie in [1, {task.n}], got {b}")
    if not stop_factor >= 1:
        raise ValueError(f"stop_factor must be >= 1 (a multiple of the first median hit), got {stop_factor}")
    runs = pd.DataFrame([(int(s), float(e)) for e in eta_L for s in seeds], columns=["seed", "eta_L"])
    n = task.n
    w0 = torch.zeros(1, task.dim, dtype=torch.float64)
    eps = eps_rel * float(task.metrics(w0)[metric][0])
    mask = uniform_k_masks(runs["seed"].tolist(), b, max_rounds, n)
    eta, groups = runs["eta_L"].to_numpy() / task.L, pd.factorize(runs["eta_L"])[0]
    if method == ZEROSARAH:
        res = zerosarah(task, eta=eta, mask=mask, every=max_rounds, target=(metric, eps), stop_factor=stop_factor,
                        stop_groups=groups)
    else:
        res = simulate(task, [method], seeds=runs["seed"].tolist(), eta=eta, p=b / n, mask=mask, b=b,
                       rounds=max_rounds, every=max_rounds, target=(metric, eps), stop_factor=stop_factor,
                       stop_groups=groups)
    out = res.outcomes(runs)
    return out[out["metric"].isin(["hit_round", "client_updates"])].assign(n=n, eps=eps)


# the tables' epsilon-dependence: complexity ~ (1/eps)^a, a per criterion ("gap": the convex table's
# min_t f(x_t) - f*; "grad_norm2": the non-convex table's min_t ||grad f(x_t)||^2) and method
EPS_EXPONENT = {"gap": {"fedgd": 1.0, "fedpgd": 2.0, "umifa_saga": 1.0},
                "grad_norm2": {"fedgd": 1.0, "fedpgd": 2.0, "umifa_saga": 1.0}}


def epsilon_checks(expo: pd.DataFrame) -> dict:
    """The theory page's section 6: `expo` has one row per (criterion, method) with the table's exponent
    a ("table exponent") and the measured one ("measured exponent": minus the log-log slope of the best
    step's cost against eps over the smallest eps of the grid), on a convex, not strongly convex problem.
    Convex table (criterion "gap"): the measured exponent is the table's within SLOPE_TOL. Non-convex table
    (criterion "grad_norm2"): a convex problem can only show that the table's rate is not exceeded
    (measured <= table + SLOPE_TOL); it cannot test how tight a non-convex bound is."""
    from flkit.papers import claims
    rows = {"fedgd": "FedGD", "fedpgd": "FedPGD", "umifa_saga": "SAGA/U-MIFA"}
    conv, nonconv = [], []
    for _, r in expo.iterrows():
        a, m = float(r["table exponent"]), float(r["measured exponent"])
        if r["criterion"] == "gap":
            conv.append(claims.holds(
                f"{rows[r['method']]}: complexity to min_t f(x_t) - f* <= eps grows like (1/eps)^{m:.2f}, the table's "
                f"exponent {a:g} within {SLOPE_TOL}", bool(np.isfinite(m) and abs(m - a) <= SLOPE_TOL),
                "|measured - table exponent| <= 0.15", ours=m, reference=a))
        else:
            nonconv.append(claims.holds(
                f"{rows[r['method']]}: complexity to min_t ||grad f(x_t)||^2 <= eps grows like (1/eps)^{m:.2f}, not "
                f"faster than the table's exponent {a:g} (+{SLOPE_TOL}; a convex problem tests the bound, not its "
                f"tightness)", bool(np.isfinite(m) and m <= a + SLOPE_TOL), "measured exponent <= table's + 0.15",
                ours=m, reference=a))
    return {"Convex table: epsilon-dependence of the complexities": conv,
            "Non-convex table: epsilon-dependence of the complexities": nonconv}


# ================================================================================================
# the notebooks' profiles: "smoke" (seconds, for CI) and "paper" (the setting of the book's pages)
# ================================================================================================
PROFILES = {
    "quadratic": {
        "smoke": dict(seeds=[0, 1], p_values=[0.01, 0.1, 0.5], rounds={0.01: 600, 0.1: 300, 0.5: 200},
                      eta=0.02, betas=[0.0, 0.5, 0.9]),
        "paper": dict(seeds=list(range(10)), p_values=[0.01, 0.1, 0.5], rounds={0.01: 10000, 0.1: 2000, 0.5: 2000},
                      eta=0.02, betas=[0.0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95]),
    },
    "theory": {
        "smoke": dict(seeds=[0], floor=dict(etas=[0.005, 0.02], ps=[0.1, 0.5], rounds=2000),
                      mc=dict(ps=[0.1, 0.5], t0=30, draws=4000), growth=dict(ps=[0.1, 0.5, 0.9], rounds=60, runs=20),
                      step=dict(ns=[8, 16], rounds_per_n=20, k=(-8, 6)),
                      cx=dict(ns=[8, 16], eps_rel={"convex": 1e-2, "nonconvex": 1e-2}, fedpgd_rounds=3000, seeds=[0, 1]),
                      eps=dict(n=8, eps_rel={"gap": [0.1, 0.03, 0.01], "grad_norm2": [1e-2, 1e-3, 1e-4]},
                               fedpgd_rounds=5000, saga_rounds=5000),
                      onestep=dict(ps=[0.1, 0.5], etas_L=[0.2, 1.0], states_at=[0, 10], draws=2000),
                      general=dict(ps=[0.1, 0.5], etas_L=[0.5, 1.0], states_at=[5, 30], seeds=[0], draws=2000),
                      gd=dict(ns=[8, 16], k=(-4, 4), gd_rounds=200, pgd_rounds=300),
                      zs=dict(eps_n=16, eps_list=[1e-2, 1e-4], boot=200)),
        "paper": dict(seeds=[0, 1, 2, 3, 4], floor=dict(etas=[0.0025, 0.005, 0.01, 0.02, 0.04, 0.08],
                                                       ps=[0.05, 0.1, 0.2, 0.5, 0.8], rounds=20000),
                      mc=dict(ps=[0.1, 0.5], t0=50, draws=100_000), growth=dict(ps=[0.1, 0.3, 0.5, 0.7, 0.9], rounds=300, runs=200),
                      step=dict(ns=[16, 32, 64, 128, 256], rounds_per_n=50, k=(-14, 6)),
                      cx=dict(ns=[16, 32, 64, 128, 256], eps_rel={"convex": 1e-3, "nonconvex": 1e-4}, fedpgd_rounds=15000,
                              seeds=list(range(10))),
                      eps=dict(n=16, eps_rel={"gap": [0.1, 0.0316, 0.01, 0.00316, 0.001], "grad_norm2": [1e-2, 1e-3, 1e-4, 1e-5]},
                               fedpgd_rounds=200_000, saga_rounds=60_000),
                      onestep=dict(ps=[0.05, 0.1, 0.5], etas_L=[0.05, 0.2, 0.5, 1.0], states_at=[0, 10, 100, 1000],
                                   draws=20_000),
                      general=dict(ps=[0.1, 0.5], etas_L=[0.04, 0.5, 1.0], states_at=[5, 30, 200], seeds=[0, 1],
                                   draws=20_000),
                      gd=dict(ns=[16, 32, 64, 128, 256], k=(-6, 4), gd_rounds=400, pgd_rounds=1000),
                      zs=dict(eps_n=64, eps_list=[1e-2, 1e-4, 1e-6, 1e-8], boot=1000)),
    },
    "logistic": {
        "smoke": dict(seeds=[0], p_values=[0.01, 0.1, 0.5], rounds={0.01: 40, 0.1: 10, 0.5: 6}, eta=0.01, beta=0.5,
                      subset=40, betas=[0.9]),
        "paper": dict(seeds=[0, 1, 2], p_values=[0.01, 0.1, 0.5], rounds={0.01: 2000, 0.1: 200, 0.5: 200},
                      eta=0.01, beta=0.5, subset=None, betas=[0.7, 0.9, 0.95]),
    },
}


def profile(page: str, name: str, **overrides) -> dict:
    """The settings of notebook `page` ("quadratic", "theory", "logistic") under profile `name`, with the
    top-level settings given in `overrides` (the notebook's parameters; None keeps the profile's value),
    all checked before any work (`flkit.papers.settings.check_profile`: rounds >= 1, seeds
    non-empty and distinct, probabilities in (0, 1], step sizes > 0, momentum in [0, 1), and a number of
    rounds for every p); a clear error names the bad value and the allowed ones."""
    if page not in PROFILES:
        raise ValueError(f"unknown page {page!r}; choose one of {sorted(PROFILES)}")
    if name not in PROFILES[page]:
        raise ValueError(f"unknown profile {name!r} for the {page} page; choose one of {sorted(PROFILES[page])}")
    import copy
    where = f"{page} profile {name!r}"
    cfg = _settings.with_overrides(copy.deepcopy(PROFILES[page][name]), overrides, where)
    if "p_values" in cfg:
        missing = [p for p in cfg["p_values"] if p not in cfg["rounds"]]
        if missing:
            raise ValueError(f"{where}: rounds has no entry for p = {missing} (give a dict p -> rounds)")
    return cfg


# ================================================================================================
# the pages' claim checks, each under the item of document 002 it tests (flkit/papers/items/002.yaml)
# ================================================================================================
FIGURES = {"quadratic": {0.01: "Fig. 1", 0.1: "Fig. 2", 0.5: "Fig. 3"},
           "logistic": {0.01: "Fig. 4", 0.1: "Fig. 5", 0.5: "Fig. 6"}}   # our inference (see the chapter index)
ALPHA = 0.01        # level of the chi^2 tests of the theory page's Monte Carlo
SLOPE_TOL = 0.15    # a measured log-log slope "is" a predicted power when within this distance


def merge_checks(*parts: dict) -> dict:
    """{item: [checks]} dicts joined, the lists of an item that appears in several concatenated."""
    out: dict = {}
    for part in parts:
        for item, cs in part.items():
            out.setdefault(item, []).extend(cs)
    return out


def _final(df: pd.DataFrame, metric: str, method: str) -> np.ndarray:
    """Per-seed value of `metric` at the last recorded round, in seed order."""
    g = df[(df["metric"] == metric) & (df["method"] == method)]
    return g[g["round"] == g["round"].max()].sort_values("seed")["value"].to_numpy(dtype=float)


def _log10(v) -> np.ndarray:
    return np.log10(np.clip(np.asarray(v, dtype=float), 1e-300, None))


def _median_rounds(v) -> float:
    v = np.asarray(v, dtype=float)
    return float(np.median(np.where(v >= 0, v, np.inf)))


def floor_check(df: pd.DataFrame, p: float, fig: str) -> "claims.Check":
    """Claims (i)/(ii) of the document on a figure's runs: FedAvg (IS) stalls above MIFA (log10 final gap,
    paired over seeds)."""
    from flkit.papers import claims
    return claims.compare(f"{fig}, p={p}: FedAvg (IS) ends above MIFA (log10 final gap, paired over seeds): "
                          "non-zero vs zero floor", _log10(_final(df, "gap", "fedavg_is")), _log10(_final(df, "gap", "mifa")))


def quadratic_checks(data: dict, hits: pd.DataFrame, beta: float) -> dict:
    """The quadratic page's checks. data[p]: the tidy runs of Figures 1-3 (gap, hit_round per seed); hits:
    the beta sweep's hit rounds (method, beta, p, seed, rounds, value; -1: never). Criteria as the page
    states them: rounds to 1e-10 x the initial gap, median over seeds (never: inf); and, per figure, the
    paired comparisons of `tuned_momentum_checks` at each method's best beta > 0 (never: the horizon T)."""
    from flkit.papers import claims
    out = {FIGURES["quadratic"][p]: [floor_check(df, p, FIGURES["quadratic"][p])] for p, df in data.items()}
    question, better = [], []
    for p, df in data.items():
        h = df[(df["metric"] == "hit_round") & (df["method"] != "fedgd")]
        med = h.groupby("method")["value"].apply(_median_rounds)
        fastest = med.idxmin() if np.isfinite(med.min()) else None
        better.append(claims.holds(
            f"p={p}, beta={beta}: U-MIFAm as written is the fastest partial-participation method to 1e-10 x the "
            f"initial gap (median rounds; fastest: {LABELS.get(fastest, 'none')})", fastest == "umifam",
            "fastest by median rounds over seeds", ours=med.get("umifam", np.inf), reference=med.min()))
        sw = hits[hits["p"] == p]
        best = {}
        for m in ("mifam", "umifam", "umifam_saga"):
            mr = sw[sw["method"] == m].groupby("beta")["value"].apply(_median_rounds)
            b = mr.idxmin() if np.isfinite(mr.min()) else None
            if b is not None:
                best[m] = (b, mr[b])
            question.append(claims.holds(
                f"p={p}: {LABELS[m]}: momentum speeds it up (best beta of the sweep > 0, fewer median rounds "
                f"than beta = 0)", b is not None and b > 0 and mr[b] < mr.get(0.0, np.inf),
                "best beta > 0 and median rounds at it < at beta = 0 (never: inf)",
                ours=mr[b] if b is not None else np.inf, reference=mr.get(0.0, np.inf)))
        m = min(best, key=lambda k: best[k][1]) if best else None
        better.append(claims.holds(
            f"p={p}: U-MIFAm with SAGA memory, at its best beta, is the fastest momentum method and gains from "
            f"beta > 0 (fastest: {LABELS.get(m, 'none')}, beta={best[m][0] if m else 'n/a'})",
            m == "umifam_saga" and best[m][0] > 0, "fastest by median rounds over seeds, each method at its best beta",
            ours=best.get("umifam_saga", (0, np.inf))[1], reference=best[m][1] if m else np.inf))
    out["Question: can we speed things up with momentum?"] = question
    out["Claim: U-MIFAm works better in practice"] = better
    for p in data:
        sw = hits[hits["p"] == p]
        T = float(sw["rounds"].max()) if "rounds" in sw else np.inf
        tab = sw.assign(value=np.where(sw["value"] >= 0, sw["value"], np.inf))[["method", "beta", "seed", "value"]]
        out = merge_checks(out, tuned_momentum_checks(
            tab, f"{FIGURES['quadratic'][p]}, p={p}", f"the rounds to 1e-10 x the initial gap (never: T = {T:g})", censor=T))
    return out


MOMENTUM_BASE = {"mifam": "mifa", "umifam": "umifa", "umifam_saga": "umifa_saga"}   # beta = 0 of each momentum method


def best_betas(tab: pd.DataFrame) -> pd.DataFrame:
    """tab: one row per (method, beta, seed) with `value` (lower is better: rounds to a target, a final
    gap; never reached or diverged: inf). Per method: the beta of the grid with the lowest median value
    over seeds (ties: the smaller beta) and that median; methods that never get a finite median are left out."""
    med = tab.groupby(["method", "beta"])["value"].median().reset_index()
    med = med[np.isfinite(med["value"])].sort_values(["method", "value", "beta"])
    return med.groupby("method").head(1).set_index("method").rename(columns={"value": "median"})


def momentum_table(curves: pd.DataFrame, sweep: pd.DataFrame | None, beta: float, metric: str = "gap") -> pd.DataFrame:
    """One figure's momentum grid, one row per (momentum method, beta, seed) with the final `metric`
    (a run with a non-finite value anywhere, i.e. declared diverged: inf). beta = 0 comes from the figure's
    methods without momentum (MIFA, U-MIFA, U-MIFA with SAGA memory), `beta` from its momentum methods,
    the other betas from `sweep` (tidy runs with a beta column; the same seeds, clients and minibatches)."""
    def finals(df, name_map, b):
        rows = []
        for src, dst in name_map.items():
            g = df[(df["metric"] == metric) & (df["method"] == src)]
            if g.empty:
                continue
            for seed, r in g.groupby("seed"):
                v = r.sort_values("round")["value"].to_numpy(dtype=float)
                rows.append((dst, b, int(seed), float(v[-1]) if np.isfinite(v).all() else np.inf))
        return rows
    rows = finals(curves, {b: m for m, b in MOMENTUM_BASE.items()}, 0.0)
    rows += finals(curves, {m: m for m in MOMENTUM_BASE}, float(beta))
    if sweep is not None:
        for b, g in sweep.groupby("beta"):
            if float(b) not in (0.0, float(beta)):
                rows += finals(g, {m: m for m in MOMENTUM_BASE}, float(b))
    return pd.DataFrame(rows, columns=["method", "beta", "seed", "value"])


def tuned_momentum_checks(tab: pd.DataFrame, setting: str, measure: str, censor: float | None = None) -> dict:
    """Both momentum items of document 002 at each momentum method's best beta > 0 of the grid
    (`best_betas` on the rows with beta > 0; beta = 0 is the method without momentum), paired over seeds
    with `claims.compare` on log10 of the value (`measure` names it): "Can we speed things up with
    momentum?" -- the value at the best beta is below the value at beta = 0; "U-MIFAm works better in
    practice" -- U-MIFAm at its best beta (SAGA memory, and as written when it has a finite best) is below
    MIFAm at its best beta. `censor`: never-reached (inf) values enter the paired differences as this
    number (e.g. the horizon T: a lower bound on the true round); without it, pairs with a non-finite value
    are dropped by `compare`. The best beta is chosen on the same seeds it is tested on (a selection in
    favour of momentum, small against the gaps measured)."""
    from flkit.papers import claims
    best = best_betas(tab[tab["beta"] > 0])

    def at(m, b):
        v = tab[(tab["method"] == m) & (tab["beta"] == b)].sort_values("seed")["value"].to_numpy(dtype=float)
        return _log10(v if censor is None else np.where(np.isfinite(v), v, censor))

    question, better = [], []
    for m in ("mifam", "umifam", "umifam_saga"):
        if m in best.index and ((tab["method"] == m) & (tab["beta"] == 0)).any():
            b = float(best.loc[m, "beta"])
            question.append(claims.compare(
                f"{setting}: {LABELS[m]} at its best beta {b:g} of the grid beats beta = 0 ({LABELS[MOMENTUM_BASE[m]]}) "
                f"on {measure} (lower is better; log10, paired over seeds)", at(m, 0.0), at(m, b)))
    if "mifam" in best.index:
        bm = float(best.loc["mifam", "beta"])
        for u in ("umifam_saga", "umifam"):
            if u in best.index:
                bu = float(best.loc[u, "beta"])
                better.append(claims.compare(
                    f"{setting}: {LABELS[u]} at its best beta {bu:g} beats MIFAm at its best beta {bm:g} on {measure} "
                    f"(lower is better; log10, paired over seeds)", at("mifam", bm), at(u, bu)))
    return {"Question: can we speed things up with momentum?": question,
            "Claim: U-MIFAm works better in practice": better}


def logistic_checks(data: dict, tuned: dict | None = None) -> dict:
    """The logistic page's checks, under Figures 4-6: FedAvg (IS) ends above MIFA, and "U-MIFAm works better
    in practice" on that figure's runs, as written (lowest median final gap, no run diverged) and in the
    SAGA-memory reading (below MIFAm, its closest rival, paired over seeds). tuned[p]: that figure's
    `momentum_table`; its checks (`tuned_momentum_checks`, each method at its best beta) go under the two
    momentum items."""
    from flkit.papers import claims
    out = merge_checks(*(tuned_momentum_checks(tab, f"{FIGURES['logistic'][p]}, p={p}", "the final gap")
                         for p, tab in (tuned or {}).items()))
    for p, df in data.items():
        fig = FIGURES["logistic"][p]
        fin = {m: _final(df, "gap", m) for m in set(df["method"])}
        med = {m: float(np.median(v)) for m, v in fin.items()}
        div = {m: not np.isfinite(df[(df["metric"] == "gap") & (df["method"] == m)]["value"]).all() for m in fin}
        others = min(v for m, v in med.items() if m != "umifam" and not div[m])
        out[fig] = [
            floor_check(df, p, fig),
            claims.holds(f"{fig}, p={p}: U-MIFAm as written ends with the lowest median gap, no run diverged",
                         not div["umifam"] and med["umifam"] < others,
                         "median final gap below every other method's", ours=med["umifam"], reference=others),
            claims.compare(f"{fig}, p={p}: U-MIFAm with SAGA memory ends below MIFAm (log10 final gap, paired over seeds)",
                           _log10(fin["mifam"]), _log10(fin["umifam_saga"])),
        ]
    return out


def floor_checks(fl: pd.DataFrame, *, T: int, n: int, L: float, sigma_G2: float, eta_doc: float = 0.02) -> dict:
    """The theory page's section 1 (the error floors): `fl` is `error_floor`'s table for both starts, on a
    problem with n clients, smoothness L and client variance sigma_G2, T rounds."""
    from flkit.papers import claims
    per = fl.groupby(["start", "method", "eta", "p", "metric"])["value"].mean().unstack("metric").reset_index()
    s2 = sigma_G2
    per["c"] = 2 / n * (1 / per["p"] - 1)
    per["doc_floor"] = per["eta"] ** 2 * L * per["c"] * s2 / 2
    isf = per[(per["method"] == "fedavg_is") & (per["start"] == "optimum")]
    z = per[(per["method"] == "fedavg_is") & (per["start"] == "zero")]
    sl_eta = float(np.mean([fit_slope(g["eta"], g["avg_tail"])[0] for _, g in isf.groupby("p") if g["eta"].nunique() > 1]))
    sl_c = float(np.mean([fit_slope(g["c"], g["avg_tail"])[0] for _, g in isf.groupby("eta") if g["c"].nunique() > 1]))
    ok_doc = int((z["avg_all"] <= 2 * z["gap0"] / (z["eta"] * T) + z["doc_floor"]).sum())
    above = int((isf["avg_tail"] <= isf["doc_floor"]).sum())
    raw = fl[fl["start"] == "optimum"].pivot_table(index=["method", "eta", "p", "seed"], columns="metric",
                                                   values="value").reset_index()
    eta0 = eta_doc if eta_doc in set(raw["eta"]) else float(raw["eta"].max())
    nonzero = []
    for p in sorted(raw["p"].unique()):
        g = raw[(raw["eta"] == eta0) & (raw["p"] == p)].sort_values("seed")
        nonzero.append(claims.compare(
            f"p={p}, eta={eta0}: FedAvg (IS) sits above MIFA (log10 mean ||grad f||^2 over the last quarter, from "
            "the optimum, paired over seeds)", _log10(g[g["method"] == "fedavg_is"]["avg_q4"]),
            _log10(g[g["method"] == "mifa"]["avg_q4"])))
    nonzero.append(claims.holds(f"the floor grows like c = (2/n)(1/p - 1): fitted slope {sl_c:.2f} within "
                                f"{SLOPE_TOL} of 1", abs(sl_c - 1) <= SLOPE_TOL, "|slope - 1| <= 0.15",
                                ours=sl_c, reference=1.0))
    mo = per[(per["method"] == "mifa") & (per["start"] == "optimum")]
    falling = ((mo["avg_q4"] < 1e-25) | (mo["avg_q4"] < mo["avg_q2"])).sum()
    mz = fl[(fl["method"] == "mifa") & (fl["start"] == "zero")].pivot_table(index=["eta", "p", "seed"], columns="metric",
                                                                            values="value").reset_index()
    mz["rhs"] = 2 * mz["gap1"] / (mz["eta"] * (T - 1))
    mz = mz.groupby(["eta", "p"])[["avg_from1", "rhs"]].mean()
    ok_mifa = int((mz["avg_from1"] <= mz["rhs"]).sum())
    return {
        "Claim (i): non-zero error floor for partial client participation": nonzero,
        "Bound (i): floor of FedAvg with importance sampling": [
            claims.holds("the bound holds from w_0 = 0 in every (eta, p) setting (seed-averaged sides)",
                         ok_doc == len(z), "holds in every setting", ours=ok_doc, reference=len(z)),
            claims.holds("the measured floor (from the optimum, 2nd half) is at most eta^2 L c sigma_G^2 / 2 in every setting",
                         above == len(isf), "holds in every setting", ours=above, reference=len(isf)),
            claims.holds(f"the floor grows like eta^2: fitted slope {sl_eta:.2f} within {SLOPE_TOL} of 2",
                         abs(sl_eta - 2) <= SLOPE_TOL, "|slope - 2| <= 0.15", ours=sl_eta, reference=2.0)],
        "Claim (ii): zero error floor for MIFA": [claims.holds(
            "MIFA's mean ||grad f||^2 over the last quarter (from the optimum) is at rounding level (< 1e-25) or "
            "below the second quarter's, in every setting", falling == len(mo), "holds in every setting",
            ours=int(falling), reference=len(mo))],
        "Bound (ii): MIFA": [claims.holds("the bound holds in every (eta, p) setting (seed-averaged sides)",
                                          ok_mifa == len(mz), "holds in every setting", ours=ok_mifa, reference=len(mz))],
    }


def monte_carlo_checks(tests: pd.DataFrame, mc: pd.DataFrame) -> dict:
    """The theory page's section 2: `tests` has one row per (p, rule label) with the chi^2 p-values against
    unbiasedness and against the predicted bias; `mc` is `one_round_monte_carlo`'s table."""
    from flkit.papers import claims
    biased, unbiased, eq_mifa, eq_umifa = [], [], [], []
    for _, row in tests.iterrows():
        p, rule = row["p"], row["rule"]
        pu, pb = row["p-value, unbiased (chi2)"], row["p-value, predicted bias (chi2)"]
        if rule == LABELS["mifa"]:
            biased += [claims.holds(f"p={p}: the chi^2 test rejects unbiasedness of MIFA's entries", pu < ALPHA,
                                    f"p-value < {ALPHA}", ours=pu, reference=ALPHA),
                       claims.holds(f"p={p}: the predicted bias (1-p)(G_(t-1) - Delta) is not rejected", pb >= ALPHA,
                                    f"p-value >= {ALPHA}", ours=pb, reference=ALPHA)]
        elif rule == LABELS["umifa"]:
            unbiased.append(claims.holds(f"p={p}: the chi^2 test does not reject unbiasedness of U-MIFA's entries",
                                         pu >= ALPHA, f"p-value >= {ALPHA}", ours=pu, reference=ALPHA))
    m = mc[mc["client"] < 0].pivot_table(index=["p", "rule"], columns="metric", values="value")
    for p in sorted(m.index.get_level_values("p").unique()):
        a = m.loc[(p, "mifa")]
        eq_mifa.append(claims.holds(f"p={p}: Monte Carlo E||grad f - G_t||^2 is at most the document's bound (within 2 s.e.)",
                                    a["mse"] - 2 * a["mse_se"] <= a["mse_formula"], "mse - 2 s.e. <= bound",
                                    ours=a["mse"], reference=a["mse_formula"]))
        u = m.loc[(p, "umifa")]
        eq_umifa.append(claims.agree(f"p={p}: Monte Carlo E||grad f - G_t||^2 equals the document's expression "
                                     "(within 2 Monte Carlo s.e.)", [u["mse"]], u["mse_formula"], threshold=2 * u["mse_se"]))
    return {"Note (ii): MIFA's stored entries are biased": biased,
            "Note (iii): U-MIFA's stored entries are unbiased": unbiased,
            "Eq. (MIFA): E||grad f(w_t) - G_t||^2": eq_mifa, "Eq. (U-MIFA): E||grad f(w_t) - G_t||^2": eq_umifa}


HETERO = "_hetH"    # suffix of a problem kind whose clients have different Hessians (`heterogeneous_quadratic`)


def _family_name(hetero: bool) -> str:
    return "heterogeneous client Hessians" if hetero else "identical client Hessians"


def step_size_checks(stab: pd.DataFrame) -> dict:
    """The theory page's section 4: `stab` holds, per (kind, method, n, eta_L), 1 when every seed converged
    (within 50 n rounds). The document's step sizes are sufficient conditions: checked at the largest grid
    step at or below the bound, per n and problem (an n whose bound lies below the grid is left out; much
    smaller steps need more than 50 n rounds, so they are not a test of the bound); one check per family
    (identical client Hessians; heterogeneous ones: kinds ending in `HETERO`). With ZeroSARAH rows in `stab`,
    the non-convex table's eta = O(1/(L n^{1/2})) is checked the same way (at eta L <= n^(-1/2))."""
    from flkit.papers import claims

    def at_bound(method, bound, text, hetero):
        sel = stab[(stab["method"] == method) & (stab["kind"].str.endswith(HETERO) == hetero)]
        g = sel[sel["eta_L"] <= bound(sel["n"]) * (1 + 1e-12)]
        g = g.loc[g.groupby(["kind", "n"])["eta_L"].idxmax()]
        ok = int(g["value"].eq(1).sum())
        return claims.holds(f"{_family_name(hetero)}: {LABELS[method]} converges (every seed, within 50n rounds) at the "
                            f"largest grid step eta L <= {text}, for every n and problem ({ok} of {len(g)})",
                            ok == len(g) and len(g) > 0, "converges at the bound's step in every (problem, n)",
                            ours=ok, reference=len(g))
    fams = [h for h in (False, True) if (stab["kind"].str.endswith(HETERO) == h).any()]
    saga = [at_bound("umifa_saga", lambda n: n ** (-2 / 3), "n^(-2/3)", h) for h in fams]
    out = {"Claim (Learning Rate): MIFA, eta <= 1/(L n)": [at_bound("mifa", lambda n: 1 / n, "1/n", h) for h in fams],
           "Claim (Learning Rate): after Reddi et al., eta ~ 1/(L n^{2/3})": saga + [
               at_bound("umifa", lambda n: n ** (-2 / 3), "n^(-2/3)", h) for h in fams],
           "Non-convex table: SAGA/U-MIFA, eta bound": saga}
    if (stab["method"] == ZEROSARAH).any():
        out["Non-convex table: ZeroSarah, eta bound"] = [at_bound(ZEROSARAH, lambda n: n ** -0.5, "n^(-1/2)", h)
                                                         for h in fams]
    return out


def complexity_checks(slopes: pd.DataFrame, plateau: pd.DataFrame, plateau_slope: float) -> dict:
    """The theory page's section 5: `slopes` (index problem x method label; predicted and measured slope of
    the cost in n; ZeroSARAH's rows, on the non-convex problems, are checked against the table's 1/2);
    `plateau` (n, b, eta, avg_q2, avg_q4) and the fitted slope of FedPGD's plateau against
    the table's variance term."""
    from flkit.papers import claims
    out = {}
    for kind in dict.fromkeys(slopes.index.get_level_values(0)):
        base = kind.removesuffix(HETERO)
        tab = {"convex": "Convex table", "nonconvex": "Non-convex table"}[base]
        rows = [("fedgd", "FedGD"), ("fedpgd", "FedPGD"), ("umifa_saga", "SAGA/U-MIFA")]
        if base == "nonconvex" and (kind, LABELS[ZEROSARAH]) in slopes.index:
            rows.append((ZEROSARAH, "ZeroSarah"))       # only the non-convex table has a ZeroSarah row
        for m, row in rows:
            pr, ms = slopes.loc[(kind, LABELS[m]), ["predicted slope", "measured slope"]]
            # the table's complexities are O(.) bounds: a cost growing more slowly in n is within them
            out.setdefault(f"{tab}: {row}, complexity", []).append(claims.bound(
                f"{base} ({_family_name(kind.endswith(HETERO))}), {row}: measured slope of the cost in n {ms:.2f}, "
                f"not above the table's {pr:.2f} + {SLOPE_TOL} (an O(.) bound, tested one-sided)",
                ms, pr, tol=SLOPE_TOL, side="upper"))
    ratio = float((plateau["avg_q4"] / plateau["avg_q2"]).max())
    out["Convex table: FedPGD, convergence"] = [
        claims.holds(f"FedPGD's plateau is proportional to the table's variance term: fitted slope {plateau_slope:.2f} "
                     f"within {SLOPE_TOL} of 1", abs(plateau_slope - 1) <= SLOPE_TOL, "|slope - 1| <= 0.15",
                     ours=plateau_slope, reference=1.0),
        claims.holds("that term falls with T as printed inside (1/T)(...): the last-quarter plateau is at most half the "
                     "second quarter's in every setting", ratio <= 0.5, "max ratio <= 1/2 (a term divided by T halves "
                     "when T doubles)", ours=ratio, reference=0.5)]
    return out


# ================================================================================================
# the pages' "What we found": words and numbers for the prose (glued), read from the pages' own checks
# ================================================================================================
OK = ("agrees", "confirmed")
_P_PREFIX = re.compile(r"^(?:Fig\. \d+, )?p=([0-9.]+)(?:, [^:]*)?: (.*)$", re.S)


def outcomes(checks: dict, item: str, starts: str, required: bool = True) -> dict[float, str]:
    """{p: verdict} of the checks filed under `item` whose text is '[Fig. k, ]p=<p>[, ...]: <rest>' with
    <rest> starting with `starts` (e.g. "MIFAm at its best beta", which "U-MIFAm at ..." does not match).
    Raises ValueError when no check matches, so that a page's prose cannot silently refer to nothing;
    with `required=False` (checks that exist only when the data allow them, such as the tuned-momentum
    comparisons, which need a finite best beta) it returns {} instead."""
    if item not in checks and not required:
        return {}
    if item not in checks:
        raise ValueError(f"no checks under item {item!r}; items: {sorted(checks)}")
    out = {}
    for c in checks[item]:
        m = _P_PREFIX.match(c.what)
        if m and m.group(2).startswith(starts):
            out[float(m.group(1))] = c.verdict
    if not out and required:
        raise ValueError(f"no check under {item!r} starts with {starts!r} after its 'p=...: ' prefix")
    return out


def p_words(ps, every) -> str:
    """The p values `ps` in words for a sentence '... at <words>': "every p" when they are all of `every`,
    "no p" when none, else "p = 0.1", "p = 0.1 and 0.5", "p = 0.01, 0.1 and 0.5"."""
    ps = sorted(float(p) for p in ps)
    if not ps:
        return "no p"
    if set(ps) == {float(p) for p in every}:
        return "every p"
    s = [f"{p:g}" for p in ps]
    return "p = " + (s[0] if len(s) == 1 else ", ".join(s[:-1]) + " and " + s[-1])


def where(verdicts: dict[float, str], *also: dict[float, str], ok=OK) -> list[float]:
    """The p at which the verdict (and the verdict in every dict of `also`) is one of `ok`."""
    return sorted(p for p, v in verdicts.items() if v in ok and all(a.get(p) in ok for a in also))


def item_word(checks: dict, item: str, yes: str, no: str, partly: str | None = None) -> str:
    """`yes` when every check under `item` agrees or is confirmed, `partly` (default `no`) when some do,
    `no` when none does."""
    if not checks.get(item):
        raise ValueError(f"no checks under item {item!r}; items: {sorted(checks)}")
    k = sum(c.verdict in OK for c in checks[item])
    return yes if k == len(checks[item]) else (no if k == 0 or partly is None else partly)


def check_word(checks: dict, item: str, starts: str, yes: str, no: str, unclear: str | None = None) -> str:
    """The word for the one check under `item` whose text starts with `starts` (no 'p=' prefix needed):
    `yes` when it agrees or is confirmed, `unclear` (default `no`) when not testable at this scale, else `no`."""
    hits = [c for c in checks.get(item, []) if c.what.startswith(starts)]
    if len(hits) != 1:
        raise ValueError(f"{len(hits)} checks under {item!r} start with {starts!r}; expected exactly one")
    v = hits[0].verdict
    return yes if v in OK else (unclear if unclear is not None and v.startswith("not testable") else no)


def and_list(words) -> str:
    """'a', 'a and b', 'a, b and c' ('' for none)."""
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1] if words else ""


def diverged_runs(df: pd.DataFrame, methods: Sequence[str], metric: str = "gap") -> tuple[int, int]:
    """(runs declared diverged, runs) of `methods` in a page's tidy table: a run (method, seed) is diverged
    when its `metric` is not finite at some recorded round."""
    g = df[(df["metric"] == metric) & df["method"].isin(list(methods))]
    bad = g.groupby(["method", "seed"])["value"].apply(lambda v: not np.isfinite(v.to_numpy(dtype=float)).all())
    return int(bad.sum()), int(len(bad))


def umifam_claim_word(as_written, saga, every) -> str:
    """The verdict on "U-MIFAm works better in practice" in words, from the p at which U-MIFAm as written
    wins (`as_written`) and at which the SAGA-memory reading wins (`saga`), out of the p of `every`."""
    if as_written:
        return f"holds for U-MIFAm as written at {p_words(as_written, every)}"
    if not saga:
        return "holds in neither reading"
    where_ = "" if p_words(saga, every) == "every p" else f", and only at {p_words(saga, every)}"
    return f"holds only in the SAGA-memory reading{where_}"


def momentum_answer(ps, every) -> str:
    """The answer to "Can we speed things up with momentum?" in words, from the p at which momentum speeds
    up a momentum method (`ps`: at least one of those tested) out of the p of `every`."""
    ps, every = sorted(float(p) for p in ps), sorted(float(p) for p in every)
    if not ps:
        return "No"
    if ps == every:
        return "Yes, at every p"
    return "Yes where enough clients participate" if ps == every[-len(ps):] else f"Yes at {p_words(ps, every)}"
