"""FedAU's main table (document 000, slides "Experiments (cont'd)"; the page notebooks/fedau/table.ipynb): settings,
runs and the checks of the document's readings. The data, its split and the document's numbers are in
:mod:`flkit.papers.fedau.common`; the cutoff study, which trains on these runs' setting, in
:mod:`flkit.papers.fedau.cutoff`.

Every cell of the table is one run of :func:`flkit.fl.run`: a method (an aggregation rule of
:mod:`flkit.aggregate` with the authors' local and global step sizes) under one participation pattern
and one seed. All methods and seeds of a pattern train side by side in one call (one runs axis); the
seed fixes the data split, the participation probabilities p_n, the participation masks (shared by the
seven methods), the initial model and the minibatches, each from its own stream.

Facts from the authors' code (IBM/fedau@6e9cce9): the step sizes of README.md (CIFAR-10; the only ones
published), N = 250 clients, I = 5 local iterations of batch 16, 10,000 rounds (``-iters-total 50000``),
seeds 1-5, data and participation Dirichlet 0.1, mean p 0.1, p_min 0.02 (``config.py``), the
normalizations of ``dataset/dataset.py``, full training-set and test-set accuracy every 10 rounds
(``statistic/collect_stat.py``). Departures, all stated on the page: the engine draws each round's
minibatches afresh from a stream keyed by (seed, round, client) (the code walks a per-client shuffled
loader across rounds); train-time augmentation (random crop/flip; CIFAR-100's colour transforms) is not
applied; accuracy is recorded every ``eval_every`` rounds and the table averages the evaluations in the
last ``window`` rounds (the document does not say which rounds its table averages).

The step sizes were published for the CIFAR-10 CNN only. On a stand-in (another data set or model) they are
retuned (:func:`tune`): per method a grid of (gamma, eta) on the lattice 10^(k/4) on which the authors' values
lie, Bernoulli participation, the profile's clients and rounds, tuning seeds disjoint from the table's, and a
validation split held out from the training set (the test set is never read); the rule is :func:`select`.
The CNN spot-check (profile "cnn-spot": the authors' Fashion-MNIST CNN, 1,000 rounds, Bernoulli participation,
five methods, 2 seeds) keeps the authors' pairs: its runs are :func:`configs` without ``steps``; ``tune`` on that
profile would retune them for the CNN (not run: a grid of CNN runs per method).
"""
from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

from flkit import aggregate, fl, models, plots, results
from flkit.papers import claims
from flkit.papers.fedau.common import DATASETS, DOCUMENT_DATASETS, NAMES, REFERENCE, load_data, mask, split
from flkit.papers.settings import positive_int, probabilities, seeds as check_seeds, with_overrides
from flkit.seeding import resolve_device
from flkit.tasks import EngineTask

__all__ = ["PATTERNS", "METHODS", "PROFILES", "profile", "base_config", "configs", "run_batch", "sweep",
           "summarize", "table", "checks", "step", "lattice_index", "grid", "tune_configs", "select", "tune",
           "tuning_table", "tuning_values", "tuning_grid", "sensitivity", "side_by_side", "SPOT_METHODS", "spot_scale",
           "spot_differences", "spot_runs", "spot_summary"]

# the document's participation patterns with the code's parameters (same stationary p_n)
PATTERNS = {"bernoulli": "Bernoulli", "markov": "Markovian (x = 0.05)", "cyclic": "cyclic (L = 100)"}

# method -> (rule, cutoff K, local step size gamma, global step size eta): README.md of IBM/fedau@6e9cce9
# (CIFAR-10, the only step sizes published; used for every dataset here)
METHODS = {
    "FedAU (K = inf)": ("fedau", None, 0.1, 1.0),
    "FedAU (K = 50)": ("fedau", 50, 0.1, 1.0),
    "Average participating": ("average_participating", None, 0.0562, 1.78),
    "Average all": ("average_all", None, 0.1, 10.0),
    "FedVarp": ("fedvarp", None, 0.0562, 1.0),
    "MIFA": ("mifa", None, 0.0562, 1.0),
    "Known p": ("known_p", None, 0.0562, 1.0),
}


def rule(name: str, K: int | None = None):
    """The aggregation rule of a method (flkit.aggregate)."""
    rules = {"fedau": lambda: aggregate.FedAU(K),
             "average_participating": aggregate.FedAvg, "average_all": aggregate.AverageAll,
             "fedvarp": aggregate.FedVarp, "mifa": aggregate.MIFA, "known_p": aggregate.KnownP}
    if name not in rules:
        raise ValueError(f"unknown rule {name!r}; choose one of {sorted(rules)}")
    return rules[name]()


# the CNN spot-check's methods (profile "cnn-spot"): FedAU with and without the cutoff, against the memory-based
# rule, the plain average and the oracle weights
SPOT_METHODS = ("FedAU (K = inf)", "FedAU (K = 50)", "MIFA", "Average participating", "Known p")

_COMMON = dict(clients=250, local_steps=5, batch=16, data_alpha=0.1, part_alpha=0.1, p_mean=0.1, p_min=0.02,
               markov_x=0.05, cycle=100, seeds=[1, 2, 3, 4, 5], methods=list(METHODS), patterns=list(PATTERNS),
               # step-size tuning (`tune`): seeds disjoint from the table's, validation images held out of the
               # training set, the first grid +-tune_radius lattice steps around the authors' values, at most
               # tune_extend extensions of an edge the selection lands on, ties within tune_tol points
               tune_seeds=[0], tune_validation=10000, tune_radius=1, tune_extend=3, tune_tol=0.1)
PROFILES = {
    # seconds on one CPU thread: a subset of the data, 20 clients, logistic regression
    "smoke": dict(_COMMON, dataset="fashion-mnist", model="logreg", clients=20, rounds=30, eval_every=10,
                  window=10, seeds=[1], train_subset=2000, test_subset=500, p_min=0.05, tune_validation=500,
                  tune_extend=1),
    # the CPU profile that is executed here: the document's setting with logistic regression on
    # Fashion-MNIST in place of the CNN and 1,000 rounds in place of 10,000
    # (at most two widenings of the step-size grid: a tuning run costs about a minute on a third of a CPU core)
    "reduced": dict(_COMMON, dataset="fashion-mnist", model="logreg", rounds=1000, eval_every=50, window=200,
                    train_subset=None, test_subset=None, tune_extend=2),
    # the CNN spot-check: the authors' Fashion-MNIST CNN at the reduced profile's horizon (1,000 of 10,000
    # rounds), Bernoulli participation, five methods, 2 seeds, the authors' published step sizes (tuned for
    # their CIFAR-10 CNN; not retuned for this CNN: the table's runs use `configs(s)` without `steps`).
    # Cyclic participation is an override away (patterns=[bernoulli, cyclic]).
    "cnn-spot": dict(_COMMON, dataset="fashion-mnist", model=None, rounds=1000, eval_every=50, window=200,
                     seeds=[1, 2], patterns=["bernoulli"], methods=list(SPOT_METHODS),
                     train_subset=None, test_subset=None),
    # the document's setting (the authors' CNN; dataset as given, Fashion-MNIST here as a stand-in)
    "paper": dict(_COMMON, dataset="fashion-mnist", model=None, rounds=10000, eval_every=50, window=1000,
                  train_subset=None, test_subset=None),
}


def profile(name: str, **overrides) -> dict:
    """The settings of a profile with `overrides` (None values keep the profile's); checked before any work."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    s = with_overrides(copy.deepcopy(PROFILES[name]), overrides, f"FedAU profile {name!r}")
    s["profile"] = name
    validate(s)
    return s


def validate(s: Mapping) -> None:
    """One clear ValueError for a bad setting, before any work."""
    if s["dataset"] not in DATASETS:
        raise ValueError(f"dataset must be one of {sorted(DATASETS)}, got {s['dataset']!r}")
    if s["model"] is not None and s["model"] not in models.NAMES:
        raise ValueError(f"model must be None (the authors' CNN) or one of {sorted(models.NAMES)}, got {s['model']!r}")
    if s.get("profile") == "cnn-spot" and s["model"] not in (None, DATASETS[s["dataset"]]["model"]):
        raise ValueError(f"profile 'cnn-spot' is the authors' CNN: model must be None or "
                         f"{DATASETS[s['dataset']]['model']!r} for {s['dataset']}, got {s['model']!r}")
    for k in ("clients", "rounds", "eval_every", "window", "local_steps", "batch", "cycle"):
        positive_int(s[k], k)
    if s["window"] > s["rounds"]:
        raise ValueError(f"window ({s['window']}) must be at most rounds ({s['rounds']})")
    check_seeds(s["seeds"])
    check_seeds(s["tune_seeds"], "tune_seeds")
    if set(s["tune_seeds"]) & set(s["seeds"]):
        raise ValueError(f"tune_seeds {s['tune_seeds']} must be disjoint from the table's seeds {s['seeds']}")
    positive_int(s["tune_validation"], "tune_validation")
    train = s["train_subset"] or 60000
    if s["tune_validation"] >= train:
        raise ValueError(f"tune_validation ({s['tune_validation']}) must be smaller than the training set ({train})")
    positive_int(s["tune_radius"], "tune_radius")
    if not isinstance(s["tune_extend"], int) or s["tune_extend"] < 0:
        raise ValueError(f"tune_extend must be an int >= 0, got {s['tune_extend']!r}")
    if not isinstance(s["tune_tol"], (int, float)) or not s["tune_tol"] >= 0:
        raise ValueError(f"tune_tol must be a number >= 0 (points of validation accuracy), got {s['tune_tol']!r}")
    for k, allowed in (("methods", list(METHODS)), ("patterns", list(PATTERNS))):
        v = s[k]
        if isinstance(v, str) or not isinstance(v, Sequence) or not v or any(m not in allowed for m in v):
            raise ValueError(f"{k} must be a non-empty list of {allowed}, got {v!r}")
    for k in ("train_subset", "test_subset"):
        if s[k] is not None:
            positive_int(s[k], k)
    probabilities([s["p_mean"], s["p_min"], s["markov_x"]], "p_mean, p_min and markov_x")


def model_name(s: Mapping) -> str:
    return s["model"] or DATASETS[s["dataset"]]["model"]


# ------------------------------------------------------------------------------------------ configs
def base_config(s: Mapping) -> dict:
    """What every run of the profile `s` shares (the data, the model, the clients, the horizon); the studies
    add the method, its step sizes, the participation and the seed (:func:`configs`, :func:`cutoff.configs
    <flkit.papers.fedau.cutoff.configs>`)."""
    base = {k: s[k] for k in ("dataset", "clients", "rounds", "local_steps", "batch", "data_alpha", "part_alpha",
                              "p_mean", "eval_every", "train_subset", "test_subset")}
    base["model"] = model_name(s)
    return base


def configs(s: Mapping, *, steps: Mapping[str, tuple[float, float]] | None = None) -> list[dict]:
    """One config per run of the table: every method x pattern x seed. steps: {method: (gamma, eta)} in place
    of the authors' (METHODS) for the methods it names (e.g. :func:`tune`'s selection); a run whose step sizes
    equal the authors' is the same run (the same config)."""
    steps = dict(steps or {})
    unknown = sorted(set(steps) - set(METHODS))
    if unknown:
        raise ValueError(f"steps names unknown methods {unknown}; choose among {list(METHODS)}")
    base, out = base_config(s), []
    for pattern in s["patterns"]:
        for m in s["methods"]:
            r, K, gamma, eta = METHODS[m]
            gamma, eta = steps.get(m, (gamma, eta))
            for seed in s["seeds"]:
                out.append(dict(base, pattern=pattern, method=m, rule=r, K=K, gamma=gamma, eta=eta,
                                p_min=s["p_min"], seed=seed, **_pattern_args(s, pattern)))
    return out


def _pattern_args(s: Mapping, pattern: str) -> dict:
    return {"markov": {"markov_x": s["markov_x"]}, "cyclic": {"cycle": s["cycle"]}}.get(pattern, {})


def batch_group(c: Mapping) -> dict:
    """What the runs of one fl.run call must share (all but method, step sizes, K and seed)."""
    return {k: v for k, v in c.items() if k not in ("method", "rule", "K", "gamma", "eta", "seed")}


TABLE_RULES = ("mifa", "fedvarp")          # rules that keep an N x d table per run


def sweep_group(c: Mapping) -> dict:
    """How the sweep batches runs: by `batch_group`, with the two table-keeping methods apart from the
    others. A memoryless batch's checkpoint is the models alone (about 20 MB for a pattern's 25 CNN runs:
    small enough to carry to the next machine), while MIFA's and FedVarp's tables (250 x d each, 2 GB for
    10 CNN runs) stay out of it; their batch is short enough to finish within one call on a GPU."""
    return dict(batch_group(c), tables=c["rule"] in TABLE_RULES)


# --------------------------------------------------------------------------------------------- runs
def run_batch(configs: Sequence[Mapping], device="auto", *, checkpoint_dir=None, deadline: float | None = None,
              progress: bool = False, cpu_threads: int | None = 2) -> list[pd.DataFrame]:
    """Run configs that share a `batch_group` in one `fl.run` call; one tidy table (round, metric, value)
    per config. checkpoint_dir: the batch's mid-run state (a later call with the same configs resumes;
    `fl.Deadline` when it stops at `deadline`)."""
    configs = [dict(c) for c in configs]
    if len({repr(sorted(batch_group(c).items())) for c in configs}) != 1:
        raise ValueError("run_batch needs configs that differ only in method, step sizes, K and seed")
    dev = resolve_device(device)
    if dev.type == "cpu" and cpu_threads:
        torch.set_num_threads(cpu_threads)
    c0 = configs[0]
    x, y, xt, yt = load_data(c0, dev)
    seeds = sorted({c["seed"] for c in configs})
    splits = {s: split(dict(c0, seed=s), y.cpu().numpy()) for s in seeds}
    masks = {s: mask(dict(c0, seed=s), splits[s][1]) for s in seeds}
    task = EngineTask(models.build(c0["model"]).to(dev), x, y, {s: splits[s][0].indices for s in seeds}, xt, yt,
                      batch_size=c0["batch"], steps=c0["local_steps"], train_metrics=True, split_by="seed")
    algorithms, seed_of = {}, {}
    for c in configs:
        name = f"{c['method']}|{c['gamma']}|{c['eta']}"
        algorithms.setdefault(name, fl.Algorithm(rule(c["rule"], c["K"]), lr=c["eta"], local_lr=c["gamma"]))
        seed_of.setdefault(name, []).append(c["seed"])
    ckpt = None
    if checkpoint_dir is not None:
        ckpt = os.path.join(checkpoint_dir,
                            results.config_key({"batch": [results.config_key(c) for c in configs]}) + ".pt")
    res = fl.run(task, algorithms, seeds=seed_of, rounds=c0["rounds"], availability=masks,
                 p={s: splits[s][1] for s in seeds}, every=c0["eval_every"], diverge_factor=None,
                 checkpoint=ckpt, deadline=deadline, progress=progress, desc=f"{c0['pattern']}")
    tidy = res.tidy()
    out = []
    for c in configs:
        name = f"{c['method']}|{c['gamma']}|{c['eta']}"
        t = tidy[(tidy.method == name) & (tidy.seed == c["seed"])][["round", "metric", "value"]]
        t = t.reset_index(drop=True)
        t.attrs["wall_time_s"] = res.wall_s      # the batch's wall time, as every store records it
        out.append(t)
    return out


def spot_runs(s: Mapping, root=None) -> tuple[pd.DataFrame | None, int, int]:
    """The stored runs of a profile's table read without computing any (the pages' reading of the CNN
    spot-check): (runs or None when not all are stored, runs stored, runs in all)."""
    store = store_for(s, root)
    cs = configs(s)
    done = sum(store.done(c) for c in cs)
    if done < len(cs):
        return None, done, len(cs)
    return sweep(s, root=root, compute_missing=False, progress=False), done, len(cs)


def store_for(s: Mapping, root=None):
    """The results store: the book's (results/fedau/) for the executed profiles, scratch for smoke."""
    if s["profile"] == "smoke":
        return results.book_store("tmp/fedau", root)       # scratch (git-ignored)
    return results.book_store("fedau", root)


def sweep(s: Mapping, *, root=None, device="auto", compute_missing: bool = True, deadline: float | None = None,
          progress: bool = True, checkpoint_dir=None, cpu_threads: int | None = 2, steps: Mapping | None = None,
          runs: Sequence[Mapping] | None = None, desc: str = "FedAU table") -> pd.DataFrame:
    """Every run of the table (with `steps` as in :func:`configs`; or the configs `runs`, e.g.
    :func:`tune_configs` or :func:`cutoff.configs <flkit.papers.fedau.cutoff.configs>`), from the store or
    computed (grouped so that a pattern's methods and seeds train together); resumable at the run level
    (stored runs are skipped) and inside a batch (checkpoint_dir). compute_missing=False raises when a run is
    not stored."""
    store = store_for(s, root)
    cs = configs(s, steps=steps) if runs is None else [dict(c) for c in runs]
    missing = [c for c in cs if not store.done(c)]
    if missing and not compute_missing:
        raise RuntimeError(f"{len(missing)} of {len(cs)} runs are not stored; run with compute_missing=True")
    fn = lambda batch: run_batch(batch, device, checkpoint_dir=checkpoint_dir, deadline=deadline,  # noqa: E731
                                 cpu_threads=cpu_threads)
    df = results.sweep_batched(cs, fn, store, group_by=sweep_group, progress=progress, desc=desc)
    df.attrs["computed"], df.attrs["stored"] = len(missing), len(cs) - len(missing)
    return df


# ------------------------------------------------------------------------------------- step-size tuning
PER_DECADE = 4               # the authors' step sizes lie on 10^(k/4): 0.0562 = 10^(-5/4), 1.78 = 10^(1/4)
# a method that takes another's tuned step sizes: the cutoff K is compared at equal step sizes, as the authors do
TUNED_WITH = {"FedAU (K = 50)": "FedAU (K = inf)"}


def step(k: int) -> float:
    """Point k of the step-size lattice, 10^(k/4), to three significant figures as the authors write their step
    sizes (so that their values are lattice points exactly and their stored runs are the grid's)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"a lattice index is an int, got {k!r}")
    return float(f"{10 ** (int(k) / PER_DECADE):.3g}")


def lattice_index(v: float) -> int:
    """The k with step(k) == v; ValueError for a value off the lattice."""
    if not v > 0:
        raise ValueError(f"a step size is > 0, got {v!r}")
    k = int(round(PER_DECADE * np.log10(v)))
    if step(k) != v:
        raise ValueError(f"{v!r} is not on the lattice 10^(k/{PER_DECADE}) (nearest: {step(k)!r})")
    return k


def grid(gamma_ks: Sequence[int], eta_ks: Sequence[int]) -> list[tuple[float, float]]:
    """Every (gamma, eta) = (step(i), step(j)), i in gamma_ks, j in eta_ks."""
    return [(step(i), step(j)) for i in gamma_ks for j in eta_ks]


def tuned_methods(s: Mapping) -> list[str]:
    """The methods of `s` whose step sizes are tuned (the others take those of TUNED_WITH)."""
    return [m for m in s["methods"] if m not in TUNED_WITH] + sorted(
        {TUNED_WITH[m] for m in s["methods"] if m in TUNED_WITH} - set(s["methods"]))


def first_ranges(s: Mapping) -> dict[str, tuple[range, range]]:
    """{method: (gamma indices, eta indices)}: tune_radius lattice steps either side of the authors' values."""
    r = s["tune_radius"]
    out = {}
    for m in tuned_methods(s):
        kg, ke = lattice_index(METHODS[m][2]), lattice_index(METHODS[m][3])
        out[m] = (range(kg - r, kg + r + 1), range(ke - r, ke + r + 1))
    return out


def tune_configs(s: Mapping, ranges: Mapping[str, tuple[Sequence[int], Sequence[int]]]) -> list[dict]:
    """The tuning runs: every method of `ranges` x its grid x tune_seeds, Bernoulli participation, the profile's
    clients and rounds, tune_validation training images held out (`load_data`)."""
    base = configs(dict(s, patterns=["bernoulli"], methods=list(ranges), seeds=s["tune_seeds"]))
    out = []
    for c in base:
        if c["seed"] != s["tune_seeds"][0]:
            continue
        for gamma, eta in grid(*ranges[c["method"]]):
            for seed in s["tune_seeds"]:
                out.append(dict(c, gamma=gamma, eta=eta, seed=seed, validation=s["tune_validation"]))
    return out


def tune_scores(df: pd.DataFrame, s: Mapping) -> pd.DataFrame:
    """Per (method, gamma, eta): the mean over tune_seeds of the final-window validation accuracy (%), the
    selection's quantity (``val_acc``), and of the final-window training loss (shown beside it, not used).
    A run whose accuracy is not finite (diverged) scores -inf."""
    keys = ["method", "gamma", "eta"]
    last = df[df["round"] > s["rounds"] - s["window"]]
    g = last.groupby(keys + ["seed", "metric"])["value"].mean().unstack("metric")
    acc = 100 * g["test_acc"].where(np.isfinite(g["test_acc"]), -np.inf)
    out = pd.DataFrame({"val_acc": acc.groupby(keys).mean(), "train_loss": g["train_loss"].groupby(keys).mean(),
                        "seeds": acc.groupby(keys).count()})
    return out.reset_index()


def select(scores: pd.DataFrame, tol: float, authors: Mapping[str, tuple[float, float]] | None = None) -> pd.DataFrame:
    """The rule: per method, the (gamma, eta) of the highest `val_acc` (validation accuracy, %, on the tuning
    seeds); grid points within `tol` points of it count as tied, and among them the one nearest the authors'
    values (fewest lattice steps, |di| + |dj|) wins, then the higher score. Reads no other column of `scores`."""
    authors = authors or {m: (v[2], v[3]) for m, v in METHODS.items()}
    rows = []
    for m, g in scores.groupby("method", sort=False):
        v = g["val_acc"].to_numpy(dtype=float)
        if not np.isfinite(v).any():
            raise ValueError(f"{m}: every grid point diverged; widen the grid toward smaller step sizes")
        best = np.nanmax(np.where(np.isfinite(v), v, -np.inf))
        tied = g[v >= best - tol]
        ag, ae = (lattice_index(x) for x in authors[m])
        dist = [abs(lattice_index(a) - ag) + abs(lattice_index(b) - ae) for a, b in zip(tied.gamma, tied.eta)]
        pick = tied.assign(_d=dist).sort_values(["_d", "val_acc"], ascending=[True, False]).iloc[0]
        rows.append(dict(method=m, gamma=float(pick.gamma), eta=float(pick.eta), val_acc=float(pick.val_acc),
                         best_val_acc=float(best), tied=len(tied)))
    return pd.DataFrame(rows)


def _extend(ranges: dict, chosen: pd.DataFrame) -> dict:
    """Each range whose chosen index is its edge, one lattice step wider on that side; the others unchanged."""
    out = {}
    for _, r in chosen.iterrows():
        rg, re = ranges[r.method]
        new = []
        for ks, k in ((rg, lattice_index(r.gamma)), (re, lattice_index(r.eta))):
            lo, hi = ks.start - (k == ks.start), ks.stop + (k == ks.stop - 1)
            new.append(range(lo, hi))
        out[r.method] = tuple(new)
    return out


def tune(s: Mapping, *, root=None, device="auto", compute_missing: bool = True, progress: bool = False,
         cpu_threads: int | None = 2) -> dict:
    """The step-size study: the first grid (:func:`first_ranges`), then, while a method's selection
    (:func:`select`) lies on an edge of its grid, that edge one lattice step further (at most tune_extend
    times). Returns {"ranges": {method: (gamma indices, eta indices)}, "scores": every grid point
    (:func:`tune_scores`), "selected": :func:`select`'s table, "steps": {method: (gamma, eta)} for every
    method of `s` (TUNED_WITH's take their partner's), "on_edge": methods still selected on an edge}."""
    ranges = first_ranges(s)
    for attempt in range(s["tune_extend"] + 1):
        df = sweep(s, runs=tune_configs(s, ranges), root=root, device=device, compute_missing=compute_missing,
                   progress=progress, cpu_threads=cpu_threads)
        scores = tune_scores(df, s)
        chosen = select(scores, s["tune_tol"])
        wider = _extend(ranges, chosen)
        if wider == ranges or attempt == s["tune_extend"]:
            break
        ranges = wider
    steps = {r.method: (float(r.gamma), float(r.eta)) for _, r in chosen.iterrows()}
    steps.update({m: steps[w] for m, w in TUNED_WITH.items() if m in s["methods"]})
    on_edge = sorted(m for m in ranges if _extend({m: ranges[m]}, chosen[chosen.method == m]) != {m: ranges[m]})
    return dict(ranges=ranges, scores=scores, selected=chosen, steps={m: steps[m] for m in s["methods"]},
                on_edge=on_edge)


def tuning_table(res: Mapping, s: Mapping) -> pd.DataFrame:
    """The step-size study in one table, per method of `s`: the authors' (gamma, eta), the grid searched (as
    lattice indices k of 10^(k/4) and values), the selection and the validation accuracy (%, tuning seeds'
    mean) at the authors' values and at the selection. A method of TUNED_WITH names whose values it takes."""
    sc = res["scores"].set_index(["method", "gamma", "eta"])["val_acc"]
    sel = res["selected"].set_index("method")
    rows = []
    for m in s["methods"]:
        t = TUNED_WITH.get(m, m)
        _, _, ag, ae = METHODS[m]
        gk, ek = res["ranges"][t]
        g, e = res["steps"][m]
        rows.append({"method": m, "authors' gamma": ag, "authors' eta": ae,
                     "gamma grid": f"{step(gk[0]):g} to {step(gk[-1]):g} (k = {gk[0]}..{gk[-1]})",
                     "eta grid": f"{step(ek[0]):g} to {step(ek[-1]):g} (k = {ek[0]}..{ek[-1]})",
                     "selected gamma": g, "selected eta": e,
                     "val. acc. at the authors' (%)":
                         round(float(sc.get((t, ag, ae), np.nan)), 2) if t == m else np.nan,
                     "val. acc. at the selection (%)": round(float(sel.loc[t, "val_acc"]), 2),
                     "tied points": int(sel.loc[t, "tied"]),
                     "note": f"as {t}" if t != m else ("selection on the grid's edge" if m in res["on_edge"] else "")})
    return pd.DataFrame(rows).set_index("method")


def tuning_values(res: Mapping, s: Mapping, by_loss: pd.DataFrame) -> dict:
    """The step-size study's numbers for the page's prose: methods tuned (n_tuned), moved off the authors' pair
    (n_moved) and to a smaller product gamma eta (n_smaller), those kept (kept) or still on an edge (on_edge),
    grid points (n_grid), methods whose pick by training loss (`by_loss`, indexed by method) differs
    (n_loss_differs), and the largest gain in validation accuracy over the authors' pair (max_gain, points) with
    its method (max_gain_method)."""
    sel = res["selected"].set_index("method")

    def pair(d, m):
        return d.loc[m, "gamma"], d.loc[m, "eta"]

    moved = [m for m in sel.index if pair(sel, m) != METHODS[m][2:]]
    smaller = [m for m in moved if sel.loc[m, "gamma"] * sel.loc[m, "eta"] < METHODS[m][2] * METHODS[m][3]]
    tt = tuning_table(res, s)
    gain = (tt["val. acc. at the selection (%)"] - tt["val. acc. at the authors' (%)"]).dropna()
    return dict(n_tuned=len(sel), n_moved=len(moved), n_smaller=len(smaller), n_grid=len(res["scores"]),
                n_loss_differs=sum(pair(by_loss, m) != pair(sel, m) for m in sel.index),
                kept=", ".join(m for m in sel.index if m not in moved) or "none",
                on_edge=", ".join(res["on_edge"]) or "none", max_gain=float(gain.max()), max_gain_method=gain.idxmax())


def tuning_grid(res: Mapping, method: str) -> pd.DataFrame:
    """One method's validation accuracy (%) over its grid: rows gamma, columns eta."""
    sc = res["scores"]
    return sc[sc.method == method].pivot(index="gamma", columns="eta", values="val_acc")


def sensitivity(main: pd.DataFrame, other: pd.DataFrame,
                labels: tuple[str, str] = ("retuned", "authors'")) -> pd.DataFrame:
    """Every paired difference to FedAU (K = inf) (:func:`differences`) under two sets of step sizes side by
    side: per pattern and method, "mean ± 2 s.e." and the direction under each, whether the direction
    changes, and the shift of the mean difference (first set minus second, points)."""
    a, b = main.set_index(["pattern", "method"]), other.set_index(["pattern", "method"])
    rows = []
    for key in a.index:
        if key not in b.index:
            continue
        r = {"pattern": key[0], "method": key[1]}
        for lab, d in zip(labels, (a.loc[key], b.loc[key])):
            r[f"{lab}: difference (points)"] = f"{d.ours:+.2f} ± {2 * d.se:.2f}"
            r[f"{lab}: direction"] = d.direction
        r["direction changes"] = a.loc[key, "direction"] != b.loc[key, "direction"]
        r["shift (points)"] = float(a.loc[key, "ours"] - b.loc[key, "ours"])
        rows.append(r)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------- summaries
def final_window(df: pd.DataFrame, s: Mapping) -> pd.DataFrame:
    """Per run (pattern, method, seed, metric): the mean over the evaluations in the last `window` rounds."""
    last = df[df["round"] > s["rounds"] - s["window"]]
    keys = [k for k in ("pattern", "method", "K", "p_min", "seed") if k in last.columns]
    return last.groupby(keys + ["metric"], dropna=False)["value"].mean().reset_index()


def summarize(df: pd.DataFrame, s: Mapping) -> pd.DataFrame:
    """Mean and sd over seeds (in %) of the final-window train and test accuracy, per pattern and method."""
    fw = final_window(df, s)
    fw = fw[fw.metric.isin(["train_acc", "test_acc"])]
    g = fw.groupby(["pattern", "method", "metric"])["value"]
    out = pd.DataFrame({"mean": 100 * g.mean(), "sd": 100 * g.std(ddof=1), "seeds": g.count()}).reset_index()
    return out


def _cell(mean: float, sd: float) -> str:
    return f"{mean:.1f} ± {sd:.1f}" if np.isfinite(sd) else f"{mean:.1f} (1 seed)"


def ours_label(s: Mapping, steps: str | None = None) -> str:
    """The header of our column: the data set and, where they depart from the document's, the model and the
    rounds, and `steps` (which step sizes, e.g. "retuned") where given ("Fashion-MNIST, logistic regression,
    1,000 rounds, retuned step sizes (ours)")."""
    parts = [NAMES[s["dataset"]]]
    if s["model"] is not None and s["model"] != DATASETS[s["dataset"]]["model"]:
        parts.append(MODEL_WORDS.get(s["model"], str(s["model"])).replace("multinomial ", ""))
    if s["rounds"] != 10000:
        parts.append(f"{s['rounds']:,} rounds")
    if steps:
        parts.append(f"{steps} step sizes")
    return ", ".join(parts) + " (ours)"


def table(summary: pd.DataFrame, pattern: str, dataset: str, label: str | None = None) -> pd.DataFrame:
    """One pattern's block of the document's table: rows the seven methods; columns (dataset, Train/Test)
    with ours "mean ± sd" (% over seeds) for the executed dataset first (headed `label`, default
    "<dataset> (ours)"; :func:`ours_label` names the model and rounds where they depart), then the document's
    four datasets (the document's values; ours for those are not executed here)."""
    label = label or f"{NAMES[dataset]} (ours)"
    rows = {}
    for m in METHODS:
        row = {}
        for metric, col in (("train_acc", "Train"), ("test_acc", "Test")):
            hit = summary[(summary.pattern == pattern) & (summary.method == m) & (summary.metric == metric)]
            row[(label, col)] = _cell(hit["mean"].iloc[0], hit["sd"].iloc[0]) if len(hit) else "not run"
        for d in DOCUMENT_DATASETS:
            ref = REFERENCE[(REFERENCE.pattern == pattern) & (REFERENCE.method == m) & (REFERENCE.dataset == d)]
            for sp in ("train", "test"):
                r = ref[ref.split == sp]
                row[(f"{NAMES[d]} (document)", sp.capitalize())] = _cell(r["mean"].iloc[0], r["sd"].iloc[0])
        rows[m] = row
    out = pd.DataFrame(rows).T
    out.columns = pd.MultiIndex.from_tuples(out.columns)
    out.index.name = "method"
    return out


def rank_agreement(summary: pd.DataFrame, metric: str = "test_acc") -> pd.DataFrame:
    """Spearman rank correlation, per pattern, between our methods' mean accuracy and the document's on
    each of its datasets (the absolute numbers differ with the data and model; the ordering is what the
    document's readings rest on)."""
    rows = []
    for p in PATTERNS:
        ours = summary[(summary.pattern == p) & (summary.metric == metric)].set_index("method")["mean"]
        if ours.empty:
            continue
        for d in DOCUMENT_DATASETS:
            ref = REFERENCE[(REFERENCE.pattern == p) & (REFERENCE.dataset == d) &
                            (REFERENCE.split == metric.split("_")[0])].set_index("method")["mean"]
            common = ours.index.intersection(ref.index)
            rho = spearmanr(ours[common], ref[common]).statistic if len(common) > 2 else np.nan
            rows.append(dict(pattern=PATTERNS[p], dataset=NAMES[d], methods=len(common), spearman=rho))
    return pd.DataFrame(rows).pivot(index="pattern", columns="dataset", values="spearman")


def plot_curves(df: pd.DataFrame, s: Mapping, metric: str = "test_acc", smooth=None):
    """Mean accuracy over seeds vs round, one panel per pattern (band: sd over seeds; `smooth`: an EMA
    weight applied to each run's evaluations, `flkit.plots.curves`)."""
    pats = [p for p in PATTERNS if p in set(df.pattern)]
    fig, axes = plots.figure(1, len(pats), row_height=2.9, sharey=True)
    d = df[df.metric == metric].assign(value=lambda x: 100 * x["value"])
    for ax, p in zip(axes[0], pats):
        plots.curves(d[d.pattern == p], hue="method", ax=ax, order=list(METHODS), smooth=smooth)
        ax.set_title(PATTERNS[p])
        ax.set_xlabel("round")
        ax.set_ylabel("")
        ax.get_legend().remove() if ax.get_legend() else None
    axes[0, 0].set_ylabel(f"{'test' if metric == 'test_acc' else 'train'} accuracy (%)")
    lo = np.nanpercentile(d[d["round"] >= s["rounds"] // 10]["value"], 1)
    axes[0, 0].set_ylim(max(0, lo - 5), None)
    h, lab = axes[0, 0].get_legend_handles_labels()
    fig.legend(h, lab, loc="outside lower center", ncols=4, frameon=False)
    return fig


# ---------------------------------------------------------------------------------------------- checks
def per_seed(df: pd.DataFrame, s: Mapping, metric: str = "test_acc") -> pd.DataFrame:
    """(pattern, method) x seed table of the final-window accuracy in %."""
    fw = final_window(df, s)
    fw = fw[fw.metric == metric]
    return (100 * fw.pivot_table(index=["pattern", "method"], columns="seed", values="value"))


def checks(df: pd.DataFrame, s: Mapping, metric: str = "test_acc") -> list[claims.Check]:
    """The document's readings of its table, on our runs (paired over seeds, the book's rule):
    FedAU (K = inf) >= average participating and >= average all in every pattern; FedAU close to
    known p (within 1 point); MIFA and FedVarp behind FedAU under cyclic participation; K = 50 >= K = inf."""
    ps = per_seed(df, s, metric)
    out = []

    def v(p, m):
        return ps.loc[(p, m)].to_numpy() if (p, m) in ps.index else np.array([np.nan])

    for p in s["patterns"]:
        for other in ("Average participating", "Average all"):
            out.append(claims.compare(f"{PATTERNS[p]}: FedAU (K = inf) >= {other}", v(p, "FedAU (K = inf)"),
                                      v(p, other)))
        out.append(claims.close(f"{PATTERNS[p]}: FedAU (K = inf) within 1 point of known p",
                                v(p, "FedAU (K = inf)"), v(p, "Known p"), threshold=1.0))
        out.append(claims.compare(f"{PATTERNS[p]}: FedAU (K = 50) >= FedAU (K = inf)",
                                  v(p, "FedAU (K = 50)"), v(p, "FedAU (K = inf)")))
    if "cyclic" in s["patterns"]:
        for other in ("MIFA", "FedVarp"):
            out.append(claims.compare(f"cyclic: FedAU (K = inf) >= {other}", v("cyclic", "FedAU (K = inf)"),
                                      v("cyclic", other)))
    return out


def differences(df: pd.DataFrame, s: Mapping, metric: str = "test_acc",
                baseline: str = "FedAU (K = inf)") -> pd.DataFrame:
    """Every paired difference the runs give: per pattern and method, mean over seeds of (method - `baseline`)
    in points with its standard error, our direction by the book's rule (:func:`claims.compare` of
    "method >= baseline": "ahead", "behind" or "inside noise"), and the document's differences on its four
    data sets (same split) with how many of them put the method ahead of the baseline."""
    ps = per_seed(df, s, metric)
    split = metric.split("_")[0]
    rows = []
    for p in s["patterns"]:
        if (p, baseline) not in ps.index:
            continue
        for m in METHODS:
            if m == baseline or (p, m) not in ps.index:
                continue
            c = claims.compare(f"{PATTERNS[p]}: {m} >= {baseline}", ps.loc[(p, m)].to_numpy(),
                               ps.loc[(p, baseline)].to_numpy())
            ref = REFERENCE[(REFERENCE.pattern == p) & (REFERENCE.split == split)].pivot_table(
                index="method", columns="dataset", values="mean")
            doc = {NAMES[d]: float(ref.loc[m, d] - ref.loc[baseline, d]) for d in DOCUMENT_DATASETS}
            ahead = sum(v > 0 for v in doc.values())
            rows.append(dict(pattern=PATTERNS[p], method=m, ours=c.ours, se=c.spread,
                             direction={"confirmed": "ahead", "contradicted": "behind"}.get(c.verdict, "inside noise"),
                             **{f"document, {k}": v for k, v in doc.items()},
                             document_ahead=f"{ahead} of {len(doc)}"))
    return pd.DataFrame(rows)


def spot_scale(s: Mapping) -> str:
    """The scale label of a profile's runs against the document's setting ("reduced: 1,000 of 10,000 rounds,
    2 seeds, Bernoulli only" for the CNN spot-check)."""
    parts = [f"{s['rounds']:,} of 10,000 rounds" if s["rounds"] != 10000 else "10,000 rounds",
             f"{len(s['seeds'])} seed{'s' if len(s['seeds']) > 1 else ''}"]
    if len(s["patterns"]) < len(PATTERNS):
        parts.append(" and ".join(PATTERNS[p].split(" ")[0] for p in s["patterns"]) + " only")
    if len(s["methods"]) < len(METHODS):
        parts.append(f"{len(s['methods'])} of the {len(METHODS)} methods")
    if s["clients"] != 250:
        parts.append(f"{s['clients']} clients")
    if s["train_subset"] or s["test_subset"]:
        parts.append("a subset of the data")
    small = s["rounds"] < 10000 or len(s["seeds"]) < 5 or len(s["patterns"]) < len(PATTERNS) or s["clients"] != 250
    return ("reduced: " if small else "") + ", ".join(parts)


def spot_differences(df: pd.DataFrame, s: Mapping, metric: str = "test_acc", baseline: str = "FedAU (K = inf)",
                     beside: tuple[pd.DataFrame, Mapping, str] | None = None) -> pd.DataFrame:
    """FedAU minus every other method of `s`, paired over seeds (:func:`claims.compare` of "baseline >= method"):
    per pattern and method the mean difference and two standard errors (points of final-window `metric`),
    "FedAU ahead" / "FedAU behind" beyond two standard errors, else "inside noise". beside: (runs, settings,
    label) of other runs (e.g. the stand-in's logistic regression) whose same differences are added as columns
    headed `label`, where they have the pattern and method."""
    def rows_of(frame, settings):
        ps = per_seed(frame, settings, metric)
        out = {}
        for p in settings["patterns"]:
            if (p, baseline) not in ps.index:
                continue
            for m in settings["methods"]:
                if m != baseline and (p, m) in ps.index:
                    a, b = ps.loc[(p, baseline)], ps.loc[(p, m)]
                    common = a.index[a.notna() & b.notna()]
                    out[(p, m)] = claims.compare(f"{PATTERNS[p]}: {baseline} >= {m}", a[common].to_numpy(),
                                                 b[common].to_numpy()), len(common)
        return out

    word = {"confirmed": "FedAU ahead", "contradicted": "FedAU behind"}
    ours = rows_of(df, s)
    other = rows_of(*beside[:2]) if beside is not None else {}
    rows = []
    for (p, m), (c, n) in ours.items():
        r = {"pattern": PATTERNS[p], "method": m, "FedAU minus method (points)": c.ours, "2 s.e.": 2 * c.spread,
             "seeds": n, "direction": word.get(c.verdict, "inside noise")}
        if beside is not None:
            o = other.get((p, m))
            r[f"{beside[2]}: FedAU minus method"] = o[0].ours if o else np.nan
            r[f"{beside[2]}: 2 s.e."] = 2 * o[0].spread if o else np.nan
            r[f"{beside[2]}: direction"] = word.get(o[0].verdict, "inside noise") if o else "not run"
        rows.append(r)
    return pd.DataFrame(rows)


def spot_summary(spot: pd.DataFrame | None, done: int, total: int, label: str = "logistic regression") -> dict:
    """The CNN spot-check's reading for the page's prose, with the same keys whether its runs are stored or not:
    "status" (a sentence for the section) and "found" (a short one for the findings); `spot` is
    :func:`spot_differences`'s table (with `label`'s columns), None when the runs are not all stored."""
    if spot is None:
        return dict(status=f"These runs are still to run at this scale ({done} of {total} stored); the table "
                           f"lists them. FedAU minus each method appears here once they are stored.",
                    found="still to run at this scale.")
    n = len(spot)
    counts = {d: int((spot.direction == d).sum()) for d in ("FedAU ahead", "FedAU behind", "inside noise")}
    same = int((spot.direction == spot[f"{label}: direction"]).sum())
    sign = int((np.sign(spot["FedAU minus method (points)"]) == np.sign(spot[f"{label}: FedAU minus method"])).sum())
    what = (f"of the {n} paired differences, FedAU is ahead beyond two standard errors in {counts['FedAU ahead']}, "
            f"behind in {counts['FedAU behind']}, and {counts['inside noise']} lie inside the noise; the direction "
            f"is the one {label} gives with the same step sizes in {same} of {n}, the sign of the mean in {sign} "
            f"of {n}")
    moved = spot[spot.direction != spot[f"{label}: direction"]]
    if len(moved):
        what += ("; the direction differs for " + ", ".join(
            f"{r.method} ({r.direction} with the CNN, "
            f"{r[f'{label}: direction']} with {label})" for _, r in moved.iterrows()))
    each = "; ".join(
        f"{r.method} {r['FedAU minus method (points)']:+.1f} ± {r['2 s.e.']:.1f} "
        f"({label} {r[f'{label}: FedAU minus method']:+.1f} ± {r[f'{label}: 2 s.e.']:.1f})"
        for _, r in spot.iterrows())
    per = (f" FedAU minus each method, in points ± two standard errors, with the CNN (and with {label}): "
           f"{each}.")
    return dict(status=f"All {total} runs are stored: {what}.{per}", found=what + "." + per)


MODEL_WORDS = {"logreg": "multinomial logistic regression"}


def describe(s: Mapping) -> str:
    """What a profile executes, against the document's setting, in words (for the pages' prose)."""
    diffs = []
    if s["model"] is not None and s["model"] != DATASETS[s["dataset"]]["model"]:
        diffs.append(f"{MODEL_WORDS.get(s['model'], s['model'])} instead of the authors' CNN")
    if s["rounds"] != 10000:
        diffs.append(f"{s['rounds']:,} rounds instead of 10,000")
    if s["clients"] != 250:
        diffs.append(f"{s['clients']} clients instead of 250")
    if s["train_subset"] or s["test_subset"]:
        diffs.append("a subset of the data")
    where = "the document's data set" if s["dataset"] in DOCUMENT_DATASETS else f"{NAMES[s['dataset']]} as a stand-in"
    head = f"profile '{s['profile']}' on {where}"
    return head + (": " + ", ".join(diffs) if diffs else ", the document's setting")


def empty_rounds(s: Mapping) -> pd.DataFrame:
    """Per pattern: the rounds in which no client participates (mean over the seeds) and where they fall.
    Under the code's cyclic pattern every client's active block starts within its first inactive block, so
    round L - 1 of every cycle has no participant at all."""
    c0 = configs(s)[0]
    y = load_data(c0, "cpu")[1].cpu().numpy()
    rows = []
    for pattern in s["patterns"]:
        counts, where = [], set()
        for seed in s["seeds"]:
            c = dict(c0, seed=seed, pattern=pattern, markov_x=s["markov_x"], cycle=s["cycle"])
            m = mask(c, split(c, y)[1])
            e = np.flatnonzero(m.sum(1) == 0)
            counts.append(len(e))
            where |= set((e % s["cycle"]).tolist())
        rows.append(dict(pattern=PATTERNS[pattern], empty_rounds=float(np.mean(counts)), rounds=s["rounds"],
                         position_in_cycle=", ".join(str(w) for w in sorted(where)) or "none"))
    return pd.DataFrame(rows)


def reading_values(checks: Sequence[claims.Check]) -> dict:
    """The checks' numbers and verdicts under short names for the page's prose: d_<k> (mean paired
    difference, points), v_<k> (verdict), k in part_/all_/known_/k50_<pattern>, mifa, fedvarp (cyclic)."""
    short = {"Average participating": "part", "Average all": "all", "known p": "known", "FedAU (K = 50) >=": "k50"}
    out = {}
    for c in checks:
        pattern = next((p for p, words in PATTERNS.items() if c.what.startswith(words + ":")), None)
        if pattern is not None:
            key = next(v for k, v in short.items() if k in c.what) + f"_{pattern}"
        else:
            key = "mifa" if "MIFA" in c.what else "fedvarp"
        out[f"d_{key}"], out[f"v_{key}"] = float(c.ours), c.verdict
    return out


def side_by_side(main: pd.DataFrame, other: pd.DataFrame, labels: tuple[str, str] = ("retuned", "authors'"),
                 metric: str = "test_acc") -> pd.DataFrame:
    """Rows the methods, columns (pattern, step sizes): "mean ± sd" (% over seeds) of the final-window `metric`
    from two :func:`summarize` tables (two sets of step sizes)."""
    out = {}
    for p in PATTERNS:
        for lab, sm in zip(labels, (main, other)):
            hit = sm[(sm.pattern == p) & (sm.metric == metric)].set_index("method")
            if len(hit):
                out[(PATTERNS[p], lab)] = {m: _cell(hit.loc[m, "mean"],
                                                    hit.loc[m, "sd"]) for m in METHODS if m in hit.index}
    df = pd.DataFrame(out)
    df.columns = pd.MultiIndex.from_tuples(df.columns)
    df.index.name = "method"
    return df
