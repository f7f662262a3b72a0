"""What one round's evaluation of the HiCS-FL Fashion-MNIST CNN costs on this CPU (one thread): the test set
("test": 10,000 images, loss and accuracy, what Fig. 2 and Table 1 read every round), the training loss over the
``paper`` profile's class-stratified sample ("sample": 10,000 training images) and over every training
image ("train": 60,000), for the rows of one stored job of the ``paper`` profile evaluated together (the four
cheap methods of a seed: 4 models), at each evaluation batch size asked for.

    taskset -c 0 .venv/bin/python benchmarks/bench_hics_eval.py --repeats 2 --out results/benchmarks/hics_eval_cpu.csv
    taskset -c 0 .venv/bin/python benchmarks/bench_hics_eval.py --sets test --batch-sizes 64 --pools fast,native \
        --repeats 3 --out results/benchmarks/hics_pool_ab_cpu.csv

Setting: ``flkit.papers.hics.common.make_task`` with the ``paper`` profile (setting (2), seed 0), float32; the
models are ``rows`` initial models (seeds 0..rows-1: the cost does not depend on the weights); ``engine.evaluate``
as ``EngineTask.metrics`` calls it. Each measurement is one call after a warm-up call on 1,024 images; the batch
sizes take turns within a repeat. ``cpu_s``: this process's CPU time (the measure to read on a shared core, where
the wall time also counts the waiting); ``per_model_cpu_s``: cpu_s / rows. ``--pools fast,native`` times, in turns
within each repeat, the models' pooling (:class:`flkit.models.MaxPool2d`, the default) against ``nn.MaxPool2d``'s
own forward: the ratio of the two in one run is the speed-up of the pooling alone (column ``pool``). flkit.owed
prices the HiCS-FL items with the smallest per-model CPU time of each set at the batch size the CNN evaluates with
on a CPU (``flkit.papers.hics.common.eval_batch``).
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flkit import engine, models  # noqa: E402
from flkit.papers.hics import common, fmnist  # noqa: E402


def main(argv=None) -> int:
    import pandas as pd

    from flkit import datasets
    from flkit.numerics import platform
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4, help="models evaluated together (a main job: 4 methods)")
    ap.add_argument("--batch-sizes", default="1024,64", help="evaluation batch sizes, comma-separated")
    ap.add_argument("--sets", default="test,sample,train", help="which of test, sample, train to time")
    ap.add_argument("--pools", default="fast", help="fast (flkit.models.MaxPool2d), native (nn.MaxPool2d), or both")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default=None, help="CSV of the rows")
    args = ap.parse_args(argv)
    pools = {"fast": models.MaxPool2d.forward, "native": nn.MaxPool2d.forward}
    bad = [p for p in args.pools.split(",") if p not in pools]
    if bad:
        ap.error(f"--pools: {bad} not in {list(pools)}")
    torch.set_num_threads(1)
    data = datasets.load("fashion-mnist")
    cfg = fmnist.profile("paper")
    part = common.make_partition(data.y_train.numpy(), cfg["clients"], common.split_alphas("(2)"), 0)
    task = common.make_task(data, part, cfg)
    params = task.unflatten(task.init_params(list(range(args.rows))))
    idx = common.train_loss_idx(data.y_train.numpy(), cfg["train_loss_images"])
    sets = {"test": (task.x_test, task.y_test), "sample": (task.x[idx], task.y[idx]), "train": (task.x, task.y)}
    rows = []
    for rep in range(args.repeats):
        for name in args.sets.split(","):
            x, y = sets[name]
            for bs, pool in itertools.product((int(b) for b in args.batch_sizes.split(",")), args.pools.split(",")):
                models.MaxPool2d.forward = pools[pool]
                engine.evaluate(task.model, params, x[:1024], y[:1024], batch_size=bs)
                tic, tic_cpu = time.perf_counter(), time.process_time()
                engine.evaluate(task.model, params, x, y, batch_size=bs)
                wall, cpu = time.perf_counter() - tic, time.process_time() - tic_cpu
                rows.append(dict(rep=rep, set=name, images=len(y), rows=args.rows, batch_size=bs, pool=pool,
                                 wall_s=wall, cpu_s=cpu, per_model_cpu_s=cpu / args.rows))
                print(rows[-1], flush=True)
    models.MaxPool2d.forward = pools["fast"]
    df = pd.DataFrame(rows)
    df["cpu"], df["threads"] = platform()["cpu"], torch.get_num_threads()
    print(df.groupby(["set", "batch_size", "pool"])[["per_model_cpu_s"]].agg(["min", "median"]))
    if args.out:
        df.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
