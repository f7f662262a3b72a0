"""The chapter's sweep: ``python -m flkit.sweep cvar <experiment>`` computes and stores the runs behind its figures::

    python -m flkit.sweep cvar mnist --profile paper --device cuda --max-minutes 9
    python -m flkit.sweep cvar fmnist --profile paper --device cuda --max-minutes 9 --estimate
    python -m flkit.sweep cvar synthetic_2d --profile paper --device cpu

The RAM of Figs. 3-4 and Table 1 is the authors' 30-user vector (setting ram="authors", the default);
--set ram=random-draw selects the sensitivity variant (27 of the 30 probabilities drawn at random).

Runs are stored under <out>/<experiment>/ (default out: results/cvar, the folder the pages read; for --profile
smoke results/tmp/cvar, git-ignored scratch; $FLKIT_RESULTS replaces results/ in both), one CSV + JSON per run,
and skipped when already there. The runs of a batch (:func:`flkit.papers.cvar.batch_group`, at most
--batch-size runs) share one vectorized computation; a batch stopped by --max-minutes is checkpointed under
<out>/checkpoints/ (``batch-<key>.pt``) and continues from there on the next call. An --out or --pack that
cannot be written is refused before any computation.

--estimate times a few rounds of the first pending batch (nothing is stored) and prints the projected time of
the whole sweep on this device, from the number of local steps every batch will take
(:func:`~flkit.papers.cvar.runs.planned_steps`).

On the lent GPU machine (files come back only from $OUT: at most 8 files of 16 MiB), work outside $OUT and pack
the results into $OUT::

    mkdir -p "$TMPDIR/cvar" && cp -r results/cvar/. "$TMPDIR/cvar/" 2>/dev/null;
    python3 -m flkit.sweep cvar mnist --profile paper --device cuda --max-minutes 8.5 \\
        --out "$TMPDIR/cvar" --pack $OUT/cvar.tar.gz

then, here: ``tar -xzf cvar.tar.gz -C results`` (a pack over 15 MiB comes as cvar.tar.gz.part00, part01, ...: cat
them into cvar.tar.gz first). Start with --estimate to plan. The datasets must be there too: carry a git-ignored
folder holding mnist/ and fashion-mnist/ with the eight .gz files (about 41 MiB) and run
``python3 -m flkit.datasets import <folder>`` first.

Resuming the paper Table 1 there means carrying its checkpoint (28 MB: 65 LeNets) beside Fashion-MNIST (30 MB,
torchvision layout, FLKIT_DATA pointing at it) and the working tree (12 MB): over the 64 MiB a call may carry,
so leave the tracked results/ and book/ folders (not needed there) out of the tree for that call. On CUDA the
LeNet's local steps use flkit.fused's Triton kernels (flkit.fastsgd.FastSGD backend "auto"); the manifests record
which path computed each run ("local_steps").
"""
from __future__ import annotations

import math
import os
import tarfile
import time
from pathlib import Path

import torch

from flkit.papers.cvar.common import PAPER, batch_group, run_configs, settings
from flkit.papers.cvar.runs import Deadline, planned_steps, run_batch, store_for, sweep
from flkit.papers.settings import positive_int

__all__ = ["SWEEP", "estimate", "pack", "PART_BYTES"]

PART_BYTES = 15 * 2**20  # files come back from the GPU machine only up to 16 MiB each


def _writable(folder: Path) -> str | None:
    """None when `folder` can be created and a file written there (probe written and removed), else why not."""
    probe = folder / f".cvar-sweep-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        return e.strerror or str(e)
    return None


def estimate(s: dict, out: Path, device, batch_size, rounds: int, log=print) -> None:
    """Time `rounds` rounds of the first pending batch; project the whole sweep from the number of
    local steps every batch will take (computed exactly from the splits and the RAM draws)."""
    store = store_for(s, out)
    configs = [c for c in run_configs(s) if not store.done(c)]
    if not configs:
        log("nothing to compute: every run is stored")
        return
    groups: dict[str, list] = {}
    for c in configs:
        groups.setdefault(repr(sorted(batch_group(c).items())), []).append(c)
    size = lambda g: batch_size or len(g)  # noqa: E731
    batches = [g[i:i + size(g)] for g in groups.values() for i in range(0, len(g), size(g))]
    first = batches[0]
    quiet = lambda _: None  # noqa: E731
    run_batch([dict(c, rounds=2, eval_every=2) for c in first], device, progress=False, log=quiet)  # warm-up
    trial = [dict(c, rounds=rounds, eval_every=rounds) for c in first]
    t0 = time.time()
    run_batch(trial, device, progress=False, log=log)
    wall = time.time() - t0
    per_step = wall / planned_steps(first, rounds).sum()
    steps = [int(planned_steps(b).sum()) for b in batches]
    total = per_step * sum(steps)
    log(f"estimate: {len(configs)} runs in {len(batches)} batch(es) of up to {len(first)} runs; "
        f"{per_step * 1e3:.2f} ms per local step of a batch of {len(first)} runs (trial of {rounds} rounds, "
        f"evaluation included); local steps per batch: {steps}; projected time: {total / 60:.1f} min "
        f"({total / 3600:.2f} h) on {device}")


def pack(out: Path, experiment: str, target: Path, log=print) -> None:
    """<out>/<experiment> and <out>/checkpoints as cvar/... in one .tar.gz; split into target.partNN
    pieces of at most 15 MiB when larger (reassemble: cat target.part* > target)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w:gz") as tar:
        for sub in (experiment, "checkpoints"):
            if (out / sub).is_dir():
                tar.add(out / sub, arcname=f"cvar/{sub}")
    size = target.stat().st_size
    if size > PART_BYTES:
        data = target.read_bytes()
        target.unlink()
        for i in range(0, size, PART_BYTES):
            target.with_name(f"{target.name}.part{i // PART_BYTES:02d}").write_bytes(data[i:i + PART_BYTES])
        log(f"packed {size / 2**20:.1f} MiB into {math.ceil(size / PART_BYTES)} parts {target.name}.partNN "
            f"(cat {target.name}.part* > {target.name})")
    else:
        log(f"packed {target} ({size / 2**20:.1f} MiB)")


class _Sweep:
    """``python -m flkit.sweep cvar``: the runs of one experiment (flkit.sweep.Sweep)."""
    name = "cvar"
    summary = "Fed-CVaR-Avg (document 003): the runs of Fig. 2 (synthetic_2d), Figs. 3-4 (mnist), Table 1 (fmnist)"
    device = "auto"
    threads = None
    stopped = (Deadline,)

    def arguments(self, ap) -> None:
        ap.add_argument("experiment", choices=sorted(PAPER))
        ap.add_argument("--profile", default="paper", choices=["smoke", "reduced", "paper"])
        ap.add_argument("--out", type=Path, default=None,
                        help="results folder (runs go to <out>/<experiment>/); default results/cvar, "
                             "results/tmp/cvar (git-ignored) for --profile smoke")
        ap.add_argument("--batch-size", type=int, default=None,
                        help="most runs per vectorized batch (default: all runs of a group)")
        ap.add_argument("--pack", type=Path, default=None,
                        help="write <out>/<experiment> and <out>/checkpoints into this .tar.gz at the end")

    def plan(self, args, overrides: dict) -> dict:
        if args.batch_size is not None:
            positive_int(args.batch_size, "--batch-size")
        s = settings(args.experiment, args.profile, **overrides)
        out = args.out if args.out is not None else store_for(s).root.parent   # the pages' folder; scratch for smoke
        if not args.estimate:  # --estimate writes nothing
            for option, folder in (("--out", out), ("--pack", args.pack and args.pack.parent)):
                why = folder is not None and _writable(folder)
                if why:
                    raise ValueError(f"{option} {folder}: cannot write there ({why})")
        return dict(settings=s, out=out, batch_size=args.batch_size, pack=args.pack)

    def describe(self, p: dict) -> str:
        s = p["settings"]
        return f"{s['experiment']} / {s['profile']}" + (f"  [{s['label']}]" if s["label"] else "")

    def estimate(self, p: dict, device, rounds: int, threads: int | None, out=print) -> None:
        if threads:
            torch.set_num_threads(threads)
        estimate(p["settings"], p["out"], device, p["batch_size"], rounds, log=out)

    def run(self, p: dict, device, deadline: float | None, threads: int | None, out=print) -> None:
        if threads:
            torch.set_num_threads(threads)
        try:
            sweep(p["settings"], root=p["out"], device=device, deadline=deadline, batch_size=p["batch_size"])
        finally:
            if p["pack"]:
                pack(p["out"], p["settings"]["experiment"], p["pack"], log=out)

    def progress(self, p: dict) -> tuple[int, int, str]:
        store = store_for(p["settings"], p["out"])
        configs = run_configs(p["settings"])
        return sum(store.done(c) for c in configs), len(configs), str(store.root)


SWEEP = _Sweep()
