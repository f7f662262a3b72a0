r"""Fed-CVaR-Avg (document 003, Algorithm 1) under a random access model (RAM).

Symbols of the document
-----------------------
K            users, i = 1..K; each holds a private dataset D_i with N_i samples.
rho_i        RAM probabilities (sum 1): each round the RAM relays exactly one user, I ~ rho, i.i.d.
             across rounds. Neither the server nor the users know rho.
f_i(theta)   user i's empirical loss (mean cross-entropy over D_i).
alpha        CVaR level ("confidence level a"), alpha in (0, 1]; alpha = 1 is risk-neutral.
gamma        trade-off between CVaR and expectation, gamma in [0, 1]; gamma = 1 is risk-neutral.
t            CVaR threshold (the value-at-risk variable of (3)), trained jointly with theta; t^1 = 0.
eta_theta,   step sizes of theta and t (plain SGD, a step after every minibatch).
eta_t
H            local epochs per round; B minibatch size; T rounds.

The local objective (6) of user i is

    G_i(theta, t) = (1 - gamma) [ t + (1/alpha) [f_i(theta) - t]_+ ] + gamma f_i(theta),

estimated on a minibatch b by replacing f_i with the batch-mean loss F_b(theta) (as the authors' code
does: the risk is over *users'* losses, the batch mean is the user-loss estimate). Its (sub)gradients,
with the convention 1[F_b > t] (PyTorch's relu'(0) = 0), are

    grad_theta G = ((1 - gamma)/alpha * 1[F_b > t] + gamma) grad_theta F_b,
    d G / d t    = (1 - gamma) (1 - 1[F_b > t] / alpha).

Algorithm 1 (FED-CVaR-AVG): every round n the RAM relays the (theta, t) of one user; the server
broadcasts it; every user starts from it, runs H epochs of joint SGD on G_i and forwards the result
to the RAM. Since the RAM discards all but one user's result and every user starts from the same
broadcast, the global model obeys

    (theta^{n+1}, t^{n+1}) = LocalSGD_{I_n}(theta^n, t^n),    I_n ~ rho i.i.d.,

i.e. one SGD trajectory whose data source switches each round. We simulate exactly that: only the
relayed user trains (the document's all-users loop, and the authors' MNIST script, train the K - 1
others too and throw their results away; the FashionMNIST script already trains only the selected
user). With alpha = 1, t stays at t^1 = 0 < F_b (a cross-entropy is positive), so the weight of
grad F_b is exactly 1 and Algorithm 1 *is* FedAvg with one relayed user; the same holds for gamma = 1.

Vectorization across runs
-------------------------
M runs (seeds x grid cells) are M stacked models trained in one computation. In each round every
run draws its own relayed user from its own RAM stream and its minibatches from that user's data
only. Users differ in size, so runs differ in their number of steps per round: the batch index
tensor is (M, S, B) with S the largest step count of the round; each run's valid steps come first
and later steps are masked (the model is left unchanged). A last, partial minibatch of an epoch is
padded with a dummy sample whose label is ignored by the loss, so the batch mean is over its real
samples only (the authors' DataLoader keeps partial batches; in the 30-user 2-D example a user has
fewer samples than one batch).

Randomness: one stream per (seed, concern) from `flkit.seeding`: "data" (split), "participation"
(the RAM draws, through `flkit.participation.random_access_indices`), "init" (model
initialisation) and "batch/<round>" (the minibatch order of a round), so a run's numbers do not
depend on which other runs share its batch, and a run resumed from a checkpoint continues exactly.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from flkit.seeding import resolve_device, rng, torch_gen

__all__ = [
    # the objective
    "G", "grad_G", "cvar_loss", "objective",
    # Algorithm 1
    "State", "init", "round", "Users", "make_batches", "FastLocalSGD",
    # RAM distributions
    "RHO_FIG2_K3", "rho_fig2_k30", "rho_table1", "TABLE1_RARE_RHO", "rho_for",
    # experiments
    "PAPER", "PROFILES", "settings", "run_configs", "batch_group", "prepare", "run_batch", "Deadline",
    "sweep", "store_for", "planned_steps",
    # reading the results
    "table1_reference", "table1_ours", "table1_compare", "table1_wide", "final_accuracies",
    "confirm_table1", "confirm_mnist", "confirm_fig2", "fig2_accuracy", "split_summary",
    # figures
    "fig2", "mnist_figure", "curve_panel", "decision_regions", "titled",
]

IGNORE = -100  # label of the padding sample (F.cross_entropy's default ignore_index)


# ================================================================================================
# The objective (6) and its gradient
# ================================================================================================
def G(f, t, alpha, gamma):
    """G_i(theta, t) = (1 - gamma) [t + (1/alpha) [f - t]_+] + gamma f, elementwise (floats or tensors)."""
    relu = torch.relu(f - t) if isinstance(f, torch.Tensor) or isinstance(t, torch.Tensor) else max(f - t, 0.0)
    return (1 - gamma) * (t + relu / alpha) + gamma * f


def grad_G(f, t, alpha, gamma):
    """(dG/df, dG/dt) = ((1 - gamma)/alpha 1[f > t] + gamma, (1 - gamma)(1 - 1[f > t]/alpha)).

    Floats in, floats out (float64); tensors in, tensors out (the dtype of f).
    The coefficient of grad F_b is formed as (1-gamma)/alpha + gamma in float64 and only then cast, so
    that alpha = 1 (or gamma = 1) gives exactly 1.0 and the step is bit-for-bit FedAvg's."""
    if not isinstance(f, torch.Tensor):
        above = f > t
        return ((1 - gamma) / alpha + gamma if above else gamma,
                (1 - gamma) * (1 - 1 / alpha) if above else (1 - gamma))
    alpha = torch.as_tensor(alpha, dtype=torch.float64, device=f.device)
    gamma = torch.as_tensor(gamma, dtype=torch.float64, device=f.device)
    above = f.detach() > t.detach() if isinstance(t, torch.Tensor) else f.detach() > t
    c_on, c_off = (1 - gamma) / alpha + gamma, gamma
    g_on, g_off = (1 - gamma) * (1 - 1 / alpha), (1 - gamma)
    return (torch.where(above, c_on, c_off).to(f.dtype), torch.where(above, g_on, g_off).to(f.dtype))


def cvar_loss(f: torch.Tensor, t: torch.Tensor, alpha, gamma) -> torch.Tensor:
    """A scalar whose value is G(f, t) and whose gradients are exactly `grad_G` (times grad f for theta).

    value = G.detach() + c (f - f.detach()) + g_t (t - t.detach()), c and g_t detached. Autograd on the
    literal formula of G gives the same gradients up to float rounding (tests/test_cvar.py checks both);
    this form makes alpha = 1 or gamma = 1 reproduce FedAvg bit for bit."""
    c, g_t = grad_G(f, t, alpha, gamma)
    value = G(f.detach(), t.detach(), alpha, gamma)
    return value + c * (f - f.detach()) + g_t * (t - t.detach())


# ================================================================================================
# RAM distributions
# ================================================================================================
RHO_FIG2_K3 = (0.5, 0.4, 0.1)               # Fig. 2(a), 2(b) (Sec. 3.1 of the document)
TABLE1_RARE_RHO = (0.0107, 0.0078, 0.0053)  # Table 1 caption: the three least available users


def rho_fig2_k30() -> np.ndarray:
    """RAM distribution of Fig. 2(c), K = 30, sorted descending.

    The authors hard-code a vector (0.0735 ... 0.0053, six rare users totalling about 0.075) that is
    not fully listed (configs.md 2.4); the document only shows it as a bar plot. We construct one with
    the same ends and the same rare mass: the 24 frequent users rho_j = a + (0.0735 - a)(1 - j/23)^2,
    j = 0..23, with a chosen so that they total 0.925; the 6 rare users equally spaced from 0.0197
    down to 0.0053 (total 0.075). Exact sum 1, strictly the rare six below every frequent user."""
    j = np.arange(24)
    x2 = (1 - j / 23) ** 2
    top = 0.0735
    a = (0.925 - top * x2.sum()) / (24 - x2.sum())
    frequent = a + (top - a) * x2
    rare = np.linspace(0.0197, 0.0053, 6)
    rho = np.concatenate([frequent, rare])
    return rho / rho.sum()


def rho_table1(seed: int = 0, num_users: int = 30, rare=TABLE1_RARE_RHO, max_draws: int = 1000) -> np.ndarray:
    """RAM distribution of Table 1 (also used for Figs. 3-4, for which the document gives none).

    The last three users get the caption's probabilities 0.0107, 0.0078, 0.0053. The others are drawn as
    the authors draw theirs (configs.md 2.1: `rand(K)` normalized, sorted descending), from
    rng(seed, "ram"): K uniforms, sorted descending, the largest K - 3 kept and rescaled to total
    1 - 0.0238, so that all K sum to 1. Draws in which a kept user would fall below 0.0107 are
    rejected (the caption's three are the least available users) and the next draw of the same stream
    is taken (about one draw in four is accepted; seed 0: the fifth)."""
    rare = np.asarray(rare, dtype=float)
    k = len(rare)
    g = rng(seed, "ram")
    for _ in range(max_draws):
        u = np.sort(g.random(num_users))[::-1][: num_users - k]
        frequent = u / u.sum() * (1.0 - rare.sum())
        if frequent[-1] >= rare.max():
            return np.concatenate([frequent, rare])
    raise RuntimeError(f"no accepted draw in {max_draws} tries")


# ================================================================================================
# Algorithm 1: state, init, one round
# ================================================================================================
@dataclass
class State:
    """Server state of M independent runs of Algorithm 1.

    params: the global (theta, t) of every run, a dict name -> Tensor with leading axis M: the model's
        parameters (theta), "t" (M,) the CVaR threshold, and the per-run constants "alpha" and "gamma"
        (M,), carried as extras with step size 0 so that `flkit.engine.local_train` hands each model its
        own alpha and gamma (they never change).
    round: number of rounds done (n); the params are the model broadcast at the start of round n + 1.
    """

    params: dict[str, torch.Tensor]
    round: int = 0

    @property
    def t(self) -> torch.Tensor:
        return self.params["t"]

    @property
    def theta(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.params.items() if k not in EXTRAS}


EXTRAS = ("t", "alpha", "gamma")


def init(theta: Mapping[str, torch.Tensor], alpha, gamma, t0: float = 0.0) -> State:
    """State at n = 0: theta^1 stacked over M runs (from `flkit.engine.stack`), t^1 = t0 (0 in the
    document's code), and each run's (alpha, gamma) (floats, or sequences of length M)."""
    first = next(iter(theta.values()))
    M, dev = first.shape[0], first.device

    def col(v, name):
        v = torch.as_tensor(v, dtype=first.dtype, device=dev).reshape(-1)
        v = v.expand(M).clone() if v.numel() == 1 else v
        if v.shape != (M,):
            raise ValueError(f"{name} must be a float or have one value per run ({M}), got {tuple(v.shape)}")
        return v

    a, g = col(alpha, "alpha"), col(gamma, "gamma")
    if not bool(((a > 0) & (a <= 1)).all()):
        raise ValueError(f"alpha must be in (0, 1], got {a.tolist()}")
    if not bool(((g >= 0) & (g <= 1)).all()):
        raise ValueError(f"gamma must be in [0, 1], got {g.tolist()}")
    params = {k: v.detach().clone() for k, v in theta.items()}
    params.update(t=torch.full((M,), float(t0), dtype=first.dtype, device=dev), alpha=a, gamma=g)
    return State(params, 0)


def objective(logits: torch.Tensor, y: torch.Tensor, p: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Minibatch surrogate of G_i for one model (the `objective` of `flkit.engine.local_train`).

    f = F_b(theta), the batch-mean cross-entropy over the real samples (padding ignored). Returns
    c f + g_t t with c = (1-gamma)/alpha 1[f > t] + gamma and g_t = (1-gamma)(1 - 1[f > t]/alpha)
    held constant, whose gradients in (theta, t) are exactly those of G_i(theta, t) (see `grad_G`;
    its value is not G, which training never needs; `cvar_loss` has both). Kept to a few tensor
    operations because the engine vmaps it at every local step. In float32, (1-gamma)/1 + gamma
    rounds to exactly 1 for every gamma in [0, 1], so alpha = 1 (or gamma = 1) is FedAvg bit for bit."""
    from flkit.engine import cross_entropy
    f = cross_entropy(logits, y)
    t, a, g = p["t"], p["alpha"].detach(), p["gamma"].detach()
    above = f.detach() > t.detach()
    c = torch.where(above, (1 - g) / a + g, g)
    g_t = torch.where(above, (1 - g) * (1 - 1 / a), 1 - g)
    return c * f + g_t * t


@dataclass
class Users:
    """The K users' datasets of each of M runs, as padded index pools into a shared training set.

    pool: (M, K, N_max) LongTensor of sample indices (rows padded with their first index);
    size: (M, K) LongTensor, N_i of each user in each run."""

    pool: torch.Tensor
    size: torch.Tensor

    @classmethod
    def from_partitions(cls, partitions: Sequence, device=None) -> "Users":
        """One `flkit.partition.Partition` per run (all with the same number of users K)."""
        K = {p.num_clients for p in partitions}
        if len(K) != 1:
            raise ValueError(f"all runs need the same number of users, got {sorted(K)}")
        width = max(max(len(i) for i in p.indices) for p in partitions)
        pool = torch.zeros(len(partitions), K.pop(), width, dtype=torch.long)
        size = torch.zeros(pool.shape[:2], dtype=torch.long)
        for m, p in enumerate(partitions):
            for i, idx in enumerate(p.indices):
                if len(idx) == 0:
                    raise ValueError(f"run {m}: user {i} holds no data")
                idx = torch.as_tensor(np.asarray(idx), dtype=torch.long)
                pool[m, i, : len(idx)], pool[m, i, len(idx):] = idx, idx[0]
                size[m, i] = len(idx)
        return cls(pool.to(device), size.to(device))

    def relayed(self, selected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices (M, N_max), sizes (M,)) of the user each run relays."""
        m = torch.arange(self.pool.shape[0], device=self.pool.device)
        return self.pool[m, selected], self.size[m, selected]


def make_batches(pool: torch.Tensor, n: torch.Tensor, epochs: int, batch_size: int,
                 generators: Sequence[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
    """Minibatches of H = `epochs` passes over each run's relayed user (a fresh permutation per epoch).

    pool (M, N_max), n (M,): each run's user indices and size. Run m draws its permutations from its own
    generator only (float64 keys of width n[m], argsort), so its batches do not depend on the other
    runs. Returns batches (M, S, B) and steps (M,) = H ceil(n/B), with `flkit.engine.epoch_batches`'
    ``last="pad"`` layout: a short last batch of an epoch is padded with -1 (ignored by the loss),
    steps past a run's own are filler (masked by the engine)."""
    M, W = pool.shape
    dev, B, H = pool.device, int(batch_size), int(epochs)
    keys = torch.full((M, H, W), 2.0, dtype=torch.float64, device=dev)
    for m, (g, nm) in enumerate(zip(generators, n.tolist())):  # one device sync for all runs
        keys[m, :, :nm] = torch.rand(H, nm, generator=g, device=dev, dtype=torch.float64)
    perm = keys.argsort(dim=-1)                                       # (M, H, W)
    spe = (n + B - 1) // B                                            # steps per epoch (M,)
    spe_max = int(spe.max())
    j = torch.arange(spe_max * B, device=dev)
    pos = perm.gather(-1, j.clamp(max=W - 1).expand(M, H, -1))        # (M, H, spe_max*B)
    ids = pool.gather(1, pos.reshape(M, -1)).view(M, H, spe_max * B)
    ids = ids.masked_fill(j >= n[:, None, None], -1).view(M, H, spe_max, B)
    steps = spe * H
    s = torch.arange(int(steps.max()), device=dev)
    per = spe.clamp(min=1)[:, None]
    mi = torch.arange(M, device=dev)[:, None]
    batches = ids[mi, (s // per).clamp(max=H - 1), s % per]          # (M, S, B)
    filler = pool[:, :1, None].expand_as(batches)
    batches = torch.where((s[None, :] >= steps[:, None])[..., None], filler, batches)
    return batches, steps


def round(state: State, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, users: Users,
          selected: torch.Tensor, *, lr_theta, lr_t, epochs: int, batch_size: int,
          generators: Sequence[torch.Generator], vectorized: bool | str = True) -> tuple[State, dict]:
    """One round of Algorithm 1 for M runs.

    selected (M,): the user I_n the RAM relays in each run. Every run's global (theta, t) is trained by
    H epochs of joint SGD on G_{I_n} (steps eta_theta = lr_theta, eta_t = lr_t; floats or (M,) tensors)
    over that user's data, and becomes the new global model. `generators`: one torch.Generator per run
    (on x's device) for this round's minibatch order.

    Returns the new state and diagnostics: {"user": selected, "t": t^{n+1}, "steps": local steps}."""
    from flkit.engine import local_train
    pool, n = users.relayed(selected)
    batches, steps = make_batches(pool, n, epochs, batch_size, generators)
    lr = {"default": lr_theta, "t": lr_t, "alpha": 0.0, "gamma": 0.0}
    params, _ = local_train(model, state.params, x, y, batches, lr=lr, objective=objective, steps=steps,
                            vectorized=vectorized)
    return State(params, state.round + 1), {"user": selected, "t": params["t"], "steps": steps}


# ================================================================================================
# Experiments of the document: settings (profiles) and run configurations
# ================================================================================================
FIG2_PANELS = {
    # Fig. 2(a): 3 users, one class each; 2(b): user 3 gets an extra (4th) class; 2(c): 30 users, 3 classes.
    "a": dict(centers=[[1.0, 1.0], [2.0, 3.0], [2.3, 1.5]], test_frac=0.2, assignment=[[0], [1], [2]],
              rho="fig2-k3", rounds=4000),
    "b": dict(centers=[[1.0, 1.0], [2.0, 3.0], [3.0, 1.5], [2.0, 0.5]], test_frac=0.1,
              assignment=[[0], [1], [2, 3]], rho="fig2-k3", rounds=4000),
    "c": dict(centers=[[1.0, 1.0], [2.0, 3.0], [2.3, 1.5]], test_frac=0.2,
              assignment=[[0, 1]] * 24 + [[2]] * 6, rho="fig2-k30", rounds=25000),
}

# The document's setting of each experiment ("paper"), and what the other profiles change.
PAPER = {
    "synthetic_2d": dict(panels=["a", "b", "c"], rounds=None,  # None: each panel's own (4000, 4000, 25000)
                         n_per_class=1000, std=0.1, data_seed=11, model="cvar_2d", hidden=64,
                         epochs=10, batch_size=100, lr_theta=1e-3, lr_t=1e-3, gamma=0.1, alphas=[1.0, 0.1],
                         seeds=[0, 1, 2], eval_every=None, rho_seed=0, authors_model_seeds=[0]),
    "mnist": dict(dataset="mnist", settings=[0.9, 0.8], num_users=30, frequent_frac=0.9, model="cvar_mlp",
                  epochs=10, batch_size=128, lr_theta=1e-3, lr_t=1e-4, rounds=4000,
                  cells=[[0.3, 0.3]], seeds=[0, 1, 2, 3, 4], eval_every=10, t_every=1, rho_seed=0,
                  train_subset=None, test_subset=None),
    "fmnist": dict(dataset="fashion-mnist", settings=[0.8], num_users=30, frequent_frac=0.9, model="cvar_lenet",
                   epochs=20, batch_size=128, lr_theta=1e-2, lr_t=5e-4, rounds=6000,
                   gammas=[0.0, 0.1, 0.2, 0.3, 1.0], alphas=[1.0, 0.3, 0.2, 0.1], seeds=[0, 1, 2, 3, 4],
                   eval_every=100, t_every=10, rho_seed=0, train_subset=None, test_subset=None),
}
PROFILES = {
    "synthetic_2d": {"paper": {}, "reduced": dict(rounds=1000),
                     "smoke": dict(rounds=15, seeds=[0], epochs=2)},
    "mnist": {"paper": {}, "reduced": dict(rounds=1000, seeds=[0, 1, 2]),
              "smoke": dict(rounds=12, seeds=[0, 1], epochs=1, eval_every=3, train_subset=3000,
                            test_subset=1000, t_every=1)},
    "fmnist": {"paper": {}, "reduced": dict(rounds=1000, seeds=[0, 1, 2]),
               "smoke": dict(rounds=6, seeds=[0, 1], epochs=1, eval_every=3, train_subset=3000,
                             test_subset=1000, gammas=[0.0, 0.1, 1.0], alphas=[1.0, 0.1])},
}


def settings(experiment: str, profile: str = "smoke", **overrides) -> dict:
    """The settings of `experiment` ("synthetic_2d", "mnist", "fmnist") under `profile` ("smoke",
    "reduced", "paper"), with `overrides` (papermill parameters; None means "the profile's value")
    winning over the profile. Adds "label": "" when the result is the document's setting, else
    "REDUCED: <what differs from the document>" (or "SMOKE: ..." for the smoke profile), which every
    figure and table title must carry."""
    if experiment not in PAPER:
        raise ValueError(f"unknown experiment {experiment!r}; choose one of {sorted(PAPER)}")
    if profile not in PROFILES[experiment]:
        raise ValueError(f"unknown profile {profile!r} for {experiment}; choose one of {sorted(PROFILES[experiment])}")
    s = copy.deepcopy(PAPER[experiment])
    s.update(copy.deepcopy(PROFILES[experiment][profile]))
    unknown = sorted(k for k, v in overrides.items() if v is not None and k not in s)
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown} for {experiment}; known: {sorted(s)}")
    s.update({k: v for k, v in overrides.items() if v is not None})
    diff = [k for k in s if s[k] != PAPER[experiment][k]]
    what = ", ".join(f"{k}={_short(s[k])} (document: {_short(PAPER[experiment][k])})" for k in diff)
    s["label"] = "" if not diff else f"{'SMOKE' if profile == 'smoke' else 'REDUCED'}: {what}"
    s["experiment"], s["profile"] = experiment, profile
    return s


def _short(v) -> str:
    if v is None:
        return "full"
    if isinstance(v, list) and len(v) > 4 and all(isinstance(i, int) for i in v):
        return f"{len(v)} seeds"
    return str(v)


def rho_for(name: str, seed: int = 0) -> np.ndarray:
    """RAM distribution by name: "fig2-k3", "fig2-k30", "table1" (see `rho_table1`)."""
    if name == "fig2-k3":
        return np.asarray(RHO_FIG2_K3, dtype=float)
    if name == "fig2-k30":
        return rho_fig2_k30()
    if name == "table1":
        return rho_table1(seed)
    raise ValueError(f"unknown RAM distribution {name!r}")


def _method(alpha: float, gamma: float) -> str:
    return "fedavg" if alpha == 1 or gamma == 1 else "fed-cvar-avg"


def run_configs(s: Mapping) -> list[dict]:
    """One JSON-able config per run for the settings `s` (from `settings`). Risk-neutral cells
    (alpha = 1 or gamma = 1) are one run, stored as FedAvg with alpha = gamma = 1: Algorithm 1 is then
    exactly FedAvg (tests/test_cvar.py::test_reduces_to_fedavg), so the nine risk-neutral cells of
    Table 1 share that run."""
    exp = s["experiment"]
    common = dict(doc="003", experiment=exp, model=s["model"], epochs=s["epochs"], batch_size=s["batch_size"],
                  lr_theta=s["lr_theta"], lr_t=s["lr_t"], t0=0.0, code_version=1)
    out = []
    if exp == "synthetic_2d":
        for panel in s["panels"]:
            P = FIG2_PANELS[panel]
            rounds = s["rounds"] or P["rounds"]
            runs = [(seed, False) for seed in s["seeds"]] + [(seed, True) for seed in s["authors_model_seeds"]]
            for alpha in s["alphas"]:
                a, g = (1.0, 1.0) if _method(alpha, s["gamma"]) == "fedavg" else (alpha, s["gamma"])
                for seed, quirks in runs:
                    out.append(dict(common, panel=panel, centers=P["centers"], n_per_class=s["n_per_class"],
                                    std=s["std"], data_seed=s["data_seed"], test_frac=P["test_frac"],
                                    assignment=P["assignment"], hidden=s["hidden"], authors_model=quirks,
                                    rho=rho_for(P["rho"]).tolist(), rho_name=P["rho"], rounds=rounds,
                                    eval_every=s["eval_every"] or max(1, rounds // 200),
                                    method=_method(a, g), alpha=a, gamma=g, seed=seed, save_params=True))
        return out
    rho = rho_table1(s["rho_seed"]).tolist()
    if exp == "mnist":
        cells = [(1.0, 1.0)] + [tuple(c) for c in s["cells"]]
    else:
        cells = sorted({(1.0, 1.0) if _method(a, g) == "fedavg" else (a, g)
                        for g in s["gammas"] for a in s["alphas"]}, key=lambda c: (c != (1.0, 1.0), c[1], -c[0]))
    for r in s["settings"]:
        for a, g in cells:
            for seed in s["seeds"]:
                out.append(dict(common, dataset=s["dataset"], num_users=s["num_users"],
                                frequent_frac=s["frequent_frac"], pattern_frac=r, rho=rho,
                                rho_name=f"table1@{s['rho_seed']}", rounds=s["rounds"], eval_every=s["eval_every"],
                                t_every=s["t_every"],
                                train_subset=s["train_subset"], test_subset=s["test_subset"],
                                method=_method(a, g), alpha=a, gamma=g, seed=seed))
    return out


_VARY = {"alpha", "gamma", "method", "seed", "pattern_frac", "frequent_frac", "rho", "rho_name", "assignment",
         "save_params"}


def batch_group(config: Mapping) -> dict:
    """Fields that runs sharing one vectorized computation must agree on (same data, model, schedule)."""
    return {k: v for k, v in config.items() if k not in _VARY}


# ================================================================================================
# Data
# ================================================================================================
_DATA_CACHE: dict = {}


def _image_data(name: str, train_subset, test_subset, device) -> tuple:
    key = (name, train_subset, test_subset, str(device))
    if key not in _DATA_CACHE:
        from flkit import datasets
        d = datasets.load(name)
        xtr, ytr, xte, yte = d.x_train, d.y_train, d.x_test, d.y_test
        # Fixed subsets (smoke profile only): the same samples whatever the run's seed.
        if train_subset:
            keep = torch.as_tensor(np.sort(rng(0, "subset/train").permutation(len(ytr))[:train_subset]))
            xtr, ytr = xtr[keep], ytr[keep]
        if test_subset:
            keep = torch.as_tensor(np.sort(rng(0, "subset/test").permutation(len(yte))[:test_subset]))
            xte, yte = xte[keep], yte[keep]
        _DATA_CACHE.clear()
        _DATA_CACHE[key] = tuple(t.to(device) for t in (xtr, ytr, xte, yte)) + (len(d.classes),)
    return _DATA_CACHE[key]


def blobs_split(config: Mapping) -> tuple[torch.Tensor, ...]:
    """The 2-D data of a Fig. 2 panel: the authors' points (sklearn make_blobs, random_state=11,
    1000 per class, std 0.1) and their train/test split (train_test_split, random_state=11)."""
    from sklearn.model_selection import train_test_split

    from flkit.datasets import blobs_2d
    X, y = blobs_2d(config["centers"], config["n_per_class"], config["std"], config["data_seed"], sklearn_seed=True)
    xtr, xte, ytr, yte = train_test_split(X.numpy(), y.numpy(), test_size=config["test_frac"],
                                          random_state=config["data_seed"])
    return tuple(torch.as_tensor(a) for a in (xtr, ytr, xte, yte))


def prepare(configs: Sequence[Mapping], device) -> dict:
    """Shared data and each run's user split for a batch of runs (same `batch_group`)."""
    from flkit import partition
    c0 = configs[0]
    if c0["experiment"] == "synthetic_2d":
        xtr, ytr, xte, yte = (t.to(device) for t in blobs_split(c0))
        C = len(c0["centers"])
        parts = [partition.user_classes(ytr.cpu(), c["assignment"], seed=c["seed"]) for c in configs]
    else:
        xtr, ytr, xte, yte, C = _image_data(c0["dataset"], c0["train_subset"], c0["test_subset"], device)
        parts = [partition.rare_users(ytr.cpu(), c["num_users"], c["frequent_frac"], c["pattern_frac"], seed=c["seed"])
                 for c in configs]
    return dict(x_train=xtr, y_train=ytr, x_test=xte, y_test=yte, num_classes=C, partitions=parts)


def build_model(config: Mapping) -> torch.nn.Module:
    from flkit import models
    if config["model"] == "cvar_2d":
        quirks = bool(config.get("authors_model"))  # the notebooks' zero init + double softmax
        return models.build("cvar_2d", num_classes=len(config["centers"]), hidden=config["hidden"],
                            zero_init=quirks, double_softmax=quirks)
    return models.build(config["model"])


# ================================================================================================
# Running a batch of runs (vectorized), with checkpoints
# ================================================================================================
class Deadline(RuntimeError):
    """Raised by `run_batch` when it stopped before the deadline; its state is checkpointed."""


def _eval_rows(model, params, data, m_range, n, rows, per_class=True):
    from flkit.engine import evaluate, per_class_accuracy
    loss, acc = evaluate(model, params, data["x_test"], data["y_test"], batch_size=2048)
    loss, acc = loss.tolist(), acc.tolist()
    pc = per_class_accuracy(model, params, data["x_test"], data["y_test"], data["num_classes"],
                            batch_size=2048).tolist() if per_class else None
    for m in m_range:
        rows.append((m, n, "test_loss", loss[m], -1))
        rows.append((m, n, "test_acc", acc[m], -1))
        if pc is not None:
            for c, v in enumerate(pc[m]):
                rows.append((m, n, "test_acc_class", v, c))


def run_batch(configs: Sequence[Mapping], device="auto", *, checkpoint_dir: str | os.PathLike | None = None,
              checkpoint_every_s: float = 300.0, deadline: float | None = None, progress: bool = True,
              vectorized: bool | str = True, log: Callable[[str], None] = print,
              cpu_threads: int | None = 1, fast: bool = True) -> list[pd.DataFrame]:
    """Run M configs (one `batch_group`) as M stacked models; returns one tidy table per run.

    Table rows: (round, metric, value, class): "t" (the global threshold) every `t_every` rounds
    (default: `eval_every`) and "test_loss", "test_acc", "test_acc_class" (per class) of the global
    model every `eval_every` rounds, both also at rounds 0 and T; "param" rows (name in column "name", flat index in "class") of the final model when
    a config has save_params.

    checkpoint_dir: where the batch's mid-run state is saved (every `checkpoint_every_s` seconds and
    when stopping at `deadline`, a `time.time()` value); a later call with the same configs continues
    from it. Raises `Deadline` when it stops early.

    cpu_threads: torch threads while running on the CPU (restored afterwards). One thread is the
    fastest for these small models, by far on a shared machine (spinning OpenMP threads); None: leave as is.

    fast: train with `FastLocalSGD` (batched objective, in-place SGD, CUDA graphs on a GPU; the default,
    which produced the book's numbers) instead of `round` (`flkit.engine.local_train`, the reference).
    The two agree to float rounding (tests/test_cvar.py); the engine itself rounds differently in steps
    where some runs are masked, so bit-for-bit identity between them is not expected.
    """
    if resolve_device(device).type == "cpu" and cpu_threads:
        old = torch.get_num_threads()
        torch.set_num_threads(cpu_threads)
        try:
            return run_batch(configs, device, checkpoint_dir=checkpoint_dir, checkpoint_every_s=checkpoint_every_s,
                             deadline=deadline, progress=progress, vectorized=vectorized, log=log, cpu_threads=None,
                             fast=fast)
        finally:
            torch.set_num_threads(old)
    from flkit.engine import stack
    from flkit.participation import random_access_indices
    from flkit.results import config_key

    configs = [dict(c) for c in configs]
    groups = {json.dumps(batch_group(c), sort_keys=True) for c in configs}
    if len(groups) != 1:
        raise ValueError("run_batch needs configs that agree on everything but alpha, gamma, seed and the split")
    dev = resolve_device(device)
    c0, M, T = configs[0], len(configs), configs[0]["rounds"]
    data = prepare(configs, dev)
    model = build_model(c0).to(dev)
    users = Users.from_partitions(data["partitions"], dev)
    ram = torch.as_tensor(np.stack([random_access_indices(c["rho"], T, c["seed"]) for c in configs], 1),
                          device=dev)  # (T, M)
    keys = [config_key(c) for c in configs]
    ckpt = Path(checkpoint_dir) / f"batch-{config_key({'runs': keys})}.pt" if checkpoint_dir else None

    if ckpt is not None and ckpt.is_file():
        saved = torch.load(ckpt, map_location=dev, weights_only=False)
        if saved["keys"] != keys:
            raise RuntimeError(f"checkpoint {ckpt} belongs to other runs")
        state, rows, steps_done = State(saved["params"], saved["round"]), saved["rows"], saved["steps"]
        elapsed_before = saved.get("elapsed_s", 0.0)  # compute time of the earlier pieces
        paths_before = saved.get("local_steps", [])    # and how they computed
        log(f"resuming {M} runs from round {state.round} of {T} ({ckpt.name})")
    else:
        theta = [stack(model, 1, torch_gen(c["seed"], "init")) for c in configs]
        theta = {k: torch.cat([t[k] for t in theta]).to(dev) for k in theta[0]}
        state = init(theta, [c["alpha"] for c in configs], [c["gamma"] for c in configs], c0["t0"])
        rows, steps_done, elapsed_before, paths_before = [], 0, 0.0, []
        _eval_rows(model, state.params, data, range(M), 0, rows)
        rows += [(m, 0, "t", float(v), -1) for m, v in enumerate(state.t.tolist())]

    t_hist: list = []

    def flush_t():
        for r, tt in t_hist:
            rows.extend((m, r, "t", float(v), -1) for m, v in enumerate(tt.tolist()))
        t_hist.clear()

    def save_checkpoint():
        if ckpt is None:
            return
        flush_t()
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        tmp = ckpt.with_name(ckpt.name + ".tmp")
        torch.save({"keys": keys, "round": state.round, "params": {k: v.cpu() for k, v in state.params.items()},
                    "rows": rows, "steps": steps_done, "elapsed_s": elapsed_before + time.time() - t_start,
                    "local_steps": paths}, tmp)
        os.replace(tmp, ckpt)

    eval_every, lr_theta, lr_t = c0["eval_every"], c0["lr_theta"], c0["lr_t"]
    t_every = c0.get("t_every") or eval_every
    trainer = None
    if fast:
        trainer = FastLocalSGD(model, state.params, data["x_train"], data["y_train"], c0["batch_size"],
                               lr_theta, lr_t, log=log)
        state = State(trainer.P, state.round)
        log(f"local steps: FastLocalSGD ({trainer.backend}, {'CUDA graph' if trainer.graph is not None else 'eager'})")
    path = (f"FastLocalSGD/{trainer.backend}/{'graph' if trainer.graph is not None else 'eager'}"
            if trainer is not None else f"round/vectorized={vectorized}")
    paths = paths_before + [path] if path not in paths_before else paths_before  # every piece's path
    start_round, t_start, last_ckpt = state.round, time.time(), time.time()
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=T, initial=state.round, desc=f"{c0['experiment']}: {M} runs", unit="round",
                   mininterval=5.0)
    while state.round < T:
        n = state.round
        gens = [torch_gen(c["seed"], f"batch/{n}", dev) for c in configs]
        if trainer is None:
            state, diag = round(state, model, data["x_train"], data["y_train"], users, ram[n],
                                lr_theta=lr_theta, lr_t=lr_t, epochs=c0["epochs"], batch_size=c0["batch_size"],
                                generators=gens, vectorized=vectorized)
            steps_done += int(diag["steps"].max())
        else:
            pool, size = users.relayed(ram[n])
            batches, steps = make_batches(pool, size, c0["epochs"], c0["batch_size"], gens)
            trainer.train(batches, steps)
            state = State(trainer.P, n + 1)
            steps_done += batches.shape[1]
        if state.round % t_every == 0 or state.round == T:
            t_hist.append((state.round, state.t.clone()))  # no device sync here
        if state.round % eval_every == 0 or state.round == T:
            _eval_rows(model, state.params, data, range(M), state.round, rows)
            flush_t()
        if bar is not None:
            bar.update(1)
        now = time.time()
        per_round = (now - t_start) / max(1, state.round - start_round)
        if deadline is not None and state.round < T and now + 2 * per_round + 10 > deadline:
            save_checkpoint()
            if bar is not None:
                bar.close()
            raise Deadline(f"stopped at round {state.round} of {T} (checkpoint {ckpt})")
        if now - last_ckpt > checkpoint_every_s:
            save_checkpoint()
            last_ckpt = now
    if bar is not None:
        bar.close()
    wall = time.time() - t_start
    done = T - start_round
    if done:
        log(f"throughput: {M} runs x {done} rounds in {wall:.1f} s on {dev}: {done / wall:.2f} rounds/s, "
            f"{M * done / wall:.1f} run-rounds/s, {steps_done / max(wall, 1e-9):.0f} local steps/s "
            f"(x{M} models)")

    frame = pd.DataFrame(rows, columns=["run", "round", "metric", "value", "class"])
    tables = []
    for m, c in enumerate(configs):
        tab = frame[frame["run"] == m].drop(columns="run").reset_index(drop=True)
        tab["name"] = ""
        if c.get("save_params"):
            extra = [(0, "param", float(v), i, k) for k, p in state.theta.items()
                     for i, v in enumerate(p[m].reshape(-1).tolist())]
            tab = pd.concat([tab, pd.DataFrame(extra, columns=["round", "metric", "value", "class", "name"])],
                            ignore_index=True)
            tab.loc[tab["metric"] == "param", "round"] = T
        tab.attrs["wall_time_s"] = elapsed_before + wall  # all pieces of a resumed batch
        tab.attrs["local_steps"] = " + ".join(paths)
        tables.append(tab)
    if ckpt is not None and ckpt.is_file():
        ckpt.unlink()
    return tables


def params_from_table(table: pd.DataFrame, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The final model saved in a run's table ("param" rows), as a stacked (1, ...) params dict."""
    rows = table[table["metric"] == "param"]
    out = {}
    for k, p in model.named_parameters():
        v = rows[rows["name"] == k].sort_values("class")["value"].to_numpy(dtype=np.float32)
        out[k] = torch.as_tensor(v).reshape(1, *p.shape)
    return out


# ================================================================================================
# Sweeps through the results store
# ================================================================================================
def store_for(s: Mapping, root: str | os.PathLike | None = None):
    """The results store of an experiment: results/cvar/<experiment>/ (smoke runs: results/tmp/cvar/...,
    git-ignored). `root` replaces results/cvar (e.g. the sweep script's --out)."""
    from flkit.results import Store, book_store
    if root is not None:
        return Store(Path(root) / s["experiment"])
    if s["profile"] == "smoke":
        return Store(book_store("tmp").root / "cvar" / s["experiment"])
    return Store(book_store("cvar").root / s["experiment"])


def sweep(s: Mapping, *, root=None, device="auto", compute_missing: bool = True, deadline: float | None = None,
          batch_size: int | None = None, progress: bool = True, vectorized: bool | str = True) -> pd.DataFrame:
    """All runs of settings `s`: stored results are read, missing ones computed (vectorized, in batches
    of at most `batch_size` runs per `batch_group`) and stored. Returns the joined tidy table
    (`flkit.results.Store.load_many`: config fields as columns)."""
    from flkit.results import sweep_batched
    store = store_for(s, root)
    configs = run_configs(s)
    missing = [c for c in configs if not store.done(c)]
    if missing and not compute_missing:
        raise FileNotFoundError(f"{len(missing)} of {len(configs)} runs of {s['experiment']} ({s['profile']}) are not in "
                                f"{store.root}; run scripts/cvar_sweep.py or set compute_missing=True")
    print(f"{s['experiment']} ({s['profile']}): {len(configs) - len(missing)} of {len(configs)} runs stored in "
          f"{store.root}, {len(missing)} to compute")
    ckpt_dir = store.root.parent / "checkpoints"
    dev = resolve_device(device)

    def fn_many(batch):
        return run_batch(batch, dev, checkpoint_dir=ckpt_dir, deadline=deadline, progress=progress,
                         vectorized=vectorized)

    return sweep_batched(configs, fn_many, store, batch_size=batch_size, progress=False,
                         group_by=lambda c: batch_group(c), device=str(dev))


# ================================================================================================
# Reading the results: the document's Table 1, our table, the document's claims
# ================================================================================================
# Table 1 of the document (FashionMNIST), copied from the seed text: for each gamma, then each alpha in
# (1.0, 0.3, 0.2, 0.1): (overall, pattern 1, pattern 2) as (mean, +-). tests/test_cvar.py re-reads the
# seed text and checks every number.
_DOC_TABLE1 = {
    0.0: [(85.147, 0.546, 85.473, 1.548, 61.041, 3.554), (86.157, 0.559, 88.323, 1.140, 67.164, 3.344),
          (86.453, 0.592, 88.736, 1.472, 68.926, 2.716), (86.089, 0.923, 87.536, 2.449, 70.601, 3.523)],
    0.1: [(84.895, 0.605, 84.583, 1.597, 59.649, 3.795), (86.276, 0.519, 88.353, 1.058, 66.676, 2.883),
          (86.432, 0.653, 88.619, 1.674, 68.801, 2.835), (86.546, 0.540, 88.681, 1.454, 71.681, 2.419)],
    0.2: [(84.783, 0.474, 84.533, 1.294, 59.223, 2.580), (86.174, 0.552, 88.029, 1.572, 66.372, 3.116),
          (86.110, 0.573, 88.061, 1.663, 67.659, 3.156), (86.132, 0.860, 88.093, 1.990, 69.698, 4.351)],
    0.3: [(84.983, 0.419, 84.969, 1.042, 60.330, 2.104), (86.036, 0.483, 87.611, 1.316, 65.958, 2.492),
          (86.263, 0.517, 88.300, 1.772, 68.076, 3.054), (86.197, 0.533, 87.776, 2.026, 69.883, 2.674)],
    1.0: [(84.915, 0.497, 84.514, 1.620, 60.252, 3.074), (84.822, 0.630, 84.481, 2.003, 59.008, 3.138),
          (84.916, 0.454, 85.459, 2.870, 60.805, 2.399), (84.956, 0.462, 85.561, 1.443, 59.839, 3.168)],
}
TABLE1_ALPHAS = (1.0, 0.3, 0.2, 0.1)
TABLE1_GAMMAS = (0.0, 0.1, 0.2, 0.3, 1.0)
QUANTITIES = ("overall", "pattern 1", "pattern 2")
RARE_CLASSES = {0.9: (9,), 0.8: (8, 9)}  # r -> the rare users' classes (pattern 1 = 8, pattern 2 = 9)


def table1_reference() -> pd.DataFrame:
    """The document's Table 1 as a tidy frame: gamma, alpha, quantity, value (mean %), sd (the +-)."""
    rows = []
    for g, cells in _DOC_TABLE1.items():
        for a, cell in zip(TABLE1_ALPHAS, cells):
            for q, (mean, sd) in zip(QUANTITIES, zip(cell[0::2], cell[1::2])):
                rows.append(dict(gamma=g, alpha=a, quantity=q, value=mean, sd=sd))
    return pd.DataFrame(rows)


def final_accuracies(df: pd.DataFrame, last_frac: float = 0.0) -> pd.DataFrame:
    """Per run: overall and per-class test accuracy (in %) of the global model at the last round
    (last_frac=0), or averaged over the evaluations in the last `last_frac` of the rounds.
    Columns: the run's config fields (alpha, gamma, seed, pattern_frac, method), metric, class, value."""
    keep = df[df["metric"].isin(["test_acc", "test_acc_class"])].copy()
    T = keep["rounds"].max()
    lo = T - last_frac * T if last_frac else T
    keep = keep[keep["round"] >= lo]
    cols = [c for c in ("run_key", "method", "alpha", "gamma", "seed", "pattern_frac") if c in keep.columns]
    out = keep.groupby(cols + ["metric", "class"], as_index=False)["value"].mean()
    out["value"] *= 100
    return out


def table1_ours(df: pd.DataFrame) -> pd.DataFrame:
    """Our Table 1 from the stored fmnist runs: one row per (gamma, alpha, quantity, seed), final-round
    accuracy in %. The risk-neutral cells (alpha = 1 or gamma = 1) all show the FedAvg run."""
    acc = final_accuracies(df)
    acc["quantity"] = np.select([acc["metric"] == "test_acc", acc["class"] == 8, acc["class"] == 9],
                                list(QUANTITIES), default="")
    acc = acc[acc["quantity"] != ""]
    gammas = sorted((set(TABLE1_GAMMAS) | set(acc["gamma"])) - {1.0}) + [1.0]
    alphas = sorted(set(TABLE1_ALPHAS) | set(acc["alpha"]), reverse=True)
    rows = []
    for g in gammas:
        for a in alphas:
            run = (1.0, 1.0) if _method(a, g) == "fedavg" else (a, g)
            sel = acc[(acc["alpha"] == run[0]) & (acc["gamma"] == run[1])]
            if len(sel):
                rows.append(sel.assign(gamma=g, alpha=a)[["gamma", "alpha", "quantity", "seed", "value"]])
    return pd.concat(rows, ignore_index=True)


def table1_compare(ours: pd.DataFrame) -> pd.DataFrame:
    """Document vs ours, cell by cell: gamma, alpha, quantity, document (mean), document sd, ours
    (mean over seeds), ours sd (ddof=1), n (seeds), difference = ours - document."""
    from flkit.plots import reference_table
    ref = table1_reference().rename(columns={"sd": "document sd"})
    out = reference_table(ours, ref, on=["gamma", "alpha", "quantity"], value="value")
    cols = ["gamma", "alpha", "quantity", "document", "document sd", "ours", "ours sd", "n", "difference"]
    return out[cols + [c for c in out.columns if c not in cols]]


def table1_wide(cmp: pd.DataFrame, decimals: int = 2) -> pd.DataFrame:
    """The comparison laid out like the document's table: rows gamma, columns (alpha, quantity), each
    cell "ours +- sd | doc (diff)"."""
    def cell(r):
        if not np.isfinite(r["ours"]):
            return f"— | {r['document']:.{decimals}f}"
        return (f"{r['ours']:.{decimals}f} ± {r['ours sd']:.{decimals}f} | {r['document']:.{decimals}f} "
                f"({r['difference']:+.{decimals}f})")
    wide = cmp.assign(cell=cmp.apply(cell, axis=1)).pivot_table(
        index="gamma", columns=["alpha", "quantity"], values="cell", aggfunc="first")
    return wide.reindex(columns=[(a, q) for a in TABLE1_ALPHAS for q in QUANTITIES if (a, q) in wide.columns])


def confirm_table1(ours: pd.DataFrame) -> pd.DataFrame:
    """The document's reading of Table 1, checked on our numbers (means over seeds)."""
    m = ours.groupby(["gamma", "alpha", "quantity"])["value"].mean()
    overall = m.xs("overall", level="quantity")
    best = overall.idxmax()
    fed = {q: m[(1.0, 1.0, q)] for q in QUANTITIES}
    cell = {q: m.get((0.1, 0.1, q), np.nan) for q in QUANTITIES}
    aware = [(g, a) for g, a in overall.index if g < 1 and a < 1]
    rows = [
        dict(claim="best overall cell is (gamma, alpha) = (0.1, 0.1)", document="(0.1, 0.1): 86.55",
             ours=f"({best[0]}, {best[1]}): {overall[best]:.2f}", confirmed=bool(best == (0.1, 0.1))),
        dict(claim="pattern 2: from ~60 % (FedAvg) to > 71 % at (0.1, 0.1)", document="60.25 -> 71.68",
             ours=f"{fed['pattern 2']:.2f} -> {cell['pattern 2']:.2f}",
             confirmed=bool(cell["pattern 2"] > 71 and fed["pattern 2"] < cell["pattern 2"])),
        dict(claim="pattern 1 also improves over FedAvg at (0.1, 0.1)", document="84.51 -> 88.68",
             ours=f"{fed['pattern 1']:.2f} -> {cell['pattern 1']:.2f}",
             confirmed=bool(cell["pattern 1"] > fed["pattern 1"])),
        dict(claim="pattern 2 is harder than pattern 1 for FedAvg", document="60.25 < 84.51",
             ours=f"{fed['pattern 2']:.2f} vs {fed['pattern 1']:.2f}",
             confirmed=bool(fed["pattern 2"] < fed["pattern 1"])),
        dict(claim="every risk-aware cell (gamma < 1, alpha < 1) beats FedAvg overall", document="12 of 12",
             ours=f"{sum(overall[c] > fed['overall'] for c in aware)} of {len(aware)}",
             confirmed=bool(all(overall[c] > fed["overall"] for c in aware))),
    ]
    return pd.DataFrame(rows)


# Figs. 3-4: the document's reading ("from around 50 % (Fig. 3(c)), 60 % (Fig. 4(c)) and 30 % (Fig. 4(d))
# to over 80 %").
MNIST_CLAIMS = [(0.9, 9, "Fig. 3(c)", 50.0), (0.8, 8, "Fig. 4(c)", 60.0), (0.8, 9, "Fig. 4(d)", 30.0)]


def confirm_mnist(df: pd.DataFrame, last_frac: float = 0.1) -> pd.DataFrame:
    """The document's reading of Figs. 3-4 checked on our runs: test accuracy on each rare class
    (mean over the evaluations of the last `last_frac` of the rounds, then over seeds), FedAvg vs
    Fed-CVaR-Avg; and the overall accuracy."""
    acc = final_accuracies(df, last_frac)
    rows = []
    for r, c, fig, doc_from in MNIST_CLAIMS:
        if r not in set(acc["pattern_frac"]):
            continue
        sel = acc[(acc["pattern_frac"] == r) & (acc["metric"] == "test_acc_class") & (acc["class"] == c)]
        fed = sel[sel["method"] == "fedavg"].set_index("seed")["value"]
        prop = sel[sel["method"] == "fed-cvar-avg"].set_index("seed")["value"]
        rows.append(dict(figure=fig, r=r, rare_class=c, document=f"~{doc_from:.0f} % -> > 80 %",
                         fedavg=fed.mean(), fed_cvar_avg=prop.mean(), seeds=len(prop),
                         better_every_seed=bool((prop - fed).dropna().gt(0).all()),
                         confirmed=bool(prop.mean() > 80 and prop.mean() > fed.mean())))
    for r in sorted(set(acc["pattern_frac"]), reverse=True):
        sel = acc[(acc["pattern_frac"] == r) & (acc["metric"] == "test_acc")]
        fed = sel[sel["method"] == "fedavg"].set_index("seed")["value"]
        prop = sel[sel["method"] == "fed-cvar-avg"].set_index("seed")["value"]
        rows.append(dict(figure="Fig. 3(b)" if r == 0.9 else "Fig. 4(b)", r=r, rare_class="overall",
                         document="Algorithm 1 better overall", fedavg=fed.mean(), fed_cvar_avg=prop.mean(),
                         seeds=len(prop), better_every_seed=bool((prop - fed).dropna().gt(0).all()),
                         confirmed=bool(prop.mean() > fed.mean())))
    return pd.DataFrame(rows)


# ================================================================================================
# Figures
# ================================================================================================
METHOD_LABELS = {"fedavg": "FedAvg (alpha = 1)", "fed-cvar-avg": "Fed-CVaR-Avg"}
METHOD_COLORS = {"fedavg": "tab:blue", "fed-cvar-avg": "tab:red"}


def curve_panel(ax, df: pd.DataFrame, metric: str, cls: int | None = None, smooth: float = 0.9,
                scale: float = 1.0, title: str = ""):
    """Learning curves of FedAvg and Fed-CVaR-Avg on `ax`: each run raw (faint), and the mean over seeds
    of the EMA-smoothed runs (`flkit.plots.smooth_ema`, weight `smooth` per evaluation) with a +-1 sd band."""
    from flkit.plots import curves
    sel = df[df["metric"] == metric]
    if cls is not None:
        sel = sel[sel["class"] == cls]
    sel = sel.assign(value=sel["value"] * scale)
    for (method, _), run in sel.groupby(["method", "seed"]):
        ax.plot(run["round"], run["value"], color=METHOD_COLORS[method], alpha=0.12, lw=0.6)
    curves(sel, hue="method", ax=ax, smooth=smooth, band="sd", units="seed", label_map=METHOD_LABELS,
           palette=METHOD_COLORS, order=[m for m in ("fedavg", "fed-cvar-avg") if m in set(sel["method"])])
    ax.set_title(title, fontsize=9)
    ax.set_ylabel("")
    if scale == 100:  # accuracies in %: the sd band must not suggest values outside [0, 100]
        ax.set_ylim(-2, 102)
    return ax


def decision_regions(ax, model: torch.nn.Module, params: Mapping[str, torch.Tensor], X: torch.Tensor,
                     y: torch.Tensor, step: float = 0.02, cmap: str = "viridis"):
    """Decision regions of one model (params stacked with M = 1) on a `step` grid (the authors' 0.02),
    with the points (x: test set, coloured by class)."""
    from flkit.engine import grouped_forward
    X, y = X.cpu(), y.cpu()
    lo, hi = X.min(0).values - 0.5, X.max(0).values + 0.5
    gx, gy = torch.meshgrid(torch.arange(lo[0], hi[0], step), torch.arange(lo[1], hi[1], step), indexing="xy")
    grid = torch.stack([gx.reshape(-1), gy.reshape(-1)], 1)
    with torch.no_grad():
        pred = grouped_forward(model, {k: v.cpu() for k, v in params.items()}, grid, shared=True)[0].argmax(-1)
    C = int(y.max()) + 1
    ax.contourf(gx, gy, pred.reshape(gx.shape).float(), levels=np.arange(C + 1) - 0.5, cmap=cmap, alpha=0.3)
    ax.scatter(X[:, 0], X[:, 1], c=y, cmap=cmap, vmin=0, vmax=C - 1, s=4, edgecolors="none")
    ax.set_xticks([])
    ax.set_yticks([])
    return ax


def _rare_classes_2d(config: Mapping) -> list[int]:
    """Classes held by the least available user(s) of a Fig. 2 panel (the last user's classes)."""
    return sorted(set(config["assignment"][-1]))


def fig2(df: pd.DataFrame, authors_model: bool = False, seed: int = 0, title: str = ""):
    """Fig. 2 layout: one row per panel, Left FedAvg (alpha = 1) | Center RAM distribution | Right
    Fed-CVaR-Avg (alpha = 0.1, gamma = 0.1): decision regions of the final global model of run `seed`
    over all the panel's points (train and test), coloured by class."""
    import matplotlib.pyplot as plt
    sub = df[(df["authors_model"] == authors_model) & (df["seed"] == seed)]
    panels = sorted(sub["panel"].unique())
    fig, axes = plt.subplots(len(panels), 3, figsize=(10, 3.1 * len(panels)), squeeze=False,
                             gridspec_kw={"width_ratios": [1, 0.8, 1]})
    for row, panel in zip(axes, panels):
        runs = sub[sub["panel"] == panel]
        cfg = _config_of(runs[runs["method"] == "fedavg"])
        xtr, ytr, xte, yte = blobs_split(cfg)
        X, y = torch.cat([xtr, xte]), torch.cat([ytr, yte])
        model = build_model(cfg)
        for ax, method in ((row[0], "fedavg"), (row[2], "fed-cvar-avg")):
            run = runs[runs["method"] == method]
            c = _config_of(run)
            decision_regions(ax, model, params_from_table(run, model), X, y)
            ax.set_title(f"({panel}) FedAvg (alpha = 1)" if method == "fedavg" else
                         f"({panel}) Fed-CVaR-Avg (alpha = {c['alpha']}, gamma = {c['gamma']})", fontsize=9)
        rho = np.asarray(cfg["rho"])
        colors = ["tab:orange" if any(cl in _rare_classes_2d(cfg) for cl in a) else "tab:gray"
                  for a in cfg["assignment"]]
        row[1].bar(np.arange(1, len(rho) + 1), rho, color=colors)
        row[1].set_xlabel("user i")
        row[1].set_ylabel("rho_i")
        row[1].set_title(f"({panel}) RAM distribution (orange: users of class {_rare_classes_2d(cfg)})", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _config_of(run: pd.DataFrame) -> dict:
    """The config of one stored run (a frame of rows of that run, config fields as columns)."""
    if run["run_key"].nunique() != 1:
        raise ValueError(f"expected rows of one run, got {run['run_key'].nunique()}")
    row = run.iloc[0]
    out = {}
    for k in ("panel", "centers", "n_per_class", "std", "data_seed", "test_frac", "assignment", "rho", "model",
              "hidden", "authors_model", "alpha", "gamma", "seed", "rounds"):
        if k in run.columns:
            v = row[k]
            out[k] = [list(x) if isinstance(x, tuple) else x for x in v] if isinstance(v, tuple) else v
    return out


def fig2_accuracy(df: pd.DataFrame) -> pd.DataFrame:
    """Final test accuracy (%) per panel, model variant, method and class: mean and sd over seeds."""
    acc = df[(df["metric"] == "test_acc_class") & (df["round"] == df["rounds"])]
    out = (acc.groupby(["panel", "authors_model", "method", "class"])["value"]
           .agg(mean=lambda v: 100 * v.mean(), sd=lambda v: 100 * v.std(ddof=1), seeds="size").reset_index())
    return out


def confirm_fig2(df: pd.DataFrame) -> pd.DataFrame:
    """The document's reading of Fig. 2, per panel and model variant: FedAvg fails to classify the least
    frequent user's pattern(s) (final test accuracy on them < 50 %, mean over seeds) while Fed-CVaR-Avg
    classifies every pattern (> 90 % on each class)."""
    acc = fig2_accuracy(df)
    rows = []
    for (panel, quirks), g in acc.groupby(["panel", "authors_model"]):
        cfg = _config_of(df[(df["panel"] == panel) & (df["authors_model"] == quirks)].iloc[:1])
        rare = _rare_classes_2d(cfg)
        fed = g[g["method"] == "fedavg"].set_index("class")["mean"]
        prop = g[g["method"] == "fed-cvar-avg"].set_index("class")["mean"]
        fails = bool(fed[rare].min() < 50)
        solves = bool(prop.min() > 90)
        rows.append(dict(panel=panel, model="authors' notebook model" if quirks else "ours",
                         rare_classes=str(rare), fedavg_rare=fed[rare].mean(), proposed_rare=prop[rare].mean(),
                         proposed_worst_class=prop.min(), seeds=int(g["seeds"].max()),
                         fedavg_fails=fails, proposed_classifies_all=solves, confirmed=fails and solves))
    return pd.DataFrame(rows)


def mnist_figure(df: pd.DataFrame, pattern_frac: float, smooth: float = 0.9, title: str = ""):
    """Fig. 3 (r = 0.9: t, overall accuracy, rare class 9) or Fig. 4 (r = 0.8: t, overall, classes 8
    and 9) of the document: FedAvg vs Fed-CVaR-Avg, raw runs faint, EMA-smoothed mean +- sd over seeds."""
    import matplotlib.pyplot as plt
    sub = df[df["pattern_frac"] == pattern_frac]
    rare = RARE_CLASSES[pattern_frac]
    fig, axes = plt.subplots(1, 2 + len(rare), figsize=(4.2 * (2 + len(rare)), 3.4))
    # t is logged more often than the accuracy: smooth it with the same time constant in rounds
    spacing = lambda m: np.median(np.diff(np.unique(sub.loc[sub["metric"] == m, "round"])))  # noqa: E731
    smooth_t = smooth ** (spacing("t") / spacing("test_acc"))
    curve_panel(axes[0], sub, "t", smooth=float(smooth_t), title="(a) global CVaR threshold t")
    curve_panel(axes[1], sub, "test_acc", smooth=smooth, scale=100, title="(b) overall test accuracy (%)")
    for i, c in enumerate(rare):
        curve_panel(axes[2 + i], sub, "test_acc_class", cls=c, smooth=smooth, scale=100,
                    title=f"({'cd'[i]}) test accuracy, rare class {c} (%)")
    for ax in axes[1:]:
        ax.set_ylim(0, 100)
    for ax in axes:
        ax.set_xlabel("round")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def split_summary(s: Mapping, seed: int = 0) -> pd.DataFrame:
    """Who holds what under settings `s` (image experiments): per (r, user group) the users, their
    classes, samples per user (min-max) and their total RAM probability."""
    from flkit import partition
    rows = []
    configs = {c["pattern_frac"]: c for c in run_configs(s) if c["seed"] == seed}
    for r, c in configs.items():
        _, ytr, _, _, _ = _image_data(c["dataset"], c["train_subset"], c["test_subset"], "cpu")
        p = partition.rare_users(ytr, c["num_users"], c["frequent_frac"], r, seed=seed)
        rho = np.asarray(c["rho"])
        F = int(np.rint(c["frequent_frac"] * c["num_users"]))
        for name, users in (("frequent", range(F)), ("rare", range(F, c["num_users"]))):
            users = list(users)
            cls = [int(c) for c in np.flatnonzero(p.counts[users].sum(0))]
            rows.append(dict(r=r, group=name, users=f"{users[0]}-{users[-1]}", classes=str(cls),
                             samples_per_user=f"{p.sizes[users].min()}-{p.sizes[users].max()}",
                             rho_total=rho[users].sum()))
    return pd.DataFrame(rows)


# ================================================================================================
# A fast path for long runs: batched objective, in-place updates, CUDA graphs
# ================================================================================================
class FastLocalSGD:
    """The local steps of Algorithm 1 for M stacked runs, specialised for speed.

    Same update rule as `round` (which calls `flkit.engine.local_train` with `objective`): plain SGD on
    (theta, t), step sizes eta_theta and eta_t, the objective's gradients as in `grad_G`, models of the
    engine's grouped family (`flkit.engine.supports_grouped`). Differences are in the mechanics only:
    the objective is evaluated for the M runs at once (no vmap), the state is updated in place, and on
    CUDA each local step is one replay of a captured CUDA graph (a step of these small models is a few
    hundred tiny kernels, so launching them one by one would dominate the time). The graph is checked
    against an eager step after capture and dropped, with a warning, if they disagree or capture fails.
    tests/test_cvar.py checks that a round through this class equals `round` bit for bit on the CPU.

    backend: how the M models' forward/backward runs. "grouped": `flkit.engine.grouped_forward` (the
    conv layers as cuDNN grouped convolutions); "fused": `flkit.fused` (Triton kernels for the
    Conv -> LeakyReLU -> MaxPool blocks, TF32 like cuDNN; 1.8x faster for the Table 1 LeNet on an H100,
    benchmarks/bench_cvar_step.py); "auto": fused on CUDA with triton and a model it supports, else
    grouped. The backend used is in `self.backend`, the fused products' precision in `self.precision`.

    params: the state dict of `State` (theta stacked, "t", "alpha", "gamma"); lr_theta, lr_t: floats
    or (M,) tensors. `P` holds the current state (static tensors, updated in place)."""

    def __init__(self, model: torch.nn.Module, params: Mapping[str, torch.Tensor], x: torch.Tensor,
                 y: torch.Tensor, batch_size: int, lr_theta, lr_t, cuda_graph: bool = True,
                 log: Callable[[str], None] = print, backend: str = "auto"):
        from flkit import fused
        from flkit.engine import supports_grouped
        if not supports_grouped(model):
            raise ValueError("FastLocalSGD needs a model of the engine's grouped family; use cvar.round")
        if backend not in ("auto", "fused", "grouped"):
            raise ValueError(f"backend must be 'auto', 'fused' or 'grouped', got {backend!r}")
        can_fuse = fused.supports_fused(model) and fused.available(x.device)
        if backend == "fused" and not can_fuse:
            raise ValueError("backend='fused' needs triton, a CUDA device (or TRITON_INTERPRET=1) and a model of "
                             "Conv2d -> LeakyReLU -> MaxPool2d(2) blocks (flkit.fused.supports_fused)")
        auto_fuse = backend == "auto" and can_fuse and x.device.type == "cuda"  # never the slow interpreter
        self.backend = "fused" if backend == "fused" or auto_fuse else "grouped"
        self.precision = "tf32"  # of the fused kernels' products ("ieee": full float32)
        self.model, self.x, self.y = model, x, y
        self.pnames = [k for k, _ in model.named_parameters()]
        self.P = {k: v.detach().clone() for k, v in params.items()}
        first = self.P["t"]
        M, dev = first.shape[0], first.device
        as_m = lambda v: torch.as_tensor(v, dtype=first.dtype, device=dev).reshape(-1).expand(M).clone()  # noqa: E731
        self.lr = {k: as_m(lr_theta) for k in self.pnames} | {"t": as_m(lr_t)}
        self.idx = torch.zeros(M, batch_size, dtype=torch.long, device=dev)
        self.active = torch.ones(M, dtype=torch.bool, device=dev)
        self.graph = None
        if cuda_graph and dev.type == "cuda":
            try:
                self._capture()
            except Exception as e:  # pragma: no cover - GPU only
                self.graph = None
                log(f"FastLocalSGD: CUDA graph capture failed ({type(e).__name__}: {e}); running eagerly")
            else:  # pragma: no cover - GPU only
                if not self._graph_matches_eager():
                    self.graph = None
                    log("FastLocalSGD: CUDA graph and eager step disagree; running eagerly")

    def _step(self) -> None:
        from flkit import fused
        from flkit.engine import cross_entropy, grouped_forward
        x, y, idx, P = self.x, self.y, self.idx, self.P
        yb = torch.where(idx >= 0, y[idx.clamp(min=0)], IGNORE)
        names = self.pnames + ["t"]
        leaves = {k: P[k].detach().requires_grad_(True) for k in names}
        theta = {k: leaves[k] for k in self.pnames}
        if self.backend == "fused":
            logits = fused.forward(self.model, theta, x, idx, self.precision)
        else:
            logits = grouped_forward(self.model, theta, x[idx.clamp(min=0)])
        f = cross_entropy(logits, yb)                                                  # (M,)
        t, a, g = leaves["t"], P["alpha"], P["gamma"]
        above = f.detach() > t.detach()
        c = torch.where(above, (1 - g) / a + g, g)
        g_t = torch.where(above, (1 - g) * (1 - 1 / a), 1 - g)
        grads = torch.autograd.grad((c * f + g_t * t).sum(), [leaves[k] for k in names])
        with torch.no_grad():
            for k, d in zip(names, grads):
                p = P[k]
                shape = (-1,) + (1,) * (p.dim() - 1)
                p.copy_(torch.where(self.active.view(shape), p - self.lr[k].view(shape) * d, p))

    def _capture(self) -> None:  # pragma: no cover - GPU only
        self.idx.zero_()
        self.active.fill_(False)  # warm-up and capture leave the state unchanged
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step()
        self.graph = graph

    def _graph_matches_eager(self) -> bool:  # pragma: no cover - GPU only
        g = torch.Generator(device=self.x.device).manual_seed(0)
        self.idx.copy_(torch.randint(0, len(self.y), self.idx.shape, generator=g, device=self.x.device))
        self.active.fill_(True)
        start = {k: v.clone() for k, v in self.P.items()}
        self.graph.replay()
        replayed = {k: v.clone() for k, v in self.P.items()}
        for k in self.P:
            self.P[k].copy_(start[k])
        self._step()
        ok = all(torch.allclose(replayed[k], self.P[k], rtol=1e-5, atol=1e-6) for k in self.P)
        for k in self.P:
            self.P[k].copy_(start[k])
        return ok

    def train(self, batches: torch.Tensor, steps: torch.Tensor) -> None:
        """Run the local steps of one round: batches (M, S, B), steps (M,) as from `make_batches`."""
        S = batches.shape[1]
        act = torch.arange(S, device=batches.device) < steps[:, None]
        for s in range(S):
            self.idx.copy_(batches[:, s])
            self.active.copy_(act[:, s])
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()


def planned_steps(configs: Sequence[Mapping], rounds: int | None = None) -> np.ndarray:
    """Local steps of each round of a batch of runs (no training): S_n = max over runs of
    H ceil(N_{I_n} / B), from the runs' splits and RAM draws. Shape (rounds,)."""
    from flkit.participation import random_access_indices
    c0 = configs[0]
    T = rounds or c0["rounds"]
    data = prepare(configs, "cpu")
    sizes = np.stack([p.sizes for p in data["partitions"]])                           # (M, K)
    ram = np.stack([random_access_indices(c["rho"], c0["rounds"], c["seed"])[:T] for c in configs], 1)  # (T, M)
    per = c0["epochs"] * -(-sizes // c0["batch_size"])                               # (M, K)
    return per[np.arange(len(configs))[None, :], ram].max(1)


def titled(label: str, title: str, width: int = 150) -> str:
    """A figure/table title that starts with the profile's label ("REDUCED: ...") when there is one."""
    import textwrap
    return "\n".join(textwrap.wrap(label, width) + [title]) if label else title
