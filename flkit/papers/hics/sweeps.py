"""The chapter's sweeps: ``python -m flkit.sweep hics <profile>`` stores the jobs of the training pages
(:mod:`flkit.papers.hics.fmnist`), ``python -m flkit.sweep hics-fig6`` the run of Fig. 6(a)
(:mod:`flkit.papers.hics.dissimilarity`); then re-execute the page to read them::

    python -m flkit.sweep hics reduced --part 0 --of 2 &      # CPU: two processes, one thread each
    python -m flkit.sweep hics reduced --part 1 --of 2
    python -m flkit.sweep hics paper --device cuda            # the document's CNN (a GPU)
    python -m flkit.sweep hics paper --setting '(2)' --group main --device cuda --max-minutes 8
    python -m flkit.sweep hics paper-cifar10 --device cuda    # CIFAR-10 (needs the CIFAR-10 files)
    python -m flkit.sweep hics paper-cifar100 --device cuda   # CIFAR-100 (needs the CIFAR-100 files)
    python -m flkit.sweep hics-fig6                           # the theory page's stand-in: logistic regression
    python -m flkit.sweep hics-fig6 --model hics_fmnist_paper --device cuda --max-minutes 8   # the document's CNN

``hics``: each process runs every ``of``-th job (DivFL's first, the longest: the Table 1 setting's long runs, then
the others) into the book's store (``results/hics`` for Fashion-MNIST, ``results/hics_cifar10``,
``results/hics_cifar100``; under ``results/tmp/`` for the smoke profiles), one CSV + JSON per job, skipping the
stored ones. ``--max-minutes`` stops cleanly: the running job is checkpointed under ``<store>/checkpoints/``
(``job-<key>.pt``, a few MB: one model and the sampler's state) and the next call resumes it to the same numbers;
the checkpoint is removed when its job is stored. ``--setting`` and ``--group`` select jobs (``--setting '(2)'
--group main``: Table 1's four cheap methods, the runs that decide it). The data set is the profile's
(``$FLKIT_DATA`` or ``<repo>/data``, see flkit.datasets). ``--estimate`` times ``--estimate-rounds`` rounds of the
first pending job of each kind (group and methods; set-up and every round's evaluation included) and projects
every pending job by its rounds.

``hics-fig6``: the run is stored once (``results/hics``) and skipped when it is there; ``--max-minutes``
checkpoints its state (round, model, rows so far; under a MB for the CNN) at
``results/hics/checkpoints/fig6-<key>.pt`` and the next call resumes it to the same numbers. ``--estimate`` times
one recording of the clients' gradients (with the test accuracy) and ``--estimate-rounds`` rounds of training,
and projects the run's rounds and recordings.
"""
from __future__ import annotations

import math
import time

import torch

from flkit import datasets, fl, results
from flkit.papers.hics import dissimilarity, fmnist
from flkit.papers.settings import positive_int

__all__ = ["JOBS", "FIG6", "selected", "estimate_jobs", "estimate_fig6"]


def selected(cfg: dict, setting: str | None = None, group: str | None = None, part: int = 0, of: int = 1) -> list[dict]:
    """This process's jobs: the profile's, filtered by ``setting`` and ``group``, DivFL's first (the longest),
    every ``of``-th from ``part``."""
    js = [j for j in fmnist.jobs(cfg) if (setting is None or j["setting"] == setting)
          and (group is None or j["group"] == group)]
    order = sorted(js, key=lambda j: (j["group"] != "divfl", -j["rounds"]))
    return order[part::of]


def estimate_jobs(jobs: list[dict], store, data, rounds: int, device, out=print) -> float:
    """Time ``rounds`` rounds of the first pending job of each kind (group, methods) and project every pending
    job by its rounds; nothing is stored. Returns the projected seconds."""
    todo = [j for j in jobs if not store.done(j)]
    if not todo:
        out("nothing to compute: every job is stored")
        return 0.0
    per_round: dict[tuple, float] = {}
    for j in todo:
        kind = (j["group"], tuple(j["methods"]))
        if kind not in per_round:
            tic = time.perf_counter()
            fmnist.run_job(dict(j, rounds=rounds), data)
            per_round[kind] = (time.perf_counter() - tic) / rounds
            out(f"{j['group']} job ({', '.join(j['methods'])}): {per_round[kind]:.2f} s a round (trial of {rounds} "
                "rounds, set-up and evaluations included)")
    total = sum(per_round[(j["group"], tuple(j["methods"]))] * j["rounds"] for j in todo)
    out(f"estimate: {len(todo)} jobs pending ({sum(j['rounds'] for j in todo):,} job-rounds), projected "
        f"{total / 60:.1f} min ({total / 3600:.2f} h) on {device}")
    return total


def estimate_fig6(cfg: dict, data, rounds: int, device, out=print) -> float:
    """Time one recording (every client's gradient difference and the test accuracy, :func:`run_fig6
    <flkit.papers.hics.dissimilarity.run_fig6>`'s every ``every`` rounds) and ``rounds`` rounds of training with
    every client, and project the run; nothing is stored. Returns the projected seconds."""
    labels = data.y_train.cpu().numpy()
    part = dissimilarity.dirichlet_clients(
        labels, dissimilarity.spread_alphas(cfg["alpha_lo"], cfg["alpha_hi"], cfg["clients"]), cfg["size"], cfg["seed"])
    task = dissimilarity.fig6_task(data, part, cfg)
    w = task.init_params([cfg["seed"]])
    runs = fl.Runs([cfg["seed"]], torch.tensor([float(cfg["lr"])], dtype=task.dtype), ["trial"])
    tic = time.perf_counter()
    dissimilarity.gradient_differences(task, w)
    task.metrics(w)
    record = time.perf_counter() - tic
    everyone = torch.ones(1, task.num_clients, dtype=torch.bool)
    tic = time.perf_counter()
    for t in range(rounds):
        _, delta, _ = task.client_updates(w, everyone, t, runs)
        w = w - delta.mean(0, keepdim=True)
    per_round = (time.perf_counter() - tic) / rounds
    records = math.ceil(cfg["rounds"] / cfg["every"])
    total = per_round * cfg["rounds"] + record * records
    out(f"estimate: {record:.2f} s a recording ({task.num_clients} clients' gradients and the test accuracy), "
        f"{per_round:.2f} s a round of training (trial of {rounds}); {cfg['rounds']} rounds and {records} "
        f"recordings: projected {total / 60:.1f} min ({total / 3600:.2f} h) on {device}")
    return total


class _Jobs:
    """``python -m flkit.sweep hics <profile>``: the stored jobs of the training pages (flkit.sweep.Sweep)."""
    name = "hics"
    summary = "HiCS-FL (document 004): the jobs of the training pages (Fashion-MNIST, CIFAR-10, CIFAR-100)"
    device = "cpu"
    threads = 1
    stopped = (fl.Deadline,)

    def arguments(self, ap) -> None:
        ap.add_argument("profile", choices=sorted(fmnist.PROFILES))
        ap.add_argument("--part", type=int, default=0, help="this process's share (0-based)")
        ap.add_argument("--of", type=int, default=1, help="number of processes sharing the jobs")
        ap.add_argument("--setting", default=None, help="only the jobs of this alpha setting, e.g. '(2)'")
        ap.add_argument("--group", default=None, choices=["main", "divfl", "lr_alt", "powd_d"],
                        help="only this group's jobs")

    def plan(self, args, overrides: dict) -> dict:
        if "dataset" in overrides:
            raise ValueError("--set dataset=...: the data set is the profile's; choose the profile "
                             f"(one of {sorted(fmnist.PROFILES)})")
        positive_int(args.of, "--of")
        if not 0 <= args.part < args.of:
            raise ValueError(f"--part must lie in [0, --of = {args.of}), got {args.part}")
        cfg = fmnist.profile(args.profile, **overrides)
        if args.setting is not None and args.setting not in cfg["settings"]:
            raise ValueError(f"--setting must be one of {cfg['settings']}, got {args.setting!r}")
        return dict(profile=args.profile, cfg=cfg, part=args.part, of=args.of,
                    jobs=selected(cfg, args.setting, args.group, args.part, args.of),
                    store=results.book_store(fmnist.store_name(args.profile)))

    def describe(self, p: dict) -> str:
        return f"{p['profile']}, part {p['part']} of {p['of']}: {len(p['jobs'])} jobs"

    def estimate(self, p: dict, device, rounds: int, threads: int | None, out=print) -> None:
        if threads:
            torch.set_num_threads(threads)
        data = datasets.load(p["cfg"]["dataset"], device=device)
        estimate_jobs(p["jobs"], p["store"], data, rounds, device, out=out)

    def run(self, p: dict, device, deadline: float | None, threads: int | None, out=print) -> None:
        if threads:
            torch.set_num_threads(threads)
        store, mine = p["store"], p["jobs"]
        if all(store.done(j) for j in mine):
            return
        data = datasets.load(p["cfg"]["dataset"], device=device)
        ckpt = store.root / "checkpoints"
        results.sweep(mine, lambda j: fmnist.run_job(j, data, checkpoint_dir=ckpt, deadline=deadline), store,
                      progress=True, desc=f"part {p['part']}")

    def progress(self, p: dict) -> tuple[int, int, str]:
        return sum(p["store"].done(j) for j in p["jobs"]), len(p["jobs"]), str(p["store"].root)


class _Fig6:
    """``python -m flkit.sweep hics-fig6``: the run of Fig. 6(a) (flkit.sweep.Sweep)."""
    name = "hics-fig6"
    summary = "HiCS-FL (document 004): the run of Fig. 6(a), Assumption 1 on Fashion-MNIST (appendix 6.2)"
    device = "cpu"
    threads = 1
    stopped = (fl.Deadline,)
    SETTINGS = ("model", "rounds")

    def arguments(self, ap) -> None:
        ap.add_argument("--model", default=dissimilarity.FIG6["model"], choices=sorted(dissimilarity.MODELS))

    def plan(self, args, overrides: dict) -> dict:
        unknown = sorted(set(overrides) - set(self.SETTINGS))
        if unknown:
            raise ValueError(f"unknown setting(s) {unknown}; hics-fig6 takes {list(self.SETTINGS)} "
                             "(--model, --rounds)")
        cfg = dict(dissimilarity.FIG6, model=args.model, **overrides)
        if cfg["model"] not in dissimilarity.MODELS:
            raise ValueError(f"model must be one of {sorted(dissimilarity.MODELS)}, got {cfg['model']!r}")
        positive_int(cfg["rounds"], "rounds")
        return dict(cfg=cfg, store=results.book_store("hics"))

    def describe(self, p: dict) -> str:
        return f"Fig. 6(a) with {p['cfg']['model']}, {p['cfg']['rounds']} rounds"

    def estimate(self, p: dict, device, rounds: int, threads: int | None, out=print) -> None:
        if threads:
            torch.set_num_threads(threads)
        estimate_fig6(p["cfg"], datasets.load("fashion-mnist", device=device), rounds, device, out=out)

    def run(self, p: dict, device, deadline: float | None, threads: int | None, out=print) -> None:
        if threads:
            torch.set_num_threads(threads)
        if p["store"].done(dissimilarity.fig6_config(p["cfg"])):
            return
        data = datasets.load("fashion-mnist", device=device)
        _, part, wall = dissimilarity.fig6_runs(p["cfg"], data, p["store"], deadline=deadline)
        out(f"Fig. 6(a) run ({p['cfg']['model']}, {p['cfg']['rounds']} rounds): {wall:.0f} s; union entropy "
            f"{dissimilarity.union_entropy(part):.4f}")

    def progress(self, p: dict) -> tuple[int, int, str]:
        return int(p["store"].done(dissimilarity.fig6_config(p["cfg"]))), 1, str(p["store"].root)


JOBS = _Jobs()
FIG6 = _Fig6()
