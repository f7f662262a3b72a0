"""One round of HiCS-FL local training with the document's Fashion-MNIST CNN (BatchNorm, PReLU, dropout): the
clients one at a time (``vectorized=False``, the loop the CNN ran before) against all of them at once (the
engine's grouped path, per-client BatchNorm and dropout masks), on the CPU: sequential local steps, operator
calls ("kernels" on a GPU) and host synchronisations per round, and the wall time of each path in the same run.

    taskset -c 0 .venv/bin/python benchmarks/bench_hics_batched.py --plan          # 5, 10, 50 clients, ~15 min
    taskset -c 0 .venv/bin/python benchmarks/bench_hics_batched.py --clients 5 --scale 0.25   # a quick look
    taskset -c 0 .venv/bin/python benchmarks/bench_hics_batched.py --estimate 2 \\
        --estimate-out results/benchmarks/hics_paper_estimate_cpu.csv

Setting: ``flkit.papers.hics.common.make_task`` with the ``paper`` profile (B = 64, two local epochs, plain
SGD at eta = 0.001), float32, one thread; the clients are the first M of a shuffled order of setting (2)'s 50
clients (seed 0's partition of the Fashion-MNIST labels, sizes 240 to 2,639 images), their images random
(the cost does not depend on pixel values; ``--scale`` keeps that fraction of each client's indices). A round
is one ``EngineTask.client_updates`` call for the M clients of one run (seed 0, round 0); the counted call comes
first and warms up the timed ones.

Counted with ``torch.profiler`` over the round (and over its ``engine.local_train`` call alone, "train"):
``ops`` every ATen operator call, ``kernels`` the ATen calls that call no other ATen operator (each one a
kernel launch on a GPU), ``syncs`` the host reads of tensor data: ``aten::_local_scalar_dense`` (``int(t)``,
``t.item()``), ``aten::nonzero`` (boolean indexing) and ``Tensor.tolist`` calls (counted by a wrapper; a device
to host copy on a GPU). ``steps``: sequential local steps (one client at a time: the sum of the clients' steps;
batched: the largest client's). ``wall_s`` and ``cpu_s`` (this process's CPU time: the measure to read on a
shared CPU, where the wall time includes waiting for the core): the best of ``--repeats`` uncounted rounds, the
two paths taking turns; ``cpu_ratio``: one client at a time over batched. ``--plan`` adds the sequential steps
of the whole ``paper`` profile and of Fig. 6(a) with the CNN.

``--estimate N``: instead, ``experiments.paper_estimate`` (the CPU price of the ``paper`` profile's local training:
2 rounds of 5 clients on the real Fashion-MNIST data, seed 0, setting (2)) N times per path, the paths taking
turns; seconds per client training in wall and CPU time (flkit.owed prices the HiCS-FL items with it).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flkit import engine, fl  # noqa: E402
from flkit.papers.hics import common, fmnist  # noqa: E402

SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero")


def labels() -> np.ndarray:
    from flkit import datasets
    if datasets.available("fashion-mnist"):
        return datasets.load("fashion-mnist").y_train.numpy()
    print("Fashion-MNIST absent: balanced stand-in labels (sizes differ from the document's partition)")
    return np.arange(60_000) % 10


def make_round(y: np.ndarray, M: int, vectorized, scale: float):
    """The task of M clients (setting (2), seed 0) and the arguments of one round's client_updates."""
    cfg = fmnist.profile("paper")
    part = common.make_partition(y, cfg["clients"], common.split_alphas("(2)"), 0)
    order = np.random.default_rng(0).permutation(cfg["clients"])[:M]
    idx = [part.indices[i] for i in order]
    idx = [ix[:max(1, int(round(len(ix) * scale)))] for ix in idx]
    used = np.unique(np.concatenate(idx))
    remap = {int(v): k for k, v in enumerate(used)}
    clients = SimpleNamespace(indices=[np.array([remap[int(v)] for v in ix]) for ix in idx])
    g = torch.Generator().manual_seed(0)
    x = torch.rand(len(used), 1, 28, 28, generator=g)
    data = SimpleNamespace(x_train=x, y_train=torch.as_tensor(y[used]), x_test=x[:10],
                           y_test=torch.as_tensor(y[used][:10]), name="fashion-mnist")
    task = common.make_task(data, clients, dict(cfg, vectorized=vectorized))
    w = task.init_params([0])
    runs = fl.Runs([0], torch.tensor([float(cfg["lr"])]), ["random"])
    active = torch.ones(1, M, dtype=torch.bool)
    return task, (w, active, 0, runs)


def sequential_steps(task, M: int, vectorized) -> int:
    _, steps = task._batches([0] * M, list(range(M)), 0, [0] * M)
    steps = steps.tolist()
    if vectorized is False:
        return int(sum(steps))
    return int(sum(max(steps[c:c + task.chunk]) for c in range(0, M, task.chunk)))


def count(task, args) -> dict:
    """ATen calls, kernels and host syncs of one round (and of its local_train call alone)."""
    from torch.profiler import ProfilerActivity, profile, record_function
    real_train, real_tolist, tolists = engine.local_train, torch.Tensor.tolist, {"all": 0, "train": 0}
    inside = [False]

    def train(*a, **k):
        inside[0] = True
        try:
            with record_function("bench::local_train"):
                return real_train(*a, **k)
        finally:
            inside[0] = False

    def tolist(t):
        tolists["all"] += 1
        tolists["train"] += inside[0]
        return real_tolist(t)
    engine.local_train, torch.Tensor.tolist = train, tolist
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            task.client_updates(*args)
    finally:
        engine.local_train, torch.Tensor.tolist = real_train, real_tolist

    def in_train(e) -> bool:
        p = e.cpu_parent
        while p is not None:
            if p.name == "bench::local_train":
                return True
            p = p.cpu_parent
        return False
    out = {}
    aten = [e for e in prof.events() if e.name.startswith("aten::")]
    for part, evs in (("", aten), ("train_", [e for e in aten if in_train(e)])):
        out[part + "ops"] = len(evs)
        out[part + "kernels"] = sum(1 for e in evs if not any(c.name.startswith("aten::") for c in e.cpu_children))
        out[part + "syncs"] = sum(1 for e in evs if e.name in SYNC_OPS) + tolists["train" if part else "all"]
    return out


def plan(y: np.ndarray) -> dict:
    """Sequential local steps of the paper profile's jobs (one client at a time vs a round's clients at once: every
    method of a job trains in one call) with the K clients of each method drawn uniformly (the samplers' real
    choices are not simulated), and of Fig. 6(a). DivFL's probe of all N clients: with the full-update proxy a
    training call of its own; with the one-step gradient proxy (the profile's) N full-batch gradients computed
    one client at a time by either path (``EngineTask.client_gradients``), counted in ``divfl_gradients``."""
    cfg = fmnist.profile("paper")
    K, N, B, R = cfg["k"], cfg["clients"], cfg["batch_size"], cfg["epochs"]
    rng = np.random.default_rng(0)
    one = batched = grads = 0.0
    for job in fmnist.jobs(cfg):
        part = common.make_partition(y, N, job["alphas"], job["seed"])
        steps = R * -(-np.array([len(i) for i in part.indices]) // B)
        for _ in range(job["rounds"]):
            picks = [rng.choice(N, K, replace=False) for _ in job["methods"]]
            pairs = np.concatenate(picks)
            one += steps[pairs].sum()
            batched += steps[pairs].max()
            if "DivFL" in job["methods"] and job.get("divfl_proxy", "update") == "update":
                one += steps.sum()
                batched += steps.max()
            elif "DivFL" in job["methods"] and job["divfl_proxy"] == "gradient":
                grads += N
    from flkit.papers.hics import dissimilarity
    f = dissimilarity.FIG6
    per = f["epochs"] * -(-f["size"] // f["batch_size"])
    return dict(paper_one=one, paper_batched=batched, divfl_gradients=grads, fig6_one=f["rounds"] * f["clients"] * per,
                fig6_batched=f["rounds"] * per)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="5,10,50", help="clients per round, comma-separated (<= 50)")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of each client's data (1: the document's)")
    ap.add_argument("--repeats", type=int, default=1, help="uncounted rounds per path; the best is reported")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--plan", action="store_true", help="also the sequential steps of the paper profile and Fig. 6(a)")
    ap.add_argument("--out", default=None, help="CSV file to write")
    ap.add_argument("--md", default=None, help="markdown summary to write (the table, the plan, the platform)")
    ap.add_argument("--estimate", type=int, default=0, help="run paper_estimate this many times per path instead")
    ap.add_argument("--estimate-out", default=None, help="CSV of the --estimate rows")
    ap.add_argument("--from-csv", default=None, help="read the rows from this CSV of an earlier run (no measuring: "
                                                      "--plan and --md again)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.estimate:
        return estimate(args.estimate, args.estimate_out)
    y = labels()
    rows = []
    if args.from_csv:
        import pandas as pd
        rows = pd.read_csv(args.from_csv).to_dict("records")
    for M in ([] if args.from_csv else (int(m) for m in args.clients.split(","))):
        made = {vec: make_round(y, M, vec, args.scale) for vec in (False, True)}
        for vec, (task, a) in made.items():                           # the counted round is the warm-up too
            rows.append(dict(clients=M, path="one client at a time" if vec is False else "batched",
                             samples=sum(len(i) for i in task.clients), steps=sequential_steps(task, M, vec),
                             **count(task, a)))
        wall = {vec: float("inf") for vec in made}
        cpu = dict(wall)
        for _ in range(args.repeats):
            for vec, (task, a) in made.items():
                tic, tic_cpu = time.perf_counter(), time.process_time()
                task.client_updates(*a)
                cpu[vec] = min(cpu[vec], time.process_time() - tic_cpu)
                wall[vec] = min(wall[vec], time.perf_counter() - tic)
        for r, vec in ((rows[-2], False), (rows[-1], True)):
            r.update(wall_s=wall[vec], cpu_s=cpu[vec], cpu_ratio=cpu[False] / cpu[True])
    cols = ["clients", "path", "samples", "steps", "kernels", "syncs", "train_kernels", "train_syncs", "ops", "wall_s",
            "cpu_s", "cpu_ratio"]
    print(" ".join(f"{c:>12}" for c in cols))
    for r in rows:
        print(" ".join(f"{r[c]:>12.3f}" if isinstance(r[c], float) else f"{str(r[c])[:12]:>12}" for c in cols))
    p = plan(y) if args.plan else None
    if p:
        print(f"paper profile: {p['paper_one']:,.0f} sequential steps one client at a time, {p['paper_batched']:,.0f} "
              f"batched (and {p['divfl_gradients']:,.0f} DivFL full-batch gradients one at a time in both); "
              f"Fig. 6(a): {p['fig6_one']:,} and {p['fig6_batched']:,}")
    if args.out:
        import pandas as pd
        pd.DataFrame(rows)[cols].to_csv(args.out, index=False)
    if args.md:
        write_md(args, rows, p)
    return 0


def estimate(repeats: int, out: str | None) -> int:
    """experiments.paper_estimate with each training path, ``repeats`` times, taking turns."""
    import pandas as pd

    from flkit import datasets
    from flkit.numerics import platform
    data = datasets.load("fashion-mnist")
    cfg = fmnist.profile("paper")
    rows = []
    for rep in range(repeats):
        for vec in (False, True):
            t = fmnist.paper_estimate(data, dict(cfg, vectorized=vec), rounds=2).set_index("metric")["value"]
            rows.append(dict(rep=rep, path="one client at a time" if vec is False else "batched",
                             seconds_per_client=float(t["seconds_per_client"]),
                             cpu_seconds_per_client=float(t["cpu_seconds_per_client"])))
            print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    df["cpu"], df["threads"] = platform()["cpu"], torch.get_num_threads()
    print(df.groupby("path")[["seconds_per_client", "cpu_seconds_per_client"]].min())
    if out:
        df.to_csv(out, index=False)
    return 0


def write_md(args, rows, p) -> None:
    from flkit.numerics import platform
    pf = platform()
    lines = ["# HiCS-FL Fashion-MNIST CNN: one round's local training, one client at a time vs batched (CPU)", "",
             f"`{' '.join(['benchmarks/bench_hics_batched.py'] + sys.argv[1:])}`"
             + (" (the rows of that earlier run, the plan computed anew)" if args.from_csv else "") + " on "
             f"{pf['cpu']} ({pf.get('kernel_path')}), {pf.get('threads')} thread, torch {pf.get('torch')}; "
             f"client data scale {args.scale:g}. Per round (one `EngineTask.client_updates` call, setting (2)'s "
             "clients, B = 64, two epochs): sequential local steps, kernels (ATen calls that call no other ATen "
             "operator; launches on a GPU), host syncs (`item`/`int`, `nonzero`, `tolist`), and for local training "
             "alone (`train_`); CPU seconds of this process (the wall time on a shared core includes waiting).", "",
             "| clients | path | samples | sequential steps | kernels | host syncs | train kernels | train syncs | "
             "CPU s | one-client / batched CPU |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['clients']} | {r['path']} | {r['samples']:,} | {r['steps']:,} | {r['kernels']:,} | "
                     f"{r['syncs']:,} | {r['train_kernels']:,} | {r['train_syncs']:,} | {r['cpu_s']:.2f} | "
                     f"{r['cpu_ratio']:.2f} |")
    if p:
        lines += ["", f"Sequential local steps of whole runs: the `paper` profile (Table 1 / Figs. 2, 4(a), 13, 14 "
                  f"with the CNN; every method of a job in one call, the K clients of each method drawn uniformly) "
                  f"{p['paper_one']:,.0f} one client at a "
                  f"time, {p['paper_batched']:,.0f} batched (besides, DivFL's one-step gradient proxy computes "
                  f"{p['divfl_gradients']:,.0f} full-batch gradients one client at a time in either path); Fig. 6(a) "
                  f"(250 clients x 500 rounds x 8 steps) {p['fig6_one']:,} and {p['fig6_batched']:,}."]
    Path(args.md).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
