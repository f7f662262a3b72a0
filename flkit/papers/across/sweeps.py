"""The chapter's sweep: ``python -m flkit.sweep rare-users`` stores the runs of the page "Under the random access
model: which rule protects the rare users?" (:mod:`flkit.papers.across.rare_users`)::

    python -m flkit.sweep rare-users --profile paper --device cuda --max-minutes 8.5
    python -m flkit.sweep rare-users --profile reduced --device cpu --estimate

FedAvg, Fed-CVaR-Avg (alpha = gamma = 0.3), FedAU (K = 50 and no cutoff), known-rho weighting and MIFA under
document 003's RAM on its MNIST split of Figs. 3-4: every rule of a seed sees the same relayed users, split,
initial model and minibatches. Runs are stored under <out>/rare_users/ (default out: results/across; for --profile
smoke results/tmp/across, git-ignored; $FLKIT_RESULTS replaces results/), one CSV + JSON per run, skipped when
already there. The runs of one r share one computation; a computation stopped by --max-minutes is checkpointed
under <out>/checkpoints/ and continues on the next call. Settings: seeds, rounds, r (the participation levels)
and rules (--rules).

--estimate times a few rounds of the first pending computation (nothing is stored) and projects the whole profile.

On the lent GPU machine (files come back only from $OUT, 16 MiB each), work outside $OUT and pack::

    mkdir -p "$TMPDIR/across" && cp -r results/across/. "$TMPDIR/across/" 2>/dev/null;
    python3 -m flkit.sweep rare-users --profile paper --device cuda --max-minutes 8.5 --out "$TMPDIR/across" \\
        && tar -czf $OUT/across.tar.gz -C "$TMPDIR" across  # or pack the checkpoint too when it stopped (exit 75)
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from flkit.papers.across import rare_users

__all__ = ["RARE_USERS", "estimate"]


def estimate(s: dict, out, device, rounds: int, log=print) -> None:
    """Time `rounds` rounds of the first pending computation (one r, every pending rule and seed) and project."""
    store = rare_users.store_for(s, out)
    todo = [c for c in rare_users.run_configs(s) if not store.done(c)]
    if not todo:
        log("nothing to compute: every run is stored")
        return
    first = [c for c in todo if c["pattern_frac"] == todo[0]["pattern_frac"]]
    quiet = lambda _: None  # noqa: E731
    rare_users.run_batch([dict(c, rounds=1, eval_every=1) for c in first], device, progress=False, log=quiet)  # warm-up
    t0 = time.time()
    rare_users.run_batch([dict(c, rounds=rounds, eval_every=rounds) for c in first], device, progress=False, log=log)
    per = (time.time() - t0) / (rounds * len(first))
    total = per * sum(c["rounds"] for c in todo)
    log(f"estimate: {per:.3f} s per run-round ({len(first)} runs together, trial of {rounds} rounds with an "
        f"evaluation); {len(todo)} runs pending, projected {total / 60:.1f} min ({total / 3600:.2f} h) on {device}")


class _RareUsers:
    """``python -m flkit.sweep rare-users``: the runs of the page (flkit.sweep.Sweep)."""
    name = "rare-users"
    summary = "Across the documents: the rules for unknown participation under document 003's RAM (rare users)"
    device = "auto"
    threads = None
    stopped = (rare_users.Deadline,)
    SETTINGS = ("seeds", "rounds", "r", "rules")

    def arguments(self, ap) -> None:
        ap.add_argument("--profile", default="paper", choices=sorted(rare_users.PROFILES))
        ap.add_argument("--out", type=Path, default=None, help="results folder (runs go to <out>/rare_users/)")
        ap.add_argument("--rules", nargs="+", default=None, help=f"a subset of {list(rare_users.RULES)}")

    def plan(self, args, overrides: dict) -> dict:
        unknown = sorted(set(overrides) - set(self.SETTINGS))
        if unknown:
            raise ValueError(f"unknown setting(s) {unknown}; rare-users takes {list(self.SETTINGS)}")
        if args.rules is not None:
            if "rules" in overrides:
                raise ValueError("--rules and --set rules=... are both given: give one")
            overrides = dict(overrides, rules=args.rules)
        return dict(settings=rare_users.settings(args.profile, **overrides), out=args.out, profile=args.profile)

    def describe(self, p: dict) -> str:
        s = p["settings"]
        return f"rare users under the RAM / {p['profile']}" + (f"  [{s['label']}]" if s["label"] else "")

    def estimate(self, p: dict, device, rounds: int, threads: int | None, out=print) -> None:
        if threads:
            torch.set_num_threads(threads)
        estimate(p["settings"], p["out"], device, rounds, log=out)

    def run(self, p: dict, device, deadline: float | None, threads: int | None, out=print) -> None:
        if threads:
            torch.set_num_threads(threads)
        rare_users.sweep(p["settings"], root=p["out"], device=device, deadline=deadline)

    def progress(self, p: dict) -> tuple[int, int, str]:
        store = rare_users.store_for(p["settings"], p["out"])
        configs = rare_users.run_configs(p["settings"])
        return sum(store.done(c) for c in configs), len(configs), str(store.root)


RARE_USERS = _RareUsers()
