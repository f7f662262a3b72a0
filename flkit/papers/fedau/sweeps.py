"""The chapter's sweep: ``python -m flkit.sweep fedau`` computes and stores the runs behind its table and cutoff
figure::

    python -m flkit.sweep fedau --profile reduced                       # CPU: logistic regression stand-in
    python -m flkit.sweep fedau --profile paper --device cuda --max-minutes 9
    python -m flkit.sweep fedau --profile paper --set dataset=cifar10   # where the CIFAR-10 files exist
    python -m flkit.sweep fedau --profile cnn-spot --study table --device cpu --threads 1 --max-minutes 30
    taskset -c 0 python -m flkit.sweep fedau --profile cnn-spot --study table --device cpu --threads 1 --estimate

Runs are stored under results/fedau/ (the folder the pages read; results/tmp/fedau for the smoke profile), one
CSV + JSON per run, and skipped when already there. A pattern's methods and seeds train together in one
vectorized fl.run call (:func:`table.sweep_group <flkit.papers.fedau.table.sweep_group>`); a call stopped by
--max-minutes checkpoints that batch under results/fedau/checkpoints/ and the next call continues from it, so the
paper profile can be paid in pieces, on several machines: carry results/fedau/ (the stored runs and checkpoints/)
to the next one. MIFA and FedVarp (an N x d table per run) are batched apart from the other methods, so a
checkpoint holds models only (about 20 MB for a pattern's 25 CNN runs, written as two parts of at most 15 MiB:
flkit.fl.save_checkpoint). --threads (default 2) applies on a CPU.

--estimate times a few rounds of every pending batch (nothing is stored) and projects the sweep: the trial's
evaluations (the whole training and test set, every run of the batch) are timed apart from its rounds; the
rounds' cost is projected over the exact client updates of every run (its participation masks), the
evaluations' over the evaluations every run makes (rounds / eval_every + 1). Both wall time and the process's
CPU time are printed: on a shared core the wall time overstates the work; the CPU time is what one free thread
takes.
"""
from __future__ import annotations

import contextlib
import time

from flkit import fl
from flkit.papers.fedau import common, cutoff, table
from flkit.results import config_key
from flkit.tasks import EngineTask

__all__ = ["SWEEP", "STUDIES", "client_updates", "estimate"]

STUDIES = {"table": table.configs, "cutoff": cutoff.configs}      # study -> its runs' configs


@contextlib.contextmanager
def _timed_metrics(log: list):
    """Every evaluation (EngineTask.metrics) inside appends (wall s, CPU s) to `log`."""
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


def _pending(s: dict, studies: list[str]) -> list[dict]:
    """The runs of the studies not yet stored (a run that two studies share counted once)."""
    store = table.store_for(s)
    return list({config_key(c): c for study in studies for c in STUDIES[study](s) if not store.done(c)}.values())


def estimate(s: dict, studies: list[str], device, rounds: int, threads: int, out=print) -> dict:
    """Time `rounds` rounds of every pending batch of the studies (a run that two studies share counted once;
    the sweep's batches: `table.sweep_group`) and project; nothing is stored. Returns {"wall_s", "cpu_s",
    "batches": [per batch]} (the projections)."""
    todo = _pending(s, studies)
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
        common.load_data(trial[0], device)                          # data loading is not the run's
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
        per_round = {k: tr * all_pairs / done_pairs / batch[0]["rounds"]
                     for k, tr in (("wall", tr_wall), ("cpu", tr_cpu))}
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


class _Sweep:
    """``python -m flkit.sweep fedau``: the runs of the table and of the cutoff study (flkit.sweep.Sweep)."""
    name = "fedau"
    summary = "FedAU (document 000): the runs of the main table and of the cutoff K x p_min study"
    device = "auto"
    threads = 2
    stopped = (fl.Deadline,)

    def arguments(self, ap) -> None:
        ap.add_argument("--profile", default="reduced", choices=sorted(cutoff.PROFILES))
        ap.add_argument("--study", default="all", choices=["table", "cutoff", "all"])

    def plan(self, args, overrides: dict) -> dict:
        s = cutoff.profile(args.profile, **overrides)      # the table's settings and the grid
        return dict(settings=s, studies=["table", "cutoff"] if args.study == "all" else [args.study])

    def describe(self, p: dict) -> str:
        return f"{' + '.join(p['studies'])} / {p['settings']['profile']}"

    def estimate(self, p: dict, device, rounds: int, threads: int | None, out=print) -> None:
        estimate(p["settings"], p["studies"], device, rounds, threads, out=out)

    def run(self, p: dict, device, deadline: float | None, threads: int | None, out=print) -> None:
        s = p["settings"]
        ckpt = table.store_for(s).root / "checkpoints"
        for study in p["studies"]:
            df = table.sweep(s, runs=STUDIES[study](s), desc=f"FedAU {study}", device=device, deadline=deadline,
                             checkpoint_dir=ckpt, cpu_threads=threads)
            out(f"{study}: {df.attrs['computed']} runs computed, {df.attrs['stored']} from the store")

    def progress(self, p: dict) -> tuple[int, int, str]:
        store = table.store_for(p["settings"])
        runs = {config_key(c): c for study in p["studies"] for c in STUDIES[study](p["settings"])}
        return sum(store.done(c) for c in runs.values()), len(runs), str(store.root)


SWEEP = _Sweep()
