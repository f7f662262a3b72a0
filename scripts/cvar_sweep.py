"""Sweep of the Fed-CVaR-Avg chapter (document 003): compute and store the runs behind its figures.

    python scripts/cvar_sweep.py mnist  --profile paper --device cuda --max-minutes 9
    python scripts/cvar_sweep.py fmnist --profile paper --device cuda --max-minutes 9 --estimate
    python scripts/cvar_sweep.py synthetic_2d --profile paper --device cpu

The RAM of Figs. 3-4 and Table 1 is the authors' 30-user vector (setting ram="authors", the default);
--set ram=random-draw selects the sensitivity variant (27 of the 30 probabilities drawn at random).

Runs are stored through flkit.results under <out>/<experiment>/ (default out: results/cvar, the folder
the notebooks read; for --profile smoke results/tmp/cvar, git-ignored scratch; $FLKIT_RESULTS replaces
results/ in both, as for the notebooks), one CSV + JSON per run, and skipped when already there. The
runs of a batch share one vectorized computation; a batch stopped by --max-minutes is checkpointed under
<out>/checkpoints/ and continues from there on the next call, so a long sweep can be split into several
shorter commands.
Exit status: 0 when every run of the experiment is stored, 75 when stopped early (call again), 2 for bad
input (an option, a --set item, a setting outside its range, an --out or --pack that cannot be written),
reported as one line before any computation.

--estimate times a few rounds of the first pending batch (nothing is stored) and prints the projected
time of the whole sweep on this device.

On the lent GPU machine (files come back only from $OUT: at most 8 files of 16 MiB), work outside $OUT
and pack the results into $OUT:
    mkdir -p /tmp/cvar && cp -r results/cvar/. /tmp/cvar/ 2>/dev/null;
    python3 scripts/cvar_sweep.py mnist --profile paper --device cuda --max-minutes 8.5 \
        --out /tmp/cvar --pack $OUT/cvar.tar.gz
then, here: tar -xzf cvar.tar.gz -C results (a pack over 15 MiB comes as cvar.tar.gz.part00, part01, ...:
cat them into cvar.tar.gz first). Start with --estimate to plan. The datasets must be there too: carry
a git-ignored folder holding mnist/ and fashion-mnist/ with the eight .gz files of /work/shared/data
(about 41 MiB) and run `python3 -m flkit.datasets import <folder>` first.

Resuming the paper Table 1 there means carrying its checkpoint (28 MB: 65 LeNets) beside Fashion-MNIST
(30 MB, torchvision layout, FLKIT_DATA pointing at it) and the working tree (12 MB): over the 64 MiB a
call may carry, so leave the tracked results/ and book/ folders (not needed there) out of the tree for
that call. On CUDA the LeNet's local steps use flkit.fused's Triton kernels (flkit.fastsgd.FastSGD backend
"auto"); the manifests record which path computed each run ("local_steps").
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from flkit.papers import cvar  # noqa: E402
from flkit.results import Store  # noqa: E402
from flkit.seeding import resolve_device  # noqa: E402

EXIT_UNFINISHED = 75


def _positive(kind):
    """An argparse type: a number of `kind` (int or float), finite and > 0."""
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or not math.isfinite(v) or v <= 0:
            what = "an integer >= 1" if kind is int else "a finite number > 0"
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return v
    return parse


def _overrides(items: list[str]) -> dict:
    """The --set items as {name: value}; ValueError for an item that is not NAME=VALUE with a YAML value
    other than null (settings() would take null for "the profile's value" and ignore it)."""
    import yaml
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            v = yaml.safe_load(value) if sep and name.strip() else None
        except yaml.YAMLError:
            v = None
        if v is None:
            raise ValueError(f"--set {item!r}: expected NAME=VALUE with a YAML value that is not null")
        out[name.strip()] = v
    return out


def _writable(folder: Path) -> str | None:
    """None when `folder` can be created and a file written there (probe written and removed), else why not."""
    probe = folder / f".cvar_sweep-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        return e.strerror or str(e)
    return None


def _parse(argv=None):
    """The arguments, with .settings and .out (resolved) added (.device checked for its form; main resolves it). Bad input (options, --set, settings,
    device, an unwritable --out or --pack) exits here with one line, status 2, before any computation."""
    ap = argparse.ArgumentParser(prog=Path(__file__).name, description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment", choices=sorted(cvar.PAPER))
    ap.add_argument("--profile", default="paper", choices=["smoke", "reduced", "paper"])
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda[:i]")
    ap.add_argument("--max-minutes", type=_positive(float), default=None,
                    help="stop cleanly (checkpoint) before this many minutes have passed")
    ap.add_argument("--out", type=Path, default=None,
                    help="results folder (runs go to <out>/<experiment>/); default results/cvar, "
                         "results/tmp/cvar (git-ignored) for --profile smoke")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="override the profile's seeds")
    ap.add_argument("--rounds", type=_positive(int), default=None, help="override the profile's rounds")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override any setting of the profile (value read as YAML), e.g. --set 'panels=[a]'")
    ap.add_argument("--batch-size", type=_positive(int), default=None,
                    help="most runs per vectorized batch (default: all runs of a group)")
    ap.add_argument("--estimate", action="store_true", help="time a few rounds and project; store nothing")
    ap.add_argument("--estimate-rounds", type=_positive(int), default=3)
    ap.add_argument("--pack", type=Path, default=None,
                    help="write <out>/<experiment> and <out>/checkpoints into this .tar.gz at the end")
    ap.add_argument("--threads", type=_positive(int), default=None, help="torch CPU threads")
    args = ap.parse_args(argv)
    try:
        extra = _overrides(args.set)
        extra.update({k: v for k, v in (("seeds", args.seeds), ("rounds", args.rounds)) if v is not None})
        args.settings = cvar.settings(args.experiment, args.profile, **extra)
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", args.device):
            raise ValueError(f"--device must be auto, cpu or cuda[:i], got {args.device!r}")
    except (ValueError, RuntimeError) as e:  # RuntimeError: torch's for a malformed "cuda:..."
        ap.error(" ".join(str(e).split()))  # one line
    if args.out is None:  # the folder the notebooks read (store_for's), scratch for smoke
        args.out = cvar.store_for(args.settings).root.parent
    if not args.estimate:  # --estimate writes nothing
        for option, folder in (("--out", args.out), ("--pack", args.pack and args.pack.parent)):
            why = folder is not None and _writable(folder)
            if why:
                ap.error(f"{option} {folder}: cannot write there ({why})")
    return args


def estimate(s: dict, out: Path, device, batch_size, rounds: int) -> None:
    """Time `rounds` rounds of the first pending batch; project the whole sweep from the number of
    local steps every batch will take (computed exactly from the splits and the RAM draws)."""
    store = cvar.store_for(s, out)
    configs = [c for c in cvar.run_configs(s) if not store.done(c)]
    if not configs:
        print("nothing to compute: every run is stored")
        return
    groups: dict[str, list] = {}
    for c in configs:
        groups.setdefault(repr(sorted(cvar.batch_group(c).items())), []).append(c)
    size = lambda g: batch_size or len(g)  # noqa: E731
    batches = [g[i:i + size(g)] for g in groups.values() for i in range(0, len(g), size(g))]
    first = batches[0]
    quiet = lambda _: None  # noqa: E731
    cvar.run_batch([dict(c, rounds=2, eval_every=2) for c in first], device, progress=False, log=quiet)  # warm-up
    trial = [dict(c, rounds=rounds, eval_every=rounds) for c in first]
    t0 = time.time()
    cvar.run_batch(trial, device, progress=False, log=print)
    wall = time.time() - t0
    per_step = wall / cvar.planned_steps(first, rounds).sum()
    steps = [int(cvar.planned_steps(b).sum()) for b in batches]
    total = per_step * sum(steps)
    print(f"estimate: {len(configs)} runs in {len(batches)} batch(es) of up to {len(first)} runs; "
          f"{per_step * 1e3:.2f} ms per local step of a batch of {len(first)} runs (trial of {rounds} rounds, "
          f"evaluation included); local steps per batch: {steps}; projected time: {total / 60:.1f} min "
          f"({total / 3600:.2f} h) on {device}")


PART_BYTES = 15 * 2**20  # files come back from the GPU machine only up to 16 MiB each


def pack(out: Path, experiment: str, target: Path) -> None:
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
        print(f"packed {size / 2**20:.1f} MiB into {math.ceil(size / PART_BYTES)} parts {target.name}.partNN "
              f"(cat {target.name}.part* > {target.name})")
    else:
        print(f"packed {target} ({size / 2**20:.1f} MiB)")


def main(argv=None) -> int:
    t_start = time.time()  # --max-minutes counts from here
    args = _parse(argv)
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    s = args.settings
    try:  # a well-formed device that this machine lacks (cuda without CUDA): one line, before any work
        device = resolve_device(args.device)
    except (ValueError, RuntimeError) as e:
        print(f"{Path(__file__).name}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"{args.experiment} / {args.profile} on {device}" + (f"  [{s['label']}]" if s["label"] else ""))
    if args.estimate:
        estimate(s, args.out, device, args.batch_size, args.estimate_rounds)
        return 0
    deadline = t_start + 60 * args.max_minutes if args.max_minutes else None
    code = 0
    try:
        cvar.sweep(s, root=args.out, device=device, deadline=deadline, batch_size=args.batch_size)
    except cvar.Deadline as e:
        print(f"STOPPED before the deadline: {e}. Call again to continue.")
        code = EXIT_UNFINISHED
    store = cvar.store_for(s, args.out)
    configs = cvar.run_configs(s)
    done = sum(store.done(c) for c in configs)
    print(f"{done} of {len(configs)} runs stored in {store.root} ({(time.time() - t_start) / 60:.1f} min)")
    if args.pack:
        pack(args.out, args.experiment, args.pack)
    return code if done < len(configs) else 0


if __name__ == "__main__":
    sys.exit(main())
