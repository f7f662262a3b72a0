r"""Sampling from the available clients, and the cost of communication (document 001, last part).

Notation of the notes. M clients (the notes' "M clients" of Li et al.), :math:`\mathcal A_k` the clients
available in round k, :math:`\mathcal B_k \subset \mathcal A_k` the N clients picked, :math:`\alpha_i` the
target weights (:math:`\sum_i\alpha_i = 1`), :math:`q_i` the aggregation weights, :math:`\pi_i` the
probability that client i is available.

1. **FedAvg among the available clients** ("pick N clients uniformly from :math:`\mathcal A_k`"):
   :math:`w_{k+1} = \frac1N\sum_{i\in\mathcal B_k} q_i w^{(i)}_{k}`. Client i enters the average with
   probability :math:`P_i = P(i\in\mathcal B_k)`, so the expected aggregate weighs client i by
   :math:`p_i = P_i q_i/\sum_j P_j q_j` (the notes' :math:`p_i\propto\pi_i q_i` with :math:`\pi_i` replaced
   by the inclusion probability). :func:`exact_inclusion` computes :math:`P_i` in rational arithmetic by
   enumerating the availability patterns; the notes' example reads :math:`\pi = (1, 1, 1/2)`, N = 2
   (:data:`NOTES_EXAMPLE`).
2. **Li et al.'s two schemes** (X. Li, K. Huang, W. Yang, S. Wang, Z. Zhang, *On the convergence of FedAvg
   on non-IID data*, ICLR 2020; code lx10077/fedavgpy@4a2e171, ``src/trainers/fedavg4.py``):
   scheme I draws N clients i.i.d. **with replacement** with probabilities :math:`\alpha_i` and averages them
   with weight 1/N each (a client drawn twice counts twice); scheme II draws N clients **uniformly without
   replacement** and weighs client i by :math:`\alpha_i M/N`. Both are unbiased for
   :math:`\sum_i\alpha_i w^{(i)}`. The notes list them in the other order (their (1) is scheme II, their (2)
   scheme I) and abbreviate the weights ("q = alpha" and "q = 1/M"); we test the paper's formulas. The
   aggregate is :math:`c^\top W` with a random weight vector :math:`c\in\mathbb R^M`
   (:func:`scheme_weights`); :func:`enumerate_scheme` lists every outcome with its probability (exact with
   ``fractions.Fraction``), :func:`weight_covariance` gives Cov(c) in closed form, so that
   :math:`\mathbb E\|c^\top W - \alpha^\top W\|^2 = \mathrm{tr}(W W^\top \mathrm{Cov}(c))`.
3. **Communication.** Uploading models costs :math:`\sum_k|\mathcal B_k|\,\mathrm{size} = K N\,\mathrm{size}`
   over K rounds (:func:`model_upload_bytes`), uploading the data :math:`|S_1|+\dots+|S_M|`
   (:func:`data_upload_bytes`). Top-k sparsification (:func:`topk`) of the update
   :math:`w_{k,E}-w_{k,0}` or of the model :math:`w_{k,E}` itself, applied by the task wrapper
   :class:`TopKTask` to the clients' uploads before aggregation. No error feedback (not in the notes).

Everything runs on the CPU (the notebook's ``device`` parameter is accepted and not used).
"""
from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from flkit import participation
from flkit.papers import settings
from flkit.seeding import rng

__all__ = [
    "PROFILES", "profile", "NOTES_EXAMPLE",
    "exact_inclusion", "inclusion_monte_carlo", "effective_weights", "chi2_divergence", "quadratic_clients_task",
    "objective_check",
    "SCHEMES", "scheme_weights", "enumerate_scheme", "exact_moments", "weight_covariance", "scheme_monte_carlo",
    "model_upload_bytes", "data_upload_bytes", "notes_practical_numbers", "model_table", "dataset_bytes",
    "cost_table", "upload_count_law", "count_uploads", "topk", "k_of", "relative_topk_error", "topk_error_curve", "TopKTask", "topk_experiment",
    "local_models_of_one_round", "population", "inclusion_table", "plot_inclusion", "scheme_tables",
    "variance_curves", "MNIST_MODELS",
]


# ================================================================================================
# profiles
# ================================================================================================
PROFILES = {
    "smoke": dict(
        seeds=[0],
        inclusion=dict(rounds=20_000, population=dict(M=10, pi_min=0.1, pi_max=1.0), Ns=[1, 2, 5]),
        objective=dict(rounds=600, burn_in=100, lr=0.05, seeds=[0, 1, 2, 3]),
        li=dict(M=10, Ns=[1, 2, 5], enumerate_max_N=3, runs=20, draws_per_run=200, local_epochs=1, batch_size=32,
                lr=0.05, dirichlet=0.5, train_subset=6000),
        comm=dict(hours_per_day=20, days_per_week=7, weeks=2, Ns=[100, 500],
                  count=dict(M=50, N=10, K=200, dim=5, pis=[1.0, 0.15], seeds=[0, 1, 2, 3])),
        topk=dict(clients=20, per_round=5, rounds=4, steps=10, batch_size=32, lr=0.05, model="logreg",
                  dirichlet=0.5, fracs=[0.01, 0.1, 1.0], error_fracs=[0.001, 0.01, 0.1, 0.5, 1.0],
                  train_subset=6000, test_subset=2000, every=2),
    ),
    "paper": dict(
        seeds=[0, 1, 2],
        inclusion=dict(rounds=200_000, population=dict(M=10, pi_min=0.1, pi_max=1.0), Ns=[1, 2, 3, 5, 10]),
        objective=dict(rounds=4000, burn_in=500, lr=0.05, seeds=list(range(20))),
        li=dict(M=10, Ns=[1, 2, 3, 5, 8], enumerate_max_N=5, runs=200, draws_per_run=500, local_epochs=1,
                batch_size=32, lr=0.05, dirichlet=0.5, train_subset=None),
        comm=dict(hours_per_day=20, days_per_week=7, weeks=2, Ns=[100, 500],
                  count=dict(M=100, N=20, K=280, dim=5, pis=[1.0, 0.3, 0.2, 0.1], seeds=list(range(20)))),
        topk=dict(clients=100, per_round=10, rounds=30, steps=20, batch_size=32, lr=0.05, model="cvar_mlp",
                  dirichlet=0.5, fracs=[0.01, 0.1, 1.0], error_fracs=[0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0],
                  train_subset=None, test_subset=None, every=5),
    ),
}


def profile(name: str, **overrides) -> dict:
    """The page's settings under profile `name` ("smoke": seconds, for CI; "paper": the full page).
    `overrides` replace top-level settings (None keeps the profile's), and every setting is checked before
    any work (`settings.check_profile`; burn_in < rounds, per_round <= clients)."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    where = f"sampling profile {name!r}"
    cfg = settings.with_overrides(copy.deepcopy(PROFILES[name]), overrides, where)
    if cfg["objective"]["burn_in"] >= cfg["objective"]["rounds"]:
        raise ValueError(f"{where}: objective.burn_in ({cfg['objective']['burn_in']}) must be < objective.rounds "
                         f"({cfg['objective']['rounds']})")
    if cfg["topk"]["per_round"] > cfg["topk"]["clients"]:
        raise ValueError(f"{where}: topk.per_round ({cfg['topk']['per_round']}) must be <= topk.clients "
                         f"({cfg['topk']['clients']})")
    return cfg


# ================================================================================================
# 1. FedAvg among the available clients: inclusion probabilities and the induced objective
# ================================================================================================
NOTES_EXAMPLE = dict(pi=(Fraction(1), Fraction(1), Fraction(1, 2)), N=2, client=0)
"""The notes' example as we read it: three clients, two always available (client 0 is the notes'
"client 1", pi_1 = 1) and one available half of the time; N = 2. Then P(client 0 in B_k) =
1/2 * 1 (the third is away: B_k = A_k) + 1/2 * 2/3 (all three are there: 2 of 3) = 5/6."""


def _fractions(pi) -> list[Fraction]:
    out = []
    for v in pi:
        f = Fraction(v) if not isinstance(v, float) else Fraction(v).limit_denominator(10**12)
        if not 0 <= f <= 1:
            raise ValueError(f"every availability probability must lie in [0, 1], got {v!r}")
        out.append(f)
    if not out:
        raise ValueError("pi is empty: give one availability probability per client")
    return out


def _check_N(N, M: int) -> int:
    if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or not 1 <= N <= M:
        raise ValueError(f"N (clients picked per round) must be an int in [1, {M}], got {N!r}")
    return int(N)


def exact_inclusion(pi, N: int) -> list[Fraction]:
    r""":math:`P(i\in\mathcal B_k)` for "N clients uniformly among the available ones" when client j is
    available independently with probability :math:`\pi_j`, by enumerating the :math:`2^M` availability
    patterns A: :math:`\sum_{A\ni i} P(A)\min(1, N/|A|)`. Exact rational arithmetic (floats are read as the
    nearest fraction with denominator <= 1e12). M <= 16."""
    p = _fractions(pi)
    M = len(p)
    if M > 16:
        raise ValueError(f"exact enumeration visits 2^M patterns; M = {M} > 16 is too many (use "
                         f"flkit.participation.inclusion_probability)")
    N = _check_N(N, M)
    out = [Fraction(0)] * M
    for pattern in itertools.product((False, True), repeat=M):
        prob = Fraction(1)
        for a, pj in zip(pattern, p):
            prob *= pj if a else 1 - pj
        size = sum(pattern)
        if prob == 0 or size == 0:
            continue
        share = min(Fraction(1), Fraction(N, size))
        for i in range(M):
            if pattern[i]:
                out[i] += prob * share
    return out


def inclusion_monte_carlo(pi, N: int, rounds: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo of the inclusion probabilities: availability ``participation.bernoulli(pi, rounds, seed)``,
    selection ``participation.k_among_available(mask, N, seed)`` (its own "selection" stream). Returns the
    frequencies (M,) and their standard errors sqrt(f (1 - f) / rounds) (rounds are independent)."""
    p = np.asarray([float(v) for v in pi])
    settings.positive_int(rounds, "rounds")
    mask = participation.bernoulli(p, rounds, seed)
    chosen = participation.k_among_available(mask, N, seed)
    f = chosen.mean(0)
    return f, np.sqrt(f * (1 - f) / rounds)


def effective_weights(inclusion, q):
    r"""The weights of the objective that the sampled aggregate targets, :math:`p_i = P_i q_i/\sum_j P_j q_j`
    (works with Fractions, floats or arrays)."""
    prod = [a * b for a, b in zip(inclusion, q)]
    s = sum(prod)
    if s == 0:
        raise ValueError("every client has P_i q_i = 0: nothing is aggregated")
    return [v / s for v in prod]


def chi2_divergence(alpha, p):
    r""":math:`\chi^2_{\alpha\|p} = \sum_k (\alpha_k - p_k)^2/p_k`, the bias factor of the notes' Theorem 1."""
    return sum((a - b) ** 2 / b for a, b in zip(alpha, p))


def quadratic_clients_task(b) -> "object":
    r"""Clients :math:`F_i(w) = \frac12\|w - b_i\|^2` (identity Hessians) with one local gradient step, so
    that :math:`\Delta_i = w - b_i` and the minimiser of :math:`\sum_i p_i F_i` is :math:`\sum_i p_i b_i`."""
    from flkit.datasets import QuadraticProblem
    from flkit.tasks import QuadraticTask
    b = torch.as_tensor(np.asarray(b, dtype=float))
    return QuadraticTask(QuadraticProblem(torch.ones_like(b), b.clone()))


def objective_check(pi, N: int, b, *, rounds: int, burn_in: int, lr: float, seeds: Sequence[int]) -> pd.DataFrame:
    r"""Run the notes' FedAvg on :func:`quadratic_clients_task` through `flkit.fl.run`: availability
    Bernoulli(pi), N clients uniformly among the available (`flkit.sample.UniformK`), server step lr, two
    aggregation rules: ``q=1``, the mean of the picked updates :math:`\frac1{|\mathcal B_k|}\sum_{\mathcal B_k}
    \Delta_i` (`aggregate.FedAvg`; :math:`|\mathcal B_k| = N` whenever N clients are available), and
    ``q=alpha/P``, :math:`\frac1M\sum_{\mathcal B_k}\Delta_i/P_i` (`aggregate.KnownP` given the exact inclusion
    probabilities P_i, i.e. :math:`q_i \propto \alpha_i/P_i` with :math:`\alpha_i = 1/M`). Returns, per rule
    and seed, the iterate
    averaged over rounds burn_in..rounds (columns method, seed, coord, value)."""
    from flkit import aggregate, fl, sample
    pi_f = [float(v) for v in pi]
    rounds, seeds = settings.positive_int(rounds, "rounds"), settings.seeds(seeds)
    if not 0 <= settings.positive_int(burn_in, "burn_in", 0) < rounds:
        raise ValueError(f"burn_in must lie in [0, rounds) = [0, {rounds}), got {burn_in}")
    settings.positive(lr, "lr")
    task = quadratic_clients_task(b)
    incl = participation.inclusion_probability(pi_f, N)
    algs = {"q=1": fl.Algorithm(aggregate.FedAvg(), sampler=sample.UniformK(N), lr=lr),
            "q=alpha/P": fl.Algorithm(aggregate.KnownP(), sampler=sample.UniformK(N), lr=lr)}
    d = task.dim
    res = fl.run(task, algs, seeds=list(seeds), rounds=rounds, every=rounds, diverge_factor=None, p=incl,
                 availability=lambda s: participation.bernoulli(pi_f, rounds, s),
                 track=lambda w: {f"w{j}": w[:, j] for j in range(d)})
    rows = []
    keep = res.rounds >= burn_in
    for name in algs:
        for j in range(d):
            tail = res.values[name][f"w{j}"][keep].mean(0)
            rows += [dict(method=name, seed=s, coord=j, value=float(v)) for s, v in zip(res.seeds[name], tail)]
    return pd.DataFrame(rows)


# ================================================================================================
# 2. Li et al.'s two schemes: unbiasedness and variance
# ================================================================================================
SCHEMES = {
    "I": "N draws with replacement, P(i) = alpha_i; weight 1/N per draw",
    "II": "N distinct clients uniformly; weight alpha_i M / N",
}


def _check_scheme(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {sorted(SCHEMES)} (Li et al., ICLR 2020)")
    return scheme


def _check_alpha(alpha) -> None:
    a = [float(v) for v in alpha]
    if not a or any(v <= 0 for v in a) or abs(sum(a) - 1) > 1e-9:
        raise ValueError(f"alpha must be positive weights summing to 1, got {list(alpha)}")


def scheme_weights(scheme: str, counts, alpha, N: int) -> np.ndarray:
    r"""The random weight vector c of an aggregate :math:`c^\top W`: scheme I :math:`c_i = m_i/N` (m_i the
    times client i was drawn), scheme II :math:`c_i = 1_{i\in S}\,\alpha_i M/N`. counts (..., M)."""
    _check_scheme(scheme)
    m = np.asarray(counts, dtype=float)
    a = np.asarray(alpha, dtype=float)
    if m.shape[-1] != a.size:
        raise ValueError(f"counts has {m.shape[-1]} clients, alpha {a.size}")
    return m / N if scheme == "I" else (m > 0) * a * a.size / N


def enumerate_scheme(alpha, N: int, scheme: str) -> list[tuple]:
    """Every outcome of one round as (probability, weight vector c as a tuple), in Python arithmetic (exact
    with Fractions). Scheme I: the multisets of N draws, probability N!/prod m_i! prod alpha_i^m_i; scheme II:
    the C(M, N) subsets, probability 1/C(M, N)."""
    _check_scheme(scheme)
    _check_alpha(alpha)
    M = len(alpha)
    N = _check_N(N, M)
    out = []
    if scheme == "I":
        for combo in itertools.combinations_with_replacement(range(M), N):
            m = [combo.count(i) for i in range(M)]
            prob = math.factorial(N) // math.prod(math.factorial(v) for v in m)
            for i, v in enumerate(m):
                prob = prob * alpha[i] ** v
            out.append((prob, tuple(Fraction(v, N) if isinstance(alpha[0], Fraction) else v / N for v in m)))
    else:
        total = math.comb(M, N)
        for S in itertools.combinations(range(M), N):
            prob = Fraction(1, total) if isinstance(alpha[0], Fraction) else 1 / total
            c = tuple(alpha[i] * M / N if i in S else 0 * alpha[i] for i in range(M))
            out.append((prob, c))
    return out


def exact_moments(alpha, N: int, scheme: str, W) -> tuple:
    r"""(E[c^T W], E||c^T W - alpha^T W||^2) by enumeration; W (M, d) a list of rows (Fractions stay exact)
    or an array (floats)."""
    outcomes = enumerate_scheme(alpha, N, scheme)
    if isinstance(W, np.ndarray) or torch.is_tensor(W):
        Wn = np.asarray(W, dtype=float)
        P = np.array([float(p) for p, _ in outcomes])
        C = np.array([[float(v) for v in c] for _, c in outcomes])
        target = np.asarray([float(a) for a in alpha]) @ Wn
        D = C - np.asarray([float(a) for a in alpha])
        G = Wn @ Wn.T
        return P @ C @ Wn, float(P @ np.einsum("si,ij,sj->s", D, G, D)), target
    d = len(W[0])
    mean = [sum(p * sum(c[i] * W[i][j] for i in range(len(c))) for p, c in outcomes) for j in range(d)]
    target = [sum(alpha[i] * W[i][j] for i in range(len(alpha))) for j in range(d)]
    var = sum(p * sum((sum(c[i] * W[i][j] for i in range(len(c))) - target[j]) ** 2 for j in range(d))
              for p, c in outcomes)
    return mean, var, target


def weight_covariance(alpha, N: int, scheme: str) -> np.ndarray:
    r"""Cov(c) in closed form. Scheme I: :math:`(\mathrm{diag}(\alpha) - \alpha\alpha^\top)/N` (multinomial);
    scheme II: :math:`c_i = \frac{M\alpha_i}{N}1_{i\in S}` with :math:`P(i\in S) = \frac NM`,
    :math:`P(i, j\in S) = \frac{N(N-1)}{M(M-1)}`."""
    _check_scheme(scheme)
    _check_alpha(alpha)
    a = np.asarray(alpha, dtype=float)
    M = a.size
    N = _check_N(N, M)
    if scheme == "I":
        return (np.diag(a) - np.outer(a, a)) / N
    pi = N / M
    pij = N * (N - 1) / (M * (M - 1)) if M > 1 else pi
    cov_ind = np.full((M, M), pij - pi * pi)
    np.fill_diagonal(cov_ind, pi * (1 - pi))
    s = a * M / N
    return cov_ind * np.outer(s, s)


def scheme_monte_carlo(sizes, N: int, scheme: str, *, runs: int, draws_per_run: int, seed: int) -> np.ndarray:
    """runs x draws_per_run independent weight vectors c (rows), drawn by the package's samplers among M
    always-available clients with data sizes `sizes` (alpha = sizes / sum): scheme I
    ``flkit.sample.ProportionalK(N, replace=True)``, scheme II ``flkit.sample.UniformK(N)``. Run r uses the
    seed ``seed * 100_000 + r`` (its own "selection" stream)."""
    from flkit import sample
    _check_scheme(scheme)
    settings.positive_int(runs, "runs")
    settings.positive_int(draws_per_run, "draws_per_run")
    s = np.asarray(sizes, dtype=float)
    M = s.size
    N = _check_N(N, M)
    sampler = sample.ProportionalK(N, replace=True) if scheme == "I" else sample.UniformK(N)
    state = sampler.init(runs, M, torch.as_tensor(np.broadcast_to(s, (runs, M)).copy()),
                         [seed * 100_000 + r for r in range(runs)])
    avail = torch.ones(runs, M, dtype=torch.bool)
    out = np.empty((draws_per_run, runs, M))
    for t in range(draws_per_run):
        counts, state = sampler.select(state, t, avail)
        out[t] = counts.numpy()
    return scheme_weights(scheme, out.reshape(-1, M), s / s.sum(), N)


def local_models_of_one_round(cfg: dict, seed: int) -> dict:
    """The M local models (and updates w - y) of one FedAvg round on MNIST, all clients training from the same
    initial model: logistic regression (`flkit.models.logreg`), Dirichlet(cfg["dirichlet"]) label split of
    the training set into cfg["M"] clients, cfg["local_epochs"] epochs of SGD with batch cfg["batch_size"] and
    step cfg["lr"]. Returns dict(sizes (M,), w0 (d,), local (M, d), delta (M, d)) as float64 arrays."""
    from flkit import fl
    task = _mnist_task(cfg, seed, cfg["M"], model="logreg", epochs=cfg["local_epochs"])
    w0 = task.init_params([seed])
    runs = fl.Runs([seed], torch.tensor([float(cfg["lr"])]), ["one_round"])
    pairs, delta, local = task.client_updates(w0, torch.ones(1, cfg["M"], dtype=torch.bool), 0, runs)
    order = torch.argsort(pairs[:, 1])
    return dict(sizes=np.asarray(task.sizes, dtype=float), w0=w0[0].double().numpy(),
                local=local[order].double().numpy(), delta=delta[order].double().numpy())


# ================================================================================================
# 3. communication cost
# ================================================================================================
def _nonneg_int(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
        raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    return int(v)


def model_upload_bytes(K: int, N: int, model_bytes: int) -> int:
    r"""The notes' cost of federated training: :math:`\sum_{k=1}^K|\mathcal B_k|\,\mathrm{size} = K N\,
    \mathrm{size}` (uploads only; the broadcast of :math:`w_{k,0}` to the N clients costs as much again)."""
    return _nonneg_int(K, "K") * _nonneg_int(N, "N") * _nonneg_int(model_bytes, "model_bytes")


def data_upload_bytes(client_bytes) -> int:
    r"""The notes' cost of uploading the data once: :math:`|S_1| + \dots + |S_M|` (in bytes)."""
    return sum(_nonneg_int(v, "every client's data size") for v in client_bytes)


def notes_practical_numbers(hours_per_day: int = 20, days_per_week: int = 7, weeks: int = 2, N: int = 100) -> dict:
    r"""The notes' "20 x 7 x 2 x 100 ~ 30K" read as: one round per hour for about 20 hours a day, 7 days a
    week, for 2 weeks, N = 100 clients per round: K = 280 rounds and K N = 28,000 client check-ins (model
    uploads), "~30K"."""
    K = hours_per_day * days_per_week * weeks
    return dict(K=K, N=N, uploads=K * N)


def model_table() -> pd.DataFrame:
    """Every model of `flkit.models` (builders with their default arguments): trainable parameters d and
    float32 bytes 4 d."""
    from flkit import models
    rows = []
    for name in models.NAMES:
        d = models.count_parameters(models.build(name))
        rows.append(dict(model=name, params=d, bytes=4 * d))
    return pd.DataFrame(rows)


def dataset_bytes(name: str) -> dict:
    """Training-set size of a stored data set: samples, bytes as uint8 images plus one byte per label
    (how the files store them), and as float32 inputs plus int64 labels (what the engine holds)."""
    from flkit import datasets
    data = datasets.load(name, as_uint8=True)
    n = int(data.x_train.shape[0])
    per = int(np.prod(data.x_train.shape[1:]))
    return dict(dataset=name, samples=n, pixels=per, bytes_uint8=n * (per + 1), bytes_float32=n * (4 * per + 8))


MNIST_MODELS = ("logreg", "cvar_mlp", "cvar_lenet", "fedau_fmnist", "hics_fmnist")
"""The book's models for 28 x 28 grey images (MNIST, Fashion-MNIST)."""


def cost_table(models_df: pd.DataFrame, data_bytes: int, K: int, Ns: Sequence[int]) -> pd.DataFrame:
    """For each model and N: bytes of K N float32 uploads, the same with top-k at 1% and 10% (values float32
    plus int32 indices, 8 bytes per kept entry), the data upload, and the break-even number of rounds
    K* = data / (N size) below which federated uploads cost less than the data."""
    rows = []
    for _, r in models_df.iterrows():
        for N in Ns:
            dense = model_upload_bytes(K, N, int(r["bytes"]))
            rows.append(dict(model=r["model"], params=int(r["params"]), N=N, K=K, fl_bytes=dense,
                             fl_bytes_top10=model_upload_bytes(K, N, 8 * k_of(0.1, int(r["params"]))),
                             fl_bytes_top1=model_upload_bytes(K, N, 8 * k_of(0.01, int(r["params"]))),
                             data_bytes=int(data_bytes), ratio=dense / data_bytes,
                             break_even_K=data_bytes / (N * int(r["bytes"]))))
    return pd.DataFrame(rows)


def upload_count_law(pi, N: int) -> np.ndarray:
    r"""Exact law of one round's uploads :math:`|\mathcal B_k| = \min(N, |A_k|)` when client i is available
    independently with probability :math:`\pi_i` and N clients are picked among the available (all of them
    when fewer): the Poisson-binomial law of :math:`|A_k|` (dynamic programming) folded at N. Returns P(0..N)."""
    pi = np.asarray(settings.probabilities(pi, "pi"), dtype=float).reshape(-1)
    N = settings.positive_int(N, "N")
    law = np.zeros(pi.size + 1)
    law[0] = 1.0
    for q in pi:
        law[1:] = law[1:] * (1 - q) + law[:-1] * q
        law[0] *= 1 - q
    out = law[:N + 1].copy()
    out[N] += law[N + 1:].sum()
    return out


def count_uploads(M: int, N: int, K: int, pi, seeds, dim: int = 5) -> pd.DataFrame:
    r"""The notes' FedAvg (N clients picked uniformly among the available, ``flkit.sample.UniformK``) run through
    ``flkit.fl.run`` for K rounds on M quadratic clients of dimension `dim`, availability Bernoulli(pi): per seed
    the client updates the run computed (``Result.evals``: one upload of the model, 4 `dim` bytes in float32,
    per picked client and round), beside K N and the exact expectation :math:`K\,\mathbb E\min(N, |A_k|)`."""
    from flkit import aggregate, fl, sample
    M, N, K = settings.positive_int(M, "M"), settings.positive_int(N, "N"), settings.positive_int(K, "K")
    if N > M:
        raise ValueError(f"N (clients per round) must be <= M (clients), got N={N}, M={M}")
    seeds = settings.seeds(seeds)
    pi = np.broadcast_to(np.asarray(settings.probabilities(pi, "pi"), dtype=float), (M,))
    b = rng(0, "data/count-uploads").normal(size=(M, dim))
    task = quadratic_clients_task(b)
    res = fl.run(task, {"fedavg": fl.Algorithm(aggregate.FedAvg(), sampler=sample.UniformK(N), lr=0.1)},
                 seeds=list(seeds), rounds=K, every=K, diverge_factor=None,
                 availability=lambda s: participation.bernoulli(pi, K, s))
    law = upload_count_law(pi, N)
    expect = K * float(law @ np.arange(N + 1))
    return pd.DataFrame(dict(seed=res.seeds["fedavg"], uploads=np.asarray(res.evals["fedavg"], dtype=float),
                             bytes=4 * dim * np.asarray(res.evals["fedavg"], dtype=float), KN=K * N,
                             KN_bytes=model_upload_bytes(K, N, 4 * dim), expected=expect, pi_min=float(pi.min())))


# ================================================================================================
# top-k compression of the uploads
# ================================================================================================
def k_of(frac: float, d: int) -> int:
    """Entries kept for a fraction `frac` of d: ceil(frac d), at least 1, at most d."""
    if not (isinstance(frac, (int, float)) and 0 < frac <= 1):
        raise ValueError(f"frac must be a fraction in (0, 1], got {frac!r}")
    return max(1, min(d, math.ceil(frac * d - 1e-9)))


def topk(x: Tensor, k: int) -> Tensor:
    """Keep the k entries of largest magnitude of each row of x (a vector is one row), zero the others.
    Ties at the k-th magnitude are broken by torch.topk (not specified); k = d returns x unchanged."""
    x = torch.as_tensor(x)
    d = x.shape[-1]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= d:
        raise ValueError(f"k must be an int in [1, {d}] (the row length), got {k!r}")
    if k == d:
        return x.clone()
    idx = x.abs().topk(int(k), dim=-1).indices
    return torch.zeros_like(x).scatter(-1, idx, x.gather(-1, idx))


def relative_topk_error(x: Tensor, k: int) -> Tensor:
    r""":math:`\|x - \mathrm{topk}(x)\| / \|x\|` per row (0 for a zero row)."""
    x = torch.as_tensor(x)
    err = (x - topk(x, k)).norm(dim=-1)
    n = x.norm(dim=-1)
    return torch.where(n > 0, err / n.clamp(min=1e-300), torch.zeros_like(n))


def topk_error_curve(x: Tensor, fracs: Sequence[float]) -> np.ndarray:
    """(rows, len(fracs)) relative top-k errors for several k at once, from one sort of each row."""
    x = torch.as_tensor(x).double()
    d = x.shape[-1]
    sq = (x * x).sort(dim=-1, descending=True).values
    tail = sq.flip(-1).cumsum(-1).flip(-1)                     # tail[j] = sum of the entries j..d-1
    total = tail[:, 0].clamp(min=1e-300)
    out = []
    for f in fracs:
        k = k_of(f, d)
        out.append((tail[:, k] if k < d else torch.zeros_like(total)) / total)
    return np.sqrt(torch.stack(out, 1).numpy())


@dataclass
class TopKTask:
    r"""A task whose clients upload a top-k sparsified message (the notes' "compress: top-k, not necessarily
    of :math:`w_{k,E}` but of :math:`w_{k,E} - w_{k,0}`").

    plan: algorithm name -> (what, frac): ``("update", f)`` the client sends topk(Delta) with
    :math:`\Delta = w_{k,0} - w_{k,E}` (the pseudo-gradient of `flkit.aggregate`; the sign does not change
    which entries are kept), the server uses it in place of Delta; ``("model", f)`` the client sends
    topk(w_{k,E}) and the server reconstructs :math:`\Delta = w_{k,0} - \mathrm{topk}(w_{k,E})`; k =
    :func:`k_of` (f, d). Rows of other algorithms are passed unchanged. Every round, for every planned
    algorithm, the mean relative error of the sent messages is appended to ``log`` (round, method, what,
    error). With ``curve_method``, the uploads of that algorithm's rows (uncompressed, typically) are also
    measured at every fraction of ``curve_fracs``, for both the update and the model: ``curves`` gets
    (round, what, frac, error) with the error averaged over the round's uploads."""
    inner: object
    plan: dict
    curve_method: str | None = None
    curve_fracs: tuple = ()
    log: list = field(default_factory=list)
    curves: list = field(default_factory=list)

    def __post_init__(self):
        for name, (what, frac) in self.plan.items():
            if what not in ("update", "model"):
                raise ValueError(f"plan[{name!r}]: what must be 'update' or 'model', got {what!r}")
            k_of(frac, 1)
        for f in self.curve_fracs:
            k_of(f, 1)

    def __getattr__(self, name):
        """Everything else (num_clients, dim, dtype, sizes, local_lr, init_params, metrics, ...) is the
        inner task's."""
        if name in ("inner", "plan", "__setstate__") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _rows_of(self, pairs: Tensor, runs, name: str) -> Tensor:
        names = np.asarray(runs.names)[pairs[:, 0].cpu().numpy()]
        return torch.from_numpy(np.flatnonzero(names == name))

    def client_updates(self, w: Tensor, active: Tensor, t: int, runs):
        out = self.inner.client_updates(w, active, t, runs)
        pairs, delta = out[0], out[1]
        local = out[2] if len(out) > 2 else w[pairs[:, 0]] - delta     # tasks that return updates only
        if not len(pairs):
            return pairs, delta, local
        if self.curve_method is not None:
            sel = self._rows_of(pairs, runs, self.curve_method)
            if len(sel):
                for what, x in (("update", delta[sel]), ("model", local[sel])):
                    e = topk_error_curve(x, self.curve_fracs).mean(0)
                    self.curves += [dict(round=t, what=what, frac=f, error=float(v))
                                    for f, v in zip(self.curve_fracs, e)]
        delta, local = delta.clone(), local.clone()
        for name, (what, frac) in self.plan.items():
            sel = self._rows_of(pairs, runs, name)
            if not len(sel):
                continue
            k = k_of(frac, delta.shape[1])
            x = delta[sel] if what == "update" else local[sel]
            sent = topk(x, k)
            self.log.append(dict(round=t, method=name, what=what, error=float(relative_topk_error(x, k).mean())))
            if what == "update":
                delta[sel] = sent
                local[sel] = w[pairs[sel, 0]] - sent
            else:
                local[sel] = sent
                delta[sel] = w[pairs[sel, 0]] - sent
        return pairs, delta, local


def _mnist(cfg: dict):
    from flkit import datasets
    data = datasets.load("mnist")
    x, y, xt, yt = data.x_train, data.y_train, data.x_test, data.y_test
    if cfg.get("train_subset"):
        keep = torch.from_numpy(rng(0, "subset").permutation(len(y))[: cfg["train_subset"]])
        x, y = x[keep], y[keep]
    if cfg.get("test_subset"):
        xt, yt = xt[: cfg["test_subset"]], yt[: cfg["test_subset"]]
    return x, y, xt, yt


def _mnist_task(cfg: dict, seed: int, clients: int, *, model: str, epochs: int | None = None,
                steps: int | None = None):
    """EngineTask on MNIST: Dirichlet(cfg["dirichlet"]) label split (>= one batch per client) drawn with
    `seed`, local SGD with cfg["batch_size"], cfg["lr"], `epochs` passes or `steps` minibatches."""
    from flkit import models, partition
    from flkit.tasks import EngineTask
    x, y, xt, yt = _mnist(cfg)
    part = partition.dirichlet(y.numpy(), clients, cfg["dirichlet"], seed, min_size=cfg["batch_size"])
    return EngineTask(model=models.build(model), x=x, y=y, clients=list(part.indices), x_test=xt, y_test=yt,
                      batch_size=cfg["batch_size"], epochs=epochs, steps=steps, local_lr=cfg["lr"])


def topk_experiment(cfg: dict, seeds: Sequence[int]) -> pd.DataFrame:
    r"""FedAvg on MNIST through `flkit.fl.run` with top-k uploads. M = cfg["clients"] clients (Dirichlet
    label split drawn with the first seed, the same for every run), N = cfg["per_round"] of them uniformly
    per round (`sample.UniformK`), `aggregate.FedAvg("size")`, server step 1, cfg["steps"] local SGD steps
    (minibatches drawn independently, the same number for every client) on cfg["model"]. One method per
    (what, frac) in {update, model} x cfg["fracs"] (frac = 1 is one uncompressed method, "dense"). Returns a tidy table (method, seed, round, metric, value, frac): the test
    metrics of every run, the mean relative error of the sent messages (metric "sent_error", seed -1), and the
    relative top-k errors of the dense runs' uploads at every frac of cfg["error_fracs"] (metrics
    "error_update" / "error_model", averaged over the seeds' uploads of each round, seed -1)."""
    from flkit import aggregate, fl, sample
    settings.check_profile(cfg, "topk settings")
    seeds = settings.seeds(seeds)
    task = _mnist_task(cfg, seeds[0], cfg["clients"], model=cfg["model"], steps=cfg["steps"])
    plan, algs = {}, {}
    for frac in cfg["fracs"]:
        for what in ("update", "model"):
            name = "dense" if frac >= 1 else f"top-{frac:g} {what}"
            if name not in algs:
                algs[name] = fl.Algorithm(aggregate.FedAvg("size"), sampler=sample.UniformK(cfg["per_round"]), lr=1.0)
            if frac < 1:
                plan[name] = (what, frac)
    wrapped = TopKTask(task, plan, curve_method="dense" if "dense" in algs else None,
                       curve_fracs=tuple(cfg["error_fracs"]))
    res = fl.run(wrapped, algs, seeds=seeds, rounds=cfg["rounds"], every=cfg["every"], diverge_factor=None)
    tidy = res.tidy().assign(frac=np.nan)
    frames = [tidy]
    if wrapped.log:
        sent = pd.DataFrame(wrapped.log).groupby(["method", "round"], as_index=False)["error"].mean()
        frames.append(pd.DataFrame(dict(method=sent["method"], seed=-1, round=sent["round"] + 1, metric="sent_error",
                                        value=sent["error"], frac=np.nan)))
    if wrapped.curves:
        cv = pd.DataFrame(wrapped.curves).groupby(["what", "frac", "round"], as_index=False)["error"].mean()
        frames.append(pd.DataFrame(dict(method="dense", seed=-1, round=cv["round"] + 1, metric="error_" + cv["what"],
                                        value=cv["error"], frac=cv["frac"])))
    return pd.concat(frames, ignore_index=True)


# ================================================================================================
# page helpers: tables and figures
# ================================================================================================
def population(M: int, pi_min: float, pi_max: float) -> np.ndarray:
    """A population of M clients with availabilities evenly spaced in [pi_min, pi_max]."""
    return np.linspace(pi_min, pi_max, M)


def inclusion_table(pi, Ns: Sequence[int], rounds: int, seed: int) -> pd.DataFrame:
    """Exact (`participation.inclusion_probability`) and Monte Carlo inclusion probabilities of every client
    for every N, with the standard error and z = (mc - exact) / se (NaN where se = 0). The Monte Carlo of N
    uses the seed ``seed * 1000 + N``."""
    settings.positive_int(rounds, "rounds")
    rows = []
    for N in Ns:
        exact = participation.inclusion_probability(pi, N)
        f, se = inclusion_monte_carlo(pi, N, rounds, seed * 1000 + N)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(se > 0, (f - exact) / se, np.nan)
        rows.append(pd.DataFrame(dict(N=N, client=np.arange(len(pi)), pi=pi, exact=exact, mc=f, se=se, z=z)))
    return pd.concat(rows, ignore_index=True)


def plot_inclusion(tab: pd.DataFrame, ax_incl, ax_weight) -> None:
    """Left: P(i in B_k) against pi_i (lines exact, dots Monte Carlo); right: the induced weights p_i (q uniform)
    against the target 1/M and the weights pi_i / sum pi of the rule "use all available clients"."""
    import matplotlib.pyplot as plt
    cmap = plt.get_cmap("viridis")
    Ns = sorted(tab["N"].unique())
    for j, (N, g) in enumerate(tab.groupby("N")):
        col = cmap(j / max(1, len(Ns) - 1))
        ax_incl.plot(g["pi"], g["exact"], "-", color=col, label=f"N={N}")
        ax_incl.errorbar(g["pi"], g["mc"], yerr=3 * g["se"], fmt="o", ms=3, color=col)
        ax_weight.plot(g["pi"], g["exact"] / g["exact"].sum(), "o-", ms=3, color=col, label=f"N={N}")
    g = tab[tab["N"] == Ns[0]]
    ax_incl.plot(g["pi"], g["pi"], "k:", lw=0.8, label=r"$\pi_i$ (all available)")
    ax_weight.plot(g["pi"], g["pi"] / g["pi"].sum(), "k:", lw=0.8, label=r"$\pi_i/\sum_j\pi_j$ (all available)")
    ax_weight.axhline(1 / len(g), color="grey", ls="--", lw=0.8, label=r"target $\alpha_i = 1/M$")
    ax_incl.set(xlabel=r"availability $\pi_i$", ylabel=r"$P(i \in \mathcal{B}_k)$ (dots: Monte Carlo $\pm$3 s.e.)")
    ax_weight.set(xlabel=r"availability $\pi_i$", ylabel=r"$p_i$ ($q_i = 1$)")
    ax_weight.set_title(r"weight $p_i$ of the optimised objective" "\n" r"(lines and colours of N as on the left)",
                        fontsize=9)
    ax_incl.legend()
    # the N lines repeat the left legend; the two references only, in the empty upper left
    hs, ls = ax_weight.get_legend_handles_labels()
    keep = [(h, l) for h, l in zip(hs, ls) if not l.startswith("N=")]
    ax_weight.legend(*zip(*keep), loc="upper left")


def scheme_tables(vectors: dict, alpha, Ns: Sequence[int], *, enumerate_max_N: int, runs: int,
                  draws_per_run: int, seed: int, sizes) -> tuple[pd.DataFrame, pd.DataFrame]:
    r"""Both schemes on given client vectors (``vectors``: name -> (M, d) array, e.g. the local models and the
    updates of one round). Returns

    * ``exact``: per (vectors, scheme, N <= enumerate_max_N) the relative bias
      :math:`\|\mathbb E[c^\top W] - \alpha^\top W\|/\|\alpha^\top W\|` by enumeration and the variance
      :math:`\mathbb E\|c^\top W - \alpha^\top W\|^2` by enumeration and in closed form;
    * ``mc``: per (vectors, scheme, N) with ``runs x draws_per_run`` draws of the package's samplers: the
      chi-square statistic of :math:`\bar c = \alpha` with the exact covariance (rank r degrees of freedom) and
      its p-value, the relative error of the mean aggregate and its expected size under unbiasedness
      :math:`\sqrt{\mathrm{tr}(G\Sigma)/D}/\|\alpha^\top W\|`, the Monte Carlo variance with its standard error
      and the exact one."""
    from scipy import stats
    a = np.asarray(alpha, dtype=float)
    ex, mc = [], []
    for scheme in ("I", "II"):
        for N in Ns:
            C = scheme_monte_carlo(sizes, N, scheme, runs=runs, draws_per_run=draws_per_run, seed=seed)
            Sig = weight_covariance(a, N, scheme)
            D = len(C)
            dev = C.mean(0) - a
            evals, evecs = np.linalg.eigh(Sig)
            keep = evals > 1e-12 * max(1e-300, evals.max())
            r = int(keep.sum())
            proj = evecs[:, keep].T @ dev
            chi2 = float(D * (proj ** 2 / evals[keep]).sum()) if r else float("nan")
            pval = float(stats.chi2.sf(chi2, r)) if r else float("nan")
            for name, W in vectors.items():
                W = np.asarray(W, dtype=float)
                G = W @ W.T
                tnorm = float(np.linalg.norm(a @ W))
                err2 = np.einsum("si,ij,sj->s", C - a, G, C - a)
                var = float(np.trace(G @ Sig))
                mc.append(dict(vectors=name, scheme=scheme, N=N, draws=D, chi2=chi2, dof=r, p_value=pval,
                               rel_mean_error=float(np.sqrt(max(dev @ G @ dev, 0.0))) / tnorm,
                               rel_mean_error_scale=np.sqrt(var / D) / tnorm,
                               var_mc=float(err2.mean()), var_mc_se=float(err2.std(ddof=1) / np.sqrt(D)),
                               var_exact=var))
                if N <= enumerate_max_N:
                    mean, v_enum, target = exact_moments(list(a), N, scheme, W)
                    ex.append(dict(vectors=name, scheme=scheme, N=N, outcomes=len(enumerate_scheme(list(a), N, scheme)),
                                   rel_bias=float(np.linalg.norm(mean - target)) / tnorm, var_enum=v_enum,
                                   var_closed=var))
    return pd.DataFrame(ex), pd.DataFrame(mc)


def variance_curves(vectors: dict, alpha) -> pd.DataFrame:
    """Exact E||c^T W - alpha^T W||^2 for every N = 1..M, both schemes, every set of vectors."""
    a = np.asarray(alpha, dtype=float)
    rows = []
    for name, W in vectors.items():
        G = np.asarray(W, dtype=float) @ np.asarray(W, dtype=float).T
        for scheme in ("I", "II"):
            for N in range(1, a.size + 1):
                var = float(np.trace(G @ weight_covariance(a, N, scheme)))
                rows.append(dict(vectors=name, scheme=scheme, N=N, var=var))
    return pd.DataFrame(rows)
