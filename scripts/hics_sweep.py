"""Run the stored jobs of the HiCS-FL training pages (flkit.papers.hics.fmnist) outside the
notebook, then re-execute the page to read them.

    python scripts/hics_sweep.py reduced --part 0 --of 2 &      # CPU: two processes, one thread each
    python scripts/hics_sweep.py reduced --part 1 --of 2
    python scripts/hics_sweep.py paper --device cuda            # the document's CNN (a GPU)
    python scripts/hics_sweep.py paper-cifar10 --device cuda    # CIFAR-10 (needs the CIFAR-10 files)
    python scripts/hics_sweep.py paper-cifar100 --device cuda   # CIFAR-100 (needs the CIFAR-100 files)

Each process runs every ``of``-th job (DivFL's first, the longest: the Table 1 setting's long runs, then
the others) into the book's store (``results/hics`` for Fashion-MNIST, ``results/hics_cifar10``,
``results/hics_cifar100``; under ``results/tmp/`` for the smoke profiles), one CSV + JSON per job, skipping
the stored ones. ``--max-minutes`` stops cleanly before that many minutes: the running job is checkpointed
under ``<store>/checkpoints/`` (``job-<key>.pt``, a few MB: one model and the sampler's state) and the next call
resumes it to the same numbers (exit status 75: call again; 0 when every job of this share is stored). The
checkpoint is removed when its job is stored. ``--setting`` and ``--group`` select jobs (e.g. ``--setting
'(2)' --group main``: Table 1's four cheap methods, the runs that decide it). The data set is the profile's
(``$FLKIT_DATA`` or ``<repo>/data``, see flkit.datasets).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flkit.papers.hics import fmnist  # noqa: E402

EXIT_UNFINISHED = 75


def _parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", choices=sorted(fmnist.PROFILES))
    ap.add_argument("--part", type=int, default=0, help="this process's share (0-based)")
    ap.add_argument("--of", type=int, default=1, help="number of processes sharing the jobs")
    ap.add_argument("--device", default="cpu", help="cpu | cuda[:i] | auto")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--max-minutes", type=float, default=None, help="stop cleanly (checkpoint) before this")
    ap.add_argument("--setting", default=None, help="only the jobs of this alpha setting, e.g. '(2)'")
    ap.add_argument("--group", default=None, choices=["main", "divfl", "lr_alt"], help="only this group's jobs")
    args = ap.parse_args(argv)
    if not 0 <= args.part < args.of:
        ap.error(f"--part must lie in [0, --of = {args.of}), got {args.part}")
    if args.max_minutes is not None and not args.max_minutes > 0:
        ap.error(f"--max-minutes must be > 0, got {args.max_minutes}")
    settings = fmnist.profile(args.profile)["settings"]
    if args.setting is not None and args.setting not in settings:
        ap.error(f"--setting must be one of {settings}, got {args.setting!r}")
    return args


def selected(args) -> list[dict]:
    """This process's jobs: the profile's, filtered by --setting and --group, DivFL's first (the longest),
    every ``of``-th from ``part``."""
    cfg = fmnist.profile(args.profile)
    js = [j for j in fmnist.jobs(cfg) if (args.setting is None or j["setting"] == args.setting)
          and (args.group is None or j["group"] == args.group)]
    order = sorted(js, key=lambda j: (j["group"] != "divfl", -j["rounds"]))
    return order[args.part::args.of]


def main(argv=None) -> int:
    import torch

    from flkit import datasets, results
    from flkit.seeding import resolve_device

    from flkit import fl

    t_start = time.time()
    args = _parse(argv)
    deadline = None if args.max_minutes is None else t_start + 60 * args.max_minutes
    torch.set_num_threads(args.threads)
    cfg = fmnist.profile(args.profile)
    mine = selected(args)
    store = results.book_store(fmnist.store_name(args.profile))
    if all(store.done(j) for j in mine):
        print(f"part {args.part}: all {len(mine)} jobs stored")
        return 0
    data = datasets.load(cfg["dataset"], device=resolve_device(args.device))
    ckpt = store.root / "checkpoints"
    try:
        results.sweep(mine, lambda j: fmnist.run_job(j, data, checkpoint_dir=ckpt, deadline=deadline), store,
                      progress=True, desc=f"part {args.part}")
    except fl.Deadline as e:
        done = sum(store.done(j) for j in mine)
        print(f"STOPPED before the deadline: {e}; {done} of {len(mine)} jobs stored. Call again to continue.")
        return EXIT_UNFINISHED
    return 0


if __name__ == "__main__":
    sys.exit(main())
