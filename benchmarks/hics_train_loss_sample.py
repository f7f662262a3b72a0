"""Does the HiCS-FL page read the same training loss from a sample of the training images? The FMNIST page reads
the training loss of every round (Figs. 4(a), 13, 14; the late loss and the round-to-round fluctuation that the
claim checks compare per seed; setting (3)'s comparison with CS). The ``paper`` profile records it every round
over a class-stratified sample of 10,000 of the 60,000 training images, the same in every run
(``train_loss_images``); this script checks that choice against the ``reduced`` profile's stored runs, which hold
the loss over every image:

    taskset -c 0 .venv/bin/python benchmarks/hics_train_loss_sample.py \\
        --out results/benchmarks/hics_train_loss_sample.csv.gz --md results/benchmarks/hics_train_loss_sample.md
    taskset -c 0 .venv/bin/python benchmarks/hics_train_loss_sample.py \\
        --from-csv results/benchmarks/hics_train_loss_sample.csv.gz --md results/benchmarks/hics_train_loss_sample.md

The run (~30 CPU minutes, one thread) repeats the nine main jobs of the ``reduced`` profile (settings (1)-(3),
seeds 0-2, random, pow-d, CS and HiCS-FL: the same numbers as the stored runs, whose loss over every image it
records again as ``train_loss``) and records, every round, the loss over the sample of each ``--sizes`` that
every run shares (:func:`flkit.papers.hics.common.train_loss_idx`, ``train_loss_<size>``) and over a sample of
10,000 drawn for each seed apart (``train_loss_10000_per_seed``: ``train_loss_sample(labels, 10000, seed)``).
The readings compared with the stored every-round loss over every image: each sample every round, and every
image every 10th round (the other way to evaluate less). Per reading: the page's fluctuation and late loss per
run (relative and absolute differences), Fig. 14's standard deviation over seeds averaged over the second half,
and the verdicts of the page's 12 fluctuation claims and 2 setting-(3) checks.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flkit import datasets, engine, fl, results  # noqa: E402
from flkit.papers.hics import common, diagnosis, fmnist  # noqa: E402

START, ROUNDS, STRIDE = 100, 200, 10


def rerun(sizes: list[int]) -> pd.DataFrame:
    """The reduced profile's main jobs again, with the training loss over each sample of ``sizes`` every round."""
    data = datasets.load("fashion-mnist")
    cfg = fmnist.profile("reduced")
    rows = []
    for job in [j for j in fmnist.jobs(cfg) if j["group"] == "main"]:
        tic = time.time()
        c = dict(cfg, **{k: job[k] for k in ("model", "clients", "k", "epochs", "batch_size", "rounds", "lr")})
        labels = data.y_train.numpy()
        part = common.make_partition(labels, c["clients"], job["alphas"], job["seed"])
        task = common.make_task(data, part, c)
        samples = {str(m): common.train_loss_idx(labels, m) for m in sizes}
        samples["10000_per_seed"] = torch.as_tensor(common.train_loss_sample(labels, 10_000, job["seed"]))

        def track_samples(w):
            p = task.unflatten(w)
            return {f"train_loss_{m}": engine.evaluate(task.model, p, task.x[i], task.y[i])[0]
                    for m, i in samples.items()}
        res = fl.run(task, fmnist.algorithms(task, c, job["methods"]), seeds=[job["seed"]], rounds=c["rounds"],
                     every=1, track=track_samples)
        t = res.tidy()
        rows.append(t[t.metric.str.startswith("train_loss")].assign(group="main", setting=job["setting"]))
        print(f"setting {job['setting']}, seed {job['seed']}: {time.time() - tic:.0f} s", flush=True)
    return pd.concat(rows, ignore_index=True)


def readings(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The stored table (cut to 200 rounds) and, per reading, the same table with the main runs' training loss
    replaced by that reading."""
    table = fmnist.truncate(fmnist.sweep(fmnist.profile("reduced"), None, results.book_store("hics")), ROUNDS)
    keep = table[~((table.group == "main") & (table.metric == "train_loss"))]
    main_loss = table[(table.group == "main") & (table.metric == "train_loss")]
    out = {"every image, every round (stored)": table,
           f"every image, every {STRIDE}th round": pd.concat(
               [keep, main_loss[main_loss["round"] % STRIDE == 0]], ignore_index=True)}
    for metric in sorted(m for m in runs.metric.unique() if m != "train_loss"):
        r = runs[runs.metric == metric][["setting", "method", "seed", "round", "value"]]
        r = main_loss.drop(columns="value").merge(r, on=["setting", "method", "seed", "round"])[list(table.columns)]
        size = int(metric.split("_")[2])
        name = (f"sample of {size:,} per seed, every round" if metric.endswith("per_seed")
                else f"sample of {size:,} (every run's), every round")
        out[name] = pd.concat([keep, r], ignore_index=True)
    return table, out


def compare(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[str], float]:
    """One row per reading: the differences from the stored reading and the verdicts that agree."""
    table, reads = readings(runs)
    stored = table[(table.group == "main") & (table.metric == "train_loss")]
    again = runs[runs.metric == "train_loss"].merge(stored, on=["setting", "method", "seed", "round"],
                                                    suffixes=("", "_stored"))
    same_runs = float((again.value - again.value_stored).abs().max())
    rt = fmnist.rounds_table(table, fmnist.target_accuracy(fmnist.smoothed_mean(table, "test_acc"), ROUNDS))

    def read(t):
        var = fmnist.variability(t, start=START)
        checks = [c for c in fmnist.claim_checks(rt, var, ROUNDS) if "fluctuates" in c.what]
        s3 = t[t.setting == diagnosis.SETTING]
        late = diagnosis.late_table(diagnosis.reference_runs(s3, ("CS", "HiCS-FL", "random")), START)
        checks += diagnosis.similar_to_cs_checks(late, var)
        loss = fmnist.smoothed_mean(t, "train_loss")
        sd = loss[loss.group.isin(["main", "divfl"]) & (loss["round"] >= START)]
        sd = sd.groupby(["setting", "method"])["smoothed_std"].mean()
        return var.set_index(["setting", "method", "seed"]), checks, sd
    ref_var, ref_checks, ref_sd = read(reads["every image, every round (stored)"])
    rows, lines = [], []
    for name, t in reads.items():
        var, checks, sd = read(t)
        rel = (var.fluctuation / ref_var.fluctuation - 1).abs()
        agree = [a.verdict == b.verdict for a, b in zip(ref_checks, checks)]
        rows.append({"reading": name, "fluctuation: median abs. rel. diff": rel.median(),
                     "fluctuation: max abs. rel. diff": rel.max(),
                     "late loss: max abs. diff": (var.late_loss - ref_var.late_loss).abs().max(),
                     "sd over seeds: max abs. diff": (sd - ref_sd).abs().max(),
                     "verdicts as stored": f"{sum(agree)} of {len(agree)}"})
        lines += [f"| {name} | {c.what} | {c.verdict} ({c.ours:+.4f}) | {r.verdict} ({r.ours:+.4f}) |"
                  for c, r, ok in zip(checks, ref_checks, agree) if not ok]
    return pd.DataFrame(rows).set_index("reading"), lines, same_runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,6000", help="sample sizes, comma-separated")
    ap.add_argument("--from-csv", default=None, help="read the rerun's rows from this CSV (no training)")
    ap.add_argument("--out", default=None, help="CSV (.gz) of the rerun's rows")
    ap.add_argument("--md", default=None, help="markdown summary to write")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    runs = pd.read_csv(args.from_csv) if args.from_csv else rerun([int(s) for s in args.sizes.split(",")])
    if args.out:
        runs.to_csv(args.out, index=False)
    summary, differ, same_runs = compare(runs)
    print(summary.to_string())
    if args.md:
        md = ["# HiCS-FL, Fashion-MNIST: the training loss from a sample of the training images", "",
              f"`benchmarks/hics_train_loss_sample.py` on the `reduced` profile's nine main jobs (logistic regression, "
              f"settings (1)-(3), seeds 0-2, {ROUNDS} rounds). The rerun repeats the stored runs' loss over every "
              f"image to {same_runs:.1e}. Each reading of the main runs' loss (DivFL's runs keep theirs) against the "
              f"stored one (every image, every round): the "
              f"page's fluctuation and late loss per run over rounds >= {START}, Fig. 14's sd over seeds (mean over "
              "the same rounds, per setting and method), and the verdicts of the 12 fluctuation claims and the 2 "
              "setting-(3) checks.", "",
              summary.to_markdown(floatfmt=".4f"), ""]
        if differ:
            md += ["Verdicts that differ from the stored reading's:", "",
                   "| reading | check | this reading | stored |", "|---|---|---|---|", *differ, ""]
        Path(args.md).write_text("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
