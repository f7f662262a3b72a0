r"""Page "theory" of the HiCS-FL chapter (document 004: Theorem 1 and its proof in appendix 6.6,
Assumption 1 (on quadratic clients here; on Fashion-MNIST, Fig. 6(a), in :mod:`flkit.papers.hics.dissimilarity`),
Lemma 2 and Theorem 2 in appendix 6.7, the SGD-versus-Adam argument of appendix 6.9.2 and
Figs. 11-12).

The document's symbols: C classes, client k with label distribution :math:`\mathcal D^{(k)}` and bias
update :math:`\Delta\mathbf b^{(k)}` (local minus global), the estimate
:math:`\hat H(\mathcal D^{(k)}) = H(\mathrm{softmax}(\Delta\mathbf b^{(k)}/T))` (Eq. 7), :math:`\mathcal E_i`
the mean predicted probability of class i over the samples of the other classes (Definition 1),
:math:`\delta = \max_i|\frac1C\sum_c\mathcal E_c - \mathcal E_i|`, learning rate :math:`\eta`, R local
epochs (Theorem 1) or local steps (Theorem 2), :math:`\omega_k^t` the probability of sampling client k
in round t, :math:`\sigma_k^2` the bound of Assumption 1 on :math:`\|\nabla F_k - \nabla F\|^2`.

No algorithm lives here: the sampler is :class:`flkit.sample.HiCS` (:class:`HiCSRecorder` only reads its
state after each selection), local training is :func:`flkit.engine.local_train`, the round loop
:func:`flkit.fl.run`. This module holds the page's settings (:data:`PROFILES`, :func:`profile`), the
document's bounds as formulas (:func:`theorem1_bound`, :func:`theorem2_constants`,
:func:`theorem2_bound`, :func:`lemma2_bound`), the exact inclusion probabilities of successive sampling
(:func:`successive_inclusion`), the "label-mixture" quadratic clients on which every constant of Theorem 2
is exact (:func:`label_quadratic`), and the experiments' drivers and figure helpers.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from scipy import stats

from flkit import aggregate, engine, fl, plots, results, sample
from flkit.datasets import QuadraticProblem
from flkit.papers import claims, settings
from flkit.papers.hics import dissimilarity, entropy
from flkit.papers.hics.common import CIFAR10, FIG9, HICS, label_fractions, make_partition, true_entropy
from flkit.seeding import rng
from flkit.tasks import QuadraticTask

__all__ = [
    "PROFILES", "profile",
    # Theorem 1
    "mis_confidence", "theorem1_bound", "pair_frame", "temperature_sweep", "bias_updates", "replicate_clients",
    "theorem1_inputs", "theorem1_replicates", "replicates", "replicate_pairs", "theorem1_constants", "theorem1_summary",
    "plot_theorem1", "plot_temperature_sweep",
    # Theorem 2 and Lemma 2
    "successive_inclusion", "HiCSRecorder", "shifted_dirichlet", "label_quadratic", "quadratic_clients", "sigma2",
    "theorem2_constants", "theorem2_bound", "lemma2_bound", "lemma2_ratio", "run_quadratic", "bound_table",
    "theorem2_summary",
    "plot_theorem2_rounds", "plot_theorem2_eta",
    # Figs. 11-12
    "optimizer_runs", "optimizer_table", "optimizer_checks", "plot_fig11_12",
    "FIGS_11_12",
    # the page
    "temperature_values", "quadratic_words",
]

# ------------------------------------------------------------------------------------------ settings
_QUAD = dict(classes=10, alphas=(0.001, 0.002, 0.005, 0.01, 0.5), mu=1.0, L=1.0, scale=1.0, temperature=1.0,
             gamma0=4.0, lam=0.1, split_seed=0)
PROFILES = {
    # seconds: the entropy page's smoke clients, a short quadratic run, 10 FMNIST clients for SGD vs Adam
    "smoke": dict(entropy="smoke", reps=2, t_factors=[0.25, 1, 4, 16, 64],
                  quad=dict(_QUAD, K=5, R=5, rounds=30, eta_fracs=[1.0], seeds=[0, 1]),
                  adam=dict(clients=10, subset=2000, lists=["(2)"], seeds=[0, 1], epochs=1, batch_size=64,
                            lr=0.001),
                  fig6=dict(dissimilarity.FIG6, clients=20, size=100, rounds=6, every=2)),
    # the document's FMNIST setting for Theorem 1 (the entropy page's cached first rounds); 20 quadratic
    # clients in the five alpha groups of setting (1); 20 FMNIST clients on 6,000 images for Figs. 11-12
    "paper": dict(entropy="paper", reps=6, t_factors=[0.25, 0.5, 1, 2, 4, 16, 64, 256],
                  quad=dict(_QUAD, K=5, R=5, rounds=150, eta_fracs=[0.25, 0.5, 1.0],
                            seeds=list(range(8))),
                  adam=dict(clients=20, subset=6000, lists=["(1)", "(2)"], seeds=[0, 1, 2], epochs=2,
                            batch_size=64, lr=0.001),
                  # Fig. 6(a): the document's 250 clients, alphas in [0.01, 50], 500 rounds, every client in
                  # every round; logistic regression for the document's CNN (dissimilarity's docstring)
                  fig6=dict(dissimilarity.FIG6)),
}


def profile(name: str, seeds=None, **overrides) -> dict:
    """The page's settings ("smoke": seconds; "paper": the document's settings, reduced where said).
    ``seeds`` (a list, None: the profile's) replaces the seeds of the quadratic runs and of the SGD-vs-Adam
    runs (Theorem 1 reads the entropy page's runs and keeps its seeds); other overrides that are not None
    replace the profile's top-level settings. Everything is checked before any work."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    cfg = settings.with_overrides(copy.deepcopy(PROFILES[name]), overrides, f"hics theory profile {name!r}")
    if seeds is not None:
        settings.seeds(seeds, "seeds")
        cfg["quad"]["seeds"] = cfg["adam"]["seeds"] = [int(s) for s in seeds]
    if cfg["entropy"] not in entropy.PROFILES:
        raise ValueError(f"entropy must name a profile of the entropy page {sorted(entropy.PROFILES)}, got "
                         f"{cfg['entropy']!r}")
    if isinstance(cfg["reps"], bool) or not isinstance(cfg["reps"], int) or cfg["reps"] < 2:
        raise ValueError(f"reps (replicate local trainings per client) must be an int >= 2, got {cfg['reps']!r}")
    if not cfg["t_factors"] or any(not (isinstance(f, (int, float)) and f > 0) for f in cfg["t_factors"]):
        raise ValueError(f"t_factors must list numbers > 0, got {cfg['t_factors']!r}")
    q = cfg["quad"]
    if not 1 <= q["K"] < len(q["alphas"]) * q["classes"]:
        raise ValueError(f"quad: K must lie in [1, N) with N = {len(q['alphas']) * q['classes']} clients, got "
                         f"{q['K']!r}")
    if q["R"] < 2 or any(not 0 < f <= 1 for f in q["eta_fracs"]):
        raise ValueError(f"quad: Theorem 2 needs R >= 2 and eta <= 1/(8 L R), i.e. eta_fracs in (0, 1]; got "
                         f"R = {q['R']}, eta_fracs = {q['eta_fracs']}")
    if len(q["seeds"]) < 2 or len(cfg["adam"]["seeds"]) < 2:
        raise ValueError("quad.seeds and adam.seeds need at least two seeds (standard errors)")
    a = cfg["adam"]
    bad = [k for k in a["lists"] if k not in CIFAR10["lists"]]
    if bad or not a["lists"]:
        raise ValueError(f"adam.lists must name CIFAR-10 settings {sorted(CIFAR10['lists'])}, got {a['lists']!r}")
    if a["clients"] % 5 or a["subset"] < 100 * a["clients"]:
        raise ValueError(f"adam: clients must be a multiple of 5 and subset >= 100 x clients, got "
                         f"{a['clients']} clients, subset {a['subset']}")
    f6 = cfg["fig6"]
    if f6["model"] not in dissimilarity.MODELS:
        raise ValueError(f"fig6.model must be one of {sorted(dissimilarity.MODELS)}, got {f6['model']!r}")
    if f6["clients"] < 3 or f6["rounds"] < 1 or not 1 <= f6["every"] <= f6["rounds"]:
        raise ValueError(f"fig6: need clients >= 3, rounds >= 1 and 1 <= every <= rounds; got clients "
                         f"{f6['clients']}, rounds {f6['rounds']}, every {f6['every']}")
    return cfg


# =================================================================================== Theorem 1
def mis_confidence(task, seed: int, per_class: int = 200) -> np.ndarray:
    r""":math:`\mathcal E_i` (Definition 1) at the initial model :math:`\theta^0` of ``seed``: the mean
    softmax output of class i over the samples whose label is not i, on the first ``per_class`` training
    images of every class (a balanced pool: the document treats :math:`\mathcal E` as common to the
    clients). Training mode (batch statistics, dropout seeded from ``seed``), batches of the task's B, as
    local training sees the model."""
    y = task.y.cpu().numpy()
    C = _slice_len(sample.output_layer(task)[1])
    idx = np.concatenate([np.flatnonzero(y == c)[:per_class] for c in range(C)])
    if min(np.bincount(y[idx], minlength=C)) < 2:
        raise ValueError(f"mis_confidence needs at least 2 images of every class among the task's data, got "
                         f"{np.bincount(y[idx], minlength=C)}")
    net = engine.to_module(task.model, task.unflatten(task.init_params([seed])), 0).train()
    torch.manual_seed(int(rng(seed, "dropout/E").integers(2**31)))
    xi = torch.as_tensor(idx, device=task.x.device)
    with torch.no_grad():
        s = torch.cat([F.softmax(net(task.x[xi[i:i + task.batch_size]]), 1)
                       for i in range(0, len(xi), task.batch_size)]).double().cpu().numpy()
    yy = y[idx]
    return np.array([s[yy != i, i].mean() for i in range(C)])


def theorem1_bound(D, E_, *, eta: float, R: float, T: float, form: str = "statement") -> np.ndarray:
    r"""Theorem 1's lower bound on :math:`\mathbb E[\hat H(\mathcal D^{(u)}) - \hat H(\mathcal D^{(k)})]`
    for every ordered pair, as a matrix B[u, k]:

    .. math:: \tfrac12\Big(\frac{\eta R}{CT}\sum_c\mathcal E_c\Big)^2\|\mathcal D^{(k)} - \mathbf U\|_2^2
              - c_\infty\frac{\eta R}{T}\|\mathcal D^{(u)} - \mathbf U\|_\infty - \mathcal C\delta,
              \qquad \mathcal C = \frac{\eta R(\eta R + C^2T\ln C)}{C^2T^2},

    with :math:`c_\infty = 1` in the statement (Eq. 8, ``form="statement"``) and :math:`c_\infty = \ln C`
    in the proof's last step (Eq. 50, ``form="proof"``): the proof multiplies
    :math:`\mathbb E[\epsilon] - 1` (Eq. 45) by :math:`\ln C` (Eq. 31), which the statement drops for this
    term but keeps inside :math:`\mathcal C`. ``D`` (N, C) label distributions, ``E_`` (C,) the
    :math:`\mathcal E_i`."""
    D = np.asarray(D, dtype=np.float64)
    E_ = np.asarray(E_, dtype=np.float64)
    if D.ndim != 2 or E_.shape != (D.shape[1],):
        raise ValueError(f"D must be (N, C) and E_ (C,), got {D.shape} and {E_.shape}")
    if form not in ("statement", "proof"):
        raise ValueError(f"form must be 'statement' (Eq. 8) or 'proof' (Eq. 50), got {form!r}")
    for name, v in (("eta", eta), ("R", R), ("T", T)):
        if not (isinstance(v, (int, float, np.integer, np.floating)) and np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    C = D.shape[1]
    a = eta * R / T
    sE = E_.sum()
    delta = np.abs(sE / C - E_).max()
    first = 0.5 * (a * sE / C) ** 2 * ((D - 1 / C) ** 2).sum(1)           # (k,)
    sup = np.abs(D - 1 / C).max(1)                                          # (u,)
    calC = eta * R * (eta * R + C ** 2 * T * math.log(C)) / (C ** 2 * T ** 2)
    c_inf = 1.0 if form == "statement" else math.log(C)
    return first[None, :] - c_inf * a * sup[:, None] - calC * delta


def pair_frame(runs: dict, parts: dict, E_by_seed: dict, cfg: dict, T: float) -> pd.DataFrame:
    """One row per (list, seed, ordered pair u != k): the measured gap H_hat_u - H_hat_k (Eq. 7 on the
    first-round bias updates at temperature T), the true gap H_u - H_k and both forms of the bound, with
    the document's eta and R = local epochs. ``runs``/``parts`` as the entropy page's ``first_rounds``."""
    rows = []
    for (name, seed), table in runs.items():
        D = label_fractions(parts[(name, seed)])
        Hh = sample.entropy_estimate(entropy.matrix(table, "delta_b"), T)
        H = true_entropy(D)
        kw = dict(eta=cfg["lr"], R=cfg["epochs"], T=T)
        bs, bp = (theorem1_bound(D, E_by_seed[seed], form=f, **kw) for f in ("statement", "proof"))
        u, k = np.nonzero(~np.eye(len(D), dtype=bool))
        rows.append(pd.DataFrame({"list": name, "seed": seed, "u": u, "k": k, "gap": Hh[u] - Hh[k],
                                  "true_gap": H[u] - H[k], "bound_statement": bs[u, k], "bound_proof": bp[u, k]}))
    return pd.concat(rows, ignore_index=True)


def temperature_sweep(runs: dict, parts: dict, E_by_seed: dict, cfg: dict, factors) -> pd.DataFrame:
    """Per temperature T = f x T_doc (same bias updates, no retraining): the share of ordered pairs whose
    measured gap lies below each form of the bound, the share for which even the true entropies would
    (a perfect estimator, H_hat = H), the largest value the stated bound takes over the pairs, and the
    spread of the estimates (mean over runs of max - min)."""
    rows = []
    for f in factors:
        T = f * HICS["T"]
        pf = pair_frame(runs, parts, E_by_seed, cfg, T)
        spread = np.mean([np.ptp(sample.entropy_estimate(entropy.matrix(t, "delta_b"), T)) for t in runs.values()])
        rows.append(dict(factor=f, T=T, below_statement=float((pf.gap < pf.bound_statement).mean()),
                         below_proof=float((pf.gap < pf.bound_proof).mean()),
                         perfect_below_statement=float((pf.true_gap < pf.bound_statement).mean()),
                         perfect_below_proof=float((pf.true_gap < pf.bound_proof).mean()),
                         largest_bound=float(pf.bound_statement.max()), spread=float(spread)))
    return pd.DataFrame(rows)


def bias_updates(task, w0: torch.Tensor, clients, *, seed: int, t: int = 0, opt: str = "sgd",
                 lr: float | None = None) -> np.ndarray:
    r"""(len(clients), C) float64: each client's output-bias update :math:`\Delta\mathbf b = \mathbf b_k -
    \mathbf b` (document sign) after one local training from the flat model ``w0`` (1, d), with the
    minibatches the task draws for (``seed``, round ``t``, client) and ``opt`` "sgd" (plain) or "adam"
    (torch's defaults, :func:`flkit.engine.local_train`), one client at a time; dropout from
    ``rng(seed, "dropout/<t>/<client>")``. Different ``t`` give independent minibatch orders
    (the replicates of :func:`replicates`)."""
    if opt not in ("sgd", "adam"):
        raise ValueError(f"opt must be 'sgd' or 'adam', got {opt!r}")
    w0 = torch.as_tensor(w0)
    if w0.dim() != 2 or w0.shape[0] != 1 or w0.shape[1] != task.dim:
        raise ValueError(f"w0 must have shape (1, {task.dim}), got {tuple(w0.shape)}")
    _, bias = sample.output_layer(task)
    out = []
    for k in clients:
        batches, steps = task.batches(int(seed), int(t), int(k))
        torch.manual_seed(int(rng(int(seed), f"dropout/{t}/{int(k)}").integers(2**31)))
        new, _ = engine.local_train(task.model, task.unflatten(w0), task.x, task.y, batches,
                                    lr=float(task.local_lr if lr is None else lr), steps=steps, opt=opt,
                                    vectorized=False)
        out.append((task.flatten(new) - w0)[0, bias].double().cpu().numpy())
    return np.stack(out)


def replicate_clients(pf: pd.DataFrame, D: np.ndarray) -> list[tuple[int, int]]:
    """The ordered pairs whose gaps are replicated: the pair that falls furthest below the proof's bound
    in one realisation (``pf``, one list and seed), the most against the least balanced client (largest and
    smallest H), each in both orders."""
    g = pf.assign(m=pf.gap - pf.bound_proof).sort_values("m")
    H = true_entropy(D)
    u, k, hi, lo = int(g.u.iloc[0]), int(g.k.iloc[0]), int(np.argmax(H)), int(np.argmin(H))
    return list(dict.fromkeys([(u, k), (k, u), (hi, lo), (lo, hi)]))


def theorem1_inputs(cfg: dict, data, store) -> dict:
    r"""Everything Theorem 1 is evaluated on: the entropy page's profile ``ecfg`` and first rounds (``runs``,
    ``parts``, read from ``store`` when cached; ``seconds`` they took), :math:`\mathcal E` at each seed's
    initial model (``E``) and the :func:`pair_frame` at the document's T (``pairs``)."""
    ecfg = entropy.profile(cfg["entropy"])
    runs, parts, secs = entropy.first_rounds(ecfg, data, store)
    E_by_seed = {}
    for (name, seed), part in parts.items():
        if seed not in E_by_seed:
            E_by_seed[seed] = mis_confidence(entropy.fmnist_task(data, part, ecfg), seed)
    return dict(ecfg=ecfg, runs=runs, parts=parts, seconds=secs, E=E_by_seed,
                pairs=pair_frame(runs, parts, E_by_seed, ecfg, HICS["T"]))


def theorem1_replicates(inp: dict, cfg: dict, data, store, name: str, seed: int) -> tuple[list, pd.DataFrame]:
    """The pairs of :func:`replicate_clients` for one list and seed and their clients' :func:`replicates`
    (``cfg['reps']`` local trainings each), cached in ``store``. Returns (pairs, tidy replicates)."""
    ecfg, part = inp["ecfg"], inp["parts"][(name, seed)]
    pf = inp["pairs"][(inp["pairs"]["list"] == name) & (inp["pairs"]["seed"] == seed)]
    pairs = replicate_clients(pf, label_fractions(part))
    who = sorted({c for p in pairs for c in p})
    config = dict(experiment="theorem1_replicates", list=name, alphas=list(FIG9[name]), seed=seed,
                  replicated=who, reps=cfg["reps"], model="hics_fmnist_paper",
                  **{k: ecfg[k] for k in ("clients", "subset", "epochs", "batch_size", "lr")})
    task = entropy.fmnist_task(data, part, ecfg)
    rep = results.sweep([config], lambda c: replicates(task, seed, who, cfg["reps"]), store, progress=False)
    return pairs, rep


def replicates(task, seed: int, clients, reps: int) -> pd.DataFrame:
    """The bias updates of ``clients`` after ``reps`` independent local trainings from the same initial
    model (the minibatch orders of rounds 1..reps of ``seed``). Tidy rows: round (= replicate), metric
    ("delta_b"), client, class, value."""
    w0 = task.init_params([seed])
    out = []
    for r in range(1, reps + 1):
        t = _tidy_bias(bias_updates(task, w0, clients, seed=seed, t=r), r)
        t["client"] = np.asarray(clients)[t["client"].to_numpy()]
        out.append(t)
    return pd.concat(out, ignore_index=True)


def _tidy_bias(db: np.ndarray, rnd: int) -> pd.DataFrame:
    N, C = db.shape
    return pd.DataFrame({"round": rnd, "metric": "delta_b", "client": np.repeat(np.arange(N), C),
                         "class": np.tile(np.arange(C), N), "value": db.reshape(-1)})


def replicate_pairs(rep: pd.DataFrame, pf: pd.DataFrame, pairs, T: float) -> pd.DataFrame:
    """For each ordered pair (u, k): the gaps of H_hat (Eq. 7 at T) over the replicates of
    :func:`replicates` (``gaps``), their mean and standard error, the one cached realisation, the true
    gap and both bounds (from ``pf``, one list and seed)."""
    Hh = {(r, c): sample.entropy_estimate(g.sort_values("class").value.to_numpy(), T)
          for (r, c), g in rep.groupby(["round", "client"])}
    reps = sorted(rep["round"].unique())
    rows = []
    for u, k in pairs:
        g = np.array([Hh[(r, u)] - Hh[(r, k)] for r in reps])
        b = pf[(pf.u == u) & (pf.k == k)].iloc[0]
        rows.append(dict(u=u, k=k, gap_mean=float(g.mean()), gap_se=float(g.std(ddof=1) / math.sqrt(len(g))),
                         gaps=g, one_realisation=float(b.gap), true_gap=float(b.true_gap),
                         bound_statement=float(b.bound_statement), bound_proof=float(b.bound_proof)))
    return pd.DataFrame(rows)


def theorem1_constants(E_by_seed: dict, ecfg: dict, T: float) -> tuple[pd.DataFrame, dict]:
    r"""Per seed: :math:`\sum_c\mathcal E_c`, the smallest and largest :math:`\mathcal E_i` and
    :math:`\delta`; and the page's values: :math:`\eta R/T`, :math:`\mathcal C`, the largest value of the
    bound's only positive term (a single-class client k), the means of :math:`\sum\mathcal E` and
    :math:`\delta` and the range of :math:`\mathcal E_i`."""
    rows = [dict(seed=s, sum_E=e.sum(), E_min=e.min(), E_max=e.max(), delta=np.abs(e.sum() / len(e) - e).max())
            for s, e in E_by_seed.items()]
    cst = pd.DataFrame(rows)
    C = len(next(iter(E_by_seed.values())))
    a = ecfg["lr"] * ecfg["epochs"] / T
    one_hot = (1 - 1 / C) ** 2 + (C - 1) / C ** 2                          # ||e_c - U||^2
    vals = dict(a_ratio=a, calC=a ** 2 / C ** 2 + a * math.log(C),
                first_max=0.5 * (a * cst.sum_E.max() / C) ** 2 * one_hot, delta_mean=cst.delta.mean(),
                E_lo=cst.E_min.min(), E_hi=cst.E_max.max(), sumE=cst.sum_E.mean())
    return cst, {k: float(v) for k, v in vals.items()}


def theorem1_summary(pf: pd.DataFrame, rp: pd.DataFrame, parts: dict, run: tuple) -> tuple[pd.DataFrame, list, dict]:
    """The share of ordered pairs below each bound per (list, seed); one check per replicated pair and
    form (mean gap over the replicates >= bound, the book's rule); the page's values (shares over all
    runs, the share of violations of the stated bound whose u has the smaller entropy, the worst
    replicated pair ``rp.iloc[0]`` of ``run`` = (list, seed) with its clients' entropies)."""
    share = pf.groupby(["list", "seed"]).apply(lambda g: pd.Series({
        "pairs": len(g), "below Eq. 8 (%)": 100 * (g.gap < g.bound_statement).mean(),
        "below Eq. 50 (%)": 100 * (g.gap < g.bound_proof).mean(),
        "perfect estimator below Eq. 8 (%)": 100 * (g.true_gap < g.bound_statement).mean()}),
        include_groups=False).astype({"pairs": int})
    checks = [claims.compare(f"Theorem 1 ({eq}), pair u={r.u}, k={r.k}: mean gap >= bound", r.gaps,
                             np.full(len(r.gaps), getattr(r, f"bound_{form}")))
              for r in rp.itertuples() for form, eq in (("statement", "Eq. 8"), ("proof", "Eq. 50"))]
    H = {key: true_entropy(label_fractions(p)) for key, p in parts.items()}
    viol = pf[pf.gap < pf.bound_statement]
    less = [H[(r.list, r.seed)][r.u] < H[(r.list, r.seed)][r.k] for r in viol.itertuples()]
    w = rp.iloc[0]
    vals = dict(below_stmt=100 * (pf.gap < pf.bound_statement).mean(),
                below_proof=100 * (pf.gap < pf.bound_proof).mean(),
                perfect_stmt=100 * (pf.true_gap < pf.bound_statement).mean(),
                less_balanced=100 * float(np.mean(less)) if less else float("nan"),
                **{f"w_{k}": w[k] for k in ("gap_mean", "gap_se", "bound_statement", "bound_proof", "true_gap")},
                w_Hu=H[run][int(w.u)], w_Hk=H[run][int(w.k)])
    vals = {k: float(v) for k, v in vals.items()}
    vals.update(w_u=int(w.u), w_k=int(w.k))
    return share, checks, vals


def plot_theorem1(pf: pd.DataFrame, rp: pd.DataFrame, title: str):
    """Measured gap against the bound for every ordered pair of one run, statement (left) and proof
    (right); below the diagonal the bound is violated. The replicated pairs: mean +- 2 se."""
    fig, axes = plots.figure(1, 2, width=7.0, row_height=3.5)
    for ax, form, name in zip(axes[0], ("statement", "proof"), ("Eq. 8 (statement)", r"Eq. 50 (proof, with $\ln C$)")):
        col = f"bound_{form}"
        below = pf.gap < pf[col]
        ax.scatter(pf.loc[~below, col], pf.loc[~below, "gap"], s=4, alpha=0.35, color="tab:blue", label="respected")
        ax.scatter(pf.loc[below, col], pf.loc[below, "gap"], s=4, alpha=0.5, color="tab:red", label="violated")
        ax.errorbar(rp[col], rp.gap_mean, yerr=2 * rp.gap_se, fmt="o", ms=4, color="k", capsize=2,
                    label="replicated pairs (mean ± 2 se)")
        lo = min(pf[col].min(), pf.gap.min())
        hi = max(pf[col].max(), pf.gap.max())
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set(xlabel="lower bound on the gap (nats)", ylabel=r"measured $\hat H_u - \hat H_k$ (nats)", title=name)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncol=3, markerscale=2)
    fig.suptitle(title)
    return fig


def plot_temperature_sweep(ts: pd.DataFrame, title: str):
    """Share of ordered pairs below each form of the bound against T / T_doc, measured and for a perfect
    estimator (H_hat = H)."""
    fig, axes = plots.figure(1, 1, width=6.0, row_height=3.3)
    ax = axes[0, 0]
    for col, lab, st in (("below_statement", "measured, Eq. 8", "o-"), ("below_proof", "measured, Eq. 50", "s-"),
                         ("perfect_below_statement", r"perfect estimator ($\hat H = H$), Eq. 8", "o:"),
                         ("perfect_below_proof", r"perfect estimator, Eq. 50", "s:")):
        ax.plot(ts.factor, 100 * ts[col], st, label=lab, ms=4)
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set(xscale="log", xlabel=r"temperature $T / T_{doc}$ ($T_{doc}$ = 0.0025)",
           ylabel="ordered pairs below the bound (%)", title=title)
    ax.legend()
    return fig


# ============================================================================= Theorem 2, Lemma 2
def successive_inclusion(weights, k: int) -> np.ndarray:
    r"""Exact :math:`P(i \in \mathcal S)` when k distinct clients are drawn one after another, each draw
    proportional to ``weights`` among the clients not yet drawn (successive sampling: numpy's
    ``choice(replace=False, p=...)``, :func:`flkit.sample.hics_draw`'s "paper" rule). Clients with equal
    weights are grouped and the number drawn from each group is tracked through the k draws (a dynamic
    programme over count vectors), so it is exact and fast when the weights take few values (HiCS: one
    value per cluster); with n distinct weights the states are the subsets of size <= k.
    Returns (n,) summing to k."""
    w = np.asarray(weights, dtype=np.float64)
    k = int(k)
    if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"weights must be a 1-D array of finite numbers >= 0, got {weights!r}")
    if not 1 <= k <= int((w > 0).sum()):
        raise ValueError(f"k must lie in [1, number of positive weights = {int((w > 0).sum())}], got {k}")
    vals, inv, size = np.unique(w, return_inverse=True, return_counts=True)
    states = {tuple([0] * len(vals)): 1.0}
    for _ in range(k):
        nxt: dict = {}
        for c, pr in states.items():
            left = size - np.asarray(c)
            tot = float((left * vals).sum())
            for g in np.flatnonzero((left > 0) & (vals > 0)):
                c2 = list(c)
                c2[g] += 1
                key = tuple(c2)
                nxt[key] = nxt.get(key, 0.0) + pr * left[g] * vals[g] / tot
        states = nxt
    mean = sum(np.asarray(c, dtype=np.float64) * pr for c, pr in states.items())
    return (mean / size)[inv]


@dataclass(frozen=True)
class HiCSRecorder:
    r"""A :class:`flkit.sample.HiCS` that also writes down, after each selection, the probabilities
    Theorem 2 is about: :math:`\omega_k^t = P(k\in\mathcal S^t)/|\mathcal S^t|` (the weight of client k in
    :math:`\mathbb E[\frac1{|\mathcal S^t|}\sum_{k\in\mathcal S^t} x_k] = \sum_k\omega_k^t x_k`), and the
    form the document says HiCS leads to (Sec. 3.5),
    :math:`\omega_k^t \propto p_k\exp(\gamma^t\hat H_k)`, from the same round's estimates. Selection,
    state and draws are the wrapped sampler's; ``log`` collects one dict per round: t, mode (per run),
    omega (R, N), generic (R, N) (NaN in warm-up rounds). Paper variant, every client available."""

    hics: sample.HiCS
    log: list = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.hics, sample.HiCS) or self.hics.variant != "paper":
            raise ValueError("HiCSRecorder wraps a flkit.sample.HiCS with variant='paper'")

    def init(self, runs, num_clients, sizes, seeds):
        self.log.clear()
        return self.hics.init(runs, num_clients, sizes, seeds)

    def select(self, state, t, available, probe=None):
        pool = state.unsampled.copy()
        counts, state = self.hics.select(state, t, available, probe)
        R, N = state.sizes.shape
        omega, generic = np.zeros((R, N)), np.full((R, N), np.nan)
        for r in range(R):
            if state.mode[r] == "warmup":
                pr = pool[r].astype(np.float64)
                omega[r] = pr / pr.sum()
            elif state.mode[r] == "hics":
                lab, pi, n = state.labels[r], state.probs[r], state.sizes[r]
                within = np.bincount(lab, weights=n, minlength=len(pi))
                incl = successive_inclusion(pi[lab] * n / within[lab], self.hics.k)
                omega[r] = incl / incl.sum()
                gamma = self.hics.gamma0 * (1 - (t + 1) / self.hics.rounds)
                z = np.log(n / n.sum()) + gamma * state.entropy[r]
                generic[r] = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
            else:
                raise ValueError(f"HiCSRecorder expects every client available; round {t} had mode {state.mode[r]!r}")
        self.log.append(dict(t=t, mode=list(state.mode), omega=omega, generic=generic))
        return counts, state

    def observe(self, state, t, pairs, delta):
        return self.hics.observe(state, t, pairs, delta)


def label_quadratic(D, A_diag, scale: float = 1.0) -> QuadraticTask:
    r"""The "label-mixture" quadratic clients: client k's objective is its label mix of one quadratic per
    class, :math:`F_k(\theta) = \sum_c D_c^{(k)}\tfrac12(\theta - s\mathbf e_c)^\top A(\theta - s\mathbf e_c)`
    = :math:`\tfrac12(\theta - s\mathcal D^{(k)})^\top A(\theta - s\mathcal D^{(k)})` + const, with one
    diagonal A for every client. Then :math:`F = \frac1N\sum_k F_k` (:math:`p_k = 1/N`) is L-smooth and
    :math:`\mu`-strongly convex with L = max A, :math:`\mu` = min A, and
    :math:`\nabla F_k - \nabla F = sA(\bar{\mathcal D} - \mathcal D^{(k)})` does not depend on
    :math:`\theta`: Assumption 1 holds with :math:`\sigma_k^2 = s^2\|A(\mathcal D^{(k)} - \bar{\mathcal D})\|^2`
    exactly (:func:`sigma2`). The parameters play the output bias's role: a client's first local update
    from 0 points along :math:`A\mathcal D^{(k)}`, as the bias update along the label fractions (Eq. 6)."""
    D = np.asarray(D, dtype=np.float64)
    a = np.asarray(A_diag, dtype=np.float64)
    if D.ndim != 2 or a.shape != (D.shape[1],) or np.any(a <= 0) or scale <= 0:
        raise ValueError(f"need D (N, C), A_diag (C,) > 0 and scale > 0; got {D.shape}, {a.shape}, scale {scale}")
    A = torch.tensor(np.broadcast_to(a, D.shape).copy())
    return QuadraticTask(QuadraticProblem(A, torch.tensor(scale * D)), local_steps=1)


def shifted_dirichlet(alphas, C: int, seed: int) -> np.ndarray:
    r"""Label distributions (len(alphas) * C, C): for each alpha a base distribution drawn from
    Dir(alpha, ..., alpha) (``rng(seed, "data")``; drawn in log space, exact for the document's alpha =
    0.001) and its C cyclic shifts over the classes, one client each. Every group then averages to the
    uniform distribution, so with equal data sizes (:math:`p_k = 1/N`) the clients together hold balanced
    labels, as the document's splits do, and the clients of a group share one entropy."""
    g = rng(seed, "data")
    out = []
    for a in alphas:
        if not a > 0:
            raise ValueError(f"every alpha must be > 0, got {a!r}")
        # X_i = Gamma(a + 1) U_i^(1/a) is Gamma(a): log-space keeps tiny alphas finite
        z = np.log(g.gamma(a + 1.0, size=C)) + np.log(g.uniform(size=C)) / a
        base = np.exp(z - z.max())
        base /= base.sum()
        out += [np.roll(base, j) for j in range(C)]
    return np.array(out)


def quadratic_clients(q: dict) -> tuple[np.ndarray, QuadraticTask]:
    """The page's quadratic clients (profile's ``quad``): label distributions :func:`shifted_dirichlet` with
    the alpha groups of FMNIST setting (1) (5 groups of C = 10 clients: N = 50, the document's FMNIST
    system), A = diag(geomspace(mu, L, C)), R local GD steps. Returns (D (N, C), task)."""
    D = shifted_dirichlet(q["alphas"], q["classes"], q["split_seed"])
    task = label_quadratic(D, np.geomspace(q["mu"], q["L"], q["classes"]), q["scale"])
    return D, QuadraticTask(task.problem, local_steps=q["R"])


def sigma2(task: QuadraticTask) -> np.ndarray:
    r""":math:`\sigma_k^2 = \|\nabla F_k(\theta) - \nabla F(\theta)\|^2` (N,) for clients sharing one A
    (then it does not depend on :math:`\theta`)."""
    A, b = task.problem.A, task.problem.b
    if not torch.allclose(A, A[:1].expand_as(A)):
        raise ValueError("sigma2 needs clients with one common Hessian A")
    d = A * (b - b.mean(0))
    return (d * d).sum(1).numpy()


def theorem2_constants(L: float, R: int, eta: float, noise2: float = 0.0) -> dict:
    r"""Appendix 6.7.2, Eq. 66: :math:`\mathcal A_1 = R\eta(\frac12 - 30L^2R^2\eta^2)`,
    :math:`\mathcal A_2 = \frac{60L^2R^3\eta^3 + 2R\eta}{R\eta(1 - 60L^2R^2\eta^2)}`,
    :math:`\Phi = \frac{(10L^2R\eta^2 + L\eta)\sigma^2}{1 - 60L^2R^2\eta^2}` (``noise2`` = :math:`\sigma^2`,
    the variance of the stochastic gradients). The theorem needs :math:`\eta \le 1/(8LR)` and R >= 2."""
    if not (L > 0 and eta > 0 and noise2 >= 0) or isinstance(R, bool) or int(R) != R or R < 2:
        raise ValueError(f"need L > 0, eta > 0, noise2 >= 0 and an int R >= 2; got L={L}, R={R}, eta={eta}, "
                         f"noise2={noise2}")
    if eta > 1 / (8 * L * R) * (1 + 1e-12):
        raise ValueError(f"Theorem 2 needs eta <= 1/(8 L R) = {1 / (8 * L * R):.6g}, got eta = {eta}")
    q = 60 * L ** 2 * R ** 2 * eta ** 2
    return dict(A1=R * eta * (0.5 - 30 * L ** 2 * R ** 2 * eta ** 2),
                A2=(60 * L ** 2 * R ** 3 * eta ** 3 + 2 * R * eta) / (R * eta * (1 - q)),
                Phi=(10 * L ** 2 * R * eta ** 2 + L * eta) * noise2 / (1 - q))


def theorem2_bound(gap0: float, weighted_sigma2, *, L: float, R: int, eta: float, noise2: float = 0.0) -> float:
    r"""Right-hand side of Theorem 2 (Eq. 11 with Eq. 66's constants):
    :math:`\frac1{\mathcal T}\big(\frac{F(\theta^0) - F(\theta^*)}{\mathcal A_1} + \mathcal A_2\sum_{t<\mathcal T}
    \sum_k\omega_k^t\sigma_k^2\big) + \Phi`, with ``weighted_sigma2`` the per-round values
    :math:`\sum_k\omega_k^t\sigma_k^2` (length :math:`\mathcal T`)."""
    c = theorem2_constants(L, R, eta, noise2)
    ws = np.asarray(weighted_sigma2, dtype=np.float64)
    return float((gap0 / c["A1"] + c["A2"] * ws.sum()) / len(ws) + c["Phi"])


def lemma2_bound(sigma2_k, grad_norm2, *, R: int, eta: float, noise2: float = 0.0) -> np.ndarray:
    r"""Lemma 2 (Eq. 54): :math:`\mathbb E\|\theta_k^{t,r} - \theta^t\|^2 \le 5R\eta^2(\sigma^2 + 6R\sigma_k^2)
    + 30R^2\eta^2\|\nabla F(\theta^t)\|^2` for every r <= R (broadcast over clients and runs)."""
    return 5 * R * eta ** 2 * (noise2 + 6 * R * np.asarray(sigma2_k)) + 30 * R ** 2 * eta ** 2 * np.asarray(grad_norm2)


def lemma2_ratio(task: QuadraticTask, w: torch.Tensor, eta: torch.Tensor) -> torch.Tensor:
    r"""Per run (rows of w): the largest ratio, over clients k and local steps r = 1..R, of the exact
    :math:`\|\theta_k^{t,r} - \theta^t\|^2` (local GD on the quadratic:
    :math:`(I - (I - \eta A)^r)(\theta^t - b_k)`) to Lemma 2's bound; <= 1 means the lemma holds."""
    A, b = task.problem.A, task.problem.b
    s2 = torch.as_tensor(sigma2(task))
    g2 = task.metrics(w)["grad_norm2"]
    R = task.local_steps
    e = eta.reshape(-1, 1, 1).to(A.dtype)
    dev = torch.stack([((1 - (1 - e * A) ** r) * (w.unsqueeze(1) - b)).pow(2).sum(-1) for r in range(1, R + 1)])
    bound = 5 * R * e[:, :, 0] ** 2 * 6 * R * s2 + 30 * R ** 2 * e[:, :, 0] ** 2 * g2[:, None]
    return (dev / bound).amax(dim=(0, 2))


def run_quadratic(q: dict) -> pd.DataFrame:
    r"""FedAvg (server step = local step :math:`\eta`, so :math:`\theta^{t+1}` is the mean of the local
    models, Eq. 57) on the label-mixture quadratics, with K clients per round drawn uniformly ("random",
    :math:`\omega_k^t = 1/N`) or by HiCS (:class:`flkit.sample.HiCS`, paper variant, the parameters as
    coordinates of the bias, temperature ``q['temperature']``), for every :math:`\eta` = f/(8LR), f in
    ``eta_fracs``, through :func:`flkit.fl.run`. Tidy rows (method, frac, eta, seed, round, metric, value):
    grad_norm2 and gap per round, ``weighted_sigma2`` :math:`\sum_k\omega_k^t\sigma_k^2` (HiCS: exact
    inclusion probabilities, :class:`HiCSRecorder`), ``generic_sigma2`` the same under the document's
    form :math:`\omega\propto p\exp(\gamma^t\hat H)`, ``tv_generic`` the total variation between the two,
    ``bias2`` :math:`\|A(\sum_k\omega_k^t b_k - \bar b)\|^2`, the squared gradient of F at the point the
    round's sampling pulls the mean model towards (0 for random sampling), ``lemma2`` the largest ratio of
    Lemma 2 (:func:`lemma2_ratio`)."""
    D, task = quadratic_clients(q)
    C, R, T = q["classes"], q["R"], q["rounds"]
    L = float(task.problem.A.max())
    s2 = sigma2(task)
    A, b = task.problem.A[0].numpy(), task.problem.b.numpy()
    algs, recs, etas = {}, {}, []
    for f in q["eta_fracs"]:
        eta = f / (8 * L * R)
        rec = HiCSRecorder(sample.HiCS(k=q["K"], rounds=T, bias=slice(0, C), temperature=q["temperature"],
                                       lam=q["lam"], gamma0=q["gamma0"]))
        algs[f"random|{f}"] = fl.Algorithm(aggregate.FedAvg(), sample.UniformK(q["K"]), lr=eta, local_lr=eta)
        algs[f"HiCS|{f}"] = fl.Algorithm(aggregate.FedAvg(), rec, lr=eta, local_lr=eta)
        recs[f"HiCS|{f}"] = rec
        etas += [eta, eta]
    seeds = list(q["seeds"])
    eta_rows = torch.tensor(np.repeat(etas, len(seeds)), dtype=torch.float64)
    res = fl.run(task, algs, seeds=seeds, rounds=T, every=1, diverge_factor=None,
                 track=lambda w: {"lemma2": lemma2_ratio(task, w, eta_rows)})
    df = res.tidy()
    df = df[df.metric.isin(["gap", "grad_norm2", "lemma2"])].copy()
    extra = []
    for name, rec in recs.items():
        om = np.stack([e["omega"] for e in rec.log])                        # (T, S, N)
        ge = np.stack([e["generic"] for e in rec.log])
        for j, s in enumerate(seeds):
            for metric, v in (("weighted_sigma2", om[:, j] @ s2), ("generic_sigma2", ge[:, j] @ s2),
                              ("tv_generic", 0.5 * np.abs(om[:, j] - ge[:, j]).sum(1)),
                              ("bias2", (((om[:, j] @ b - b.mean(0)) * A) ** 2).sum(1))):
                extra.append(pd.DataFrame({"method": name, "seed": s, "round": np.arange(T), "metric": metric,
                                           "value": v}))
    for name in algs:
        if name.startswith("random"):
            for s in seeds:
                extra.append(pd.DataFrame({"method": name, "seed": s, "round": np.arange(T),
                                           "metric": "weighted_sigma2", "value": s2.mean()}))
    df = pd.concat([df] + extra, ignore_index=True)
    split = df.method.str.split("|", expand=True)
    df["method"], df["frac"] = split[0], split[1].astype(float)
    df["eta"] = df.frac / (8 * L * R)
    return df


def bound_table(df: pd.DataFrame, q: dict, task: QuadraticTask) -> pd.DataFrame:
    r"""Per (method, frac, seed): Theorem 2's bound (:func:`theorem2_bound`, :math:`\sigma^2 = 0`: local
    GD is exact), the measured :math:`\min_{t<\mathcal T}\|\nabla F(\theta^t)\|^2` (the statement) and
    :math:`\frac1{\mathcal T}\sum_{t<\mathcal T}\|\nabla F(\theta^t)\|^2` (what the proof's telescoping
    bounds), and the largest Lemma 2 ratio over rounds."""
    L, R, T = float(task.problem.A.max()), q["R"], q["rounds"]
    rows = []
    for (m, f, s), g in df.groupby(["method", "frac", "seed"]):
        piv = g.pivot_table(index="round", columns="metric", values="value")
        gn = piv["grad_norm2"].to_numpy()[:T]
        eta = f / (8 * L * R)
        rows.append(dict(method=m, frac=f, eta=eta, seed=s,
                         bound=theorem2_bound(float(piv["gap"].iloc[0]), piv["weighted_sigma2"].to_numpy()[:T],
                                              L=L, R=R, eta=eta),
                         heterogeneity_term=(theorem2_constants(L, R, eta)["A2"]
                                             * piv["weighted_sigma2"].to_numpy()[:T].mean()),
                         min_grad2=float(gn.min()), mean_grad2=float(gn.mean()),
                         lemma2_max=float(piv["lemma2"].max())))
    return pd.DataFrame(rows)


def theorem2_summary(qdf: pd.DataFrame, bt: pd.DataFrame, q: dict, s2: np.ndarray) -> tuple[pd.DataFrame, list, dict]:
    """The page's Theorem 2 table (per method and step: bound, sampling term, measured average and minimum
    with standard errors over seeds, their ratio, the largest Lemma 2 ratio), its checks (the bound and
    Lemma 2 hold; the document's claims on HiCS: smaller sampling term, faster convergence, the sampling
    term returning to random sampling's as gamma -> 0, omega ~ p exp(gamma H_hat); and the observed late
    excess of HiCS at the largest step, checked in the document's direction: HiCS no slower late in training)
    and the values its text quotes."""
    summ = bt.groupby(["method", "frac", "eta"]).agg(
        bound=("bound", "mean"), sampling_term=("heterogeneity_term", "mean"), avg_grad2=("mean_grad2", "mean"),
        avg_se=("mean_grad2", claims.se), min_grad2=("min_grad2", "mean"), min_se=("min_grad2", claims.se),
        lemma2=("lemma2_max", "max")).reset_index()
    summ["bound / average"] = summ.bound / summ.avg_grad2
    checks = [claims.compare(f"Theorem 2, {m}, eta = {f:g}/(8LR): bound >= average of ||grad F||^2", g.bound,
                             g.mean_grad2)
              for (m, f), g in bt.groupby(["method", "frac"])]
    checks.append(claims.compare("Lemma 2 holds (1 >= largest ratio, all clients, steps and rounds)",
                                 np.ones(len(bt)), bt.lemma2_max))
    piv = lambda col: bt.pivot_table(index=["frac", "seed"], columns="method", values=col)  # noqa: E731
    het, avg, mn = piv("heterogeneity_term"), piv("mean_grad2"), piv("min_grad2")
    ws = qdf[qdf.metric == "weighted_sigma2"].pivot_table(index=["frac", "seed", "round"], columns="method",
                                                          values="value")
    last = ws.xs(q["rounds"] - 1, level="round")
    tv = qdf[qdf.metric == "tv_generic"].dropna()
    tv_first = tv[tv["round"] == tv["round"].min()].value
    fmax = max(q["eta_fracs"])
    g = qdf[(qdf.frac == fmax) & (qdf.metric == "grad_norm2") & (qdf["round"] >= 0.75 * q["rounds"])]
    late = g.groupby(["method", "seed"]).value.mean().unstack("method")
    checks += [
        claims.compare("document: HiCS lowers the sampling term of the bound (random - HiCS)", het["random"],
                       het["HiCS"]),
        claims.compare("document: hence HiCS converges faster (average ||grad F||^2, random - HiCS)", avg["random"],
                       avg["HiCS"]),
        claims.compare("document: hence HiCS converges faster (min ||grad F||^2, random - HiCS)", mn["random"],
                       mn["HiCS"]),
        claims.agree("document: as gamma -> 0 HiCS's sampling term approaches random sampling's (last round)",
                     last["HiCS"], float(s2.mean()), threshold=0.05 * float(s2.mean())),
        claims.agree("document: HiCS leads to omega ~ p exp(gamma H_hat) (total variation, first clustered round)",
                     tv_first, 0.0, threshold=0.05),
        claims.compare(f"document: hence HiCS converges faster, also late (||grad F||^2 over the last quarter of the "
                       f"rounds, eta = {fmax:g}/(8LR), random - HiCS)", late["random"], late["HiCS"])]
    wsm = ws.groupby(["frac", "seed"]).mean()
    bias = qdf[(qdf.frac == fmax) & (qdf.metric == "bias2") & (qdf["round"] == q["rounds"] - 1)].value
    vals = dict(avg_hics=avg["HiCS"].mean(), avg_rand=avg["random"].mean(), min_hics=mn["HiCS"].mean(),
                min_rand=mn["random"].mean(), last_hics=last["HiCS"].mean(), s2_mean=s2.mean(),
                tv_first=tv_first.mean(), tv_last=tv[tv["round"] == q["rounds"] - 1].value.mean(),
                ratio_lo=summ["bound / average"].min(), ratio_hi=summ["bound / average"].max(),
                lemma2=bt.lemma2_max.max(), floor=summ.sampling_term.min(), late_hics=late["HiCS"].mean(),
                late_rand=late["random"].mean(), fmax=fmax, ws_hics=wsm["HiCS"].mean(), ws_rand=wsm["random"].mean(),
                bias_last=bias.mean())
    return summ, checks, {k: float(v) for k, v in vals.items()}


_COLORS = {"random": "tab:grey", "HiCS": "tab:orange"}


def plot_theorem2_rounds(df: pd.DataFrame, bt: pd.DataFrame, frac: float, title: str):
    r"""Left: :math:`\sum_k\omega_k^t\sigma_k^2` per round (mean over seeds) for HiCS (exact probabilities
    and the document's form) and random sampling. Right: :math:`\|\nabla F(\theta^t)\|^2` (mean +- 2 se
    over seeds) with each method's Theorem 2 bound (dashed)."""
    fig, axes = plots.figure(1, 2, width=7.0, row_height=3.6)
    d = df[df.frac == frac]
    ax = axes[0, 0]
    for (m, metric), st in {("HiCS", "weighted_sigma2"): "-", ("HiCS", "generic_sigma2"): ":",
                            ("random", "weighted_sigma2"): "-"}.items():
        g = d[(d.method == m) & (d.metric == metric)].groupby("round").value.mean()
        lab = {"weighted_sigma2": "exact", "generic_sigma2": r"form $p_k e^{\gamma^t\hat H_k}$"}[metric]
        ax.plot(g.index, g.values, st, color=_COLORS[m], label=f"{m}, {lab}" if m == "HiCS" else m)
    ax.set(xlabel="round t", ylabel=r"$\sum_k \omega_k^t \sigma_k^2$", title=r"sampling term of Theorem 2")
    ax.legend(loc="center left", bbox_to_anchor=(0.12, 0.55))
    ax = axes[0, 1]
    for m in ("random", "HiCS"):
        g = d[(d.method == m) & (d.metric == "grad_norm2")].groupby("round").value
        mean, se = g.mean(), g.std(ddof=1) / np.sqrt(g.count())
        ax.plot(mean.index, mean.values, color=_COLORS[m], label=m)
        ax.fill_between(mean.index, (mean - 2 * se).clip(lower=1e-300), mean + 2 * se, color=_COLORS[m], alpha=0.25)
        ax.axhline(bt[(bt.method == m) & (bt.frac == frac)].bound.mean(), color=_COLORS[m], ls="--", lw=1,
                   label=f"{m}: bound (dashed)")
    ax.set(yscale="log", xlabel="round t", ylabel=r"$\|\nabla F(\theta^t)\|^2$",
           title=r"gradient norm and Theorem 2's bound")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)  # below: inside it hid the curves and bands
    fig.suptitle(title)
    return fig


def plot_theorem2_eta(bt: pd.DataFrame, title: str):
    """Bound and measured (min and average over rounds; mean over seeds) against eta, both samplers."""
    fig, axes = plots.figure(1, 1, width=6.0, row_height=3.3)
    ax = axes[0, 0]
    g = bt.groupby(["method", "eta"])[["bound", "min_grad2", "mean_grad2"]].mean().reset_index()
    for m in ("random", "HiCS"):
        h = g[g.method == m]
        ax.plot(h.eta, h.bound, "o--", color=_COLORS[m], label=f"{m}: bound")
        ax.plot(h.eta, h.mean_grad2, "s-", color=_COLORS[m], label=f"{m}: average over rounds")
        ax.plot(h.eta, h.min_grad2, "^:", color=_COLORS[m], label=f"{m}: minimum over rounds")
    ax.set(xscale="log", yscale="log", xlabel=r"step size $\eta$ (largest: $1/(8LR)$)",
           ylabel=r"$\|\nabla F(\theta^t)\|^2$", title=title)
    ax.legend(ncol=2, loc="center right")
    return fig


# ===================================================================================== Figs. 11-12
FIGS_11_12 = {"(1)": "Fig. 11", "(2)": "Fig. 12"}       # the CIFAR-10 alpha list of each figure (appendix 6.11)


def optimizer_runs(cfg: dict, data, store) -> pd.DataFrame:
    """One first local training of every client with SGD and with Adam from the same initial model and
    the same minibatches (FMNIST, the CIFAR-10 alpha lists of Figs. 11-12, the document's eta = 0.001,
    B = 64), cached in ``store``. Tidy rows: list, seed, opt, round (0), metric ("delta_b"), client,
    class, value."""
    a = cfg["adam"]
    ecfg = dict(subset=a["subset"], epochs=a["epochs"], batch_size=a["batch_size"], lr=a["lr"])
    labels = data.y_train[:a["subset"]].cpu().numpy()
    configs = [dict(experiment="sgd_vs_adam", list=name, alphas=list(CIFAR10["lists"][name]), seed=s, opt=o,
                    clients=a["clients"], model="hics_fmnist_paper", **ecfg)
               for name in a["lists"] for s in a["seeds"] for o in ("sgd", "adam")]

    def run(c):
        part = make_partition(labels, c["clients"], c["alphas"], c["seed"])
        task = entropy.fmnist_task(data, part, ecfg)
        db = bias_updates(task, task.init_params([c["seed"]]), range(c["clients"]), seed=c["seed"], opt=c["opt"])
        return _tidy_bias(db, 0)

    return results.sweep(configs, run, store, progress=False)


def optimizer_table(runs: pd.DataFrame, cfg: dict, data, T: float,
                    present: float = 0.02) -> tuple[pd.DataFrame, pd.DataFrame]:
    r"""(per client, per run) tables. Per client: list, seed, opt, alpha, H, H_hat (Eq. 7 at T), the number
    of positive components of :math:`\Delta\mathbf b` (the sign argument, Eq. 106), the rank correlation
    of :math:`\Delta b_i` with :math:`D_i` over the classes the client holds (:math:`D_i >` ``present``;
    Eq. 104: with SGD the size follows the label fraction; NaN for fewer than 3 such classes) and the
    share of components within 20% of the largest in size (Adam's per-coordinate normalisation makes them
    alike, Eq. 105). Per run: Spearman's rho(H_hat, H), mean |H_hat - H|, the largest-minus-smallest
    alpha group gap of mean H_hat, rho(positive components, H), and the client means of the last two."""
    a = cfg["adam"]
    labels = data.y_train[:a["subset"]].cpu().numpy()
    per = []
    for (name, seed, opt), g in runs.groupby(["list", "seed", "opt"], sort=False):
        D = label_fractions(make_partition(labels, a["clients"], CIFAR10["lists"][name], seed))
        db = entropy.matrix(g, "delta_b")
        N = len(db)
        held = [D[k] > present for k in range(N)]
        size_rho = [stats.spearmanr(db[k][h], D[k][h]).statistic if h.sum() >= 3 else np.nan
                    for k, h in zip(range(N), held)]
        per.append(pd.DataFrame({"list": name, "seed": seed, "opt": opt, "client": np.arange(N),
                                 "alpha": np.repeat(CIFAR10["lists"][name], N // 5), "H": true_entropy(D),
                                 "H_hat": sample.entropy_estimate(db, T), "positive": (db > 0).sum(1),
                                 "size_rho": size_rho,
                                 "alike": (np.abs(db) > 0.8 * np.abs(db).max(1, keepdims=True)).mean(1)}))
    per = pd.concat(per, ignore_index=True)
    rows = []
    for (name, seed, opt), g in per.groupby(["list", "seed", "opt"], sort=False):
        lo, hi = g.alpha.min(), g.alpha.max()
        rows.append(dict(list=name, seed=seed, opt=opt, spearman=float(stats.spearmanr(g.H, g.H_hat).statistic),
                         mean_abs_error=float((g.H_hat - g.H).abs().mean()),
                         group_gap=float(g.loc[g.alpha == hi, "H_hat"].mean() - g.loc[g.alpha == lo, "H_hat"].mean()),
                         sign_spearman=float(stats.spearmanr(g.positive, g.H).statistic),
                         size_rho=float(np.nanmean(g.size_rho)), alike=float(g.alike.mean())))
    return per, pd.DataFrame(rows)


def plot_fig11_12(per: pd.DataFrame, seed: int, title: str):
    """Figs. 11-12: estimated against true entropy, one row per alpha list, SGD (left) and Adam (right)."""
    names = list(dict.fromkeys(per.list))
    fig, axes = plots.figure(len(names), 2, width=7.0, row_height=3.2)
    cmap = plt.get_cmap("viridis")
    for i, name in enumerate(names):
        alphas = CIFAR10["lists"][name]
        for j, opt in enumerate(("sgd", "adam")):
            ax = axes[i, j]
            g = per[(per.list == name) & (per.seed == seed) & (per.opt == opt)]
            for c, al in enumerate(alphas):
                h = g[g.alpha == al]
                ax.scatter(h.H, h.H_hat, s=16, color=cmap(c / (len(alphas) - 1)), label=rf"$\alpha$ = {al:g}")
            ax.plot([0, math.log(10)], [0, math.log(10)], "k--", lw=0.8)
            ax.set(xlabel="true entropy H (nats)", ylabel=r"estimate $\hat H$ (nats)",
                   title=f"setting {name}, {'SGD' if opt == 'sgd' else 'Adam'}")
            if j == 0:
                ax.legend(loc="lower right")
    fig.suptitle(title)
    return fig


def optimizer_checks(otab: pd.DataFrame) -> tuple[list, dict]:
    """The SGD-vs-Adam checks on paired runs (same list, seed, clients, minibatches): the document's two
    claims of appendix 6.11 per alpha list (list (1) is Fig. 11, list (2) Fig. 12: :data:`FIGS_11_12`), the
    three views of Eqs. 104-106 over both lists; and the per-optimizer means the text quotes
    (``<column>_<opt>``)."""
    o = otab.pivot_table(index=["list", "seed"], columns="opt")
    zero = np.zeros(len(o))
    checks = []
    for name in dict.fromkeys(otab.list):
        fig, ol = FIGS_11_12[name], o.xs(name, level="list")
        checks += [
            claims.compare(f"{fig}: the estimate is less accurate with Adam (Spearman rho, SGD - Adam)",
                           ol.spearman.sgd,
                           ol.spearman.adam),
            claims.compare(f"{fig}: with Adam it still separates the extreme groups (largest - smallest alpha)",
                           ol.group_gap.adam, np.zeros(len(ol)))]
    checks += [
        claims.compare("Eq. 106: with Adam, more positive components for more balanced clients (rho > 0)",
                       o.sign_spearman.adam, zero),
        claims.compare("Eq. 104 vs 105: SGD's update follows D_i, Adam's less (rho over held classes, SGD - Adam)",
                       o.size_rho.sgd, o.size_rho.adam),
        claims.compare("Eq. 105: Adam makes the components alike in size (share within 20% of the largest, Adam - SGD)",
                       o.alike.adam, o.alike.sgd)]
    vals = {f"{c}_{opt}": float(o[c][opt].mean()) for c in ("spearman", "group_gap", "sign_spearman", "size_rho",
                                                           "alike", "mean_abs_error") for opt in ("sgd", "adam")}
    return checks, vals


def _slice_len(s: slice) -> int:
    return int(s.stop - s.start)



# ========================================================================================= the page
def temperature_values(ts: pd.DataFrame) -> dict:
    """The prose's numbers of :func:`temperature_sweep`: the smallest factor and its largest bound, and the spread
    of the estimates at factors 1, 4 and 16 (NaN where not swept)."""
    v = dict(t1_small_factor=float(ts.factor.min()), t1_small_largest=float(ts.largest_bound.iloc[0]))
    for f in (1, 4, 16):
        hit = ts.factor == f
        v[f"t1_spread_{f}"] = float(ts.loc[hit, "spread"].iloc[0]) if hit.any() else float("nan")
    return v


def quadratic_words(D: np.ndarray, task: QuadraticTask, s2: np.ndarray, qdf: pd.DataFrame) -> str:
    """One line on the quadratic clients of Theorem 2: their number, L, the range of sigma_k^2 (:func:`sigma2`) and
    the initial gap F(theta^0) - F* of :func:`run_quadratic`."""
    gap0 = float(qdf[(qdf.metric == "gap") & (qdf["round"] == 0)].value.iloc[0])
    return (f"N = {len(D)}, L = {float(task.problem.A.max()):g}, sigma_k^2 from {s2.min():.3f} to {s2.max():.3f} "
            f"(mean {s2.mean():.3f}), F(theta^0) - F* = {gap0:.3f}")
