"""FedAU's minibatch index generation per round, with and without de-duplicating (seed, client) pairs
(flkit.tasks.EngineTask.dedup, issue 26): operator calls ("kernels" on a GPU), host synchronisations and wall time
of one round's draw, on the CPU.

    .venv/bin/python benchmarks/bench_fedau_batches.py                 # 1, 3, 7 methods x 5 seeds, ~20 s
    .venv/bin/python benchmarks/bench_fedau_batches.py --methods 7 --rounds 3 --out /tmp/fedau_batches.csv

The setting is the FedAU table's (flkit.papers.fedau.table, profile "paper"): 250 clients per seed (a
Dirichlet split of 60,000 labels), 5 seeds, each client available with probability 0.1 in a round, shared by
the methods of a seed (the same mask per seed), 5 local steps of batch 16 (``EngineTask(steps=5)``). The
model does not matter (only indices are drawn). Counted with ``torch.profiler`` over ``EngineTask._batches``
for the round's (run, client) pairs, as ``client_updates`` calls it: ``ops`` every ATen operator call,
``syncs`` the ``aten::_local_scalar_dense`` calls (``int(t)``, ``t.item()``: on a GPU each one waits for
the device). Without de-duplication both grow with the number of stacked runs (methods x seeds); with it
they depend on the seeds and clients only.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flkit import models, partition  # noqa: E402
from flkit.tasks import EngineTask  # noqa: E402


def task_and_pairs(methods: int, seeds=(1, 2, 3, 4, 5), clients: int = 250, p: float = 0.1, dedup: bool = True):
    y = np.arange(60_000) % 10
    splits = {s: partition.fedau_dirichlet(y, clients, 0.1, seed=s).indices for s in seeds}
    x = torch.zeros(60_000, 1, 1, 1)
    task = EngineTask(models.logreg(1, 10), x, torch.as_tensor(y), splits, x[:10], torch.as_tensor(y[:10]),
                      batch_size=16, steps=5, split_by="seed", dedup=dedup)
    rng = np.random.default_rng(0)
    mask = {s: rng.random(clients) < p for s in seeds}
    run_seeds = [s for _ in range(methods) for s in seeds]            # rows: method-major, as fl.run's
    active = torch.as_tensor(np.stack([mask[s] for s in run_seeds]))
    return task, run_seeds, active


def one_round(task: EngineTask, run_seeds, active, t: int):
    pairs = active.nonzero()
    rr, cc = pairs[:, 0].tolist(), pairs[:, 1].tolist()
    seeds = [run_seeds[r] for r in rr]
    return task._batches(seeds, cc, t, seeds)


def measure(methods: int, dedup: bool, rounds: int) -> dict:
    from torch.profiler import ProfilerActivity, profile
    task, run_seeds, active = task_and_pairs(methods, dedup=dedup)
    one_round(task, run_seeds, active, 0)                             # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for t in range(1, rounds + 1):
            one_round(task, run_seeds, active, t)
    names = [e.name for e in prof.events() if e.name.startswith("aten::")]
    tic = time.perf_counter()
    for t in range(1, rounds + 1):
        one_round(task, run_seeds, active, t)
    wall = (time.perf_counter() - tic) / rounds
    return dict(runs=len(run_seeds), pairs=int(active.sum()), dedup=dedup, ops=len(names) / rounds,
                syncs=names.count("aten::_local_scalar_dense") / rounds, ms=1e3 * wall)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="1,3,7", help="stacked methods (x 5 seeds each), comma-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="CSV file to write")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [measure(int(m), d, args.rounds) for m in args.methods.split(",") for d in (False, True)]
    print(f"{'runs':>5} {'pairs':>6} {'dedup':>6} {'ops/round':>10} {'syncs/round':>12} {'ms/round':>9}")
    for r in rows:
        print(f"{r['runs']:>5} {r['pairs']:>6} {str(r['dedup']):>6} {r['ops']:>10.0f} {r['syncs']:>12.0f} "
              f"{r['ms']:>9.1f}")
    if args.out:
        import pandas as pd
        pd.DataFrame(rows).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
