"""The owed-work ledger: runs at a document's scale that the book has not executed yet, each with the
command that completes it, its progress (counted from the results stores, never typed in), its value
(a rank) and its price in GPU minutes and CPU hours. Whoever has a GPU, or a spare CPU core, pays the most
valuable items first::

    python -m flkit.owed            # the ledger, most valuable first
    python -m flkit.owed --commands # only the commands, one per line
    python -m flkit.owed --pay --minutes 60 --device cpu            # pay for an hour on one CPU thread
    python -m flkit.owed --pay --minutes 12 --device cuda           # a GPU window (start-up left out)
    python -m flkit.owed --pay --minutes 30 --device cpu --only cvar-fig2-causes

**Value.** Items are ranked by the information their runs give per compute-minute: first the runs that
decide a claim of a document (the Fed-CVaR-Avg MNIST diagnostics, HiCS-FL with the document's CNN in
setting (2), Fed-CVaR-Avg Table 1), last the labelled sensitivity checks (the FedAU CNN spot-check) and the
runs with nothing in the document to compare against (the FedAU cutoff x p_min figure, whose image the
document does not include). ``value`` is the rank (1 first); ``why`` says what the runs decide.

**Price.** ``gpu_minutes``: measured on a GPU only where the item's own runs (or runs of the same shapes)
were timed there (``basis`` "measured"); otherwise "estimated from ..." (``basis`` "estimated", the text
says from what). ``cpu_hours``: one CPU thread of this machine, "measured" where a short trial of the
item's own runs was timed here (``python -m flkit.sweep cvar ... --estimate --threads 1``,
:func:`flkit.papers.hics.fmnist.paper_estimate`), else "extrapolated" (the text says from what).

**Paying** (``--pay``): the most valuable unpaid item that the device can pay runs as a subprocess in
pieces: its command with ``--device`` and ``--max-minutes`` replaced (a piece is at most ``--piece-minutes``,
default 8 on a GPU and 30 on a CPU, and never past the time left less a safety margin); a piece that
stops early (exit 75) checkpoints and the next piece resumes; when an item is paid the next one starts,
while time remains. What a device can pay (:func:`payable`): on ``cuda`` every GPU item whose data are
here; on ``cpu`` the CPU items and the GPU items whose CPU price was *measured* on this CPU (a measured
price can be planned; an extrapolated one may be days); ``--only ID`` pays that item on either device.
At the end it prints the files to commit (results and checkpoints, with their sizes; a file over
``FILE_CAP`` = 16 MiB is flagged). Exit status: 0 when nothing payable is left, 75 when it stopped with
work left, 1 when a command failed, 2 for bad input (one line, before any work).
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

_REPO = Path(__file__).resolve().parents[1]

__all__ = ["Owed", "ITEMS", "FILE_CAP", "ledger", "unpaid_ids", "frame", "payable", "pay", "main"]

EXIT_UNFINISHED = 75
FILE_CAP = 16 * 2**20          # the most a result or checkpoint file may weigh (what a GPU window brings back)
PIECE_MINUTES = {"cuda": 8.0, "cpu": 30.0}   # the longest piece on each device: a GPU window allows 10 min a command


@dataclass(frozen=True)
class Owed:
    """One owed item.

    runs: () -> (done, total) counted from the store. value: its rank (1: most valuable); why: what its runs
    decide. gpu_min: GPU minutes per run (None: a CPU item, no GPU timing), gpu_measured: measured on a GPU
    (else estimated), basis: how (the "estimated from ..." text). cpu_min: minutes of one CPU thread per run,
    cpu_measured: measured on this CPU by a short trial (else extrapolated), cpu_basis: how. data: the data
    sets it reads (flkit.datasets names); needs: what besides a GPU it needs, in words. cpu: paid on a CPU (no
    GPU needed or meant)."""
    id: str
    document: str
    item: str
    page: str
    command: str
    runs: Callable[[], tuple[int, int]]
    value: int
    why: str
    gpu_min: float | None
    basis: str
    cpu_min: float
    cpu_basis: str
    gpu_measured: bool = False
    cpu_measured: bool = False
    data: tuple[str, ...] = ()
    needs: str = ""
    cpu: bool = False
    limit: tuple[str, float] | None = ("--max-minutes", 1.0)   # the command's time limit: flag, units per minute
    part_of: str = ""          # the id of an item whose runs include this one's (paid first, for its value)
    sensitivity: bool = False  # a labelled sensitivity check: decides no item of the document (no item names it)

    @property
    def minutes_per_run(self) -> float:
        """GPU minutes per run; for a CPU item, minutes of one CPU thread."""
        return self.cpu_min if self.cpu else self.gpu_min

    def progress(self) -> tuple[int, int, float]:
        """(runs done, runs in all, minutes left: GPU minutes, or CPU-thread minutes for a CPU item)."""
        done, total = self.runs()
        return done, total, (total - done) * self.minutes_per_run

    def data_here(self) -> bool:
        from flkit import datasets
        return all(datasets.available(d) for d in self.data)

    def argv(self, device: str, max_minutes: float | None = None, threads: int | None = None) -> list[str]:
        """The command as an argument list for this Python, with ``--device`` (and ``--max-minutes``,
        ``--threads`` where given) set: replaced where the command has them, added where not. A script path is
        made absolute; ``python -m module`` runs the module of this checkout (:func:`pay` starts it here)."""
        args = shlex.split(self.command)
        if args[0] == "python":
            args[0] = sys.executable
        if args[1] == "-m":
            out, rest = args[:3], args[3:]
        else:
            out = [args[0], str(_REPO / args[1])] if not Path(args[1]).is_absolute() else args[:2]
            rest = args[2:]
        sets = {"--device": device}
        if max_minutes is not None and self.limit is not None:
            sets[self.limit[0]] = f"{max_minutes * self.limit[1]:.3f}"
        if threads is not None:
            sets["--threads"] = str(threads)
        i = 0
        while i < len(rest):
            name = rest[i].split("=", 1)[0]
            if name in sets:
                i += 1 if "=" in rest[i] else 2
                continue
            out.append(rest[i])
            i += 1
        for k, v in sets.items():
            out += [k, v]
        return out


def _fedau(study: str, profile: str = "paper", **overrides) -> Callable[[], tuple[int, int]]:
    def count():
        from flkit.papers.fedau import cutoff, table
        s = cutoff.profile(profile, **overrides)      # the table's settings and the cutoff study's grid
        store = table.store_for(s)
        cs = cutoff.configs(s) if study == "cutoff" else table.configs(s)
        if study == "cutoff":             # the runs the table already has are not owed twice
            done_table = {repr(sorted(c.items())) for c in table.configs(s)}
            cs = [c for c in cs if repr(sorted(c.items())) not in done_table]
        return sum(store.done(c) for c in cs), len(cs)
    return count


def _hics_fmnist(part: str = "all") -> Callable[[], tuple[int, int]]:
    """The paper profile's jobs: "s2" the four cheap methods of setting (2) (Table 1's), "rest" the others of the
    document's setting (the pow-d diagnostic with the authors' d = 2K, group "powd_d", is not the document's)."""
    def count():
        from flkit import results
        from flkit.papers.hics import fmnist
        store = results.book_store("hics")
        js = fmnist.jobs(fmnist.profile("paper", powd_d_seeds=[]))
        s2 = [fmnist.is_setting2_main(j) for j in js]
        js = [j for j, k in zip(js, s2) if part == "all" or (part == "s2") == k]
        return sum(store.done(j) for j in js), len(js)
    return count


def _hics_cifar(name: str) -> Callable[[], tuple[int, int]]:
    def count():
        from flkit import results
        from flkit.papers.hics import fmnist
        store = results.book_store(fmnist.store_name(name))
        js = fmnist.jobs(fmnist.profile(name))
        return sum(store.done(j) for j in js), len(js)
    return count


def _hics_fig6() -> tuple[int, int]:
    from flkit import results
    from flkit.papers.hics import dissimilarity
    c = dissimilarity.fig6_config(dict(dissimilarity.FIG6, model="hics_fmnist_paper"))
    return int(results.book_store("hics").done(c)), 1


def _rare_users() -> tuple[int, int]:
    from flkit.papers.across import rare_users
    s = rare_users.settings("paper")
    store = rare_users.store_for(s)
    cs = rare_users.run_configs(s)
    return sum(store.done(c) for c in cs), len(cs)


def _cvar(experiment: str, profile: str, **overrides) -> Callable[[], tuple[int, int]]:
    def count():
        from flkit.papers import cvar
        s = cvar.settings(experiment, profile, **overrides)   # ram: the authors' vector (the default)
        store = cvar.store_for(s)
        cs = cvar.run_configs(s)
        return sum(store.done(c) for c in cs), len(cs)
    return count


# ---- CPU prices: one thread of this machine (2 cores, one of them busy with another sweep while measured)
# python -m flkit.sweep cvar <experiment> --profile paper [--set ...] --device cpu --estimate --threads 1
# (taskset -c 0): the projection of a 3-round trial of the first batch over the exact local steps of every batch.
_CVAR_MNIST_CPU_H = 7.57              # 20 runs, 38.5 ms per batched local step of 20 LeNets, 707,200 steps
_CVAR_SCALING_CPU_H = 8.01            # measured the same way with --set input_scaling=authors (40.8 ms a step)
_CVAR_SCALING_CPU_MIN = _CVAR_SCALING_CPU_H * 60 / 20   # one run of 4000 rounds
_CVAR_SCALING_CPU_BASIS = ("flkit.sweep cvar mnist --profile paper --set input_scaling=authors --device cpu --estimate "
                           "--threads 1: 8.01 h for 20 runs")
# 65 runs of 6000 rounds (fmnist --profile paper): 1,932,000 run-steps (cvar.planned_steps) at the MNIST LeNet's
# measured 38.5 ms per run-step (same LeNet shapes; a 3-round trial of the 65 stacked models did not end within
# 8 minutes here, so it was stopped)
_CVAR_TABLE1_CPU_H = 1_932_000 * 38.52e-3 / 3600
# HiCS-FL, the document's CNN: 0.98 s per client training (2 epochs x ~1,200 images) on one thread of this CPU, pinned
# to core 0, with the one-client loop that the CNN keeps on a CPU (experiments.batch_clients); a round's clients
# trained together took 1.08 s in the same trial (experiments.paper_estimate twice per path, the paths taking turns:
# benchmarks/bench_hics_batched.py --estimate 2, results/benchmarks/hics_paper_estimate_cpu.csv, 2026-11-27). An
# earlier trial of the loop gave 0.687 s (results/hics/3c99a238bd2b822c.csv), the rate the extrapolations to
# other CNNs below keep: 0.29 ms per training sample.
_HICS_S_PER_CLIENT = 0.98
_HICS_MS_PER_SAMPLE = 0.687 / 2400 * 1e3
# FedAU, the authors' CNN on Fashion-MNIST, extrapolated from the HiCS-FL CNN's measured rates (a CNN of similar
# size, 0.29 ms per training sample and 0.62 ms per evaluation forward on one thread): a run is 2.1e7 training
# samples plus 200 evaluations on 70,000 images (1.4e7 forward passes).
_HICS_MS_PER_FORWARD = 43.26 / 70_000 * 1e3     # measured: one evaluation of the HiCS-FL CNN in chunks of 1,024
_FEDAU_CPU_MIN = (2.1e7 * _HICS_MS_PER_SAMPLE + 1.4e7 * _HICS_MS_PER_FORWARD) / 6e4

# the four cheap methods of setting (2), 3 seeds x 200 rounds x 5 clients x 4 methods = 12,000 client trainings
# (2.9e7 samples) and 12 x 201 evaluations (rounds 0-200, 4.8e7 forward passes); all of the paper profile:
# hics.fmnist.client_trainings and hics.fmnist.evaluations of profile("paper") (tests/test_owed.py checks they agree)
_S2_TRAININGS, _S2_EVALS = 12_000, 12 * 201
_ALL_TRAININGS, _ALL_EVALS = 128_000, 10_647
_EVAL_FORWARDS = 10_000 + 10_000    # an evaluation: the test set and the training loss over the profile's sample
# pow-d's loss probe (d = N): every client's training loss at the global model, every round of every pow-d run, a
# forward pass over all 60,000 training images (hics.fmnist.loss_probes: 3 seeds x 200 rounds in setting (2), 1,800
# rounds in all)
_S2_PROBES, _ALL_PROBES = 600, 1800
_PROBE_FORWARDS = 60_000
# Measured on an H200 (GPU window of 2026-11-28, python -m flkit.window hics-rate --rounds 3, setting (2), seed 0,
# results/benchmarks/window_hics_fmnist_h200.csv): a round's 5 clients train together and an evaluation runs at the
# rates below; projected over each item's client trainings, evaluations and pow-d probes
# (flkit.window.hics_rate). The samplers' own work is not counted.
_HICS_H200_MIN = {"hics-fmnist-s2": 9.61, "hics-fmnist-paper": 78.93}
_HICS_H200_RATES = (63_369, 690_576)     # training samples/s, evaluation images/s (the same file)
_HICS_H200_BASIS = ("measured on an H200 (python -m flkit.window hics-rate, results/benchmarks/window_hics_fmnist_"
                    f"h200.csv): {_HICS_H200_RATES[0]:,} training samples/s with a round's 5 clients together and "
                    f"{_HICS_H200_RATES[1]:,} evaluation images/s, projected over ")


# one evaluation of the CNN on one thread of this CPU, pinned to core 0, per model of the 4 a job evaluates
# together, in chunks of 64 images as the CNN evaluates on a CPU (hics.common.eval_batch), this process's CPU time,
# the smaller of two repeats (benchmarks/bench_hics_eval.py --repeats 2, results/benchmarks/hics_eval_cpu.csv,
# 2026-11-28, with the models' no-grad 2x2 pooling, flkit.models.MaxPool2d): 1.48 s for the 10,000 test images and
# 1.24 s for the training loss over the paper profile's sample of 10,000 training images, both every round of every
# run (over all 60,000: 13.6 s; in chunks of 1,024: 3.9 s for the test set and 24.1 s for all 60,000 images)
_HICS_TEST_S, _HICS_LOSS_S = 1.48, 1.24
_HICS_PROBE_S = 13.56     # all 60,000 training images in the same benchmark: one round of pow-d's loss probe


def _hics_cpu_min(trainings: float, evals: float, probes: float) -> float:
    """CPU minutes of ``trainings`` client trainings, ``evals`` evaluations (run-method rounds) and ``probes`` rounds of
    pow-d's loss probe of the CNN."""
    return (trainings * _HICS_S_PER_CLIENT + evals * (_HICS_TEST_S + _HICS_LOSS_S) + probes * _HICS_PROBE_S) / 60


_FEDAU_MIN = 1.5
_FEDAU_GPU = ("estimated from the engine benchmark of the FedAU CIFAR-10 CNN on an H100 (~285k samples/s with "
              "400 stacked models, results/benchmarks/engine_h100.csv): a run is 10,000 rounds x ~26 clients x 5 x "
              "16 samples = 2.1e7 samples (74 s) plus evaluations on 70k images every 50 rounds (~15 s); the "
              "Fashion-MNIST CNN's engine rate, measured since on an H200 (445k samples/s with 400 stacked models, "
              "results/benchmarks/window_engine_fedau_fmnist_h200.csv), is of the same order; the host's "
              "per-(run, client) minibatch indices "
              "(~1,300 host syncs a round, profiled on a CPU) are not counted: likely 2-3x more")
_FEDAU_CPU = ("extrapolated from the HiCS-FL CNN's measured 0.29 ms per training sample and 0.62 ms per evaluation "
              "forward on one thread of this CPU (a CNN of similar size): 2.1e7 samples + 1.4e7 evaluation forwards "
              "per run")

# FedAU's CNN spot-check (profile "cnn-spot": 10 runs of 1,000 rounds, the authors' Fashion-MNIST CNN, Bernoulli
# participation), measured on one thread of this CPU pinned to core 0 (python -m flkit.sweep fedau --profile cnn-spot
# --study table --device cpu --threads 1 --estimate): a 3-round trial of each of its two batches (8 memoryless runs;
# the 2 MIFA runs) with the evaluations timed apart, the process's CPU time projected over the runs' exact client
# updates (their participation masks) and their 21 evaluations each (the whole training and test set every 50
# rounds). The core was shared with other jobs (wall time about 2x the CPU time), so the CPU time is the price.
# 2026-11-27: 8 runs: 47.0 s CPU for 3 rounds (648 client updates), 240.2 s CPU per evaluation of the batch -> 15.15 s
# a round over 208,960 client updates + 21 evaluations = 5.61 h; MIFA's 2 runs: 3.81 s a round, 58.4 s an
# evaluation -> 1.40 h; 7.01 h in all (13.84 h of wall time on the shared core).
_FEDAU_SPOT_CPU_H = 5.61 + 1.40
_FEDAU_SPOT_BASIS = ("measured on one thread of this CPU (python -m flkit.sweep fedau --profile cnn-spot --study table "
                     "--device cpu --estimate --threads 1, pinned to core 0): a 3-round trial of each batch, its "
                     "evaluations timed apart, in process CPU time; 19.0 s a round for the 10 runs (15.2 s for the 8 "
                     "memoryless runs, 3.8 s for the 2 MIFA runs) over the runs' exact client updates, and 299 s per "
                     "evaluation of all 10 (whole training and test set, 21 per run): 5.3 h of rounds and 1.7 h of "
                     "evaluations, 7.0 h in all (25 s a round with the evaluations spread); the MIFA batch (1.4 h) "
                     "checkpoints its two 250 x d tables, about 0.4 GB in 15 MiB parts, when a piece stops inside it")

ITEMS = [
    # Diagnosis of Figs. 3-4 (the rare classes stay near 50 %): the authors' input scaling, and a longer horizon,
    # both paired with the page's stored runs (the random-draw RAM, same seeds).
    Owed("cvar-mnist-input-scaling", "003", "Figs. 3-4 with the authors' input scaling (training on raw 0-255 "
         "pixels, test on 0-1: setting input_scaling=authors), 4000 rounds, seeds 0-2, the RAM of the page's stored "
         "runs (random draw), paired with them", "book/cvar/mnist",
         "python -m flkit.sweep cvar mnist --profile paper --set ram=random-draw --set input_scaling=authors "
         "--seeds 0 1 2 --device cuda --max-minutes 8.5",
         _cvar("mnist", "paper", ram="random-draw", input_scaling="authors", seeds=[0, 1, 2]), 1,
         "diagnoses Figs. 3-4: is the authors' input scaling what lifts the rare classes?",
         223 / 60 / 20, "measured: as the stored random-draw runs (same shapes, scaled inputs), 223 s for a batch of "
         "20 on a GPU",
         _CVAR_SCALING_CPU_MIN, "measured: " + _CVAR_SCALING_CPU_BASIS, gpu_measured=True, cpu_measured=True,
         data=("mnist",)),
    Owed("cvar-mnist-horizon", "003", "Fig. 3 (r = 90 %) extended to 8000 rounds, seeds 0-2, the RAM of the page's "
         "stored runs (random draw): are the rare-class curves still rising at round 4000?", "book/cvar/mnist",
         "python -m flkit.sweep cvar mnist --profile paper --set ram=random-draw --set 'settings=[0.9]' "
         "--seeds 0 1 2 --rounds 8000 --device cuda --max-minutes 8.5",
         _cvar("mnist", "paper", ram="random-draw", settings=[0.9], seeds=[0, 1, 2], rounds=8000), 2,
         "diagnoses Fig. 3: are the rare-class curves still rising at round 4000?",
         6.7 / 10, "estimated from the stored runs (223 s for a batch of 20 runs of 4000 rounds on a GPU): a small "
         "batch is latency-bound, about 6.7 min for 10 runs rather than 3.7",
         _CVAR_SCALING_CPU_MIN * 2, "measured: twice the 4000-round runs' rate (" + _CVAR_SCALING_CPU_BASIS + ")",
         cpu_measured=True, data=("mnist",)),
    Owed("cvar-mnist-fedavg-step", "003", "Fig. 3 (r = 90 %): FedAvg with its step multiplied by 2.63, the largest "
         "weight Fed-CVaR-Avg gives a step at alpha = gamma = 0.3, 4000 rounds, seeds 0-2, the RAM of the page's "
         "stored runs (random draw), paired with them", "book/cvar/mnist",
         "python -m flkit.sweep cvar mnist --profile paper --set ram=random-draw --set 'settings=[0.9]' "
         "--set 'cells=[[1.0, 1.0]]' --set lr_theta=" + repr(1e-3 * ((1 - 0.3) / 0.3 + 0.3))
         + " --seeds 0 1 2 --device cuda --max-minutes 8.5",
         _cvar("mnist", "paper", ram="random-draw", settings=[0.9], cells=[[1.0, 1.0]], seeds=[0, 1, 2],
               lr_theta=1e-3 * ((1 - 0.3) / 0.3 + 0.3)), 3,
         "diagnoses Fig. 3: does a larger step alone give Fed-CVaR-Avg's numbers?",
         6.7 / 10, "estimated from the stored runs (223 s for a batch of 20 runs of 4000 rounds on a GPU): a small "
         "batch is latency-bound, about 6.7 min for 10 runs rather than 3.7",
         _CVAR_SCALING_CPU_MIN, "measured: as the stored runs (" + _CVAR_SCALING_CPU_BASIS + ")",
         cpu_measured=True, data=("mnist",)),
    Owed("cvar-mnist-strong-risk", "003", "Figs. 3-4 at alpha = gamma = 0.1 (Table 1's best Fashion-MNIST cell), "
         "4000 rounds, seeds 0-2, the RAM of the page's stored runs (random draw), paired with its FedAvg runs",
         "book/cvar/mnist",
         "python -m flkit.sweep cvar mnist --profile paper --set ram=random-draw --set 'cells=[[0.1, 0.1]]' "
         "--seeds 0 1 2 --device cuda --max-minutes 8.5",
         _cvar("mnist", "paper", ram="random-draw", cells=[[0.1, 0.1]], seeds=[0, 1, 2]), 4,
         "diagnoses Figs. 3-4: does a stronger risk setting lift the rare classes?",
         223 / 60 / 20, "measured: as the stored random-draw runs (same shapes), 223 s for a batch of 20 on a GPU",
         _CVAR_SCALING_CPU_MIN, "measured: as the stored runs (" + _CVAR_SCALING_CPU_BASIS + ")",
         gpu_measured=True, cpu_measured=True, data=("mnist",)),
    Owed("hics-fmnist-s2", "004", "Table 1's FMNIST column, setting (2): random, pow-d, CS and HiCS-FL with the "
         "document's CNN, 200 rounds, 3 seeds (the 3 jobs of the four cheap methods)", "book/hics/fmnist",
         "python -m flkit.sweep hics paper --setting '(2)' --group main --device cuda --max-minutes 8",
         _hics_fmnist("s2"), 5,
         "decides Table 1's FMNIST speed-ups (HiCS-FL 2.5x over random) and Fig. 2 with the document's CNN",
         _HICS_H200_MIN["hics-fmnist-s2"] / 3,
         _HICS_H200_BASIS + f"this item's {_S2_TRAININGS:,} client trainings (2.9e7 samples) and 4.8e7 evaluation "
         "forwards; the samplers' own work is not counted",
         _hics_cpu_min(_S2_TRAININGS, _S2_EVALS, _S2_PROBES) / 3,
         "measured: 0.98 s per client training of the CNN on one thread of this CPU, one client at a time as "
         "the CNN trains on a CPU (results/benchmarks/hics_paper_estimate_cpu.csv; its clients trained together: "
         f"1.08 s) x {_S2_TRAININGS:,} trainings ({_S2_TRAININGS * _HICS_S_PER_CLIENT / 3600:.1f} h), and per "
         f"evaluation {_HICS_TEST_S:.2f} s for the 10,000 test images and {_HICS_LOSS_S:.2f} s for the training loss "
         "over the profile's sample of 10,000 training images (one thread's CPU time, in chunks of 64 images: "
         f"results/benchmarks/hics_eval_cpu.csv) x {_S2_EVALS:,} run-method rounds "
         f"({_S2_EVALS * (_HICS_TEST_S + _HICS_LOSS_S) / 3600:.1f} h), and {_HICS_PROBE_S:.2f} s for pow-d's loss "
         "probe, every client's loss at the global model (the 60,000 training images, same benchmark) x "
         f"{_S2_PROBES} rounds ({_S2_PROBES * _HICS_PROBE_S / 3600:.1f} h); "
         f"{_hics_cpu_min(_S2_TRAININGS, _S2_EVALS, _S2_PROBES) / 60:.1f} h in all (the first pieces paid on this "
         "CPU, before the no-grad pooling, ran at about 60 s a round, 10 h for the three jobs)",
         gpu_measured=True, cpu_measured=True, data=("fashion-mnist",), part_of="hics-fmnist-paper"),
    Owed("cvar-table1-paper", "003", "Table 1 at 6000 rounds, 5 seeds, 13 cells, the authors' RAM vector",
         "book/cvar/fmnist_table",
         "python -m flkit.sweep cvar fmnist --profile paper --device cuda --max-minutes 8.5",
         _cvar("fmnist", "paper"), 6, "decides Table 1 (CVaR of the accuracy per alpha, gamma) at the document's scale",
         114 / 65, "measured: 3.6 ms per batched step of the 65 stacked LeNets on an H100 "
         "(results/benchmarks/cvar_step_h100.log) x the exact local steps",
         _CVAR_TABLE1_CPU_H * 60 / 65, "extrapolated from cvar-mnist-authors-ram's measured 38.5 ms per run-step "
         "of the LeNet on one thread of this CPU over Table 1's 1,932,000 run-steps (cvar.planned_steps); the "
         "trial of the 65 stacked models (flkit.sweep cvar fmnist --profile paper --device cpu --estimate --threads 1) "
         "did not end within 8 minutes", gpu_measured=True, data=("fashion-mnist",)),
    Owed("hics-cifar10-paper", "004", "CIFAR-10 training comparison (FedProx mu = 0.1 with Adam, 50 clients, "
         "10 per round, 500 rounds): Figs. 3, 4(b), 15, 16 and Table 1's CIFAR-10 column (3 alpha settings x 5 "
         "methods x 3 seeds); in setting (2) random, pow-d, CS and DivFL run 1500 rounds to measure Table 1's "
         "898-1417 rounds to 0.6", "book/hics/index",
         "python -m flkit.sweep hics paper-cifar10 --device cuda --max-minutes 8", _hics_cifar("paper-cifar10"), 7,
         "decides Table 1's CIFAR-10 column (HiCS-FL 7.3x) on the document's data",
         149 / 21,
         "estimated: 720,000 client trainings of 2 epochs x 1,000 images = 1.44e9 samples, 120 min at ~200k "
         "samples/s (the engine benchmark's grouped rate for this CNN on an H100, results/benchmarks/engine_h100.csv: "
         "266k samples/s with 25 stacked models); evaluation: the 10,000 test images and the training loss on a "
         "sample of 10,000 training images every round of every run and method, 6.9e8 forward passes at a third of "
         "a training sample's cost, 19 min; pow-d's loss probe, 10 min; ~149 min in all",
         (1.44e9 * _HICS_MS_PER_SAMPLE + 6.9e8 * _HICS_MS_PER_FORWARD) / 6e4 / 21,
         "extrapolated from the HiCS-FL FMNIST CNN's measured 0.29 ms per training sample and 0.62 ms per "
         "evaluation forward on this CPU (a CIFAR CNN of similar cost per sample; not measured: no CIFAR-10 files "
         "here)",
         data=("cifar10",), needs="the CIFAR-10 files"),
    *[Owed(f"fedau-table-{d}", "000", f"Main table on {name} (the document's data set)", "book/fedau/table",
           f"python -m flkit.sweep fedau --profile paper --study table --set dataset={d} --device cuda "
           "--max-minutes 8", _fedau("table", dataset=d), rank,
           f"decides the FedAU main table's {name} column on the document's data",
           2 * _FEDAU_MIN, "estimated (3-channel CNNs, ~2x the Fashion-MNIST work) " + _FEDAU_GPU[len("estimated "):],
           2 * _FEDAU_CPU_MIN, _FEDAU_CPU + ", doubled for 3-channel inputs",
           data=(d,), needs=f"the {name} files")
      for rank, d, name in ((8, "cifar10", "CIFAR-10"), (10, "svhn", "SVHN"), (11, "cifar100", "CIFAR-100"),
                            (12, "cinic10", "CINIC-10"))],
    Owed("hics-cifar100-paper", "004", "CIFAR-100 training comparison (FedProx mu = 0.1 with Adam, 100 clients, "
         "20 per round, 1000 rounds): Figs. 5, 17 and Table 1's CIFAR-100 column (the document's 2 alpha settings "
         "x 5 methods x 3 seeds); DivFL in setting (2) runs 1400 rounds to measure Table 1's 1345 rounds to 0.3",
         "book/hics/index", "python -m flkit.sweep hics paper-cifar100 --device cuda --max-minutes 8",
         _hics_cifar("paper-cifar100"), 9, "decides Table 1's CIFAR-100 column on the document's data", 137 / 12,
         "estimated: 1,344,000 client trainings of 2 epochs x 500 images = 1.34e9 samples, 112 min at ~200k "
         "samples/s (as hics-cifar10-paper); evaluation: the 10,000 test images and the training loss on a sample "
         "of 10,000 training images every round of every run and method, 6.2e8 forward passes at a third of a "
         "training sample's cost, 17 min; pow-d's loss probe, 8 min; ~137 min in all",
         (1.34e9 * _HICS_MS_PER_SAMPLE + 6.2e8 * _HICS_MS_PER_FORWARD) / 6e4 / 12,
         "extrapolated from the HiCS-FL FMNIST CNN's measured 0.29 ms per training sample and 0.62 ms per "
         "evaluation forward on this CPU (not measured: no CIFAR-100 files here)", data=("cifar100",),
         needs="the CIFAR-100 files"),
    Owed("cvar-fig2-causes", "003", "Fig. 2's two quirks separated: zero init alone, double softmax alone, both, "
         "neither, the linear softmax model (with and without the quirks), 3 panels x 5 seeds x 2 methods",
         "book/cvar/synthetic_2d",
         "python -m flkit.sweep cvar synthetic_2d --profile paper --set "
         "'causes=[neither, zero-init, double-softmax, both, linear, linear-both]' --device cpu --max-minutes 8.5",
         _cvar("synthetic_2d", "paper", causes=["neither", "zero-init", "double-softmax", "both", "linear",
                                                "linear-both"]), 13,
         "explains Fig. 2's departure (which quirk of the authors' model causes it); the figure itself is stored",
         None, "no GPU timing: tiny models, a CPU is enough",
         1.0, "measured on one CPU thread: 10 stacked runs of panel a (4000 rounds) took 8.6 min, of panel c "
              "(25000 rounds) 10.7 min, about 1 min per run", cpu_measured=True, cpu=True),
    Owed("fedau-table-paper", "000", "Main table: seven methods x three patterns x 5 seeds, the authors' CNN, "
         "10,000 rounds (Fashion-MNIST stand-in)", "book/fedau/table",
         "python -m flkit.sweep fedau --profile paper --study table --device cuda --max-minutes 8",
         _fedau("table"), 14, "the method ranking on a stand-in data set (the document has no Fashion-MNIST "
         "column): compared by rank only", _FEDAU_MIN, _FEDAU_GPU, _FEDAU_CPU_MIN, _FEDAU_CPU,
         data=("fashion-mnist",)),
    Owed("hics-fmnist-paper", "004", "The rest of the Fashion-MNIST comparison with the document's CNN (it includes "
         "hics-fmnist-s2: owed while that is): settings "
         "(1) and (3) (Figs. 2, 4(a), 13, 14), DivFL (setting (2) for 600 rounds, Table 1's 478), random and "
         "HiCS-FL at ten times the learning rate (one seed)", "book/hics/fmnist",
         "python -m flkit.sweep hics paper --device cuda --max-minutes 8", _hics_fmnist("rest"), 15,
         "the figures' other settings and DivFL's 478 rounds: secondary to setting (2)",
         _HICS_H200_MIN["hics-fmnist-paper"] / 16,
         _HICS_H200_BASIS + f"the paper profile's {_ALL_TRAININGS:,} client trainings (3.1e8 samples; DivFL's "
         f"one-step gradient proxy counted as half a training), {_ALL_EVALS:,} run-method rounds of evaluation and "
         f"{_ALL_PROBES:,} rounds of pow-d runs' loss probe, less hics-fmnist-s2's; the samplers' own work is not "
         "counted (before this measurement the item was estimated at ~300k samples/s)",
         _hics_cpu_min(_ALL_TRAININGS - _S2_TRAININGS, _ALL_EVALS - _S2_EVALS, _ALL_PROBES - _S2_PROBES) / 16,
         "measured: 0.98 s per client training on one thread of this CPU (one client at a time, as the CNN "
         "trains on a CPU) x 116,000 trainings (DivFL's one-step gradient proxy: 50 full-batch gradients every "
         f"round), and {_HICS_TEST_S:.2f} + {_HICS_LOSS_S:.2f} s per evaluation (the test set and the training loss "
         "over the profile's sample of 10,000 training images, results/benchmarks/hics_eval_cpu.csv) x "
         f"{_ALL_EVALS - _S2_EVALS:,} run-method rounds, and {_HICS_PROBE_S:.2f} s per round of pow-d's loss probe "
         f"(all 60,000 training images) x {_ALL_PROBES - _S2_PROBES:,} rounds",
         gpu_measured=True, cpu_measured=True, data=("fashion-mnist",)),
    Owed("hics-fig6-paper", "004", "Fig. 6(a) (Assumption 1 on Fashion-MNIST: 250 clients, 500 rounds, every "
         "client in every round) with the document's CNN; the theory page runs logistic regression",
         "book/hics/theory", "python -m flkit.sweep hics-fig6 --model hics_fmnist_paper --device cuda --max-minutes 8",
         _hics_fig6, 16, "Fig. 6(a)'s scatter with the document's CNN: a check of Assumption 1, no number to match",
         6.0, "estimated: the 250 clients of a round train together (the engine's grouped path with per-client "
              "BatchNorm): 4,000 sequential steps (500 rounds x 8; 1,000,000 one client at a time) over 6e7 "
              "training samples, ~3.5 min at ~300k samples/s (the engine's rate for a small CNN on an H100, "
              "results/benchmarks/engine_h100.csv), plus 50 x 250 full-batch gradients one client at a time "
              "(~1 min) and 50 test evaluations: about 5 min",
         440.0,
         "extrapolated from the CNN's measured 0.98 s per client training of 2,400 samples on one thread (0.41 ms "
         "a sample, one client at a time as the CNN trains on a CPU, results/benchmarks/hics_paper_estimate_cpu.csv): "
         "6e7 training samples (6.8 h), 50 x 250 full-batch gradients on 240 images (3e6 samples, ~20 min) and 50 "
         "test evaluations (~5 min): about 7.3 h",
         data=("fashion-mnist",)),
    Owed("cvar-mnist-authors-ram", "003",
         "Sensitivity check of Figs. 3-4: 4000 rounds, 5 seeds, with the authors' 30-user "
         "RAM vector of their 2-D notebook (the document gives no MNIST vector; the authors' MNIST script draws one at "
         "random, as the page's stored runs do)", "book/cvar/mnist",
         "python -m flkit.sweep cvar mnist --profile paper --set ram=authors --device cuda --max-minutes 8.5",
         _cvar("mnist", "paper", ram="authors"), 17,
         "a labelled sensitivity check: does the RAM vector move the rare classes? (no basis in the document)",
         223 / 60 / 20, "measured: the stored random-draw runs, one batch of the same 20 runs' shapes took 223 s "
         "on a GPU (results/cvar/mnist manifests)",
         _CVAR_MNIST_CPU_H * 60 / 20, "measured: a 3-round trial projected over the exact local steps "
         "(flkit.sweep cvar mnist --profile paper --device cpu --estimate --threads 1): 7.57 h for the 20 runs",
         gpu_measured=True, cpu_measured=True, data=("mnist",), sensitivity=True),
    Owed("fedau-engine-bench", "000", "Engine throughput on the FedAU Fashion-MNIST CNN against the one-model "
         "proxy (target >= 0.8x), fp32 and bf16", "book/appendix/engine",
         "python benchmarks/bench_engine.py --models fedau_fmnist --M 100,400,1000 --paths grouped,proxy "
         "--out results/benchmarks/engine_fedau_fmnist_h100.csv --device cuda",
         lambda: (int((_REPO / "results/benchmarks/engine_fedau_fmnist_h100.csv").is_file()), 1), 18,
         "re-prices the FedAU items (nothing in a document to compare against)",
         5.0, "estimated: the CIFAR-10 CNN's benchmark took 5-8 min on an H100",
         0.0, "a GPU benchmark: nothing to pay on a CPU", limit=("--budget", 60.0)),
    Owed("fedau-cnn-spot", "000", "CNN spot-check of the main table: the authors' Fashion-MNIST CNN, 1,000 of "
         "10,000 rounds, Bernoulli participation, FedAU (K = inf and K = 50), MIFA, average participating and known p, "
         "2 seeds, the authors' step sizes (tuned for their CIFAR-10 CNN, not retuned)", "book/fedau/table",
         "python -m flkit.sweep fedau --profile cnn-spot --study table --device cpu --threads 1 --max-minutes 30",
         _fedau("table", profile="cnn-spot"), 19,
         "a labelled sensitivity check: does the model (the authors' CNN in place of logistic regression) change "
         "the stand-in's paired differences? (reduced: 1,000 of 10,000 rounds, 2 seeds, Bernoulli only)",
         None, "no GPU timing: paid on a CPU (one thread, a few hours)",
         _FEDAU_SPOT_CPU_H * 60 / 10, _FEDAU_SPOT_BASIS, cpu_measured=True, cpu=True, data=("fashion-mnist",),
         sensitivity=True),
    Owed("fedau-cutoff-paper", "000", "Cutoff K x minimum probability figure, the authors' CNN, 10,000 rounds "
         "(Fashion-MNIST stand-in)", "book/fedau/cutoff",
         "python -m flkit.sweep fedau --profile paper --study cutoff --device cuda --max-minutes 8",
         _fedau("cutoff"), 20, "nothing in the document to compare against (its cutoff x p_min image is not in "
         "the document)", _FEDAU_MIN, _FEDAU_GPU, _FEDAU_CPU_MIN, _FEDAU_CPU, data=("fashion-mnist",)),
    # the book's own comparison (Across the documents): no document's item depends on it
    Owed("across-rare-users", "book", "Under document 003's RAM on its MNIST split (Figs. 3 and 4): FedAvg, "
         "Fed-CVaR-Avg (alpha = gamma = 0.3), FedAU (K = 50 and no cutoff), known-rho weighting and MIFA, 4000 "
         "rounds, 5 seeds (60 runs)", "book/across/rare_users",
         "python -m flkit.sweep rare-users --profile paper --device cuda --max-minutes 8.5",
         _rare_users, 21,
         "decides the book's own comparison of the rules for unknown participation statistics under document 003's "
         "RAM (which rule lifts the rare classes); no document's item depends on it",
         223 / 60 / 20, "estimated from the Fed-CVaR-Avg chapter's stored runs of the same local training (223 s for "
         "a batch of 20 runs of 4000 rounds on a GPU); the server rules add little "
         "(MIFA's table: 30 x 118k floats a run)",
         _CVAR_SCALING_CPU_MIN,
         "measured: the chapter's runs of the same local training, " + _CVAR_SCALING_CPU_BASIS + "; a 6-round "
         "trial of this item's own 18 runs of the reduced profile (flkit.sweep rare-users) took 178 s on one "
         "thread here, 1.65 s a run-round, with both cores shared by 6 other processes (load 7)",
         cpu_measured=True, data=("mnist",)),
]


def ledger() -> list[Owed]:
    """The items with runs still owed, most valuable first."""
    return [it for it in sorted(ITEMS, key=lambda it: it.value) if (lambda p: p[0] < p[1])(it.progress())]


def unpaid_ids() -> set[str]:
    """The ids still owed: the ledger's, and the item each of them is ``part_of`` (an item is owed while any
    of its parts is: the scorecard's Table 1 FMNIST cells name hics-fmnist-paper, which includes hics-fmnist-s2)."""
    items = ledger()
    return {it.id for it in items} | {it.part_of for it in items if it.part_of}


def frame(items: list[Owed] | None = None) -> pd.DataFrame:
    """The ledger as a table, most valuable first (``value`` ascending): gpu_minutes and its ``basis``
    ("measured" on a GPU, else "estimated"), cpu_hours (one thread of this CPU) and ``cpu_basis``
    ("measured" here, else "extrapolated"); ``estimate`` and ``cpu_estimate`` say from what."""
    rows = []
    for it in ITEMS if items is None else items:
        done, total = it.runs()
        if done >= total:
            continue
        left = total - done
        gpu = None if it.gpu_min is None else left * it.gpu_min
        cpu_h = left * it.cpu_min / 60
        rows.append(dict(id=it.id, value=it.value, document=it.document, item=it.item, page=it.page,
                         runs_done=f"{done} of {total}",
                         gpu_minutes=0 if gpu is None else round(gpu, 1),
                         basis="" if gpu is None else "measured" if it.gpu_measured else "estimated",
                         cpu_hours=round(cpu_h, 2),
                         cpu_basis="" if it.cpu_min <= 0 else "measured" if it.cpu_measured else "extrapolated",
                         cpu_minutes=round(cpu_h * 60) if it.cpu else 0,
                         needs=it.needs or ("one CPU thread, no GPU" if it.cpu else
                                            "a GPU, or one CPU thread (--pay --device cpu)" if it.cpu_measured
                                            else "a GPU"),
                         why=it.why, command=it.command, estimate=it.basis, cpu_estimate=it.cpu_basis))
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    return df.sort_values("value", kind="stable").reset_index(drop=True)


# ------------------------------------------------------------------------------------------------ paying
def payable(item: Owed, device: str) -> tuple[bool, str]:
    """(whether ``--pay --device device`` takes ``item`` without ``--only``, why not). cuda: the GPU items
    (not the CPU ones, which would waste a GPU window); cpu: the CPU items and the items whose CPU price
    was measured on this CPU. Either way its data must be here."""
    if device == "cuda" and item.cpu:
        return False, "a CPU item (pay it on a CPU, or name it with --only)"
    if device == "cpu" and not (item.cpu or item.cpu_measured):
        return False, "its CPU price is extrapolated, not measured (name it with --only to pay it anyway)"
    if item.cpu_min <= 0 and device == "cpu":
        return False, "nothing to pay on a CPU"
    if not item.data_here():
        return False, f"needs {item.needs or ', '.join(item.data)}"
    return True, ""


def _results_root() -> Path:
    return Path(os.environ.get("FLKIT_RESULTS") or _REPO / "results")


def _snapshot(root: Path) -> dict[Path, tuple[int, int]]:
    """{file: (size, mtime_ns)} under root (temporary files of writers left out)."""
    out = {}
    if root.is_dir():
        for p in root.rglob("*"):
            if p.is_file() and not p.name.endswith(".tmp"):
                st = p.stat()
                out[p] = (st.st_size, st.st_mtime_ns)
    return out


def _show(p: Path) -> str:
    try:
        return str(p.relative_to(_REPO))
    except ValueError:
        return str(p)


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def report_files(before: dict, after: dict, root: Path, out=print) -> list[Path]:
    """Print what a pay changed under ``root``: the files to commit (new or changed: results, manifests and
    checkpoints, each with its size; over ``FILE_CAP`` flagged), the files deleted (checkpoints of runs that
    completed), and the ``git add`` line. Scratch (``tmp/``, git-ignored) is listed apart. Returns the new or
    changed files."""
    changed = sorted(p for p, v in after.items() if before.get(p) != v)
    gone = sorted(p for p in before if p not in after)
    if not changed and not gone:
        out("no files changed")
        return changed
    scratch = lambda p: (root / "tmp") in p.parents  # noqa: E731
    keep = [p for p in changed if not scratch(p)]
    tmp_files = [p for p in changed if scratch(p)]
    for title, files in (("to commit", keep), ("scratch (results/tmp, git-ignored)", tmp_files)):
        if files:
            out(f"{title}:")
            for p in files:
                size = after[p][0]
                what = " (checkpoint: commit while its run is unfinished)" if "checkpoints" in p.parts else ""
                flag = f"  OVER {FILE_CAP // 2**20} MiB: split it before committing" if size > FILE_CAP else ""
                out(f"  {_show(p)}  {_size(size)}{what}{flag}")
    if gone:
        out("deleted (finished runs' checkpoints; git add -A records it):")
        for p in gone:
            out(f"  {_show(p)}")
    dirs = sorted({_show(p.parent) for p in keep + [g for g in gone if not scratch(g)]})
    if dirs:
        out("git add -A -- " + " ".join(shlex.quote(d) for d in dirs))
    return changed


def pay(minutes: float, device: str, only: str | None = None, *, piece_minutes: float | None = None,
        max_pieces: int | None = None, threads: int | None = 1, out=print) -> int:
    """Pay the most valuable payable items for at most ``minutes`` (module docstring); the exit status."""
    t0 = time.time()
    deadline = t0 + 60 * minutes
    margin = max(0.25, 0.05 * minutes)           # minutes kept for the last piece's exit and the report
    cap = piece_minutes or PIECE_MINUTES[device]
    least = min(1.0, cap)                         # a piece shorter than this is not started
    root = _results_root()
    before = _snapshot(root)
    failed: dict[str, str] = {}
    pieces, code = 0, 0

    def candidates() -> list[Owed]:
        items = [it for it in sorted(ITEMS, key=lambda it: it.value) if it.id not in failed]
        if only is not None:
            items = [it for it in items if it.id == only]
        else:
            items = [it for it in items if payable(it, device)[0]]
        return [it for it in items if (lambda p: p[0] < p[1])(it.runs())]

    while True:
        todo = candidates()
        if not todo:
            break
        left = (deadline - time.time()) / 60 - margin
        if left < least or (max_pieces is not None and pieces >= max_pieces):
            code = EXIT_UNFINISHED
            break
        it = todo[0]
        piece = min(cap, left)
        argv = it.argv(device, piece, threads if device == "cpu" else None)
        done, total = it.runs()
        out(f"[{it.id}] value {it.value}, {done} of {total} runs stored; piece of {piece:.2f} min:\n    "
            + " ".join(shlex.quote(a) for a in argv), flush=True)
        pieces += 1
        tic = time.time()
        try:
            rc = subprocess.run(argv, cwd=_REPO, timeout=max(1.0, deadline - time.time() - 5)).returncode
        except subprocess.TimeoutExpired:
            out(f"[{it.id}] killed at the pay's deadline (its last checkpoint stands)")
            code = EXIT_UNFINISHED
            break
        done2, _ = it.runs()
        out(f"[{it.id}] exit {rc} after {(time.time() - tic) / 60:.2f} min; {done2} of {total} runs stored", flush=True)
        if rc == EXIT_UNFINISHED:
            continue
        if rc != 0:
            failed[it.id] = f"exit status {rc}"
        elif done2 < total:
            failed[it.id] = "the command finished but the ledger still counts runs owed"
    for k, why in failed.items():
        out(f"FAILED [{k}]: {why}")
    report_files(before, _snapshot(root), root, out=out)
    if failed:
        return 1
    left_items = [it.id for it in candidates()]
    if left_items and code == 0:
        code = EXIT_UNFINISHED
    out(("work left: " + ", ".join(left_items) + " (call again)") if left_items else "nothing payable is left")
    return code if left_items else 0


class _OneLine(argparse.ArgumentParser):
    def error(self, message):   # one line, exit status 2
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return v


def main(argv=None) -> int:
    ap = _OneLine(prog="python -m flkit.owed", description="The runs still to run at a document's scale, most valuable "
                                                             "first.")
    ap.add_argument("--commands", action="store_true", help="print only the commands")
    ap.add_argument("--pay", action="store_true", help="pay the most valuable payable items (module docstring)")
    ap.add_argument("--minutes", type=_positive, default=None, help="with --pay: stop cleanly before this")
    ap.add_argument("--device", choices=["cpu", "cuda"], default=None, help="with --pay: cpu or cuda")
    ap.add_argument("--only", default=None, metavar="ID", help="with --pay: this item only (any device)")
    ap.add_argument("--piece-minutes", type=_positive, default=None,
                    help="with --pay: the longest piece (default 8 on cuda, 30 on cpu)")
    ap.add_argument("--max-pieces", type=int, default=None, help="with --pay: stop after this many pieces")
    ap.add_argument("--threads", type=int, default=1, help="with --pay --device cpu: torch threads (default 1)")
    args = ap.parse_args(argv)
    if args.pay:
        if args.minutes is None or args.device is None:
            ap.error("--pay needs --minutes N and --device cpu|cuda")
        if args.only is not None and args.only not in {it.id for it in ITEMS}:
            ap.error(f"--only {args.only!r}: no such item; known: {', '.join(it.id for it in ITEMS)}")
        if args.max_pieces is not None and args.max_pieces < 1:
            ap.error(f"--max-pieces must be >= 1, got {args.max_pieces}")
        if args.threads < 1:
            ap.error(f"--threads must be >= 1, got {args.threads}")
        if args.device == "cuda":
            import torch
            if not torch.cuda.is_available():
                ap.error("--device cuda: this machine has no CUDA device")
        if args.only is not None:
            it = next(i for i in ITEMS if i.id == args.only)
            if not it.data_here():
                ap.error(f"--only {it.id}: needs {it.needs or ', '.join(it.data)}, not found here")
        return pay(args.minutes, args.device, args.only, piece_minutes=args.piece_minutes,
                   max_pieces=args.max_pieces, threads=args.threads,
                   out=lambda *a, **k: print(*a, **k))
    for name in ("minutes", "device", "only", "piece_minutes", "max_pieces"):
        if getattr(args, name) is not None:
            ap.error(f"--{name.replace('_', '-')} goes with --pay")
    df = frame()
    if args.commands:
        print("\n".join(df.command))
        return 0
    if df.empty:
        print("nothing is still to run at the documents' scale")
        return 0
    for _, r in df.iterrows():
        gpu = (f"{r.gpu_minutes:.0f} GPU minutes ({r.basis})" if r.basis else "no GPU")
        cpu = f"{r.cpu_hours:.1f} CPU hours ({r.cpu_basis})" if r.cpu_basis else "no CPU work"
        print(f"[{r.id}] value {r.value}, document {r.document}: {r['item']}\n    why: {r.why}\n"
              f"    {r.runs_done} runs stored; left: {gpu}, {cpu}; needs "
              f"{r.needs}\n    GPU: {r.estimate}\n    CPU: {r.cpu_estimate}\n    {r.command}\n")
    print(f"total: about {df.gpu_minutes.sum():.0f} GPU minutes "
          f"({df.gpu_minutes[df.basis == 'measured'].sum():.0f} measured) and {df.cpu_hours.sum():.0f} hours of "
          f"one CPU thread ({df.cpu_hours[df.cpu_basis == 'measured'].sum():.0f} measured)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
