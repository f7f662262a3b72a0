"""Run the stored jobs of the HiCS-FL training pages (flkit.papers.hics.experiments) outside the
notebook, then re-execute the page to read them.

    python scripts/hics_sweep.py reduced --part 0 --of 2 &      # CPU: two processes, one thread each
    python scripts/hics_sweep.py reduced --part 1 --of 2
    python scripts/hics_sweep.py paper --device cuda            # the document's CNN (a GPU)
    python scripts/hics_sweep.py paper-cifar10 --device cuda    # CIFAR-10 (needs the CIFAR-10 files)
    python scripts/hics_sweep.py paper-cifar100 --device cuda   # CIFAR-100 (needs the CIFAR-100 files)

Each process runs every ``of``-th job (DivFL's first, the longest: the Table 1 setting's long runs, then
the others) into the book's store (``results/hics`` for Fashion-MNIST, ``results/hics_cifar10``,
``results/hics_cifar100``; under ``results/tmp/`` for the smoke profiles), one CSV + JSON per job, skipping
the stored ones: a stopped sweep resumes at the job level. The data set is the profile's (``$FLKIT_DATA``
or ``<repo>/data``, see flkit.datasets).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flkit.papers.hics import experiments as X  # noqa: E402


def _parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile", choices=sorted(X.PROFILES))
    ap.add_argument("--part", type=int, default=0, help="this process's share (0-based)")
    ap.add_argument("--of", type=int, default=1, help="number of processes sharing the jobs")
    ap.add_argument("--device", default="cpu", help="cpu | cuda[:i] | auto")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args(argv)
    if not 0 <= args.part < args.of:
        ap.error(f"--part must lie in [0, --of = {args.of}), got {args.part}")
    return args


def main(argv=None) -> int:
    import torch

    from flkit import datasets, results
    from flkit.seeding import resolve_device

    args = _parse(argv)
    torch.set_num_threads(args.threads)
    cfg = X.profile(args.profile)
    order = sorted(X.jobs(cfg), key=lambda j: (j["group"] != "divfl", -j["rounds"]))
    mine = order[args.part::args.of]
    store = results.book_store(X.store_name(args.profile))
    data = datasets.load(cfg["dataset"], device=resolve_device(args.device))
    results.sweep(mine, lambda j: X.run_job(j, data), store, progress=True, desc=f"part {args.part}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
