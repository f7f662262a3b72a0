"""Compute the run of Fig. 6(a) of the HiCS-FL document (Assumption 1 on Fashion-MNIST, appendix 6.2;
flkit.papers.hics.dissimilarity) into the book's store, then re-execute the theory page to read it.

    python scripts/hics_fig6.py                                       # the page's stand-in: logistic regression, CPU
    python scripts/hics_fig6.py --model hics_fmnist_paper --device cuda   # the document's CNN (owed: a GPU)

The run is stored once (``results/hics``) and skipped when it is there. ``--max-minutes`` stops cleanly
before that many minutes: the state (round, model, rows so far; under a MB for the CNN) is checkpointed at
``results/hics/checkpoints/fig6-<key>.pt`` and the next call resumes it to the same numbers (exit status 75:
call again; 0 when the run is stored).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flkit.papers.hics import dissimilarity  # noqa: E402


def _parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=dissimilarity.FIG6["model"], choices=sorted(dissimilarity.MODELS))
    ap.add_argument("--rounds", type=int, default=dissimilarity.FIG6["rounds"])
    ap.add_argument("--device", default="cpu", help="cpu | cuda[:i] | auto")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--max-minutes", type=float, default=None, help="stop cleanly (checkpoint) before this")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.max_minutes is not None and not args.max_minutes > 0:
        ap.error(f"--max-minutes must be > 0, got {args.max_minutes}")
    return args


def main(argv=None) -> int:
    import torch

    from flkit import datasets, results
    from flkit.seeding import resolve_device

    from flkit import fl

    t_start = time.time()
    args = _parse(argv)
    deadline = None if args.max_minutes is None else t_start + 60 * args.max_minutes
    torch.set_num_threads(args.threads)
    cfg = dict(dissimilarity.FIG6, model=args.model, rounds=args.rounds)
    data = datasets.load("fashion-mnist", device=resolve_device(args.device))
    try:
        _, part, wall = dissimilarity.fig6_runs(cfg, data, results.book_store("hics"), deadline=deadline)
    except fl.Deadline as e:
        print(f"STOPPED before the deadline: {e}. Call again to continue.")
        return 75
    print(f"Fig. 6(a) run ({args.model}, {args.rounds} rounds): {wall:.0f} s; union entropy {dissimilarity.union_entropy(part):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
