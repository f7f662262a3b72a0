"""Sweep of the FedAU chapter (document 000): compute and store the runs behind its table and cutoff figure.

    python scripts/fedau_sweep.py --profile reduced                       # CPU: logistic regression stand-in
    python scripts/fedau_sweep.py --profile paper --device cuda --max-minutes 9
    python scripts/fedau_sweep.py --profile paper --set dataset=cifar10   # where the CIFAR-10 files exist
    python scripts/fedau_sweep.py --profile cnn-spot --study table --device cpu --max-minutes 30   # the CNN spot-check
    taskset -c 0 python scripts/fedau_sweep.py --profile cnn-spot --study table --device cpu --threads 1 --estimate

Runs are stored through flkit.results under results/fedau/ (the folder the pages read; results/tmp/fedau
for the smoke profile), one CSV + JSON per run, and skipped when already there. A pattern's methods and
seeds train together in one vectorized fl.run call; a call stopped by --max-minutes checkpoints that batch
under results/fedau/checkpoints/ and the next call continues from it, so the paper profile can be paid in
pieces, on several machines: carry results/fedau/ (the stored runs and checkpoints/) to the next one.
MIFA and FedVarp (an N x d table per run) are batched apart from the other methods, so a checkpoint holds
models only (about 20 MB for a pattern's 25 CNN runs, written as two parts of at most 15 MiB: flkit.fl.
save_checkpoint). Exit status: 0 when every run is stored, 75 when
stopped early (call again).

--estimate times a few rounds of every pending batch (nothing is stored) and projects the sweep: the trial's
evaluations (the whole training and test set, every run of the batch) are timed apart from its rounds; the
rounds' cost is projected over the exact client updates of every run (its participation masks), the
evaluations' over the evaluations every run makes (rounds / eval_every + 1). Both wall time and the process's
CPU time are printed: on a shared core the wall time overstates the work; the CPU time is what one free thread
takes.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from flkit import fl  # noqa: E402
from flkit.papers.fedau import common, cutoff, table  # noqa: E402
from flkit.seeding import resolve_device  # noqa: E402

EXIT_UNFINISHED = 75
STUDIES = {"table": table.configs, "cutoff": cutoff.configs}      # study -> its runs' configs


def _parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="reduced", choices=sorted(cutoff.PROFILES))
    ap.add_argument("--study", default="all", choices=["table", "cutoff", "all"])
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda[:i]")
    ap.add_argument("--max-minutes", type=float, default=None, help="stop cleanly (checkpoint) before this")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads on the CPU (default 2)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a setting of the profile (value read as YAML), e.g. --set dataset=cifar10")
    ap.add_argument("--estimate", action="store_true", help="time a few rounds of each pending batch and "
                    "project; store nothing")
    ap.add_argument("--estimate-rounds", type=int, default=3, help="rounds of the --estimate trial (default 3)")
    args = ap.parse_args(argv)
    if args.threads < 1:
        ap.error(f"--threads must be >= 1, got {args.threads}")
    if args.estimate_rounds < 1:
        ap.error(f"--estimate-rounds must be >= 1, got {args.estimate_rounds}")
    if args.max_minutes is not None and not args.max_minutes > 0:
        ap.error(f"--max-minutes must be > 0, got {args.max_minutes}")
    args.overrides = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--set needs NAME=VALUE, got {item!r}")
        args.overrides[name] = yaml.safe_load(value)
    try:
        args.settings = cutoff.profile(args.profile, **args.overrides)      # the table's settings and the grid
    except ValueError as e:
        ap.error(str(e))
    return args


@contextlib.contextmanager
def _timed_metrics(log: list):
    """Every evaluation (EngineTask.metrics) inside appends (wall s, CPU s) to `log`."""
    from flkit.tasks import EngineTask
    original = EngineTask.metrics

    def metrics(self, w):
        w0, c0 = time.perf_counter(), time.process_time()
        out = original(self, w)
        log.append((time.perf_counter() - w0, time.process_time() - c0))
        return out

    EngineTask.metrics = metrics
    try:
        yield log
    finally:
        EngineTask.metrics = original


def client_updates(c: dict, rounds: int | None = None) -> int:
    """The client updates of a run in its first `rounds` rounds (all: None): the ones of its participation mask."""
    x, y, _, _ = common.load_data(c, "cpu")
    m = common.mask(c, common.split(c, y.cpu().numpy())[1])
    return int(m[:rounds].sum())


def estimate(s: dict, studies: list[str], device: str, rounds: int, threads: int, out=print) -> dict:
    """Time `rounds` rounds of every pending batch of the studies (a run that two studies share counted once;
    the sweep's batches: `table.sweep_group`) and project; nothing is stored. Returns {"wall_s", "cpu_s",
    "batches": [per batch]} (the projections)."""
    from flkit.results import config_key
    store = table.store_for(s)
    todo = list({config_key(c): c for study in studies for c in STUDIES[study](s)
                 if not store.done(c)}.values())
    study = "+".join(studies)
    groups: dict[str, list] = {}
    for c in todo:
        groups.setdefault(repr(sorted(table.sweep_group(c).items())), []).append(c)
    if not todo:
        out(f"{study}: nothing to compute, every run is stored")
        return dict(wall_s=0.0, cpu_s=0.0, batches=[])
    rows = []
    for batch in groups.values():
        trial = [dict(c, rounds=rounds, eval_every=rounds) for c in batch]
        common.load_data(trial[0], resolve_device(device))         # data loading is not the run's
        log: list = []
        w0, c0 = time.perf_counter(), time.process_time()
        with _timed_metrics(log):
            table.run_batch(trial, device, cpu_threads=threads)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        ev_wall, ev_cpu = (sum(v) / len(log) for v in zip(*log))
        tr_wall, tr_cpu = wall - sum(v[0] for v in log), cpu - sum(v[1] for v in log)
        done_pairs = sum(client_updates(c, rounds) for c in batch)
        all_pairs = sum(client_updates(c) for c in batch)
        n_evals = len(set(range(0, batch[0]["rounds"] + 1, batch[0]["eval_every"])) | {batch[0]["rounds"]})
        proj = {k: tr * all_pairs / done_pairs + n_evals * ev
                for k, tr, ev in (("wall_s", tr_wall, ev_wall), ("cpu_s", tr_cpu, ev_cpu))}
        per_round = {k: tr * all_pairs / done_pairs / batch[0]["rounds"] for k, tr in (("wall", tr_wall), ("cpu", tr_cpu))}
        row = dict(runs=len(batch), methods=sorted({c["method"] for c in batch}), rounds=batch[0]["rounds"],
                   client_updates=all_pairs, trial_rounds=rounds, trial_client_updates=done_pairs,
                   round_cpu_s=per_round["cpu"], round_wall_s=per_round["wall"], eval_cpu_s=ev_cpu,
                   eval_wall_s=ev_wall, evaluations=n_evals, **proj)
        rows.append(row)
        out(f"{study}: batch of {len(batch)} runs ({', '.join(row['methods'])}): trial of {rounds} rounds, "
            f"{done_pairs} client updates: {tr_cpu:.1f} s CPU ({tr_wall:.1f} s wall) for the rounds, "
            f"{ev_cpu:.1f} s CPU ({ev_wall:.1f} s wall) per evaluation of the batch; projected over "
            f"{all_pairs:,} client updates and {n_evals} evaluations: {per_round['cpu']:.2f} s CPU per round "
            f"(+ evaluations), {proj['cpu_s'] / 3600:.2f} h CPU ({proj['wall_s'] / 3600:.2f} h wall)")
    total = {k: sum(r[k] for r in rows) for k in ("wall_s", "cpu_s")}
    out(f"estimate: {study}, {len(todo)} runs pending in {len(rows)} batch(es) on {device} with {threads} "
        f"thread(s): {total['cpu_s'] / 3600:.2f} h of CPU time ({total['wall_s'] / 3600:.2f} h wall on this "
        f"machine now)")
    return dict(total, batches=rows)


def main(argv=None) -> int:
    t_start = time.time()  # --max-minutes counts from here (start-up included, as the ledger's pay expects)
    args = _parse(argv)
    s = args.settings
    if args.estimate:
        estimate(s, ["table", "cutoff"] if args.study == "all" else [args.study], args.device, args.estimate_rounds,
                 args.threads)
        return 0
    deadline = None if args.max_minutes is None else t_start + 60 * args.max_minutes
    ckpt = table.store_for(s).root / "checkpoints"
    studies = ["table", "cutoff"] if args.study == "all" else [args.study]
    try:
        for study in studies:
            df = table.sweep(s, runs=STUDIES[study](s), desc=f"FedAU {study}", device=args.device,
                             deadline=deadline, checkpoint_dir=ckpt, cpu_threads=args.threads)
            print(f"{study}: {df.attrs['computed']} runs computed, {df.attrs['stored']} from the store")
    except fl.Deadline as e:
        print(f"stopped: {e}")
        return EXIT_UNFINISHED
    return 0


if __name__ == "__main__":
    sys.exit(main())
