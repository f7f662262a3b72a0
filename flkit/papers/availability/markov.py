r"""Correlated availability and why one might optimize a biased objective (document 001, second half).

The notes model each client's availability as a two-state Markov chain (CA-Fed, Rodio et al. 2023) and
quote CA-Fed's two theorems. This module holds the page's settings, the exact quantities of the chain, the
FedAvg runs behind Theorem 2's :math:`\lambda(P)` term and the "exclude clients" argument, and the page's
verdicts and figures; the checks of Theorem 1 on random strongly convex quadratics are its own piece,
:mod:`flkit.papers.availability.theorem1` (its functions are also reachable here, as before). Everything runs
in float64 on the CPU.

Notation (the notes'). Client k is available with stationary probability :math:`\pi_k`; its chain has
transition matrix :math:`P_k` (states ordered inactive, active) with eigenvalues 1 and
:math:`\lambda_k = \lambda_2(P_k)`. The target objective is :math:`F = \sum_k \alpha_k F_k`; the server
aggregates the available clients with weights :math:`q_k` (unnormalized), so it optimizes
:math:`F_B = \sum_k p_k F_k`, :math:`p_k = \pi_k q_k / \sum_h \pi_h q_h` (eq. (4)).

Where we depart from, or add to, the notes:

* The server step :math:`w \leftarrow w - \eta_t G_t` uses the schedule :math:`\eta_t = \eta_0 t^{-a}`
  (``flkit.aggregate.StepSchedule``), :math:`t = 1, 2, \dots`, as eq. (11) asks for a decreasing step; CA-Fed's code
  uses a constant server step with momentum (arodio/CA-Fed@e673587 ``utils/optim.py``).
* An excluded client gets :math:`q_k = 0` (it is never aggregated); the others get
  :math:`q_k = \alpha_k / (\pi_k \sum_{h \in I}\alpha_h)`, so that :math:`\mathbb E[G_t] = \nabla F_B` at the
  same scale for every strategy (:math:`p` does not depend on the scale of q; CA-Fed's code does not
  renormalize, ``clients_sampler.py``).
* Theorem 2 bounds an averaged iterate :math:`\bar w_{T,0}` the notes do not define; we measure the last
  iterate.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from flkit import aggregate, fl, participation
from flkit.papers import settings
from flkit.papers.availability import common
from flkit.papers.availability.theorem1 import (
    Quadratics,
    random_quadratics,
    search_table,
    theorem1,
    theorem1_numbers,
    theorem1_sample,
    theorem1_search,
    two_client_sup,
)
from flkit.seeding import rng
from flkit.tasks import quadratic_task

__all__ = [
    "PROFILES", "profile", "corr_closed_form", "autocorrelation_check", "mixing_exact", "mixing_check",
    "joint_slem", "parameter_map", "Quadratics", "random_quadratics", "theorem1", "theorem1_sample",
    "two_client_sup", "theorem1_search", "search_table", "mean_on_run", "plot_rasters", "eta",
    "lambda_sweep", "CAFED_TYPES",
    "exclusion_problem", "exclusion_runs", "step_sums", "step_sum_limits", "STRATEGIES", "client_types",
    "LAMBDA_MODELS", "fit_lambda_models", "lambda_numbers", "exclusion_table", "exclusion_verdict",
    "exclusion_numbers", "step_table", "step_verdict", "theorem1_numbers", "plot_lambda_sweep", "plot_exclusion",
    "plot_autocorrelation", "plot_mixing", "plot_step_sums",
    "BOX", "RASTER", "JOINT", "MAP", "configs", "search_runs", "lambda_runs", "exclusion_all", "raster_masks",
    "run_lengths", "autocorrelation_verdict", "mixing_verdict", "joint_verdict", "map_verdict", "map_table",
    "final_errors", "fit_table", "thm2_verdict", "summary_words",
]

# ================================================================================================
# settings
# ================================================================================================
PROFILES = {
    "smoke": dict(
        seeds=list(range(32)),
        ac=dict(cases=[(0.5, 0.9), (0.5, 0.5), (0.5, -0.5), (0.3, -0.3)], lags=[1, 2, 3, 5, 10],
                rounds=1000, chains=100),
        mixing=dict(cases=[(0.5, 0.9), (0.5, -0.7), (0.2, 0.5)], steps=20, rounds=25, chains=2000),
        thm1=dict(problems=200, search=[(2, 1, 1.0), (2, 1, 2.0)], starts=3, maxiter=1500),
        lam=dict(pi=0.5, lams=[-0.5, 0.0, 0.5, 0.9, 0.99], rounds=300, eta0=0.3, a=0.75, n=10, dim=10, every=30),
        excl=dict(rounds=300, eta0=0.15, a=0.75, n=12, dim=5, mu=1.0, L=2.0, heterogeneity=1.0, problems=[0],
                  every=10, budgets=[30, 100, 300]),
        steps=dict(exps=[0.0, 0.5, 0.6, 0.75, 1.0, 1.2], T=10**5),
    ),
    "paper": dict(
        seeds=list(range(200)),
        ac=dict(cases=[(0.5, 0.99), (0.5, 0.9), (0.5, 0.5), (0.5, 0.0), (0.5, -0.5), (0.5, -0.9), (0.3, -0.3),
                       (0.1, 0.9)],
                lags=[1, 2, 3, 5, 10, 20], rounds=20000, chains=400),
        mixing=dict(cases=[(0.5, 0.9), (0.5, 0.5), (0.5, -0.7), (0.2, 0.5), (0.9, 0.9)], steps=40, rounds=45,
                    chains=100000),
        thm1=dict(problems=5000, search=[(2, 1, 1.0), (3, 1, 1.0), (2, 2, 1.0), (3, 2, 1.0)]
                  + [(N, d, k) for k in (1.25, 1.5, 2.0, 3.0, 5.0) for N, d in ((2, 1), (2, 2))],
                  starts=12, maxiter=4000),
        lam=dict(pi=0.5, lams=[-0.9, -0.5, 0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99], rounds=2000, eta0=0.3, a=0.75,
                 n=10, dim=10, every=20),
        excl=dict(rounds=3000, eta0=0.15, a=0.75, n=12, dim=5, mu=1.0, L=2.0, heterogeneity=1.0,
                  problems=[0, 1, 2, 3, 4], every=10, budgets=[30, 100, 300, 1000, 3000]),
        steps=dict(exps=[0.0, 0.4, 0.5, 0.6, 0.75, 1.0, 1.2], T=10**7),
    ),
}


def profile(name: str, **overrides) -> dict:
    """The page's settings under profile `name` ("smoke": seconds, for CI; "paper": the full checks).
    `overrides` replace top-level settings (None keeps the profile's; ``seeds``: the federated runs' seeds, the
    first of which seeds the other draws), and every setting is checked before any work
    (`settings.check_profile`; the (pi, lambda) cases by `participation.transition_matrix`)."""
    cfg = common.profile_of("markov", PROFILES, name, overrides)
    for part in ("ac", "mixing"):
        _check_cases(cfg[part]["cases"], f"markov profile {name!r}: {part}.cases")
    return cfg


def _check_cases(cases, where: str) -> None:
    """Every (pi, lambda) is a chain: 0 < pi < 1 and lambda feasible for pi (`participation.transition_matrix`)."""
    if not len(cases):
        raise ValueError(f"{where} is empty: give at least one (pi, lambda)")
    for pi, lam in cases:
        if not 0 < pi < 1:
            raise ValueError(f"{where}: pi must lie in (0, 1), got {pi!r}")
        try:
            participation.transition_matrix(pi, lam=lam)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None


# ================================================================================================
# 1. the Markov chain: autocorrelation, mixing, the two parametrizations
# ================================================================================================
def corr_closed_form(pi: float, lam: float, lag: int) -> float:
    r"""Corr(X_t, X_{t+s}) of the stationary chain computed from the matrix power :math:`P^s`:
    :math:`(\pi (P^s)_{aa} - \pi^2) / (\pi(1-\pi))` (no use of :math:`\lambda^s`)."""
    P = participation.transition_matrix(pi, lam=lam)
    Ps = np.linalg.matrix_power(P, int(lag))
    return float((pi * Ps[1, 1] - pi * pi) / (pi * (1 - pi)))


def _stream(seed: int, what: str, k: int) -> np.random.Generator:
    return rng(seed, f"participation/markov-page/{what}/{k}")


def autocorrelation_check(cases, lags, rounds: int, chains: int, seed: int = 0) -> pd.DataFrame:
    r"""For each (pi, lambda): `chains` independent clients simulated for `rounds` rounds with
    :func:`flkit.participation.markov`; per lag s the unbiased estimate (known :math:`\pi`) of the lag-s
    autocorrelation per chain, its mean over chains and the standard error of that mean (spread over
    chains / sqrt(chains)), beside :math:`\lambda^s` and the closed form from :math:`P^s`."""
    rounds, chains = settings.positive_int(rounds, "rounds"), settings.positive_int(chains, "chains", 2)
    _check_cases(cases, "cases")
    if not len(lags) or any(not isinstance(s, (int, np.integer)) or not 1 <= s < rounds for s in lags):
        raise ValueError(f"lags must be ints in [1, rounds) = [1, {rounds}), got {list(lags)}")
    rows = []
    for k, (pi, lam) in enumerate(cases):
        mask = participation.markov(np.full(chains, pi), rounds, _stream(seed, "ac", k), lam=lam)
        for s in lags:
            r = participation.autocorrelation(mask, s, mean=pi)
            mean, se = float(r.mean()), float(r.std(ddof=1) / math.sqrt(chains))
            rows.append(dict(pi=pi, lam=lam, lag=s, power=lam ** s, closed_form=corr_closed_form(pi, lam, s),
                             mc_mean=mean, mc_se=se, z=(mean - lam ** s) / se if se > 0 else 0.0))
    return pd.DataFrame(rows)


def mixing_exact(pi: float, lam: float, mu0, steps: int) -> pd.DataFrame:
    r"""Total-variation distance :math:`\|\mu_0 P^t - \pi\|_{TV}` for t = 0..steps from matrix powers, and
    the notes' rate :math:`|\lambda|^t \|\mu_0 - \pi\|_{TV}`. mu0 = P(active) at time 0."""
    P = participation.transition_matrix(pi, lam=lam)
    stat = np.array([1 - pi, pi])
    mu = np.array([1 - mu0, mu0], dtype=float)
    d0 = 0.5 * np.abs(mu - stat).sum()
    out = []
    for t in range(steps + 1):
        out.append(dict(t=t, tv=0.5 * np.abs(mu - stat).sum(), rate=abs(lam) ** t * d0))
        mu = mu @ P
    return pd.DataFrame(out)


def mixing_check(cases, steps: int, rounds: int, chains: int, seed: int = 0) -> pd.DataFrame:
    r"""Mixing from a known state, measured on stationary masks: among the chains inactive at round 0,
    the fraction active at round t estimates :math:`P(X_t = 1 \mid X_0 = 0) = \pi(1 - \lambda^t)`, so
    :math:`\hat\mu_t - \pi` estimates the signed distance :math:`-\pi\lambda^t` (TV = its modulus)."""
    steps, chains = settings.positive_int(steps, "steps", 0), settings.positive_int(chains, "chains")
    if settings.positive_int(rounds, "rounds") <= steps:
        raise ValueError(f"rounds must exceed steps ({steps}) to see round `steps`, got {rounds}")
    _check_cases(cases, "cases")
    rows = []
    for k, (pi, lam) in enumerate(cases):
        mask = participation.markov(np.full(chains, pi), rounds, _stream(seed, "mixing", k), lam=lam)
        start = ~mask[0]
        n0 = int(start.sum())
        for t in range(steps + 1):
            p_hat = float(mask[t, start].mean())
            exact = pi * (1 - lam ** t)
            rows.append(dict(pi=pi, lam=lam, t=t, n=n0, est=p_hat - pi, exact=exact - pi,
                             se=math.sqrt(max(exact * (1 - exact), 1e-300) / n0)))
    return pd.DataFrame(rows)


def joint_slem(pis, lams) -> tuple[float, float]:
    r"""(second-largest eigenvalue modulus of the joint chain :math:`P = \otimes_k P_k` of independent
    clients, computed from the :math:`2^N \times 2^N` matrix; :math:`\max_k |\lambda_k|`)."""
    P = np.ones((1, 1))
    for pi, lam in zip(pis, lams):
        P = np.kron(P, participation.transition_matrix(pi, lam=lam))
    return float(abs(participation.second_eigenvalue(P))), float(np.max(np.abs(lams)))


def mean_on_run(mask) -> float:
    r"""Mean length of the maximal runs of consecutive available rounds in a (T, N) mask (runs cut by the
    ends of the mask included); for the chain, :math:`1/P(a \to i) = 1/((1-\lambda)(1-\pi))`."""
    m = participation.replay(mask).astype(np.int8)
    pad = np.zeros((1, m.shape[1]), dtype=np.int8)
    d = np.diff(np.concatenate([pad, m, pad]), axis=0)
    starts, ends = np.nonzero(d.T == 1), np.nonzero(d.T == -1)
    lengths = ends[1] - starts[1]
    return float(lengths.mean()) if lengths.size else 0.0


def plot_rasters(ax, masks: dict, clients: int = 8):
    """Availability rasters: one block of `clients` rows per label (black = available)."""
    blocks, ticks, labels = [], [], []
    for k, (label, m) in enumerate(masks.items()):
        blocks.append(m[:, :clients].T.astype(float))
        blocks.append(np.full((1, m.shape[0]), np.nan))
        ticks.append(k * (clients + 1) + (clients - 1) / 2)
        labels.append(label)
    ax.imshow(np.concatenate(blocks[:-1]), aspect="auto", cmap="Greys", interpolation="nearest", vmin=0, vmax=1)
    ax.set_yticks(ticks, labels)
    ax.set_xlabel("round t")


def parameter_map(xs, ps) -> pd.DataFrame:
    r"""FedAU's (x, p) against CA-Fed's (:math:`\pi = p`, :math:`\lambda = 1 - x/p`): both transition
    matrices, their largest entry-wise difference and :math:`\lambda_2` of FedAU's matrix. Where FedAU
    rescales (x(1/p - 1) > 1), 1 - x/p is infeasible for CA-Fed and the map does not apply."""
    rows = []
    for p in ps:
        for x in xs:
            Pf = participation.transition_matrix(p, x=x)
            lam = 1 - x / p
            row = dict(x=x, p=p, lam_map=lam, lam2_fedau=participation.second_eigenvalue(Pf),
                       rescaled=bool(x * (1 / p - 1) > 1))
            try:
                Pc = participation.transition_matrix(p, lam=lam)
                row.update(max_abs_diff=float(np.abs(Pf - Pc).max()), feasible=True)
            except ValueError:
                row.update(max_abs_diff=float("nan"), feasible=False)
            rows.append(row)
    return pd.DataFrame(rows)


# ================================================================================================
# 2. Theorem 1 on strongly convex quadratics: flkit.papers.availability.theorem1
# 3-4. FedAvg with the notes' unnormalized aggregator under Markov availability (flkit.fl.run)
# ================================================================================================
def eta(t, eta0: float, a: float):
    r""":math:`\eta_t = \eta_0 t^{-a}`."""
    return eta0 * np.asarray(t, dtype=float) ** (-a)


def _unbiased(pi, lr: float, a: float, keep=None, availability=None) -> fl.Algorithm:
    r"""The notes' unnormalized aggregator :math:`G_t = \sum_{k\in\mathcal A_t} q_k \Delta_k` with
    :math:`q_k = \alpha_k/\pi_k` (uniform :math:`\alpha` over the kept clients), as `KnownP` with
    :math:`p_k = \pi_k m/N` (m kept clients of N): :math:`\frac1N \Delta_k / p_k = \Delta_k/(m\pi_k)`."""
    pi = np.asarray(pi, dtype=float)
    m = pi.size if keep is None else int(np.sum(keep))
    return fl.Algorithm(aggregate.StepSchedule(aggregate.KnownP(), a), lr=lr, p=pi * m / pi.size,
                        availability=availability)


def _summary(res: fl.Result, metrics) -> pd.DataFrame:
    """Per method, round and metric: mean and standard error over the seeds (tidy)."""
    rows = []
    for name, vals in res.values.items():
        for met in metrics:
            arr = vals[met]
            S = arr.shape[1]
            se = arr.std(1, ddof=1) / math.sqrt(S) if S > 1 else np.zeros(len(arr))
            rows.append(pd.DataFrame({"method": name, "round": res.rounds, "metric": met, "value": arr.mean(1),
                                      "se": se}))
    return pd.concat(rows, ignore_index=True)


def lambda_sweep(cfg: dict, seeds) -> pd.DataFrame:
    r"""FedAvg (one local gradient step, the notes' unnormalized aggregator with :math:`q = \alpha/\pi`,
    :math:`\alpha` uniform, so :math:`F_B = F`) on `quadratic_task(n, dim, seed=0)`; every client has
    the same :math:`\pi` and :math:`\lambda`; one method per :math:`\lambda`, all through one `fl.run`.
    Returns the seed-mean of :math:`F(w_t) - F^*` (metric "gap") with its standard error, and the final
    values per seed (metric "final_gap", column seed)."""
    settings.check_profile(cfg, "lambda_sweep settings")
    seeds = settings.seeds(seeds)
    task = quadratic_task(n=cfg["n"], dim=cfg["dim"], seed=0)
    N, T, pi = task.num_clients, cfg["rounds"], cfg["pi"]
    algs = {f"{lam:g}": _unbiased(np.full(N, pi), cfg["eta0"], cfg["a"],
                                  availability=lambda s, lam=lam: participation.markov(np.full(N, pi), T, s, lam=lam))
            for lam in cfg["lams"]}
    res = fl.run(task, algs, seeds=list(seeds), rounds=T, every=cfg["every"])
    out = _summary(res, ["gap"])
    finals = [pd.DataFrame({"method": k, "round": T, "metric": "final_gap", "value": res.values[k]["gap"][-1],
                            "seed": res.seeds[k]}) for k in algs]
    out = pd.concat([out, *finals], ignore_index=True)
    out["lam"] = out["method"].astype(float)
    return out


# CA-Fed's client types (arodio/CA-Fed@e673587 data/constants.py, data/utils.py): pi in {0.9, 0.1};
# "stable" lambda = 0.9, "shifting" about 0.005; half available-shifting, a quarter unavailable-stable,
# a quarter unavailable-shifting.
CAFED_TYPES = {"available, shifting": (0.9, 0.005, 0.5), "unavailable, stable": (0.1, 0.9, 0.25),
               "unavailable, shifting": (0.1, 0.005, 0.25)}

STRATEGIES = {
    "all clients (unbiased)": (),
    "exclude unavailable-stable": ("unavailable, stable",),
    "exclude unavailable-shifting": ("unavailable, shifting",),
    "exclude all unavailable": ("unavailable, stable", "unavailable, shifting"),
}


def client_types(n: int) -> list[str]:
    """The type of each of n clients, CA-Fed's proportions in a deterministic split (n a multiple of 4)."""
    if n % 4:
        raise ValueError(f"n must be a multiple of 4 to split clients 1/2, 1/4, 1/4, got {n}")
    out = []
    for name, (_, _, share) in CAFED_TYPES.items():
        out += [name] * int(round(share * n))
    return out


def exclusion_problem(cfg: dict, problem_seed: int):
    """(task, pi (N,), lam (N,), types) of the exclusion experiment."""
    task = quadratic_task(n=cfg["n"], dim=cfg["dim"], seed=problem_seed, mu=cfg["mu"], L=cfg["L"],
                          heterogeneity=cfg["heterogeneity"])
    types = client_types(cfg["n"])
    pi = np.array([CAFED_TYPES[t][0] for t in types])
    lam = np.array([CAFED_TYPES[t][1] for t in types])
    return task, pi, lam, types


def _biased_gap(task, keep: np.ndarray):
    """w -> F_B(w) - F_B^* for p uniform on the kept clients (diagonal quadratics, closed form), and F(w_B^*) - F^*."""
    A, b = task.problem.A, task.problem.b
    p = torch.as_tensor(keep / keep.sum(), dtype=A.dtype).unsqueeze(-1)
    H = (p * A).sum(0)
    w_B = (p * A * b).sum(0) / H
    e = w_B - task.problem.w_star
    bias = float(0.5 * (A.mean(0) * e * e).sum())
    return (lambda w: 0.5 * (H * (w - w_B) ** 2).sum(-1)), bias, w_B


def exclusion_runs(cfg: dict, seeds, problem_seed: int) -> pd.DataFrame:
    r"""One problem, CA-Fed's client types, Markov availability from `participation.markov` (per-client
    :math:`\pi_k, \lambda_k`, the same masks for every strategy); each strategy never aggregates its
    excluded clients. Records, per strategy (seed-mean and standard error): "total" :math:`F(w_t) - F^*`,
    "opt" :math:`F_B(w_t) - F_B^*`, and the constant "bias" :math:`F(w_B^*) - F^*`, plus Theorem 1's
    :math:`\chi^2_{\alpha\|p}` ("chi2")."""
    settings.check_profile(cfg, "exclusion settings")
    seeds = settings.seeds(seeds)
    task, pi, lam, types = exclusion_problem(cfg, problem_seed)
    N, T = task.num_clients, cfg["rounds"]
    masks = {}

    def base(s):
        if s not in masks:
            masks[s] = participation.markov(pi, T, s, lam=lam)
        return masks[s]

    keeps = {k: np.array([t not in ex for t in types]) for k, ex in STRATEGIES.items()}
    algs = {k: _unbiased(pi, cfg["eta0"], cfg["a"], keep=keep, availability=lambda s, keep=keep: base(s) & keep)
            for k, keep in keeps.items()}
    gaps = {k: _biased_gap(task, keep) for k, keep in keeps.items()}
    names = list(algs)
    S = len(list(seeds))
    row_of = np.repeat(np.arange(len(names)), S)

    def track(w):
        vals = torch.stack([gaps[k][0](w) for k in names])              # (strategies, R)
        return {"opt": vals[torch.as_tensor(row_of), torch.arange(w.shape[0])]}

    res = fl.run(task, algs, seeds=list(seeds), rounds=T, every=cfg["every"], track=track,
                 track_every=cfg["every"])
    for k in names:
        res.values[k]["total"] = res.values[k]["gap"]
    out = _summary(res, ["total", "opt"])
    alpha = np.full(N, 1 / N)
    const = []
    for k in names:
        p = keeps[k] / keeps[k].sum()
        chi2 = float(np.sum(np.where(p > 0, (alpha - p) ** 2 / np.where(p > 0, p, 1.0), np.inf)))
        const += [dict(method=k, round=0, metric="bias", value=gaps[k][1], se=0.0),
                  dict(method=k, round=0, metric="chi2", value=chi2, se=0.0),
                  dict(method=k, round=0, metric="excluded", value=float(N - keeps[k].sum()), se=0.0)]
    out = pd.concat([out, pd.DataFrame(const)], ignore_index=True)
    out["problem"] = problem_seed
    return out


# ================================================================================================
# 5. step-size conditions (11)
# ================================================================================================
def step_sums(exps, T: int, checkpoints=None, chunk: int = 1_000_000) -> pd.DataFrame:
    r"""Partial sums :math:`S_1(T) = \sum_{t\le T} t^{-a}` and :math:`S_2(T) = \sum_{t\le T} \ln(t)\, t^{-2a}`
    (the two sums of eq. (11) with :math:`\eta_t = t^{-a}`) at the checkpoints (default 10, 100, ..., T),
    accumulated in float64 chunks."""
    settings.positive_int(T, "T", 10)
    settings.positive_int(chunk, "chunk")
    checkpoints = sorted(checkpoints or [10 ** k for k in range(1, int(round(math.log10(T))) + 1)])
    rows = []
    for a in exps:
        s1 = s2 = 0.0
        start, cps = 1, list(checkpoints)
        while cps:
            stop = min(start + chunk, cps[0] + 1)
            t = np.arange(start, stop, dtype=float)
            s1 += float(np.sum(t ** (-a)))
            s2 += float(np.sum(np.log(t) * t ** (-2 * a)))
            start = stop
            if stop == cps[0] + 1:
                rows.append(dict(a=a, T=cps.pop(0), S1=s1, S2=s2))
    return pd.DataFrame(rows)


def step_sum_limits(a: float) -> dict:
    r"""What eq. (11) needs of :math:`\eta_t = \eta_0 t^{-a}`: :math:`\sum \eta_t = \infty` iff
    :math:`a \le 1`; :math:`\sum \ln(t)\eta_t^2 < \infty` iff :math:`2a > 1`, with sum
    :math:`-\zeta'(2a)`. Also the large-T forms of :math:`S_1(T)` (:math:`\zeta(a) + T^{1-a}/(1-a)`,
    :math:`\ln T + \gamma` at a = 1) and the tail :math:`\int_T^\infty \ln t\, t^{-2a}\,dt` of :math:`S_2`."""
    import mpmath
    out = dict(a=a, diverges_S1=a <= 1, converges_S2=2 * a > 1, both=(a <= 1) and (2 * a > 1))
    out["S2_limit"] = float(-mpmath.zeta(2 * a, 1, 1)) if 2 * a > 1 else float("inf")
    if a == 1:
        out["S1_asym"] = lambda T: math.log(T) + float(mpmath.euler) + 1 / (2 * T)
    elif a == 0:
        out["S1_asym"] = lambda T: float(T)
    else:
        z = float(mpmath.zeta(a))
        out["S1_asym"] = lambda T: z + T ** (1 - a) / (1 - a) + T ** (-a) / 2
    c = 2 * a - 1
    # sum over t > T ~ integral from T minus half the first term (Euler-Maclaurin)
    out["S2_tail"] = ((lambda T: T ** (-c) * (math.log(T) / c + 1 / c ** 2) - math.log(T) * T ** (-2 * a) / 2)
                      if c > 0 else (lambda T: float("inf")))
    return out


# ================================================================================================
# readings: tables, verdicts and sentences computed from the measurements
# ================================================================================================
def _g_ln(lam):
    """1/ln(1/|lambda|) (0 at lambda = 0): Theorem 2's lambda term, with the modulus."""
    a = np.abs(np.asarray(lam, dtype=float))
    with np.errstate(divide="ignore"):
        return np.where(a > 0, 1 / np.log(1 / np.where(a > 0, a, 0.5)), 0.0)


def _g_iat(lam):
    """(1 + lambda)/(1 - lambda): the sum over all lags of the autocorrelation lambda^|s|."""
    lam = np.asarray(lam, dtype=float)
    return (1 + lam) / (1 - lam)


LAMBDA_MODELS = {"d + c / ln(1/|lambda|)": _g_ln, "d + c (1+lambda)/(1-lambda)": _g_iat}


def fit_lambda_models(lams, means, ses) -> dict:
    """Weighted least-squares fit of error(lambda) = d + c g(lambda) for each g of LAMBDA_MODELS (weights
    1/se). Returns {name: (prediction function, (c, d, worst relative misfit on the fitted points))}."""
    lams, y, se = (np.asarray(v, dtype=float) for v in (lams, means, ses))
    out = {}
    for name, g in LAMBDA_MODELS.items():
        X = np.stack([np.ones_like(y), g(lams)], 1) / se[:, None]
        (d, c), *_ = np.linalg.lstsq(X, y / se, rcond=None)
        pred = (lambda lam, g=g, c=c, d=d: d + c * g(lam))
        out[name] = (pred, (float(c), float(d), float(np.max(np.abs(pred(lams) - y) / y))))
    return out


def lambda_numbers(fit: dict, fin: pd.DataFrame, cfg: dict) -> dict:
    """The numbers and outcome words of the lambda sweep that the page's prose glues: growth factor, the two
    models' misfits, which model fits better, and the errors at negative lambda."""
    e = fin["mean"]
    lam_max = float(max(e.index))
    mis = {k: v[1][2] for k, v in fit.items()}
    ln_name, iat_name = list(LAMBDA_MODELS)
    neg = [lam for lam in e.index if lam < 0]
    z = {lam: (e[0.0] - e[lam]) / math.sqrt(fin["se"][lam] ** 2 + fin["se"][0.0] ** 2) for lam in neg}
    return dict(
        lam_pi=float(cfg["pi"]), lam_rounds=int(cfg["rounds"]), lam_max=lam_max, lam_growth=float(e[lam_max] / e[0.0]),
        lam_mis_ln=100 * float(mis[ln_name]), lam_mis_iat=100 * float(mis[iat_name]),
        lam_verdict="is consistent with" if mis[ln_name] <= 0.25 else "has only the order, near λ = 1, of",
        lam_better=("the integrated autocorrelation time" if min(mis, key=mis.get) == iat_name else "1/ln(1/λ)"),
        lam_neg_vals=", ".join(f"{e[lam]:.2e} at {lam:g}" for lam in neg) or "no negative λ measured",
        lam_e0=f"{e[0.0]:.2e}",
        lam_neg_verdict=("gives a lower error than" if neg and all(v > 3 for v in z.values()) else
                         "does not give an error lower by more than 3 standard errors in every case than"),
        lam_neg_se=("each more than 3 standard errors lower" if neg and all(v > 3 for v in z.values()) else
                    "not each more than 3 standard errors lower"))


def exclusion_table(ex: pd.DataFrame, budgets) -> pd.DataFrame:
    """Per budget and strategy, averaged over problems: optimization error, bias, total (with the standard
    error of the total over seeds), chi^2; and which strategy has the smallest total at that budget."""
    rows = []
    const = ex[ex["metric"].isin(["bias", "chi2"])].groupby(["method", "metric"])["value"].mean().unstack()
    for T in budgets:
        at = ex[(ex["round"] == T) & ex["metric"].isin(["total", "opt"])]
        g = at.groupby(["method", "metric"])
        mean = g["value"].mean().unstack()
        se = (g["se"].apply(lambda s: float(np.sqrt((s ** 2).sum())) / len(s))).unstack()
        for m in STRATEGIES:
            rows.append(dict(budget=T, strategy=m, opt=mean.loc[m, "opt"], bias=const.loc[m, "bias"],
                             total=mean.loc[m, "total"], total_se=se.loc[m, "total"], chi2=const.loc[m, "chi2"]))
    out = pd.DataFrame(rows)
    out["best total"] = out.groupby("budget")["total"].transform("min") == out["total"]
    return out.set_index(["budget", "strategy"])


def exclusion_verdict(tab: pd.DataFrame) -> tuple[bool, str]:
    """The claim holds when excluding the correlated low-availability clients lowers F_B(w_T) - F_B^* below
    the unbiased strategy's F(w_T) - F^* at every budget, and adds a positive bias."""
    allc, corr = list(STRATEGIES)[0], list(STRATEGIES)[1]
    budgets = tab.index.get_level_values(0).unique()
    lower = [tab.loc[(T, corr), "opt"] < tab.loc[(T, allc), "opt"] for T in budgets]
    bias = tab.loc[(budgets[0], corr), "bias"]
    wins = [int(T) for T in budgets if not tab.loc[(T, allc), "best total"]]
    ok = all(lower) and bias > 0
    return ok, (f"excluding the unavailable-stable clients lowers the optimization error at {sum(lower)} of "
                f"{len(lower)} budgets (rule: all) and adds a bias F(w_B*) - F* = {bias:.3g}; some exclusion has the "
                f"lowest total error at budgets {wins if wins else 'none'}")


def exclusion_numbers(tab: pd.DataFrame) -> dict:
    """The numbers and outcome words of the exclusion experiment that the page's prose glues."""
    names = list(STRATEGIES)
    budgets = list(tab.index.get_level_values(0).unique())
    first, last = budgets[0], budgets[-1]
    best = {T: tab.loc[T]["total"].idxmin() for T in budgets}
    cross = [T for T in budgets if best[T] == names[0]]
    shifting_worse = all(tab.loc[(T, names[2]), "opt"] > tab.loc[(T, names[0]), "opt"] for T in budgets)
    never = [T for T in budgets if best[T] == names[3]]
    lowest_opt = all(tab.loc[T]["opt"].idxmin() == names[3] for T in budgets)
    return dict(
        ex_first=int(first), ex_last=int(last), ex_best_first=best[first],
        ex_total_best_first=float(tab.loc[(first, best[first]), "total"]),
        ex_total_all_first=float(tab.loc[(first, names[0]), "total"]),
        ex_q_factor=1 / CAFED_TYPES["unavailable, stable"][0],
        ex_cross=f"from {cross[0]} rounds on" if cross else "at no budget measured",
        ex_large="wins" if cross else "does not yet win",
        ex_total_all_last=float(tab.loc[(last, names[0]), "total"]),
        ex_total_other_last=float(tab.loc[last].drop(names[0])["total"].min()),
        ex_shift="raises" if shifting_worse else "does not always raise",
        ex_all_gain=("gives the lowest optimization error at every budget" if lowest_opt else
                     "lowers the optimization error"),
        ex_all_bias=float(tab.loc[(first, names[3]), "bias"]),
        ex_all_total=(f"makes it the best total only at budgets {never}" if never else
                      "keeps its total error above the best strategy's at every budget measured"))


def step_table(ss: pd.DataFrame, lim: dict, T: int) -> pd.DataFrame:
    """Per exponent a: the two conditions of eq. (11), the partial sums at T and their large-T forms."""
    rows = []
    for a, L in lim.items():
        r = ss[(ss["a"] == a) & (ss["T"] == T)].iloc[0]
        prev = ss[(ss["a"] == a) & (ss["T"] == T // 10)].iloc[0]
        rows.append({"a": a, "sum eta_t = inf": L["diverges_S1"], "sum ln(t) eta_t^2 < inf": L["converges_S2"],
                     "both (11)": L["both"], "S1(T)": r["S1"], "S1 large-T form": L["S1_asym"](T),
                     "S2(T)": r["S2"], "S2(T) + tail": r["S2"] + L["S2_tail"](T), "-zeta'(2a)": L["S2_limit"],
                     "S2(T) - S2(T/10)": r["S2"] - prev["S2"]})
    return pd.DataFrame(rows).set_index("a")


def step_verdict(st: pd.DataFrame, *used) -> tuple[bool, str]:
    """Checks: S1(T) matches its large-T form and S2(T) + tail matches -zeta'(2a) (relative 1e-6) where
    defined; the exponents used by the page's schedules satisfy both conditions."""
    e1 = float((st["S1(T)"] / st["S1 large-T form"] - 1).abs().max())
    conv = st[np.isfinite(st["-zeta'(2a)"])]
    e2 = float((conv["S2(T) + tail"] / conv["-zeta'(2a)"] - 1).abs().max())
    good = sorted(float(a) for a in st.index[st["both (11)"]])
    uses = all(0.5 < a <= 1 for a in used)
    ok = e1 < 1e-6 and e2 < 1e-6 and uses
    return ok, (f"eta_t = eta_0 t^-a satisfies (11) iff 1/2 < a <= 1 (of the exponents tried: {good}); partial sums "
                f"match their large-T forms to {max(e1, e2):.1e} (rule: 1e-6); the schedules used (a = "
                f"{', '.join(str(a) for a in sorted(set(used)))}) satisfy both conditions")


# ================================================================================================
# the page: its stored runs, its fixed examples and the verdicts of its checks
# ================================================================================================
BOX = dict(page="availability/markov",
           headline="Claim: optimizing a biased F_B != F_T may make sense if it is easier than optimizing F_T",
           tests="the Markov model of correlated availability and its second eigenvalue λ(P), CA-Fed's Theorems 1 "
                 "and 2 on strongly convex quadratics, the step sizes of eq. (11), and the notes' lesson that a biased "
                 "objective may be worth optimizing because it is easier")
# the rasters: `clients` chains of `rounds` rounds per lambda, the first `shown` rounds of 8 of them drawn
RASTER = dict(pi=0.5, lams=(-0.9, 0.0, 0.9, 0.99), clients=400, rounds=4000, shown=200)
JOINT = dict(pis=[0.3, 0.5, 0.6], lams=[0.5, -0.8, 0.3])                  # three clients, one negative lambda
MAP = dict(xs=[0.005, 0.01, 0.05, 0.1, 0.3], ps=[0.1, 0.3, 0.5, 0.9])     # FedAU's (x, p) grid
def configs(cfg: dict) -> dict:
    """The stored-run configs of the page under the settings `cfg` (:func:`profile`): "search" (the search for
    a tight case of Theorem 1), "lam" (the lambda sweep) and "exclusion" (one per problem)."""
    TH, seeds = cfg["thm1"], cfg["seeds"]
    return dict(search=dict(experiment="theorem1_search", cases=[list(c) for c in TH["search"]], starts=TH["starts"],
                            maxiter=TH["maxiter"], seed=seeds[0]),
                lam=dict(experiment="lambda_sweep", settings=cfg["lam"], seeds=seeds),
                exclusion=[dict(experiment="exclusion", settings=cfg["excl"], problem=ps, seeds=seeds)
                           for ps in cfg["excl"]["problems"]])


def search_runs(cfg: dict, where) -> pd.DataFrame:
    """The search for a tight case of Theorem 1 (:func:`search_table`), read from the store `where` or made."""
    TH, seed = cfg["thm1"], cfg["seeds"][0]
    return common.cached(where, configs(cfg)["search"],
                         lambda: search_table(TH["search"], TH["starts"], TH["maxiter"], seed=seed))


def lambda_runs(cfg: dict, where) -> pd.DataFrame:
    """The lambda sweep (:func:`lambda_sweep`), read from the store `where` or made."""
    return common.cached(where, configs(cfg)["lam"], lambda: lambda_sweep(cfg["lam"], cfg["seeds"]))


def exclusion_all(cfg: dict, where) -> pd.DataFrame:
    """The exclusion experiment on every problem of the profile (:func:`exclusion_runs`), read from the store
    `where` or made: columns method, round, metric, value, se, problem."""
    ex = pd.concat([common.cached(where, c, lambda c=c: exclusion_runs(cfg["excl"], cfg["seeds"], c["problem"]))
                    for c in configs(cfg)["exclusion"]], ignore_index=True)
    return ex[["method", "round", "metric", "value", "se", "problem"]]


def raster_masks(seed: int) -> dict[str, np.ndarray]:
    """The rasters' availability (:data:`RASTER`): per lambda, "lambda=<lam>" -> a (rounds, clients) mask of
    stationary chains with pi = RASTER["pi"] (stream "raster/<k>" of `seed`)."""
    R = RASTER
    return {f"lambda={lam:g}": participation.markov(np.full(R["clients"], R["pi"]), R["rounds"],
                                                   _stream(seed, "raster", k), lam=lam)
            for k, lam in enumerate(R["lams"])}


def run_lengths(masks: dict, pi: float) -> pd.DataFrame:
    """Per mask of :func:`raster_masks`: the mean length of the available runs, beside 1/((1-lambda)(1-pi))."""
    runs = pd.DataFrame([dict(lam=float(k.split("=")[1]), measured=mean_on_run(m),
                              exact=1 / ((1 - float(k.split("=")[1])) * (1 - pi))) for k, m in masks.items()])
    T, N = next(iter(masks.values())).shape
    return runs.rename(columns={"lam": "lambda", "measured": f"mean available run ({N} clients x {T} rounds)",
                                "exact": "1/((1-lambda)(1-pi))"}).round(3)


def autocorrelation_verdict(ac: pd.DataFrame) -> tuple[bool, str]:
    """Lag-s autocorrelation = lambda^s (:func:`autocorrelation_check`): exact from P^s to 1e-12, every simulated
    mean within 4 standard errors."""
    exact_err = float((ac["closed_form"] - ac["power"]).abs().max())
    zmax = float(ac["z"].abs().max())
    return (exact_err < 1e-12 and zmax <= 4, f"lag-s autocorrelation = lambda^s: exact from P^s to {exact_err:.1e}; "
            f"simulation within {zmax:.2f} standard errors (rule: at most 4) over {len(ac)} (case, lag) pairs")


def mixing_verdict(cases, steps: int, mx: pd.DataFrame) -> tuple[bool, str]:
    """TV distance after t steps = |lambda|^t x the initial distance: exact (:func:`mixing_exact` from three
    starts) to 1e-12, and the simulated signed distances (:func:`mixing_check`) within 4 standard errors."""
    ex_err = max(float((e["tv"] - e["rate"]).abs().max()) for pi, lam in cases for mu0 in (0.0, 0.3, 1.0)
                 for e in [mixing_exact(pi, lam, mu0, steps)])
    zmix = float(((mx["est"] - mx["exact"]) / mx["se"]).abs()[mx["t"] > 0].max())
    return (ex_err < 1e-12 and zmix <= 4, f"TV distance after t steps = |lambda|^t x initial distance: exact to "
            f"{ex_err:.1e}; simulated signed distance within {zmix:.2f} standard errors (rule: at most 4)")


def joint_verdict(pis, lams) -> tuple[bool, str]:
    """The joint chain of independent clients mixes at max_k |lambda_k| (:func:`joint_slem`), to 1e-12."""
    slem, max_abs = joint_slem(pis, lams)
    return (abs(slem - max_abs) < 1e-12, f"second eigenvalue modulus of the {2 ** len(pis)}-state joint chain "
            f"{slem:.12f} = max_k |lambda_k| = {max_abs} (max_k lambda_k would give {max(lams)})")


def map_verdict(pm: pd.DataFrame) -> tuple[bool, str]:
    """FedAU's (x, p) = CA-Fed's (pi = p, lambda = 1 - x/p) on the feasible pairs of :func:`parameter_map`, to
    1e-12, and the rescaled pairs are exactly the infeasible ones."""
    feas = pm[pm["feasible"]]
    diff, eig_err = float(feas["max_abs_diff"].max()), float((feas["lam2_fedau"] - feas["lam_map"]).abs().max())
    return (diff < 1e-12 and eig_err < 1e-12 and bool((pm["feasible"] == ~pm["rescaled"]).all()),
            f"FedAU (x, p) = CA-Fed (pi = p, lambda = 1 - x/p): same P to {diff:.1e}, lambda_2 = 1 - x/p to "
            f"{eig_err:.1e} on {len(feas)} pairs; the {int(pm['rescaled'].sum())} rescaled pairs are exactly the "
            f"infeasible ones")


def map_table(pm: pd.DataFrame) -> pd.DataFrame:
    """:func:`parameter_map` for reading (6 decimals; the infeasible pairs say so)."""
    return (pm.rename(columns={"lam_map": "1 - x/p", "lam2_fedau": "lambda_2(P_FedAU)",
                               "max_abs_diff": "max |P_FedAU - P_CA-Fed|"}).round(6)
            .astype(object).fillna("n/a: x > p, infeasible"))


def final_errors(lw: pd.DataFrame) -> pd.DataFrame:
    """Per lambda of the sweep (:func:`lambda_sweep`): mean, standard deviation, count and standard error over
    the seeds of the final F(w_T) - F^*."""
    fin = lw[lw["metric"] == "final_gap"].groupby("lam")["value"].agg(["mean", "std", "count"])
    fin["se"] = fin["std"] / np.sqrt(fin["count"])
    return fin


def fit_table(fit: dict) -> pd.DataFrame:
    """The fitted models of :func:`fit_lambda_models`: c, d and the worst relative misfit, one row per model."""
    return pd.DataFrame({name: dict(c=c_, d=d_, worst_rel_misfit=m_) for name, (_, (c_, d_, m_)) in fit.items()}).T


def thm2_verdict(fin: pd.DataFrame) -> tuple[bool, str]:
    """Theorem 2's lambda(P) term: in its regime 0 <= lambda < 1 the error at the budget (:func:`final_errors`)
    increases by more than 3 standard errors at every step of the grid."""
    pf = fin[fin.index >= 0]
    zs = (pf["mean"].diff() / np.sqrt(pf["se"] ** 2 + pf["se"].shift(1) ** 2)).dropna()
    return (bool((zs > 3).all()), f"the error at the budget increases with lambda at every step of the grid 0 <= "
            f"lambda < 1 (smallest increase {zs.min():.1f} standard errors; rule: more than 3)")


def summary_words(checks) -> dict:
    """The numbers and outcome words of the page's summary, from its checks (``items.Checks``)."""
    ok = checks.verdicts()
    return dict(n_agree=checks.n_agree, n_checks=len(checks),
                **{f"v_{k}": "agrees" if v else "disagrees" for k, v in ok.items()},
                w_thm1="holds on all" if ok["thm1_random"] else "fails on some of the",
                w_thm2="increases" if ok["thm2"] else "does not always increase",
                w_excl="lowers" if ok["exclusion"] else "does not always lower")


# ================================================================================================
# figure helpers
# ================================================================================================
def plot_lambda_sweep(axes, curves: pd.DataFrame, fin: pd.DataFrame, fit: dict) -> None:
    """Left: seed-mean F(w_t) - F^* per lambda; right: the error at the budget against lambda (±3 s.e.)
    with the fitted models of :func:`fit_lambda_models`."""
    cmap = plt_cmap("viridis")
    lams = sorted(curves["lam"].unique())
    for i, lam in enumerate(lams):
        g = curves[curves["lam"] == lam]
        axes[0].plot(g["round"], g["value"], color=cmap(i / max(1, len(lams) - 1)), label=f"$\\lambda$={lam:g}")
    axes[0].set(xscale="log", yscale="log", xlabel="round t", ylabel=r"$F(w_t) - F^*$ (mean over seeds)")
    # legends below the axes: the curves and points fill both panels
    axes[0].legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.2), columnspacing=1.0, handlelength=1.5)
    axes[1].errorbar(fin.index, fin["mean"], yerr=3 * fin["se"], fmt="o", color="k", label="measured (±3 s.e.)")
    grid = np.linspace(min(fin.index), 0.995, 300)
    for name, (pred, _) in fit.items():
        math = name.replace("lambda", r"\lambda").replace("ln", r"\ln")
        axes[1].plot(grid, pred(grid), label=f"fit on $\\lambda \\geq 0$: ${math}$")
    axes[1].set(yscale="log", xlabel=r"$\lambda$ (every client)", ylabel=r"$F(w_T) - F^*$ at the budget")
    axes[1].legend(loc="upper center", bbox_to_anchor=(0.5, -0.2))


def plot_exclusion(axes, avg: pd.DataFrame) -> None:
    """Left: total error F(w_t) - F^* per strategy with its bias F(w_B^*) - F^* dotted; right: the
    optimization error F_B(w_t) - F_B^*."""
    for k, m in enumerate(STRATEGIES):
        col = plt_cmap("tab10")(k)
        for ax, met in zip(axes, ("total", "opt")):
            g = avg[(avg["method"] == m) & (avg["metric"] == met) & (avg["round"] > 0)]
            ax.plot(g["round"], g["value"], color=col, label=m)
        b = avg[(avg["method"] == m) & (avg["metric"] == "bias")]["value"].iloc[0]
        if b > 1e-12:
            axes[0].axhline(b, color=col, ls=":", lw=1)
    axes[0].set(xscale="log", yscale="log", xlabel="round t", ylabel="error (mean over seeds and problems)",
                title=r"total $F(w_t) - F^*$ (dotted: bias $F(w_B^*) - F^*$)")
    axes[1].set(xscale="log", xlabel="round t", title=r"optimization error $F_B(w_t) - F_B^*$")
    axes[0].legend()


def plt_cmap(name: str):
    """A matplotlib colormap by name (matplotlib is imported only when a figure is drawn)."""
    import matplotlib
    return matplotlib.colormaps[name]


def plot_autocorrelation(axes, ac: pd.DataFrame) -> None:
    """Simulated lag-s autocorrelations (±3 s.e.) against lambda^s; left lambda > 0 (log scale), right
    lambda < 0."""
    for k, ((pi, lam), g) in enumerate(ac.groupby(["pi", "lam"], sort=False)):
        if lam == 0:
            continue
        ax = axes[0] if lam > 0 else axes[1]
        col = plt_cmap("tab10")(k % 10)
        s = np.arange(0, g["lag"].max() + 1)
        ax.plot(s, lam ** s, "-", lw=0.8, color=col)
        ax.errorbar(g["lag"], g["mc_mean"], yerr=3 * g["mc_se"], fmt="os^Dv<>p"[k % 8], ms=4, color=col,
                    mfc="none" if k % 2 else col, label=f"$\\pi$={pi}, $\\lambda$={lam}")
    axes[0].set(yscale="log", ylim=(1e-3, 1.2), xlabel="lag s", ylabel="autocorrelation of X_t (±3 s.e.)",
                title=r"$\lambda > 0$ (log scale); lines: $\lambda^s$")
    axes[1].set(xlabel="lag s", ylabel="autocorrelation of X_t (±3 s.e.)", title=r"$\lambda < 0$; lines: $\lambda^s$")
    for ax in axes:
        ax.legend()


def plot_mixing(ax, mx: pd.DataFrame) -> None:
    """TV distance to pi from the start "unavailable": exact |lambda|^t pi (lines) and simulated (points,
    ±3 s.e., shown while the distance exceeds twice its standard error)."""
    for k, ((pi, lam), g) in enumerate(mx.groupby(["pi", "lam"], sort=False)):
        col = plt_cmap("tab10")(k % 10)
        ax.plot(g["t"], np.abs(g["exact"]), "-", lw=0.8, color=col)
        ok = (g["t"] > 0) & (g["exact"].abs() > 2 * g["se"])
        ax.errorbar(g["t"][ok], np.abs(g["est"][ok]), yerr=3 * g["se"][ok], fmt="o", ms=3, color=col,
                    label=f"$\\pi$={pi}, $\\lambda$={lam} (start: unavailable)")
    ax.set(yscale="log", ylim=(1e-4, 1), xlabel="steps t", ylabel="TV distance to pi (±3 s.e.)")
    ax.legend()


def plot_step_sums(axes, ss: pd.DataFrame, lim: dict) -> None:
    """The two partial sums of eq. (11) against T, per exponent a; dotted: the limit -zeta'(2a)."""
    for k, (a, g) in enumerate(ss.groupby("a")):
        col = plt_cmap("tab10")(k % 10)
        axes[0].plot(g["T"], g["S1"], "o-", color=col, label=f"a={a} ({'both hold' if lim[a]['both'] else 'fails'})")
        axes[1].plot(g["T"], g["S2"], "o-", color=col)
        if np.isfinite(lim[a]["S2_limit"]):
            axes[1].axhline(lim[a]["S2_limit"], color=col, ls=":", lw=0.8)
    axes[0].set(xscale="log", yscale="log", xlabel="T", ylabel=r"$\sum_{t\leq T} t^{-a}$")
    axes[1].set(xscale="log", yscale="log", xlabel="T", ylabel=r"$\sum_{t\leq T} \ln(t)\, t^{-2a}$",
                title=r"colours as on the left; dotted: the limit $-\zeta'(2a)$")
    axes[0].legend()
