r"""FedAU (document 000) beside CA-Fed and its baselines (document 001) on CA-Fed's Markov availability:
chapter code of the page "FedAU and CA-Fed on the same Markov streams".

Document 000 estimates the aggregation weight :math:`\omega^n \approx 1/p_n` online from the participation
intervals (Algorithm 2, cutoff K), for participation statistics the server does not know, Markovian
participation included. Document 001 (CA-Fed) starts from weights :math:`q_k/\pi_k` with the availability
:math:`\pi_k` known, and drops clients to trade the bias term of its Theorem 1 for optimisation speed.

The comparison adds a fifth method "fedau" to the availability chapter's four (``flkit.papers.availability.
cafed``, :data:`~flkit.papers.availability.cafed.WITH_FEDAU`): every available client, as Unbiased, aggregated
with :math:`q_k\omega_t^k` (``flkit.aggregate.FedAUWeighted``, K = 50, the K of document 000's table) inside
the same server SGD, with Unbiased's learning rates. Every method of a seed sees the same availability mask,
initial model and minibatches (``flkit.fl``): the comparison is paired by seed.

This module holds the exact limit of FedAU's weight on a two-state chain (:func:`omega_limit`), its
simulation (:func:`omega_long_run`, :func:`omega_paths`), the bias measure (:func:`weight_shares`: each
method's share of the total aggregation weight against the target q, and their total-variation distance),
the paired comparisons and the page's checks.

**The limit of FedAU's weight on a Markov chain.** Let a client's availability be the stationary two-state
chain with :math:`a = P(\text{off}\to\text{off})`, :math:`b = P(\text{on}\to\text{off})`, stationary
probability :math:`\pi`. Every round belongs to exactly one recorded interval, so :math:`\omega_T` = T / (number
of intervals recorded by round T). Each available round closes one interval; the run of unavailable rounds that
follows it has length L with :math:`P(L\ge l) = b\,a^{l-1}` (l >= 1) and adds :math:`\lfloor L/K\rfloor`
cut-off intervals. By the ergodic theorem, almost surely

.. math:: \omega_T \to \omega_\infty = \frac{1}{\pi\,(1 + E\lfloor L/K\rfloor)}
          = \frac{1}{\pi}\Big(1 + \frac{b\,a^{K-1}}{1 - a^K}\Big)^{-1},
          \qquad \omega_\infty = 1/\pi \text{ without cutoff (Kac's mean return time)}.

For independent participation (a = b = 1 - p) this is document 000's :math:`E[S_n] = (1 - (1-p)^K)/p`.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import textwrap
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from flkit import aggregate, participation, plots, results
from flkit.papers import claims, settings
from flkit.papers.across import common
from flkit.papers.across.items import ITEM
from flkit.papers.availability import cafed as C

__all__ = ["PROFILES", "BOX", "PAIRS", "profile", "K", "run_configs", "synthetic_runs", "mnist_runs", "reproduction",
           "mnist_scale", "omega_limit", "omega_long_run", "omega_table", "omega_paths", "weight_shares",
           "share_by_type", "summarize", "final_objective", "paired", "paired_table", "checks", "omega_view",
           "omega_numbers", "path_numbers", "pget", "pair_numbers", "trade_words", "early_numbers", "share_numbers",
           "plot_omega", "plot_bias"]

K = C.FEDAU_K
KS = (K, None)                  # FedAU with document 000's cutoff, and without cutoff

PROFILES = {
    "smoke": dict(chains=4, chain_rounds=2000),
    "paper": dict(chains=30, chain_rounds=100_000),
}
# the page's verdict box (scorecard.box)
BOX = dict(page="across/fedau_cafed", headline=ITEM["fedau_vs_oracle"],
           tests="FedAU (000) as a fifth method beside CA-Fed, Unbiased, AdaFed and F3AST (001) on the same Markov "
                 "availability streams, seeds, local training and server step, and the limit of FedAU's weights on a "
                 "two-state chain")
# the paired comparisons of the page (a - b)
PAIRS = [("fedau", "unbiased"), ("cafed", "fedau"), ("fedau", "adafed"), ("fedau", "f3ast")]


def profile(name: str, seeds: Sequence[int] | None = None, mnist_seeds: Sequence[int] | None = None,
            **overrides) -> dict:
    """The page's settings under profile `name` ("smoke", "paper"): the CA-Fed page's synthetic and MNIST
    settings of the same profile (``cafed.profile``) and the long-run simulation of FedAU's weights (``chains``
    copies of each of the synthetic federation's 24 chains, ``chain_rounds`` rounds). A ValueError names the
    allowed profiles; `seeds` and `mnist_seeds` (None: the profile's) replace the seeds of the synthetic and of
    the MNIST runs, `overrides` the other top-level settings."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    base = {k: v for k, v in C.profile(name).items() if k in ("synthetic", "mnist")} | copy.deepcopy(PROFILES[name])
    out = settings.with_overrides(base, overrides, f"fedau_cafed profile {name!r}")
    settings.positive_int(out["chains"], "chains")
    settings.positive_int(out["chain_rounds"], "chain_rounds")
    for part, given in (("synthetic", seeds), ("mnist", mnist_seeds)):
        if given is not None:
            out[part]["seeds"] = settings.seeds(given, "seeds" if part == "synthetic" else "mnist_seeds")
    return out


def run_configs(cfg: dict) -> dict[str, dict]:
    """The stored-run configs of the page for the settings `cfg` (:func:`profile`): "synthetic" (the five methods,
    with the target objective), "mnist" (FedAU alone, paired with the CA-Fed page's stored MNIST runs), and the
    CA-Fed page's own configs "cafed_synthetic" and "cafed_mnist" (``cafed.run_config``, unchanged)."""
    S, M = cfg["synthetic"], cfg["mnist"]
    return dict(synthetic=C.run_config("fedau_cafed_synthetic", "synthetic", S, 32, methods=list(C.WITH_FEDAU), K=K,
                                       train_metrics=True),
                mnist=C.run_config("fedau_cafed_mnist", "mnist", M, 64, methods=["fedau"], K=K),
                cafed_synthetic=C.run_config("cafed_synthetic", "synthetic", S, 32),
                cafed_mnist=C.run_config("cafed_mnist", "mnist", M, 64))


def synthetic_runs(syn: C.Clients, cfg: dict, confs: dict, where: results.Store, where_cafed: results.Store
                   ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the five methods on the synthetic federation `syn`, with the target objective; the CA-Fed page's four
    methods on it): each read from its store (this page's `where`, the CA-Fed page's `where_cafed`) or made.
    `confs`: :func:`run_configs`."""
    S = cfg["synthetic"]
    tab = common.cached(where, confs["synthetic"],
                        lambda: C.run_experiment(syn, C.LRS["synthetic"], S["rounds"], S["seeds"], S["beta"], 32,
                                                 methods=C.WITH_FEDAU, train_metrics=True))
    ref = common.cached(where_cafed, confs["cafed_synthetic"],
                        lambda: C.run_experiment(syn, C.LRS["synthetic"], S["rounds"], S["seeds"], S["beta"], 32))
    return tab, ref


def mnist_runs(mn: C.Clients, cfg: dict, confs: dict, where: results.Store, where_cafed: results.Store
               ) -> pd.DataFrame:
    """The five methods on the MNIST federation `mn`: the CA-Fed page's four (read from `where_cafed` or made)
    and FedAU (this page's, `where`), on the same availability, seeds and local training."""
    M = cfg["mnist"]
    tab_fu = common.cached(where, confs["mnist"],
                           lambda: C.run_experiment(mn, C.LRS["mnist"], M["rounds"], M["seeds"], M["beta"], 64,
                                                    methods=("fedau",)))
    tab_4 = common.cached(where_cafed, confs["cafed_mnist"],
                          lambda: C.run_experiment(mn, C.LRS["mnist"], M["rounds"], M["seeds"], M["beta"], 64))
    return pd.concat([tab_4, tab_fu], ignore_index=True)


def reproduction(ref: pd.DataFrame, tab: pd.DataFrame) -> tuple[float, int]:
    """(the largest difference in test accuracy between the CA-Fed page's four methods `ref` and the same methods
    in this page's runs `tab`, over every (method, seed, round); how many values)."""
    key = ["method", "seed", "round"]
    a = ref[ref["metric"] == "test_acc"].set_index(key)["value"]
    b = tab[tab["metric"] == "test_acc"].set_index(key)["value"].reindex(a.index)
    return float((a - b).abs().max()), len(a)


def mnist_scale(M: dict) -> str:
    """The scale label of the MNIST checks: "" at the CA-Fed page's full MNIST, else the reduction."""
    if M["train_fraction"] == 1:
        return ""
    return f"reduced: MNIST with {M['train_fraction']:g} of each client's training images"


# ================================================================================================
# FedAU's weight on a Markov chain
# ================================================================================================
def omega_limit(pi, lam, K: int | None) -> np.ndarray:
    r"""The almost-sure limit of FedAU's :math:`\omega_T` (cutoff `K`, None: no cutoff) for the stationary
    two-state chain with stationary probability `pi` and second eigenvalue `lam` (CA-Fed's parametrization,
    ``participation.transition_probs``): :math:`1/(\pi(1 + b a^{K-1}/(1 - a^K)))` with :math:`a = P(\text{off}
    \to\text{off})`, :math:`b = P(\text{on}\to\text{off})`; :math:`1/\pi` without cutoff (module docstring).
    `pi` is checked against the chain's stationary law (``participation.stationary``)."""
    pi = np.atleast_1d(np.asarray(pi, dtype=float))
    to_a, to_i = participation.transition_probs(pi, lam=lam)
    st = participation.stationary(to_a, to_i)
    if not np.allclose(st, pi, rtol=0, atol=1e-12):
        raise ValueError("the chains' stationary law differs from pi")
    if K is None:
        return 1.0 / st
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
        raise ValueError(f"K must be a positive int or None (no cutoff), got {K!r}")
    a, b = 1.0 - to_a, to_i
    cut = np.where(a < 1, b * a ** (K - 1) / np.where(a < 1, 1.0 - a ** K, 1.0), np.inf)
    return 1.0 / (st * (1.0 + cut))


def _drive(mask: np.ndarray, K: int | None) -> np.ndarray:
    """omega_t of ``aggregate.FedAU(K)`` for t = 0..T (row t: read before round t is recorded) on a (T, N) mask."""
    rule = aggregate.FedAU(K=K)
    m = torch.as_tensor(np.asarray(mask, dtype=bool))
    state = rule.init(1, m.shape[1], 0, torch.float64, "cpu")
    out = np.empty((m.shape[0] + 1, m.shape[1]))
    for t in range(m.shape[0]):
        out[t] = rule.weights(state)[0].numpy()
        state = rule.record(state, m[t].unsqueeze(0))
    out[-1] = rule.weights(state)[0].numpy()
    return out


def omega_long_run(pi, lam, K: int | None, rounds: int, chains: int, seed: int = 0) -> np.ndarray:
    """FedAU's weight after `rounds` rounds on `chains` independent copies of each client's chain (pi, lam):
    shape (chains, N). Availability from ``participation.markov`` (stationary start) with `seed`."""
    pi = np.asarray(pi, dtype=float)
    lam = np.broadcast_to(np.asarray(lam, dtype=float), pi.shape)
    rounds, chains = settings.positive_int(rounds, "rounds"), settings.positive_int(chains, "chains")
    mask = participation.markov(np.tile(pi, chains), rounds, seed, lam=np.tile(lam, chains))
    rule = aggregate.FedAU(K=K)
    m = torch.from_numpy(mask)
    state = rule.init(1, m.shape[1], 0, torch.float64, "cpu")
    for t in range(rounds):
        state = rule.record(state, m[t].unsqueeze(0))
    return rule.weights(state)[0].numpy().reshape(chains, len(pi))


def omega_table(cl: C.Clients, rounds: int, chains: int, seed: int = 0, Ks: Sequence = KS) -> pd.DataFrame:
    """Per availability type and cutoff: FedAU's weight after `rounds` rounds relative to its limit
    (:func:`omega_limit`), over `chains` copies of each client of `cl`: mean ratio, its standard error, the
    number of chains, the limit's mean over the type's clients and 1/pi; ``values`` holds the ratios
    themselves (one array per row, for the checks)."""
    rows = []
    for k in Ks:
        w = omega_long_run(cl.pi, cl.lam, k, rounds, chains, seed)
        lim = omega_limit(cl.pi, cl.lam, k)
        ratio = w / lim
        for t, name in enumerate(C.TYPE_NAMES):
            sel = cl.types == t
            v = ratio[:, sel].reshape(-1)
            rows.append(dict(type=name, K="none" if k is None else int(k), pi=float(cl.pi[sel][0]),
                             lam=float(cl.lam[sel].mean()), inv_pi=float(1 / cl.pi[sel][0]),
                             limit=float(lim[sel].mean()), omega=float(w[:, sel].mean()), ratio=float(v.mean()),
                             se=claims.se(v), chains=int(v.size), rounds=int(rounds), values=v))
    return pd.DataFrame(rows)


def omega_paths(cl: C.Clients, rounds: int, seeds: Sequence[int], Ks: Sequence = KS) -> pd.DataFrame:
    r"""FedAU's :math:`\pi_k\omega_t^k` (1 = the oracle's 1/pi) per round t = 0..`rounds`, on the training
    runs' own availability (``participation.markov(cl.pi, rounds, seed, lam=cl.lam)``), mean over the clients
    of each type and then over `seeds`, with the standard error over seeds; for each cutoff of `Ks`."""
    rows = []
    for k in Ks:
        per = np.stack([_drive(participation.markov(cl.pi, rounds, int(s), lam=cl.lam), k) * cl.pi
                        for s in seeds])                                               # (S, T+1, N)
        for t, name in enumerate(C.TYPE_NAMES):
            v = per[:, :, cl.types == t].mean(2)                                       # (S, T+1)
            se = v.std(0, ddof=1) / math.sqrt(len(seeds)) if len(seeds) > 1 else np.zeros(v.shape[1])
            rows.append(pd.DataFrame(dict(type=name, K="none" if k is None else int(k), round=np.arange(v.shape[1]),
                                          value=v.mean(0), se=se)))
    return pd.concat(rows, ignore_index=True)


# ================================================================================================
# the runs: accuracy, objective, bias
# ================================================================================================
def weight_shares(table: pd.DataFrame, cl: C.Clients) -> pd.DataFrame:
    r"""Per method and seed: each client's share :math:`\hat s_k` of the total aggregation weight over the run
    (``weight_sum`` of ``cafed.run_experiment``), and the total-variation distance :math:`\frac12\sum_k|\hat
    s_k - q_k|` to the target weights :math:`q_k = n_k/\sum_j n_j` (the notes' :math:`\alpha`): the CA-Fed
    page's measure of the objective actually weighted, per run. Returns one row per (method, seed, client) with
    ``share``, ``target`` and ``tv`` (repeated on the run's rows)."""
    w = table[(table["metric"] == "weight_sum") & (table["client"] >= 0)].copy()
    if w.empty:
        raise ValueError("the table has no weight_sum rows (a cafed.run_experiment table)")
    w["client"] = w["client"].astype(int)
    w["share"] = w["value"] / w.groupby(["method", "seed"])["value"].transform("sum")
    w["target"] = cl.q[w["client"].to_numpy()]
    w["tv"] = (w["share"] - w["target"]).abs().groupby([w["method"], w["seed"]]).transform("sum") / 2
    w["type"] = [C.TYPE_NAMES[t] for t in cl.types[w["client"].to_numpy()]]
    return w[["method", "seed", "client", "type", "share", "target", "tv"]].reset_index(drop=True)


def share_by_type(shares: pd.DataFrame, methods: Sequence[str] = C.WITH_FEDAU) -> pd.DataFrame:
    """Per method (rows) and availability type (columns): the type's share of the aggregation weight, mean over
    seeds; a last row with the target."""
    g = shares.groupby(["method", "seed", "type"])[["share", "target"]].sum().reset_index()
    out = g.groupby(["method", "type"])["share"].mean().unstack("type")
    out = out.reindex([m for m in methods if m in out.index]).rename(index=C.LABELS)
    out.loc["target q"] = g.groupby("type")["target"].mean()
    return out[[t for t in C.TYPE_NAMES if t in out.columns]]


def final_objective(table: pd.DataFrame) -> pd.DataFrame:
    """Per method and seed: the target objective F_T (``train_loss``, the loss on the union of the clients'
    training data) at the last round and its mean over the second half of the rounds."""
    f = table[(table["metric"] == "train_loss") & (table["client"] < 0)]
    if f.empty:
        raise ValueError("the table has no train_loss rows (run_experiment with train_metrics=True)")
    T = int(f["round"].max())
    last = f[f["round"] == T].groupby(["method", "seed"])["value"].mean().rename("F_final")
    half = f[f["round"] >= T / 2].groupby(["method", "seed"])["value"].mean().rename("F_2nd_half")
    return pd.concat([last, half], axis=1).reset_index()


def summarize(table: pd.DataFrame, cl: C.Clients, rounds: int) -> pd.DataFrame:
    """Per method and seed: the CA-Fed page's accuracy summary (``cafed.summarize``: max, time_avg,
    std_2nd_half in percent, on the code's logged rounds), the final test accuracy (percent), the bias ``tv``
    (:func:`weight_shares`) and, where the table has them, the target objective's F_final and F_2nd_half."""
    s = C.summarize(table, rounds)
    acc = table[(table["metric"] == "test_acc") & (table["client"] < 0) & (table["round"] == rounds)]
    s = s.merge(acc.groupby(["method", "seed"])["value"].mean().mul(100).rename("final").reset_index(),
                on=["method", "seed"])
    tv = weight_shares(table, cl).groupby(["method", "seed"])["tv"].first().reset_index()
    s = s.merge(tv, on=["method", "seed"])
    if (table["metric"] == "train_loss").any():
        s = s.merge(final_objective(table), on=["method", "seed"], how="left")
    return s


HIGHER = {"max": True, "time_avg": True, "final": True, "std_2nd_half": False, "tv": False, "F_final": False,
          "F_2nd_half": False}
METRIC_NAMES = {"max": "maximum test accuracy (points)", "time_avg": "time-average test accuracy (points)",
                "final": "final test accuracy (points)", "std_2nd_half": "second-half standard deviation (points)",
                "tv": "distance of the weight shares from the target (TV)",
                "F_final": "target objective F_T at the last round",
                "F_2nd_half": "target objective F_T, mean over the second half"}


def paired(summary: pd.DataFrame, metric: str, a: str, b: str) -> tuple[np.ndarray, np.ndarray]:
    """The per-seed values of `metric` for methods `a` and `b` on the seeds both have, aligned by seed."""
    piv = summary.pivot_table(index="seed", columns="method", values=metric).dropna(subset=[a, b])
    return piv[a].to_numpy(), piv[b].to_numpy()


def paired_table(summary: pd.DataFrame, pairs: Sequence[tuple[str, str]], metrics: Sequence[str]) -> pd.DataFrame:
    """One row per (pair a - b, metric): the mean paired difference over seeds, its standard error, 2 s.e.,
    the seeds, and a reading: "a better", "b better" (beyond 2 s.e., in the metric's good direction) or
    "within 2 s.e."."""
    rows = []
    for a, b in pairs:
        for m in metrics:
            if m not in summary:
                continue
            x, y = paired(summary, m, a, b)
            d = x - y
            mu, s = float(d.mean()), claims.se(d) if len(d) > 1 else math.nan
            good = mu > 0 if HIGHER[m] else mu < 0
            reading = ("one seed: no standard error" if not np.isfinite(s) else "within 2 s.e." if abs(mu) <= 2 * s
                       else f"{C.LABELS[a] if good else C.LABELS[b]} better")
            rows.append({"a - b": f"{C.LABELS[a]} - {C.LABELS[b]}", "metric": METRIC_NAMES[m], "mean": mu, "se": s,
                         "2 se": 2 * s, "seeds": len(d), "reading": reading})
    return pd.DataFrame(rows)


def _better(summary, metric, a, b, what, scale=""):
    """claims.compare of "a better than b on metric" (higher or lower as the metric goes), seed-paired."""
    x, y = paired(summary, metric, a, b)
    c = claims.compare(what, x, y) if HIGHER[metric] else claims.compare(what, y, x)
    return dataclasses.replace(c, scale=scale) if scale else c


def checks(omega: pd.DataFrame, syn: pd.DataFrame, mn: pd.DataFrame | None, tol: float = 0.01,
           mnist_scale: str = "") -> list[tuple[str, claims.Check]]:
    """The page's checks as (item key of ``flkit.papers.across.items.ITEM``, Check):

    * "fedau_omega": per type and cutoff, FedAU's weight after the long run over its limit, against 1
      (``claims.agree``, margin max(2 s.e., `tol`): `tol` for the estimator's O(1/T) bias);
    * "fedau_vs_oracle": FedAU at least as good as Unbiased (oracle pi): time-average and final accuracy on both
      data sets, the target objective at the last round on the synthetic set (``claims.compare``, seed-paired);
    * "cafed_vs_fedau": CA-Fed above FedAU in time-average accuracy, below in second-half standard deviation
      and in the target objective (synthetic);
    * "fedau_bias": FedAU's weight shares closer to the target than CA-Fed's (TV).
    `mn` None: no MNIST checks; `mnist_scale` labels them (a reduced MNIST profile)."""
    out = []
    for _, r in omega.iterrows():
        out.append(("fedau_omega", claims.agree(
            f"FedAU's weight after {r['rounds']} rounds over its limit, {r['type']} clients (pi = {r['pi']:g}), "
            f"K = {r['K']}, {r['chains']} chains", r["values"], 1.0, threshold=tol)))
    for name, s, sc in (("synthetic", syn, ""), ("MNIST", mn, mnist_scale)):
        if s is None:
            continue
        for m in ("time_avg", "final") + (("F_final",) if "F_final" in s else ()):
            out.append(("fedau_vs_oracle", _better(s, m, "fedau", "unbiased",
                                                   f"{name}: FedAU (pi estimated) against Unbiased (pi known), "
                                                   f"{METRIC_NAMES[m]}, seed-paired", sc)))
        for m in ("time_avg", "std_2nd_half") + (("F_final",) if "F_final" in s else ()):
            out.append(("cafed_vs_fedau", _better(s, m, "cafed", "fedau",
                                                  f"{name}: CA-Fed against FedAU, {METRIC_NAMES[m]}, seed-paired", sc)))
        out.append(("fedau_bias", _better(s, "tv", "fedau", "cafed",
                                          f"{name}: FedAU's weight shares against CA-Fed's, {METRIC_NAMES['tv']}, "
                                          f"seed-paired", sc)))
    return out


# ================================================================================================
# the page's views and the numbers its prose glues
# ================================================================================================
def omega_view(om: pd.DataFrame):
    """:func:`omega_table` as the page shows it."""
    names = {"inv_pi": "1/pi", "limit": "omega_inf", "omega": "omega_T (mean)", "ratio": "omega_T / omega_inf"}
    return om.drop(columns="values").rename(columns=names).round(4).style.hide(axis="index")


def omega_numbers(om: pd.DataFrame, rounds: int) -> dict:
    """The long-run weights' numbers for the prose (`om`: :func:`omega_table` after `rounds` rounds)."""
    stable = om[(om["type"] == "unavailable-stable")].set_index("K")
    return dict(om_T=rounds, om_lim_stable=stable.loc[K, "limit"], om_ratio_max=(om["ratio"] - 1).abs().max(),
                om_stable_k=stable.loc[K, "ratio"], om_stable_k_se=stable.loc[K, "se"],
                om_wrong=stable.loc[K, "omega"] / stable.loc[K, "inv_pi"] - 1)


def path_numbers(paths: pd.DataFrame, rounds: int) -> dict:
    """FedAU's weights on the training runs' availability (:func:`omega_paths`) at round 20 and at the end."""
    end = paths[paths["round"] == rounds].set_index(["K", "type"])["value"]
    early = paths[paths["round"] == min(20, rounds)].set_index(["K", "type"])["value"]
    return dict(path_as20=early.loc[(K, "available-shifting")], path_us20=early.loc[(K, "unavailable-shifting")],
                path_r20=min(20, rounds), path_us_end=end.loc[(K, "unavailable-shifting")],
                path_st_end=end.loc[(K, "unavailable-stable")], path_T=rounds)


def pget(table: pd.DataFrame, pair: str, metric: str) -> tuple:
    """(mean paired difference, 2 s.e., reading) of `pair` ("FedAU - Unbiased") on `metric` in a
    :func:`paired_table`."""
    r = table[(table["a - b"] == pair) & (table["metric"] == METRIC_NAMES[metric])].iloc[0]
    return r["mean"], r["2 se"], r["reading"]


# the pairs the prose reads, by the tag of their glued names
PROSE_PAIRS = {"fu": "FedAU - Unbiased", "cf": "CA-Fed - FedAU"}


def pair_numbers(table: pd.DataFrame, prefix: str, metrics: Sequence[str]) -> dict:
    """The paired differences of :data:`PROSE_PAIRS` on `metrics` for the prose: ``<prefix>_<tag>_<metric>``
    (mean), ``..._2se`` and ``..._r`` (the reading)."""
    out = {}
    for tag, pair in PROSE_PAIRS.items():
        for m in metrics:
            d, s2, rd = pget(table, pair, m)
            out.update({f"{prefix}_{tag}_{m}": d, f"{prefix}_{tag}_{m}_2se": s2, f"{prefix}_{tag}_{m}_r": rd})
    return out


def trade_words(table: pd.DataFrame) -> str:
    """Whether CA-Fed's lead in time-average accuracy over FedAU comes with a higher target objective (both beyond
    2 s.e. in the synthetic :func:`paired_table`), in words."""
    def beyond(m):
        d, s2, _ = pget(table, PROSE_PAIRS["cf"], m)
        return d > s2
    if beyond("time_avg") and beyond("F_final"):
        return ("CA-Fed's lead in time-average accuracy comes with a higher target objective at the end: it gains "
                "speed on a biased objective, the trade of Theorem 1")
    return "the runs do not show CA-Fed trading the target objective for time-average accuracy"


def early_numbers(tab: pd.DataFrame, rounds: int) -> dict:
    """FedAU's and Unbiased's test accuracy at round 10 (or the last round, if earlier), mean over seeds."""
    r10 = min(10, rounds)
    acc = tab[(tab["metric"] == "test_acc") & (tab["round"] == r10)].groupby("method")["value"].mean()
    return dict(acc10_fedau=acc["fedau"], acc10_unb=acc["unbiased"], r10=r10)


def share_numbers(by_type: pd.DataFrame, summ: pd.DataFrame) -> dict:
    """The weight shares of the unavailable-stable clients (`by_type`: :func:`share_by_type`) and the mean TV
    distance of FedAU, Unbiased and CA-Fed (`summ`: :func:`summarize`), on the synthetic task."""
    st = "unavailable-stable"
    return dict(sh_fu_st=by_type.loc["FedAU", st], sh_ub_st=by_type.loc["Unbiased", st],
                sh_ca_st=by_type.loc["CA-Fed", st], sh_target_st=by_type.loc["target q", st],
                tv_fu=summ.loc[summ["method"] == "fedau", "tv"].mean(),
                tv_ub=summ.loc[summ["method"] == "unbiased", "tv"].mean(),
                tv_ca=summ.loc[summ["method"] == "cafed", "tv"].mean())


# ================================================================================================
# figures
# ================================================================================================
def plot_omega(paths: pd.DataFrame, cl: C.Clients, title: str, axes=None):
    r"""One panel per cutoff: :math:`\pi_k\omega_t^k` per availability type over the rounds (mean over clients
    and seeds, band +- 1 s.e.), with the limit :math:`\pi\,\omega_\infty` of each type (dotted) and the
    oracle's 1 (grey)."""
    ks = list(dict.fromkeys(paths["K"]))
    if axes is None:
        axes = plots.figure(1, len(ks), row_height=3.0, sharey=True)[1][0]
    colors = dict(zip(C.TYPE_NAMES, ("tab:blue", "tab:red", "tab:green")))
    for ax, k in zip(axes, ks):
        for name in C.TYPE_NAMES:
            g = paths[(paths["K"] == k) & (paths["type"] == name)]
            if g.empty:
                continue
            ax.plot(g["round"], g["value"], color=colors[name], label=name)
            ax.fill_between(g["round"], g["value"] - g["se"], g["value"] + g["se"], color=colors[name], alpha=0.2, lw=0)
            sel = cl.types == C.TYPE_NAMES.index(name)
            lim = float((omega_limit(cl.pi[sel], cl.lam[sel], None if k == "none" else int(k)) * cl.pi[sel]).mean())
            ax.axhline(lim, color=colors[name], ls=":", lw=1.2)
        ax.axhline(1.0, color="0.5", lw=0.8)
        ax.set(xlabel="round t", title=f"K = {k}" if k != "none" else "no cutoff (K = inf)")
    axes[0].set(ylabel=r"$\pi_k\,\omega_t^k$ (1: the oracle $1/\pi_k$)")
    axes[0].legend(fontsize=8)
    axes[0].figure.suptitle(textwrap.fill(title, 100), fontsize=9.5)
    return axes


def plot_bias(summaries: dict[str, pd.DataFrame], title: str, ax=None, methods: Sequence[str] = C.WITH_FEDAU):
    """Per data set and method: the total-variation distance of the weight shares from the target, mean over
    seeds with +- 2 s.e."""
    if ax is None:
        ax = plots.figure(1, 1, row_height=3.0)[1][0, 0]
    width = 0.8 / len(methods)
    names = list(summaries)
    for j, m in enumerate(methods):
        mu, er = [], []
        for n in names:
            v = summaries[n].loc[summaries[n]["method"] == m, "tv"].to_numpy()
            mu.append(v.mean() if v.size else np.nan)
            er.append(2 * claims.se(v) if v.size > 1 else 0.0)
        ax.bar(np.arange(len(names)) + (j - (len(methods) - 1) / 2) * width, mu, width, yerr=er, capsize=3,
               color=C.PALETTE[m], label=C.LABELS[m])
    ax.set_xticks(np.arange(len(names)), names)
    ax.set(ylabel="TV(weight shares, target q)")
    ax.legend(ncol=len(methods), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    ax.set_title(textwrap.fill(title, 90), fontsize=9.5)
    return ax
