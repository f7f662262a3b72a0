r"""Page "How to estimate aggregation weights?" (document 000, FedAU): the online weights and the memory.

The document's symbols: N clients, participation indicator :math:`\mathbb I_t^n`, participation
probability :math:`p_n`, aggregation weight :math:`\omega_t^n`, cutoff K, interval :math:`S_n`, number of
recorded intervals :math:`M_n`. FedAU wants :math:`\omega_n = 1/p_n` and estimates it online by the mean
of the intervals between participations seen so far (Algorithm 2), an absence of K rounds counting as an
interval of K. The rule itself is :class:`flkit.aggregate.FedAU` (``init`` / ``weights`` / ``record``);
this module only drives it on participation masks (no training: the weights depend on the masks alone)
and holds the document's formulas:

* :func:`algorithm2` - the document's Algorithm 2 transcribed line by line (a reference for checks; it
  gives the same :math:`\omega_t^n` as ``aggregate.FedAU`` in every round t = 0..T-1);
* :func:`cutoff_mean`, :func:`cutoff_var` - mean and variance of the "cutoff geometric" interval;
* :func:`limit` - the long-run value of :math:`\omega^n` under each pattern (Bernoulli, FedAU's Markov
  chain, FedAU's cyclic pattern), :func:`cyclic_weight` its exact finite-horizon value under the cyclic
  pattern;
* :func:`simulate` - :math:`\omega_t^n` of ``aggregate.FedAU`` over the rounds, with the error
  statistics of the page;
* :func:`memory_table` - server state per method, from ``aggregate.memory_floats`` and from the tensors
  of each aggregator's ``init``.

One identity carries most closed forms: the recorded intervals tile the rounds 0..t_last, t_last the round
of the last record, so :math:`\omega = (t_{last} + 1)/M_n` (:func:`omega_identity`). With K = infinity this
is the inverse of the empirical participation rate up to the last participation (the document's
"Problem 1"); with a cutoff, K-round absences add records and pull the estimate below 1/p_n.

The authors' code (IBM/fedau@6e9cce9, ``main.py``): the weight used in a round is read before that round's
participation is recorded, :math:`\omega = 1` while no interval is recorded, the full list of intervals is
kept per client, and ``-save-weight-stats 1`` writes, every round, the weight each client received at its
latest participation (NaN before the first weighted participation): :func:`code_weight_log`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from scipy import stats

from flkit import aggregate, models, participation
from flkit.papers import settings
from flkit.papers.fedau.common import (CIFAR10_COUNTS, PATTERNS, cifar10_probs, cutoff_mean,  # noqa: F401
                                       cutoff_var, k_label, masks)

__all__ = [
    "PROFILES", "profile", "PATTERNS", "CIFAR10_COUNTS", "cifar10_probs", "masks", "algorithm2",
    "code_weight_log", "omega_identity", "cutoff_mean", "cutoff_var", "moment_deviations", "interval_limit",
    "limit", "cyclic_blocks", "cyclic_weight", "cyclic_phase", "rate_se", "rate_checks", "rate_summary",
    "algorithm2_check", "WeightRun", "simulate",
    "run_all", "error_floors", "end_table", "bias_table", "problem1_table", "assumption5_table", "MODELS", "METHODS",
    "memory_table", "pick_clients", "plot_traces", "plot_final", "plot_error", "k_label",
]

_BASE = dict(clients=250, x=0.05, period=100, cutoffs=[None, 50], show_p=[0.02, 0.05, 0.15, 0.4],
             memory_models=["SVHN", "CIFAR-10", "CIFAR-100", "CINIC-10"])
PROFILES = {
    "smoke": dict(_BASE, seeds=[1], rounds=1000, memory_models=["SVHN"]),
    "paper": dict(_BASE, seeds=[1, 2, 3, 4, 5], rounds=10_000),   # the document's horizon, N = 250, 5 seeds
}


def profile(name: str, **overrides) -> dict:
    """The page's settings ("smoke": seconds; "paper": the document's setting, 10,000 rounds, N = 250, seeds
    1-5). `overrides` (None keeps the profile's) are checked before any work."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    cfg = settings.with_overrides(copy.deepcopy(PROFILES[name]), overrides, f"fedau weights profile {name!r}")
    settings.positive_int(cfg["period"], "period")
    if not (isinstance(cfg["x"], (int, float)) and not isinstance(cfg["x"], bool) and 0 < cfg["x"] <= 1):
        raise ValueError(f"x (Markov probability of inactive -> active) must lie in (0, 1], got {cfg['x']!r}")
    if not cfg["cutoffs"] or any(k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1)
                                 for k in cfg["cutoffs"]):
        raise ValueError(f"cutoffs must be a non-empty list of ints >= 1 or None (no cutoff), got {cfg['cutoffs']!r}")
    settings.probabilities(cfg["show_p"], "show_p")
    bad = [m for m in cfg["memory_models"] if m not in MODELS]
    if bad or not cfg["memory_models"]:
        raise ValueError(f"memory_models must be a non-empty list from {list(MODELS)}, got {cfg['memory_models']!r}")
    return cfg


# ================================================================================================
# participation
# ================================================================================================


# ================================================================================================
# Algorithm 2 as printed, the code's log, the identity
# ================================================================================================
def algorithm2(mask, K: int | None) -> np.ndarray:
    r"""The document's Algorithm 2, line by line: :math:`M_n = 0, S_n^\diamond = 0, \omega_0^n = 1`; for
    t = 1..T-1: :math:`S^\diamond \leftarrow S^\diamond + 1`; if :math:`\mathbb I_{t-1}^n = 1` or
    :math:`S^\diamond = K`: :math:`S_n = S^\diamond`, :math:`\omega_t^n = S_n` (M = 0) or
    :math:`(M\omega_{t-1}^n + S_n)/(M+1)`, :math:`M \leftarrow M+1`, :math:`S^\diamond \leftarrow 0`; else
    :math:`\omega_t^n = \omega_{t-1}^n`. mask (T, N) bool; K None = no cutoff. Returns omega (T, N)."""
    I = participation.replay(mask)
    T, N = I.shape
    omega = np.ones((T, N))
    M, S_dia = np.zeros(N), np.zeros(N)
    for t in range(1, T):
        S_dia = S_dia + 1
        close = I[t - 1] | ((S_dia == K) if K is not None else False)
        S = S_dia
        new = np.where(M == 0, S, (M * omega[t - 1] + S) / (M + 1))
        omega[t] = np.where(close, new, omega[t - 1])
        M = M + close
        S_dia = np.where(close, 0, S_dia)
    return omega


def _fedau_history(mask, K) -> tuple[np.ndarray, np.ndarray]:
    """omega_t read by aggregate.FedAU in rounds 0..T-1 ((T, N)) and whether an interval was recorded by then."""
    I = torch.from_numpy(participation.replay(mask))
    rule = aggregate.FedAU(K=K)
    st = rule.init(1, I.shape[1], 1, torch.float64, "cpu")
    omega, recorded = np.empty(I.shape), np.empty(I.shape, dtype=bool)
    for t in range(I.shape[0]):
        omega[t], recorded[t] = rule.weights(st)[0].numpy(), (st.count[0] > 0).numpy()
        st = rule.record(st, I[t][None])
    return omega, recorded


def code_weight_log(mask, K: int | None) -> np.ndarray:
    """What IBM/fedau's ``-save-weight-stats 1`` writes for FedAU each round (T, N): the weight used at the
    client's latest participation, NaN before its first participation with a recorded interval (the code
    applies no weight then). Built from aggregate.FedAU's omega_t at the participation rounds."""
    I = participation.replay(mask)
    omega, recorded = _fedau_history(I, K)
    return _hold(I, np.where(recorded, omega, np.nan))


def _hold(I, logged) -> np.ndarray:
    """Value at the latest participation round, held until the next one (NaN before the first)."""
    out = np.full(I.shape, np.nan)
    cur = np.full(I.shape[1], np.nan)
    for t in range(I.shape[0]):
        cur = np.where(I[t], logged[t], cur)
        out[t] = cur
    return out


def omega_identity(mask, K: int | None) -> np.ndarray:
    r"""omega after recording rounds 0..t-1 from the identity :math:`\omega = (t_{last}+1)/M`, without the
    running mean: records are the participations plus, with a cutoff, the K-th, 2K-th, ... round of each
    absence run. Returns (T+1, N): row t is the omega read in round t (row T: after the horizon)."""
    I = participation.replay(mask)
    T, N = I.shape
    gap, M, last = np.zeros(N), np.zeros(N), np.full(N, -1.0)
    out = np.ones((T + 1, N))
    for t in range(T):
        gap = np.where(I[t], 0, gap + 1)
        cut = (~I[t]) & (gap == K) if K is not None else np.zeros(N, bool)
        gap = np.where(cut, 0, gap)
        rec = I[t] | cut
        M, last = M + rec, np.where(rec, t, last)
        out[t + 1] = np.where(M > 0, (last + 1) / np.maximum(M, 1), 1.0)
    return out


# ================================================================================================
# closed forms
# ================================================================================================


def interval_limit(p, K: int | None, a, b):
    r"""Long-run omega under a stationary two-state chain with P(inactive -> active) = a and P(active ->
    inactive) = b (Bernoulli: a = p, b = 1 - p). The intervals between participations are i.i.d.: S = 1
    with probability 1 - b, else 1 + Geom(a), so E[S] = 1 + b/a = 1/p. A true interval S is recorded as
    :math:`1 + \lfloor (S-1)/K \rfloor` records covering S rounds, hence by renewal

    .. math:: \omega_\infty = \frac{E[S]}{1 + E\lfloor (S-1)/K\rfloor}
       = \frac{1/p}{1 + b(1-a)^{K-1}/(1-(1-a)^K)},

    which for Bernoulli is the document's :math:`E[S_n] = (1-(1-p)^K)/p`."""
    p, a, b = (np.asarray(v, dtype=float) for v in (p, a, b))
    if K is None:
        return 1 / p
    return (1 / p) / (1 + b * (1 - a) ** (K - 1) / (1 - (1 - a) ** K))


def moment_deviations(ps=(0.02, 0.05, 0.1, 0.4, 0.9), Ks=(1, 2, 5, 50, 228)) -> tuple[float, float, int]:
    """The document's E[S_n] and Var[S_n] of the cutoff geometric law (:func:`cutoff_mean`, :func:`cutoff_var`)
    against the moments summed from its pmf, P(S = k) = p (1-p)^(k-1) for k < K and (1-p)^(K-1) at K:
    (largest relative difference of the mean, of the variance (absolute where the variance is below 1e-12),
    number of (p, K) pairs)."""
    grid = [(p, K) for p in ps for K in Ks]
    dev_mean = dev_var = 0.0
    for p, K in grid:
        k = np.arange(1, K + 1)
        pmf = np.where(k < K, p * (1 - p) ** (k - 1), (1 - p) ** (k - 1))
        m, v = (k * pmf).sum(), (k * k * pmf).sum() - ((k * pmf).sum()) ** 2
        dev_mean = max(dev_mean, abs(cutoff_mean(p, K) / m - 1))
        dev_var = max(dev_var, abs(cutoff_var(p, K) - v) / max(v, 1e-300) if v > 1e-12 else abs(cutoff_var(p, K)))
    return dev_mean, dev_var, len(grid)


def cyclic_blocks(p, period: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """FedAU's cyclic pattern: active rounds A = max(1, round(L p)) and inactive rounds max(1, L - A) per cycle."""
    A = np.maximum(1, np.round(period * np.asarray(p, dtype=float)).astype(np.int64))
    return A, np.maximum(1, period - A)


def limit(pattern: str, p, K: int | None, *, x: float = 0.05, period: int = 100) -> np.ndarray:
    r"""Long-run omega of FedAU per client. Bernoulli and Markov: :func:`interval_limit`. Cyclic
    (deterministic): per cycle the records are A - 1 intervals of 1 inside the active block,
    :math:`q = \lfloor I/K\rfloor` cutoff records of K in the inactive block and one record
    :math:`I - qK + 1` at the next participation, so :math:`\omega_\infty = (A + I)/(A + q)` (K = inf:
    :math:`(A+I)/A`, the inverse of the active fraction, not :math:`1/p_n`: the rounding of L p_n)."""
    p = np.asarray(p, dtype=float)
    if pattern == "bernoulli":
        return interval_limit(p, K, p, 1 - p)
    if pattern == "markov":
        a, b = participation.transition_probs(p.reshape(-1), x=x)
        return interval_limit(p, K, a.reshape(p.shape), b.reshape(p.shape))
    if pattern == "cyclic":
        A, I = cyclic_blocks(p, period)
        q = 0 if K is None else I // K
        return (A + I) / (A + q)
    raise ValueError(f"unknown participation pattern {pattern!r}; choose one of {PATTERNS}")


def cyclic_phase(mask) -> np.ndarray:
    """Each client's first active round (its phase) read off a cyclic mask."""
    m = participation.replay(mask)
    if not m.any(0).all():
        raise ValueError("every client must be active at least once to read its phase")
    return m.argmax(0)


def cyclic_weight(p, period: int, K: int | None, phase, T: int) -> np.ndarray:
    r"""Exact omega after T rounds of the cyclic pattern (client n active in rounds
    [phi_n + j L', phi_n + j L' + A), L' = A + I), from :math:`\omega = (t_{last}+1)/M`: M = active rounds
    before T plus :math:`\lfloor \ell/K\rfloor` cutoff records for every absence run of length
    :math:`\ell` (cut at T), t_last the later of the last active round and the last cutoff round."""
    A, I = cyclic_blocks(p, period)
    phase = np.asarray(phase, dtype=np.int64)
    Lc = A + I
    Tp = np.maximum(T - phase, 0)
    n_act = (Tp // Lc) * A + np.minimum(Tp % Lc, A)
    last = np.where(n_act > 0, np.minimum(phase + ((Tp - 1) // Lc) * Lc + A, T) - 1, -1)
    M = n_act.astype(float)
    if K is not None:
        J = int(np.max(np.ceil(np.maximum(T - phase - A, 0) / Lc))) + 1
        starts = np.concatenate([np.zeros((1, A.size), np.int64),
                                 phase[None] + np.arange(J)[:, None] * Lc[None] + A[None]])   # absence runs
        lengths = np.concatenate([phase[None], np.broadcast_to(I, (J, A.size))])
        seen = np.clip(np.minimum(lengths, T - starts), 0, None)
        cuts = seen // K
        M = M + cuts.sum(0)
        last_cut = np.where(cuts > 0, starts + cuts * K - 1, -1).max(0)
        last = np.maximum(last, last_cut)
    return np.where(M > 0, (last + 1) / np.maximum(M, 1), 1.0)


# ================================================================================================
# stationary participation rates
# ================================================================================================
def rate_se(p, lam, T: int) -> np.ndarray:
    r"""Exact standard error of the time average of a stationary two-state chain over T rounds, lag-1
    autocorrelation lam (Bernoulli: 0): :math:`\mathrm{Var} = \frac{p(1-p)}{T^2}\big[T + 2\sum_{k=1}^{T-1}
    (T-k)\lambda^k\big]`, the sum being :math:`\lambda(T(1-\lambda) - (1-\lambda^T))/(1-\lambda)^2`."""
    p, lam = np.asarray(p, dtype=float), np.asarray(lam, dtype=float)
    s = lam * (T * (1 - lam) - (1 - lam ** T)) / (1 - lam) ** 2
    return np.sqrt(p * (1 - p) * (T + 2 * s)) / T


def rate_checks(probs: dict, cfg: dict) -> pd.DataFrame:
    """Per seed, pattern and client: the long-run rate of the pattern (exact), p_n, and the simulated rate
    over the horizon with its z-score (Bernoulli and Markov, exact autocorrelated standard error; Markov
    also with the naive i.i.d. one). `probs`: seed -> p."""
    rows = []
    T, x, L = cfg["rounds"], cfg["x"], cfg["period"]
    for seed, p in probs.items():
        a, b = participation.transition_probs(p, x=x)
        A, I = cyclic_blocks(p, L)
        exact = {"bernoulli": p, "markov": participation.stationary(a, b), "cyclic": A / (A + I)}
        lam = {"bernoulli": np.zeros_like(p), "markov": 1 - a - b, "cyclic": None}
        for pat in PATTERNS:
            rate = masks(pat, p, T, seed, x=x, period=L).mean(0)
            d = pd.DataFrame(dict(seed=seed, pattern=pat, client=np.arange(p.size), p=p, exact=exact[pat],
                                  simulated=rate))
            if lam[pat] is not None:
                d["z"] = (rate - exact[pat]) / rate_se(exact[pat], lam[pat], T)
                d["z_iid"] = (rate - exact[pat]) / rate_se(exact[pat], 0.0, T)
            rows.append(d)
    return pd.concat(rows, ignore_index=True)


def rate_summary(rc: pd.DataFrame) -> pd.DataFrame:
    """Per pattern: largest |exact long-run rate - p_n| (absolute and relative), and for the random patterns
    the simulated rates' z-scores: mean z^2 (1 if the standard error is right), the same with the naive
    i.i.d. standard error, largest |z| and the per-client threshold with the family-wise level of one
    4-se test (P(|Z| > 4) shared among the clients)."""
    rows = []
    for pat, d in rc.groupby("pattern", sort=False):
        row = dict(pattern=pat, clients=len(d), max_abs_exact_minus_p=float((d["exact"] - d["p"]).abs().max()),
                   max_rel_exact_minus_p=float(((d["exact"] - d["p"]) / d["p"]).abs().max()))
        if "z" in d and d["z"].notna().all():
            z_fw = float(stats.norm.isf(stats.norm.sf(4.0) / len(d)))
            row.update(mean_z2=float((d["z"] ** 2).mean()), mean_z2_iid_se=float((d["z_iid"] ** 2).mean()),
                       max_abs_z=float(d["z"].abs().max()), familywise_4se=z_fw)
        rows.append(row)
    return pd.DataFrame(rows)


def algorithm2_check(p, cfg: dict, seed: int) -> pd.DataFrame:
    """Algorithm 2 as printed against aggregate.FedAU on the page's masks of one seed: largest relative
    difference of omega_t read in the same round t, and if Algorithm 2's omega_t were the weight of round
    t - 1 instead (a shift by one round)."""
    rows = []
    for pat in PATTERNS:
        mask = masks(pat, p, cfg["rounds"], seed, x=cfg["x"], period=cfg["period"])
        for K in cfg["cutoffs"]:
            lit, ours = algorithm2(mask, K), _fedau_history(mask, K)[0]
            rows.append(dict(pattern=pat, K=k_label(K), same_round=float(np.abs(lit / ours - 1).max()),
                             shifted_by_one=float(np.abs(lit[1:] / ours[:-1] - 1).max())))
    return pd.DataFrame(rows)


# ================================================================================================
# the weights over the rounds
# ================================================================================================
@dataclass
class WeightRun:
    r"""FedAU's weights on R runs x N clients over T rounds. err, sq (T, R): mean over clients of
    :math:`|p_n\omega_t^n - 1|` and of its square; trace (T, R, k): omega_t of the tracked clients;
    final (R, N): omega after the T rounds; mean_omega (R, N): :math:`\frac1T\sum_t\omega_t^n`;
    count (R, N): intervals recorded (the length of the authors' per-client list)."""
    err: np.ndarray
    sq: np.ndarray
    trace: np.ndarray
    final: np.ndarray
    mean_omega: np.ndarray
    count: np.ndarray


def simulate(mask, p, K: int | None, track=None) -> WeightRun:
    """Drive aggregate.FedAU(K) over mask (T, R, N) with probabilities p (R, N): each round the weights are
    read (``weights``), then the round is recorded (``record``). track (R, k) client indices or None."""
    m = torch.from_numpy(np.asarray(mask, dtype=bool))
    if m.ndim != 3:
        raise ValueError(f"mask must have shape (rounds, runs, clients), got {tuple(m.shape)}")
    T, R, N = m.shape
    pt = torch.as_tensor(np.asarray(p, dtype=float)).reshape(R, N)
    idx = torch.as_tensor(np.zeros((R, 0), np.int64) if track is None else np.asarray(track)).reshape(R, -1)
    rule = aggregate.FedAU(K=K)
    st = rule.init(R, N, 1, torch.float64, "cpu")
    err, sq = torch.empty(T, R, dtype=torch.float64), torch.empty(T, R, dtype=torch.float64)
    trace = torch.empty(T, R, idx.shape[1], dtype=torch.float64)
    total = torch.zeros(R, N, dtype=torch.float64)
    for t in range(T):
        w = rule.weights(st)
        e = pt * w - 1
        err[t], sq[t] = e.abs().mean(1), (e * e).mean(1)
        trace[t] = w.gather(1, idx)
        total += w
        st = rule.record(st, m[t])
    return WeightRun(err.numpy(), sq.numpy(), trace.numpy(), rule.weights(st).numpy(), (total / T).numpy(),
                     st.count.numpy())


def pick_clients(p, show_p) -> np.ndarray:
    """Indices of the clients whose p_n is nearest to each value of show_p (distinct clients)."""
    p = np.asarray(p, dtype=float)
    chosen: list[int] = []
    for v in show_p:
        order = np.argsort(np.abs(p - v), kind="stable")
        chosen.append(int(next(i for i in order if i not in chosen)))
    return np.array(chosen)


def run_all(cfg: dict) -> dict:
    """Everything the page plots: p per seed, the masks' rates, and a WeightRun per (pattern, K) with the
    seeds as runs (clients of the first seed tracked for the traces)."""
    seeds, T = cfg["seeds"], cfg["rounds"]
    probs = {s: cifar10_probs(s, cfg["clients"]) for s in seeds}
    P = np.stack([probs[s] for s in seeds])
    track = np.stack([pick_clients(probs[s], cfg["show_p"]) for s in seeds])
    out = dict(probs=probs, p=P, track=track, runs={}, phase={}, rate={})
    for pat in PATTERNS:
        M = np.stack([masks(pat, probs[s], T, s, x=cfg["x"], period=cfg["period"]) for s in seeds], 1)
        out["rate"][pat] = M.mean(0)
        if pat == "cyclic":
            out["phase"][pat] = np.stack([cyclic_phase(M[:, r]) for r in range(len(seeds))])
        for K in cfg["cutoffs"]:
            out["runs"][pat, K] = simulate(M, P, K, track)
    return out


def error_floors(res: dict, cfg: dict) -> dict:
    """(pattern, K) -> predicted long-run mean over clients and seeds of |p_n omega_inf^n - 1|."""
    return {(pat, K): float(np.mean(np.abs(res["p"] * limit(pat, res["p"], K, x=cfg["x"], period=cfg["period"]) - 1)))
            for pat in PATTERNS for K in cfg["cutoffs"]}


def end_table(res: dict, cfg: dict) -> pd.DataFrame:
    """One row per (seed, pattern, K, client): p_n, 1/p_n, omega_T (measured), the long-run limit and,
    for the cyclic pattern, the exact finite-horizon value."""
    rows = []
    for (pat, K), run in res["runs"].items():
        for r, s in enumerate(cfg["seeds"]):
            p = res["p"][r]
            d = pd.DataFrame(dict(seed=s, pattern=pat, K=k_label(K), client=np.arange(p.size), p=p, inv_p=1 / p,
                                  omega_T=run.final[r], limit=limit(pat, p, K, x=cfg["x"], period=cfg["period"]),
                                  count=run.count[r]))
            if pat == "cyclic":
                d["exact_T"] = cyclic_weight(p, cfg["period"], K, res["phase"][pat][r], cfg["rounds"])
            rows.append(d)
    return pd.concat(rows, ignore_index=True)


def bias_table(end: pd.DataFrame, p_value: float = 0.02) -> pd.DataFrame:
    """At the floor p_n = p_value (many clients share it): mean measured omega_T with its standard error
    over those clients, the long-run limit (predicted), the exact value at T where there is one (cyclic),
    1/p_n and the document's E[S_n] (its Bernoulli cutoff mean)."""
    at = end[np.isclose(end["p"], p_value)]
    if "exact_T" not in at:
        at = at.assign(exact_T=np.nan)
    g = at.groupby(["pattern", "K"], sort=False)
    out = g.agg(clients=("omega_T", "size"), measured=("omega_T", "mean"), sd=("omega_T", "std"),
                predicted=("limit", "mean"), exact_at_T=("exact_T", "mean")).reset_index()
    out["se"] = out["sd"] / np.sqrt(out["clients"])
    out["1/p_n"] = 1 / p_value
    out["E[S_n] (document)"] = [float(cutoff_mean(p_value, None if k == "K = inf" else int(k.split("= ")[1])))
                                for k in out["K"]]
    return out.drop(columns="sd")


def problem1_table(res: dict, cfg: dict) -> pd.DataFrame:
    r"""The document's Problem 1: :math:`\frac1T\sum_t\omega_t^n` against the inverse of the empirical rate
    :math:`1/(\frac1T\sum_t\mathbb I_t^n)`, relative error per client, summarised per pattern and K."""
    rows = []
    for (pat, K), run in res["runs"].items():
        target = 1 / res["rate"][pat]
        rel = np.abs(run.mean_omega / target - 1)
        rows.append(dict(pattern=pat, K=k_label(K), median=float(np.median(rel)), mean=float(rel.mean()),
                         max=float(rel.max())))
    return pd.DataFrame(rows)


def assumption5_table(res: dict, cfg: dict, bound: float = 1 / 81) -> pd.DataFrame:
    r"""Assumption 5, option 1: :math:`\frac1N\sum_n (p_n\omega_t^n - 1)^2 \le 1/81`. Per pattern and K:
    the value at the last round (mean over seeds) and the first round from which it holds until the
    horizon in every seed (None: not by the horizon)."""
    rows = []
    for (pat, K), run in res["runs"].items():
        ok = (run.sq <= bound).all(1)
        bad = np.flatnonzero(~ok)
        first = 0 if bad.size == 0 else (int(bad[-1]) + 1 if bad[-1] + 1 < len(ok) else None)
        rows.append(dict(pattern=pat, K=k_label(K), mean_sq_at_T=float(run.sq[-1].mean()),
                         holds_from_round=first))
    return pd.DataFrame(rows)


# ================================================================================================
# memory
# ================================================================================================
MODELS = {"SVHN": "fedau_svhn", "CIFAR-10": "fedau_cifar10", "CIFAR-100": "fedau_cifar100",
          "CINIC-10": "fedau_cinic10"}
METHODS = {"FedAU (K = inf)": aggregate.FedAU(), "FedAU (K = 50)": aggregate.FedAU(K=50),
           "average participating": aggregate.FedAvg(), "average all": aggregate.AverageAll(),
           "known participation statistics": aggregate.KnownP(), "MIFA": aggregate.MIFA(),
           "FedVarp": aggregate.FedVarp()}


def _nbytes(obj) -> int:
    if obj is None:
        return 0
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if hasattr(obj, "__dataclass_fields__"):
        return sum(_nbytes(getattr(obj, f)) for f in obj.__dataclass_fields__)
    return 0


def memory_table(N: int = 250, data_sets=tuple(MODELS), dtype=torch.float32) -> pd.DataFrame:
    """Server state per method and model: floats from ``aggregate.memory_floats(rule, N, d)`` and bytes
    of the tensors that ``rule.init(1, N, d, dtype, "cpu")`` allocates (each freed before the next), d =
    the parameter count of the document's CNN for each of `data_sets` (``flkit.models``)."""
    rows = []
    for data in data_sets:
        name = MODELS[data]
        d = models.count_parameters(getattr(models, name)())
        for method, rule in METHODS.items():
            state = rule.init(1, N, d, dtype, "cpu")
            nbytes = _nbytes(state)
            del state
            rows.append(dict(model=data, d=d, method=method, floats=aggregate.memory_floats(rule, N, d),
                             bytes=nbytes))
    out = pd.DataFrame(rows)
    out["state / d"] = out["floats"] / out["d"]
    return out


# ================================================================================================
# figures
# ================================================================================================
PALETTE = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
TITLES = {"bernoulli": "Bernoulli", "markov": "Markovian (x = 0.05)", "cyclic": "cyclic (L = 100)"}


def plot_traces(res: dict, cfg: dict, seed_index: int = 0) -> plt.Figure:
    """Figure (a): omega_t^n of the tracked clients of one seed, K = inf solid and K = 50 dashed, with
    1/p_n dotted; one panel per pattern (a 3 x 1 grid)."""
    fig, axes = plt.subplots(3, 1, figsize=(7.0, 7.6), sharex=True, layout="constrained")
    T = cfg["rounds"]
    t = np.arange(T)
    idx, p = res["track"][seed_index], res["p"][seed_index]
    for ax, pat in zip(axes, PATTERNS):
        for k, n in enumerate(idx):
            c = PALETTE[k % len(PALETTE)]
            for K in cfg["cutoffs"]:
                ls, lw = ("-", 1.3) if K is None else ("--", 1.0)
                ax.plot(t, res["runs"][pat, K].trace[:, seed_index, k], ls, lw=lw, color=c,
                        label=f"$p_n$ = {p[n]:.3f}, {k_label(K)}")
            ax.axhline(1 / p[n], color=c, ls=":", lw=1.0)
        ax.set(yscale="log", ylabel=r"$\omega_t^n$", title=TITLES[pat].replace("x = 0.05", f"x = {cfg['x']}")
               .replace("L = 100", f"L = {cfg['period']}"))
        ax.title.set_fontsize(9.5)
    axes[-1].set_xlabel("round t")
    h, lab = axes[0].get_legend_handles_labels()
    fig.legend(h, lab, loc="outside lower center", ncol=2, fontsize=9, frameon=False)
    return fig


def plot_final(end: pd.DataFrame, cfg: dict) -> plt.Figure:
    """Figure (b): omega_T^n against 1/p_n for all clients and seeds, one panel per (K, pattern) in a
    2 x 3 grid; identity line and the predicted long-run value (black dots)."""
    Ks = [k_label(K) for K in cfg["cutoffs"]]
    fig, axes = plt.subplots(len(Ks), 3, figsize=(7.0, 2.6 * len(Ks) + 0.4), sharex=True, sharey=True,
                             squeeze=False, layout="constrained")
    lo, hi = end["inv_p"].min() * 0.8, max(end["inv_p"].max(), end["omega_T"].max()) * 1.25
    for i, K in enumerate(Ks):
        for j, pat in enumerate(PATTERNS):
            ax, d = axes[i, j], end[(end["pattern"] == pat) & (end["K"] == K)]
            ax.plot([lo, hi], [lo, hi], color="0.5", lw=0.8, label=r"$\omega = 1/p_n$")
            s = d.sort_values("inv_p")
            ax.plot(s["inv_p"], s["limit"], "k-", lw=0.9, label="predicted long-run value")
            ax.scatter(d["inv_p"], d["omega_T"], s=6, alpha=0.4, color=PALETTE[j], zorder=3,
                       label=r"measured $\omega_T^n$")
            ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
            ax.set_title(f"{TITLES[pat].split(' (')[0]}, {K}", fontsize=9.5)
            if i == len(Ks) - 1:
                ax.set_xlabel(r"$1/p_n$")
            if j == 0:
                ax.set_ylabel(r"$\omega_T^n$ (T = %d)" % cfg["rounds"])
    h, lab = axes[0, 0].get_legend_handles_labels()
    fig.legend(h, lab, loc="outside lower center", ncol=3, fontsize=9, frameon=False, markerscale=3)
    return fig


def plot_error(res: dict, cfg: dict, floors: dict) -> plt.Figure:
    """Figure (c): mean over clients of |p_n omega_t^n - 1| against the round, mean over seeds, per
    pattern (1 x 3); dashed: the predicted long-run error of each K (`floors[(pattern, K)]`)."""
    fig, axes = plt.subplots(1, 3, figsize=(7.0, 3.4), sharey=True, layout="constrained")
    t = np.arange(1, cfg["rounds"] + 1)
    for ax, pat in zip(axes, PATTERNS):
        for k, K in enumerate(cfg["cutoffs"]):
            c = PALETTE[k]
            ax.plot(t, res["runs"][pat, K].err.mean(1), color=c, lw=1.2, label=f"measured, {k_label(K)}")
            if floors[pat, K] > 1e-12:     # K = inf under Bernoulli / Markov: the limit is exact, error -> 0
                ax.axhline(floors[pat, K], color=c, ls="--", lw=0.9, label=f"predicted limit, {k_label(K)}")
        ax.set(xscale="log", yscale="log", xlabel="round t")
        ax.set_title(TITLES[pat].split(" (")[0], fontsize=9.5)
    axes[0].set_ylabel(r"mean$_n\ |p_n\omega_t^n - 1|$")
    handles = {}
    for ax in axes:
        handles.update({lab: h for h, lab in zip(*ax.get_legend_handles_labels())})
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=2, fontsize=9, frameon=False)
    return fig
