"""Sweep of the FedAU chapter (document 000): compute and store the runs behind its table and cutoff figure.

    python scripts/fedau_sweep.py --profile reduced                       # CPU: logistic regression stand-in
    python scripts/fedau_sweep.py --profile paper --device cuda --max-minutes 9
    python scripts/fedau_sweep.py --profile paper --set dataset=cifar10   # where the CIFAR-10 files exist

Runs are stored through flkit.results under results/fedau/ (the folder the pages read; results/tmp/fedau
for the smoke profile), one CSV + JSON per run, and skipped when already there. A pattern's methods and
seeds train together in one vectorized fl.run call; a call stopped by --max-minutes checkpoints that batch
under results/fedau/checkpoints/ and the next call continues from it, so the paper profile can be paid in
pieces, on several machines: carry results/fedau/ (the stored runs and checkpoints/) to the next one.
MIFA and FedVarp (an N x d table per run) are batched apart from the other methods, so a checkpoint holds
models only (about 20 MB for a pattern's 25 CNN runs, written as two parts of at most 15 MiB: flkit.fl.
save_checkpoint). Exit status: 0 when every run is stored, 75 when
stopped early (call again).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from flkit import fl  # noqa: E402
from flkit.papers.fedau import table  # noqa: E402

EXIT_UNFINISHED = 75


def _parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="reduced", choices=sorted(table.PROFILES))
    ap.add_argument("--study", default="all", choices=["table", "cutoff", "all"])
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda[:i]")
    ap.add_argument("--max-minutes", type=float, default=None, help="stop cleanly (checkpoint) before this")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads on the CPU (default 2)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a setting of the profile (value read as YAML), e.g. --set dataset=cifar10")
    args = ap.parse_args(argv)
    args.overrides = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--set needs NAME=VALUE, got {item!r}")
        args.overrides[name] = yaml.safe_load(value)
    try:
        args.settings = table.profile(args.profile, **args.overrides)
    except ValueError as e:
        ap.error(str(e))
    return args


def main(argv=None) -> int:
    t_start = time.time()  # --max-minutes counts from here (start-up included, as the ledger's pay expects)
    args = _parse(argv)
    s = args.settings
    deadline = None if args.max_minutes is None else t_start + 60 * args.max_minutes
    ckpt = table.store_for(s).root / "checkpoints"
    studies = ["table", "cutoff"] if args.study == "all" else [args.study]
    try:
        for study in studies:
            df = table.sweep(s, study=study, device=args.device, deadline=deadline, checkpoint_dir=ckpt,
                              cpu_threads=args.threads)
            print(f"{study}: {df.attrs['computed']} runs computed, {df.attrs['stored']} from the store")
    except fl.Deadline as e:
        print(f"stopped: {e}")
        return EXIT_UNFINISHED
    return 0


if __name__ == "__main__":
    sys.exit(main())
