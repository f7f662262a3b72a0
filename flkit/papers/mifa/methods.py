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
``zerosarah``          ZeroSARAH: gradients at :math:`w_t` and :math:`w_{t-1}` and a table          n x d (+2d)
                       (`flkit.aggregate.ZeroSARAH`, :math:`\lambda = b/(2n)`)
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
problems are small): the notebooks' ``device`` parameter is accepted and not used. ZeroSARAH, the non-convex
table's fourth method, is a rule of `flkit.aggregate` like the others; it reads each sampled client's gradient at
the previous model through the round loop's probe, so a participation costs it two client gradients (one in a
run's first round), and :func:`simulate` counts them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from flkit import aggregate, fl, participation
from flkit.aggregate import TableState, Updates
from flkit.papers import settings

__all__ = ["Method", "METHODS", "LABELS", "ZEROSARAH", "method", "apply_rule", "bernoulli_masks", "uniform_k_masks",
           "Result", "simulate", "two_gradients", "first_median_hit"]


# ================================================================================================
# methods: each is an flkit.fl.Algorithm built from the rules of flkit.aggregate
# ================================================================================================
@dataclass(frozen=True)
class Method:
    """A method of document 002: its aggregation rule, momentum, and own participation (if any).

    rule: "is" | "active" | "mifa" | "umifa" | "saga" | "zerosarah" (the `flkit.aggregate` rules KnownP, FedAvg,
    MIFA, UMIFA("literal"), UMIFA("saga"), ZeroSARAH()); momentum: server heavy-ball momentum
    (`aggregate.Momentum`).
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
        return self.rule in ("mifa", "umifa", "saga", "zerosarah")

    def aggregator(self, beta: float = 0.0):
        base = {"is": aggregate.KnownP, "active": aggregate.FedAvg, "mifa": aggregate.MIFA,
                "umifa": lambda: aggregate.UMIFA("literal"), "saga": lambda: aggregate.UMIFA("saga"),
                "zerosarah": aggregate.ZeroSARAH}[self.rule]()
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
    Method("zerosarah", "ZeroSARAH", "zerosarah"),
)}
ZEROSARAH = "zerosarah"      # the non-convex table's ZeroSARAH
LABELS = {k: m.label for k, m in METHODS.items()}


def method(name) -> Method:
    """The :class:`Method` called `name` (a Method is returned as it is); a ValueError names the methods."""
    if isinstance(name, Method):
        return name
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose one of {sorted(METHODS)}")
    return METHODS[name]


def apply_rule(rule, table: Tensor, delta: Tensor, active: Tensor, p) -> tuple[Tensor, Tensor]:
    """One `flkit.aggregate` rule on dense inputs: table/delta (R, n, d), active (R, n), p float or (R, n).
    Returns (G (R, d), new table)."""
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
    seeds = settings.seeds(seeds, distinct=False)
    pv = np.broadcast_to(np.asarray(p, dtype=float), (num_clients,))
    return torch.as_tensor(np.stack([participation.bernoulli(pv, rounds, int(s)) for s in seeds]))


def uniform_k_masks(seeds: Sequence[int], k: int, rounds: int, num_clients: int) -> Tensor:
    """(R, T, n) bool: `flkit.participation.uniform_k(n, k, rounds, seed)` for every seed."""
    seeds = settings.seeds(seeds, distinct=False)
    one = {int(s): participation.uniform_k(num_clients, k, rounds, int(s)) for s in dict.fromkeys(seeds)}
    return torch.as_tensor(np.stack([one[int(s)] for s in seeds]))


@dataclass
class Result:
    """Output of :func:`simulate`. values[method][metric]: (K, R) array at rounds `rounds` (K,);
    hit[method]: (R,) first round at which the target was met (-1: never); diverged[method]: (R,) first
    round at which the run was declared diverged (-1: never); evals[method]: (R,) client gradients computed
    until the target was hit (or until the end): one per participation, two for ZeroSARAH; wall_s: seconds."""
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
                frames.append(pd.DataFrame({"method": meth, "run": np.arange(R), "round": 0, "metric": met,
                                            "value": v}))
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
    if not len(methods):
        raise ValueError(f"methods is empty: choose among {sorted(METHODS)}")
    meths = [method(mm) for mm in methods]
    seeds = settings.seeds(seeds, "seeds (one per run)", distinct=False)
    R, n = len(seeds), task.n
    settings.positive_int(rounds, "rounds")
    eta_r = np.broadcast_to(settings.positive(eta, "eta (step size)"), (R,))
    beta_r = np.broadcast_to(settings.momentum(beta, "beta (momentum)"), (R,))
    p_arr = settings.probabilities(p, "p").reshape(np.shape(p))
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
            return done or (bool((h >= 0).any()) and t >= stop_factor * first_median_hit(h, groups))
    res = fl.run(task, algorithms, seeds=seed_lists, rounds=rounds, w0=_w0_rows(w0, where, meths, algorithms,
                 seed_lists, task), every=every, target=target, stop_early=stop_early or stop_factor is not None,
                 stop_when=stop_when, diverge_factor=diverge_factor, diverge_ref=diverge_ref, progress=progress,
                 desc=desc)
    back = lambda d, mm: np.stack([d[where[(mm.name, r)][0]][..., where[(mm.name, r)][1]] for r in range(R)], -1)  # noqa: E731
    values = {mm.name: {k: back({a: res.values[a][k] for a in algorithms}, mm)
                        for k in next(iter(res.values.values()))} for mm in meths}
    evals = {mm.name: back(res.evals, mm) for mm in meths}
    if ZEROSARAH in evals:
        evals[ZEROSARAH] = two_gradients(evals[ZEROSARAH], mask)
    return Result(rounds=res.rounds, values=values, hit={mm.name: back(res.hit, mm) for mm in meths},
                  diverged={mm.name: back(res.diverged, mm) for mm in meths}, evals=evals, wall_s=res.wall_s)


def two_gradients(updates: np.ndarray, mask: Tensor) -> np.ndarray:
    """ZeroSARAH's client gradients from its client updates (R,) counted by `flkit.fl.run` (mask (R, T, n) its
    participation): two per participation, at the model and at the previous one, except in a run's first round
    with participants, where the two models coincide (x_{-1} = x_0): 2 updates - (that round's participants)."""
    per_round = mask.sum(-1)                                   # (R, T)
    first = per_round.gather(1, (per_round > 0).long().argmax(1, keepdim=True))[:, 0].numpy()
    return np.where(updates > 0, 2 * updates - first, 0.0)


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


def first_median_hit(hit: Tensor, group_idx) -> float:
    """Earliest round at which the median run of some group has hit, taken over methods (max): inf if none.
    hit: (M, R) first hit round per method and run (-1: never); group_idx: the runs of each group."""
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

