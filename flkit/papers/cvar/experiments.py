"""The experiments of document 003 (Fig. 2, Figs. 3-4, Table 1): their settings under each profile, one
config per run, the data and user split of a run, and running batches of runs (vectorized,
checkpointed) through the results store."""
from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from flkit.papers.cvar.algorithm import EXTRAS
from flkit.objectives import cvar_objective
from flkit.papers.cvar.ram import RAMS, rho_authors_k30, rho_for, rho_table1
from flkit.seeding import resolve_device, rng

FIG2_PANELS = {
    # Fig. 2(a): 3 users, one class each; 2(b): user 3 gets an extra (4th) class; 2(c): 30 users, 3 classes.
    "a": dict(centers=[[1.0, 1.0], [2.0, 3.0], [2.3, 1.5]], test_frac=0.2, assignment=[[0], [1], [2]],
              rho="fig2-k3", rounds=4000),
    "b": dict(centers=[[1.0, 1.0], [2.0, 3.0], [3.0, 1.5], [2.0, 0.5]], test_frac=0.1,
              assignment=[[0], [1], [2, 3]], rho="fig2-k3", rounds=4000),
    "c": dict(centers=[[1.0, 1.0], [2.0, 3.0], [2.3, 1.5]], test_frac=0.2,
              assignment=[[0, 1]] * 24 + [[2]] * 6, rho="authors-k30", rounds=25000),
}

# Fig. 2's model variants that separate the authors' two quirks (setting `causes`): name -> (hidden units,
# zero-initialised weight matrices, softmax before the cross-entropy). "neither" is our model, "both" the
# authors' notebook model; hidden = 0 is the linear softmax model (the document's "logistic regression").
CAUSES = {"neither": (64, False, False), "zero-init": (64, True, False), "double-softmax": (64, False, True),
          "both": (64, True, True), "linear": (0, False, False), "linear-both": (0, True, True)}
# The image experiments' input scaling (setting `input_scaling`): "document" feeds [0, 1] pixels for training and
# test; "authors" trains on raw 0-255 pixels and tests on [0, 1] ones, as the authors' MNIST script does.
INPUT_SCALINGS = ("document", "authors")
VARIANT_KEYS = ("ram", "input_scaling", "causes")  # settings that make a labelled variant, not a reduction

# The document's setting of each experiment ("paper"), and what the other profiles change.
PAPER = {
    "synthetic_2d": dict(panels=["a", "b", "c"], rounds=None,  # None: each panel's own (4000, 4000, 25000)
                         n_per_class=1000, std=0.1, data_seed=11, model="cvar_2d", hidden=64,
                         epochs=10, batch_size=100, lr_theta=1e-3, lr_t=1e-3, gamma=0.1, alphas=[1.0, 0.1],
                         seeds=[0, 1, 2], eval_every=None, rho_seed=0, authors_model_seeds=[0],
                         causes=[], cause_seeds=[0, 1, 2, 3, 4]),
    "mnist": dict(dataset="mnist", settings=[0.9, 0.8], num_users=30, frequent_frac=0.9, model="cvar_mlp",
                  epochs=10, batch_size=128, lr_theta=1e-3, lr_t=1e-4, rounds=4000,
                  cells=[[0.3, 0.3]], seeds=[0, 1, 2, 3, 4], eval_every=10, t_every=1, ram="random-draw", rho_seed=0,
                  train_subset=None, test_subset=None, input_scaling="document"),
    "fmnist": dict(dataset="fashion-mnist", settings=[0.8], num_users=30, frequent_frac=0.9, model="cvar_lenet",
                   epochs=20, batch_size=128, lr_theta=1e-2, lr_t=5e-4, rounds=6000,
                   gammas=[0.0, 0.1, 0.2, 0.3, 1.0], alphas=[1.0, 0.3, 0.2, 0.1], seeds=[0, 1, 2, 3, 4],
                   eval_every=100, t_every=10, ram="authors", rho_seed=0, train_subset=None, test_subset=None,
                   input_scaling="document"),
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
    "REDUCED: <what differs from the document>" ("SMOKE: ..." for the smoke profile, "VARIANT: ..." when
    only labelled variants differ (`ram`, `input_scaling`, `causes`, or more rounds than the document's),
    which every figure and table title must carry.

    input_scaling (Figs. 3-4, Table 1): "document" (the default: [0, 1] pixels for training and test) or
    "authors" (a variant: training on raw 0-255 pixels, test on [0, 1] ones, as the authors' MNIST script
    feeds them, risk-aware-FL@f4a32c0 "script for Mnist.py": its users' tensors are `dataset.data.float()`,
    its test loader applies `ToTensor()`).

    causes, cause_seeds (Fig. 2): extra runs of the model variants of `CAUSES` ("zero-init", "double-softmax",
    "both", "neither", "linear", "linear-both") on every panel of `panels`, for every alpha and every seed
    of `cause_seeds`, to separate the two quirks of the authors' notebook model (default: none).

    ram (Figs. 3-4, Table 1): "authors" (the authors' 30 probabilities, normalized, `ram.rho_authors_k30`:
    Table 1's default, whose caption quotes its three smallest values) or "random-draw" (27 of the 30 drawn at
    random from `rng(rho_seed, "ram")`, the caption's three kept, `ram.rho_table1`: the default of Figs. 3-4 on
    MNIST, for which the document gives no vector and the authors' MNIST script draws one at random; "authors"
    there is a labelled sensitivity check)."""
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
    what = ", ".join(f"{k}={_short(s[k], k)} (document: {_short(PAPER[experiment][k], k)})" for k in diff)
    longer = lambda k: k == "rounds" and s[k] is not None and PAPER[experiment][k] is not None and s[k] > PAPER[experiment][k]  # noqa: E731
    variant = all(k in VARIANT_KEYS or longer(k) for k in diff)
    kind = "SMOKE" if profile == "smoke" else "VARIANT" if variant else "REDUCED"
    s["label"] = "" if not diff else f"{kind}: {what}"
    s["experiment"], s["profile"] = experiment, profile
    validate(s)
    return s


def validate(s: Mapping) -> None:
    """One clear ValueError, before any work, for settings outside their range: rounds, epochs, batch
    size, evaluation spacing and subsets positive integers; seeds a non-empty list of distinct integers
    >= 0; step sizes positive (eta_t >= 0); alpha in (0, 1], gamma in [0, 1], the fractions r and M in
    (0, 1); known Fig. 2 panels. `settings` and `run_configs` call it."""
    exp = s.get("experiment")
    if exp not in PAPER:
        raise ValueError(f"unknown experiment {exp!r}; choose one of {sorted(PAPER)}")
    _ints(s, "seeds", lo=0, allow_empty=False)
    for k in ("epochs", "batch_size"):
        _int_at_least(s, k, 1)
    _int_at_least(s, "rounds", 1, none_ok=exp == "synthetic_2d")   # None: each panel's own
    _int_at_least(s, "eval_every", 1, none_ok=exp == "synthetic_2d")  # None: rounds // 200
    _in_range(s, "lr_theta", 0, None, lo_open=True)
    _in_range(s, "lr_t", 0, None)
    if exp == "synthetic_2d":
        if not s["panels"] or any(p not in FIG2_PANELS for p in s["panels"]):
            raise ValueError(f"panels must be a non-empty list of {sorted(FIG2_PANELS)}, got {s['panels']!r}")
        _ints(s, "authors_model_seeds", lo=0, allow_empty=True)
        _ints(s, "cause_seeds", lo=0, allow_empty=True)
        bad = [c for c in s["causes"] if c not in CAUSES] if isinstance(s["causes"], (list, tuple)) else s["causes"]
        if bad or len(set(s["causes"])) != len(s["causes"]):
            raise ValueError(f"causes must be a list of distinct names from {list(CAUSES)}, got {s['causes']!r}")
        for k in ("n_per_class", "hidden"):
            _int_at_least(s, k, 1)
        _in_range(s, "std", 0, None, lo_open=True)
        _in_range(s, "gamma", 0, 1)
        _each(s, "alphas", 0, 1, lo_open=True)
        return
    for k in ("num_users", "t_every", "train_subset", "test_subset"):
        _int_at_least(s, k, 2 if k == "num_users" else 1, none_ok=k != "num_users")
    if s["input_scaling"] not in INPUT_SCALINGS:
        raise ValueError(f"input_scaling must be one of {INPUT_SCALINGS}, got {s['input_scaling']!r}")
    if s["ram"] not in RAMS:
        raise ValueError(f"ram must be one of {RAMS}, got {s['ram']!r}")
    if s["ram"] == "authors" and s["num_users"] != 30:
        raise ValueError(f"ram='authors' is the authors' 30-user vector; num_users must be 30, got {s['num_users']!r}")
    _in_range(s, "frequent_frac", 0, 1, lo_open=True, hi_open=True)
    _each(s, "settings", 0, 1, lo_open=True, hi_open=True)
    if exp == "mnist":
        cells = s["cells"]
        if not isinstance(cells, (list, tuple)) or not cells or any(len(c) != 2 for c in cells):
            raise ValueError(f"cells must be a non-empty list of [alpha, gamma] pairs, got {cells!r}")
        _each({"cells alpha": [c[0] for c in cells]}, "cells alpha", 0, 1, lo_open=True)
        _each({"cells gamma": [c[1] for c in cells]}, "cells gamma", 0, 1)
    else:
        _each(s, "alphas", 0, 1, lo_open=True)
        _each(s, "gammas", 0, 1)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _int_at_least(s: Mapping, k: str, lo: int, none_ok: bool = False) -> None:
    v = s[k]
    if v is None and none_ok:
        return
    if not _is_int(v) or v < lo:
        raise ValueError(f"{k} must be an integer >= {lo}{' or None' if none_ok else ''}, got {v!r}")


def _ints(s: Mapping, k: str, lo: int, allow_empty: bool) -> None:
    v = s[k]
    if (not isinstance(v, (list, tuple)) or (not v and not allow_empty)
            or not all(_is_int(x) and x >= lo for x in v) or len(set(v)) != len(v)):
        raise ValueError(f"{k} must be a {'' if allow_empty else 'non-empty '}list of distinct integers >= {lo}, "
                         f"got {v!r}")


def _number_in(v, lo, hi, lo_open: bool, hi_open: bool) -> tuple[bool, str]:
    """(v is a finite number in the interval, the interval as text)."""
    where = f"{'(' if lo_open else '['}{lo}, {'inf)' if hi is None else str(hi) + (')' if hi_open else ']')}"
    ok = (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
          and bool(np.isfinite(v)) and (v > lo if lo_open else v >= lo)
          and (hi is None or (v < hi if hi_open else v <= hi)))
    return ok, where


def _in_range(s: Mapping, k: str, lo, hi, lo_open: bool = False, hi_open: bool = False) -> None:
    ok, where = _number_in(s[k], lo, hi, lo_open, hi_open)
    if not ok:
        raise ValueError(f"{k} must be a number in {where}, got {s[k]!r}")


def _each(s: Mapping, k: str, lo, hi, lo_open: bool = False, hi_open: bool = False) -> None:
    v = s[k]
    if not isinstance(v, (list, tuple)) or not v:
        raise ValueError(f"{k} must be a non-empty list, got {v!r}")
    for x in v:
        ok, where = _number_in(x, lo, hi, lo_open, hi_open)
        if not ok:
            raise ValueError(f"every value of {k} must be a number in {where}, got {x!r} in {v!r}")


def _short(v, key: str = "") -> str:
    if v is None:
        return "full"
    if v == "authors":
        return "the authors' 30 probabilities" if key == "ram" else "the authors' (train 0-255, test 0-1)"
    if isinstance(v, list) and len(v) > 4 and all(isinstance(i, int) for i in v):
        return f"{len(v)} seeds"
    return str(v)


def method_of(alpha: float, gamma: float) -> str:
    return "fedavg" if alpha == 1 or gamma == 1 else "fed-cvar-avg"


def run_configs(s: Mapping) -> list[dict]:
    """One JSON-able config per run for the settings `s` (from `settings`). Risk-neutral cells
    (alpha = 1 or gamma = 1) are one run, stored as FedAvg with alpha = gamma = 1: Algorithm 1 is then
    exactly FedAvg (tests/test_cvar.py::test_reduces_to_fedavg), so the eight risk-neutral cells of
    Table 1 (5 x 4 cells, 12 risk-aware) share that run."""
    validate(s)
    exp = s["experiment"]
    common = dict(doc="003", experiment=exp, model=s["model"], epochs=s["epochs"], batch_size=s["batch_size"],
                  lr_theta=s["lr_theta"], lr_t=s["lr_t"], t0=0.0, code_version=1)
    out = []
    if exp == "synthetic_2d":
        for panel in s["panels"]:
            P = FIG2_PANELS[panel]
            rounds = s["rounds"] or P["rounds"]
            runs = ([(seed, "neither") for seed in s["seeds"]] + [(seed, "both") for seed in s["authors_model_seeds"]]
                    + [(seed, v) for v in s["causes"] for seed in s["cause_seeds"]])
            for alpha in s["alphas"]:
                a, g = (1.0, 1.0) if method_of(alpha, s["gamma"]) == "fedavg" else (alpha, s["gamma"])
                for seed, variant in runs:
                    hidden, quirks = _variant_fields(variant, s["hidden"])
                    c = dict(common, panel=panel, centers=P["centers"], n_per_class=s["n_per_class"],
                             std=s["std"], data_seed=s["data_seed"], test_frac=P["test_frac"],
                             assignment=P["assignment"], hidden=hidden, authors_model=quirks,
                             rho=rho_for(P["rho"]).tolist(), rho_name=P["rho"], rounds=rounds,
                             eval_every=s["eval_every"] or max(1, rounds // 200),
                             method=method_of(a, g), alpha=a, gamma=g, seed=seed, save_params=True)
                    if c not in out:  # a cause run that is also a main run ("neither", "both") is one run
                        out.append(c)
        return out
    rho, rho_name = ram_of(s)
    if exp == "mnist":
        cells = [(1.0, 1.0)] + [tuple(c) for c in s["cells"]]
    else:
        cells = sorted({(1.0, 1.0) if method_of(a, g) == "fedavg" else (a, g)
                        for g in s["gammas"] for a in s["alphas"]}, key=lambda c: (c != (1.0, 1.0), c[1], -c[0]))
    scaling = {} if s["input_scaling"] == "document" else {"input_scaling": s["input_scaling"]}  # stored keys kept
    for r in s["settings"]:
        for a, g in cells:
            for seed in s["seeds"]:
                out.append(dict(common, **scaling, dataset=s["dataset"], num_users=s["num_users"],
                                frequent_frac=s["frequent_frac"], pattern_frac=r, rho=rho,
                                rho_name=rho_name, rounds=s["rounds"], eval_every=s["eval_every"],
                                t_every=s["t_every"],
                                train_subset=s["train_subset"], test_subset=s["test_subset"],
                                method=method_of(a, g), alpha=a, gamma=g, seed=seed))
    return [c for i, c in enumerate(out) if c not in out[:i]]   # a risk-neutral cell in `cells` is FedAvg's run


def _variant_fields(variant: str, hidden: int) -> tuple[int, bool | str]:
    """(hidden, authors_model) of a Fig. 2 run of model variant `variant` (`CAUSES`). The config field
    authors_model keeps the stored runs' values (False: our model, True: both quirks) and names a single
    quirk as a string ("zero-init", "double-softmax"); hidden = 0 is the linear softmax model."""
    h, zero, double = CAUSES[variant]
    quirks = True if zero and double else "zero-init" if zero else "double-softmax" if double else False
    return (hidden if h else 0), quirks


def quirks_of(config: Mapping) -> tuple[bool, bool]:
    """(zero_init, double_softmax) of a Fig. 2 run config (field authors_model: False, True, "zero-init",
    "double-softmax")."""
    q = config.get("authors_model", False)
    if q not in (False, True, "zero-init", "double-softmax"):
        raise ValueError(f"authors_model must be False, True, 'zero-init' or 'double-softmax', got {q!r}")
    return q is True or q == "zero-init", q is True or q == "double-softmax"


def variant_of(config: Mapping) -> str:
    """The `CAUSES` name of a Fig. 2 run config."""
    zero, double = quirks_of(config)
    linear = int(config["hidden"]) == 0
    names = {v: k for k, v in CAUSES.items()}
    return names.get((0 if linear else 64, zero, double)) or f"hidden={config['hidden']}, zero={zero}, double={double}"


def ram_of(s: Mapping) -> tuple[list[float], str]:
    """(rho, its name) of the image experiments' settings `s`: the authors' vector ("authors-k30") or
    the random draw of seed `rho_seed` ("table1@<seed>", the name the stored random-draw runs carry)."""
    if s["ram"] == "authors":
        return rho_authors_k30().tolist(), "authors-k30"
    return rho_table1(s["rho_seed"], s["num_users"]).tolist(), f"table1@{s['rho_seed']}"


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


def scale_inputs(x_train: torch.Tensor, input_scaling: str) -> torch.Tensor:
    """The training images under `input_scaling` (`INPUT_SCALINGS`), from [0, 1] pixels: unchanged
    ("document") or times 255, the raw 0-255 values the authors' MNIST script trains on ("authors"; a new
    tensor, the cached data are not touched). Test images always stay in [0, 1]."""
    if input_scaling not in INPUT_SCALINGS:
        raise ValueError(f"input_scaling must be one of {INPUT_SCALINGS}, got {input_scaling!r}")
    return x_train * 255.0 if input_scaling == "authors" else x_train


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
        xtr = scale_inputs(xtr, c0.get("input_scaling", "document"))
        parts = [partition.rare_users(ytr.cpu(), c["num_users"], c["frequent_frac"], c["pattern_frac"], seed=c["seed"])
                 for c in configs]
    return dict(x_train=xtr, y_train=ytr, x_test=xte, y_test=yte, num_classes=C, partitions=parts)


def build_model(config: Mapping) -> torch.nn.Module:
    from flkit import models
    if config["model"] == "cvar_2d":
        zero, double = quirks_of(config)  # the notebooks' zero init and double softmax
        return models.build("cvar_2d", num_classes=len(config["centers"]), hidden=config["hidden"],
                            zero_init=zero, double_softmax=double)
    return models.build(config["model"])


# ================================================================================================
# Running a batch of runs (vectorized), with checkpoints
# ================================================================================================
class Deadline(RuntimeError):
    """Raised by `run_batch` when it stopped before the deadline; its state is checkpointed."""


def _task(configs: Sequence[Mapping], data: dict, model: torch.nn.Module, fast: bool, vectorized, log):
    """The batch as an `flkit.tasks.EngineTask`: one split per run (keyed by the run's name, its index in
    the batch), H epochs of local SGD on (theta, t) with the CVaR objective, alpha and gamma constants."""
    from flkit.tasks import EngineTask
    c0 = configs[0]
    return EngineTask(model=model, x=data["x_train"], y=data["y_train"],
                      clients={str(m): list(p.indices) for m, p in enumerate(data["partitions"])}, split_by="name",
                      x_test=data["x_test"], y_test=data["y_test"], batch_size=c0["batch_size"], epochs=c0["epochs"],
                      local_lr=c0["lr_theta"], objective=cvar_objective, backend="fast" if fast else "engine",
                      vectorized=vectorized, extras=EXTRAS, extras_lr={"t": c0["lr_t"]}, stream="batch/{t}",
                      per_class=data["num_classes"], eval_batch_size=2048, log=log)


def _table(res, m: int, name: str, T: int, eval_every: int, t_every: int, C: int) -> pd.DataFrame:
    """Run m's rows in the chapter's table layout (round, metric, value, class, name): per evaluation round
    its test_loss, test_acc and per-class rows, then the thresholds t recorded since the previous one."""
    vals, rounds = res.values[name], list(res.rounds)
    rows, pending = [], []
    ev = lambda r: r % eval_every == 0 or r == T  # noqa: E731
    tr = lambda r: r % t_every == 0 or r == T     # noqa: E731
    for r in rounds:
        k = rounds.index(r)
        if r == 0 or tr(r):
            pending.append((r, "t", float(vals["t"][k, 0]), -1))
        if r == 0 or ev(r):
            rows.append((r, "test_loss", float(vals["test_loss"][k, 0]), -1))
            rows.append((r, "test_acc", float(vals["test_acc"][k, 0]), -1))
            rows += [(r, "test_acc_class", float(vals[f"test_acc_class/{c}"][k, 0]), c) for c in range(C)]
            rows += pending
            pending = []
    tab = pd.DataFrame(rows + pending, columns=["round", "metric", "value", "class"])
    tab["name"] = ""
    return tab


def run_batch(configs: Sequence[Mapping], device="auto", *, checkpoint_dir: str | os.PathLike | None = None,
              checkpoint_every_s: float = 300.0, deadline: float | None = None, progress: bool = True,
              vectorized: bool | str = True, log: Callable[[str], None] = print,
              cpu_threads: int | None = 1, fast: bool = True) -> list[pd.DataFrame]:
    """Run M configs (one `batch_group`) through the package's round loop `flkit.fl.run`; returns one tidy
    table per run. Each config is one `fl.Algorithm`: the `aggregate.Relay` rule (the relayed user's
    model becomes the global model), the RAM draws of its seed as its availability (one user per round),
    its own user split; all M runs train as M stacked models.

    Table rows: (round, metric, value, class): "t" (the global threshold) every `t_every` rounds
    (default: `eval_every`) and "test_loss", "test_acc", "test_acc_class" (per class) of the global
    model every `eval_every` rounds, both also at rounds 0 and T; "param" rows (name in column "name",
    flat index in "class") of the final model when a config has save_params.

    checkpoint_dir: where the batch's mid-run state is saved (every `checkpoint_every_s` seconds and
    before the `deadline`, a `time.time()` value); a later call with the same configs continues from it.
    Raises `Deadline` when it stops early.

    cpu_threads: torch threads while running on the CPU (restored afterwards). One thread is the
    fastest for these small models, by far on a shared machine (spinning OpenMP threads); None: leave as is.

    fast: train with `flkit.engine.FastSGD` and the batched `objective` (in-place SGD, CUDA graphs and
    flkit.fused's kernels on a GPU; the default, which produced the book's numbers) instead of
    `flkit.engine.local_train` (the reference). The two agree to float rounding (tests/test_cvar.py),
    not bit for bit: local_train vmaps the objective per model and updates with addcmul_ in steps where
    no run is masked.
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
    from flkit import aggregate, fl
    from flkit.participation import random_access_indices
    from flkit.results import config_key

    configs = [dict(c) for c in configs]
    groups = {json.dumps(batch_group(c), sort_keys=True) for c in configs}
    if len(groups) != 1:
        raise ValueError("run_batch needs configs that agree on everything but alpha, gamma, seed and the split")
    _check_cells(configs)  # before any data is read
    dev = resolve_device(device)
    c0, M, T = configs[0], len(configs), configs[0]["rounds"]
    data = prepare(configs, dev)
    model = build_model(c0).to(dev)
    task = _task(configs, data, model, fast, vectorized, log)
    K = task.num_clients
    algorithms = {}
    for m, c in enumerate(configs):
        ram = random_access_indices(c["rho"], T, c["seed"])
        algorithms[str(m)] = fl.Algorithm(aggregate.Relay(), availability={c["seed"]: np.eye(K, dtype=bool)[ram]})
    seeds = {str(m): [c["seed"]] for m, c in enumerate(configs)}
    w0 = task.init_params([c["seed"] for c in configs])
    w0[:, task.column("t")] = float(c0["t0"])
    w0[:, task.column("alpha")] = torch.tensor([float(c["alpha"]) for c in configs], dtype=w0.dtype)
    w0[:, task.column("gamma")] = torch.tensor([float(c["gamma"]) for c in configs], dtype=w0.dtype)
    keys = [config_key(c) for c in configs]
    ckpt = Path(checkpoint_dir) / f"batch-{config_key({'runs': keys})}.pt" if checkpoint_dir else None
    if ckpt is not None and ckpt.is_file():
        log(f"resuming {M} runs from {ckpt.name}")
    eval_every = c0["eval_every"]
    t_every = c0.get("t_every") or eval_every
    col = task.column("t")
    try:
        res = fl.run(task, algorithms, seeds=seeds, rounds=T, w0=w0, every=eval_every, diverge_factor=None,
                     track=lambda w: {"t": w[:, col]}, track_every=t_every, progress=progress,
                     desc=f"{c0['experiment']}: {M} runs", checkpoint=ckpt, checkpoint_every_s=checkpoint_every_s,
                     deadline=deadline)
    except fl.Deadline as e:
        raise Deadline(str(e)) from None
    log(f"local steps: {' + '.join(task.paths)}")
    if res.rounds_done:
        log(f"throughput: {M} runs x {res.rounds_done} rounds in {res.wall_s:.1f} s on {dev} (all pieces): "
            f"{M * res.rounds_done / max(res.wall_s, 1e-9):.1f} run-rounds/s, {task.steps_done} batched local steps "
            f"this piece (x{M} models)")
    final = task.unflatten(res.final_w)
    tables = []
    for m, c in enumerate(configs):
        tab = _table(res, m, str(m), T, eval_every, t_every, data["num_classes"])
        if c.get("save_params"):
            extra = [(T, "param", float(v), i, k) for k, p in final.items() if k not in EXTRAS
                     for i, v in enumerate(p[m].reshape(-1).tolist())]
            tab = pd.concat([tab, pd.DataFrame(extra, columns=["round", "metric", "value", "class", "name"])],
                            ignore_index=True)
        tab.attrs["wall_time_s"] = res.wall_s  # all pieces of a resumed batch
        tab.attrs["local_steps"] = " + ".join(task.paths)  # every piece's path
        tables.append(tab)
    return tables


def _check_cells(configs) -> None:
    """alpha in (0, 1], gamma in [0, 1] and rounds a positive integer in every config of a batch."""
    for c in configs:
        T = c["rounds"]
        if not _is_int(T) or T < 1:
            raise ValueError(f"rounds must be an integer >= 1, got {T!r}")
        a, g = float(c["alpha"]), float(c["gamma"])
        if not 0 < a <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {a}")
        if not 0 <= g <= 1:
            raise ValueError(f"gamma must be in [0, 1], got {g}")


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
          batch_size: int | None = None, progress: bool = True, vectorized: bool | str = True,
          executor=None) -> pd.DataFrame:
    """All runs of settings `s`: stored results are read, missing ones computed (vectorized, in batches
    of at most `batch_size` runs per `batch_group`) and stored. Returns the joined tidy table
    (`flkit.results.Store.load_many`: config fields as columns). executor: a `concurrent.futures.Executor`
    (process pool, Dask, ...) that runs the batches as independent jobs (`flkit.results.sweep_batched`)."""
    from flkit.results import sweep_batched
    store = store_for(s, root)
    configs = run_configs(s)
    missing = [c for c in configs if not store.done(c)]
    if missing and not compute_missing:
        raise FileNotFoundError(f"{len(missing)} of {len(configs)} runs of {s['experiment']} ({s['profile']}) are not in "
                                f"{store.name}; run scripts/cvar_sweep.py or set compute_missing=True")
    print(f"{s['experiment']} ({s['profile']}): {len(configs) - len(missing)} of {len(configs)} runs stored in "
          f"{store.name}, {len(missing)} to compute")
    ckpt_dir = store.root.parent / "checkpoints"
    dev = resolve_device(device)

    fn_many = functools.partial(run_batch, device=dev, checkpoint_dir=ckpt_dir, deadline=deadline,
                                progress=progress, vectorized=vectorized)  # picklable, for executors
    return sweep_batched(configs, fn_many, store, batch_size=batch_size, progress=False,
                         group_by=batch_group, device=str(dev), executor=executor)


def stored(s: Mapping, *, root=None) -> tuple[pd.DataFrame, int, int]:
    """The runs of settings `s` already in the results store, nothing computed: (their joined tidy table,
    the number stored, the number of runs of `s`). For a design that is paid in pieces (a ledger item):
    the page shows what is there and says how much is missing."""
    store = store_for(s, root)
    configs = run_configs(s)
    done = [c for c in configs if store.done(c)]
    return (store.load_many(done) if done else pd.DataFrame()), len(done), len(configs)


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
