r"""The round loop: every federated algorithm of the book runs through :func:`run`.

One call runs a comparison: a dict of :class:`Algorithm` (aggregator + sampler + step sizes) times a list
of seeds. Every (algorithm, seed) pair is one **run**, a row of one runs axis (row ``a * S + s`` for
algorithm a and seed s), so the expensive part, the clients' local training, is one batched computation
per round for all methods, seeds and hyper-parameters at once. Per round t:

1. availability: the (T, N) mask of the run's seed, drawn **before** training (``availability=``), so
   every algorithm of a comparison sees the same clients on the same rounds;
2. selection: the algorithm's sampler picks among the available clients (default: all of them);
3. local training: ``task.client_updates`` returns the pseudo-gradients :math:`\Delta = x_t - y` of the
   selected (run, client) pairs (see :mod:`flkit.aggregate` for the sign);
4. aggregation and server step: :math:`x_{t+1} = x_t - \eta\,G_t` with :math:`G_t` from the aggregator;
5. bookkeeping: metrics every ``every`` rounds (and every round when a target is set), divergence marking,
   rounds-to-target, client updates counted, periodic checkpoints, a deadline, a progress bar.

The contracts are the protocols of :mod:`flkit.protocols`. A **task** (:class:`~flkit.protocols.Task`)
supplies the model and the clients' local training on a flat parameter vector per run (``dim`` floats):
``num_clients``, ``dim``, ``client_updates(w (R, d), active (R, N), t, runs) -> (pairs (P, 2), delta (P, d)[,
local models (P, d)])``, ``metrics(w) -> {name: (R,)}``; optionally ``dtype``, ``sizes`` ((N,) sample counts),
``client_losses(w, pairs, runs) -> (P,)`` and ``client_gradients(w, pairs, runs) -> (P, d)`` (what a probe
reads). Randomness of local training must be keyed by (seed, round, client) only (``runs.seeds``), so a run's
numbers do not depend on which other runs share its batch, and a resumed run repeats the same numbers. A
**sampler** (:class:`~flkit.protocols.Sampler`) and a server rule that declares ``wants_probe = True``
(:class:`~flkit.protocols.Aggregator`) get a **probe** (:class:`~flkit.protocols.Probe`): the losses, gradients
and would-be updates of the clients they ask, at round t's global models of their algorithm's rows.

Divergence: a run whose first metric becomes non-finite or exceeds ``diverge_factor`` times its initial
absolute value (or ``diverge_ref``) is marked diverged at that round, stops training, and its metrics are
recorded as +inf from then on.
"""
from __future__ import annotations

import glob
import hashlib
import math
import numbers
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from flkit.aggregate import Updates
from flkit.protocols import Aggregator, Sampler, Task
from flkit.results import remove_stale_temp, temp_path

__all__ = ["Algorithm", "Runs", "Result", "Deadline", "run", "save_checkpoint", "load_checkpoint", "remove_checkpoint",
           "PART_BYTES"]


@dataclass(frozen=True)
class Algorithm:
    """One method of a comparison.

    aggregator: a rule of :mod:`flkit.aggregate`; sampler: a sampler of :mod:`flkit.sample` (None: every
    available client trains); lr: the server step size eta, a finite number >= 0; local_lr: the clients'
    step size, a finite number >= 0 (None: the task's own); availability: None (the experiment's masks),
    "all" (every client every round, e.g. FedGD), a callable seed -> (T, N) mask, a dict seed -> (T, N)
    mask (the algorithm's own participation process) or one (T, N) mask for every seed, a mask being an
    array or tensor of bool or 0/1 with at least T rows; p: the participation probabilities this
    algorithm's server knows (float, (N,), or per seed: a dict seed -> (N,) or a callable seed -> (N,)),
    default the run's. Bad step sizes raise ValueError here, bad masks and p in :func:`run`."""
    aggregator: Aggregator
    sampler: Sampler | None = None
    lr: float = 1.0
    local_lr: float | None = None
    availability: object = None
    p: object = None
    label: str = ""

    def __post_init__(self):
        for name in ("lr", "local_lr"):
            v = getattr(self, name)
            if name == "local_lr" and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
                none = " or None (the task's own)" if name == "local_lr" else ""
                raise ValueError(f"Algorithm {name} must be a finite number >= 0{none}, got {v!r}")


@dataclass
class Runs:
    """What a task needs to know about the rows of the runs axis: seeds (R,), local step sizes (R,),
    the algorithm name of each row, and the layout (``groups`` blocks of ``group_size`` rows with the same
    seeds in the same order, when that holds; else groups = 0)."""
    seeds: list[int]
    local_lr: Tensor
    names: list[str]
    groups: int = 0
    group_size: int = 0


class Deadline(RuntimeError):
    """Raised by :func:`run` when it stopped at its deadline; the state is in the checkpoint."""


# ------------------------------------------------------------------------------------- checkpoint files
PART_BYTES = 15 * 2**20   # a checkpoint larger than this is written in parts (files of at most 16 MiB each)


def _parts_of(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{glob.escape(path.name)}.*.part[0-9][0-9]"))


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = temp_path(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_checkpoint(obj, path: str | os.PathLike) -> list[Path]:
    """``torch.save(obj)`` to ``path``, through a temporary file and ``os.replace``. When the bytes exceed
    :data:`PART_BYTES` they go to parts ``<name>.<digest>.part00``, ``part01``, ... (each at most PART_BYTES,
    written first) and ``path`` becomes a small index naming them with their sha256 (written last, so a
    writer killed half-way leaves the previous checkpoint whole); parts no longer named are then removed.
    Returns the files written."""
    import io
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    written = []
    if len(data) > PART_BYTES:
        digest = hashlib.sha256(data).hexdigest()
        names = []
        for i in range(0, len(data), PART_BYTES):
            part = path.with_name(f"{path.name}.{digest[:12]}.part{i // PART_BYTES:02d}")
            _write_atomic(part, data[i:i + PART_BYTES])
            names.append(part.name)
            written.append(part)
        index = io.BytesIO()
        torch.save({"__parts__": names, "sha256": digest, "size": len(data)}, index)
        data = index.getvalue()
    _write_atomic(path, data)
    keep = {p.name for p in written}
    for old in _parts_of(path):
        if old.name not in keep:
            old.unlink(missing_ok=True)
    return written + [path]


def load_checkpoint(path: str | os.PathLike):
    """What :func:`save_checkpoint` saved at ``path`` (its parts joined and checked against their sha256)."""
    import io
    path = Path(path)
    obj = torch.load(path, weights_only=False)
    if isinstance(obj, dict) and "__parts__" in obj:
        data = b"".join((path.parent / name).read_bytes() for name in obj["__parts__"])
        if len(data) != obj["size"] or hashlib.sha256(data).hexdigest() != obj["sha256"]:
            raise RuntimeError(f"checkpoint {path}: its parts do not match their index (size or sha256); remove it")
        obj = torch.load(io.BytesIO(data), weights_only=False)
    return obj


def remove_checkpoint(path: str | os.PathLike) -> None:
    """Delete the checkpoint at ``path`` and its parts."""
    path = Path(path)
    for part in _parts_of(path):
        part.unlink(missing_ok=True)
    path.unlink(missing_ok=True)


@dataclass
class Result:
    """rounds (K,): the recorded rounds; values[name][metric]: (K, S_name) array (inf after divergence);
    hit[name] (S,): first round meeting the target (-1: never); diverged[name] (S,): round of divergence
    (-1: never); evals[name] (S,): client updates computed until the target was met (or the end);
    seeds[name]: the seeds of the algorithm's rows; wall_s: seconds of this call's rounds."""
    rounds: np.ndarray
    values: dict
    hit: dict
    diverged: dict
    evals: dict
    seeds: dict
    wall_s: float
    rounds_done: int = 0
    resumed_from: int = 0
    final_w: Tensor | None = None     # (R, d) the models after the last round, in row order
    final: dict = field(default_factory=dict)  # name -> the aggregator's final state

    def tidy(self) -> pd.DataFrame:
        """One row per algorithm x seed x recorded round x metric: columns method, seed, round, metric, value."""
        frames = []
        for name, mets in self.values.items():
            for met, arr in mets.items():
                K, S = arr.shape
                frames.append(pd.DataFrame({"method": name, "seed": np.tile(self.seeds[name], K),
                                            "round": np.repeat(self.rounds, S), "metric": met,
                                            "value": arr.reshape(-1)}))
        return pd.concat(frames, ignore_index=True)

    def outcomes(self) -> pd.DataFrame:
        """Per run (round 0): hit_round, diverged_round (-1: never), client_updates."""
        frames = []
        for name in self.hit:
            for met, arr in (("hit_round", self.hit[name]), ("diverged_round", self.diverged[name]),
                             ("client_updates", self.evals[name])):
                frames.append(pd.DataFrame({"method": name, "seed": self.seeds[name], "round": 0, "metric": met,
                                            "value": np.asarray(arr, dtype=float)}))
        return pd.concat(frames, ignore_index=True)


# ----------------------------------------------------------------------------------------- helpers
def _int(v, name: str, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    return int(v)


def _seed_lists(algorithms: Mapping, seeds) -> dict[str, list[int]]:
    if isinstance(seeds, Mapping):
        missing = sorted(set(algorithms) - set(seeds))
        if missing:
            raise ValueError(f"seeds has no entry for {missing}")
        out = {a: list(seeds[a]) for a in algorithms}
    else:
        out = {a: list(seeds) for a in algorithms}
    for a, s in out.items():
        if not s:
            raise ValueError(f"no seeds for algorithm {a!r}: give at least one")
        if len(set(s)) != len(s):
            raise ValueError(f"algorithm {a!r} has repeated seeds {s}")
        for v in s:
            _int(v, "every seed", 0)
    return out


_AVAILABILITY = ("None (every client every round), 'all', a callable seed -> mask, a dict seed -> mask, or one "
                 "mask for every seed (a mask: an array or tensor of bool or 0/1, shape (>= rounds, clients))")


def _mask_of(spec, seed: int, T: int, N: int, name: str = "availability") -> Tensor:
    """The (T, N) bool mask of `seed` under the availability `spec` (see `_AVAILABILITY`); ValueError
    naming `name` for anything else, a mask of another shape, or values other than 0/1 (NaN, 0.5, ...)."""
    if spec is None or (isinstance(spec, str) and spec == "all"):
        return torch.ones(T, N, dtype=torch.bool)
    if isinstance(spec, Mapping):
        if seed not in spec:
            raise ValueError(f"{name} has no entry for seed {seed}")
        m, what = spec[seed], f"{name} of seed {seed}"
    elif callable(spec):
        m, what = spec(seed), f"{name}({seed})"
    elif isinstance(spec, (list, tuple)) or hasattr(spec, "__array__"):     # one mask for every seed
        m, what = spec, name
    else:
        raise ValueError(f"{name} must be {_AVAILABILITY}; got {spec!r:.80}")
    a = m.detach().cpu().numpy() if isinstance(m, Tensor) else np.asarray(m)
    if a.ndim != 2 or a.shape[0] < T or a.shape[1] != N:
        raise ValueError(f"{what} has shape {a.shape}; need (>= {T}, {N})")
    a = a[:T]
    if a.dtype != bool:
        ok = (a == 0) | (a == 1) if a.dtype.kind in "iuf" else np.zeros(a.shape, dtype=bool)
        if not ok.all():
            raise ValueError(f"{what} holds {a[~ok].flat[0].item()!r} (dtype {a.dtype}): a mask holds bool or "
                             f"0/1 values only")
        a = a.astype(bool)
    return torch.as_tensor(a)


def _p_row(p, seed: int, N: int, dtype) -> Tensor | None:
    if p is None:
        return None
    if isinstance(p, Mapping) or callable(p):          # the seed's own probabilities (its own split)
        if isinstance(p, Mapping) and seed not in p:
            raise ValueError(f"p has no entry for seed {seed}")
        p = p[seed] if isinstance(p, Mapping) else p(seed)
    v = torch.as_tensor(np.asarray(p, dtype=float), dtype=dtype)
    v = v.expand(N) if v.dim() == 0 else v
    if v.shape != (N,) or not bool(((v > 0) & (v <= 1)).all()):
        raise ValueError(f"p must be a probability in (0, 1] or {N} of them, got shape {tuple(v.shape)}")
    return v


def _key(*parts) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def _digest(x) -> str | None:
    """sha256 of a tensor's (or array's) dtype, shape and bytes; None for None."""
    if x is None:
        return None
    t = (x.detach() if isinstance(x, Tensor) else torch.as_tensor(np.asarray(x))).cpu().contiguous()
    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()[:16]


def _name(f) -> str | None:
    """A callable by name (stable across processes, unlike its repr)."""
    return None if f is None else f"{getattr(f, '__module__', None)}.{getattr(f, '__qualname__', type(f).__qualname__)}"


def _number_or_none(v, name: str, none: str, zero_ok: bool) -> None:
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or math.isnan(v) or v < 0 or (v == 0 and not zero_ok):
        raise ValueError(f"{name} must be None ({none}) or a number {'>=' if zero_ok else '>'} 0, got {v!r}")


def all_hit_or_diverged(hit: Tensor, diverged: Tensor, t: int) -> bool:
    """The default stop rule with a target: every run has met it or diverged."""
    return bool(((hit >= 0) | (diverged >= 0)).all())


class _Probe:
    """What a sampler, or a rule that declares ``wants_probe``, may read of one algorithm's rows at round t's
    global models (before the server step): those models, and the losses, gradients and would-be updates of
    given clients (:class:`flkit.protocols.Probe`)."""

    def __init__(self, task, w, rows: Tensor, t: int, runs: Runs):
        self.task, self.w, self.rows, self.t, self.runs = task, w, rows, t, runs
        self.calls = {"losses": 0, "updates": 0, "gradients": 0}

    def _pairs(self, mask: Tensor) -> Tensor:
        return mask.nonzero()

    def losses(self, mask: Tensor) -> Tensor:
        self.calls["losses"] += 1
        out = torch.full(mask.shape, float("nan"), dtype=torch.float64)
        pr = self._pairs(mask)
        if len(pr):
            glob = torch.stack([self.rows[pr[:, 0]], pr[:, 1]], 1)
            out[pr[:, 0], pr[:, 1]] = self.task.client_losses(self.w, glob, self.runs).double().cpu()
        return out

    def gradients(self, mask: Tensor, at: Tensor | None = None):
        """(pairs (P, 2) of (run within the algorithm, client), gradients (P, d)): each asked client's gradient
        of its local objective over all its data at the current global model, or at the models ``at`` (one row
        per run of the algorithm) when given (``task.client_gradients``)."""
        self.calls["gradients"] += 1
        pr = self._pairs(mask)
        if not len(pr):
            return pr, torch.zeros(0, self.w.shape[1], dtype=self.w.dtype, device=self.w.device)
        glob = torch.stack([self.rows[pr[:, 0]], pr[:, 1]], 1)
        w = self.w
        if at is not None:
            at = torch.as_tensor(at, dtype=w.dtype, device=w.device)
            if at.shape != (len(self.rows), w.shape[1]):
                raise ValueError(f"probe.gradients: at must have shape ({len(self.rows)}, {w.shape[1]}), "
                                 f"got {tuple(at.shape)}")
            w = w.clone()
            w[self.rows] = at
        return pr, self.task.client_gradients(w, glob, self.runs)

    def models(self) -> Tensor:
        """(R, d): the global models of round t of the algorithm's rows (what the server holds)."""
        return self.w[self.rows].clone()

    def updates(self, mask: Tensor):
        self.calls["updates"] += 1
        full = torch.zeros(len(self.runs.seeds), mask.shape[1], dtype=torch.bool)
        full[self.rows] = mask
        pairs, delta = self.task.client_updates(self.w, full, self.t, self.runs)[:2]
        local = torch.full((len(self.runs.seeds),), -1, dtype=torch.long)
        local[self.rows] = torch.arange(len(self.rows))
        return torch.stack([local[pairs[:, 0]], pairs[:, 1]], 1), delta


# ------------------------------------------------------------------------- the rows of the runs axis
class _Layout:
    """The rows of one call's runs axis (algorithm a's rows ``rows_of[a]``, in the order of ``algorithms``, one
    per seed) and what each row uses: its seed and local step size (``runs``), its availability mask (``masks``
    (R, T, N), drawn before training), the p its server knows (``p_all`` (R, N) or None), the sample counts
    (``sizes`` (R, N) or None) and the initial model (``w0`` (R, d) or None); ``local`` and ``owner``: each row's
    index within its algorithm and its algorithm. Bad seeds, masks, p or w0 raise ValueError here, before work."""

    def __init__(self, task: Task, algorithms: Mapping[str, Algorithm], seeds, rounds: int, availability, p, w0):
        self.names = names = list(algorithms)
        self.seed_lists = seed_lists = _seed_lists(algorithms, seeds)
        self.N, self.d, self.dtype = N, d, dtype = task.num_clients, task.dim, getattr(task, "dtype", torch.float32)
        self.rows_of = rows_of = {}
        row_seeds, row_names = [], []
        for a in names:
            rows_of[a] = torch.arange(len(row_seeds), len(row_seeds) + len(seed_lists[a]))
            row_seeds += seed_lists[a]
            row_names += [a] * len(seed_lists[a])
        self.R = R = len(row_seeds)
        same = len({tuple(s) for s in seed_lists.values()}) == 1
        local_lr = torch.tensor([float(algorithms[a].local_lr if algorithms[a].local_lr is not None
                                       else getattr(task, "local_lr", 1.0)) for a in row_names], dtype=dtype)
        self.runs = Runs(row_seeds, local_lr, row_names, len(names) if same else 0,
                         len(seed_lists[names[0]]) if same else 0)
        # participation drawn in advance: one (T, N) mask per seed, shared by the algorithms that use it
        self.shared = shared = {s: _mask_of(availability, s, rounds, N) for s in sorted(set(row_seeds))}
        self.own = own = [None if algorithms[a].availability is None
                          else _mask_of(algorithms[a].availability, s, rounds, N, f"algorithm {a!r} availability")
                          for a, s in zip(row_names, row_seeds)]
        self.masks = torch.stack([shared[s] if m is None else m for m, s in zip(own, row_seeds)])  # (R, T, N)
        self.p_rows = [_p_row(algorithms[a].p if algorithms[a].p is not None else p, s, N, dtype)
                       for a, s in zip(row_names, row_seeds)]
        self.p_all = torch.stack(self.p_rows) if all(v is not None for v in self.p_rows) else None
        sizes = getattr(task, "sizes", None)
        self.sizes = None if sizes is None else torch.as_tensor(np.asarray(sizes), dtype=torch.float64).expand(R, N)
        if w0 is not None:
            w0 = torch.as_tensor(w0, dtype=dtype).clone()
            w0 = w0.expand(R, d).clone() if w0.dim() == 1 else w0
            if w0.shape != (R, d):
                raise ValueError(f"w0 must have shape ({d},) or ({R}, {d}), got {tuple(w0.shape)}")
        self.w0 = w0
        self.local = torch.empty(R, dtype=torch.long)        # each row's index within its algorithm
        self.owner = torch.empty(R, dtype=torch.long)        # each row's algorithm
        for j, a in enumerate(names):
            self.local[rows_of[a]] = torch.arange(len(rows_of[a]))
            self.owner[rows_of[a]] = j

    def key_parts(self, task: Task, algorithms: Mapping[str, Algorithm], **settings) -> dict:
        """What determines the numbers, for the checkpoint's key (the order of these parts is part of the key):
        availability and p by digests of the values used (their reprs may elide or hold addresses), so each is
        left out of the algorithms' part; `settings` are run's keyword arguments, in the key's order."""
        shared_d = {s: _digest(m) for s, m in self.shared.items()}
        return dict(task=(task.__class__.__name__, getattr(task, "key", None)),
                    algorithms=[(a, [(f.name, repr(getattr(algorithms[a], f.name))) for f in fields(Algorithm)
                                     if f.name not in ("availability", "p", "label")]) for a in self.names],
                    seeds=self.seed_lists, **settings,
                    availability=[shared_d[s] if m is None else _digest(m) for m, s in zip(self.own, self.runs.seeds)],
                    p=[_digest(v) for v in self.p_rows], w0=_digest(self.w0), sizes=_digest(self.sizes))

    def start(self, task: Task, algorithms: Mapping[str, Algorithm]) -> tuple[Tensor, dict, dict]:
        """Round 0's models (w0, else ``task.init_params`` from each run's seed's "init" stream, else zeros) and
        the rules' and samplers' initial states."""
        if self.w0 is None and hasattr(task, "init_params"):
            w = task.init_params(self.runs.seeds).to(self.dtype)
        else:
            w = torch.zeros(self.R, self.d, dtype=self.dtype) if self.w0 is None else self.w0
        agg = {a: algorithms[a].aggregator.init(len(self.rows_of[a]), self.N, self.d, self.dtype, w.device)
               for a in self.names}
        smp = {}
        for a in self.names:
            rows, sampler = self.rows_of[a], algorithms[a].sampler
            sizes = self.sizes[rows] if self.sizes is not None else torch.ones(len(rows), self.N, dtype=torch.float64)
            smp[a] = sampler.init(len(rows), self.N, sizes, self.seed_lists[a]) if sampler is not None else None
        return w, agg, smp


# ------------------------------------------------------------------------- metrics, targets, divergence
class _Recorder:
    """Each run's outcomes and the recorded rows. hit (R,): the first round meeting the target; diverged (R,):
    the round of divergence (-1: never); evals (R,): client updates computed until the hit; first (R,): the
    divergence reference (round 0's |first metric|, or diverge_ref), kept across a resume; store: the rows
    (round, {name: (R,) array}) of the metrics (rounds 0, every, ..., rounds, and the round the loop stops) and of
    ``track`` (rounds 0, track_every, ..., rounds)."""
    FIELDS = ("hit", "diverged", "evals", "first", "store")     # what a checkpoint keeps, under these names

    def __init__(self, task: Task, rounds: int, every: int, target, stop_early: bool, stop_when, diverge_factor,
                 diverge_ref, track, track_every: int):
        self.task, self.target, self.factor, self.ref, self.track = task, target, diverge_factor, diverge_ref, track
        self.stop = (stop_when or all_hit_or_diverged) if target is not None and stop_early else None
        self.rec = set(range(0, rounds + 1, every)) | {rounds}
        self.rec_track = set(range(0, rounds + 1, track_every)) | {rounds}

    def start(self, w: Tensor) -> None:
        """Round 0: the divergence reference and the first rows."""
        R = w.shape[0]
        self.hit = torch.full((R,), -1, dtype=torch.long)
        self.diverged = torch.full((R,), -1, dtype=torch.long)
        self.evals = torch.zeros(R, dtype=torch.float64)
        m0 = self.task.metrics(w)
        self.first = next(iter(m0.values())).detach().double().abs().cpu().clone()
        if self.ref is not None:
            self.first = torch.full_like(self.first, float(self.ref))
        self._check(m0, 0)
        self.store = [(0, self._record(m0))]
        if self.track is not None:
            self.store.append((0, self._record(self.track(w))))

    def restore(self, state: dict) -> None:
        for k in self.FIELDS:
            setattr(self, k, state[k])

    def state(self) -> dict:
        return {k: getattr(self, k) for k in self.FIELDS}

    def count(self, counts: Tensor, alive: Tensor) -> None:
        """The round's client updates, for the runs still short of their target."""
        self.evals += (counts.sum(1) * ((self.hit < 0) & alive)).double()

    def after(self, t: int, w: Tensor) -> bool:
        """After round t (the models w): metrics when due (every round with a target), hits and divergence,
        the rows due; True when the stop rule says the loop ends here."""
        done = False
        if self.target is not None or t in self.rec:
            met = self.task.metrics(w)
            self._check(met, t)
            done = self.stop is not None and self.stop(self.hit, self.diverged, t)
            if t in self.rec or done:
                self.store.append((t, self._record(met)))
        if self.track is not None and (t in self.rec_track or done):
            self.store.append((t, self._record(self.track(w))))
        return done

    def _check(self, met: dict, t: int) -> None:
        hit, diverged = self.hit, self.diverged
        if self.factor is not None:
            x = next(iter(met.values())).detach().double().cpu()
            bad = (~torch.isfinite(x) | (x.abs() > self.factor * self.first)) & (diverged < 0)
            diverged[bad] = t
        if self.target is not None:
            y = met[self.target[0]].detach().double().cpu()
            newly = (y <= self.target[1]) & (hit < 0) & (diverged < 0)
            hit[newly] = t

    def _record(self, met: dict) -> dict:
        out = {}
        for k, v in met.items():
            vv = v.detach().double().cpu().clone()
            vv[self.diverged >= 0] = math.inf
            out[k] = vv.numpy()
        return out

    def result(self, lay: _Layout, wall: float, done: int, start: int) -> Result:
        rounds = np.array(sorted({t for t, _ in self.store}))
        pos = {t: k for k, t in enumerate(rounds)}
        keys = list(dict.fromkeys(k for _, row in self.store for k in row))
        values = {}
        for a in lay.names:
            r = lay.rows_of[a].numpy()
            values[a] = {}
            for k in keys:
                arr = np.full((len(rounds), len(r)), np.nan)
                for t, row in self.store:
                    if k in row:
                        arr[pos[t]] = row[k][r]
                values[a][k] = arr
        pick = lambda v, a: v[lay.rows_of[a]].numpy()  # noqa: E731
        return Result(rounds=rounds, values=values, hit={a: pick(self.hit, a) for a in lay.names},
                      diverged={a: pick(self.diverged, a) for a in lay.names},
                      evals={a: pick(self.evals, a) for a in lay.names},
                      seeds={a: np.asarray(lay.seed_lists[a]) for a in lay.names}, wall_s=wall, rounds_done=done,
                      resumed_from=start)


# ------------------------------------------------------------------------- the checkpoint of one call
class _Checkpoint:
    """A call's state file (path None: none kept): keyed by what determines the numbers, resumed from when the
    key matches (RuntimeError naming the differing parts when it does not), saved every ``every_s`` seconds and
    before the deadline (then :class:`Deadline` is raised), removed when the run ends. The saved dict holds
    key, key_parts, w, agg, smp, t, hit, diverged, evals, first, store, wall, task (older checkpoints load)."""

    def __init__(self, path, every_s: float, deadline: float | None):
        self.path = Path(path) if path is not None else None
        if self.path is not None and self.path.exists() and not self.path.is_file():
            raise ValueError(f"checkpoint {self.path} is not a file (a folder?): give the path of a file to keep "
                             f"the state in")
        self.every_s, self.deadline, self.last = every_s, deadline, time.time()

    def load(self, parts: dict) -> dict | None:
        """Key this checkpoint by `parts`; the saved state when the file exists, else None. A killed writer's
        temporary files are removed first."""
        if self.path is not None:
            remove_stale_temp(self.path.parent, f".{glob.escape(self.path.name)}.*.tmp")
        self.key, self.key_parts = _key(parts), {k: _key(v) for k, v in parts.items()}
        if self.path is None or not self.path.is_file():
            return None
        state = load_checkpoint(self.path)
        if state["key"] != self.key:
            differ = sorted(k for k, v in state.get("key_parts", {}).items() if self.key_parts.get(k) != v)
            raise RuntimeError(f"checkpoint {self.path} belongs to another run (key {state['key']} != {self.key}"
                               f"{'; differs in ' + ', '.join(differ) if differ else ''}); remove it")
        return state

    def save(self, state: dict) -> None:
        if self.path is not None:
            save_checkpoint(dict(key=self.key, key_parts=self.key_parts, **state), self.path)

    def tick(self, t: int, rounds: int, per_round: float, state: Callable[[], dict], bar=None) -> None:
        """After round t: save and raise :class:`Deadline` when two more rounds and 10 s might not fit before
        the deadline; else save when ``every_s`` seconds passed since the last save (or the start)."""
        now = time.time()
        if self.deadline is not None and t < rounds and now + 2 * per_round + 10 > self.deadline:
            self.save(state())
            if bar is not None:
                bar.close()
            raise Deadline(f"stopped at round {t} of {rounds}; resume with the same call (checkpoint {self.path})")
        if self.path is not None and now - self.last > self.every_s:
            self.save(state())
            self.last = now

    def remove(self) -> None:
        if self.path is not None:
            remove_checkpoint(self.path)


# ------------------------------------------------------------------------- one round's steps
def _select(task: Task, algorithms: Mapping[str, Algorithm], lay: _Layout, smp: dict, w: Tensor, t: int,
            alive: Tensor) -> Tensor:
    """Steps 1-2: (R, N) draw counts, the available clients of round t, each algorithm's sampler picking among
    them (it may probe the current models); zero for diverged runs."""
    counts = lay.masks[:, t].to(torch.long) * alive.unsqueeze(1)
    for a in lay.names:
        sampler = algorithms[a].sampler
        if sampler is not None:
            rows = lay.rows_of[a]
            c, smp[a] = sampler.select(smp[a], t, counts[rows] > 0, _Probe(task, w, rows, t, lay.runs))
            counts[rows] = c.to(torch.long) * alive[rows].unsqueeze(1)
    return counts


def _server_step(task: Task, algorithms: Mapping[str, Algorithm], lay: _Layout, agg: dict, smp: dict, w: Tensor,
                 t: int, counts: Tensor, out: tuple) -> Tensor:
    """Step 4: each algorithm's rule turns its rows' updates (``out`` of ``task.client_updates``) into G (a rule
    with ``wants_probe`` also reads a probe of round t's models w) and the server steps x - lr G (or takes G as
    the model, ``returns_model``); samplers with ``observe`` see the updates. Returns the new models."""
    pairs, delta = out[0], out[1].to(lay.dtype)
    local_models = out[2] if len(out) > 2 else None
    pair_counts = counts[pairs[:, 0], pairs[:, 1]].to(lay.dtype)
    owner = lay.owner[pairs[:, 0]]
    new = w.clone()
    for j, a in enumerate(lay.names):
        rows, alg = lay.rows_of[a], algorithms[a]
        sel = (owner == j).nonzero().squeeze(1)
        lp = torch.stack([lay.local[pairs[sel, 0]], pairs[sel, 1]], 1)
        upd = Updates(lp, delta[sel], pair_counts[sel], len(rows), lay.N,
                      lay.p_all[rows] if lay.p_all is not None else None,
                      lay.sizes[rows] if lay.sizes is not None else None,
                      None if local_models is None else local_models[sel])
        probe = {"probe": _Probe(task, w, rows, t, lay.runs)} if getattr(alg.aggregator, "wants_probe", False) else {}
        G, agg[a] = alg.aggregator.apply(agg[a], upd, **probe)
        if getattr(alg.aggregator, "returns_model", False):  # the rule gives the new model itself (Relay)
            got = upd.mask.any(1).cpu()
            new[rows[got]] = G[got.to(G.device)]
        else:
            new[rows] = new[rows] - alg.lr * G
        if alg.sampler is not None and hasattr(alg.sampler, "observe"):
            smp[a] = alg.sampler.observe(smp[a], t, lp, delta[sel])
    return new


def _bar(progress: bool, rounds: int, t0: int, desc: str | None):
    if not progress:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=rounds, initial=t0, desc=desc, leave=False)


# -------------------------------------------------------------------------------------------- loop
def run(task: Task, algorithms: Mapping[str, Algorithm], *, seeds, rounds: int, availability=None, p=None,
        w0=None, every: int = 1, target: tuple[str, float] | None = None, stop_early: bool = True,
        stop_when: Callable | None = None, diverge_factor: float = 1e6, diverge_ref: float | None = None,
        progress: bool = False, desc: str | None = None, checkpoint: str | os.PathLike | None = None,
        checkpoint_every_s: float = 300.0, deadline: float | None = None, track: Callable | None = None,
        track_every: int = 1) -> Result:
    """Run every algorithm for every seed for `rounds` rounds (module docstring). Returns a :class:`Result`.

    seeds: a list (the same for every algorithm) or a dict name -> list. availability: None (everyone, every
    round), "all", a callable seed -> (T, N) mask, a dict seed -> (T, N) mask, or one mask for every seed (a mask:
    array or tensor of bool or 0/1 with >= T rows; anything else, NaN or 0.5 in a mask included, raises
    ValueError). p: the participation probabilities the server knows (float, (N,), or per seed: dict seed -> (N,)
    or callable seed -> (N,)); an Algorithm's own ``p`` wins. w0: the initial model, (d,) or (R, d) in row order
    (default: ``task.init_params(seeds)`` when the task has it, else zeros). every: metrics are recorded at rounds
    0, every, 2 every, ..., rounds. target: (metric, eps): the first round with metric <= eps is each run's hit
    round; with ``stop_early`` the loop ends when ``stop_when(hit (R,), diverged (R,), t)`` is true (default:
    every run hit or diverged).

    checkpoint: a file (not a folder); the state is saved there every ``checkpoint_every_s`` seconds and before
    the ``deadline`` (a ``time.time()`` value; the loop stops when two more rounds and 10 s might not fit, and
    raises :class:`Deadline`), and a later call with the same arguments resumes from it to the same numbers; the
    file is removed when the run ends. A state over :data:`PART_BYTES` (15 MiB) is written in parts of at most
    that size (:func:`save_checkpoint`), so every file stays under the 16 MiB a GPU window brings back and a
    repository commits. The checkpoint's key covers the task's class, the algorithms (aggregator, sampler, step
    sizes), the seeds, digests of the availability masks, p, w0 and the task's sizes actually used, rounds,
    every, target, stop_early, stop_when and track (by name), track_every and the divergence settings; a call
    that differs in any of them raises RuntimeError rather than resume another run's trajectory (the task's data
    and callables' bodies are not fingerprinted). It is written through a temporary file
    ``.<name>.<pid>.<hex>.tmp`` beside it (removed on failure; a killed writer's is removed by the next run with
    this checkpoint, or by a results-store save in that folder, once a minute old).

    diverge_factor: a number > 0, or None to turn divergence marking off; diverge_ref: None (each run's initial
    |metric|, kept across a resume) or a number >= 0. track: a cheap ``track(w) -> {name: (R,)}`` recorded at
    rounds 0, track_every, ..., rounds (e.g. a CVaR threshold every round while the metrics, which evaluate the
    model on a test set, are recorded every ``every`` rounds); in ``Result.values`` beside the metrics, NaN at
    rounds where it was not recorded.
    """
    if not algorithms:
        raise ValueError("algorithms is empty: give at least one Algorithm")
    rounds, every = _int(rounds, "rounds", 1), _int(every, "every", 1)
    track_every = _int(track_every, "track_every", 1)
    _number_or_none(diverge_factor, "diverge_factor", "no divergence marking", zero_ok=False)
    _number_or_none(diverge_ref, "diverge_ref", "each run's initial |metric|", zero_ok=True)
    ckpt = _Checkpoint(checkpoint, checkpoint_every_s, deadline)
    lay = _Layout(task, algorithms, seeds, rounds, availability, p, w0)
    rec = _Recorder(task, rounds, every, target, stop_early, stop_when, diverge_factor, diverge_ref, track, track_every)
    saved = ckpt.load(lay.key_parts(task, algorithms, rounds=rounds, every=every, target=target, stop_early=stop_early,
                                    stop_when=_name(stop_when), diverge=(diverge_factor, diverge_ref),
                                    track=_name(track), track_every=track_every))
    if saved is not None:       # resume: models, rules' and samplers' states, outcomes and rows as they were saved
        w, agg, smp, t, wall0 = saved["w"], saved["agg"], saved["smp"], saved["t"], saved["wall"]
        rec.restore(saved)
        if saved.get("task") is not None:
            task.load_state_dict(saved["task"])
    else:
        (w, agg, smp), t, wall0 = lay.start(task, algorithms), 0, 0.0
        rec.start(w)                                                # round 0's metrics, divergence reference, rows
    start, tic = t, time.perf_counter()
    ckpt.last = time.time()                                         # the periodic saves count from here

    def state() -> dict:                                            # the checkpoint's fields, as ever
        return dict(w=w, agg=agg, smp=smp, t=t, **rec.state(), wall=wall0 + time.perf_counter() - tic,
                    task=task.state_dict() if hasattr(task, "state_dict") else None)

    bar = _bar(progress, rounds, t, desc)
    while t < rounds:
        alive = rec.diverged < 0
        counts = _select(task, algorithms, lay, smp, w, t, alive)              # 1-2. availability, selection
        rec.count(counts, alive)
        out = task.client_updates(w, counts > 0, t, lay.runs)                 # 3. local training
        w = _server_step(task, algorithms, lay, agg, smp, w, t, counts, out)   # 4. aggregation, server step
        t += 1
        if rec.after(t, w):                                                    # 5. metrics, targets, divergence
            break
        if bar is not None:
            bar.update(1)
        ckpt.tick(t, rounds, (time.perf_counter() - tic) / max(1, t - start), state, bar)
    if bar is not None:
        bar.close()
    ckpt.remove()
    res = rec.result(lay, wall0 + time.perf_counter() - tic, t - start, start)
    res.final_w, res.final = w, agg
    return res
