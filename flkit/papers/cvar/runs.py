"""Running the runs of document 003: the data and user split of a run, its model, batches of runs trained
together (vectorized, checkpointed) through the package's round loop, and the results store that keeps them
(`sweep`: stored runs read, missing ones computed; `stored`: read only)."""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from flkit import aggregate, datasets, fl, models, partition
from flkit.datasets import blobs_2d
from flkit.objectives import cvar_objective
from flkit.papers.cvar.algorithm import EXTRAS
from flkit.papers.cvar.common import INPUT_SCALINGS, _is_int, batch_group, quirks_of, run_configs
from flkit.participation import random_access_indices
from flkit.results import Store, book_store, config_key, sweep_batched
from flkit.seeding import resolve_device, rng
from flkit.tasks import EngineTask

__all__ = ["blobs_split", "scale_inputs", "prepare", "build_model", "Deadline", "run_batch", "params_from_table",
           "store_for", "sweep", "stored", "sweep_or_stored", "planned_steps", "split_summary"]


# ================================================================================================
# Data
# ================================================================================================
_DATA_CACHE: dict = {}


def _image_data(name: str, train_subset, test_subset, device) -> tuple:
    key = (name, train_subset, test_subset, str(device))
    if key not in _DATA_CACHE:
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
    store = store_for(s, root)
    configs = run_configs(s)
    missing = [c for c in configs if not store.done(c)]
    if missing and not compute_missing:
        raise FileNotFoundError(f"{len(missing)} of {len(configs)} runs of {s['experiment']} ({s['profile']}) are not "
                                f"in {store.name}; run python -m flkit.sweep cvar or set compute_missing=True")
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


def sweep_or_stored(s: Mapping, *, compute_missing: bool, device="auto",
                    say: Callable[[str], None] | None = None) -> tuple[pd.DataFrame, int, int]:
    """The runs of settings `s` a page shows: with `compute_missing` all of them (`sweep`, the missing ones
    computed), else those already stored (`stored`, nothing computed; `say`, e.g. print, is told how many).
    Returns (their joined tidy table, the number stored, the number of runs of `s`)."""
    if compute_missing:
        df = sweep(s, device=device)
        n = len(run_configs(s))
        return df, n, n
    df, done, total = stored(s)
    if say is not None:
        say(f"{done} of {total} runs of this setting are stored")
    return df, done, total


def planned_steps(configs: Sequence[Mapping], rounds: int | None = None) -> np.ndarray:
    """Local steps of each round of a batch of runs (no training): S_n = max over runs of
    H ceil(N_{I_n} / B), from the runs' splits and RAM draws. Shape (rounds,)."""
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
