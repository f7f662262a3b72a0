r"""HiCS-FL in setting (3) of the FMNIST comparison (every client split at :math:`\alpha` = 0.001): where its
deficit against Clustered Sampling comes from, and what the sampler does round by round.

Sec. 4.1 of the document (Fig. 4(a)) expects HiCS-FL to "perform similarly to [CS]" when every client is
severely imbalanced (Sec. 3.3: with similar heterogeneity levels the distance of Eq. 9 "reduces to the
conventional cosine similarity" and the cluster probabilities become uniform). The FMNIST page's runs
(:mod:`flkit.papers.hics.fmnist`) end with a higher training loss for HiCS-FL than for CS there. Three
candidate causes, each with a variant of the sampler that removes it:

* **the draw** (Algorithm 1, lines 8-12): clusters are drawn *with replacement* from :math:`\pi^t`, a
  client drawn twice is drawn again, so a round takes several clients from one cluster and fewer distinct
  clusters than K (about 3.4 of 5 for uniform :math:`\pi`); CS takes one client per cluster.
  Variant ``distinct``: K distinct clusters, one client each (:func:`flkit.sample.hics_draw`
  ``rule="distinct"``), everything else the document's. With M = K (the document's choice) it takes every
  cluster once whatever :math:`\pi`, so it removes the weighting's effect too;
* **the weighting** :math:`\pi^t_m \propto \exp(\gamma^t\bar H_m)`: when the estimates reflect the class
  a concentrated client holds rather than its balance (the entropy page), the favoured clusters are those of
  some classes. Variant ``gamma0 = 0``: uniform :math:`\pi` (draw unchanged);
* **the temperature** of Eq. 7, which sets how spread out :math:`\hat H` is. Variant ``T/2``: T = 0.00125,
  the temperature at which the first-round estimates of the entropy page are closest to the true entropy;
* and the authors' implementation as a whole (variant ``code``: :class:`flkit.sample.HiCSAuthors`, with the
  updates refreshed every round, the code's rule for a single-alpha partition).

Everything else is the FMNIST page's profile (its stand-in model, clients, partitions, rounds), with the
same seeds: a variant's run of seed s shares the partition, the initial model and every client's minibatches
with the stored CS and HiCS-FL runs of seed s, so the late training losses are paired by seed.

Logged every round, per run (:class:`Logged`): the sampler's mode (warm-up, clustered, CS fallback), the
cluster probabilities :math:`\pi^t` (``pi/m``), the number of clusters, the number of distinct clusters the
selected clients come from, the number of distinct classes their data cover, the share of each class in
the selected data (``class_share/c``), the selected clients, and the mean, spread and rank correlation with
the true entropy of the estimates :math:`\hat H`. Through ``fl.run``'s ``track``: :math:`\mathcal E_i`
(Definition 1) of the global model on a balanced pool of 200 training images per class, their sum and
:math:`\delta = \max_i|\frac1C\sum_c\mathcal E_c - \mathcal E_i|` (Sec. 3.2.2).
"""
from __future__ import annotations

import math
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from scipy import stats

from flkit import aggregate, engine, fl, results, sample
from flkit.papers import claims
from flkit.papers.hics.common import (HICS, make_partition, make_task, savgol, split_alphas, train_loss_idx,
                                      true_entropy)

__all__ = ["SETTING", "VARIANTS", "VARIANT_WORDS", "MODES", "Logged", "class_pool", "e_tracker", "jobs", "run_job",
           "sweep", "reference_runs", "late_table", "selection_table", "paired_gap", "CAUSES", "slug",
           "diagnosis_words",
           "SIMILAR", "similar_to_cs_checks", "e_delta_frame", "e_delta_checks",
           # the fmnist page
           "setting3_values", "summary", "plot_selection", "plot_e_delta", "e_delta_values"]

SETTING = "(3)"
# name -> keyword arguments of flkit.sample.HiCS.for_task (JSON-able: they enter the stored job's key)
VARIANTS = {
    "paper": {},
    "distinct": {"draw": "distinct"},
    "gamma0 = 0": {"gamma0": 0.0},
    "T/2": {"temperature": HICS["T"] / 2},
    "code": {"variant": "code", "freeze_after_warmup": False},
}
VARIANT_WORDS = {
    "paper": "the document's Algorithm 1 (clusters drawn with replacement, T = 0.0025)",
    "distinct": "K distinct clusters, one client each",
    "gamma0 = 0": "uniform cluster probabilities, clusters still drawn with replacement",
    "T/2": "the document's algorithm at T = 0.00125",
    "code": "the authors' code (CityChan/HiCS-FL@25f309d)",
}
MODES = {"warmup": 0, "hics": 1, "cs": 2, "all": 3}
EVERY = 5        # the test accuracy and training loss every 5 rounds (evaluating 70,000 images costs more than a
#                  round's training); the sampler's log, E_i and delta every round
_EXPERIMENT = "fmnist_setting3_diagnosis"


class Logged:
    """A HiCS sampler that records, after every ``select``, what it did (module docstring). ``counts`` (N, C):
    the clients' label counts; ``log``: one dict per (round, run). Not frozen (it keeps the log): a run's
    numbers are those of the wrapped sampler, which it calls unchanged."""

    def __init__(self, inner: sample.HiCSBase, counts: np.ndarray):
        self.inner, self.counts, self.log = inner, np.asarray(counts), []
        self.H = true_entropy(self.counts / self.counts.sum(1, keepdims=True))

    def __repr__(self) -> str:
        return f"Logged({self.inner!r})"

    def init(self, *args):
        return self.inner.init(*args)

    def observe(self, state, t, pairs, delta):
        return self.inner.observe(state, t, pairs, delta)

    def select(self, state, t, available, probe=None):
        c, state = self.inner.select(state, t, available, probe)
        C = self.counts.shape[1]
        for r in range(c.shape[0]):
            chosen = np.flatnonzero(c[r].cpu().numpy() > 0)
            mode = state.mode[r]
            rec = {"mode": MODES[mode], "selected": len(chosen)}
            data = self.counts[chosen].sum(0)
            rec["distinct_classes"] = int((data > 0).sum())
            rec.update({f"class_share/{i}": float(data[i] / data.sum()) for i in range(C)})
            rec.update({f"client/{j}": int(v) for j, v in enumerate(sorted(chosen))})
            if mode == "hics":
                lab = state.labels[r]
                pi = np.asarray(state.probs[r])
                rec["clusters"] = len(pi)
                rec["distinct_clusters"] = int(np.unique(lab[chosen]).size)
                rec.update({f"pi/{m}": float(p) for m, p in enumerate(pi)})
                # the cluster probabilities in the order of their mean estimate (0: the favoured one)
                rec["pi_max"] = float(pi.max())
            if mode in ("hics", "cs"):
                H_hat = state.entropy[r]
                ok = np.isfinite(H_hat)
                rec["H_hat_mean"] = float(H_hat[ok].mean())
                rec["H_hat_sd"] = float(H_hat[ok].std())
                rec["H_hat_spearman"] = float(stats.spearmanr(self.H[ok], H_hat[ok]).statistic) \
                    if np.ptp(H_hat[ok]) > 0 and np.ptp(self.H[ok]) > 0 else math.nan
            self.log.append(dict(t=t, run=r, **rec))
        return c, state

    def frame(self, seeds) -> pd.DataFrame:
        """Tidy rows (seed, round, metric, value); round = fl.run's t + 1, the round whose model the
        selected clients then train (fl.run records the metrics after round t as round t + 1)."""
        rows = [dict(seed=seeds[d["run"]], round=d["t"] + 1, metric=k, value=float(v))
                for d in self.log for k, v in d.items() if k not in ("t", "run")]
        return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------- E_i and delta
def class_pool(y, C: int = 10, per_class: int = 200) -> np.ndarray:
    """The first ``per_class`` training images of every class (the theory page's balanced pool)."""
    y = np.asarray(y)
    idx = [np.flatnonzero(y == c)[:per_class] for c in range(C)]
    if min(len(i) for i in idx) < 2:
        raise ValueError(f"class_pool needs at least 2 images of every class, got {[len(i) for i in idx]}")
    return np.concatenate(idx)


def e_tracker(task, pool: np.ndarray, C: int = 10):
    r"""``track(w) -> {name: (R,)}`` for ``fl.run``: :math:`\mathcal E_i` (Definition 1: the mean softmax output
    of class i over the pool's samples whose label is not i) of every run's global model (``E/i``), their sum
    (``E_sum``) and :math:`\delta = \max_i|\frac1C\sum_c\mathcal E_c - \mathcal E_i|` (``delta``). Eval mode."""
    xi = torch.as_tensor(pool, device=task.x.device)
    x, y = task.x[xi], task.y[xi].cpu().numpy()

    def track(w):
        params = task.unflatten(w)
        out = {f"E/{i}": torch.empty(w.shape[0], dtype=torch.float64) for i in range(C)}
        out["E_sum"] = torch.empty(w.shape[0], dtype=torch.float64)
        out["delta"] = torch.empty(w.shape[0], dtype=torch.float64)
        for r in range(w.shape[0]):
            net = engine.to_module(task.model, params, r).eval()
            with torch.no_grad():
                s = F.softmax(net(x), 1).double().cpu().numpy()
            Ei = np.array([s[y != i, i].mean() for i in range(C)])
            for i in range(C):
                out[f"E/{i}"][r] = Ei[i]
            out["E_sum"][r] = Ei.sum()
            out["delta"][r] = np.abs(Ei.sum() / C - Ei).max()
        return out
    return track


# ---------------------------------------------------------------------------------------- the runs
def jobs(cfg: dict, variants=None, seeds=None) -> list[dict]:
    """One stored job per (variant, seed) of the FMNIST page's profile ``cfg``, setting (3); with the profile's
    ``train_loss_images`` where it has a sample (the page's runs' training loss on the same images)."""
    variants = list(VARIANTS) if variants is None else list(variants)
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise ValueError(f"unknown variants {bad}; choose from {list(VARIANTS)}")
    keys = ("model", "clients", "k", "epochs", "batch_size", "rounds", "subset", "lr")
    base = dict(experiment=_EXPERIMENT, **{k: cfg[k] for k in keys}, setting=SETTING,
                alphas=split_alphas(SETTING), e_pool=200, every=EVERY)
    if cfg.get("train_loss_images") is not None:     # the stored runs' configs have no such key
        base["train_loss_images"] = cfg["train_loss_images"]
    return [dict(base, variant=v, sampler=dict(VARIANTS[v]), seed=int(s))
            for v in variants for s in (cfg["seeds"] if seeds is None else seeds)]


def run_job(job: dict, data) -> pd.DataFrame:
    r"""One variant, one seed: tidy rows (method = the variant, seed, round, metric, value) with the test
    accuracy and the training loss (over all training images, or the job's ``train_loss_images``, the page's
    sample) every ``job['every']`` rounds, :math:`\mathcal E_i` and :math:`\delta` every round, and the sampler's
    log."""
    cfg = {k: job[k] for k in ("model", "clients", "k", "epochs", "batch_size", "rounds", "subset", "lr")}
    n = len(data.y_train) if cfg["subset"] is None else cfg["subset"]
    labels = data.y_train[:n].cpu().numpy()
    part = make_partition(labels, cfg["clients"], job["alphas"], job["seed"])
    idx = train_loss_idx(labels, job.get("train_loss_images"), data.y_train.device)   # None: every training image
    task = make_task(data, part, cfg, train_idx=idx)
    inner = sample.HiCS.for_task(task, cfg["k"], cfg["rounds"], **job["sampler"])
    logged = Logged(inner, part.counts)
    alg = {job["variant"]: fl.Algorithm(aggregate.FedAvg(), sampler=logged, lr=1.0, local_lr=cfg["lr"])}
    res = fl.run(task, alg, seeds=[job["seed"]], rounds=cfg["rounds"], every=job["every"],
                 track=e_tracker(task, class_pool(labels, part.counts.shape[1], job["e_pool"])), track_every=1)
    t = res.tidy()
    keep = t["metric"].isin(["test_acc", "train_loss", "E_sum", "delta"]) | t["metric"].str.startswith("E/")
    log = logged.frame([job["seed"]]).assign(method=job["variant"])
    return pd.concat([t[keep], log], ignore_index=True)[["method", "seed", "round", "metric", "value"]]


def sweep(cfg: dict, data, store, variants=None, seeds=None) -> pd.DataFrame:
    """Every job of :func:`jobs` through :func:`flkit.results.sweep` (cached in ``store``, each job saved as
    it ends)."""
    return results.sweep(jobs(cfg, variants, seeds), lambda j: run_job(j, data), store, progress=False)


def reference_runs(table: pd.DataFrame, methods=("CS", "HiCS-FL", "random")) -> pd.DataFrame:
    """The FMNIST page's stored runs of setting (3) (the main group), for the pairing."""
    return table[(table.group == "main") & (table.setting == SETTING) & table.method.isin(methods)]


# ---------------------------------------------------------------------------------------- reading
def late_table(runs: pd.DataFrame, start: int) -> pd.DataFrame:
    """Per (method, seed): the mean training loss over rounds >= ``start`` and the final test accuracy."""
    t = runs[runs.metric.isin(["train_loss", "test_acc"])]
    rows = []
    for (m, s), d in t.groupby(["method", "seed"], sort=False):
        tl = d[d.metric == "train_loss"]
        acc = d[d.metric == "test_acc"].sort_values("round")
        rows.append(dict(method=m, seed=int(s), late_loss=float(tl[tl["round"] >= start]["value"].mean()),
                         final_acc=float(acc["value"].iloc[-1])))
    return pd.DataFrame(rows)


def _entropy_of(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def selection_table(diag: pd.DataFrame, start: int = 0) -> pd.DataFrame:
    """Per (variant, seed), over the clustered rounds >= ``start`` (after the warm-up): the mean number of
    distinct clusters and distinct classes per round, the mean largest cluster probability, the share of
    rounds in CS fallback, and how unevenly the classes were selected over those rounds: the entropy (nats)
    of the classes' total shares (ln C = 2.30 for equal shares) and the largest class's share."""
    rows = []
    for (m, s), d in diag.groupby(["method", "seed"], sort=False):
        w = d.pivot_table(index="round", columns="metric", values="value")
        w = w[w["mode"].notna() & (w["mode"] != MODES["warmup"]) & (w.index >= start)]
        cls = w[[c for c in w.columns if str(c).startswith("class_share/")]].to_numpy()
        tot = cls.sum(0) / cls.sum()
        rows.append(dict(method=m, seed=int(s),
                         distinct_clusters=(float(w["distinct_clusters"].mean()) if "distinct_clusters" in w
                                            else math.nan),
                         distinct_classes=float(w["distinct_classes"].mean()),
                         pi_max=float(w["pi_max"].mean()) if "pi_max" in w else math.nan,
                         cs_rounds=float((w["mode"] == MODES["cs"]).mean()),
                         class_entropy=_entropy_of(tot), top_class_share=float(tot.max()),
                         H_hat_sd=float(w["H_hat_sd"].mean()) if "H_hat_sd" in w else math.nan))
    return pd.DataFrame(rows)


def paired_gap(late: pd.DataFrame, base: str = "CS") -> pd.DataFrame:
    """Per method other than ``base``: the mean over seeds of (its late training loss - ``base``'s, same
    seed), its standard error, and the share of the paper variant's gap that remains (1: the same deficit, 0:
    the deficit closed)."""
    b = late[late.method == base].set_index("seed")["late_loss"]
    rows = []
    for m, d in late.groupby("method", sort=False):
        if m == base:
            continue
        g = d.set_index("seed")["late_loss"] - b
        g = g.dropna()
        rows.append(dict(method=m, gap=float(g.mean()), se=claims.se(g.to_numpy()), seeds=len(g)))
    out = pd.DataFrame(rows).set_index("method")
    ref = out.loc["paper", "gap"] if "paper" in out.index else math.nan
    out["share_of_paper_gap"] = out["gap"] / ref
    return out


CAUSES = {"distinct": "drawing the clusters with replacement", "gamma0 = 0": "weighting the clusters by their mean "
          "estimate", "T/2": "the temperature",
          "code": "the document's reading of the algorithm (against the authors' code)"}


def slug(name: str) -> str:
    """A variant's name as a glue key: "gamma0 = 0" -> "gamma0_0", "T/2" -> "T_2"."""
    return re.sub(r"[^A-Za-z0-9-]+", "_", name).strip("_")


def diagnosis_words(gap: pd.DataFrame) -> dict:
    """The reading in words, from :func:`paired_gap`: a variant closes the deficit when its late-loss gap to CS
    is within two standard errors of 0 or below a quarter of the paper variant's gap; it keeps it otherwise.
    Returns glue-able strings: ``closes`` and ``keeps`` (variants with their gaps), ``explains`` (the cause the
    closing variants point to: uniform probabilities with the draw unchanged isolate the weighting; K distinct
    of M = K clusters remove the draw and, taking every cluster once, the weighting's effect too) and
    ``temperature`` (what halving T does to the gap)."""
    closes, keeps = [], []
    for m, r in gap.iterrows():
        if m not in CAUSES:
            continue
        small = abs(r.gap) <= 2 * r.se or (math.isfinite(r.share_of_paper_gap) and r.share_of_paper_gap < 0.25)
        (closes if small else keeps).append(m)

    def fmt(ms):
        return "; ".join(f"'{m}' ({gap.loc[m, 'gap']:+.3f} ± {gap.loc[m, 'se']:.3f}, "
                         f"{gap.loc[m, 'share_of_paper_gap']:.0%} of the document's algorithm's gap)"
                         for m in ms) or "none"
    if "gamma0 = 0" in closes:
        explains = ("the weighting of the clusters by their mean estimate, not the with-replacement draw as such: with "
                    "uniform probabilities the draw, still with replacement, nearly matches CS")
        if "distinct" in closes:
            explains += (" (K distinct clusters close it too, but with M = K they take every cluster once whatever the "
                         "probabilities, which removes the weighting as well)")
    elif "distinct" in closes:
        explains = "the with-replacement draw: uniform probabilities alone do not close the gap, K distinct clusters do"
    else:
        explains = "none of the candidate causes alone"
    temperature = "not run"
    if "T/2" in gap.index:
        sh = gap.loc["T/2", "share_of_paper_gap"]
        temperature = (f"halving T {'widens' if sh > 1 else 'narrows'} the gap to {sh:.0%} of the document's "
                       "algorithm's"
                       if "T/2" in keeps else f"halving T closes the gap ({sh:.0%} of the document's algorithm's)")
    return dict(closes=fmt(closes), keeps=fmt(keeps), explains=explains, temperature=temperature)


# ---------------------------------------------------------------------------------------- the claim checks
SIMILAR = 0.1    # "performs similarly": late training losses within 10 % of CS's (our tolerance; the text gives none)


def similar_to_cs_checks(late: pd.DataFrame, var: pd.DataFrame, tolerance: float = SIMILAR) -> list:
    """Sec. 4.1 / Fig. 4(a): "when all clients have severely imbalanced data, HiCS-FL performs similarly to
    [CS] ... helping achieve significant reduction of training variations as evident by a smooth loss
    trajectory". Two checks on paired per-seed values of setting (3): the late training loss of HiCS-FL within
    ``tolerance`` x CS's mean late loss of CS's (:func:`flkit.papers.claims.close`; the document gives no
    number, the tolerance is ours), and HiCS-FL's loss fluctuating no more than CS's
    (:func:`flkit.papers.claims.compare`). ``late``: :func:`late_table` of the page's runs; ``var``: the
    page's :func:`flkit.papers.hics.fmnist.variability`."""
    L = late[late.method.isin(["CS", "HiCS-FL"])].pivot(index="seed", columns="method", values="late_loss").dropna()
    thr = tolerance * float(L["CS"].mean())
    v = var[(var.setting == SETTING) & var.method.isin(["CS", "HiCS-FL"])].pivot(
        index="seed", columns="method", values="fluctuation").dropna()
    return [claims.close(f"setting (3): HiCS-FL's late training loss similar to CS's (within {tolerance:.0%} of "
                         f"CS's, {thr:.3f})", L["HiCS-FL"], L["CS"], threshold=thr),
            claims.compare("setting (3): HiCS-FL's training loss as smooth as CS's (fluctuation, CS minus HiCS-FL)",
                           v["CS"], v["HiCS-FL"])]


def e_delta_frame(diag: pd.DataFrame, method: str = "paper") -> pd.DataFrame:
    """Per (seed, round): sum_i E_i and delta of the ``method`` runs."""
    d = diag[(diag.method == method) & diag.metric.isin(["E_sum", "delta"])]
    return d.pivot_table(index=["seed", "round"], columns="metric", values="value").reset_index()


def e_delta_checks(ed: pd.DataFrame, window: int = 10) -> list:
    r"""Sec. 3.2.1 ("as training proceeds, :math:`\mathcal E_i` decreases") and Sec. 3.2.2 ("during training
    :math:`\delta` gradually decreases to 0 as :math:`\sum_i\mathcal E_i` decreases to 0"), per seed, the mean
    over the first ``window`` recorded rounds against the mean over the last ``window``: the sum decreases, and
    :math:`\delta` decreases (:func:`flkit.papers.claims.compare`, first minus last). The limit 0 lies beyond
    any finite run; the end values are reported beside the checks, not checked."""
    first = ed[ed["round"] < window].groupby("seed")[["E_sum", "delta"]].mean()
    last_r = ed["round"].max()
    last = ed[ed["round"] > last_r - window].groupby("seed")[["E_sum", "delta"]].mean()
    return [claims.compare("E_i: sum_i E_i lower at the end of training than at its start (first minus last "
                           f"{window} rounds)", first["E_sum"], last["E_sum"]),
            claims.compare(f"delta: lower at the end of training than at its start (first minus last {window} "
                           "rounds)", first["delta"], last["delta"])]



# ---------------------------------------------------------------------------------------- the fmnist page
_SUMMARY_NAMES = {"gap": "late loss - CS's (paired)", "se": "se",
                  "share_of_paper_gap": "share of the paper variant's gap",
                  "distinct_clusters": "distinct clusters per round", "distinct_classes": "distinct classes per round",
                  "pi_max": "largest pi", "cs_rounds": "rounds in CS fallback",
                  "class_entropy": "entropy of the class shares", "top_class_share": "largest class share",
                  "H_hat_sd": "sd of H_hat"}


def setting3_values(late: pd.DataFrame, checks: list) -> dict:
    """The prose's numbers of the setting-(3) comparison with CS: the mean late training loss of CS, HiCS-FL and
    random (``late``: :func:`late_table` of the page's runs; NaN: not run) and the verdicts of
    :func:`similar_to_cs_checks`."""
    lr3 = late.groupby("method")["late_loss"].mean()
    v = {f"s3_late_{m}": float(lr3.get(m, np.nan)) for m in ("CS", "HiCS-FL", "random")}
    v.update(s3_similar=checks[0].verdict, s3_smooth=checks[1].verdict)
    return v


def summary(diag: pd.DataFrame, ref: pd.DataFrame, start: int) -> tuple[pd.DataFrame, dict]:
    """The diagnosis table for display and the prose's values. ``diag``: :func:`sweep`; ``ref``:
    :func:`reference_runs`, read on the diagnosis runs' evaluation grid (every :data:`EVERY` rounds); late
    losses over rounds >= ``start``. Per sampler: the mean late loss, the paired gap to CS (:func:`paired_gap`)
    and what the sampler did (:func:`selection_table`). Values: ``same_paper`` (the largest difference between the
    "paper" variant's training loss and the stored HiCS-FL runs': the same runs), the words of
    :func:`diagnosis_words` (``dx_closes`` ...), each variant's gap and share of the paper variant's gap, its
    selection statistics, and ``dx_late_start``."""
    on_grid = ref[ref["round"] % EVERY == 0]               # the rounds the diagnosis runs evaluate
    late = pd.concat([late_table(on_grid, start), late_table(diag, start)], ignore_index=True)
    a = diag[(diag.method == "paper") & (diag.metric == "train_loss")].set_index(["seed", "round"])["value"]
    b = ref[(ref.method == "HiCS-FL") & (ref.metric == "train_loss")].set_index(["seed", "round"])["value"]
    values = {"same_paper": float((a - b.reindex(a.index)).abs().max())}
    gap = paired_gap(late, "CS")
    sel = selection_table(diag).groupby("method", sort=False).mean(numeric_only=True).drop(columns="seed")
    table = gap.join(sel, how="left")
    table.insert(0, "late_loss", late.groupby("method")["late_loss"].mean())
    table.loc["CS", "late_loss"] = late[late.method == "CS"]["late_loss"].mean()
    table = table.rename(columns=_SUMMARY_NAMES)
    words = diagnosis_words(gap)
    values.update({f"dx_{k}": words[k] for k in ("closes", "keeps", "explains", "temperature")})
    for m, r in gap.iterrows():
        values[f"dx_gap_{slug(m)}"] = float(r.gap)
        values[f"dx_share_{slug(m)}"] = float(r.share_of_paper_gap)
    s_sel = selection_table(diag).groupby("method").mean(numeric_only=True)
    for m in s_sel.index:
        for col in ("distinct_clusters", "distinct_classes", "pi_max", "top_class_share", "class_entropy", "cs_rounds"):
            values[f"dx_{col}_{slug(m)}"] = float(s_sel.loc[m, col])
    values["dx_late_start"] = start
    return table.round(3).astype(object).fillna("").rename_axis("sampler (setting (3))"), values


def plot_selection(diag: pd.DataFrame):
    """Per variant, mean over seeds and smoothed, after the warm-up: the largest cluster probability, the
    distinct clusters and the distinct classes among the selected clients, round by round."""
    fig, axes = plt.subplots(1, 3, figsize=(7.6, 2.9))
    piv = diag.pivot_table(index=["method", "seed", "round"], columns="metric", values="value").reset_index()
    piv = piv[piv["mode"].notna() & (piv["mode"] != MODES["warmup"])]
    for m, d in piv.groupby("method", sort=False):
        mean = d.groupby("round").mean(numeric_only=True)
        for ax, col in zip(axes[:2], ("pi_max", "distinct_clusters")):
            if col in mean and mean[col].notna().any():
                ax.plot(mean.index,
                        savgol(mean[col].interpolate().bfill().to_numpy()) if len(mean) >= 13 else mean[col],
                        lw=1.4, label=m)
        axes[2].plot(mean.index, savgol(mean["distinct_classes"].to_numpy()) if len(mean) >= 13
                     else mean["distinct_classes"], lw=1.4, label=m)
    axes[0].set(xlabel="round", ylabel="largest cluster probability", title="$\\max_m \\pi^t_m$")
    axes[1].set(xlabel="round", ylabel="distinct clusters (of 5)", title="clusters among the K selected")
    axes[2].set(xlabel="round", ylabel="distinct classes (of 10)", title="classes in the selected data")
    for ax in axes:
        ax.grid(alpha=0.3)
    handles, labels = axes[2].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, title="sampler", title_fontsize=9,
               bbox_to_anchor=(0.5, 0.0))
    fig.suptitle("HiCS-FL in setting (3): what the sampler does, mean over seeds, smoothed", fontsize=11)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    return fig


def plot_e_delta(ed: pd.DataFrame):
    r""":math:`\sum_i\mathcal E_i` and :math:`\delta` of :func:`e_delta_frame`, one thin line per seed and their
    mean."""
    fig, axes = plt.subplots(1, 2, figsize=(7.6, 2.8))
    for ax, col, lab in zip(axes, ("E_sum", "delta"), ("$\\sum_i \\mathcal{E}_i$", "$\\delta$")):
        for s, d in ed.groupby("seed"):
            ax.plot(d["round"], d[col], lw=0.6, alpha=0.6)
        ax.plot(ed.groupby("round")[col].mean(), color="k", lw=1.5, label="mean over seeds")
        ax.set(xlabel="round", ylabel=lab)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Definition 1's E_i and Theorem 1's delta of the global model, HiCS-FL in setting (3)", fontsize=11)
    fig.tight_layout()
    return fig


def e_delta_values(ed: pd.DataFrame, window: int, checks: list) -> dict:
    r"""The prose's numbers of :func:`e_delta_checks`: the means of :math:`\sum_i\mathcal E_i` and :math:`\delta`
    over the first and the last ``window`` rounds, the verdicts, and :math:`\delta / \sum_i\mathcal E_i` at the
    end."""
    first = ed[ed["round"] < window].mean(numeric_only=True)
    last = ed[ed["round"] > ed["round"].max() - window].mean(numeric_only=True)
    v = {}
    for col in ("E_sum", "delta"):
        v[f"ed_first_{col}"] = float(first[col])
        v[f"ed_last_{col}"] = float(last[col])
    v.update(ed_E=checks[0].verdict, ed_delta=checks[1].verdict, ed_ratio=float(last["delta"] / last["E_sum"]))
    return v
