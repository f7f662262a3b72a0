r"""Server rules: how a round's client updates become the server's direction.

Notation shared by every rule (R runs side by side, N clients, d parameters):

* :math:`\Delta_t^n` — client n's update in round t, a **pseudo-gradient**: the global model minus the
  client's local model, :math:`\Delta = x_t - y_{t,I}` (divided by the local step size when the task says
  so, as document 002 does). It points downhill like a gradient; the server steps
  :math:`x_{t+1} = x_t - \eta\,G_t` (``flkit.fl``), where :math:`\eta` is the server (global) step size.
  (FedAU's Algorithm 1 writes :math:`\Delta = y - x` and adds it: the same step with the opposite sign.)
* :math:`S_t` — the clients whose update arrived in round t (a client drawn twice by a sampler counts twice).
* :math:`p_n` — participation probability known to the server (only the rules that need it read it).

An aggregator is a frozen dataclass with ``init(R, N, d, dtype, device) -> state`` and
``apply(state, upd) -> (G (R, d), state)``; ``upd`` is an :class:`Updates`. State is a small mutable
dataclass (the stored tables of MIFA/FedVarp, FedAU's interval statistics, a momentum buffer).

============================  =========================================================================
rule                          :math:`G_t`
============================  =========================================================================
:class:`FedAvg`               :math:`\sum_{n\in S_t} a_n\Delta^n / \sum_{n\in S_t} a_n`, a_n = 1 or n_n
:class:`AverageAll`           :math:`\frac1N\sum_{n\in S_t}\Delta^n`
:class:`KnownP`               :math:`\frac1N\sum_{n\in S_t}\Delta^n/p_n` (unbiased; "FedAvg (IS)")
:class:`FedAU`                :math:`\frac1N\sum_{n\in S_t}\omega^n_t\Delta^n`, :math:`\omega` = mean interval
:class:`MIFA`                 :math:`\frac1N\sum_n G^n`, :math:`G^n\leftarrow\Delta^n` for n in S_t
:class:`UMIFA`                U-MIFA, ``form="literal"`` or ``"saga"`` (document 002)
:class:`FedVarp`              the SAGA rule with :math:`p_n = |S_t|/N`
:class:`ZeroSARAH`            :math:`v_t`: the round's gradient differences, the previous :math:`v` and a table
                              (document 002's non-convex table; reads the probe)
:class:`Momentum`             :math:`v_t = \beta v_{t-1} + G_t` around any rule (MIFAm, U-MIFAm)
:class:`InverseAvailability`  :math:`\sum_{n\in S_t} a_n\Delta^n`, :math:`a_n = q_n/\pi_n` (CA-Fed, Unbiased,
                              F3AST; ``normalize=True``: divided by :math:`\sum_{S_t} a_n`, AdaFed)
:class:`FedAUWeighted`        :math:`\sum_{n\in S_t} q_n\omega^n_t\Delta^n`: FedAU's :math:`\omega` in place of
                              :math:`1/\pi_n` (= :class:`FedAU` when the sample counts are equal)
:class:`ServerSGD`            torch's SGD (momentum, weight decay) on :math:`G_t`, no step in an empty round
============================  =========================================================================
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["Updates", "FedAvg", "AverageAll", "KnownP", "FedAU", "MIFA", "UMIFA", "FedVarp", "Momentum", "Relay",
           "InverseAvailability", "FedAUWeighted", "ServerSGD", "ZeroSARAH", "Weighted", "StepSchedule"]

_DENSE_LIMIT = 1 << 24  # elements of an (R, N, d) buffer up to which sums over clients are taken densely


@dataclass
class Updates:
    """The round's arrived updates. pairs (P, 2) long = (run, client), distinct; delta (P, d); local (P, d)
    the local models themselves (tasks may return them; rules in model form need them);
    counts (P,) float: times each pair was drawn (1 unless a sampler draws with replacement);
    p (R, N): the participation probabilities known to the server (or None); sizes (R, N): the clients'
    sample counts; R, N: the runs and clients axes."""
    pairs: Tensor
    delta: Tensor
    counts: Tensor
    R: int
    N: int
    p: Tensor | None = None
    sizes: Tensor | None = None
    local: Tensor | None = None      # (P, d) the clients' local models, when the task returns them

    @property
    def mask(self) -> Tensor:
        """(R, N) bool: whose update arrived."""
        m = torch.zeros(self.R, self.N, dtype=torch.bool, device=self.delta.device)
        m[self.pairs[:, 0], self.pairs[:, 1]] = True
        return m

    def table(self, values: Tensor | None = None) -> Tensor:
        """(R, N, d): `values` (default delta) at the arrived pairs, zeros elsewhere."""
        v = self.delta if values is None else values
        out = v.new_zeros(self.R, self.N, v.shape[-1])
        out[self.pairs[:, 0], self.pairs[:, 1]] = v
        return out

    def per_pair(self, t: Tensor) -> Tensor:
        """The (R, N) tensor `t` at the arrived pairs, as a (P, 1) column."""
        return t[self.pairs[:, 0], self.pairs[:, 1]].unsqueeze(-1).to(self.delta.dtype)

    def sum_clients(self, values: Tensor) -> Tensor:
        """(R, d): sum of per-pair `values` (P, d) over each run's clients (dense sum when small, so that
        the order of additions is that of a dense (R, N, d) table; else index_add)."""
        if self.R * self.N * values.shape[-1] <= _DENSE_LIMIT:
            return self.table(values).sum(1)
        return values.new_zeros(self.R, values.shape[-1]).index_add_(0, self.pairs[:, 0], values)

    def need_p(self, rule: str) -> Tensor:
        if self.p is None:
            raise ValueError(f"{rule} needs the participation probabilities p (give p= to flkit.fl.run)")
        return self.p


# ---------------------------------------------------------------------------------- memoryless rules
@dataclass(frozen=True)
class FedAvg:
    r"""FedAvg over the clients whose update arrived (McMahan et al.; "average participating" in FedAU):
    :math:`G_t = \sum_{n\in S_t} c_n a_n \Delta^n / \sum_{n\in S_t} c_n a_n` with :math:`a_n = 1`
    (``weights="uniform"``) or the sample count :math:`n_n` (``weights="size"``), c_n the draw count;
    :math:`G_t = 0` when no update arrived. Biased toward frequent clients under unequal :math:`p_n`."""
    weights: str = "uniform"

    def __post_init__(self):
        if self.weights not in ("uniform", "size"):
            raise ValueError(f"FedAvg weights must be 'uniform' or 'size', got {self.weights!r}")

    def init(self, R, N, d, dtype, device):
        return None

    def apply(self, state, upd: Updates):
        a = upd.counts.unsqueeze(-1).to(upd.delta.dtype)
        if self.weights == "size":
            a = a * upd.per_pair(upd.sizes)
        if self.weights == "uniform" and bool((upd.counts == 1).all()):
            total = upd.sum_clients(upd.delta)
        else:
            total = upd.sum_clients(a * upd.delta)
        norm = upd.delta.new_zeros(upd.R).index_add_(0, upd.pairs[:, 0], a[:, 0]).unsqueeze(-1)
        if self.weights == "uniform":  # counts >= 1 wherever anything arrived; G = 0 where nothing did
            return total / norm.clamp(min=1), state
        return torch.where(norm > 0, total / norm.clamp(min=1e-300), torch.zeros_like(total)), state


@dataclass(frozen=True)
class AverageAll:
    r"""FedAU's "average all": :math:`G_t = \frac1N\sum_{n\in S_t} \Delta^n` (absent clients count as zero
    updates; equals FedAU with every :math:`\omega^n = 1`)."""

    def init(self, R, N, d, dtype, device):
        return None

    def apply(self, state, upd: Updates):
        return upd.sum_clients(upd.counts.unsqueeze(-1).to(upd.delta.dtype) * upd.delta) / upd.N, state


@dataclass(frozen=True)
class KnownP:
    r"""Known participation statistics ("FedAvg (IS)" in document 002, :math:`\omega_n = 1/p_n` in FedAU):
    :math:`G_t = \frac1N\sum_{n\in S_t}\Delta^n/p_n`, unbiased for :math:`\frac1N\sum_n\Delta^n`."""

    def init(self, R, N, d, dtype, device):
        return None

    def apply(self, state, upd: Updates):
        return upd.sum_clients(upd.delta / upd.per_pair(upd.need_p("KnownP"))) / upd.N, state


@dataclass
class FedAUState:
    mean: Tensor      # (R, N) mean recorded interval (omega once an interval exists)
    count: Tensor     # (R, N) number of recorded intervals M_n
    gap: Tensor       # (R, N) rounds since the last recorded interval (S_n^diamond in Algorithm 2)


@dataclass(frozen=True)
class FedAU:
    r"""FedAU (document 000, Algorithms 1-2): :math:`G_t = \frac1N\sum_{n\in S_t}\omega_t^n\Delta^n`, with
    :math:`\omega_t^n` the mean of client n's participation intervals recorded before round t, an
    absence of K rounds recorded as an interval of K (the cutoff; ``K=None``: no cutoff).

    As in the authors' code (IBM/fedau, main.py): :math:`\omega = 1` until the first interval is recorded,
    and in each round the weight is read *before* that round's participation is recorded. This is also
    Algorithm 2 as printed (its :math:`\omega_t^n` uses :math:`\mathbb I_0^n, \dots, \mathbb I_{t-1}^n` and
    starts at :math:`\omega_0^n = 1`): the two agree in every round (tests/test_fedau_weights.py). Per round and
    client: participated -> record the interval gap + 1, gap <- 0; else gap <- gap + 1 and, when gap reaches K,
    record K and gap <- 0. O(1) scalars per client."""
    K: int | None = None

    def __post_init__(self):
        if self.K is not None and (not isinstance(self.K, int) or self.K < 1):
            raise ValueError(f"FedAU cutoff K must be a positive int or None (no cutoff), got {self.K!r}")

    def init(self, R, N, d, dtype, device):
        z = torch.zeros(R, N, dtype=torch.float64, device=device)
        return FedAUState(z.clone(), z.clone(), z.clone())

    def weights(self, state: FedAUState) -> Tensor:
        """(R, N) the current omega."""
        return torch.where(state.count > 0, state.mean, torch.ones_like(state.mean))

    def record(self, state: FedAUState, arrived: Tensor) -> FedAUState:
        """Record one round of participation (arrived (R, N) bool) in the interval statistics."""
        gap = state.gap + 1
        close = arrived | ((gap >= self.K) if self.K is not None else torch.zeros_like(arrived))
        count = state.count + close
        mean = torch.where(close, state.mean + (gap - state.mean) / count.clamp(min=1), state.mean)
        return FedAUState(mean, count, torch.where(close, torch.zeros_like(gap), gap))

    def apply(self, state: FedAUState, upd: Updates):
        omega = self.weights(state)
        G = upd.sum_clients(upd.per_pair(omega) * upd.counts.unsqueeze(-1).to(upd.delta.dtype) * upd.delta) / upd.N
        return G, self.record(state, upd.mask)


@dataclass(frozen=True)
class Relay:
    r"""The relayed model becomes the global model: :math:`x_{t+1} = y^{I_t}` for the one client whose update
    arrived (Fed-CVaR-Avg's Algorithm 1 under a random access model that relays one user per round;
    FedAvg over a single participant in its model-averaging form, exact in floating point).
    ``returns_model``: `flkit.fl` takes the output rows of the runs that received an update as their new
    model (not as a direction); a run that received nothing keeps its model."""
    returns_model = True

    def init(self, R, N, d, dtype, device):
        return None

    def apply(self, state, upd: Updates):
        if upd.local is None:
            raise ValueError("Relay needs the clients' local models: the task must return them")
        if bool((torch.bincount(upd.pairs[:, 0], minlength=upd.R) > 1).any()):
            raise ValueError("Relay takes exactly one client per run and round")
        new = upd.local.new_zeros((upd.R, upd.local.shape[-1]))
        new[upd.pairs[:, 0]] = upd.local
        return new, state


# ---------------------------------------------------------------------------------- rules with memory
@dataclass
class TableState:
    table: Tensor     # (R, N, d) stored per-client updates


@dataclass(frozen=True)
class MIFA:
    r"""MIFA (Gu et al. 2021; document 002): :math:`G^n \leftarrow \Delta^n` for :math:`n\in S_t`, else kept;
    :math:`G_t = \frac1N\sum_{n=1}^N G^n`. The table starts at zero and the run starts at once (the
    authors' ``fdu_no_wait``, also FedAU's MIFA baseline). N x d floats per run."""

    def init(self, R, N, d, dtype, device):
        return TableState(torch.zeros(R, N, d, dtype=dtype, device=device))

    def apply(self, state: TableState, upd: Updates):
        table = torch.where(upd.mask.unsqueeze(-1), upd.table(), state.table)
        return table.mean(1), TableState(table)


@dataclass(frozen=True)
class UMIFA:
    r"""Unbiased MIFA (document 002), two readings.

    ``form="literal"`` (as written): for :math:`n\in S_t`, :math:`G^n \leftarrow \Delta^n/p_n - (1/p_n - 1)G^n`;
    :math:`G_t = \frac1N\sum_n G^n`. The stored entry's error is multiplied by :math:`1 - 1/p_n` at each
    participation, so the table diverges for :math:`p_n < 1/2`.

    ``form="saga"`` (SAGA memory; the document's table "SAGA/U-MIFA"): the table holds the last raw update
    :math:`y_n`, :math:`G_t = \frac1N\sum_n [y_n + \frac{1_{n\in S_t}}{p_n}(\Delta^n - y_n)]`, then
    :math:`y_n \leftarrow \Delta^n` for :math:`n\in S_t`."""
    form: str = "literal"

    def __post_init__(self):
        if self.form not in ("literal", "saga"):
            raise ValueError(f"UMIFA form must be 'literal' or 'saga', got {self.form!r}")

    def init(self, R, N, d, dtype, device):
        return TableState(torch.zeros(R, N, d, dtype=dtype, device=device))

    def apply(self, state: TableState, upd: Updates):
        p = upd.need_p("UMIFA")
        return _saga(state, upd, p) if self.form == "saga" else _literal(state, upd, p)


def _p3(p: Tensor, like: Tensor) -> Tensor:
    return p.to(like.dtype).unsqueeze(-1)


def _literal(state, upd, p):
    pp = _p3(p, state.table)
    new = upd.table() / pp - (1.0 / pp - 1.0) * state.table
    table = torch.where(upd.mask.unsqueeze(-1), new, state.table)
    return table.mean(1), TableState(table)


def _saga(state, upd, p):
    a = upd.mask.unsqueeze(-1)
    corr = torch.where(a, (upd.table() - state.table) / _p3(p, state.table), torch.zeros((), dtype=state.table.dtype))
    G = (state.table + corr).mean(1)
    return G, TableState(torch.where(a, upd.table(), state.table))


@dataclass(frozen=True)
class FedVarp:
    r"""FedVarp (Jhunjhunwala et al. 2022): the SAGA rule with :math:`p_n = |S_t|/N`,
    :math:`G_t = \frac1N\sum_n y_n + \frac1{|S_t|}\sum_{n\in S_t}(\Delta^n - y_n)`, then
    :math:`y_n\leftarrow\Delta^n` for :math:`n \in S_t`; tables start at zero and a round in which no
    update arrived does not move the model (:math:`G_t = 0`), both as FedAU's implementation of the
    baseline (IBM/fedau@6e9cce9, main.py; the FedVarp paper's sampler never has an empty round)."""

    def init(self, R, N, d, dtype, device):
        return TableState(torch.zeros(R, N, d, dtype=dtype, device=device))

    def apply(self, state: TableState, upd: Updates):
        k = upd.mask.sum(1, keepdim=True).to(state.table.dtype)
        p = (k / upd.N).expand(upd.R, upd.N)
        G, state = _saga(state, upd, torch.where(p > 0, p, torch.ones_like(p)))
        return torch.where(k > 0, G, torch.zeros_like(G)), state       # nobody arrived: no step


@dataclass
class ZeroSARAHState:
    prev: Tensor      # (R, d) x_{t-1}: the model of the run's last round in which updates arrived
    v: Tensor         # (R, d) v_{t-1}
    table: Tensor     # (R, N, d) y_i: client i's gradient in the last round it took part in
    mean: Tensor      # (R, d) (1/N) sum_j y_j
    started: Tensor   # (R,) bool: the run has had a round in which updates arrived


@dataclass(frozen=True)
class ZeroSARAH:
    r"""ZeroSARAH (Li, Hanzely and Richtarik 2021, Algorithm 1; the "ZeroSarah" row of document 002's non-convex
    table) in the federated reading: client i is the component :math:`f_i`, :math:`S_t` the b clients whose
    update arrived. The server keeps :math:`v`, the previous model and a table :math:`y` (N x d per run, as
    SAGA) and sends :math:`G_t = v_t`:

    .. math:: v_t = \tfrac1b\sum_{i\in S_t}\big(\nabla f_i(x_t)-\nabla f_i(x_{t-1})\big) + (1-\lambda_t)\,v_{t-1}
              + \lambda_t\Big[\tfrac1b\sum_{i\in S_t}\big(\nabla f_i(x_{t-1})-y_i\big)
              + \tfrac1N\sum_{j=1}^N y_j\Big],

    then :math:`y_i \leftarrow \nabla f_i(x_t)` for :math:`i\in S_t`. :math:`\nabla f_i(x_t)` is client i's
    update :math:`\Delta^i` (one local gradient step, lr-normalised, as document 002's analysis has it);
    :math:`\nabla f_i(x_{t-1})` is the same client's gradient at the previous model, read through the probe
    (``wants_probe``): a client of :math:`S_t` computes two gradients. Start: :math:`x_{-1} = x_0`,
    :math:`v_{-1} = 0`, :math:`y = 0` (no full gradient anywhere), :math:`\lambda_0` = ``lam0`` (1: :math:`v_0`
    is the mean of the round's updates), :math:`\lambda_t` = ``lam`` for t >= 1, by default :math:`b/(2N)`.
    A run that receives no update keeps its state and does not move (G = 0); its next round with updates is
    its round t >= 1 (or round 0 if it had none yet). Each client counts once per round (draws without
    replacement, the table's assumption ii)."""
    lam: float | None = None
    lam0: float = 1.0
    wants_probe = True

    def __post_init__(self):
        for name in ("lam", "lam0"):
            v = getattr(self, name)
            if name == "lam" and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
                raise ValueError(f"ZeroSARAH {name} (the weight of the table term) must lie in (0, 1]"
                                 f"{' or be None (b/(2N))' if name == 'lam' else ''}, got {v!r}")

    def init(self, R, N, d, dtype, device):
        z = torch.zeros(R, d, dtype=dtype, device=device)
        return ZeroSARAHState(z.clone(), z.clone(), torch.zeros(R, N, d, dtype=dtype, device=device), z.clone(),
                              torch.zeros(R, dtype=torch.bool, device=device))

    def apply(self, state: ZeroSARAHState, upd: Updates, probe):
        if bool((upd.counts != 1).any()):
            raise ValueError("ZeroSARAH takes each client at most once per round (sampling without replacement)")
        S = upd.mask                                                  # (R, N): S_t
        b = S.sum(1)                                                  # (R,): |S_t|
        g_now = upd.table()[S]                                        # grad f_i(x_t), i in S_t, by run then client
        g_prev = g_now.clone()                                        # a run's first round: x_{-1} = x_0
        again = state.started[S.nonzero()[:, 0]]
        if bool(again.any()):                                         # grad f_i(x_{t-1}), through the probe
            g_prev[again] = probe.gradients(S & state.started.unsqueeze(1), at=state.prev)[1]
        y = state.table[S]                                            # y_i, i in S_t
        lam = b.double() / (2 * upd.N) if self.lam is None else torch.full_like(b, 1, dtype=torch.float64) * self.lam
        lt = torch.where(state.started, lam, self.lam0).to(g_now.dtype).unsqueeze(-1)
        diff, corr, fresh = _sums_over_clients(b, g_now - g_prev, g_prev - y, g_now - y)
        bb = b.clamp(min=1).to(g_now.dtype).unsqueeze(-1)
        v = diff / bb + (1 - lt) * state.v + lt * (corr / bb + state.mean)
        table = state.table.clone()
        table[S] = g_now                                              # y_i <- grad f_i(x_t), i in S_t
        got = (b > 0).unsqueeze(-1)                                   # a run without updates keeps its state
        v = torch.where(got, v, state.v)
        new = ZeroSARAHState(torch.where(got, probe.models(), state.prev), v, table,
                             torch.where(got, state.mean + fresh / upd.N, state.mean), state.started | (b > 0))
        return torch.where(got, v, torch.zeros_like(v)), new


def _sums_over_clients(b: Tensor, *values: Tensor) -> list[Tensor]:
    """Per run, the sum of each (P, d) `values` over the run's b[r] pairs (pairs in run order); 0 for a run with
    none. The runs with the same b are summed as one (runs, b, d) block, so a run's sum has the summation order of
    a dense batch of its b clients, whatever the other runs received."""
    start = torch.cumsum(b, 0) - b
    out = [v.new_zeros(len(b), v.shape[-1]) for v in values]
    for k in b.unique().tolist():
        if k:
            rows = (b == k).nonzero().squeeze(1)
            idx = start[rows].unsqueeze(1) + torch.arange(k, device=b.device)
            for o, v in zip(out, values):
                o[rows] = v[idx].sum(1)
    return out


@dataclass
class MomentumState:
    inner: object
    v: Tensor | None = None


@dataclass(frozen=True)
class Momentum:
    r"""Server heavy-ball momentum around any rule (MIFAm, U-MIFAm of document 002):
    :math:`v_t = \beta v_{t-1} + G_t` with :math:`v_{-1} = 0`; the server then steps
    :math:`x_{t+1} = x_t - \eta v_t`."""
    inner: object
    beta: float = 0.9

    def __post_init__(self):
        if not (0.0 <= float(self.beta) < 1.0) or math.isnan(float(self.beta)):
            raise ValueError(f"momentum beta must be in [0, 1), got {self.beta!r}")

    def init(self, R, N, d, dtype, device):
        return MomentumState(self.inner.init(R, N, d, dtype, device), torch.zeros(R, d, dtype=dtype, device=device))

    def apply(self, state: MomentumState, upd: Updates):
        G, inner = self.inner.apply(state.inner, upd)
        v = self.beta * state.v + G
        return v, MomentumState(inner, v)


@dataclass
class WeightState:
    """Per run and client: ``weight`` (R, N) the sum over rounds of the weight each client received (its
    draw count times a_n, after normalisation), ``rounds`` (R, N) the rounds in which it received one."""
    weight: Tensor
    rounds: Tensor


def _weighted_sum(state, upd: Updates, w: Tensor):
    """The round's direction sum_i w_i delta_i, and `state`'s per-(run, client) weight and participation tallies
    with this round's weights `w` ((M, 1), one per pair) added."""
    G = upd.sum_clients(w.to(upd.delta.dtype) * upd.delta)
    weight, rounds = state.weight.clone(), state.rounds.clone()
    if len(w):
        r, n = upd.pairs[:, 0].to(weight.device), upd.pairs[:, 1].to(weight.device)
        weight.index_put_((r, n), w[:, 0].to(weight.device), accumulate=True)
        rounds.index_put_((r, n), torch.ones_like(w[:, 0]).to(weight.device), accumulate=True)
    return G, weight, rounds


@dataclass(frozen=True)
class InverseAvailability:
    r"""Weights inversely proportional to availability (CA-Fed and its baselines, arodio/CA-Fed@e673587
    ``clients_sampler.py``; ``aggregator.py``, ``CentralizedAggregator.mix``):

    .. math:: G_t = \sum_{n\in S_t} c_n\,a_n\,\Delta^n, \qquad a_n = \frac{q_n}{\hat\pi_n},\quad
       q_n = \frac{n_n}{\sum_{j=1}^N n_j},\quad \hat\pi_n = (1-s)\,\pi_n + s,

    with :math:`\pi_n` the availability the server knows (``p`` of ``flkit.fl.run``), :math:`n_n` the
    clients' sample counts (all N clients: the target weights q of ``objective_type weighted``), c_n the
    draw counts, s = ``ema``. The lecture notes' choice :math:`q_i = \alpha_i/\bar\pi_i`, which makes the
    expected aggregate the target one.

    * ``normalize=False``, ``ema=0``: **Unbiased** (``UnbiasedClientsSampler``; all available clients) and
      **CA-Fed** (``MarkovianClientsSampler``; the clients it kept, whose a_k it leaves at q_k/pi_k).
    * ``normalize=True``: **AdaFed** with full participation (``AdaFedClientsSampler``): the weights of the
      round divided by their sum, :math:`G_t = \sum_{S_t} a_n\Delta^n / \sum_{S_t} a_n`; G = 0 when nothing
      arrived.
    * ``ema=s``: **F3AST** (``F3AST``): its estimate :math:`(1-s)\pi_n + s\,1[n\in A_t]` for a selected,
      hence available, client (``flkit.sample.F3AST``; the authors' code uses s = 1/T).

    The state keeps, for diagnostics, the weight each client received so far (:class:`WeightState`)."""
    normalize: bool = False
    ema: float = 0.0

    def __post_init__(self):
        if not isinstance(self.normalize, bool):
            raise ValueError(f"normalize must be True or False, got {self.normalize!r}")
        if isinstance(self.ema, bool) or not isinstance(self.ema, (int, float)) or not 0 <= self.ema < 1:
            raise ValueError(f"ema must be a number in [0, 1), got {self.ema!r}")

    def init(self, R, N, d, dtype, device):
        z = torch.zeros(R, N, dtype=torch.float64, device=device)
        return WeightState(z.clone(), z.clone())

    def weights(self, upd: Updates) -> Tensor:
        """(P, 1): c_n a_n of each arrived pair (normalised per run when ``normalize``)."""
        if upd.sizes is None:
            raise ValueError("InverseAvailability needs the clients' sample counts (a task with `sizes`)")
        pi = upd.need_p("InverseAvailability").to(torch.float64)
        sizes = upd.sizes.to(device=pi.device, dtype=torch.float64)
        a = (sizes / sizes.sum(1, keepdim=True)) / ((1 - self.ema) * pi + self.ema)
        a = a.to(upd.delta.device)[upd.pairs[:, 0], upd.pairs[:, 1]]
        w = (a * upd.counts.to(a.dtype)).unsqueeze(-1)
        if self.normalize and len(w):
            total = w.new_zeros(upd.R).index_add_(0, upd.pairs[:, 0], w[:, 0])
            w = w / total[upd.pairs[:, 0]].unsqueeze(-1)
        return w

    def apply(self, state: WeightState, upd: Updates):
        w = self.weights(upd)
        G, weight, rounds = _weighted_sum(state, upd, w)
        return G, WeightState(weight, rounds)


@dataclass
class FedAUWeightState(WeightState):
    """:class:`WeightState`'s diagnostics and FedAU's interval statistics (``intervals``)."""
    intervals: FedAUState


@dataclass(frozen=True)
class FedAUWeighted:
    r"""FedAU's estimated weights with target weights q (FedAU beside CA-Fed and its baselines):

    .. math:: G_t = \sum_{n\in S_t} c_n\,q_n\,\omega_t^n\,\Delta^n, \qquad q_n = \frac{n_n}{\sum_{j=1}^N n_j},

    :math:`\omega_t^n` the weight of :class:`FedAU` with cutoff ``K`` (Algorithm 2 of document 000: the mean
    recorded participation interval, read before the round is recorded), c_n the draw counts. This is
    :class:`InverseAvailability` with the known :math:`1/\pi_n` replaced by its online estimate (the server
    reads no p), and with equal sample counts (q_n = 1/N) it is :class:`FedAU` itself. The state keeps the
    weight each client received and the rounds it received one (:class:`WeightState`) and FedAU's interval
    statistics (``intervals``)."""
    K: int | None = None

    def __post_init__(self):
        FedAU(self.K)                      # the same check of K

    def init(self, R, N, d, dtype, device):
        z = torch.zeros(R, N, dtype=torch.float64, device=device)
        return FedAUWeightState(z.clone(), z.clone(), FedAU(self.K).init(R, N, d, dtype, device))

    def omega(self, state: FedAUWeightState) -> Tensor:
        """(R, N) the current omega."""
        return FedAU(self.K).weights(state.intervals)

    def apply(self, state: FedAUWeightState, upd: Updates):
        if upd.sizes is None:
            raise ValueError("FedAUWeighted needs the clients' sample counts (a task with `sizes`)")
        rule = FedAU(self.K)
        omega = rule.weights(state.intervals)
        sizes = upd.sizes.to(device=omega.device, dtype=torch.float64)
        a = (sizes / sizes.sum(1, keepdim=True) * omega).to(upd.delta.device)[upd.pairs[:, 0], upd.pairs[:, 1]]
        w = (a * upd.counts.to(a.dtype)).unsqueeze(-1)
        G, weight, rounds = _weighted_sum(state, upd, w)
        return G, FedAUWeightState(weight, rounds, rule.record(state.intervals, upd.mask.to(omega.device)))


@dataclass
class ServerSGDState:
    inner: object
    v: Tensor          # (R, d) momentum buffer


@dataclass(frozen=True)
class ServerSGD:
    r"""The server's ``torch.optim.SGD(momentum=mu, weight_decay=lambda)`` applied to any rule's direction
    (the CA-Fed code's server optimiser: mu = 0.9, lambda = 1e-2, arodio/CA-Fed@e673587
    ``utils/optim.py``, ``utils/constants.py``; ``aggregator.py``, ``CentralizedAggregator.mix``).

    In a run where at least one update arrived: :math:`g_t = G_t + \lambda x_t`,
    :math:`v_t = \mu v_{t-1} + g_t` (:math:`v_{-1} = 0`), and the output is :math:`v_t`, so that
    ``flkit.fl`` steps :math:`x_{t+1} = x_t - \eta v_t`, torch's SGD step without dampening or Nesterov.
    In a run where nothing arrived the output is 0 and the buffer is kept: the code skips the optimiser
    step when no client was sampled. The global model :math:`x_t` is read from an arrived pair as
    :math:`y + \Delta` (the task must return the local models y when ``weight_decay`` > 0).
    Compare :class:`Momentum`, which steps with :math:`\beta v_{t-1}` even in an empty round."""
    inner: object
    momentum: float = 0.9
    weight_decay: float = 0.0

    def __post_init__(self):
        for name in ("momentum", "weight_decay"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 \
                    or (name == "momentum" and v >= 1):
                raise ValueError(f"{name} must be a finite number >= 0{' and < 1' if name == 'momentum' else ''}, "
                                 f"got {v!r}")

    def init(self, R, N, d, dtype, device):
        return ServerSGDState(self.inner.init(R, N, d, dtype, device), torch.zeros(R, d, dtype=dtype, device=device))

    def apply(self, state: ServerSGDState, upd: Updates):
        G, inner = self.inner.apply(state.inner, upd)
        arrived = upd.mask.any(1).to(G.device)
        g = G
        if self.weight_decay:
            if upd.local is None:
                raise ValueError("ServerSGD with weight_decay needs the clients' local models: the task must "
                                 "return them")
            runs = upd.pairs[:, 0].cpu().numpy()
            first = torch.from_numpy(np.unique(runs, return_index=True)[1])  # one arrived pair per run
            x = G.new_zeros(G.shape)
            x[upd.pairs[first, 0].to(G.device)] = (upd.local[first] + upd.delta[first]).to(G.dtype)
            g = G + self.weight_decay * x
        v = torch.where(arrived.unsqueeze(-1), self.momentum * state.v + g, state.v)
        return torch.where(arrived.unsqueeze(-1), v, torch.zeros_like(v)), ServerSGDState(inner, v)


def memory_floats(rule, N: int, d: int) -> int:
    """Floats of server state per run kept by `rule` (FedAU: 3 per client; tables: N x d)."""
    state = rule.init(1, N, d, torch.float32, "meta")
    return _count(state)


def _count(obj) -> int:
    if obj is None:
        return 0
    if isinstance(obj, Tensor):
        return obj.numel()
    if hasattr(obj, "__dataclass_fields__"):
        return sum(_count(getattr(obj, f)) for f in obj.__dataclass_fields__)
    return 0


@dataclass(frozen=True)
class Weighted:
    r"""The notes' two aggregators with fixed weights q (document 001):
    normalized :math:`G = \sum_{n\in S} q_n\Delta^n / \sum_{n\in S} q_n` (:math:`G = 0` when nothing
    arrived; server step :math:`\eta = 1` gives :math:`w_{k+1} = \sum q_i w_i/\sum q_i`), unnormalized
    :math:`G = \sum_{n\in S} q_n\Delta^n` (:math:`\eta = \gamma_s`). A client drawn c_n times counts c_n
    times. Special cases in :mod:`flkit.aggregate`: FedAvg = normalized with q = 1, AverageAll =
    unnormalized with q = 1/N, KnownP = unnormalized with :math:`q_n = 1/(N p_n)`.
    In the CA-Fed code (arodio/CA-Fed at e673587, ``clients_sampler.py``) the "Unbiased" baseline is the
    unnormalized rule with weights :math:`q_k/\pi_k` (``UnbiasedClientsSampler``, lines 197-229) and AdaFed
    with full participation the same weights normalized to sum one (``AdaFedClientsSampler.sample`` and
    ``_normalize_weights``, lines 559-610); there the server then takes an SGD step with momentum."""
    q: tuple
    normalize: bool = True

    def __post_init__(self):
        q = np.asarray(self.q, dtype=float)
        if q.ndim != 1 or q.size == 0 or not np.all(np.isfinite(q)) or not np.all(q > 0):
            raise ValueError(f"Weighted q must be a non-empty sequence of positive finite numbers, got {self.q!r}")
        if not isinstance(self.normalize, bool):
            raise ValueError(f"Weighted normalize must be True or False, got {self.normalize!r}")
        object.__setattr__(self, "q", tuple(float(v) for v in q))

    def init(self, R, N, d, dtype, device):
        if len(self.q) != N:
            raise ValueError(f"Weighted has {len(self.q)} weights q for {N} clients")
        return None

    def apply(self, state, upd: Updates):
        q = torch.as_tensor(self.q, dtype=upd.delta.dtype, device=upd.delta.device)[upd.pairs[:, 1]]
        a = (upd.counts.to(upd.delta.dtype) * q).unsqueeze(-1)
        total = upd.sum_clients(a * upd.delta)
        if not self.normalize:
            return total, state
        norm = upd.delta.new_zeros(upd.R).index_add_(0, upd.pairs[:, 0], a[:, 0]).unsqueeze(-1)
        return torch.where(norm > 0, total / norm.clamp(min=1e-300), torch.zeros_like(total)), state


@dataclass
class _ScheduleState:
    inner: object
    t: int


@dataclass(frozen=True)
class StepSchedule:
    r"""Server step :math:`\eta_t = \eta_0 t^{-a}` (t = 1, 2, ...) around any rule: the rule's direction
    is multiplied by :math:`t^{-a}`, and `flkit.fl` applies :math:`\eta_0` (the Algorithm's lr)."""
    inner: object
    a: float

    def init(self, R, N, d, dtype, device):
        return _ScheduleState(self.inner.init(R, N, d, dtype, device), 0)

    def apply(self, state, upd):
        G, inner = self.inner.apply(state.inner, upd)
        t = state.t + 1
        return G * float(t) ** (-self.a), _ScheduleState(inner, t)
