r"""The one-step inequalities of document 002 checked by Monte Carlo, the step-size bounds of FedGD and FedPGD, and
ZeroSARAH at :math:`b \approx \sqrt n` clients per round (the theory page of the MIFA chapter).

**One step from a fixed state.** On a quadratic :math:`f = \frac1n\sum_if_i`,
:math:`f_i(w) = \frac12(w-b_i)^\top A_i(w-b_i)` (``flkit.tasks.QuadraticTask``, one local gradient step:
:math:`\Delta_t^{(i)} = \nabla f_i(w_t)`), the server step :math:`w_{t+1} = w_t - \eta G_t` gives
:math:`f(w_{t+1}) - f(w_t) = -\eta\langle\nabla f(w_t), G_t\rangle + \frac{\eta^2}2G_t^\top HG_t`, H the Hessian of f,
for every draw of the round's participation: the left side of each inequality is a function of the draw, and its
conditional expectation is estimated by redrawing the round many times from the same state (the Monte Carlo
standard error gives the margin), and computed in closed form where the rule allows (:func:`derivation_i_table`).

* Derivation (i) (FedAvg with importance sampling, :math:`G_t = \frac1n\sum_{i\in\mathcal A(t)}\nabla f_i(w_t)/p`):
  the chain of the document, line by line (:func:`derivation_i_lines`), ending in
  :math:`-\frac\eta2\|\nabla f\|^2 + \frac{\eta^2Lc}2\sigma_G^2`, :math:`c = \frac2n(\frac1p-1)`, under
  :math:`\eta L(1+c) \le 1`.
* General analysis (MIFA and U-MIFA): :math:`\mathbb E f(w_{t+1}) - f(w_t) \le -\frac\eta2\|\nabla f\|^2 +
  \frac\eta2\mathbb E\|\nabla f - G_t\|^2` (uses :math:`\eta L \le 1`), and with the document's expressions for
  the error term plugged in (:func:`general_table`).

The states :math:`w_t` (and the tables :math:`G_{t-1}`) come from runs of the rules through ``flkit.fl.run``.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from flkit import aggregate, fl, participation
from flkit.papers import claims, settings
from flkit.papers.mifa.common import HETERO, SLOPE_TOL, fit_slope
from flkit.papers.mifa.methods import apply_rule, simulate
from flkit.seeding import rng

__all__ = ["Z", "ROUNDING", "best_cost", "cost_slope", "trajectory", "derivation_i_lines", "derivation_i_table",
           "derivation_i_checks", "table_states", "general_table", "general_checks", "gd_step_sweep",
           "gd_step_checks", "zerosarah_sqrt_checks"]

Z = 3.0     # Monte Carlo margin of the one-sided checks, in standard errors


def trajectory(task, rule, *, p: float, eta: float, rounds, seed: int, w0=None) -> dict:
    r"""A run of `rule` (a ``flkit.aggregate`` rule) through ``fl.run`` with Bernoulli(p) participation (stream
    "participation" of `seed`) and step eta from w0 (default 0), stopped at each round t0 of `rounds`: {t0: (w_t0
    (d,), the rule's final state)}."""
    out = {}
    n = task.n
    mask = participation.bernoulli(np.full(n, p), max(max(rounds), 1), seed)
    for t0 in sorted(rounds):
        if t0 == 0:
            out[0] = (torch.zeros(task.dim, dtype=torch.float64) if w0 is None else torch.as_tensor(w0).clone(), None)
            continue
        res = fl.run(task, {"r": fl.Algorithm(rule, lr=eta, local_lr=eta, p=np.full(n, p))}, seeds=[seed],
                     rounds=t0, availability={seed: mask[:t0]}, every=t0, w0=w0, diverge_factor=None)
        out[t0] = (res.final_w[0].clone(), res.final["r"])
    return out


# ================================================================================================
# derivation (i): FedAvg with importance sampling
# ================================================================================================
def _fH(task):
    if task.lam:
        raise ValueError("the one-step checks need the quadratic problem (lam = 0): f's Hessian is then constant")
    return task.problem.A.mean(0)


def _step_change(task, w, G, eta: float) -> torch.Tensor:
    r""":math:`f(w - \eta G) - f(w) = -\eta\langle\nabla f(w), G\rangle + \frac{\eta^2}2G^\top HG` for each row of
    G (exact on the quadratic, without the rounding of a difference of two values of f near its minimum)."""
    H = _fH(task)
    g = task.grad(torch.as_tensor(w, dtype=torch.float64).unsqueeze(0))[0]
    return -eta * (G @ g) + eta ** 2 / 2 * (H * G * G).sum(-1)


ROUNDING = 1e-12    # a state whose ||grad f||^2 is below this fraction of its run's initial value is at rounding level


def derivation_i_lines(task, w, *, p: float, eta: float) -> dict:
    r"""The lines of the document's derivation (i) at state w, as numbers (the expectation over the round's
    participation, closed form): "exact" :math:`\mathbb E f(w_{t+1}) - f(w_t)`; "smooth" (line 1, the
    smoothness bound :math:`-\eta\langle\nabla f,\mathbb EG\rangle + \frac{\eta^2L}2\mathbb E\|G\|^2`); "variance"
    (line 4: :math:`\mathbb E\|G\|^2 = \|\nabla f\|^2 + \frac1{n^2}(\frac1p-1)\sum_i\|\nabla f_i\|^2`, equal to
    line 1); "split" (line 6: :math:`\|a+b\|^2 \le 2\|a\|^2 + 2\|b\|^2` with :math:`\sigma_G^2`); "final"
    :math:`-\frac\eta2\|\nabla f\|^2 + \frac{\eta^2Lc}2\sigma_G^2`; with "EG2" the closed-form
    :math:`\mathbb E\|G\|^2` and "condition" :math:`\eta L(1+c)\le1`."""
    n, L, s2 = task.n, task.L, task.sigma_G2
    w = torch.as_tensor(w, dtype=torch.float64)
    gi = task.client_grads(w.unsqueeze(0))[0]                       # (n, d)
    g = gi.mean(0)
    H = _fH(task)
    g2 = float(g @ g)
    extra = (1 / p - 1) / n ** 2
    EG2 = g2 + extra * float((gi * gi).sum())
    EGHG = float((H * g * g).sum()) + extra * float((H * gi * gi).sum())
    c = 2 / n * (1 / p - 1)
    smooth = -eta * g2 + eta ** 2 * L / 2 * EG2
    return {"exact": -eta * g2 + eta ** 2 / 2 * EGHG, "smooth": smooth, "variance": smooth,
            "split": -eta * g2 + eta ** 2 * L / 2 * (g2 + c * s2 + c * g2),
            "final": -eta / 2 * g2 + eta ** 2 * L * c / 2 * s2, "EG2": EG2, "condition": eta * L * (1 + c) <= 1,
            "grad2": g2}


def _is_draws(task, w, *, p: float, eta: float, draws: int, seed: int):
    """Monte Carlo of one round of FedAvg with importance sampling from w: (f(w+) - f(w), ||G||^2) per draw."""
    n = task.n
    w = torch.as_tensor(w, dtype=torch.float64)
    gi = task.client_grads(w.unsqueeze(0))[0]
    g = torch.Generator().manual_seed(int(rng(seed, "one-step").integers(2 ** 62)))
    act = (torch.rand(draws, n, generator=g, dtype=torch.float64) < p).double()
    G = act @ gi / (n * p)
    return _step_change(task, w, G, eta).numpy(), (G * G).sum(-1).numpy()


def derivation_i_table(task, *, ps, etas_L, rounds, draws: int, seed: int = 0) -> pd.DataFrame:
    r"""Per (p, :math:`\eta L`) and state (FedAvg-IS run from 0 read at `rounds`, and the optimum): the lines of
    :func:`derivation_i_lines`, the Monte Carlo mean and s.e. of :math:`f(w_{t+1}) - f(w_t)` and of
    :math:`\|G\|^2`, z against the final line and the slack ratio (final - E) / |E| (0: tight)."""
    rows = []
    for p in ps:
        for eL in etas_L:
            eta = eL / task.L
            states = {f"round {t}": w for t, (w, _) in
                      trajectory(task, aggregate.KnownP(), p=p, eta=eta, rounds=rounds, seed=seed).items()}
            states["optimum"] = task.problem.w_star
            for k, (name, w) in enumerate(states.items()):
                ln = derivation_i_lines(task, w, p=p, eta=eta)
                dv, g2 = _is_draws(task, w, p=p, eta=eta, draws=draws, seed=seed + 1000 * k + 1)
                m, se = float(dv.mean()), float(dv.std(ddof=1) / math.sqrt(draws))
                rows.append(dict(p=p, eta_L=eL, state=name, mc=m, mc_se=se, EG2_mc=float(g2.mean()),
                                 EG2_se=float(g2.std(ddof=1) / math.sqrt(draws)), **ln,
                                 z=(m - ln["final"]) / se if se > 0 else -math.inf,
                                 slack=(ln["final"] - ln["exact"]) / abs(ln["exact"])))
    return pd.DataFrame(rows)


def derivation_i_checks(tab: pd.DataFrame) -> list:
    r"""Derivation (i): per (p, :math:`\eta L`) with the document's step condition, the final one-step bound at
    the tightest state (Monte Carlo mean <= bound + Z s.e.); the variance identity (line 4) against the Monte
    Carlo mean of :math:`\|G\|^2` (|z| <= 4 everywhere); the document's lines ordered as the derivation says
    (exact numbers)."""
    out = []
    cond = tab[tab["condition"]]
    for (p, eL), g in cond.groupby(["p", "eta_L"]):
        r = g.loc[g["z"].idxmax()]
        out.append(claims.mc_bound(
            f"p={p}, eta L={eL:g}: E f(w_(t+1)) - f(w_t) <= -(eta/2)||grad f||^2 + (eta^2 L c/2) sigma_G^2 at all "
            f"{len(g)} states (tightest: {r['state']}; slack ratio there {r['slack']:.3g}, "
            f"median {g['slack'].median():.3g})",
            r["mc"], r["final"], r["mc_se"], z=Z))
    zv = float(((tab["EG2_mc"] - tab["EG2"]) / tab["EG2_se"]).abs().max())
    out.append(claims.holds(f"line 4: E||G_t||^2 = ||grad f||^2 + (1/n^2)(1/p - 1) sum_i ||grad f_i||^2 (Monte Carlo, "
                            f"max |z| = {zv:.2f} over {len(tab)} states)", zv <= 4,
                            "every |Monte Carlo - formula| / s.e. <= 4", ours=zv, reference=4.0))
    order = bool(((tab["exact"] <= tab["smooth"] + 1e-12) & (tab["smooth"] <= tab["split"] + 1e-12)).all()
                 and ((cond["split"] <= cond["final"] + 1e-12).all()))
    out.append(claims.holds("the chain: exact <= smoothness bound = variance line <= split line <= final line "
                            "(the last under eta L (1 + c) <= 1), at every state", order,
                            "exact inequalities between the lines"))
    return out


# ================================================================================================
# the general analysis of MIFA and U-MIFA
# ================================================================================================
def table_states(task, *, p: float, eta: float, rounds, seeds) -> list[dict]:
    r"""States (w_t, :math:`G_{t-1}`) from MIFA runs (the stored table) and from SAGA runs (U-MIFA with SAGA memory:
    its stored raw updates are the :math:`G_{t-1}` of the SAGA-form estimate), read at `rounds`, for each seed; a
    state whose :math:`\|\nabla f\|^2` has fallen to rounding level (below :data:`ROUNDING` times its value at 0) is
    left out: there the one-step change is rounding noise."""
    out = []
    g0 = float((task.grad(torch.zeros(1, task.dim, dtype=torch.float64)) ** 2).sum())
    for src, rule in (("MIFA run", aggregate.MIFA()), ("SAGA run", aggregate.UMIFA("saga"))):
        for s in seeds:
            for t, (w, st) in trajectory(task, rule, p=p, eta=eta, rounds=[t for t in rounds if t > 0], seed=s).items():
                if float((task.grad(w.unsqueeze(0)) ** 2).sum()) > ROUNDING * g0:     # not at rounding level
                    out.append(dict(source=src, seed=s, round=t, w=w, table=st.table[0].clone()))
    return out


def general_table(task, *, ps, etas_L, rounds, seeds, draws: int, seed: int = 0) -> pd.DataFrame:
    r"""Per (p, :math:`\eta L`), state (:func:`table_states`) and rule (MIFA: :math:`G^{(i)}\leftarrow\nabla f_i` if
    active; U-MIFA: :math:`G^{(i)}\leftarrow\frac1p\nabla f_i - (\frac1p-1)G^{(i)}_{t-1}` if active, whose mean is
    also the SAGA-form estimate): Monte Carlo over the round's participation of
    D = :math:`f(w_{t+1}) - f(w_t) + \frac\eta2\|\nabla f\|^2 - \frac\eta2\|\nabla f - G_t\|^2` (the general one-step
    bound: mean D <= 0), of :math:`f(w_{t+1}) - f(w_t)` against the bound with the document's expression of the error
    term plugged in (MIFA: :math:`\frac{1-p}n\sum_i\|\nabla f_i - G_{t-1}^{(i)}\|^2`; U-MIFA:
    :math:`\frac{1-p}{n^2p}\sum_i\|\cdot\|^2`), and the slack ratios."""
    rows = []
    n = task.n
    for p in ps:
        for eL in etas_L:
            eta = eL / task.L
            for k, stt in enumerate(table_states(task, p=p, eta=eta, rounds=rounds, seeds=seeds)):
                w, tab = stt["w"], stt["table"]
                gi = task.client_grads(w.unsqueeze(0))[0]
                grad = gi.mean(0)
                g2 = float(grad @ grad)
                base = float(((gi - tab) ** 2).sum())
                gen = torch.Generator().manual_seed(int(rng(seed + k, f"general-{p}-{eL}").integers(2 ** 62)))
                act = torch.rand(draws, n, generator=gen, dtype=torch.float64) < p
                mem, dl = tab.expand(draws, -1, -1), gi.expand(draws, -1, -1)
                for name, rule, expr in (("MIFA", aggregate.MIFA(), (1 - p) / n * base),
                                         ("U-MIFA", aggregate.UMIFA("literal"), (1 - p) / (n * n * p) * base)):
                    G, _ = apply_rule(rule, mem, dl, act, p)
                    dfv = _step_change(task, w, G, eta).numpy()
                    err = ((grad - G) ** 2).sum(-1).numpy()
                    D = dfv + eta / 2 * g2 - eta / 2 * err
                    rhs = -eta / 2 * g2 + eta / 2 * expr
                    sq = math.sqrt(draws)
                    rows.append(dict(p=p, eta_L=eL, source=stt["source"], seed=stt["seed"], round=stt["round"],
                                     rule=name, D=float(D.mean()), D_se=float(D.std(ddof=1) / sq), df=float(dfv.mean()),
                                     df_se=float(dfv.std(ddof=1) / sq), err=float(err.mean()), expr=expr, rhs_expr=rhs,
                                     rhs_general=float(-eta / 2 * g2 + eta / 2 * err.mean()),
                                     z_general=float(D.mean() / (D.std(ddof=1) / sq)) if D.std() > 0 else -math.inf,
                                     z_expr=(float((dfv.mean() - rhs) / (dfv.std(ddof=1) / sq))
                                             if dfv.std() > 0 else -math.inf)))
    df = pd.DataFrame(rows)
    df["slack_general"] = -df["D"] / df["df"].abs()
    df["slack_expr"] = (df["rhs_expr"] - df["df"]) / df["df"].abs()
    return df


def general_checks(tab: pd.DataFrame) -> list:
    r"""The general analysis: per (rule, p, :math:`\eta L \le 1`), at the tightest state, (a) the one-step bound
    with :math:`\mathbb E\|\nabla f - G_t\|^2` (mean D <= Z s.e.), (b) the same with the document's expression of the
    error term plugged in."""
    out = []
    for (rule, p, eL), g in tab[tab["eta_L"] <= 1 + 1e-12].groupby(["rule", "p", "eta_L"]):
        r = g.loc[g["z_general"].idxmax()]
        out.append(claims.mc_bound(
            f"{rule}, p={p}, eta L={eL:g}: E f(w_(t+1)) - f(w_t) <= -(eta/2)||grad f||^2 + (eta/2) E||grad f - G_t||^2 "
            f"at all {len(g)} states (tightest: {r['source']}, round {int(r['round'])}; median slack ratio "
            f"{g['slack_general'].median():.3g})", r["D"], 0.0, r["D_se"], z=Z))
        r = g.loc[g["z_expr"].idxmax()]
        out.append(claims.mc_bound(
            f"{rule}, p={p}, eta L={eL:g}: the same bound with the document's expression of E||grad f - G_t||^2 at all "
            f"{len(g)} states (tightest: {r['source']}, round {int(r['round'])}; median slack ratio "
            f"{g['slack_expr'].median():.3g})", r["df"], r["rhs_expr"], r["df_se"], z=Z))
    return out


# ================================================================================================
# FedGD and FedPGD: eta = O(1/L)
# ================================================================================================
def gd_step_sweep(task, method: str, *, eta_L, seeds, rounds: int, b: int = 1, tol: float = 1e-3) -> pd.DataFrame:
    r"""FedGD (every client every round) or FedPGD (b clients uniformly without replacement per round) at every
    step eta = eta_L / L and seed, from w_0 = 0, through ``flkit.papers.mifa.methods.simulate``. Per run:
    "diverged" (1 when the run left 1e6 x its initial metric), "final_ratio" (final / initial
    :math:`\|\nabla f\|^2`), "converged" (FedGD: final ratio <= tol; FedPGD, whose constant step leaves a floor:
    not diverged and the mean of :math:`\|\nabla f\|^2` over the last quarter below its initial value)."""
    if method not in ("fedgd", "fedpgd"):
        raise ValueError(f"method must be 'fedgd' or 'fedpgd', got {method!r}")
    eta_L, seeds = settings.positive(eta_L, "eta_L"), settings.seeds(seeds)
    settings.positive_int(rounds, "rounds", 4)
    runs = pd.DataFrame([(int(s), float(e)) for e in eta_L for s in seeds], columns=["seed", "eta_L"])
    res = simulate(task, [method], seeds=runs["seed"].tolist(), eta=runs["eta_L"].to_numpy() / task.L,
               p=b / task.n, b=b, rounds=rounds, every=1)
    g = res.values[method]["grad_norm2"]                       # (rounds + 1, R), inf after divergence
    div = res.diverged[method] >= 0
    ratio = g[-1] / g[0]
    tail = g[3 * rounds // 4:].mean(0)
    conv = (ratio <= tol) if method == "fedgd" else (~div & np.isfinite(tail) & (tail < g[0]))
    frames = [runs.assign(method=method, round=rounds, metric=k, value=v) for k, v in
              (("diverged", div.astype(float)), ("final_ratio", np.where(np.isfinite(ratio), ratio, -1.0)),
               ("converged", (conv & ~div).astype(float)))]
    return pd.concat(frames, ignore_index=True).assign(n=task.n)


def gd_step_checks(emax: pd.DataFrame, grid) -> dict:
    r"""The tables' :math:`\eta = \mathcal O(1/L)` for FedGD and FedPGD. `emax`: per (kind, method, n) the largest
    grid :math:`\eta L` at which every seed converges. Per table (convex kinds -> the convex table, non-convex ->
    the non-convex one) and method: (a) every (problem, n) converges at the largest grid step with
    :math:`\eta L \le 1` (the bound with constant 1); (b) the largest converging step does not shrink with n: the
    fitted log-log slope in n is at least -0.15 (one-sided: a bound O(1/L) that does not depend on n)."""
    grid = np.sort(np.asarray(grid, dtype=float))
    at_one = grid[grid <= 1 + 1e-12].max()
    rows = {"fedgd": "FedGD", "fedpgd": "FedPGD"}
    out = {}
    for (kind, m), g in emax.groupby(level=["kind", "method"]):
        base = kind.removesuffix(HETERO)
        tab = {"convex": "Convex table", "nonconvex": "Non-convex table"}[base]
        fam = "heterogeneous client Hessians" if kind.endswith(HETERO) else "identical client Hessians"
        v = g.droplevel(["kind", "method"])
        ns, y = v.index.to_numpy(dtype=float), v.to_numpy(dtype=float)
        ok = int((y >= at_one - 1e-12).sum())
        item = f"{tab}: {rows[m]}, eta bound"
        out.setdefault(item, []).append(claims.holds(
            f"{base} ({fam}): {rows[m]} converges (every seed) at eta L = {at_one:.3g}, the largest grid step <= 1, at "
            f"every n ({ok} of {len(y)})", ok == len(y), "converges at the bound's step (constant 1) at every n",
            ours=ok, reference=len(y)))
        s = fit_slope(ns, y)[0]
        out[item].append(claims.bound(
            f"{base} ({fam}): {rows[m]}'s largest converging eta L ({np.nanmin(y):.3g} to {np.nanmax(y):.3g}) does not "
            f"shrink with n: fitted slope {s:.2f}, not below 0 - {SLOPE_TOL} (O(1/L): no n in the bound)",
            s, 0.0, tol=SLOPE_TOL, side="lower"))
    return out


def zerosarah_sqrt_checks(slopes: pd.DataFrame, eps_exponent: float | None = None, eps_n: int | None = None) -> dict:
    r"""ZeroSARAH with :math:`b = \lceil\sqrt n\rceil` clients per round (the regime of its :math:`\sqrt n` rate):
    `slopes` per problem kind: the measured log-log slope of the cost (client gradients) in n and its bootstrap
    s.e.; the table's :math:`\mathcal O(n^{1/2}L/\epsilon)` is an upper bound: agrees when the slope is at most
    1/2 + 0.15; with `eps_exponent` (the measured exponent a of cost ~ (1/eps)^a at n = `eps_n`), the table's 1/eps
    is tested the same way (a <= 1 + 0.15)."""
    out = []
    for kind, r in slopes.iterrows():
        fam = "heterogeneous client Hessians" if kind.endswith(HETERO) else "identical client Hessians"
        out.append(claims.bound(
            f"{kind.removesuffix(HETERO)} ({fam}), ZeroSarah with b = ceil(sqrt n): measured slope of the cost in n "
            f"{r['slope']:.2f} (bootstrap s.e. {r['se']:.2f}), not above the table's 0.5 + {SLOPE_TOL} (an O(.) bound, "
            "tested one-sided)", r["slope"], 0.5, tol=SLOPE_TOL, side="upper"))
    if eps_exponent is not None:
        out.append(claims.bound(
            f"nonconvex (identical client Hessians), ZeroSarah with b = ceil(sqrt n), n = {eps_n}: the cost to "
            f"min_t ||grad f(x_t)||^2 <= eps grows like (1/eps)^{eps_exponent:.2f}, not faster than the table's 1/eps "
            f"(+{SLOPE_TOL})", eps_exponent, 1.0, tol=SLOPE_TOL, side="upper"))
    return {"Non-convex table: ZeroSarah, complexity": out}


def best_cost(piv: pd.DataFrame) -> pd.DataFrame:
    """Per n: the step size whose median cost over the seeds is the smallest, that cost and the median rounds.
    `piv`: one row per (n, eta_L, seed) with columns cost and rounds (inf: target not reached)."""
    med = piv.groupby(["n", "eta_L"])[["cost", "rounds"]].median().reset_index()
    return med.loc[med.groupby("n")["cost"].idxmin()].set_index("n")


def cost_slope(piv: pd.DataFrame, *, boot: int = 1000, seed: int = 0) -> tuple[float, float]:
    """Log-log slope of :func:`best_cost`'s cost against n, and its standard error by the bootstrap over seeds (the
    same resampled seeds at every n and step; the best step chosen again in each resample)."""
    b = best_cost(piv)
    ok = np.isfinite(b["cost"].to_numpy())
    slope = fit_slope(b.index.to_numpy(dtype=float)[ok], b["cost"].to_numpy()[ok])[0]
    seeds = np.sort(piv["seed"].unique())
    g = rng(seed, "bootstrap")
    cube = piv.set_index(["n", "eta_L", "seed"])["cost"].unstack("seed")[seeds]       # (n, eta_L) x seeds
    out = []
    for _ in range(boot):
        cols = g.integers(0, len(seeds), len(seeds))
        med = pd.Series(np.median(cube.to_numpy()[:, cols], axis=1), index=cube.index)
        bc = med.groupby(level="n").min()
        okb = np.isfinite(bc.to_numpy())
        out.append(fit_slope(bc.index.to_numpy(dtype=float)[okb], bc.to_numpy()[okb])[0])
    return float(slope), float(np.nanstd(out, ddof=1))
