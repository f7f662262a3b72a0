r"""The same rule under different names: each documents' form written out, run on one seeded stream.

Three server rules appear in several documents under different names, and one availability model under two
parametrizations:

* **importance sampling.** Document 002's FedAvg (IS),
  :math:`G_t = \frac1n\sum_{i\in\mathcal A(t)}\Delta w_t^{(i)}/p_i`;
  document 000's Algorithm 1 with the "known participation statistics" :math:`\omega_n = 1/p_n`,
  :math:`x_{t+1} = x_t + \frac{\eta}{N}\sum_n\omega_n\Delta_t^n`; document 001's unnormalized aggregation with
  :math:`q_i = \alpha_i/\pi_i`, :math:`w_{k+1} = w_k + \gamma_s\sum_{A_k}q_i(w^{(i)} - w_k)`, with
  :math:`\alpha_i = 1/N`;
* **SAGA memory.** Document 002's U-MIFA with SAGA memory,
  :math:`G_t = \frac1n\sum_i[y_i + \frac{1_{i\in\mathcal A(t)}}{p_i}(\Delta w^{(i)} - y_i)]`, and document 000's FedVarp
  baseline (FedAU's implementation: the mean over the participants of update minus stored entry, plus the table
  mean), equal when :math:`p_i = |S_t|/N`;
* **MIFA** as document 002 writes it and as document 000's baseline runs it (a stored update per client, the
  model moved by the mean of the table in every round, empty rounds included);
* **Markov availability**: CA-Fed's two-state chain with stationary probability :math:`\pi` and second eigenvalue
  :math:`\lambda` (document 001) and FedAU's with participation rate :math:`p` and activation probability
  :math:`x` (document 000): :math:`\pi = p`, :math:`\lambda = 1 - x/p`, and back :math:`x = (1-\lambda)\pi`.

Each rule is run (a) in each document's form, written out here line by line in NumPy with the clients' local
gradient steps as explicit loops, each in its own notation and sign convention, and (b) through the book's round
loop :func:`flkit.fl.run` with the server rules the chapters use (``flkit.aggregate``), all on one stream: the
same quadratic clients, initial model and participation mask of a seed (``flkit.seeding``), in float64. The
trajectories :math:`w_0, \dots, w_T` are compared coordinate by coordinate (:func:`max_diff`, the largest absolute
difference over all pairs of forms, rounds and coordinates) against :data:`TOL`. Beside each row a rule that is
*not* the same (:func:`rule_rows`, ``wrong``) is run on the same stream, to show that the comparison tells rules
apart.

Step sizes. Document 002 normalises an update by the local step :math:`\eta` and steps the server by
:math:`\eta`; documents 000 and 001 add the displacement :math:`y - x` times a server step. With the local step
:math:`\gamma` in all three, 002's :math:`\eta = \gamma`, 000's server :math:`\eta = 1` and 001's :math:`\gamma_s = 1`
give the same update; ``flkit.fl.run`` takes the pseudo-gradient :math:`(x - y)/\gamma` of the task and the server
step ``lr`` :math:`= \gamma`.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from flkit import aggregate, datasets, fl, participation
from flkit.papers import claims
from flkit.papers.across.items import ITEM
from flkit.seeding import rng
from flkit.tasks import QuadraticTask

__all__ = ["PROFILES", "BOX", "SETTING", "TOL", "Stream", "stream", "is_002", "algorithm1_000", "unnormalized_001",
           "normalized_001", "saga_002", "fedvarp_000", "umifa_literal_002", "mifa_002", "mifa_000",
           "mifa_waiting", "through_fl", "max_diff", "rule_rows", "rules_table", "forms_table", "empty_round_caveat",
           "to_cafed", "to_fedau", "markov_exact", "markov_simulated", "markov_table", "profile", "checks",
           "plot_differences", "RULES", "RULE_MARKOV", "forms_view", "markov_view", "markov_z_view", "markov_numbers",
           "summary_table", "summary_view", "summary_numbers"]

TOL = 1e-10          # largest absolute difference allowed between two forms of the same rule (float64)
WRONG_MIN = 1e-6     # smallest difference that tells a different rule apart
# one quadratic federation for every rule: 8 clients with their own curvatures and optima (flkit.datasets), three
# local gradient steps of 0.05, heterogeneous Bernoulli participation p in [0.1, 0.5] (about one round in twenty
# without any participant), and k = 3 clients uniformly per round for FedVarp's own sampler
SETTING = dict(clients=8, dim=5, mu=0.5, L=2.0, heterogeneity=1.0, local_steps=3, local_lr=0.05,
               p=tuple(np.round(np.linspace(0.1, 0.5, 8), 6)), k=3)
PROFILES = {
    "smoke": dict(seeds=[0], rounds=60, chains=100, chain_rounds=1000),
    "paper": dict(seeds=[0, 1, 2], rounds=400, chains=400, chain_rounds=5000),
}
# the page's verdict box (scorecard.box)
BOX = dict(page="across/equivalences", headline=ITEM["is"],
           tests="that rules the documents write under different names are one rule (importance sampling, SAGA "
                 "memory, MIFA) and one chain (Markov availability), every form run on one seeded stream")


def profile(name: str, **overrides) -> dict:
    """The page's settings for profile `name` (smoke or paper), with `overrides` (``seeds=None`` keeps the
    profile's)."""
    if name not in PROFILES:
        raise ValueError(f"profile {name!r} is not one of {sorted(PROFILES)}")
    cfg = dict(PROFILES[name])
    cfg.update({k: v for k, v in overrides.items() if v is not None})
    if not cfg["seeds"] or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0
                               for s in cfg["seeds"]):
        raise ValueError(f"seeds must be a non-empty list of ints >= 0, got {cfg['seeds']!r}")
    return cfg


# ------------------------------------------------------------------------------------------------- the stream
@dataclass(frozen=True)
class Stream:
    """What every form of a rule sees for one seed: the clients (A (N, d) diagonal curvatures, b (N, d) optima),
    the initial model w0 (d,), the participation probabilities p (N,), a Bernoulli(p) mask and a mask of k
    clients per round (rounds, N)."""
    seed: int
    A: np.ndarray
    b: np.ndarray
    w0: np.ndarray
    p: np.ndarray
    bernoulli: np.ndarray
    uniform_k: np.ndarray
    k: int

    @property
    def problem(self) -> datasets.QuadraticProblem:
        return datasets.QuadraticProblem(torch.tensor(self.A), torch.tensor(self.b))


def stream(seed: int, rounds: int) -> Stream:
    """The seed's stream: clients from ``rng(seed, "data")`` (``flkit.datasets.quadratic_clients``), w0 from
    ``rng(seed, "init")``, the masks from ``rng(seed, "participation")`` (``flkit.participation``)."""
    S = SETTING
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    prob = datasets.quadratic_clients(S["clients"], S["dim"], seed, heterogeneity=S["heterogeneity"], mu=S["mu"],
                                      L=S["L"])
    p = np.asarray(S["p"], dtype=np.float64)
    return Stream(int(seed), prob.A.numpy().copy(), prob.b.numpy().copy(), rng(seed, "init").standard_normal(S["dim"]),
                  p, participation.bernoulli(p, rounds, seed),
                  participation.uniform_k(S["clients"], S["k"], rounds, seed),
                  S["k"])


def _local(A_i, b_i, w, lr: float, steps: int) -> np.ndarray:
    """A client's local training as the documents write it: `steps` gradient steps of size `lr` on
    f_i(w) = 1/2 (w - b_i)^T diag(A_i) (w - b_i), from w."""
    y = w.copy()
    for _ in range(steps):
        y = y - lr * A_i * (y - b_i)
    return y


# ------------------------------------------------------------------------- the documents' forms, written out
def is_002(A, b, mask, p, w0, eta: float, tau: int) -> np.ndarray:
    r"""Document 002, setup i) (FedAvg with importance sampling): each active client sends
    :math:`\Delta w_t^{(i)} = \frac1\eta(w_t - w_{t,\tau}^{(i)})`; :math:`G_t = \frac1n\sum_{i\in\mathcal A(t)}
    \Delta w_t^{(i)}/p_i`; :math:`w_{t+1} = w_t - \eta G_t`. Returns the trajectory (T + 1, d)."""
    n = len(A)
    w, out = np.array(w0, dtype=np.float64), []
    out.append(w.copy())
    for active in mask:
        G = np.zeros_like(w)
        for i in np.flatnonzero(active):
            G += (w - _local(A[i], b[i], w, eta, tau)) / eta / p[i]
        w = w - eta * G / n
        out.append(w.copy())
    return np.array(out)


def algorithm1_000(A, b, mask, omega, x0, gamma: float, eta: float, I: int) -> np.ndarray:
    r"""Document 000, Algorithm 1 with time-constant weights :math:`\omega_n` (``omega``, (N,)): a participant
    computes :math:`\Delta_t^n = y_{t,I}^n - x_t` after I local steps of size :math:`\gamma`, the others
    :math:`\Delta_t^n = 0`; :math:`x_{t+1} = x_t + \frac\eta N\sum_n\omega_n\Delta_t^n`."""
    N = len(A)
    x, out = np.array(x0, dtype=np.float64), []
    out.append(x.copy())
    for active in mask:
        delta = np.zeros((N, x.size))
        for n in np.flatnonzero(active):
            delta[n] = _local(A[n], b[n], x, gamma, I) - x
        x = x + eta / N * (omega[:, None] * delta).sum(0)
        out.append(x.copy())
    return np.array(out)


def unnormalized_001(A, b, mask, q, w0, gamma: float, gamma_s: float, E: int) -> np.ndarray:
    r"""Document 001, the unnormalized aggregation: :math:`w_{k+1,0} = w_{k,0} + \gamma_s\sum_{i\in A_k}q_i
    (w_{k,E}^{(i)} - w_{k,0})`, every client of :math:`A_k` after E local steps of size :math:`\gamma`."""
    w, out = np.array(w0, dtype=np.float64), []
    out.append(w.copy())
    for active in mask:
        step = np.zeros_like(w)
        for i in np.flatnonzero(active):
            step += q[i] * (_local(A[i], b[i], w, gamma, E) - w)
        w = w + gamma_s * step
        out.append(w.copy())
    return np.array(out)


def normalized_001(A, b, mask, q, w0, gamma: float, E: int) -> np.ndarray:
    r"""Document 001, the normalized aggregation ("we consider this aggr. scheme until we say so"):
    :math:`w_{k+1,0} = \sum_{A_k}q_iw_{k,E}^{(i)} / \sum_{A_k}q_i`; an empty :math:`A_k` leaves the model."""
    w, out = np.array(w0, dtype=np.float64), []
    out.append(w.copy())
    for active in mask:
        idx = np.flatnonzero(active)
        if idx.size:
            w = sum(q[i] * _local(A[i], b[i], w, gamma, E) for i in idx) / q[idx].sum()
        out.append(w.copy())
    return np.array(out)


def saga_002(A, b, mask, w0, eta: float, tau: int, p=None) -> np.ndarray:
    r"""Document 002's U-MIFA with SAGA memory (its tables' "SAGA/U-MIFA"; the chapter's reading of U-MIFA):
    :math:`G_t = \frac1n\sum_i\big[y_i + \frac{1_{i\in\mathcal A(t)}}{p_i}(\Delta w_t^{(i)} - y_i)\big]`, then
    :math:`y_i \leftarrow \Delta w_t^{(i)}` for the active i; :math:`w_{t+1} = w_t - \eta G_t`; the table starts at
    zero. ``p=None``: :math:`p_i = |\mathcal A(t)|/n` in each round (in a round without any active client the
    correction is empty and :math:`G_t` is the table's mean)."""
    n = len(A)
    w, y, out = np.array(w0, dtype=np.float64), np.zeros_like(A, dtype=np.float64), []
    out.append(w.copy())
    for active in mask:
        idx = np.flatnonzero(active)
        new = {i: (w - _local(A[i], b[i], w, eta, tau)) / eta for i in idx}
        pr = np.full(n, idx.size / n) if p is None else np.asarray(p, dtype=np.float64)
        G = y.sum(0)
        for i in idx:
            G = G + (new[i] - y[i]) / pr[i]
        for i in idx:
            y[i] = new[i]
        w = w - eta * G / n
        out.append(w.copy())
    return np.array(out)


def fedvarp_000(A, b, mask, x0, gamma: float, eta: float, I: int) -> np.ndarray:
    r"""Document 000's FedVarp baseline as FedAU's implementation runs it (IBM/fedau@6e9cce9, ``main.py``), in
    model form: a table :math:`u_n` of each client's last displacement :math:`y - x` (zeros at the start); in a
    round with participants :math:`S_t`, the direction :math:`d_t = \frac{1}{|S_t|}\sum_{S_t}(\Delta_t^n - u_n) +
    \frac1N\sum_n u_n` (the table before the round), :math:`x_{t+1} = x_t + \eta d_t`, then :math:`u_n \leftarrow
    \Delta_t^n` for :math:`n\in S_t`; a round without participants leaves the model unchanged."""
    x, u, out = np.array(x0, dtype=np.float64), np.zeros_like(A, dtype=np.float64), []
    out.append(x.copy())
    for active in mask:
        idx = np.flatnonzero(active)
        if idx.size:
            delta = {n: _local(A[n], b[n], x, gamma, I) - x for n in idx}
            d = sum(delta[n] - u[n] for n in idx) / idx.size + u.mean(0)
            for n in idx:
                u[n] = delta[n]
            x = x + eta * d
        out.append(x.copy())
    return np.array(out)


def umifa_literal_002(A, b, mask, p, w0, eta: float, tau: int) -> np.ndarray:
    r"""Document 002, setup iii) as written (U-MIFA): for an active client
    :math:`G^{(i)} \leftarrow \frac1{p_i}\Delta w^{(i)} - (\frac1{p_i} - 1)G^{(i)}`, else kept;
    :math:`G_t = \frac1n\sum_iG^{(i)}`; :math:`w_{t+1} = w_t - \eta G_t` (a different rule from the SAGA form)."""
    n = len(A)
    w, G_i, out = np.array(w0, dtype=np.float64), np.zeros_like(A, dtype=np.float64), []
    out.append(w.copy())
    for active in mask:
        for i in np.flatnonzero(active):
            dw = (w - _local(A[i], b[i], w, eta, tau)) / eta
            G_i[i] = dw / p[i] - (1 / p[i] - 1) * G_i[i]
        w = w - eta * G_i.sum(0) / n
        out.append(w.copy())
    return np.array(out)


def mifa_002(A, b, mask, w0, eta: float, tau: int) -> np.ndarray:
    r"""Document 002, setup ii) (MIFA): :math:`G_t^{(i)} = \Delta w_t^{(i)}` for an active client, else
    :math:`G_{t-1}^{(i)}` (zero before its first report); :math:`G_t = \frac1n\sum_iG_t^{(i)}`;
    :math:`w_{t+1} = w_t - \eta G_t`, in every round."""
    n = len(A)
    w, G_i, out = np.array(w0, dtype=np.float64), np.zeros_like(A, dtype=np.float64), []
    out.append(w.copy())
    for active in mask:
        for i in np.flatnonzero(active):
            G_i[i] = (w - _local(A[i], b[i], w, eta, tau)) / eta
        w = w - eta * G_i.sum(0) / n
        out.append(w.copy())
    return np.array(out)


def mifa_000(A, b, mask, x0, gamma: float, eta: float, I: int, *, wait: bool = False) -> np.ndarray:
    r"""Document 000's MIFA baseline as FedAU's implementation runs it, in model form: a table :math:`u_n` of each
    client's last displacement :math:`y - x` (zeros at the start, no waiting for the first reports); the model
    moves by :math:`x_{t+1} = x_t + \frac\eta N\sum_nu_n` in every round, a round without participants included
    (where it applies its stored table once more). ``wait=True``: a round without participants leaves the model
    unchanged, as FedAU's other baselines do (a different rule; :func:`mifa_waiting`)."""
    N = len(A)
    x, u, out = np.array(x0, dtype=np.float64), np.zeros_like(A, dtype=np.float64), []
    out.append(x.copy())
    for active in mask:
        idx = np.flatnonzero(active)
        for n in idx:
            u[n] = _local(A[n], b[n], x, gamma, I) - x
        if idx.size or not wait:
            x = x + eta / N * u.sum(0)
        out.append(x.copy())
    return np.array(out)


def mifa_waiting(A, b, mask, x0, gamma: float, eta: float, I: int) -> np.ndarray:
    """MIFA that does not step in a round without any participant: not the MIFA of either document (they part
    at the first empty round)."""
    return mifa_000(A, b, mask, x0, gamma, eta, I, wait=True)


# -------------------------------------------------------------------------------------- through the round loop
@dataclass
class _SizedQuadratic(QuadraticTask):
    """The chapters' quadratic task (``flkit.tasks.QuadraticTask``) with equal sample counts, so that the
    target weights of ``InverseAvailability`` are :math:`\\alpha_i = 1/N`."""

    @property
    def sizes(self) -> np.ndarray:
        return np.full(self.n, 100.0)


def _coords(w: torch.Tensor) -> dict:
    return {f"w{j}": w[:, j] for j in range(w.shape[1])}


def through_fl(s: Stream, algorithms: dict, mask: np.ndarray, p=None) -> dict[str, np.ndarray]:
    """Run `algorithms` (name -> ``fl.Algorithm``) through :func:`flkit.fl.run` on the stream's clients and w0 with
    `mask` as the participation of every round and `p` the probabilities the server knows; returns name ->
    trajectory (T + 1, d), recorded every round (float64, divergence marking off)."""
    task = _SizedQuadratic(s.problem, local_steps=SETTING["local_steps"])
    T = len(mask)
    res = fl.run(task, algorithms, seeds=[s.seed], rounds=T, availability=np.asarray(mask), p=p, w0=s.w0,
                 every=T, track=_coords, diverge_factor=None)
    d = s.A.shape[1]
    return {name: np.stack([res.values[name][f"w{j}"][:, 0] for j in range(d)], axis=1) for name in algorithms}


def max_diff(trajs: dict[str, np.ndarray]) -> float:
    """The largest absolute difference between any two of the trajectories, over rounds and coordinates (inf
    where one is not finite and the other is)."""
    best = 0.0
    for a, c in itertools.combinations(trajs.values(), 2):
        if a.shape != c.shape:
            raise ValueError(f"trajectories of different shapes {a.shape} and {c.shape}")
        both = np.isfinite(a) & np.isfinite(c)
        if not both.all() and not (np.isfinite(a) == np.isfinite(c)).all():
            return math.inf
        if both.any():
            best = max(best, float(np.abs(a[both] - c[both]).max()))
    return best


def rule_rows(seed: int, rounds: int) -> dict[str, dict]:
    """For one seed, each rule of the chapter: {key: dict(forms={label: trajectory}, wrong={label: trajectory})}.
    Keys "is", "varp", "mifa" (the items of ``flkit.papers.across.items.ITEM``)."""
    s = stream(seed, rounds)
    S, N = SETTING, SETTING["clients"]
    g, tau = S["local_lr"], S["local_steps"]
    A, b, w0, p = s.A, s.b, s.w0, s.p
    alpha = np.full(N, 1 / N)
    out = {}

    m = s.bernoulli
    pkg = through_fl(s, {"KnownP": fl.Algorithm(aggregate.KnownP(), lr=g, local_lr=g),
                         "InverseAvailability": fl.Algorithm(aggregate.InverseAvailability(), lr=g, local_lr=g),
                         "InverseAvailability, normalized": fl.Algorithm(aggregate.InverseAvailability(normalize=True),
                                                                         lr=g, local_lr=g)}, m, p=p)
    out["is"] = dict(forms={
        "002: FedAvg (IS), written out": is_002(A, b, m, p, w0, g, tau),
        "000: Algorithm 1 with omega_n = 1/p_n, written out": algorithm1_000(A, b, m, 1 / p, w0, g, 1.0, tau),
        "001: unnormalized rule, q = alpha/pi, written out": unnormalized_001(A, b, m, alpha / p, w0, g, 1.0, tau),
        "flkit.aggregate.KnownP through fl.run (chapters 000, 002)": pkg["KnownP"],
        "flkit.aggregate.InverseAvailability through fl.run (chapter 001)": pkg["InverseAvailability"]},
        wrong={"001: normalized rule, q = alpha/pi (AdaFed), through fl.run": pkg["InverseAvailability, normalized"],
               "001: normalized rule, q = alpha/pi, written out": normalized_001(A, b, m, alpha / p, w0, g, tau)})

    mk, pk = s.uniform_k, np.full(N, s.k / N)
    pkg = through_fl(s, {"FedVarp": fl.Algorithm(aggregate.FedVarp(), lr=g, local_lr=g),
                         "UMIFA saga": fl.Algorithm(aggregate.UMIFA("saga"), lr=g, local_lr=g),
                         "UMIFA literal": fl.Algorithm(aggregate.UMIFA("literal"), lr=g, local_lr=g)}, mk, p=pk)
    out["varp"] = dict(forms={
        "002: U-MIFA with SAGA memory, p_i = |S_t|/N, written out": saga_002(A, b, mk, w0, g, tau),
        "000: FedVarp as FedAU's code runs it, written out": fedvarp_000(A, b, mk, w0, g, 1.0, tau),
        "flkit.aggregate.UMIFA('saga') through fl.run, p = k/N (chapter 002)": pkg["UMIFA saga"],
        "flkit.aggregate.FedVarp through fl.run (chapter 000)": pkg["FedVarp"]},
        wrong={"002: U-MIFA as written, p = k/N, through fl.run": pkg["UMIFA literal"],
               "002: U-MIFA as written, p = k/N, written out": umifa_literal_002(A, b, mk, pk, w0, g, tau)})

    pkg = through_fl(s, {"MIFA": fl.Algorithm(aggregate.MIFA(), lr=g, local_lr=g)}, m, p=p)
    out["mifa"] = dict(forms={
        "002: MIFA, written out": mifa_002(A, b, m, w0, g, tau),
        "000: MIFA as FedAU's code runs it, written out": mifa_000(A, b, m, w0, g, 1.0, tau),
        "flkit.aggregate.MIFA through fl.run (chapters 000, 002)": pkg["MIFA"]},
        wrong={"MIFA that skips the rounds without any participant, written out":
               mifa_waiting(A, b, m, w0, g, 1.0, tau)})
    return out


RULES = {"is": "FedAvg (IS) (002) = known participation statistics (000) = unnormalized q = alpha/pi (001)",
         "varp": "U-MIFA with SAGA memory (002) = FedVarp (000), p = |S_t|/N",
         "mifa": "MIFA (000) = MIFA (002)"}
RULE_MARKOV = "CA-Fed's Markov (pi, lambda) (001) = FedAU's Markov (x, p) (000)"
SHORT = {"is": "importance sampling", "varp": "SAGA memory", "mifa": "MIFA"}
STREAMS = {"is": "Bernoulli(p_n), p_n from 0.1 to 0.5", "varp": "k = 3 of 8 clients per round, uniformly",
           "mifa": "Bernoulli(p_n), p_n from 0.1 to 0.5"}


def rules_table(seeds, rounds: int) -> tuple[pd.DataFrame, dict]:
    """One row per rule: the stream, how many forms were compared, the largest difference between any two of
    them over the seeds (``max_abs_diff``, against :data:`TOL`), and the different rules run beside them
    (``wrong_variants``) with the smallest difference between one of them and the rule's first form over the
    seeds (``wrong_max_abs_diff``, against :data:`WRONG_MIN`); and the runs, {seed: rule_rows(seed, rounds)}."""
    runs = {int(sd): rule_rows(int(sd), rounds) for sd in seeds}
    first = runs[next(iter(runs))]
    rows = []
    for key, name in RULES.items():
        same = max(max_diff(runs[sd][key]["forms"]) for sd in runs)
        apart = min(max_diff({"ref": next(iter(runs[sd][key]["forms"].values())), "wrong": tr})
                    for sd in runs for tr in runs[sd][key]["wrong"].values())
        rows.append(dict(key=key, rule=name, stream=STREAMS[key], rounds=rounds, seeds=len(runs),
                         forms=len(first[key]["forms"]), max_abs_diff=same, tolerance=TOL, same=same <= TOL,
                         wrong_variants="; ".join(first[key]["wrong"]), wrong_max_abs_diff=apart,
                         told_apart=apart > WRONG_MIN))
    return pd.DataFrame(rows), runs


def forms_table(runs: dict) -> pd.DataFrame:
    """Every form of every rule (and each different rule run beside it), with its largest difference from the
    rule's first form over the seeds and rounds: the detail behind :func:`rules_table`."""
    rows = []
    first = runs[next(iter(runs))]
    for key, name in RULES.items():
        ref = next(iter(first[key]["forms"]))
        for kind in ("forms", "wrong"):
            for label in first[key][kind]:
                d = max(max_diff({"ref": runs[sd][key]["forms"][ref], "this": runs[sd][key][kind][label]})
                        for sd in runs)
                rows.append(dict(rule=name, form=label, same_rule=kind == "forms",
                                 max_abs_diff_to_first_form=d))
    return pd.DataFrame(rows)


def empty_round_caveat(seed: int, rounds: int) -> dict:
    """Where the SAGA-memory U-MIFA with p_i = |S_t|/N and FedAU's FedVarp part: on the seed's Bernoulli stream
    (rounds without any participant), the two written-out forms agree up to the first empty round and differ
    after it (FedVarp does not step there; the SAGA form steps on its table's mean). Returns the first empty
    round (None when the stream has none), the largest difference up to it and the largest after it."""
    s = stream(seed, rounds)
    g, tau = SETTING["local_lr"], SETTING["local_steps"]
    a = saga_002(s.A, s.b, s.bernoulli, s.w0, g, tau)
    c = fedvarp_000(s.A, s.b, s.bernoulli, s.w0, g, 1.0, tau)
    empty = np.flatnonzero(~s.bernoulli.any(1))
    if not empty.size:
        return dict(first_empty=None, before=float(np.abs(a - c).max()), after=math.nan)
    t0 = int(empty[0])       # the model after round t0 is row t0 + 1
    return dict(first_empty=t0, before=float(np.abs(a[: t0 + 1] - c[: t0 + 1]).max()),
                after=float(np.abs(a[t0 + 1:] - c[t0 + 1:]).max()))


# ------------------------------------------------------------------------------------------ Markov availability
def to_cafed(x, p):
    r"""FedAU's (x, p) (document 000) as CA-Fed's (pi, lambda) (document 001): :math:`\pi = p`,
    :math:`\lambda = 1 - x/p` where FedAU's chain is used as parametrized (:math:`x(1/p - 1) \le 1`); where FedAU's
    code rescales (:math:`x(1/p-1) > 1`: P(active -> inactive) = 1, P(inactive -> active) = p/(1-p)) the chain is
    CA-Fed's with the least feasible :math:`\lambda = 1 - 1/(1-p)`. Arrays broadcast."""
    x, p = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(p, dtype=np.float64))
    if ((p <= 0) | (p >= 1) | (x <= 0) | (x > 1)).any():
        raise ValueError("need 0 < p < 1 and 0 < x <= 1")
    lam = np.where(x * (1 / p - 1) <= 1, 1 - x / p, 1 - 1 / (1 - p))
    return p.copy(), lam


def to_fedau(pi, lam):
    r"""CA-Fed's (pi, lambda) as FedAU's (x, p): :math:`p = \pi`, :math:`x = (1-\lambda)\pi`. Defined on CA-Fed's
    feasible set :math:`\max(1 - 1/\pi, 1 - 1/(1-\pi)) \le \lambda < 1`, which is exactly FedAU's set without
    rescaling, :math:`0 < x \le \min(1, p/(1-p))`; outside it a ValueError."""
    pi, lam = np.broadcast_arrays(np.asarray(pi, dtype=np.float64), np.asarray(lam, dtype=np.float64))
    lo = np.maximum(1 - 1 / pi, 1 - 1 / (1 - pi))
    if ((pi <= 0) | (pi >= 1) | (lam >= 1) | (lam < lo - 1e-15)).any():
        raise ValueError("(pi, lambda) outside CA-Fed's feasible set max(1 - 1/pi, 1 - 1/(1 - pi)) <= lambda < 1")
    return (1 - lam) * pi, pi.copy()


def _stationary(P: np.ndarray) -> np.ndarray:
    """The stationary law of a stochastic matrix: its left eigenvector for eigenvalue 1, normalised."""
    ev, vec = np.linalg.eig(P.T)
    v = np.real(vec[:, np.argmin(np.abs(ev - 1))])
    return v / v.sum()


def markov_exact(ps=(0.02, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9), xs=(0.005, 0.01, 0.05, 0.1, 0.3, 0.5, 1.0),
                 lags=(1, 2, 3, 5, 10), wrong=False) -> pd.DataFrame:
    """For every (p, x) of the grid: FedAU's transition matrix (``participation.transition_matrix(p, x=x)``,
    states (inactive, active)) against CA-Fed's at the mapped (pi, lambda) (``lam=``), their stationary laws and
    second eigenvalues, the lag-s autocorrelation (P^s[1, 1] - pi)/(1 - pi) of both against lambda^s, and the
    round trip (x, p) -> (pi, lambda) -> (x, p) where FedAU does not rescale. ``wrong=True`` maps with
    lambda = 1 - x (the division by p forgotten) where that is feasible: a different chain."""
    rows = []
    for p, x in itertools.product(ps, xs):
        rescaled = x * (1 / p - 1) > 1
        pi, lam = (float(v) for v in to_cafed(x, p))
        if wrong:
            lam = 1 - x
            if lam < max(1 - 1 / pi, 1 - 1 / (1 - pi)):
                continue
        Pf = participation.transition_matrix(p, x=x)
        Pc = participation.transition_matrix(pi, lam=lam)
        sf, sc = _stationary(Pf), _stationary(Pc)
        ac_f = [(np.linalg.matrix_power(Pf, s)[1, 1] - p) / (1 - p) for s in lags]
        ac_c = [(np.linalg.matrix_power(Pc, s)[1, 1] - pi) / (1 - pi) for s in lags]
        trip = math.nan
        if not rescaled:
            x2, p2 = to_fedau(pi, lam)
            trip = max(abs(float(x2) - x), abs(float(p2) - p))
        rows.append(dict(p=p, x=x, rescaled=bool(rescaled), pi=pi, lam=lam,
                         P_diff=float(np.abs(Pf - Pc).max()),
                         stationary_diff=float(max(np.abs(sf - sc).max(), abs(sf[1] - p))),
                         lam2_diff=float(abs(participation.second_eigenvalue(Pf) - lam)),
                         autocorr_diff=float(max(max(abs(a - lam ** s), abs(c - lam ** s))
                                                 for a, c, s in zip(ac_f, ac_c, lags))),
                         round_trip=trip))
    return pd.DataFrame(rows)


def markov_simulated(pairs=((0.1, 0.05), (0.3, 0.1), (0.5, 0.9), (0.9, 1.0)), *, seed: int = 0, chains: int = 400,
                     rounds: int = 5000, lags=(1, 2, 5), wrong=False) -> pd.DataFrame:
    """Simulated chains of both parametrizations on one seeded stream: for each (p, x), `chains` independent
    chains of `rounds` rounds from ``participation.markov(p, rounds, seed, x=x)`` and from ``markov(pi, rounds,
    seed, lam=lambda)`` at the mapped (pi, lambda) (``wrong=True``: lambda = 1 - x). Per parametrization the
    participation rate and the lag-s autocorrelation (``participation.autocorrelation`` with the known mean),
    averaged over the chains with their standard error, against the closed forms p and lambda^s (z-scores), and
    how many of the rounds x chains states the two masks differ in."""
    rows = []
    for p, x in pairs:
        pi, lam = (float(v) for v in to_cafed(x, p))
        if wrong:
            lam = 1 - x
        pv = np.full(chains, p)
        mf = participation.markov(pv, rounds, seed, x=x)
        mc = participation.markov(np.full(chains, pi), rounds, seed, lam=lam)
        differ = int((mf != mc).sum())
        true_lam = float(to_cafed(x, p)[1])
        for name, m in (("FedAU (x, p)", mf), ("CA-Fed (pi, lambda)", mc)):
            stats = {"rate": (m.mean(0), p)}
            for s in lags:
                stats[f"autocorrelation, lag {s}"] = (participation.autocorrelation(m, s, mean=p), true_lam ** s)
            for what, (v, closed) in stats.items():
                mean, se = float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size))
                rows.append(dict(p=p, x=x, pi=pi, lam=lam, parametrization=name, statistic=what, mean=mean, se=se,
                                 closed_form=closed, z=(mean - closed) / se if se > 0 else math.nan,
                                 states_differing=differ, states=m.size))
    return pd.DataFrame(rows)


def markov_table(exact: pd.DataFrame, simulated: pd.DataFrame) -> pd.DataFrame:
    """The Markov row of the equivalence table: the largest exact difference (transition matrices, stationary law,
    second eigenvalue, autocorrelation, round trip) and the largest |z| of the simulated statistics."""
    feas = exact[~exact["rescaled"]]
    cols = ["P_diff", "stationary_diff", "lam2_diff", "autocorr_diff"]
    return pd.DataFrame([dict(pairs=len(exact), rescaled=int(exact["rescaled"].sum()),
                              max_abs_diff=float(exact[cols].max().max()),
                              round_trip=float(feas["round_trip"].max()) if len(feas) else math.nan,
                              max_abs_z=float(simulated["z"].abs().max()),
                              states_differing=int(simulated.groupby(["p", "x"])["states_differing"].first().sum()),
                              states=int(simulated.groupby(["p", "x"])["states"].first().sum()))])


# ---------------------------------------------------------------------------------------- the page's checks
def checks(table: pd.DataFrame, caveat: dict, exact: pd.DataFrame, simulated: pd.DataFrame,
           exact_wrong: pd.DataFrame, simulated_wrong: pd.DataFrame) -> list[tuple[str, claims.Check]]:
    """The equivalence page's checks as (short name of the item in ``flkit.papers.across.items.ITEM``, check)."""
    out = []
    for r in table.itertuples():
        out.append((r.key, claims.holds(f"{r.forms} forms of the rule give the same trajectory on one seeded stream "
                                        f"({r.stream}; {r.seeds} seeds x {r.rounds} rounds): largest absolute "
                                        "difference", r.same, f"max abs diff <= {TOL:g} (float64)",
                                        ours=r.max_abs_diff, reference=TOL)))
        out.append((r.key, claims.holds(f"a different rule run on the same stream is told apart ({r.wrong_variants}): "
                                        "its largest absolute difference from the rule, least over the seeds",
                                        r.told_apart,
                                        f"max abs diff > {WRONG_MIN:g}", ours=r.wrong_max_abs_diff,
                                        reference=WRONG_MIN)))
    ok = (caveat["first_empty"] is not None and caveat["before"] <= TOL and caveat["after"] > WRONG_MIN)
    out.append(("varp", claims.holds("with rounds without any participant (Bernoulli stream) the two written-out forms "
                                     "agree up to the first empty round and part after it (FedVarp does not step "
                                     "there); largest difference after it", ok,
                                     f"max abs diff <= {TOL:g} up to the first empty round, > {WRONG_MIN:g} after it",
                                     ours=caveat["after"], reference=WRONG_MIN)))
    cols = ["P_diff", "stationary_diff", "lam2_diff", "autocorr_diff"]
    worst = float(exact[cols].max().max())
    out.append(("markov", claims.holds("exact: FedAU's (x, p) and CA-Fed's (pi, lambda) = (p, 1 - x/p) give the same "
                                       "transition matrix, stationary law, second eigenvalue and lag-s "
                                       f"autocorrelation lambda^s on {len(exact)} (p, x) pairs (rescaled ones: "
                                       "lambda = 1 - 1/(1 - p)); largest difference",
                                       worst <= TOL, f"max abs diff <= {TOL:g}", ours=worst, reference=TOL)))
    trip = float(exact.loc[~exact["rescaled"], "round_trip"].max())
    out.append(("markov", claims.holds("the inverse map x = (1 - lambda) pi, p = pi returns every unrescaled (x, p); "
                                       "largest difference", trip <= TOL, f"max abs diff <= {TOL:g}", ours=trip,
                                       reference=TOL)))
    z = float(simulated["z"].abs().max())
    same_masks = int(simulated.groupby(["p", "x"])["states_differing"].first().sum())
    out.append(("markov", claims.holds("simulated on one seeded stream, both parametrizations give the same masks and "
                                       "their rates and lag-s autocorrelations lie within 4 standard errors of p and "
                                       "lambda^s; largest |z|", z <= 4 and same_masks == 0,
                                       "identical masks and every |z| <= 4", ours=z, reference=4.0)))
    wp = float(exact_wrong["P_diff"].min())
    wz = float(simulated_wrong["z"].abs().max())
    out.append(("markov", claims.holds("a wrong map (lambda = 1 - x, the division by p forgotten) is told apart: "
                                       "smallest transition-matrix difference over the pairs",
                                       wp > WRONG_MIN and wz > 4,
                                       f"max abs diff > {WRONG_MIN:g} on every pair and some simulated |z| > 4",
                                       ours=wp, reference=WRONG_MIN)))
    return out


# ---------------------------------------------------------------------------------------- the page's views
def forms_view(detail: pd.DataFrame, key: str):
    """The forms of rule `key` (:data:`RULES`) from :func:`forms_table`, styled for the page."""
    return (detail[detail["rule"] == RULES[key]].drop(columns="rule").style.hide(axis="index")
            .format({"max_abs_diff_to_first_form": "{:.2e}"}))


def markov_view(mk: pd.DataFrame):
    """The Markov row (:func:`markov_table`), styled for the page."""
    return mk.style.hide(axis="index").format({"max_abs_diff": "{:.1e}", "round_trip": "{:.1e}", "max_abs_z": "{:.2f}"})


def markov_z_view(simulated: pd.DataFrame) -> pd.DataFrame:
    """The z-scores of FedAU's parametrization against the closed forms, one row per (p, x, lambda)."""
    return (simulated[simulated["parametrization"] == "FedAU (x, p)"]
            .pivot_table(index=["p", "x", "lam"], columns="statistic", values="z")
            .round(2).rename_axis(columns="z-score against the closed form"))


def markov_numbers(mk: pd.DataFrame, exact_wrong: pd.DataFrame, simulated_wrong: pd.DataFrame) -> dict:
    """The numbers of the Markov section for the prose."""
    return dict(mk_diff=float(mk["max_abs_diff"].iloc[0]), mk_z=float(mk["max_abs_z"].iloc[0]),
                mk_resc=int(mk["rescaled"].iloc[0]), mk_pairs=int(mk["pairs"].iloc[0]),
                mk_wrong=float(exact_wrong["P_diff"].min()), mk_wrong_z=float(simulated_wrong["z"].abs().max()))


def summary_table(table: pd.DataFrame, mk: pd.DataFrame, exact_wrong: pd.DataFrame, chains: int,
                  chain_rounds: int) -> pd.DataFrame:
    """The page's summary: one row per rule (:func:`rules_table`) and the Markov chain's row (:func:`markov_table`,
    the simulation of `chains` chains x `chain_rounds` rounds, the wrong map lambda = 1 - x)."""
    rows = table[["rule", "stream", "forms", "max_abs_diff", "tolerance", "wrong_variants",
                  "wrong_max_abs_diff"]].copy()
    rows.loc[len(rows)] = dict(rule=RULE_MARKOV,
                               stream=f"{int(mk['pairs'].iloc[0])} (p, x) pairs, exact; {chains} chains x "
                               f"{chain_rounds} rounds",
                               forms=2, max_abs_diff=float(mk["max_abs_diff"].iloc[0]), tolerance=TOL,
                               wrong_variants="lambda = 1 - x", wrong_max_abs_diff=float(exact_wrong["P_diff"].min()))
    return rows


def summary_view(rows: pd.DataFrame):
    """The summary (:func:`summary_table`), styled for the page."""
    return rows.style.hide(axis="index").format({"max_abs_diff": "{:.1e}", "tolerance": "{:.0e}",
                                                  "wrong_max_abs_diff": "{:.1e}"})


def summary_numbers(rows: pd.DataFrame) -> dict:
    """The worst difference between forms of one rule and the least between a rule and a different one."""
    return dict(worst_same=float(rows["max_abs_diff"].max()), least_apart=float(rows["wrong_max_abs_diff"].min()))


def plot_differences(runs: dict, seed: int, axes) -> None:
    """Per rule (one panel each), the largest absolute difference between each form and the rule's first form in
    every round (grey: the forms of the rule; red: a different rule), on a log scale; the floor is float64
    rounding."""
    first = runs[seed]
    for ax, (key, name) in zip(axes, RULES.items()):
        ref = next(iter(first[key]["forms"].values()))
        for kind, colour, label in (("forms", "0.45", "other forms of the rule"),
                                    ("wrong", "tab:red", "a different rule")):
            for i, (lab, tr) in enumerate(first[key][kind].items()):
                if kind == "forms" and i == 0:
                    continue
                d = np.abs(tr - ref).max(1)
                ax.plot(np.arange(len(d)), np.maximum(d, 1e-18), color=colour, lw=1.0 if kind == "forms" else 1.4,
                        label=label if (i == (1 if kind == "forms" else 0)) else None)
        ax.axhline(TOL, color="black", ls=":", lw=1, label=f"tolerance {TOL:g}")
        ax.set(yscale="log", xlabel="round", title=SHORT[key], ylim=(1e-18, 1e4))
    axes[0].set_ylabel("max |w_t - w_t(first form)|")
    h, lab = axes[-1].get_legend_handles_labels()
    axes[0].figure.legend(h, lab, loc="outside lower center", ncols=3, fontsize=8.5, frameon=False)
