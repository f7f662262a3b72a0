r"""Page "training comparison on FMNIST" of the HiCS-FL chapter (document 004, Sec. 4: Fig. 2, Figs. 4(a),
13, 14 and the FMNIST column of Table 1).

The document's setting (Sec. 4.1, appendix 6.1): FMNIST, N = 50 clients in five groups of 10 split with the
alpha lists (1) {0.001, 0.002, 0.005, 0.01, 0.5}, (2) {0.001, 0.002, 0.005, 0.01, 0.2}, (3) {0.001}
(:data:`flkit.papers.hics.common.FMNIST`); K = 5 clients per round (10%); FedAvg with mini-batch SGD,
:math:`\eta` = 0.001, R = 2 local epochs, B = 64; 200 rounds; five samplers: random (proportional to
:math:`n_k`, without replacement), pow-d (ideal, d = N), Clustered Sampling, DivFL (ideal) and HiCS-FL
(:class:`flkit.sample.HiCS`, ``variant="paper"``). Curves are smoothed with a Savitzky-Golay filter (window
13, order 3), and Table 1 counts the rounds until the smoothed test accuracy reaches 0.75.

Profiles. ``paper``: the document's CNN (:func:`flkit.models.hics_fmnist_paper`), configured and runnable,
not executed on the CPU (see :func:`paper_estimate`); its DivFL runs of Table 1's setting (2) train 600 rounds
(``divfl_table1_rounds``), since the document's Table 1 gives DivFL 478 rounds to 0.75, beyond the 200 of its
figures; it records the training loss over a sample of the training images (below). ``reduced``: the same
clients, sampling, epochs, batch
and rounds with multinomial logistic regression (:func:`flkit.models.logreg`), DivFL with the same three seeds
in every setting, and a second learning rate for random and HiCS-FL in setting (2). ``smoke``: seconds.

DivFL's proxy (``divfl_proxy``, :class:`flkit.sample.DivFL`): the document's DivFL asks every client for a
"1-step gradient" each round (appendix 6.1.2), ``"gradient"`` (each client's full-batch gradient at the
global model), the default of every profile. ``"update"``, every client's full local update each round (ten
times the others' training, 2 to 10 CPU minutes per run with one thread), is the labelled variant: the
reduced profile's first DivFL runs used it and stay stored (``profile("reduced", divfl_proxy="update")``).
The jobs of the full-update proxy carry no ``divfl_proxy`` key (their stored configs stay as they are); the
others carry it, so the two kinds of runs never share a store key.

Horizons. Everything that compares methods over rounds (the figures, the training-loss fluctuation, the claim
checks) reads the first ``rounds`` rounds of every run (:func:`truncate`); Table 1's rounds to a target
(:func:`table1`, :func:`table1_checks`) read each run whole, and a method that does not reach the target is
reported with its own horizon ("not reached in 600 rounds").

Departures, all profiles: the document's "decreased every 10 iterations, with a decay factor 0.5" is not
applied (constant :math:`\eta`; see :mod:`flkit.papers.hics.entropy`); inputs normalised (x - 0.5)/0.5 as
the authors' code; one partition per seed, shared by the five methods.

CIFAR-10 and CIFAR-100 (Sec. 4.1, appendix 6.1; Figs. 3, 4(b), 15, 16 and Table 1's CIFAR-10 column; Figs.
5, 17 and its CIFAR-100 column), configured and runnable (profiles ``paper-cifar10``, ``paper-cifar100``;
``smoke-cifar10``: seconds, for the tests), not executed here (no CIFAR files; flkit.owed lists them):
FedProx (:math:`\mu` = 0.1, appendix 6.1.2) with Adam (torch's defaults, fresh moments every round),
:math:`\eta` = 0.001, R = 2, B = 64; CIFAR-10: N = 50 in five groups of 10, K = 10 (20%), 500 rounds, the
alpha lists (1)-(3) of :data:`flkit.papers.hics.common.CIFAR10`, :math:`\gamma^0` = 4; CIFAR-100: N = 100 in
five groups of 20, K = 20, 1000 rounds, lists (1)-(2) of :data:`~flkit.papers.hics.common.CIFAR100` (the
document has two), :math:`\gamma^0` = 2; both: T = 0.0015 (:data:`flkit.papers.hics.common.CIFAR_T`),
:math:`\lambda` = 0.1, M = K, pow-d with d = N, DivFL ideal; the document's CNN of three 3x3 convolutions
and two linear layers (:func:`flkit.models.hics_cifar10`, :func:`~flkit.models.hics_cifar100`); inputs
normalised with the code's CIFAR-10 statistics (``flkit.datasets.PAPER_STATS[("hics", "cifar10")]``; the
code has no CIFAR-100, whose inputs take the same). Table 1's CIFAR rounds lie beyond the figures' horizons
(CIFAR-10: random 898, pow-d 1037, CS 748, DivFL 1417 rounds to 0.6 with 500-round figures; CIFAR-100: DivFL
1345 rounds to 0.3 with 1000): in setting (2) random, pow-d and CS run ``table1_rounds`` (a job of their
own) and DivFL the largest of ``rounds``, ``table1_rounds`` and ``divfl_table1_rounds``; HiCS-FL, whose
annealing :math:`\gamma^t` reads the horizon, keeps ``rounds`` (the document's HiCS-FL reaches the targets at
123 and 336 rounds). The authors' code (CityChan/HiCS-FL@25f309d ``configs/*.json``, ``server/*.py``; CIFAR-10
only) differs: one local epoch, FedProx :math:`\mu` = 0.5 (hard-coded), T = 0.001 (0.0015 in setting (3)),
:math:`\lambda` = 10, per-client Adam state kept across rounds, one partition seed (42); we keep the document's
values. Fashion-MNIST jobs have no ``dataset`` key (nor the other CIFAR keys unless overridden): their stored
configs stay as they are.

Training loss (Figs. 4(a), 13): the global model's mean cross-entropy over the union of the clients'
training data, :math:`F(\theta^t) = \sum_k n_k F_k(\theta^t)/\sum_k n_k` (every training image belongs to a
client); its standard deviation (Fig. 14) is taken over seeds, round by round.

What the runs record, every round: the test loss and accuracy (Fig. 2; Table 1's rounds to a target read the
smoothed accuracy of every round) and the training loss (the curves, the late loss, the round-to-round
fluctuation the claim checks compare per seed, setting (3)'s comparison with CS). ``reduced`` and ``smoke``:
over every training image. The ``paper`` profiles (``train_loss_images`` = 10,000): over a class-stratified
sample of 10,000 training images (:func:`flkit.papers.hics.common.train_loss_idx`, the same images in every run;
a sixth of the cost of all 60,000 images); on the ``reduced`` profile's runs
such a sample gives every claim verdict of all 60,000 images (a run's fluctuation within 2.4%), where all
60,000 every 10th round changes three of the 14 (``benchmarks/hics_train_loss_sample.py``,
``results/benchmarks/hics_train_loss_sample.md``). Jobs with a sample carry ``train_loss_images``; the stored
runs, over every image, carry no such key.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import platform
import re
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from flkit import aggregate, engine, fl, results, sample
from flkit.papers import claims, settings
from flkit.papers.hics import items
from flkit.papers.hics.common import (CIFAR_T, DATASETS, DOC_NAMES, DOC_SPEEDUP, DOC_TABLE1, DOC_TARGET, METHODS,
                                      MODELS, SG, TABLE1_SETTING, eval_batch, make_partition, make_task,
                                      rounds_to_target, savgol, split_alphas, train_loss_idx)

__all__ = ["PROFILES", "profile", "store_name", "algorithms", "is_setting2_main", "run_job", "jobs", "sweep",
           "client_trainings", "evaluations", "loss_probes",
           "paper_estimate", "truncate", "smoothed_mean", "rounds_table", "table1", "plot_metric", "variability",
           "claim_checks", "claim_words", "table1_checks",
           "MODEL_WORDS", "POWD_LATE", "powd_variants", "powd_compare", "powd_view", "powd_values", "plot_powd",
           # the page
           "PROXY_WORDS", "describe", "training_minutes", "plot_learning_rate", "learning_rate_values",
           "last_accuracy", "variability_table", "late_values", "target_accuracy", "divfl_runs", "with_divfl",
           "table1_both", "table1_values", "claim_values", "cnn_estimate"]

_CIFAR_KEYS = ("dataset", "opt", "prox_mu", "temperature", "gamma0")   # job keys of the CIFAR jobs only

_BASE = dict(dataset="fashion-mnist", opt="sgd", prox_mu=0.0, temperature=None, gamma0=None,   # None: HiCS's own
             clients=50, k=5, epochs=2, batch_size=64, rounds=200, settings=["(1)", "(2)", "(3)"],
             divfl_settings=["(1)", "(2)", "(3)"], lr_setting="(2)", lr_alt=None, lr_alt_seeds=[],
             divfl_table1_rounds=None,   # DivFL's least rounds in Table 1's setting (None: ``rounds``)
             table1_rounds=None,         # random, pow-d, CS (and DivFL) least rounds there (None: ``rounds``)
             divfl_proxy="gradient",     # DivFL's vectors (flkit.sample.DivFL): the document's one-step gradient
             powd_d=None, powd_d_seeds=[],   # pow-d with d candidates instead of N in Table 1's setting (the
#                                              diagnostic of pow-d's ideal d = N: the authors' code uses d = 2K)
             train_loss_images=None)     # the training loss over this many training images, a class-stratified
#                                          sample, the same in every run (None: all of them); both every round
# appendix 6.1: FedProx mu = 0.1 with Adam, eta = 0.001 (the code: mu = 0.5, one local epoch), R = 2, B = 64
_CIFAR = dict(_BASE, opt="adam", prox_mu=0.1, temperature=CIFAR_T, lr=0.001, subset=None, seeds=[0, 1, 2],
              divfl_seeds=[0, 1, 2], train_loss_images=10_000)
PROFILES = {
    "smoke": dict(_BASE, model="logreg", lr=0.01, clients=10, k=2, subset=4000, rounds=15, seeds=[0, 1],
                  divfl_seeds=[0], settings=["(2)"], divfl_settings=["(2)"], lr_alt=0.001, lr_alt_seeds=[0],
                  powd_d=4, powd_d_seeds=[0]),
    "reduced": dict(_BASE, model="logreg", lr=0.001, subset=None, seeds=[0, 1, 2], divfl_seeds=[0, 1, 2],
                    lr_alt=0.01, lr_alt_seeds=[0], powd_d=10, powd_d_seeds=[0, 1, 2]),
    "paper": dict(_BASE, model="hics_fmnist_paper", lr=0.001, subset=None, seeds=[0, 1, 2], divfl_seeds=[0, 1, 2],
                  lr_alt=0.01, lr_alt_seeds=[0],   # the literal rate beside ten times larger, as on the page
                  powd_d=10, powd_d_seeds=[0, 1],  # pow-d with the authors' d = 2K, paired with seeds 0, 1
                  divfl_table1_rounds=600,      # Table 1: the document's DivFL needs 478 rounds
                  train_loss_images=10_000),    # the training loss every round on a sixth of the training images
    # Sec. 4.1: 50 clients, 20% per round, 500 rounds; Table 1 needs up to 1417 rounds (DivFL), 1037 (pow-d)
    "paper-cifar10": dict(_CIFAR, dataset="cifar10", model="hics_cifar10", clients=50, k=10, rounds=500, gamma0=4.0,
                          table1_rounds=1500),
    # Sec. 4.1: 100 clients, 20% per round, two alpha settings, 1000 rounds, gamma0 = 2; DivFL: 1345 in Table 1
    "paper-cifar100": dict(_CIFAR, dataset="cifar100", model="hics_cifar100", clients=100, k=20, rounds=1000,
                           gamma0=2.0, settings=["(1)", "(2)"], divfl_settings=["(1)", "(2)"],
                           divfl_table1_rounds=1400),
    # seconds on the tests' fake files (a few images per client): every method, the split Table 1 jobs
    "smoke-cifar10": dict(_CIFAR, dataset="cifar10", model="hics_cifar10", clients=10, k=2, subset=4000, rounds=13,
                          batch_size=16, gamma0=4.0, seeds=[0], divfl_seeds=[0], settings=["(2)"],
                          divfl_settings=["(2)"], table1_rounds=14, train_loss_images=50),
}
_FITS = {"fashion-mnist": ("logreg", "hics_fmnist_paper"), "cifar10": ("hics_cifar10",), "cifar100": ("hics_cifar100",)}


def profile(name: str, **overrides) -> dict:
    """The page's settings (module docstring); overrides that are not None replace the profile's."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    cfg = settings.with_overrides(copy.deepcopy(PROFILES[name]), overrides, f"hics fmnist profile {name!r}")
    if cfg["dataset"] not in DATASETS:
        raise ValueError(f"unknown dataset {cfg['dataset']!r}; choose one of {sorted(DATASETS)}")
    lists = DATASETS[cfg["dataset"]]["lists"]
    if cfg["model"] not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {cfg['model']!r}")
    if cfg["model"] not in _FITS[cfg["dataset"]]:
        raise ValueError(f"model {cfg['model']!r} does not take {cfg['dataset']}; "
                         f"choose one of {list(_FITS[cfg['dataset']])}")
    if cfg["clients"] % 5 or cfg["clients"] < 5:
        raise ValueError(f"clients must be a positive multiple of 5 (five alpha groups), got {cfg['clients']!r}")
    if not 1 <= cfg["k"] <= cfg["clients"]:
        raise ValueError(f"k must be in [1, clients = {cfg['clients']}], got {cfg['k']!r}")
    for key in ("settings", "divfl_settings"):
        if any(s not in lists for s in cfg[key]):
            raise ValueError(f"{key} must list settings of {cfg['dataset']} from {sorted(lists)}, got {cfg[key]!r}")
    if not cfg["settings"]:
        raise ValueError(f"settings is empty: give at least one of {sorted(lists)}")
    if cfg["opt"] not in ("sgd", "adam"):
        raise ValueError(f"opt must be 'sgd' or 'adam', got {cfg['opt']!r}")
    for key, lo in (("prox_mu", 0.0), ("temperature", None), ("gamma0", 0.0)):
        v = cfg[key]
        ok = v is None and key != "prox_mu" or isinstance(v, (int, float)) and not isinstance(v, bool) and (
            v >= lo if lo is not None else v > 0)
        if not ok:
            raise ValueError(f"{key} must be a number {'>= 0' if lo is not None else '> 0'}"
                             f"{'' if key == 'prox_mu' else ' or None'}, got {v!r}")
    for key in ("lr", "lr_alt"):
        v = cfg[key]
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0):
            raise ValueError(f"{key} must be a number > 0, got {v!r}")
    if cfg["divfl_proxy"] not in sample.PROXIES:
        raise ValueError(f"divfl_proxy must be one of {sample.PROXIES}, got {cfg['divfl_proxy']!r}")
    if cfg["rounds"] < SG[0]:
        raise ValueError(f"rounds must be >= {SG[0]} (the Savitzky-Golay window), got {cfg['rounds']!r}")
    for key, who in (("divfl_table1_rounds", "DivFL"), ("table1_rounds", "random, pow-d and CS")):
        v = cfg[key]
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < SG[0]):
            raise ValueError(f"{key} must be None ({who} runs `rounds`) or an int >= {SG[0]} ({who} then "
                             f"runs the larger of it and `rounds`), got {v!r}")
    d = cfg["powd_d"]
    if d is not None and (isinstance(d, bool) or not isinstance(d, int) or not cfg["k"] <= d <= cfg["clients"]):
        raise ValueError(f"powd_d must be None (no diagnostic runs) or an int in [k = {cfg['k']}, clients = "
                         f"{cfg['clients']}], got {d!r}")
    m, classes = cfg["train_loss_images"], 100 if cfg["dataset"] == "cifar100" else 10
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < classes):
        raise ValueError(f"train_loss_images must be None (all training images) or an int >= {classes} (one image "
                         f"of each class at least), got {m!r}")
    return cfg


def store_name(name: str) -> str:
    """The book store's folder of profile ``name``: "hics" (Fashion-MNIST), "hics_cifar10", "hics_cifar100";
    under "tmp/" for the smoke profiles."""
    cfg = profile(name)
    folder = "hics" if cfg["dataset"] == "fashion-mnist" else f"hics_{cfg['dataset']}"
    return f"tmp/{folder}" if name.startswith("smoke") else folder


# ------------------------------------------------------------------------------------------ training
def algorithms(task, cfg: dict, methods, lr: float | None = None) -> dict:
    """{method: fl.Algorithm}: FedAvg (uniform over the K selected updates, server step 1) with each sampler
    (pow-d with ``cfg``'s ``powd_d`` candidates where given, else d = N);
    HiCS-FL with ``cfg``'s ``temperature`` and ``gamma0`` where given (else the sampler's FMNIST values)."""
    K, T, N = cfg["k"], cfg["rounds"], task.num_clients
    hics = {k: cfg[k] for k in ("temperature", "gamma0") if cfg.get(k) is not None}
    proxy = cfg.get("divfl_proxy", "gradient")
    d = cfg.get("powd_d") or N          # pow-d's candidates: the document's ideal d = N unless given
    make = {"random": lambda: sample.ProportionalK(K, replace=False), "pow-d": lambda: sample.PowD(K, d),
            "CS": lambda: sample.ClusteredSampling(K), "DivFL": lambda: sample.DivFL(K, proxy=proxy),
            "HiCS-FL": lambda: sample.HiCS.for_task(task, K, T, variant="paper", **hics)}
    bad = [m for m in methods if m not in make]
    if bad:
        raise ValueError(f"unknown methods {bad}; choose from {list(make)}")
    return {m: fl.Algorithm(aggregate.FedAvg(), sampler=make[m](), lr=1.0, local_lr=lr) for m in methods}


def is_setting2_main(job: dict) -> bool:
    """Whether ``job`` is one of the four cheap methods' jobs in Table 1's setting (the runs that decide it)."""
    return job["group"] == "main" and job["setting"] == TABLE1_SETTING


def run_job(job: dict, data, *, checkpoint_dir=None, deadline: float | None = None,
            checkpoint_every_s: float = 300.0) -> pd.DataFrame:
    """One stored job: the methods of ``job`` on the partition of (setting, seed); tidy rows (method, seed,
    round, metric in {test_acc, train_loss}, value). checkpoint_dir: the job's mid-run state
    (``<dir>/job-<key>.pt``, every ``checkpoint_every_s`` seconds and before ``deadline``, a ``time.time()``
    value, at which :class:`flkit.fl.Deadline` is raised); a later call resumes from it to the same numbers."""
    cfg = {k: job[k] for k in ("model", "clients", "k", "epochs", "batch_size", "rounds", "subset", "lr")}
    cfg.update({k: job[k] for k in _CIFAR_KEYS if k in job})
    cfg["divfl_proxy"] = job.get("divfl_proxy", "update")      # a DivFL job without the key: the full update
    cfg["powd_d"] = job.get("powd_d")                           # None: pow-d's d = N
    want = job.get("dataset", "fashion-mnist")
    if getattr(data, "name", want) != want:
        raise ValueError(f"job of dataset {want!r} given data of {data.name!r}")
    n = len(data.y_train) if cfg["subset"] is None else cfg["subset"]
    labels = data.y_train[:n].cpu().numpy()
    part = make_partition(labels, cfg["clients"], job["alphas"], job["seed"])
    idx = train_loss_idx(labels, job.get("train_loss_images"), data.y_train.device)   # None: every training image
    task = make_task(data, part, cfg, train_idx=idx)
    ckpt = None
    if checkpoint_dir is not None:
        ckpt = Path(checkpoint_dir) / f"job-{results.config_key(job)}.pt"
    res = fl.run(task, algorithms(task, cfg, job["methods"]), seeds=[job["seed"]], rounds=cfg["rounds"], every=1,
                 checkpoint=ckpt, deadline=deadline, checkpoint_every_s=checkpoint_every_s)
    t = res.tidy()
    t = t[t["metric"].isin(["test_acc", "train_loss"])].reset_index(drop=True)
    t.attrs["wall_time_s"] = res.wall_s        # every piece of a resumed job, as the store records it
    return t


def jobs(cfg: dict) -> list[dict]:
    """The stored jobs of a profile: per (setting, seed) the four cheap methods; DivFL for its seeds and
    settings, in :data:`TABLE1_SETTING` for the largest of ``rounds``, ``divfl_table1_rounds`` and
    ``table1_rounds`` rounds; there random, pow-d and CS run ``table1_rounds`` (when larger than ``rounds``) as
    a job of their own, HiCS-FL (annealed over its horizon) ``rounds``; random and HiCS-FL at ``lr_alt`` in
    ``lr_setting``; pow-d with ``powd_d`` candidates (group "powd_d", the job's key ``powd_d``) in
    :data:`TABLE1_SETTING` for ``powd_d_seeds``. CIFAR jobs carry ``dataset``, ``opt``, ``prox_mu``,
    ``temperature`` and ``gamma0``;
    Fashion-MNIST jobs only those of them overridden (the stored configs have none); ``train_loss_images`` only
    where it is not None (every training image)."""
    keys = ("model", "clients", "k", "epochs", "batch_size", "rounds", "subset")
    name = cfg["dataset"]
    base = dict(experiment=DATASETS[name]["experiment"], **{k: cfg[k] for k in keys})
    base.update({k: cfg[k] for k in _CIFAR_KEYS if name != "fashion-mnist" or cfg[k] != _BASE[k]})
    if cfg["train_loss_images"] is not None:      # the stored runs' configs have no such key
        base["train_loss_images"] = cfg["train_loss_images"]
    out = []
    T, t1 = cfg["rounds"], cfg["table1_rounds"] or 0

    def add(group, setting, seed, methods, lr, rounds=T):
        out.append(dict(base, rounds=rounds, group=group, setting=setting, alphas=split_alphas(setting, name),
                        seed=seed, methods=list(methods), lr=lr))
    for s in cfg["settings"]:
        for seed in cfg["seeds"]:
            if s == TABLE1_SETTING and t1 > T:
                add("main", s, seed, ["random", "pow-d", "CS"], cfg["lr"], t1)
                add("main", s, seed, ["HiCS-FL"], cfg["lr"])
            else:
                add("main", s, seed, ["random", "pow-d", "CS", "HiCS-FL"], cfg["lr"])
    for s in cfg["divfl_settings"]:
        for seed in cfg["divfl_seeds"]:
            long = s == TABLE1_SETTING
            add("divfl", s, seed, ["DivFL"], cfg["lr"], max(T, cfg["divfl_table1_rounds"] or 0, t1) if long else T)
            if cfg["divfl_proxy"] != "update":   # the full-update jobs keep the stored configs (no key)
                out[-1]["divfl_proxy"] = cfg["divfl_proxy"]
    if cfg["lr_alt"] is not None:
        for seed in cfg["lr_alt_seeds"]:
            add("lr_alt", cfg["lr_setting"], seed, ["random", "HiCS-FL"], cfg["lr_alt"])
    if cfg["powd_d"] is not None and TABLE1_SETTING in cfg["settings"]:
        for seed in cfg["powd_d_seeds"]:
            add("powd_d", TABLE1_SETTING, seed, ["pow-d"], cfg["lr"])
            out[-1]["powd_d"] = cfg["powd_d"]
    return out


def sweep(cfg: dict, data, store, executor=None) -> pd.DataFrame:
    """Every job of ``cfg`` through :func:`flkit.results.sweep` (cached in ``store``)."""
    return results.sweep(jobs(cfg), lambda j: run_job(j, data), store, progress=False, executor=executor)


def client_trainings(cfg: dict) -> int:
    """Client trainings (R local epochs each) of the jobs of ``cfg``, each job for its own rounds: K per round
    for random, pow-d, CS and HiCS-FL; for DivFL with the full-update proxy N + K (its probe trains all N
    clients every round before the K selected train again in the round's update, the same updates, keyed by
    seed, round, client), with the one-step gradient proxy K + N / R (N full-batch gradients, each one pass
    over a client's data, counted as 1/R of a training), rounded to an int."""
    K, N, R = cfg["k"], cfg["clients"], cfg["epochs"]
    per = {"update": N + K, "gradient": K + N / R, "stale": K}[cfg["divfl_proxy"]]
    return int(round(sum(j["rounds"] * (per if m == "DivFL" else K) for j in jobs(cfg) for m in j["methods"])))


def evaluations(cfg: dict) -> int:
    """Evaluations of the global model in the jobs of ``cfg``: one per round (0 to the job's rounds) of each run of
    each method, each the test set (loss and accuracy) and the training loss (over ``train_loss_images`` images,
    or all of them)."""
    return sum((j["rounds"] + 1) * len(j["methods"]) for j in jobs(cfg))


def loss_probes(cfg: dict) -> int:
    """Rounds of pow-d's loss probe in the jobs of ``cfg``, in units of a probe of every client: every round of
    every pow-d run, each the training loss at the global model of its d candidates (d = N: a forward pass over all
    the clients' training images; ``powd_d`` runs count d / N of it, about the share of the images their
    candidates hold), rounded to an int."""
    N = cfg["clients"]
    return int(round(sum(j["rounds"] * j.get("powd_d", N) / N for j in jobs(cfg) if "pow-d" in j["methods"])))


def paper_estimate(data, cfg: dict, rounds: int = 2, evaluation: bool = False) -> pd.DataFrame:
    """Seconds per client training of ``cfg``'s model (the ``paper`` profile: the document's CNN), timed on
    ``rounds`` rounds of K clients' local training (seed 0, setting (2)), and the estimated hours of the
    profile: its :func:`client_trainings` times that cost (pow-d's loss probes not counted).
    ``cpu_seconds_per_client``: the same in this process's CPU time (one thread: what a core of its own would
    take, where the wall time on a shared core also counts the waiting). With ``evaluation``, also the seconds
    (wall and CPU) of one test-set evaluation of the global model (loss and accuracy on every test image) and of
    one training-loss evaluation (over the profile's ``train_loss_images``, or every training image), each timed
    once after a warm-up on 1,024 images, and ``eval_hours``: their CPU seconds times the profile's
    :func:`evaluations`."""
    n = len(data.y_train) if cfg["subset"] is None else cfg["subset"]
    labels = data.y_train[:n].cpu().numpy()
    part = make_partition(labels, cfg["clients"], split_alphas("(2)", cfg["dataset"]), 0)
    idx = train_loss_idx(labels, cfg["train_loss_images"], data.y_train.device)
    task = make_task(data, part, cfg, train_idx=idx)
    w = task.init_params([0])
    runs = fl.Runs([0], torch.tensor([float(cfg["lr"])], dtype=task.dtype), ["random"])
    tic, tic_cpu = time.perf_counter(), time.process_time()
    for t in range(rounds):
        active = torch.zeros(1, task.num_clients, dtype=torch.bool)
        active[0, t * cfg["k"]:(t + 1) * cfg["k"]] = True
        task.client_updates(w, active, t, runs)
    per_client = (time.perf_counter() - tic) / (rounds * cfg["k"])
    cpu_per_client = (time.process_time() - tic_cpu) / (rounds * cfg["k"])
    trainings = client_trainings(cfg)
    vals = dict(seconds_per_client=per_client, client_trainings=trainings, hours=per_client * trainings / 3600,
                cpu_seconds_per_client=cpu_per_client)
    if evaluation:
        params = task.unflatten(w)
        sample = (task.x, task.y) if idx is None else (task.x[idx], task.y[idx])
        for name, (x, y) in (("test_evaluation", (task.x_test, task.y_test)), ("train_loss", sample)):
            engine.evaluate(task.model, params, x[:1024], y[:1024], batch_size=task.eval_batch_size)   # warm-up
            tic, tic_cpu = time.perf_counter(), time.process_time()
            engine.evaluate(task.model, params, x, y, batch_size=task.eval_batch_size)   # as task.metrics does
            vals[f"seconds_per_{name}"] = time.perf_counter() - tic
            vals[f"cpu_seconds_per_{name}"] = time.process_time() - tic_cpu
        vals.update(evaluations=evaluations(cfg), train_loss_images=len(task.y) if idx is None else len(idx),
                    eval_hours=(vals["cpu_seconds_per_test_evaluation"] + vals["cpu_seconds_per_train_loss"])
                    * evaluations(cfg) / 3600)
    return pd.DataFrame({"round": 0, "metric": list(vals), "value": list(vals.values())})


# ------------------------------------------------------------------------------------------ reading
def truncate(table: pd.DataFrame, rounds: int) -> pd.DataFrame:
    """The rows of rounds 0..``rounds``: every run cut to the common horizon of the figures and the claims (a
    run of 600 rounds then reads as the same run of ``rounds``: no round's training depends on the horizon,
    and smoothing sees only the kept rounds)."""
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 0:
        raise ValueError(f"rounds must be an int >= 0, got {rounds!r}")
    return table[table["round"] <= rounds].reset_index(drop=True)


def smoothed_mean(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per (group, setting, method, round): the mean over seeds of the metric, its standard deviation over
    seeds (ddof=1; NaN for one seed), the Savitzky-Golay smoothed mean, and ``smoothed_std``: the standard
    deviation over seeds of each seed's smoothed curve (non-negative, unlike a smoothed standard deviation)."""
    t = table[table["metric"] == metric].sort_values("round").copy()
    t["sg"] = t.groupby(["group", "setting", "method", "seed"])["value"].transform(lambda v: savgol(v.to_numpy()))
    g = t.groupby(["group", "setting", "method", "round"]).agg(mean=("value", "mean"), std=("value", "std"),
                                                              smoothed_std=("sg", "std")).reset_index()
    g["smoothed"] = g.groupby(["group", "setting", "method"])["mean"].transform(lambda v: savgol(v.to_numpy()))
    return g


def rounds_table(table: pd.DataFrame, target: float) -> pd.DataFrame:
    """Per (group, setting, method, seed): rounds until the smoothed test accuracy reaches ``target``."""
    t = table[table["metric"] == "test_acc"].sort_values("round")
    rows = [dict(group=g, setting=s, method=m, seed=seed, rounds=rounds_to_target(d["value"].to_numpy(), target,
                                                                                    d["round"].to_numpy()))
            for (g, s, m, seed), d in t.groupby(["group", "setting", "method", "seed"])]
    return pd.DataFrame(rows)


def _cell(v: np.ndarray, T: int, digits: int = 0) -> str:
    done = v[np.isfinite(v)]
    if done.size == 0:
        return f"not reached in {T} rounds"
    txt = f"{done.mean():.{digits}f}" + (f" ± {done.std(ddof=1):.{digits}f}" if done.size > 1 else "")
    return txt + (f" ({done.size} of {v.size} seeds)" if done.size < v.size else "")


def table1(table: pd.DataFrame, target: float, setting: str = TABLE1_SETTING) -> pd.DataFrame:
    """Table 1's FMNIST column: rounds to 0.75 and speed-up vs random (the document's), beside ours to 0.75 and
    to ``target`` (mean ± sd over seeds of the per-seed rounds; speed-up = random's mean / the method's). Each
    run is read whole (not :func:`truncate`'d): DivFL's longer runs count a crossing after the others' last
    round, and a method none of whose seeds reaches the target reads "not reached in T rounds", T its last
    round."""
    main = table[table["group"].isin(["main", "divfl"]) & (table["setting"] == setting)]
    rt = {tg: rounds_table(main, tg) for tg in (DOC_TARGET, target)}
    horizon = main.groupby("method")["round"].max()
    rows = []
    for m in METHODS:
        row = {"method": m, "document: rounds to 0.75": DOC_TABLE1[m],
               "document: speed-up": f"{DOC_SPEEDUP[m]:.1f}x"}
        for tg, r in rt.items():
            v = r[(r.setting == setting) & (r.method == m)]["rounds"].to_numpy()
            base = r[(r.setting == setting) & (r.method == "random")]["rounds"].to_numpy()
            row[f"ours: rounds to {tg:.3f}"] = _cell(v, int(horizon[m])) if v.size else "n/a (not run)"
            ok = v.size and np.isfinite(v).all() and np.isfinite(base).all()
            row[f"ours: speed-up ({tg:.3f})"] = f"{base.mean() / v.mean():.1f}x" if ok else "n/a"
        rows.append(row)
    return pd.DataFrame(rows).set_index("method")


_KN = {"fashion-mnist": (5, 50), "cifar10": (10, 50), "cifar100": (20, 100)}     # the document's K and N
_COLORS = dict(zip(METHODS, ["tab:gray", "tab:orange", "tab:blue", "tab:purple", "tab:red"]))


def plot_metric(sm: pd.DataFrame, column: str, ylabel: str, title: str, group: str = "main",
                dataset: str = "fashion-mnist"):
    """One panel per setting (stacked), one line per method: ``column`` of :func:`smoothed_mean`; panel titles
    give ``dataset``'s alpha lists."""
    lists = DATASETS[dataset]["lists"]
    sets = sorted(sm.loc[sm.group == "main", "setting"].unique())
    fig, axes = plt.subplots(len(sets), 1, figsize=(7.0, 2.4 * len(sets)), sharex=True, squeeze=False)
    for ax, s in zip(axes[:, 0], sets):
        for m in METHODS:
            d = sm[(sm.setting == s) & (sm.method == m) & sm.group.isin([group, "divfl"])]
            if len(d):
                ax.plot(d["round"], d[column], color=_COLORS[m], lw=1.4, label=m + (" (1 seed)" if
                        (d.group == "divfl").all() and column == "smoothed" and d["std"].isna().all() else ""))
        ax.set_title(f"setting {s}: alpha in {{{', '.join(f'{a:g}' for a in lists[s])}}}", fontsize=10)
        ax.set_ylabel(ylabel, fontsize=10)
        ax.tick_params(labelsize=9)
        ax.grid(alpha=0.3)
    handles = {l.get_label(): l for ax in axes[:, 0] for l in ax.get_lines()}
    axes[0, 0].legend(handles.values(), handles.keys(), fontsize=9, ncol=3,
                      title="client sampling (K = {} of N = {})".format(*_KN[dataset]), title_fontsize=9)
    axes[-1, 0].set_xlabel("communication round", fontsize=10)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def variability(table: pd.DataFrame, start: int = 100) -> pd.DataFrame:
    """Per (setting, method, seed): the round-to-round fluctuation of the training loss, the standard deviation
    over rounds >= ``start`` of the loss minus its Savitzky-Golay smoothed curve (how far from smooth one run's
    trajectory is), and the mean over rounds >= ``start`` of the loss (the main runs and DivFL's). Give it the
    common horizon (:func:`truncate`): a longer run's later rounds would enter both numbers."""
    t = table[(table["metric"] == "train_loss") & table["group"].isin(["main", "divfl"])].sort_values("round")
    rows = []
    for (s, m, seed), d in t.groupby(["setting", "method", "seed"]):
        v, r = d["value"].to_numpy(), d["round"].to_numpy()
        rows.append(dict(setting=s, method=m, seed=seed, fluctuation=float((v - savgol(v))[r >= start].std()),
                         late_loss=float(v[r >= start].mean())))
    return pd.DataFrame(rows)


def claim_checks(rt: pd.DataFrame, var: pd.DataFrame, rounds: int) -> list:
    """The text's claims (Sec. 4.1) per setting, on paired per-seed values with the book's rule: HiCS-FL reaches
    the target in fewer rounds than each of random, pow-d and CS, and DivFL where it ran with HiCS-FL's seeds
    (not reached counts as ``rounds`` + 1, a lower bound), has the smaller training-loss fluctuation, and its
    speed-up over random is largest in setting (1). ``rt`` must come from the common horizon (:func:`truncate`
    before :func:`rounds_table`): a round after ``rounds`` is refused."""
    out = []
    r = rt[rt.group.isin(["main", "divfl"])].copy()
    late = r[r["rounds"] > rounds]
    if len(late):
        raise ValueError(f"rt has rounds to target after rounds = {rounds} ({late.iloc[0].to_dict()}); compute it on "
                         f"truncate(table, {rounds}), the horizon common to every method")
    r["rounds"] = r["rounds"].fillna(rounds + 1)

    def vals(df, s, m, col):
        return df[(df.setting == s) & (df.method == m)].sort_values("seed")[col].to_numpy()

    def seeds(df, s, m):
        return list(df[(df.setting == s) & (df.method == m)].sort_values("seed")["seed"])
    for s in sorted(r[r.group == "main"].setting.unique()):
        divfl = seeds(r, s, "DivFL") == seeds(r, s, "HiCS-FL") and seeds(var, s, "DivFL") == seeds(var, s, "HiCS-FL")
        for b in ("random", "pow-d", "CS") + (("DivFL",) if divfl else ()):
            out.append(claims.compare(f"setting {s}: HiCS-FL reaches the target no later than {b} (rounds)",
                                      vals(r, s, b, "rounds"), vals(r, s, "HiCS-FL", "rounds")))
            out.append(claims.compare(f"setting {s}: HiCS-FL's training loss fluctuates less than {b}'s",
                                      vals(var, s, b, "fluctuation"), vals(var, s, "HiCS-FL", "fluctuation")))
    sp = {s: vals(r, s, "random", "rounds") / vals(r, s, "HiCS-FL", "rounds")
          for s in r[r.group == "main"].setting.unique()}
    for s in sorted(sp):
        if s != "(1)" and "(1)" in sp:
            out.append(claims.compare(f"HiCS-FL's speed-up over random larger in setting (1) than in {s}",
                                      sp["(1)"], sp[s]))
    return out


_CLAIM = re.compile(r"setting (\(\d\)): HiCS-FL(?: reaches the target no later than (\S+) \(rounds\)"
                    r"|'s training loss fluctuates less than (\S+)'s)$")


def _settings(names: list[str]) -> str:
    names = sorted(names)
    if len(names) == 1:
        return f"setting {names[0]}"
    return "settings " + ", ".join(names[:-1]) + " and " + names[-1]


def claim_words(checks, verdict: str) -> str:
    """The claim checks of :func:`claim_checks` with `verdict`, in words, grouped by claim and baseline:
    "HiCS-FL reaches the target sooner than pow-d in settings (1) and (2); ..." ("none" when there are none)."""
    sooner, smoother, other = {}, {}, []
    for c in checks:
        if c.verdict != verdict:
            continue
        m = _CLAIM.match(c.what)
        if m is None:
            other.append(c.what)
        elif m.group(2):
            sooner.setdefault(m.group(2), []).append(m.group(1))
        else:
            smoother.setdefault(m.group(3), []).append(m.group(1))
    parts = [f"HiCS-FL reaches the target sooner than {b} in {_settings(s)}" for b, s in sooner.items()]
    parts += [f"its training loss fluctuates less than {b}'s in {_settings(s)}" for b, s in smoother.items()]
    return "; ".join(parts + other) or "none"


# ------------------------------------------------------------------------------------------ Table 1's checks
def table1_checks(table: pd.DataFrame, setting: str = TABLE1_SETTING) -> dict:
    """Table 1's FMNIST column (setting (2)) against the document's, one check per printed number, by document
    item: each method's per-seed rounds until the smoothed test accuracy reaches 0.75 against the document's
    rounds (threshold 0.5, its printed precision), and the per-seed speed-up (random's rounds / the method's,
    same seed) against the printed speed-up (threshold 0.05). A seed that never reaches 0.75 has no value; the
    mean is over the seeds that do. A method none of whose seeds reaches it within its runs' T rounds differs
    from the document when 0.75 is reachable at this scale (random reaches it in some seed) and T is at least
    the document's rounds: its rounds exceed T, its speed-up is below random's rounds / T in every seed. Else it
    is not testable at this scale. Each run is read whole, as in :func:`table1` (DivFL's 600 rounds in the
    ``paper`` profile)."""
    main = table[table["group"].isin(["main", "divfl"]) & (table["setting"] == setting)]
    r = rounds_table(main, DOC_TARGET)
    base = r[r["method"] == "random"].set_index("seed")["rounds"]
    out = {}
    for m in METHODS:
        v = r[r["method"] == m].set_index("seed")["rounds"]
        if v.empty:
            continue
        name = DOC_NAMES[m]
        T = int(main.loc[main["method"] == m, "round"].max())
        if m != "random" and not np.isfinite(v.to_numpy(dtype=float)).any() and base.notna().any() \
                and T >= DOC_TABLE1[m]:
            out.update(_unreached_checks(m, name, T, base.reindex(v.index).to_numpy(dtype=float), setting))
            continue
        sp = (base.reindex(v.index) / v).to_numpy(dtype=float)
        out[items.table1("rounds to 0.75", m)] = [claims.agree(
            f"Table 1, FMNIST, {name}: rounds to 0.75 (setting {setting}, mean over the seeds that reach it)",
            v.to_numpy(dtype=float), DOC_TABLE1[m], threshold=0.5)]
        out[items.table1("speed-up", m)] = [claims.agree(
            f"Table 1, FMNIST, {name}: speed-up over random to 0.75 (per seed)", sp, DOC_SPEEDUP[m], threshold=0.05)]
    return out


def _unreached_checks(m: str, name: str, T: int, base: np.ndarray, setting: str) -> dict:
    """Table 1's two checks of method ``m`` when none of its seeds reaches 0.75 within its runs' ``T`` rounds
    (at least the document's rounds) while random reaches it (``base``: random's rounds per seed, NaN where not):
    "ours" is the bound, T rounds and the largest speed-up random's rounds / T allow (a bound above the
    document's speed-up does not decide it: not testable at this scale)."""
    n = len(base)
    bound = float(np.nanmax(base)) / T
    return {
        items.table1("rounds to 0.75", m): [claims.holds(
            f"Table 1, FMNIST, {name}: rounds to 0.75 (setting {setting}; none of its {n} seeds reaches it within "
            f"{T} rounds)", False, f"more than {T} rounds (ours, a lower bound) against the document's "
            f"{DOC_TABLE1[m]}", ours=float(T), reference=float(DOC_TABLE1[m]))],
        items.table1("speed-up", m): [dataclasses.replace(sp, verdict=claims.NOT_TESTABLE) if sp.ok else sp
                                      for sp in [claims.holds(
            f"Table 1, FMNIST, {name}: speed-up over random to 0.75 (per seed; none of its {n} seeds reaches 0.75 "
            f"within {T} rounds)", bound >= DOC_SPEEDUP[m] - 0.05,
            f"below random's rounds / {T} in every seed (ours: the largest such bound, {bound:.2f}) against the "
            f"document's {DOC_SPEEDUP[m]:.1f}, threshold 0.05: differs when the bound is below it, else the bound "
            "does not decide", ours=bound, reference=float(DOC_SPEEDUP[m]))]]}



# ----------------------------------------------------------------------- pow-d's candidate set (a diagnostic)
MODEL_WORDS = {"logreg": "logistic regression (stand-in)", "hics_fmnist_paper": "the document's CNN"}
POWD_LATE = 20      # the late accuracy: the mean raw test accuracy over a run's last POWD_LATE rounds


def powd_variants(*tables: pd.DataFrame, setting: str = TABLE1_SETTING) -> pd.DataFrame:
    """The runs the diagnostic compares among ``tables`` (tidy runs, read together), in ``setting``, with a column
    ``variant``: random, pow-d with the document's d = N (the main runs) and pow-d with the diagnostic's
    ``powd_d`` candidates (group "powd_d")."""
    table = pd.concat([t for t in tables if len(t)]) if any(len(t) for t in tables) else tables[0]
    t = table[(table["setting"] == setting)
              & (((table["group"] == "main") & table["method"].isin(["random", "pow-d"]))
                 | (table["group"] == "powd_d"))].copy()
    if t.empty:
        return t.assign(variant=pd.Series(dtype=str))
    d = t["powd_d"] if "powd_d" in t else pd.Series(np.nan, index=t.index)
    t["variant"] = np.where(t["group"] == "powd_d", "pow-d, d = " + d.map(lambda v: f"{v:g}"),
                            np.where(t["method"] == "pow-d", "pow-d, d = N", "random"))
    return t


def powd_compare(variants: pd.DataFrame, target: float) -> pd.DataFrame:
    """Per (variant, seed) of ``variants`` (:func:`powd_variants`' frame), for the seeds that have a run of pow-d
    with fewer candidates: the rounds until the smoothed test accuracy reaches 0.75 and ``target`` (NaN: not
    within the run), the late accuracy (:data:`POWD_LATE`) and the highest smoothed accuracy."""
    t = variants[variants["metric"] == "test_acc"].sort_values("round")
    seeds = set(t.loc[t["group"] == "powd_d", "seed"])
    rows = []
    for (v, seed), g in t[t["seed"].isin(seeds)].groupby(["variant", "seed"]):
        acc, r = g["value"].to_numpy(), g["round"].to_numpy()
        rows.append({"variant": v, "seed": int(seed), "rounds": int(r.max()),
                     "rounds to 0.75": rounds_to_target(acc, DOC_TARGET, r),
                     "rounds to target": rounds_to_target(acc, target, r),
                     "late accuracy": float(acc[-POWD_LATE:].mean()), "peak (smoothed)": float(savgol(acc).max())})
    return pd.DataFrame(rows, columns=["variant", "seed", "rounds", "rounds to 0.75", "rounds to target",
                                       "late accuracy", "peak (smoothed)"])


def powd_view(cmp: pd.DataFrame) -> pd.DataFrame:
    """:func:`powd_compare` per variant: the seeds, the document's rounds to 0.75 (Table 1: random and its
    pow-d, d = N), ours to each target (mean ± sd over the seeds that reach it, with how many do) and the late and
    peak accuracies (mean ± sd over seeds)."""
    doc = {"random": DOC_TABLE1["random"], "pow-d, d = N": DOC_TABLE1["pow-d"]}
    rows = []
    for v, g in cmp.groupby("variant", sort=False):
        T = int(g["rounds"].max())
        rows.append({"variant": v, "seeds": ", ".join(map(str, sorted(g["seed"]))),
                     "document (Table 1): rounds to 0.75": doc.get(v, "none (the document runs d = N)"),
                     **{c: _cell(g[c].to_numpy(dtype=float), T) for c in ("rounds to 0.75", "rounds to target")},
                     **{c: _cell(g[c].to_numpy(dtype=float), T, 3) for c in ("late accuracy", "peak (smoothed)")}})
    order = {"random": 0, "pow-d, d = N": 1}
    return pd.DataFrame(rows).sort_values("variant", key=lambda s: s.map(lambda v: order.get(v, 2))).set_index(
        "variant")


def powd_values(cmp: pd.DataFrame, prefix: str) -> dict:
    """The diagnostic in words (``<prefix>_powd_words``) and numbers: per seed, pow-d's late accuracy with the
    diagnostic's d minus with d = N, mean and its standard error (paired by seed); whether the smaller candidate
    set reaches 0.75 in every seed where d = N reaches it in none. The verdict of the words follows
    :func:`flkit.papers.claims.compare` on the paired late accuracies (2 standard errors)."""
    small = sorted(v for v in cmp["variant"].unique() if v not in ("random", "pow-d, d = N")) if len(cmp) else []
    if not small or "pow-d, d = N" not in set(cmp["variant"]):
        missing = "the authors' candidate set" if not small else "every client as a candidate (d = N)"
        return {f"{prefix}_powd_words": f"No run of pow-d with {missing} is stored for these seeds yet.",
                f"{prefix}_powd_seeds": "none"}
    name = small[0]
    wide = cmp.pivot(index="seed", columns="variant")
    a, b = wide[("late accuracy", name)], wide[("late accuracy", "pow-d, d = N")]
    both = a.notna() & b.notna()
    chk = claims.compare(f"pow-d's late accuracy, {name} against d = N", a[both], b[both])
    seeds = [int(x) for x in wide.index[both]]
    reach = {v: int(np.isfinite(wide[("rounds to 0.75", v)][both]).sum()) for v in (name, "pow-d, d = N")}
    rounds = wide[("rounds to 0.75", name)][both].to_numpy(dtype=float)
    n, T = len(seeds), int(cmp["rounds"].max())
    sd = f" ± {np.nanstd(rounds, ddof=1):.0f}" if reach[name] > 1 else ""
    reached = (f"reaches 0.75 in {reach[name]} of {n} seed{'s' * (n > 1)} (after {np.nanmean(rounds):.0f}{sd} rounds)"
               if reach[name] else f"does not reach 0.75 within {T} rounds either")
    diff = f"{chk.ours:+.3f} ± {chk.spread:.3f}" if math.isfinite(chk.spread) and chk.spread > 0 else f"{chk.ours:+.3f}"
    late = {"confirmed": "higher than", "contradicted": "lower than"}.get(chk.verdict, "not distinguishable from")
    words = (f"With {name.split(', ')[1]} candidates drawn in proportion to data size (the authors' code) pow-d "
             f"{reached}, "
             f"where with every client as a candidate it reaches 0.75 in {reach['pow-d, d = N']} of {n}; its accuracy "
             f"over the last {POWD_LATE} rounds is {a[both].mean():.3f} against {b[both].mean():.3f}, {late} d = N's "
             f"(paired by seed: {diff}, 2 standard errors as the rule; seed{'s' * (n > 1)} "
             f"{', '.join(map(str, seeds))}).")
    return {f"{prefix}_powd_words": words, f"{prefix}_powd_seeds": ", ".join(map(str, seeds)),
            f"{prefix}_powd_diff": chk.ours, f"{prefix}_powd_late_small": float(a[both].mean()),
            f"{prefix}_powd_late_N": float(b[both].mean()), f"{prefix}_powd_reach": reach[name],
            f"{prefix}_powd_verdict": chk.verdict}


def plot_powd(panels: dict):
    """One panel per entry {title: :func:`powd_variants` frame}: the smoothed mean test accuracy over the
    diagnostic's seeds of random and pow-d with both candidate sets; None when no panel has a diagnostic run."""
    panels = {k: v for k, v in panels.items() if (v["group"] == "powd_d").any()}
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(7.0, 3.0), squeeze=False, sharey=True)
    colors = {"random": "tab:gray", "pow-d, d = N": "tab:orange"}
    for ax, (title, t) in zip(axes[0], panels.items()):
        t = t[(t["metric"] == "test_acc") & t["seed"].isin(set(t.loc[t["group"] == "powd_d", "seed"]))]
        for v, g in sorted(t.groupby("variant"), key=lambda kv: (kv[0] != "random", kv[0] != "pow-d, d = N")):
            m = g.groupby("round")["value"].mean()
            ax.plot(m.index, savgol(m.to_numpy()), lw=1.4, color=colors.get(v, "tab:green"), label=v)
        n = t["seed"].nunique()
        ax.set_title(f"{title} ({n} seed{'s' * (n > 1)})", fontsize=10)
        ax.set_xlabel("communication round", fontsize=10)
        ax.axhline(DOC_TARGET, color="k", lw=0.6, ls=":")
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=9)
    axes[0, 0].set_ylabel("test accuracy (smoothed)", fontsize=10)
    axes[0, -1].legend(fontsize=8, loc="lower right")
    fig.suptitle("HiCS-FL paper, Table 1 / Fig. 2 setting (2): pow-d with every client as a candidate (d = N)\n"
                 "and with the authors' d = 2K (a diagnosis; the document reports d = N only)", fontsize=10)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------ the page
PROXY_WORDS = {"gradient": "the document's one-step gradient of every client",
               "update": "every client's full local update"}


def describe(name: str, cfg: dict) -> str:
    """One line: the profile ``name`` and its settings ``cfg``."""
    loss = "" if cfg["train_loss_images"] is None else f", training loss over {cfg['train_loss_images']:,} images"
    return (f"profile={name}: model {cfg['model']}, N = {cfg['clients']}, K = {cfg['k']}, R = {cfg['epochs']}, "
            f"B = {cfg['batch_size']}, eta = {cfg['lr']}, {cfg['rounds']} rounds, seeds {cfg['seeds']}, "
            f"DivFL's proxy: {cfg['divfl_proxy']}{loss}")


def training_minutes(cfg: dict, store) -> float:
    """Minutes the stored runs of ``cfg``'s jobs took when they were computed (their manifests)."""
    return sum(store.manifest(j)["wall_time_s"] for j in jobs(cfg)) / 60


def _lr_runs(table: pd.DataFrame, cfg: dict) -> pd.DataFrame:
    """Test accuracy of random and HiCS-FL at the two learning rates: ``lr_setting``, the first ``lr_alt`` seed."""
    return table[(table.metric == "test_acc") & (table.setting == cfg["lr_setting"])
                 & (table.seed == cfg["lr_alt_seeds"][0]) & table.method.isin(["random", "HiCS-FL"])
                 & table.group.isin(["main", "lr_alt"])]


def plot_learning_rate(table: pd.DataFrame, cfg: dict):
    """Random and HiCS-FL at ``lr`` (solid) and ``lr_alt`` (dashed), smoothed over the raw curve."""
    fig, ax = plt.subplots(figsize=(7.0, 3.0))
    for (g, m), d in _lr_runs(table, cfg).groupby(["group", "method"]):
        lr, c = (cfg["lr"], "-") if g == "main" else (cfg["lr_alt"], "--")
        line, = ax.plot(d["round"], savgol(d["value"].to_numpy()), c, lw=1.6, label=f"{m}, eta = {lr:g}")
        ax.plot(d["round"], d["value"], c, lw=0.5, alpha=0.5, color=line.get_color())
    ax.set(xlabel="communication round", ylabel="test accuracy",
           title=f"Setting {cfg['lr_setting']}, seed {cfg['lr_alt_seeds'][0]}: the local learning rate")
    ax.legend(fontsize=9, title="method, local SGD step", title_fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def learning_rate_values(table: pd.DataFrame, cfg: dict) -> dict:
    """``lr_<group>_<method>``: the last round's test accuracy of :func:`plot_learning_rate`'s runs (NaN: not run)."""
    runs = _lr_runs(table, cfg)
    fin = runs[runs["round"] == cfg["rounds"]].set_index(["group", "method"])["value"]
    return {f"lr_{g}_{m}": float(fin.get((g, m), np.nan)) for g in ("main", "lr_alt") for m in ("random", "HiCS-FL")}


def last_accuracy(acc: pd.DataFrame, rounds: int) -> tuple[pd.DataFrame, dict]:
    """The mean test accuracy at round ``rounds`` per method and setting (``acc``: :func:`smoothed_mean`), for
    display, and its values ``acc_<method>_<setting>``."""
    last = acc[(acc["round"] == rounds) & acc.group.isin(["main", "divfl"])].pivot(index="method", columns="setting",
                                                                                   values="mean")
    shown = last.reindex([m for m in METHODS if m in last.index]).round(3).astype(object).fillna("n/a (not run)")
    values = {f"acc_{m}_{s.strip('()')}": float(v) for (m, s), v in last.stack().items()}
    return shown.rename_axis("test accuracy at the last round"), values


def variability_table(var: pd.DataFrame, sd: pd.DataFrame, start: int) -> pd.DataFrame:
    """Per method and setting: the mean late training loss and its fluctuation (``var``: :func:`variability`) and
    the mean over rounds >= ``start`` of the standard deviation over seeds (``sd``: :func:`smoothed_mean`)."""
    vt = var.groupby(["setting", "method"])[["late_loss", "fluctuation"]].mean().unstack("setting")
    sdm = sd[sd["round"] >= start].groupby(["method", "setting"])["std"].mean().unstack("setting")
    return pd.concat({**{k: vt[k] for k in ("late_loss", "fluctuation")}, "sd over seeds": sdm}, axis=1)


def late_values(vt: pd.DataFrame) -> dict:
    """``late_<method>_3``: the late training loss of CS, HiCS-FL and random in setting (3) (NaN: not run)."""
    return {f"late_{m}_3": float(vt.loc[m, ("late_loss", "(3)")]) if "(3)" in vt["late_loss"] else float("nan")
            for m in ("CS", "HiCS-FL", "random")}


def target_accuracy(acc: pd.DataFrame, rounds: int) -> float:
    """The page's own target: random sampling's smoothed mean test accuracy in setting (2) at round 100 (or
    ``rounds`` when shorter)."""
    a2 = acc[(acc.group == "main") & (acc.setting == "(2)") & (acc.method == "random")].set_index("round")["smoothed"]
    return float(a2.loc[min(100, rounds)])


def divfl_runs(name: str, data, store, *, seeds=None, rounds=None) -> dict:
    """{proxy: table}: the DivFL runs of profile ``name`` in Table 1's setting with the one-step gradient proxy
    ("gradient", the document's) and with every client's full update ("update"), each run whole."""
    out = {}
    for proxy in ("gradient", "update"):
        cfg = profile(name, seeds=seeds, rounds=rounds, divfl_proxy=proxy, divfl_settings=[TABLE1_SETTING])
        out[proxy] = results.sweep([j for j in jobs(cfg) if j["group"] == "divfl"], lambda j: run_job(j, data), store,
                                   progress=False)
    return out


def with_divfl(table: pd.DataFrame, divfl: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its DivFL runs replaced by ``divfl``."""
    return pd.concat([table[table.method != "DivFL"], divfl], ignore_index=True)


def table1_both(t1: pd.DataFrame, t1u: pd.DataFrame) -> pd.DataFrame:
    """:func:`table1` with DivFL's one-step gradient proxy (``t1``, the one scored), and DivFL's row with the
    full-update proxy (``t1u``) beside it."""
    return pd.concat([t1.rename(index={"DivFL": "DivFL (one-step gradient proxy)"}),
                      t1u.loc[["DivFL"]].rename(index={"DivFL": "DivFL (full-update proxy)"})])


def table1_values(t1: pd.DataFrame, t1u: pd.DataFrame, target: float, divfl: dict) -> dict:
    """The prose's numbers of Table 1: rounds and speed-ups to ``target`` per method (``rt_<m>``, ``sp_<m>``),
    random's rounds to the document's 0.75, DivFL's rounds with each proxy, and the horizons of DivFL's runs."""
    col = f"ours: rounds to {target:.3f}"
    v = {"paper_divfl_rounds": profile("paper")["divfl_table1_rounds"],
         "rt_doc_random": t1.loc["random", f"ours: rounds to {DOC_TARGET:.3f}"]}
    for m in METHODS:
        v[f"rt_{m}"] = t1.loc[m, col]
        v[f"sp_{m}"] = t1.loc[m, f"ours: speed-up ({target:.3f})"]
    for proxy, t in (("gradient", t1), ("update", t1u)):
        v[f"rt_DivFL_{proxy}"] = t.loc["DivFL", col]
    runs = pd.concat(divfl.values(), ignore_index=True)
    v["divfl_t1_rounds"] = int(runs["round"].max()) if len(runs) else 0
    return v


def claim_values(checks: list, rt: pd.DataFrame, rounds: int) -> dict:
    """The prose's words and counts of :func:`claim_checks`: the summary, the number and the words of the checks
    of each verdict, the verdict on the ranking, and the method fastest to the target in Table 1's setting (mean
    over seeds, not reached counted as ``rounds`` + 1)."""
    tbl = claims.frame(checks)
    v = {"checks_summary": claims.summary(checks)}
    for verdict in ("confirmed", "contradicted", "not testable at this scale"):
        v[f"n_{verdict.split()[0]}"] = int((tbl.verdict == verdict).sum())
        v[f"w_{verdict.split()[0]}"] = claim_words(checks, verdict)
    n_bad, n_open = int((tbl.verdict == "contradicted").sum()), int((tbl.verdict == "not testable at this scale").sum())
    v["ranking_verdict"] = ("holds here" if not n_bad and not n_open else "does not hold here" if n_bad
                            else "is not decided at this scale")
    r2 = rt[rt.group.isin(["main", "divfl"]) & (rt.setting == TABLE1_SETTING)]
    v["t1_fastest"] = r2.assign(rounds=r2["rounds"].fillna(rounds + 1)).groupby("method")["rounds"].mean().idxmin()
    return v


def cnn_estimate(name: str, data, store) -> tuple[dict, str]:
    """The document's CNN on this machine (:func:`paper_estimate` of the ``paper`` profile, two rounds, stored per
    host in the book's store; a smoke run that finds none there stores its own in ``store``), in one thread's CPU
    time: seconds per client training, per test-set evaluation and per training-loss evaluation, and the hours of
    the ``paper`` profile's trainings and evaluations (its jobs now, each for its own rounds; the training loss over
    the profile's ``train_loss_images``; pow-d's loss probe over every training image, scaled from the timed
    training loss by the number of images). Returns (values, one line in words)."""
    pcfg = profile("paper")
    est_cfg = dict(experiment="fmnist_paper_estimate", model=pcfg["model"], rounds=2, k=pcfg["k"],
                   host=platform.machine(), divfl_proxy=pcfg["divfl_proxy"], evaluation="test and training loss apart",
                   train_loss_images=pcfg["train_loss_images"],
                   eval_batch=eval_batch(pcfg["model"], data.x_train.device))   # the images per evaluation chunk
    est_store = results.book_store("hics")         # the timing is the machine's, whatever the profile ...
    if name == "smoke" and not est_store.done(est_cfg):
        est_store = store                          # ... but a smoke run writes nothing into the book's results
    est = results.sweep([est_cfg], lambda c: paper_estimate(data, pcfg, rounds=2, evaluation=True), est_store,
                        progress=False).set_index("metric")["value"]
    n_train, n_eval, n_probe = client_trainings(pcfg), evaluations(pcfg), loss_probes(pcfg)
    client_s, test_s, loss_s = (float(est[f"cpu_seconds_per_{k}"]) for k in ("client", "test_evaluation", "train_loss"))
    probe_s = loss_s * len(data.y_train) / float(est["train_loss_images"])   # the loss over every training image
    train_h, eval_h = client_s * n_train / 3600, ((test_s + loss_s) * n_eval + probe_s * n_probe) / 3600
    values = dict(cnn_s=client_s, cnn_train_h=train_h, cnn_test_s=test_s, cnn_loss_s=loss_s, cnn_probe_s=probe_s,
                  cnn_eval_h=eval_h, cnn_h=train_h + eval_h, cnn_loss_images=int(est["train_loss_images"]))
    words = (f"training: {client_s:.2f} s per client training x {n_train:,} -> {train_h:.0f} h; evaluation: "
             f"{test_s:.1f} s for the test set and {loss_s:.1f} s for the training loss "
             f"({int(est['train_loss_images']):,} images) x {n_eval:,}, and {probe_s:.1f} s for pow-d's loss probe "
             f"(every training image) x {n_probe:,} -> {eval_h:.0f} h; about "
             f"{train_h + eval_h:.0f} h on this CPU (one thread's CPU time)")
    return values, words
