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
   schemes are their own piece, :mod:`flkit.papers.availability.schemes` (its functions are also reachable
   here, as before); this module draws the vectors they aggregate (:func:`local_models_of_one_round`).
3. **Communication.** Uploading models costs :math:`\sum_k|\mathcal B_k|\,\mathrm{size} = K N\,\mathrm{size}`
   over K rounds (:func:`model_upload_bytes`), uploading the data :math:`|S_1|+\dots+|S_M|`
   (:func:`data_upload_bytes`). Top-k sparsification (:func:`topk`) of the update
   :math:`w_{k,E}-w_{k,0}` or of the model :math:`w_{k,E}` itself, applied by the task wrapper
   :class:`TopKTask` to the clients' uploads before aggregation. No error feedback (not in the notes).

Everything runs on the CPU (the notebook's ``device`` parameter is accepted and not used).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from textwrap import fill
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from flkit import aggregate, datasets, fl, models, participation, partition, plots, sample
from flkit.datasets import QuadraticProblem
from flkit.papers import claims, settings
from flkit.papers.availability import common
from flkit.papers.availability.schemes import (
    SCHEMES,
    check_N,
    enumerate_scheme,
    exact_moments,
    scheme_monte_carlo,
    scheme_tables,
    scheme_weights,
    variance_curves,
    weight_covariance,
)
from flkit.seeding import rng
from flkit.tasks import EngineTask, QuadraticTask

__all__ = [
    "PROFILES", "profile", "NOTES_EXAMPLE",
    "exact_inclusion", "inclusion_monte_carlo", "effective_weights", "chi2_divergence", "quadratic_clients_task",
    "objective_check",
    "SCHEMES", "scheme_weights", "enumerate_scheme", "exact_moments", "weight_covariance", "scheme_monte_carlo",
    "model_upload_bytes", "data_upload_bytes", "notes_practical_numbers", "model_table", "dataset_bytes",
    "cost_table", "upload_count_law", "count_uploads", "topk", "k_of", "relative_topk_error", "topk_error_curve",
    "TopKTask", "topk_experiment", "local_models_of_one_round", "population", "inclusion_table", "plot_inclusion",
    "scheme_tables", "variance_curves", "MNIST_MODELS",
    "BOX", "OBJECTIVE_B", "configs", "objective_runs", "count_runs", "topk_runs", "example_table",
    "inclusion_verdict", "inclusion_numbers", "settling", "plot_settling", "cost_view", "cost_numbers", "upload_checks",
           "count_table", "topk_summary", "plot_topk", "topk_view",
    "topk_checks", "topk_numbers", "summary_words",
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
    `overrides` replace top-level settings (None keeps the profile's; ``seeds``: the seeds of the random draws,
    the first of which seeds the single draws), and every setting is checked before
    any work (`settings.check_profile`; burn_in < rounds, per_round <= clients)."""
    where = f"sampling profile {name!r}"
    cfg = common.profile_of("sampling", PROFILES, name, overrides)
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
    N = check_N(N, M)
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
# 2. Li et al.'s two schemes: flkit.papers.availability.schemes; the vectors they aggregate
# ================================================================================================
def local_models_of_one_round(cfg: dict, seed: int) -> dict:
    """The M local models (and updates w - y) of one FedAvg round on MNIST, all clients training from the same
    initial model: logistic regression (`flkit.models.logreg`), Dirichlet(cfg["dirichlet"]) label split of
    the training set into cfg["M"] clients, cfg["local_epochs"] epochs of SGD with batch cfg["batch_size"] and
    step cfg["lr"]. Returns dict(sizes (M,), w0 (d,), local (M, d), delta (M, d)) as float64 arrays."""
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
    rows = []
    for name in models.NAMES:
        d = models.count_parameters(models.build(name))
        rows.append(dict(model=name, params=d, bytes=4 * d))
    return pd.DataFrame(rows)


def dataset_bytes(name: str) -> dict:
    """Training-set size of a stored data set: samples, bytes as uint8 images plus one byte per label
    (how the files store them), and as float32 inputs plus int64 labels (what the engine holds)."""
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
    x, y, xt, yt = _mnist(cfg)
    part = partition.dirichlet(y.numpy(), clients, cfg["dirichlet"], seed, min_size=cfg["batch_size"])
    return EngineTask(model=models.build(model), x=x, y=y, clients=list(part.indices), x_test=xt, y_test=yt,
                      batch_size=cfg["batch_size"], epochs=epochs, steps=steps, local_lr=cfg["lr"])


def topk_experiment(cfg: dict, seeds: Sequence[int]) -> pd.DataFrame:
    r"""FedAvg on MNIST through `flkit.fl.run` with top-k uploads. M = cfg["clients"] clients (Dirichlet
    label split drawn with the first seed, the same for every run), N = cfg["per_round"] of them uniformly
    per round (`sample.UniformK`), `aggregate.FedAvg("size")`, server step 1, cfg["steps"] local SGD steps
    (minibatches drawn independently, the same number for every client) on cfg["model"]. One method per
    (what, frac) in {update, model} x cfg["fracs"] (frac = 1 is one uncompressed method, "dense"). Returns a tidy table
    (method, seed, round, metric, value, frac): the test
    metrics of every run, the mean relative error of the sent messages (metric "sent_error", seed -1), and the
    relative top-k errors of the dense runs' uploads at every frac of cfg["error_fracs"] (metrics
    "error_update" / "error_model", averaged over the seeds' uploads of each round, seed -1)."""
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


# ================================================================================================
# the page: its stored runs, its readings and the verdicts of its checks
# ================================================================================================
BOX = dict(page="availability/sampling",
           headline="Claim: FedAvg is still prone to the bias due to heterogeneous client availability",
           tests="that FedAvg picking N of the available clients uniformly is still biased (the notes' 5/6 example), "
                 "the two unbiased sampling schemes of Li et al. and their variances, the count of uploads K N, and "
                 "the cost of communication with top-k compression of the update rather than of the model")
OBJECTIVE_B = [[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]]     # the clients' optima b_i in the notes' example (N = 2)


def configs(cfg: dict) -> dict:
    """The stored-run configs of the page under the settings `cfg` (:func:`profile`): "objective" (where FedAvg
    settles in the notes' example), "count" (one per availability of the upload count) and "topk"."""
    CU = cfg["comm"]["count"]
    return dict(objective=dict(experiment="sampling_objective", pi=[1, 1, 0.5], N=2, b=OBJECTIVE_B, **cfg["objective"]),
                count=[dict(experiment="sampling_count_uploads", M=CU["M"], N=CU["N"], K=CU["K"], dim=CU["dim"], pi=pi,
                            seeds=CU["seeds"]) for pi in CU["pis"]],
                topk=dict(experiment="sampling_topk", seeds=cfg["seeds"], **cfg["topk"]))


def objective_runs(cfg: dict, where) -> pd.DataFrame:
    """:func:`objective_check` on the notes' example (:data:`NOTES_EXAMPLE`, optima :data:`OBJECTIVE_B`), read
    from the store `where` or made."""
    oc = cfg["objective"]
    return common.cached(where, configs(cfg)["objective"],
                         lambda: objective_check(NOTES_EXAMPLE["pi"], 2, OBJECTIVE_B, **oc)
                         .assign(round=oc["rounds"], metric="w_time_average"))


def count_runs(cfg: dict, where) -> pd.DataFrame:
    """:func:`count_uploads` at every availability of the profile, read from the store `where` or made."""
    CU = cfg["comm"]["count"]
    return pd.concat([common.cached(where, c, lambda c=c: count_uploads(CU["M"], CU["N"], CU["K"], c["pi"],
                                                                       CU["seeds"], CU["dim"])
                                    .assign(round=CU["K"], metric="uploads", value=lambda d: d["uploads"]))
                      for c in configs(cfg)["count"]], ignore_index=True)


def topk_runs(cfg: dict, where) -> pd.DataFrame:
    """:func:`topk_experiment` of the profile, read from the store `where` or made."""
    return common.cached(where, configs(cfg)["topk"], lambda: topk_experiment(cfg["topk"], cfg["seeds"]))


def example_table(P, alpha) -> tuple[pd.DataFrame, list, list]:
    """The notes' example (:data:`NOTES_EXAMPLE`) in exact arithmetic: per client pi_i, the inclusion probability
    P_i, the target alpha_i, the weights p_i of the objective with q_i = alpha_i and with q_i = alpha_i / P_i.
    Returns (the table as text, p with q = alpha, p with q = alpha / P)."""
    p_fedavg = effective_weights(P, alpha)
    q_fix = [a / Pi for a, Pi in zip(alpha, P)]
    p_fix = effective_weights(P, q_fix)
    tab = pd.DataFrame({"pi_i": NOTES_EXAMPLE["pi"], "P(i in B_k)": P, "target alpha_i": alpha,
                        "p_i (q_i = alpha_i)": p_fedavg, "q_i = alpha_i / P_i": q_fix, "p_i (that q_i)": p_fix},
                       index=["client 1", "client 2", "client 3"]).map(str)
    return tab, p_fedavg, p_fix


def inclusion_verdict(inc: pd.DataFrame) -> tuple[bool, str]:
    """The Monte Carlo inclusion frequencies of :func:`inclusion_table` within 4 standard errors of the law."""
    zmax, nz = float(np.nanmax(np.abs(inc["z"]))), int(inc["z"].notna().sum())
    return zmax <= 4, f"max |z| = {zmax:.2f} over {nz} estimates <= 4"


def inclusion_numbers(inc: pd.DataFrame, pi, Ns) -> dict:
    """The numbers and words of the inclusion section that the page's prose glues: the weights p_i (q = 1) of
    the least and the most available client over N, their ratio against pi_max / pi_min, the chi-square
    divergences from the uniform target per N and for "use all available clients"."""
    w = inc.assign(p=inc["exact"] / inc.groupby("N")["exact"].transform("sum"))
    chi = pd.Series({N: float(chi2_divergence(np.full(len(g), 1 / len(g)), g["p"])) for N, g in w.groupby("N")})
    chi_all = float(chi2_divergence(np.full(len(pi), 1 / len(pi)), pi / pi.sum()))
    lo, hi = w[w["pi"] == pi.min()], w[w["pi"] == pi.max()]
    ratio = (hi.set_index("N")["p"] / lo.set_index("N")["p"])
    sharper = bool((ratio[ratio.index < len(pi)] > pi.max() / pi.min()).all())
    return dict(pi_lo=pi.min(), pi_hi=pi.max(), p_lo_min=lo["p"].min(), p_lo_max=lo["p"].max(),
                p_hi_min=hi["p"].min(), p_hi_max=hi["p"].max(), p_target=1 / len(pi), Ns=str(Ns),
                ratio_min=ratio.min(), ratio_max=ratio.max(), ratio_all=pi.max() / pi.min(),
                chi_N=", ".join(f"{v:.3f} (N = {n})" for n, v in chi.items()), chi_all=chi_all,
                w_sharp="larger" if sharper else "smaller", w_skew="even more" if sharper else "less")


def settling(obj: pd.DataFrame, w_B, w_T) -> list[tuple[str, str, bool]]:
    """Where FedAvg settles (:func:`objective_runs`): per rule, (a line on its time-averaged iterate against
    the predicted minimizer, the name of the check, whether every coordinate is within 3 standard errors)."""
    summ = obj.groupby(["method", "coord"])["value"].agg(["mean", "sem"])
    out = []
    for method, target, name in (("q=1", w_B, "argmin F_B"), ("q=alpha/P", w_T, "argmin F_T")):
        m, s = summ.loc[method, "mean"].to_numpy(), summ.loc[method, "sem"].to_numpy()
        out.append((f"{method}: time-averaged w = {np.round(m, 4)} +- {np.round(s, 4)};  {name} = "
                    f"{np.round(target, 4)}", f"FedAvg {method} converges to {name}",
                    bool(np.all(np.abs(m - target) <= 3 * s))))
    return out


def plot_settling(obj: pd.DataFrame, b, w_B, w_T, oc: dict):
    """Left: the clients' optima and the two minimizers; right: the time-averaged iterate of every seed minus the
    predicted minimizer of its rule. Returns the figure."""
    fig, axes = plots.figure(1, 2, row_height=4.0)
    axes = axes[0]
    ax = axes[0]
    ax.plot(*np.array(b).T, "ks", label="client optima $b_i$")
    ax.plot(*w_B, "*", color="tab:blue", ms=16, mec="k", label=r"$\arg\min F_B$, $p = (5/12, 5/12, 1/6)$")
    ax.plot(*w_T, "*", color="tab:red", ms=16, mec="k", label=r"$\arg\min F_T$, $\alpha = (1/3, 1/3, 1/3)$")
    ax.set(xlabel="$w_1$", ylabel="$w_2$", aspect="equal")
    ax.set_title(fill("the two minimisers", 44), fontsize=9.5)
    qtext = {"q=1": "$q = 1$", "q=alpha/P": r"$q = \alpha/P$"}
    for (method, target, col, name) in (("q=1", w_B, "tab:blue", "F_B"), ("q=alpha/P", w_T, "tab:red", "F_T")):
        pts = obj[obj["method"] == method].pivot(index="seed", columns="coord", values="value").to_numpy() - target
        axes[1].plot(pts[:, 0], pts[:, 1], "o", ms=4, alpha=0.6, color=col,
                     label=f"{qtext[method]}: minus argmin ${name}$")
    axes[1].axhline(0, color="grey", lw=0.8)
    axes[1].axvline(0, color="grey", lw=0.8)
    axes[1].set(xlabel="$w_1$ offset", ylabel="$w_2$ offset")
    axes[1].set_title(fill("time average minus the predicted minimiser, one dot per seed", 44), fontsize=9.5)
    # one legend below both panels: inside, it would cover the client optimum at (0, 4) or the dots
    fig.legend(*[sum(z, []) for z in zip(*(a.get_legend_handles_labels() for a in axes))],
               loc="outside lower center", ncol=2, markerscale=0.6)
    fig.suptitle(fill(f"Where FedAvg settles (notes' example, N=2, step {oc['lr']}, {oc['rounds']} rounds, "
                      f"{len(oc['seeds'])} seeds)", 100), fontsize=9.5)
    return fig


def cost_view(ct: pd.DataFrame) -> pd.DataFrame:
    """:func:`cost_table` for reading: bytes in GB, the ratio to the data upload and the break-even rounds."""
    GB = lambda col: (ct[col] / 1e9).round(3)  # noqa: E731
    return pd.DataFrame({"model": ct["model"], "params d": ct["params"], "N": ct["N"],
                         "FL uploads K N 4d (GB)": GB("fl_bytes"), "top-10% (GB)": GB("fl_bytes_top10"),
                         "top-1% (GB)": GB("fl_bytes_top1"), "MNIST upload (GB)": GB("data_bytes"),
                         "FL / data": ct["ratio"].round(1), "break-even K*": ct["break_even_K"].round(2)}
                        ).set_index(["model", "N"])


def cost_numbers(ct: pd.DataFrame, data: dict, nums: dict, N0: int) -> dict:
    """The numbers of the communication section that the page's prose glues, for N = `N0`: logistic regression
    and the largest model against uploading the MNIST data once (`data`: :func:`dataset_bytes`)."""
    lr_, big = ct[(ct["model"] == "logreg") & (ct["N"] == N0)].iloc[0], ct[ct["N"] == N0].sort_values("params").iloc[-1]
    return dict(mnist_mb=data["bytes_uint8"] / 1e6, K=nums["K"], N0=N0, lr_params=int(lr_["params"]),
                lr_gb=lr_["fl_bytes"] / 1e9, lr_ratio=lr_["ratio"], lr_k=lr_["break_even_K"], big_model=big["model"],
                big_params=int(big["params"]), big_ratio=big["ratio"], big_k=big["break_even_K"],
                top1_factor=lr_["fl_bytes"] / lr_["fl_bytes_top1"],
                w_single="more" if big["break_even_K"] < 1 else "less")


def upload_checks(cu: pd.DataFrame, CU: dict) -> list[tuple[str, bool, str]]:
    """The upload count (:func:`count_runs`) as (name, passed, rule): exactly K N with every client always
    available, and K E min(N, |A_k|) (``claims.agree``: within 2 standard errors) at every availability."""
    full = cu[cu["pi_min"] == 1.0]
    out = [("uploads = K N, full availability",
            bool((full["uploads"] == full["KN"]).all() and (full["bytes"] == full["KN_bytes"]).all()),
            f"every run with pi = 1: uploads = K N = {CU['K'] * CU['N']:,} and bytes = 4 d K N exactly")]
    for pi_, g in cu.groupby("pi_min"):
        ag = claims.agree(f"pi = {pi_:g}", g["uploads"], g["expected"].iloc[0])
        out.append((f"uploads = K E min(N, |A_k|), pi = {pi_:g}", ag.ok,
                    f"mean uploads {ag.ours:,.1f} against the exact {ag.reference:,.1f} (|diff| <= 2 s.e. = "
                    f"{ag.margin:.1f}; K N = {CU['K'] * CU['N']:,})"))
    return out


def count_table(cu: pd.DataFrame) -> pd.DataFrame:
    """Per availability: mean and standard deviation of the uploads over the seeds, the exact expectation, K N."""
    return cu.groupby("pi_min").agg(uploads=("uploads", "mean"), sd=("uploads", "std"), exact=("expected", "first"),
                                    KN=("KN", "first"))


def topk_summary(tk: pd.DataFrame, rounds: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """From :func:`topk_runs`: the test accuracy rows, the relative top-k error curves of the dense runs' uploads
    (mean, min, max over rounds per metric and fraction) and the final accuracy per method (mean, s.e., seeds)."""
    acc = tk[tk["metric"] == "test_acc"]
    err = tk[tk["metric"].isin(["error_update", "error_model"])]
    curve = err.groupby(["metric", "frac"])["value"].agg(["mean", "min", "max"]).reset_index()
    final = acc[acc["round"] == rounds].groupby("method")["value"].agg(["mean", "sem", "count"])
    return acc, curve, final


def plot_topk(axes, curve: pd.DataFrame, acc: pd.DataFrame, tc: dict) -> None:
    """Left: the relative top-k error of the update and of the model against k/d; right: the test accuracy of
    FedAvg with each compression of the uploads."""
    for met, col, lab in (("error_update", "tab:blue", r"update $w_{k,E} - w_{k,0}$"),
                          ("error_model", "tab:red", r"model $w_{k,E}$")):
        g = curve[curve["metric"] == met]
        axes[0].plot(g["frac"], g["mean"], "o-", color=col, label=lab)
        axes[0].fill_between(g["frac"], g["min"], g["max"], color=col, alpha=0.2)
    axes[0].set(xscale="log", xlabel="k / d (fraction of entries kept)", ylabel=r"$\|x - \mathrm{top}_k(x)\| / \|x\|$")
    axes[0].legend(title="x =")
    axes[0].set_title(fill("Relative top-k error of the uploads (mean over rounds; band: min-max)", 44), fontsize=9.5)
    cols = {"dense": "k", "top-0.1 update": "tab:blue", "top-0.01 update": "tab:cyan", "top-0.1 model": "tab:red",
            "top-0.01 model": "tab:orange"}
    for method, g in acc.groupby("method"):
        m = g.groupby("round")["value"].mean()
        axes[1].plot(m.index, m.values, "o-", ms=3, color=cols.get(method), label=method.replace("top-", "k/d = "))
    axes[1].set(xlabel="round", ylabel="test accuracy (mean over seeds)")
    axes[1].legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)  # below: the curves fill the axes
    axes[1].set_title(fill(f"FedAvg on MNIST with top-k uploads ({tc['model']}, N={tc['per_round']} of "
                           f"M={tc['clients']})", 44), fontsize=9.5)


def topk_view(final: pd.DataFrame, tk: pd.DataFrame, d: int) -> pd.DataFrame:
    """The final accuracy per method with the bytes of one upload (float32 dense; top-k: values and int32
    indices) and the mean relative error of the sent messages, for reading."""
    bytes_up = {m: (4 * d if m == "dense" else 8 * k_of(float(m.split()[0][4:]), d)) for m in final.index}
    sent = tk[tk["metric"] == "sent_error"].groupby("method")["value"].mean()
    return (final.assign(**{"bytes per upload": pd.Series(bytes_up), "mean error of the sent message": sent}).round(4)
            .astype(object).fillna("n/a: dense, nothing dropped"))


def topk_checks(curve: pd.DataFrame, final: pd.DataFrame, tc: dict, seeds) -> list[tuple[str, bool, str]]:
    """The top-k claims as (name, passed, rule): the error of the update is below the model's at every k/d < 1,
    and at every compression the update's final accuracy is above the model's by more than 3 standard errors
    (one seed: above)."""
    ce = curve.pivot_table(index="frac", columns="metric", values="mean")
    below = ce[ce.index < 1]
    out = [("top-k error smaller for the update than for the model",
            bool((below["error_update"] < below["error_model"]).all()), f"at every k/d < 1 in {list(below.index)}")]
    for f_ in [x for x in tc["fracs"] if x < 1]:
        u, m_ = final.loc[f"top-{f_:g} update"], final.loc[f"top-{f_:g} model"]
        diff, s_ = u["mean"] - m_["mean"], float(np.hypot(u["sem"], m_["sem"])) if len(seeds) > 1 else float("nan")
        out.append((f"accuracy after {tc['rounds']} rounds, top-{f_:g}: update > model",
                    bool(diff > 3 * s_ if len(seeds) > 1 else diff > 0),
                    f"difference {diff:.3f} > 3 s.e. ({s_:.3f}, {len(seeds)} seeds)" if len(seeds) > 1 else
                    "one seed: difference > 0"))
    return out


def topk_numbers(curve: pd.DataFrame, final: pd.DataFrame, tk: pd.DataFrame, rounds: int) -> dict:
    """The numbers of the top-k section that the page's prose glues: the relative errors at k/d near 1% and
    10%, the final accuracy of every method, the sent error of top-1% models at the first and the last round."""
    ce = curve.pivot_table(index="frac", columns="metric", values="mean")
    first_last = tk[tk["metric"] == "sent_error"].groupby(["method", "round"])["value"].mean().unstack("round")
    e1 = ce.loc[min(ce.index, key=lambda x: abs(x - 0.01))]
    e10 = ce.loc[min(ce.index, key=lambda x: abs(x - 0.1))]
    acc_of = {m.replace("top-", "acc_").replace(".", "").replace(" ", "_"): final.loc[m, "mean"] for m in final.index}
    return dict(e1_upd=100 * e1["error_update"], e1_mod=100 * e1["error_model"], e10_upd=100 * e10["error_update"],
                e10_mod=100 * e10["error_model"], rounds=rounds, **acc_of,
                sent_first=first_last.loc["top-0.01 model"].iloc[0],
                sent_last=first_last.loc["top-0.01 model"].iloc[-1])


def summary_words(checks, ct: pd.DataFrame, nums: dict, final: pd.DataFrame, model: str) -> dict:
    """The numbers and outcome words of the page's summary, from its checks (``items.Checks``)."""
    acc = [k for k in checks.verdicts() if k.startswith("accuracy after")]
    return dict(n_agree=checks.n_agree, n_checks=len(checks), comm_min=ct["ratio"].min(), comm_max=ct["ratio"].max(),
                uploads=nums["uploads"], acc_list=", ".join(f"{final.loc[m, 'mean']:.3f} ({m})" for m in final.index),
                model=model,
                w_56="exactly" if checks.ok("5/6, exact", "5/6, package law", "5/6, Monte Carlo") else "not exactly",
                w_fix=("removes" if checks.ok("FedAvg q=1 converges to argmin F_B",
                                              "FedAvg q=alpha/P converges to argmin F_T") else "does not remove"),
                w_30k="agrees with" if checks.ok("the notes' 30K") else "does not agree with",
                w_topk=("keeps" if checks.ok("top-k error smaller for the update than for the model", *acc) else
                        "does not always keep"))
