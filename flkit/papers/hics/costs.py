r"""Table 1's "extra comp." and "extra comm." columns (document 004, Sec. 4.2 and appendix 6.13): the computation and
communication each sampler adds to a round of random sampling, as complexity orders: pow-d (ideal) and DivFL
(ideal) :math:`\mathcal O(|\theta^t|)` in both, CS :math:`\mathcal O(|\theta^t|)` computation and no extra
communication, HiCS-FL :math:`\mathcal O(C)` computation ("scales with the total number of classes but does not
increase with the size of the neural network model") and no extra communication.

Measured here on the samplers of :mod:`flkit.sample` (those the FMNIST page runs), with synthetic updates of
growing size :math:`|\theta|` (``dims``), N = 50 clients, K = 5, C = 10 (the document's FMNIST numbers), one run,
averaged over the ``timed`` rounds after the warm-up (HiCS-FL's ceil(N/K) rounds). Every cost is a count, so it
is the same on every machine and at every load:

* **server computation**: the operations of a round's ``select`` plus ``observe`` (CS builds its Gram matrix of
  the updates in ``observe``), counted op by op by :class:`ServerCount` as torch executes them: the elements each
  op reads (the numbers of its tensor inputs; 0 for a view, which reads nothing; only the gathered elements and
  the indices for an indexing op such as ``u[rows]``; only the written values and the indices for an indexed
  write such as ``u[rows] = v``), plus one multiply-add per term of each contraction (``mm``, ``bmm``,
  ``addmm``, ``mv``, ``dot``, ``cdist``: output elements times the contracted length), plus the numbers a tensor
  hands to numpy (``.numpy()``, ``.tolist()``), each of which numpy reads at least once. The samplers' own numpy
  work on what they were handed (sorting N losses, clustering an N x N matrix) is not counted: it sees no more
  numbers than were handed over, and none of it is model-sized. The probe's work, which stands for the
  clients', is not the server's and is not counted;
* **the extra server computation** is the method's count minus random sampling's at the same :math:`|\theta|`
  (0 where the method counts less). The difference, not the ratio, because the column is what a scheme *adds*
  to random sampling's round: a ratio would read random sampling's own cost into the growth (a cost of
  :math:`a + b|\theta|` on top of random's constant r has a ratio whose log-log slope depends on r and on the
  sizes), while the difference of two exact counts is exactly the added work. Random sampling's count does not
  grow with :math:`|\theta|` (it never reads an update), so the subtraction only removes its bookkeeping;
* **client computation**: the extra passes over a model-sized vector the clients make beyond the K trainings
  of random sampling, counted from what the sampler asks the round loop's probe: a loss (pow-d) or a gradient
  (DivFL's default proxy) per asked client, a full local update per asked client not then selected (DivFL's
  full-update proxy), in units of :math:`|\theta|` numbers;
* **communication**: the numbers sent beyond random sampling's (the model to K clients, K updates back),
  counted from the same requests: the model to every asked client that is not selected, plus one number per
  loss, :math:`|\theta|` per gradient, :math:`|\theta|` per update of an asked client not then selected;
* **wall time** (shown, not checked): the seconds of a round's ``select`` plus ``observe``, the least over the
  timed rounds, from a second run without counting. It depends on the machine and on what else runs on it: on
  a loaded CPU the slope of CS's seconds moved between 0.46 and 0.59 across executions, which is why the checks
  read the counts.

The growth with :math:`|\theta|` is the least-squares slope of log(cost) on log(:math:`|\theta|`) over ``dims``
(1: linear, 0: constant; 0 for a cost that is 0 at every size). A check per Table 1 cell (:func:`cost_checks`):
an :math:`\mathcal O(|\theta^t|)` computation cell agrees when the slope of the larger of the method's extra server
count and client work is within ``TOL`` = 0.2 of 1; an :math:`\mathcal O(C)` or "-" computation cell when the slope
of the extra server count is at most 0.2 and no client work is asked; an :math:`\mathcal O(|\theta^t|)`
communication cell when the slope of the numbers sent is within 0.2 of 1; a "-" communication cell when no extra
number is sent. The counts being exact, the slopes move only with what the samplers do (which clients they draw
from the synthetic updates), not with the machine; 0.2 still tells a linear cost from a square-root (0.5) or a
constant one. Random sampling is the baseline the columns are measured against, so its cells are not checked.
"""
from __future__ import annotations

import contextlib
import math
import time

import numpy as np
import pandas as pd
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from flkit import sample
from flkit.papers import claims
from flkit.papers.hics import items
from flkit.papers.hics.common import DOC_NAMES, TABLE1_COSTS

__all__ = ["DIMS", "SMOKE_DIMS", "TOL", "ServerCount", "measure", "slopes", "cost_checks", "view", "values"]

DIMS = (5_000, 20_000, 80_000)
SMOKE_DIMS = (1_000, 4_000)       # the smoke profile's sizes (seconds)
TOL = 0.2
_aten = torch.ops.aten
# contractions: one multiply-add per output element and contracted coordinate; the operand whose last dim is contracted
_CONTRACT = {_aten.mm: 0, _aten.bmm: 0, _aten.mv: 0, _aten.dot: 0, _aten.vdot: 0, _aten._cdist_forward: 0,
             _aten.addmm: 1, _aten.baddbmm: 1, _aten.addmv: 1, _aten.addbmm: 1}
# reads only the gathered elements of its first input (plus the indices)
_GATHER = {_aten.index, _aten.index_select, _aten.gather, _aten.take}
# writes into its first input where indexed: reads the values and indices, not the whole destination
_SCATTER = {_aten.index_put_, _aten.index_put, _aten._index_put_impl_, _aten.index_copy_, _aten.index_copy,
            _aten.index_add_, _aten.index_add, _aten.index_fill_, _aten.scatter_, _aten.scatter,
            _aten.scatter_add_, _aten.scatter_add, _aten.copy_, _aten.masked_scatter_}


def _tensors(args, kwargs) -> list:
    return [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]


class ServerCount:
    """Counts the server's operations while active (module docstring): ``reads`` (elements read by torch ops),
    ``macs`` (multiply-adds of contractions) and ``handed`` (numbers handed from tensors to numpy or Python);
    ``total`` is their sum. ``paused()`` stops counting within it (the probe's client-side work). Use as
    ``with ServerCount() as n: ...``; the counts are exact and identical on every machine."""

    def __init__(self):
        self.reads = self.macs = self.handed = 0
        self.on = True
        parent = self

        class _Dispatch(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if parent.on:
                    parent._op(func, args, kwargs, out)
                return out

        class _Function(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if parent.on and getattr(func, "__name__", None) in ("numpy", "tolist") and args \
                        and isinstance(args[0], torch.Tensor):
                    parent.handed += args[0].numel()
                return func(*args, **kwargs)

        self._modes = (_Function(), _Dispatch())

    def _op(self, func, args, kwargs, out) -> None:
        packet = func.overloadpacket
        ins = _tensors(args, kwargs)
        if func.is_view or not ins:
            return                                   # a view reads nothing; a factory (zeros, empty) reads nothing
        if packet in _GATHER:
            outs = _tensors(out, {})
            self.reads += sum(o.numel() for o in outs) + sum(t.numel() for t in ins[1:])
        elif packet in _SCATTER:
            self.reads += sum(t.numel() for t in ins[1:])
        else:
            self.reads += sum(t.numel() for t in ins)
        if packet in _CONTRACT:
            a = args[_CONTRACT[packet]]
            o = out[0] if isinstance(out, (tuple, list)) else out
            self.macs += o.numel() * (a.shape[-1] if a.ndim else 1)

    @property
    def total(self) -> int:
        return self.reads + self.macs + self.handed

    @contextlib.contextmanager
    def paused(self):
        was, self.on = self.on, False
        try:
            yield self
        finally:
            self.on = was

    def __enter__(self):
        for m in self._modes:
            m.__enter__()
        return self

    def __exit__(self, *exc):
        for m in reversed(self._modes):
            m.__exit__(*exc)
        return False


class _Probe:
    """Answers the sampler's requests with fixed vectors, instantly, and records them; its work (the clients')
    is kept out of the server's count."""

    def __init__(self, vectors: torch.Tensor, losses: torch.Tensor, count: ServerCount | None = None):
        self.vectors, self.losses_table, self.asked = vectors, losses, []
        self._pause = count.paused if count is not None else contextlib.nullcontext

    def losses(self, mask):
        with self._pause():
            self.asked.append(("losses", mask.clone()))
            return torch.where(mask, self.losses_table, torch.full_like(self.losses_table, float("nan")))

    def gradients(self, mask):
        with self._pause():
            self.asked.append(("gradients", mask.clone()))
            pairs = mask.nonzero()
            return pairs, self.vectors[pairs[:, 1]]

    def updates(self, mask):
        with self._pause():
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


def _rounds(m, vectors, losses, *, N, K, C, warm, rounds, seed, divfl_proxy, count_steps, timing):
    """One run of method m over ``rounds`` rounds; per round after the warm-up: (server operations counted in
    ``count_steps``, server seconds or nan, extra client numbers, extra numbers sent)."""
    d = vectors.shape[1]
    s = _sampler(m, N, K, C, rounds, divfl_proxy)
    state = s.init(1, N, torch.full((1, N), 1200.0, dtype=torch.float64), [seed])
    everyone = torch.ones(1, N, dtype=torch.bool)
    out = []
    for t in range(rounds):
        count = ServerCount()
        probe = _Probe(vectors, losses, None if timing else count)
        on = contextlib.nullcontext() if timing else count
        tic = time.perf_counter()
        with (on if "select" in count_steps else contextlib.nullcontext()):
            c, state = s.select(state, t, everyone, probe)
        elapsed = time.perf_counter() - tic
        pairs = c.nonzero()
        delta = vectors[pairs[:, 1]] + 0.01 * t          # this round's updates of the selected clients
        tic = time.perf_counter()
        with (on if "observe" in count_steps else contextlib.nullcontext()):
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
        out.append((count.total, elapsed if timing else math.nan, p * d, n))
    return out


def measure(dims=DIMS, *, N: int = 50, K: int = 5, C: int = 10, timed: int = 5, seed: int = 0,
            methods=("random", "pow-d", "CS", "DivFL", "HiCS-FL"), divfl_proxy: str = "gradient",
            wall_time: bool = True, count_steps=("select", "observe")) -> pd.DataFrame:
    """Per (method, |theta|), over the ``timed`` rounds after the warm-up of one run with random float32
    updates: the server's operations per round (``server_ops``, the mean count of :class:`ServerCount` over
    ``select`` and ``observe``), the extra client numbers and extra numbers sent per round (module docstring),
    and, when ``wall_time``, the least server seconds per round (``server_s``, from a second, uncounted run;
    shown, not checked; nan otherwise). ``count_steps``: the steps of the round whose operations are counted
    (both are the server's work; one alone only to show what the count would miss)."""
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d <= C for d in dims) or len(dims) < 2:
        raise ValueError(f"dims must hold at least two ints > C = {C}, got {dims!r}")
    if isinstance(count_steps, str) or not set(count_steps) <= {"select", "observe"}:
        raise ValueError(f"count_steps must be a collection of 'select' and 'observe', got {count_steps!r}")
    warm = -(-N // K)
    rounds = warm + timed
    rows = []
    for d in dims:
        g = torch.Generator().manual_seed(seed)
        vectors = torch.randn(N, int(d), generator=g)
        losses = torch.rand(1, N, generator=g, dtype=torch.float64)
        for m in methods:
            kw = dict(N=N, K=K, C=C, warm=warm, rounds=rounds, seed=seed, divfl_proxy=divfl_proxy)
            counted = _rounds(m, vectors, losses, count_steps=tuple(count_steps), timing=False, **kw)
            secs = [r[1] for r in _rounds(m, vectors, losses, count_steps=(), timing=True, **kw)] if wall_time \
                else [math.nan]
            ops, _, passes, sent = (np.array(x, dtype=float) for x in zip(*counted))
            rows.append(dict(method=m, dim=int(d), server_ops=float(ops.mean()), server_s=float(np.min(secs)),
                             client_numbers=float(passes.mean()), comm_numbers=float(sent.mean())))
    return pd.DataFrame(rows)


def _slope(x, y) -> float:
    x, y = np.log(np.asarray(x, dtype=float)), np.asarray(y, dtype=float)
    if np.any(~np.isfinite(y)):
        return math.nan
    if np.any(y <= 0):
        return 0.0 if np.all(y == 0) else math.nan
    return round(float(np.polyfit(x, np.log(y), 1)[0]), 12) + 0.0   # a constant count: exactly 0, not -1e-16


def slopes(costs: pd.DataFrame) -> pd.DataFrame:
    """Per method: the growth exponents in |theta| of the extra server operations (``server``: the method's
    count minus random sampling's at the same size, floored at 0), the client work and the communication (0 for
    a cost that is 0 at every size), and of the wall time (``server_time``, shown, not checked; nan without
    wall time); the extra server operations, client work, communication and seconds at the largest size."""
    if "random" not in set(costs.method):
        raise ValueError("slopes needs random sampling's row at every size: the extra server operations are "
                         "counted over random sampling's")
    base = costs[costs.method == "random"].set_index("dim").server_ops
    if set(base.index) != set(costs.dim):
        raise ValueError(f"random sampling was measured at {sorted(base.index)}, "
                         f"the others at {sorted(set(costs.dim))}")
    rows = []
    for m, d in costs.groupby("method", sort=False):
        d = d.sort_values("dim")
        extra = np.maximum(d.server_ops.to_numpy() - base.loc[d.dim].to_numpy(), 0.0)
        rows.append(dict(method=m, server=_slope(d.dim, extra), client=_slope(d.dim, d.client_numbers),
                         comm=_slope(d.dim, d.comm_numbers), server_time=_slope(d.dim, d.server_s),
                         server_ops_at_max=float(extra[-1]), client_at_max=float(d.client_numbers.iloc[-1]),
                         comm_at_max=float(d.comm_numbers.iloc[-1]), server_s_at_max=float(d.server_s.iloc[-1])))
    return pd.DataFrame(rows).set_index("method")


def cost_checks(sl: pd.DataFrame, dims=DIMS, scale: str | None = None) -> dict:
    """{Table 1 item: [check]} for the eight non-baseline cells (module docstring): they read the slopes of the
    counts (extra server operations, client work, numbers sent), never the wall time. ``scale``: the checks'
    scale text (default: synthetic updates of ``dims``)."""
    import dataclasses
    scale = scale or (f"stand-in: synthetic updates of |theta| = {', '.join(f'{d:,}' for d in dims)} with N = 50, "
                      "K = 5, C = 10 for the document's models")
    out = {}
    for m, (comp, comm) in TABLE1_COSTS.items():
        if m not in sl.index:
            continue
        r = sl.loc[m]
        # the larger of the two kinds of extra computation decides the growth
        grow = max(r.server, r.client if r.client_at_max > 0 else -math.inf)
        if comp.startswith("O(|theta"):
            c1 = claims.bound(f"Table 1, {DOC_NAMES[m]}: extra computation grows linearly with |theta| (slope of log "
                              "count on log |theta|, the larger of the server's extra operations and the client "
                              "work)", grow, 1.0, tol=TOL, side="two-sided")
        else:
            c1 = claims.bound(f"Table 1, {DOC_NAMES[m]}: extra computation does not grow with |theta| (slope of the "
                              "server's extra operations; no client work asked)",
                              r.server if r.client_at_max == 0 else math.inf, 0.0, tol=TOL, side="upper")
        if comm.startswith("O(|theta"):
            c2 = claims.bound(f"Table 1, {DOC_NAMES[m]}: extra communication grows linearly with |theta| (slope of the "
                              "numbers sent per round)", r.comm, 1.0, tol=TOL, side="two-sided")
        else:
            c2 = claims.bound(f"Table 1, {DOC_NAMES[m]}: no extra communication (numbers sent per round beyond random "
                              "sampling's, at the largest |theta|)", r.comm_at_max, 0.0, tol=0.0, side="upper")
        out[items.COSTS[(m, "comp")]] = [dataclasses.replace(c1, scale=scale)]
        out[items.COSTS[(m, "comm")]] = [dataclasses.replace(c2, scale=scale)]
    return out


# ---------------------------------------------------------------------------------------- the fmnist page
def view(sl: pd.DataFrame, dims=DIMS) -> pd.DataFrame:
    """Table 1's cost columns as printed beside the growths measured (:func:`slopes`) and the counts at the
    largest size, for display (random sampling, the baseline, as "(baseline)")."""
    doc = pd.DataFrame({"extra comp. (document)": {m: v[0] for m, v in TABLE1_COSTS.items()},
                        "extra comm. (document)": {m: v[1] for m, v in TABLE1_COSTS.items()}})
    ours = sl[["server", "client", "comm", "server_ops_at_max", "comm_at_max", "server_time",
               "server_s_at_max"]].rename(
        columns={"server": "growth: server operations", "client": "growth: client work", "comm": "growth: numbers sent",
                 "server_ops_at_max": f"extra server operations at |theta| = {dims[-1]:,}",
                 "comm_at_max": f"numbers sent at |theta| = {dims[-1]:,}",
                 "server_time": "growth: server time (not checked)",
                 "server_s_at_max": f"server s/round at |theta| = {dims[-1]:,} (not checked)"})
    return doc.join(ours, how="right").round(3).astype(object).fillna("(baseline)").rename_axis("method")


def values(sl: pd.DataFrame, checks: dict) -> dict:
    """The prose's numbers: how many of the cost checks (:func:`cost_checks`) agree, of how many, those that do
    not in words, and each method's growth of the server's operations and of its server time."""
    cc = [c for v in checks.values() for c in v]
    out = dict(cost_ok=sum(c.ok for c in cc), cost_n=len(cc),
               cost_bad="; ".join(c.what.split(": ", 1)[1] + f" ({c.ours:.2f})" for c in cc if not c.ok) or "none")
    for m in sl.index:
        out[f"cost_server_{m}"] = float(sl.loc[m, "server"])
        out[f"cost_time_{m}"] = float(sl.loc[m, "server_time"])
    return out
