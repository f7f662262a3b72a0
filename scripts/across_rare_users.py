"""The runs of the page "Under the random access model: which rule protects the rare users?" (Across the documents).

    python scripts/across_rare_users.py --profile paper --device cuda --max-minutes 8.5
    python scripts/across_rare_users.py --profile reduced --device cpu --estimate

FedAvg, Fed-CVaR-Avg (alpha = gamma = 0.3), FedAU (K = 50 and no cutoff), known-rho weighting and MIFA under
document 003's RAM on its MNIST split of Figs. 3-4 (flkit.papers.across.rare_users): every rule of a seed sees the
same relayed users, split, initial model and minibatches. Runs are stored through flkit.results under
<out>/rare_users/ (default out: results/across; for --profile smoke results/tmp/across, git-ignored; $FLKIT_RESULTS
replaces results/), one CSV + JSON per run, skipped when already there. The runs of one r share one computation; a
computation stopped by --max-minutes is checkpointed under <out>/checkpoints/ and continues on the next call.
Exit status: 0 when every run is stored, 75 when stopped early (call again), 2 for bad input (one line, before
any computation).

--estimate times a few rounds of the first pending computation (nothing is stored) and projects the whole profile.

On the lent GPU machine (files come back only from $OUT, 16 MiB each), work outside $OUT and pack:
    mkdir -p /tmp/across && cp -r results/across/. /tmp/across/ 2>/dev/null;
    python3 scripts/across_rare_users.py --profile paper --device cuda --max-minutes 8.5 --out /tmp/across \
        && tar -czf $OUT/across.tar.gz -C /tmp across  # or pack the checkpoint too when it stopped (exit 75)
"""
from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from flkit.papers.across import rare_users as RU  # noqa: E402
from flkit.seeding import resolve_device  # noqa: E402

EXIT_UNFINISHED = 75


def _positive(kind):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or not math.isfinite(v) or v <= 0:
            raise argparse.ArgumentTypeError(f"must be {'an integer >= 1' if kind is int else 'a finite number > 0'}, "
                                             f"got {text!r}")
        return v
    return parse


def _parse(argv=None):
    """The arguments with .settings added; bad input exits here with one line, status 2, before any work."""
    ap = argparse.ArgumentParser(prog=Path(__file__).name, description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="paper", choices=sorted(RU.PROFILES))
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda[:i]")
    ap.add_argument("--max-minutes", type=_positive(float), default=None,
                    help="stop cleanly (checkpoint) before this many minutes have passed")
    ap.add_argument("--out", type=Path, default=None, help="results folder (runs go to <out>/rare_users/)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="override the profile's seeds")
    ap.add_argument("--rounds", type=_positive(int), default=None, help="override the profile's rounds")
    ap.add_argument("--rules", nargs="+", default=None, help=f"a subset of {list(RU.RULES)}")
    ap.add_argument("--estimate", action="store_true", help="time a few rounds and project; store nothing")
    ap.add_argument("--estimate-rounds", type=_positive(int), default=3)
    ap.add_argument("--threads", type=_positive(int), default=None, help="torch CPU threads")
    args = ap.parse_args(argv)
    try:
        args.settings = RU.settings(args.profile, seeds=args.seeds, rounds=args.rounds, rules=args.rules)
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", args.device):
            raise ValueError(f"--device must be auto, cpu or cuda[:i], got {args.device!r}")
    except (ValueError, RuntimeError) as e:
        ap.error(" ".join(str(e).split()))
    return args


def estimate(s: dict, out, device, rounds: int) -> None:
    """Time `rounds` rounds of the first pending computation (one r, every pending rule and seed) and project."""
    store = RU.store_for(s, out)
    todo = [c for c in RU.run_configs(s) if not store.done(c)]
    if not todo:
        print("nothing to compute: every run is stored")
        return
    first = [c for c in todo if c["pattern_frac"] == todo[0]["pattern_frac"]]
    quiet = lambda _: None  # noqa: E731
    RU.run_batch([dict(c, rounds=1, eval_every=1) for c in first], device, progress=False, log=quiet)   # warm-up
    t0 = time.time()
    RU.run_batch([dict(c, rounds=rounds, eval_every=rounds) for c in first], device, progress=False, log=print)
    per = (time.time() - t0) / (rounds * len(first))
    total = per * sum(c["rounds"] for c in todo)
    print(f"estimate: {per:.3f} s per run-round ({len(first)} runs together, trial of {rounds} rounds with an "
          f"evaluation); {len(todo)} runs pending, projected {total / 60:.1f} min ({total / 3600:.2f} h) on {device}")


def main(argv=None) -> int:
    t_start = time.time()
    args = _parse(argv)
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    s = args.settings
    try:
        device = resolve_device(args.device)
    except (ValueError, RuntimeError) as e:
        print(f"{Path(__file__).name}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"rare users under the RAM / {args.profile} on {device}" + (f"  [{s['label']}]" if s["label"] else ""))
    if args.estimate:
        estimate(s, args.out, device, args.estimate_rounds)
        return 0
    deadline = t_start + 60 * args.max_minutes if args.max_minutes else None
    code = 0
    try:
        RU.sweep(s, root=args.out, device=device, deadline=deadline)
    except RU.Deadline as e:
        print(f"STOPPED before the deadline: {e}. Call again to continue.")
        code = EXIT_UNFINISHED
    store = RU.store_for(s, args.out)
    configs = RU.run_configs(s)
    done = sum(store.done(c) for c in configs)
    print(f"{done} of {len(configs)} runs stored in {store.root} ({(time.time() - t_start) / 60:.1f} min)")
    return code if done < len(configs) else 0


if __name__ == "__main__":
    sys.exit(main())
