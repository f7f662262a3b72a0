r"""The experiments of the MIFA chapter's theory page: each runs the chapter's methods (ZeroSARAH among them)
through `flkit.papers.mifa.methods.simulate` on a quadratic of `flkit.tasks` and returns a tidy table (round,
metric, value and the run's columns) for the results store.

* :func:`error_floor`: constant-step runs on a grid of step sizes and participation probabilities, the time
  averages of :math:`\|\nabla f(w_t)\|^2` the error-floor statements are about;
* :func:`one_round_monte_carlo`: one round redrawn from a fixed state, the bias of the stored entries;
* :func:`table_error_growth` (and :func:`umifa_growth_rate`, its prediction): the stored-entry error of U-MIFA
  as written;
* :func:`step_size_sweep` and :func:`rounds_to_epsilon`: the step-size conditions and the complexity tables.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from flkit import aggregate, fl, participation
from flkit.papers import settings
from flkit.papers.mifa.methods import apply_rule, bernoulli_masks, simulate, uniform_k_masks
from flkit.seeding import rng
from flkit.tasks import QuadraticTask

__all__ = ["umifa_growth_rate", "error_floor", "longest_absence", "one_round_monte_carlo", "saga_estimates",
           "table_error_growth", "step_size_sweep", "rounds_to_epsilon", "EPS_EXPONENT"]


def umifa_growth_rate(p: float) -> float:
    r"""Almost-sure growth rate per round of the literal U-MIFA table error with a fixed target:
    when active (prob. p) the error is multiplied by :math:`1 - 1/p`, so
    :math:`\frac1t\log|e_t| \to p\log|1/p - 1|` (> 0 iff p < 1/2; -inf at p = 1, where one
    participation makes the entry exact)."""
    p = float(settings.probabilities(p, "p")[0])
    if p == 1.0:
        return -math.inf
    return p * math.log(abs(1.0 / p - 1.0)) if p != 0.5 else 0.0


def error_floor(task: QuadraticTask, methods: Sequence[str], *, etas, ps, seeds, rounds: int,
                start: str = "zero") -> pd.DataFrame:
    """Constant-step runs on a grid eta x p x seed (Bernoulli(p) participation, masks per run from
    `flkit.participation.bernoulli`). Per run and method: "avg_all" = (1/T) sum_{t<T} ||grad f(w_t)||^2,
    "avg_tail" = the same over t in [T/2, T) (the stationary floor), "avg_from1" = (1/(T-1)) sum_{1<=t<T},
    "avg_q2" / "avg_q4" = the same over the second / last quarter, "gap0" = f(w_0) - f*,
    "gap1" = f(w_1) - f*, "tau_max" = longest run of rounds any client was absent. Needs rounds >= 4 (every
    quarter non-empty)."""
    settings.positive_int(rounds, "rounds", 4)
    etas, ps, seeds = settings.positive(etas, "etas"), settings.probabilities(ps, "ps"), settings.seeds(seeds)
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
    tau = longest_absence(mask.numpy())
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


def longest_absence(mask: np.ndarray) -> np.ndarray:
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
    n, d = task.n, task.dim
    settings.positive_int(t0, "t0 (rounds of MIFA before the Monte Carlo round)")
    settings.positive_int(draws, "draws", 2)
    settings.probabilities(p, "p")
    settings.positive(eta, "eta")
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
    rules = {"mifa": lambda: apply_rule(aggregate.MIFA(), mem, dl, act, p),
             "umifa": lambda: apply_rule(aggregate.UMIFA("literal"), mem, dl, act, p),
             "umifa_saga": lambda: saga_estimates(mem, dl, act, p)}
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


def saga_estimates(memory, delta, active, p):
    """U-MIFA's per-client unbiased estimates y_i + 1_{i active}/p (Delta_i - y_i) and their mean."""
    a = active.unsqueeze(-1)
    est = memory + torch.where(a, (delta - memory) / p, torch.zeros((), dtype=delta.dtype))
    return est.mean(1), est


def table_error_growth(ps, *, rounds: int, runs: int, n: int = 10, seed: int = 0) -> pd.DataFrame:
    """Stored-entry error |G_t^(i) - Delta^(i)| with a fixed target Delta = 1 (the server does not move):
    U-MIFA as written multiplies it by (1 - 1/p) at each participation; with SAGA memory it is 0 after the
    first one. Rows per p and round: "log10_median_err" (median over runs x clients; literal rule),
    "predicted_log10" (t p log10|1/p - 1|), "saga_frac_nonzero" (fraction of SAGA entries not yet exact)."""
    ps = settings.probabilities(ps, "ps")
    settings.positive_int(rounds, "rounds")
    settings.positive_int(runs, "runs")
    settings.positive_int(n, "n")
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
                _, mem = apply_rule(aggregate.UMIFA("literal"), mem, delta, mask[:, t], p)
                _, y = apply_rule(aggregate.UMIFA("saga"), y, delta, mask[:, t], p)
        df = pd.DataFrame(out, columns=["round", "log10_median_err", "predicted_log10", "saga_frac_nonzero"])
        frames.append(df.melt(id_vars="round", var_name="metric", value_name="value").assign(p=p))
    return pd.concat(frames, ignore_index=True)


def step_size_sweep(task: QuadraticTask, methods: Sequence[str], *, eta_L, seeds, rounds: int, b: int = 1,
                    tol: float = 1e-3) -> pd.DataFrame:
    """Every method at every step size eta = eta_L / L and seed, b clients per round uniformly without
    replacement (p_i = b/n; the same masks for every method), for `rounds` rounds from w_0 = 0
    (:func:`flkit.papers.mifa.methods.simulate`; "zerosarah" with lambda = b/(2n)). "stable" = 1 when the run
    never diverged and ends with ||grad f||^2 <= tol x its initial value (a bounded but non-converging orbit does
    not count); "final_ratio" = final / initial ||grad f||^2 (-1: diverged)."""
    eta_L, seeds = settings.positive(eta_L, "eta_L"), settings.seeds(seeds)
    settings.positive_int(rounds, "rounds")
    settings.positive(tol, "tol")
    if not 1 <= settings.positive_int(b, "b") <= task.n:
        raise ValueError(f"b (clients per round) must lie in [1, {task.n}], got {b}")
    runs = pd.DataFrame([(int(s), float(e)) for e in eta_L for s in seeds], columns=["seed", "eta_L"])
    n = task.n
    mask = uniform_k_masks(runs["seed"].tolist(), b, rounds, n)
    eta = runs["eta_L"].to_numpy() / task.L
    res = simulate(task, methods, seeds=runs["seed"].tolist(), eta=eta, p=b / n, mask=mask, rounds=rounds, every=rounds)
    frames = []
    for m in methods:
        g = res.values[m]["grad_norm2"]
        ratio = g[-1] / g[0]
        stable = (res.diverged[m] < 0) & np.isfinite(ratio) & (ratio <= tol)
        for k, v in (("stable", stable.astype(float)), ("final_ratio", np.where(np.isfinite(ratio), ratio, -1.0))):
            frames.append(runs.assign(method=m, round=rounds, metric=k, value=v))
    return pd.concat(frames, ignore_index=True).assign(n=n)


def rounds_to_epsilon(task: QuadraticTask, method: str, *, eta_L, seeds, max_rounds: int, metric: str, eps_rel: float,
                      b: int = 1, stop_factor: float = 4.0) -> pd.DataFrame:
    """First round with metric <= eps_rel x its initial value, for every step size eta = eta_L / L and
    seed; b clients per round uniformly without replacement (FedPGD, SAGA/U-MIFA, MIFA) or all (FedGD).
    The runs stop at stop_factor x the first round by which the median seed of some step size has hit.
    Rows: "hit_round" (-1: not within the rounds run) and "client_updates" (client gradients computed
    until then: one per participation; ZeroSARAH, method "zerosarah" (lambda = b/(2n)), computes two, at x_t and
    x_{t-1}, except in its first round) per run."""
    eta_L, seeds = settings.positive(eta_L, "eta_L"), settings.seeds(seeds)
    settings.positive_int(max_rounds, "max_rounds")
    if not 0 < eps_rel < 1:
        raise ValueError(f"eps_rel (target relative to the initial {metric}) must lie in (0, 1), got {eps_rel}")
    if not 1 <= settings.positive_int(b, "b") <= task.n:
        raise ValueError(f"b (clients per round) must lie in [1, {task.n}], got {b}")
    if not stop_factor >= 1:
        raise ValueError(f"stop_factor must be >= 1 (a multiple of the first median hit), got {stop_factor}")
    runs = pd.DataFrame([(int(s), float(e)) for e in eta_L for s in seeds], columns=["seed", "eta_L"])
    n = task.n
    w0 = torch.zeros(1, task.dim, dtype=torch.float64)
    eps = eps_rel * float(task.metrics(w0)[metric][0])
    mask = uniform_k_masks(runs["seed"].tolist(), b, max_rounds, n)
    eta, groups = runs["eta_L"].to_numpy() / task.L, pd.factorize(runs["eta_L"])[0]
    res = simulate(task, [method], seeds=runs["seed"].tolist(), eta=eta, p=b / n, mask=mask, b=b, rounds=max_rounds,
                   every=max_rounds, target=(metric, eps), stop_factor=stop_factor, stop_groups=groups)
    out = res.outcomes(runs)
    return out[out["metric"].isin(["hit_round", "client_updates"])].assign(n=n, eps=eps)


# the tables' epsilon-dependence: complexity ~ (1/eps)^a, a per criterion ("gap": the convex table's
# min_t f(x_t) - f*; "grad_norm2": the non-convex table's min_t ||grad f(x_t)||^2) and method
EPS_EXPONENT = {"gap": {"fedgd": 1.0, "fedpgd": 2.0, "umifa_saga": 1.0},
                "grad_norm2": {"fedgd": 1.0, "fedpgd": 2.0, "umifa_saga": 1.0}}
