"""The owed-work ledger: runs at a document's scale that the book has not executed yet, each with the
command that completes it, its progress (counted from the results stores, never typed in) and an
estimate of the GPU minutes left. Whoever has a GPU pays the largest items first::

    python -m flkit.owed            # the ledger, largest first
    python -m flkit.owed --commands # only the commands, one per line

Estimates come from measured throughput (the engine benchmark on an H100, ``results/benchmarks/``) and
are stated per item; progress counts stored runs, so a partly paid item shrinks as its runs land.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

_REPO = Path(__file__).resolve().parents[1]

__all__ = ["Owed", "ledger", "frame", "main"]


@dataclass(frozen=True)
class Owed:
    """One owed item: `runs` () -> (done, total) counted from the store; `minutes_per_run` the estimate (GPU
    minutes, or minutes of one CPU thread when `cpu`); `needs` what besides a GPU it needs (data that cannot be
    had where the book is built)."""
    id: str
    document: str
    item: str
    page: str
    command: str
    runs: Callable[[], tuple[int, int]]
    minutes_per_run: float
    basis: str
    needs: str = ""
    cpu: bool = False          # paid on one CPU thread: no GPU needed

    def progress(self) -> tuple[int, int, float]:
        done, total = self.runs()
        return done, total, (total - done) * self.minutes_per_run


def _fedau(study: str, **overrides) -> Callable[[], tuple[int, int]]:
    def count():
        from flkit.papers.fedau import table
        s = table.profile("paper", **overrides)
        store = table.store_for(s)
        cs = table.configs(s, study=study)
        if study == "cutoff":             # the runs the table already has are not owed twice
            done_table = {repr(sorted(c.items())) for c in table.configs(s)}
            cs = [c for c in cs if repr(sorted(c.items())) not in done_table]
        return sum(store.done(c) for c in cs), len(cs)
    return count


def _hics_fmnist() -> tuple[int, int]:
    from flkit import results
    from flkit.papers.hics import experiments
    store = results.book_store("hics")
    js = experiments.jobs(experiments.profile("paper"))
    return sum(store.done(j) for j in js), len(js)


def _hics_cifar(name: str) -> Callable[[], tuple[int, int]]:
    def count():
        from flkit import results
        from flkit.papers.hics import experiments
        store = results.book_store(experiments.store_name(name))
        js = experiments.jobs(experiments.profile(name))
        return sum(store.done(j) for j in js), len(js)
    return count


def _hics_fig6() -> tuple[int, int]:
    from flkit import results
    from flkit.papers.hics import dissimilarity
    c = dissimilarity.fig6_config(dict(dissimilarity.FIG6, model="hics_fmnist_paper"))
    return int(results.book_store("hics").done(c)), 1


def _cvar(experiment: str, profile: str, **overrides) -> Callable[[], tuple[int, int]]:
    def count():
        from flkit.papers import cvar
        s = cvar.settings(experiment, profile, **overrides)   # ram: the authors' vector (the default)
        store = cvar.store_for(s)
        cs = cvar.run_configs(s)
        return sum(store.done(c) for c in cs), len(cs)
    return count


# FedAU: 35 runs of a pattern train together; the FedAU CIFAR-10 CNN trains at ~285k samples/s with 400
# stacked models on an H100 (results/benchmarks/engine_h100.csv, fp32, grouped); a run is 10,000 rounds x
# ~26 clients x 5 x 16 samples = 2.1e7 samples (74 s) plus evaluations on 70k images every 50 rounds
# (~15 s): about 1.5 min per run.
_FEDAU_MIN = 1.5
ITEMS = [
    Owed("fedau-table-paper", "000", "Main table: seven methods x three patterns x 5 seeds, the authors' CNN, "
         "10,000 rounds (Fashion-MNIST stand-in)", "book/fedau/table",
         "python scripts/fedau_sweep.py --profile paper --study table --device cuda --max-minutes 9",
         _fedau("table"), _FEDAU_MIN, "engine benchmark, FedAU CNN on an H100"),
    Owed("fedau-cutoff-paper", "000", "Cutoff K x minimum probability figure, the authors' CNN, 10,000 rounds "
         "(Fashion-MNIST stand-in)", "book/fedau/cutoff",
         "python scripts/fedau_sweep.py --profile paper --study cutoff --device cuda --max-minutes 9",
         _fedau("cutoff"), _FEDAU_MIN, "engine benchmark, FedAU CNN on an H100"),
    *[Owed(f"fedau-table-{d}", "000", f"Main table on {name} (the document's data set)", "book/fedau/table",
           f"python scripts/fedau_sweep.py --profile paper --study table --set dataset={d} --device cuda "
           "--max-minutes 9", _fedau("table", dataset=d), 2 * _FEDAU_MIN,
           "engine benchmark (3-channel CNNs, ~2x the Fashion-MNIST work)", needs=f"the {name} files")
      for d, name in (("cifar10", "CIFAR-10"), ("svhn", "SVHN"), ("cifar100", "CIFAR-100"), ("cinic10", "CINIC-10"))],
    Owed("fedau-engine-bench", "000", "Engine throughput on the FedAU Fashion-MNIST CNN against the one-model "
         "proxy (target >= 0.8x), fp32 and bf16", "book/appendix/engine",
         "python benchmarks/bench_engine.py --models fedau_fmnist --M 100,400,1000 --paths grouped,proxy "
         "--out results/benchmarks/engine_fedau_fmnist_h100.csv",
         lambda: (int((_REPO / "results/benchmarks/engine_fedau_fmnist_h100.csv").is_file()), 1), 5.0,
         "the CIFAR-10 CNN's benchmark took 5-8 min on an H100"),
    # 18 runs (9 of the four cheap methods, 9 of DivFL); DivFL's 3 runs of setting (2) train 600 rounds.
    Owed("hics-fmnist-paper", "004", "Fashion-MNIST training comparison with the document's CNN: Fig. 2, "
         "Figs. 4(a)/13/14 (200 rounds), Table 1's FMNIST column (3 settings x 5 methods x 3 seeds); DivFL in "
         "setting (2) runs 600 rounds to measure Table 1's 478 (beyond the figures' 200); random and HiCS-FL at "
         "ten times the learning rate (one seed)", "book/hics/fmnist",
         "python scripts/hics_sweep.py paper --device cuda", _hics_fmnist, 41 / 19,
         "training: 203,000 client trainings of 2 epochs x ~1,200 images = 4.9e8 samples (random, pow-d, CS, "
         "HiCS-FL: 5 clients x 200 rounds x 9 runs each, and random, HiCS-FL once more at the larger learning "
         "rate; DivFL trains all 50 clients every round, plus the 5 "
         "selected: 55 x (6 runs x 200 + 3 runs x 600 rounds); the 400 extra rounds x 3 seeds add 1.6e8 to the "
         "former 3.2e8), 27 min at ~300k samples/s, the engine's rate for a small CNN on an H100 "
         "(results/benchmarks/engine_h100.csv); evaluation: 60,000 + 10,000 images each round of each run and "
         "method, 7.5e8 forward passes at about a third of a training sample's cost, 14 min; ~41 min in all"),
    # CIFAR (document 004, Sec. 4.1, appendix 6.1): FedProx with Adam, the document's 3-conv CNN; the same
    # kind of count as hics-fmnist-paper, at ~200k samples/s: the engine benchmark's grouped rate for this
    # CNN on an H100 is 266k samples/s with 25 stacked models and 379k with 100 (plain SGD, B = 64,
    # results/benchmarks/engine_h100.csv); a round stacks K = 10-20 (DivFL's probe 60-120), and Adam + the
    # prox term add work. Evaluation: 60,000 images every round of every run and method, pow-d's probe
    # 50,000 every pow-d round, at a third of a training sample's cost.
    Owed("hics-cifar10-paper", "004", "CIFAR-10 training comparison (FedProx mu = 0.1 with Adam, 50 clients, "
         "10 per round, 500 rounds): Figs. 3, 4(b), 15, 16 and Table 1's CIFAR-10 column (3 alpha settings x 5 "
         "methods x 3 seeds); in setting (2) random, pow-d, CS and DivFL run 1500 rounds to measure Table 1's "
         "898-1417 rounds to 0.6", "book/hics/index",
         "python scripts/hics_sweep.py paper-cifar10 --device cuda", _hics_cifar("paper-cifar10"), 188 / 21,
         "training: 720,000 client trainings of 2 epochs x 1,000 images = 1.44e9 samples (random, pow-d, CS, "
         "HiCS-FL: 10 clients a round, 500 rounds in settings (1) and (3), 1500 in setting (2) but HiCS-FL's 500; "
         "DivFL trains all 50 clients every round plus the 10 selected: 60 x (6 runs x 500 + 3 runs x 1500 "
         "rounds)), 120 min at ~200k samples/s (the engine benchmark's grouped rate for this CNN on an H100, "
         "results/benchmarks/engine_h100.csv: 266k samples/s with 25 stacked models); evaluation: 60,000 images "
         "in each of 34,500 run-method rounds, 2.1e9 forward passes at a third of a training sample's cost, "
         "58 min; pow-d's loss probe, 50,000 images in 7,500 rounds, 10 min; ~188 min in all",
         needs="the CIFAR-10 files"),
    Owed("hics-cifar100-paper", "004", "CIFAR-100 training comparison (FedProx mu = 0.1 with Adam, 100 clients, "
         "20 per round, 1000 rounds): Figs. 5, 17 and Table 1's CIFAR-100 column (the document's 2 alpha settings "
         "x 5 methods x 3 seeds); DivFL in setting (2) runs 1400 rounds to measure Table 1's 1345 rounds to 0.3",
         "book/hics/index", "python scripts/hics_sweep.py paper-cifar100 --device cuda",
         _hics_cifar("paper-cifar100"), 172 / 12,
         "training: 1,344,000 client trainings of 2 epochs x 500 images = 1.34e9 samples (random, pow-d, CS, "
         "HiCS-FL: 20 clients a round, 1000 rounds, 2 settings x 3 seeds; DivFL trains all 100 clients every "
         "round plus the 20 selected: 120 x (3 runs x 1000 + 3 runs x 1400 rounds)), 112 min at ~200k samples/s "
         "(as hics-cifar10-paper); evaluation: 60,000 images in each of 31,200 run-method rounds, 1.9e9 forward "
         "passes at a third of a training sample's cost, 52 min; pow-d's loss probe, 50,000 images in 6,000 "
         "rounds, 8 min; ~172 min in all", needs="the CIFAR-100 files"),
    Owed("hics-fig6-paper", "004", "Fig. 6(a) (Assumption 1 on Fashion-MNIST: 250 clients, 500 rounds, every "
         "client in every round) with the document's CNN; the theory page runs logistic regression",
         "book/hics/theory", "python scripts/hics_fig6.py --model hics_fmnist_paper --device cuda", _hics_fig6, 30.0,
         "not measured on a GPU: 500 rounds x 250 clients x 8 SGD steps, one client at a time (the CNN has "
         "batch norm, so not the batched path), at ~1.5 ms a step, plus 50 x 250 full-batch gradients; about "
         "5 min a round on one CPU thread"),
    Owed("cvar-table1-paper", "003", "Table 1 at 6000 rounds, 5 seeds, 13 cells, the authors' RAM vector",
         "book/cvar/fmnist_table",
         "python scripts/cvar_sweep.py fmnist --profile paper --device cuda --max-minutes 8.5",
         _cvar("fmnist", "paper"), 114 / 65, "3.6 ms per batched step of the 65 stacked LeNets on an H100 "
         "(results/benchmarks/cvar_step_h100.log)"),
    # The pages' stored image runs used a random draw of 27 of the 30 RAM probabilities (ram="random-draw");
    # cvar-table1-paper (above) and this item compute the document's scale with the authors' vector
    # (cvar.rho_authors_k30, the default).
    Owed("cvar-mnist-authors-ram", "003", "Figs. 3-4 at 4000 rounds, 5 seeds, with the authors' RAM vector "
         "(the page shows the random-draw runs)", "book/cvar/mnist",
         "python scripts/cvar_sweep.py mnist --profile paper --device cuda --max-minutes 8.5",
         _cvar("mnist", "paper"), 223 / 60 / 20, "the stored random-draw runs: one batch of the 20 runs took 223 s "
         "on a GPU (results/cvar/mnist manifests); about 27 min per run on this CPU"),
    # Diagnosis of Figs. 3-4 (the rare classes stay near 50 %): the authors' input scaling, and a longer horizon.
    Owed("cvar-mnist-input-scaling", "003", "Figs. 3-4 with the authors' input scaling (training on raw 0-255 "
         "pixels, test on 0-1: setting input_scaling=authors), 4000 rounds, 5 seeds, the authors' RAM vector; "
         "compare with cvar-mnist-authors-ram", "book/cvar/mnist",
         "python scripts/cvar_sweep.py mnist --profile paper --set input_scaling=authors --device cuda "
         "--max-minutes 8.5",
         _cvar("mnist", "paper", input_scaling="authors"), 223 / 60 / 20,
         "as cvar-mnist-authors-ram (same runs, scaled inputs): 223 s for a batch of 20 on a GPU"),
    Owed("cvar-mnist-horizon", "003", "Fig. 3 (r = 90 %) extended to 8000 rounds, 5 seeds, the RAM of the page's "
         "stored runs (random draw): are the rare-class curves still rising at round 4000?", "book/cvar/mnist",
         "python scripts/cvar_sweep.py mnist --profile paper --set ram=random-draw --set 'settings=[0.9]' "
         "--rounds 8000 --device cuda --max-minutes 8.5",
         _cvar("mnist", "paper", ram="random-draw", settings=[0.9], rounds=8000), 2 * 223 / 60 / 20,
         "twice the rounds of the stored runs (223 s for a batch of 20 runs of 4000 rounds on a GPU)"),
    Owed("cvar-fig2-causes", "003", "Fig. 2's two quirks separated: zero init alone, double softmax alone, both, "
         "neither, the linear softmax model (with and without the quirks), 3 panels x 5 seeds x 2 methods",
         "book/cvar/synthetic_2d",
         "python scripts/cvar_sweep.py synthetic_2d --profile paper --set "
         "'causes=[neither, zero-init, double-softmax, both, linear, linear-both]' --device cpu --max-minutes 8.5",
         _cvar("synthetic_2d", "paper", causes=["neither", "zero-init", "double-softmax", "both", "linear",
                                                "linear-both"]), 1.0,
         "measured on one CPU thread: 10 stacked runs of panel a (4000 rounds) took 8.6 min, of panel c (25000 "
         "rounds) 10.7 min, about 1 min per run; tiny models, no GPU timing (a CPU is enough)", cpu=True),
]


def ledger() -> list[Owed]:
    """The items with runs still owed."""
    return [it for it in ITEMS if it.progress()[0] < it.progress()[1]]


def frame(items: list[Owed] | None = None) -> pd.DataFrame:
    """The ledger as a table, largest estimate first."""
    rows = []
    for it in ITEMS if items is None else items:
        done, total, minutes = it.progress()
        if done < total:
            rows.append(dict(id=it.id, document=it.document, item=it.item, page=it.page,
                             runs_done=f"{done} of {total}", gpu_minutes=0 if it.cpu else round(minutes),
                             cpu_minutes=round(minutes) if it.cpu else 0,
                             needs=it.needs or ("one CPU thread, no GPU" if it.cpu else "a GPU"),
                             command=it.command, estimate=it.basis))
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    # what a GPU alone can pay comes first, largest first; then what a CPU pays; then what also needs data
    group = (df.needs != "a GPU").astype(int) + (df.cpu_minutes == 0) * (df.needs != "a GPU")
    order = df.assign(_group=group, _minutes=df.gpu_minutes + df.cpu_minutes)
    order = order.sort_values(["_group", "_minutes"], ascending=[True, False], kind="stable")
    return order.drop(columns=["_group", "_minutes"]).reset_index(drop=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="The owed-work ledger, largest first.")
    ap.add_argument("--commands", action="store_true", help="print only the commands")
    args = ap.parse_args(argv)
    df = frame()
    if args.commands:
        print("\n".join(df.command))
        return 0
    if df.empty:
        print("nothing is owed")
        return 0
    for _, r in df.iterrows():
        left = f"{r.cpu_minutes} CPU minutes" if r.cpu_minutes else f"{r.gpu_minutes} GPU minutes"
        print(f"[{r.id}] document {r.document}: {r['item']}\n    {r.runs_done} runs stored, about {left} "
              f"left ({r.estimate}); needs {r.needs}\n    {r.command}\n")
    print(f"total: about {df.gpu_minutes.sum()} GPU minutes and {df.cpu_minutes.sum()} minutes of one CPU thread")
    return 0


if __name__ == "__main__":
    sys.exit(main())
