r"""Under document 003's random access model (RAM), which server rule protects the rare users?

Document 003 relays exactly one of K = 30 users per round, user i with probability :math:`\rho_i` (unknown to the
server), and calls the methods for unknown participation statistics inapplicable ("they require server-user
interaction", its Sec. 1.2). The other documents offer such rules: FedAU and MIFA need only the relayed updates and
their senders, and weighting by the known :math:`1/\rho_i` is the oracle FedAU estimates. This module runs them under
003's RAM, on 003's MNIST split of Figs. 3-4, beside FedAvg and Fed-CVaR-Avg:

* **FedAvg**: the relayed user's model becomes the global model (``aggregate.Relay``; FedAvg over one participant,
  the Fed-CVaR-Avg chapter's runs at :math:`\alpha = \gamma = 1`);
* **Fed-CVaR-Avg** (document 003, Algorithm 1, :math:`\alpha = \gamma = 0.3`): the same relay, local steps on the
  CVaR objective;
* **FedAU** (document 000, Algorithms 1-2): :math:`x_{t+1} = x_t - \frac{\eta}{N}\omega_t^{I_t}\Delta_t^{I_t}`, with
  :math:`\omega^i` the mean of user i's relay intervals (cutoff K = 50, the document's experiments, and none);
* **known rho** (document 000's "known participation statistics", 002's FedAvg with importance sampling):
  :math:`G_t = \Delta_t^{I_t}/(N\rho_{I_t})`;
* **MIFA** (documents 000, 002): the server keeps every user's latest update and moves by their mean each round.

Every rule of a seed sees the same users relayed on the same rounds (the chapter's RAM draws,
``participation.random_access`` from ``rng(seed, "participation")``), the same split (``partition.rare_users`` of
that seed), the same initial model and the same minibatches (``EngineTask`` with the chapter's stream
``batch/{t}``); local training is the chapter's (H = 10 epochs of SGD at :math:`\eta_\theta = 10^{-3}`, batch 128,
the MLP 784-128-128-10, the CVaR objective with :math:`\alpha = \gamma = 1` where the rule is not Fed-CVaR-Avg,
which is the cross-entropy exactly: :math:`t` stays 0).

Server step. :math:`\eta = 1` for every rule, chosen before any run and not tuned: with it FedAvg's relay moves the
model to the relayed model, and every rule's expected step puts total weight one on the users' updates: FedAvg's
:math:`\mathbb E[\Delta^{I}] = \sum_i\rho_i\Delta^i`, known rho's :math:`\mathbb E[\Delta^I/(N\rho_I)] =
\frac1N\sum_i\Delta^i` (unbiased for the full average), FedAU's the same once :math:`\omega^i \approx 1/\rho_i`,
MIFA's a mean of N stored updates. They differ in which users get the weight, which is the question.

Under the RAM, user i's indicator :math:`1[I_t = i]` is Bernoulli(:math:`\rho_i`), independent across rounds
(the users are dependent within a round, one relayed, but FedAU looks at each user's own sequence only): the
interval between two relays of user i is geometric with mean :math:`1/\rho_i`, so FedAU's :math:`\omega^i` estimates
:math:`1/\rho_i` without a cutoff, and :math:`\mathbb E[\min(S, K)] = (1 - (1-\rho_i)^K)/\rho_i` with a cutoff K
(:func:`omega_check`).
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from flkit import aggregate, fl, participation, plots
from flkit.objectives import cvar_objective
from flkit.papers import claims, cvar
from flkit.papers.across.items import ITEM
from flkit.papers.cvar.common import RARE_CLASSES, titled
from flkit.papers.fedau.common import corollary4_K
from flkit.results import Store, book_store, config_key, sweep_batched
from flkit.seeding import resolve_device
from flkit.tasks import EngineTask

__all__ = ["PAGE", "BOX", "RULES", "LABELS", "COLORS", "PROFILES", "OMEGA_USERS", "profile", "settings", "rho_of",
           "weight_numbers", "omega_view", "omega_numbers", "figure", "paired_view", "compute_lines", "run_configs",
           "aggregator", "ram_mask",
           "build_task", "run_batch", "store_for", "sweep", "stored", "final_accuracies", "paired", "summary",
           "summary_wide",
           "chapter_check", "findings", "omega_from_mask", "omega_check", "omega_stream", "checks", "overall_checks",
           "plot", "scale_of",
           "Deadline"]

PAGE = "across/rare_users"
# rule -> (label, alpha, gamma): the server rules compared, one relayed user per round
RULES = {
    "fedavg": ("FedAvg", 1.0, 1.0),
    "fed-cvar-avg": ("Fed-CVaR-Avg (alpha = gamma = 0.3)", 0.3, 0.3),
    "fedau-k50": ("FedAU (K = 50)", 1.0, 1.0),
    "fedau-kinf": ("FedAU (K = inf)", 1.0, 1.0),
    "known-rho": ("known rho", 1.0, 1.0),
    "mifa": ("MIFA", 1.0, 1.0),
}
LABELS = {k: v[0] for k, v in RULES.items()}
COLORS = {"fedavg": "tab:blue", "fed-cvar-avg": "tab:red", "fedau-k50": "tab:olive", "fedau-kinf": "tab:green",
          "known-rho": "tab:purple", "mifa": "tab:gray"}
SERVER_LR = 1.0       # every rule's server step: chosen before any run (module docstring), not tuned
FEDAU_K = 50          # document 000's experiments' cutoff
PROFILES = {
    # CI: the chapter's smoke subsets (3000 training and 1000 test images, 12 rounds of 1 epoch)
    "smoke": dict(cvar_profile="smoke", settings=[0.9, 0.8], seeds=[0, 1], rounds=None),
    # a labelled reduction: Fig. 3's setting only, 1000 of the 4000 rounds, 3 of the 5 seeds
    "reduced": dict(cvar_profile="paper", settings=[0.9], seeds=[0, 1, 2], rounds=1000),
    # the document's setting: Figs. 3 and 4, 4000 rounds, 5 seeds
    "paper": dict(cvar_profile="paper", settings=[0.9, 0.8], seeds=[0, 1, 2, 3, 4], rounds=4000),
}
# omega against 1/rho on long RAM streams (no training): chains x rounds
OMEGA_STREAM = dict(chains=8, rounds=100_000)
# the page's verdict box (scorecard.box)
BOX = dict(page=PAGE, headline=ITEM["rare_lift"],
           tests="whether the rules of documents 000 and 002 for participation the server does not control (FedAU "
                 "and MIFA, with weighting by the known 1/rho_i as the oracle) protect the rare users of document "
                 "003's random access model better than FedAvg and Fed-CVaR-Avg, on its MNIST split, and whether "
                 "FedAU's weights estimate 1/rho_i there")
# the users whose omega the page shows: three frequent ones and the three rarest
OMEGA_USERS = (0, 13, 26, 27, 28, 29)


class Deadline(RuntimeError):
    """Raised by :func:`run_batch` when it stopped before its deadline; the state is checkpointed."""


# ------------------------------------------------------------------------------------------------ settings
def settings(profile: str = "smoke", *, seeds=None, rounds=None, r=None, rules=None) -> dict:
    """The page's settings under `profile` (smoke, reduced, paper): the Fed-CVaR-Avg chapter's MNIST settings
    (``cvar.settings("mnist", ...)``: model, local training, RAM draw ``random-draw``, split, evaluation every 10
    rounds) with this profile's r values (``settings``), seeds and rounds, and the rules compared. Overrides: None
    keeps the profile's. Bad input: one ValueError, before any work."""
    if profile not in PROFILES:
        raise ValueError(f"profile {profile!r} is not one of {sorted(PROFILES)}")
    p = dict(PROFILES[profile])
    rules = list(RULES) if rules is None else list(rules)
    bad = [x for x in rules if x not in RULES]
    if bad or not rules or len(set(rules)) != len(rules):
        raise ValueError(f"rules must be a non-empty list of distinct names from {list(RULES)}, got {rules!r}")
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1):
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    s = cvar.settings("mnist", p["cvar_profile"], ram="random-draw",
                      settings=[float(v) for v in (r if r is not None else p["settings"])],
                      seeds=list(seeds) if seeds is not None else p["seeds"],
                      rounds=int(rounds) if rounds is not None else p["rounds"])
    return dict(s, page_profile=profile, rules=rules)


def profile(name: str, **overrides) -> dict:
    """The page's settings under profile `name` (smoke, reduced, paper): :func:`settings` with the overrides
    ``seeds``, ``rounds``, ``r`` and ``rules`` (None: the profile's). A ValueError names the allowed profiles, an
    unknown override or a bad value."""
    unknown = sorted(set(overrides) - {"seeds", "rounds", "r", "rules"})
    if unknown:
        raise ValueError(f"rare_users profile {name!r}: unknown setting(s) {unknown}; the page takes seeds, rounds, "
                         "r and rules")
    return settings(name, **overrides)


def rho_of(s: Mapping) -> np.ndarray:
    """The RAM's rho (the users' relay probabilities) of settings `s` (the same for every run)."""
    return np.asarray(run_configs(s)[0]["rho"])


def weight_numbers(rho: np.ndarray) -> dict:
    """The weights 1/(K rho_i) of the most and of the least frequent user (FedAvg's relay gives each 1/K)."""
    return dict(w_min=float(1 / (rho.size * rho.max())), w_max=float(1 / (rho.size * rho.min())))


def _base(s: Mapping) -> list[dict]:
    """The chapter's FedAvg run configs of settings `s` (one per r and seed): the fields of the data, the
    split, the RAM and the local training."""
    return [c for c in cvar.run_configs(s) if c["method"] == "fedavg"]


def run_configs(s: Mapping) -> list[dict]:
    """One config per (r, rule, seed): the chapter's run config of that r and seed (data, split, RAM rho, local
    training, rounds) with this page's fields: ``page``, ``rule``, its ``alpha``, ``gamma`` (Fed-CVaR-Avg's
    cell, else 1) and the server step ``server_lr``."""
    out = []
    for c in _base(s):
        for rule in s["rules"]:
            _, a, g = RULES[rule]
            if rule == "fed-cvar-avg":
                a, g = (float(x) for x in s["cells"][0])
            d = {k: v for k, v in c.items() if k != "method"}
            out.append(dict(d, page=PAGE, rule=rule, alpha=a, gamma=g, server_lr=SERVER_LR))
    return sorted(out, key=lambda c: (-c["pattern_frac"], list(RULES).index(c["rule"]), c["seed"]))


def aggregator(rule: str):
    """The server rule of `rule` (:data:`RULES`)."""
    if rule in ("fedavg", "fed-cvar-avg"):
        return aggregate.Relay()
    if rule == "fedau-k50":
        return aggregate.FedAU(K=FEDAU_K)
    if rule == "fedau-kinf":
        return aggregate.FedAU(K=None)
    if rule == "known-rho":
        return aggregate.KnownP()
    if rule == "mifa":
        return aggregate.MIFA()
    raise ValueError(f"unknown rule {rule!r}; choose one of {list(RULES)}")


def ram_mask(rho, rounds: int, seed: int) -> np.ndarray:
    """The (rounds, K) mask of the users relayed in each round of a run with `seed`: the chapter's draws
    (``participation.random_access``, the same draws as ``cvar.run_batch`` feeds its runs)."""
    return participation.random_access(np.asarray(rho, dtype=float), rounds, seed)


# ------------------------------------------------------------------------------------------------ running
_GROUP_FREE = {"rule", "alpha", "gamma", "seed", "server_lr"}


def _group(c: Mapping) -> dict:
    """Fields that runs sharing one computation agree on: everything but the rule, alpha, gamma, seed and step."""
    return {k: v for k, v in c.items() if k not in _GROUP_FREE}


def build_task(configs: Sequence[Mapping], device="cpu", log=print):
    """(the ``EngineTask`` of a batch of runs, its data): the chapter's data and each seed's split
    (``cvar.prepare``), the chapter's model and local training (the CVaR objective with the run's alpha and
    gamma as constants, FastSGD), one split per seed (``split_by="seed"``) and the chapter's minibatch stream."""
    by_seed = {}
    for c in configs:
        by_seed.setdefault(c["seed"], c)
    data = cvar.prepare(list(by_seed.values()), device)
    c0 = configs[0]
    task = EngineTask(model=cvar.build_model(c0).to(device), x=data["x_train"], y=data["y_train"],
                      clients={sd: list(p.indices) for sd, p in zip(by_seed, data["partitions"])}, split_by="seed",
                      x_test=data["x_test"], y_test=data["y_test"], batch_size=c0["batch_size"], epochs=c0["epochs"],
                      local_lr=c0["lr_theta"], objective=cvar_objective, backend="fast", extras=cvar.EXTRAS,
                      extras_lr={"t": c0["lr_t"]}, stream="batch/{t}", per_class=data["num_classes"],
                      eval_batch_size=2048, log=log)
    return task, data


def run_batch(configs: Sequence[Mapping], device="auto", *, checkpoint_dir: str | os.PathLike | None = None,
              deadline: float | None = None, progress: bool = True, log: Callable[[str], None] = print,
              cpu_threads: int | None = 1) -> list[pd.DataFrame]:
    """Run configs of one r (any rules and seeds) through ``flkit.fl.run`` as one computation; returns one tidy
    table per config (round, metric, value, class): test_loss, test_acc and test_acc_class (per class) every
    ``eval_every`` rounds and at rounds 0 and T, and for FedAU the weights omega of every user after the last
    round (metric "omega", class = user). The RAM mask of each seed is ``ram_mask`` (the chapter's draws), the
    participation probabilities the server knows are rho (read by "known rho" only). checkpoint_dir: where the
    mid-run state is kept (resumed by a later call with the same configs); raises :class:`Deadline` when it
    stopped early."""
    configs = [dict(c) for c in configs]
    if not configs:
        raise ValueError("no configs to run")
    groups = {repr(sorted(_group(c).items())) for c in configs}
    if len(groups) != 1:
        raise ValueError("run_batch needs configs that agree on everything but rule, alpha, gamma, seed and "
                         "server_lr (one r, one data set, one RAM)")
    for c in configs:
        aggregator(c["rule"])
    dev = resolve_device(device)
    if dev.type == "cpu" and cpu_threads:
        old = torch.get_num_threads()
        torch.set_num_threads(cpu_threads)
        try:
            return run_batch(configs, dev, checkpoint_dir=checkpoint_dir, deadline=deadline, progress=progress,
                             log=log, cpu_threads=None)
        finally:
            torch.set_num_threads(old)
    c0, T = configs[0], configs[0]["rounds"]
    rules = list(dict.fromkeys(c["rule"] for c in configs))
    seeds = {rule: [c["seed"] for c in configs if c["rule"] == rule] for rule in rules}
    if any(len(set(v)) != len(v) for v in seeds.values()):
        raise ValueError("a rule appears twice with the same seed")
    task, data = build_task(configs, dev, log)
    K = task.num_clients
    algorithms = {rule: fl.Algorithm(aggregator(rule), lr=float(next(c["server_lr"] for c in configs
                                                                    if c["rule"] == rule))) for rule in rules}
    all_seeds = sorted({c["seed"] for c in configs})
    masks = {sd: ram_mask(c0["rho"], T, sd) for sd in all_seeds}
    row = [(rule, sd) for rule in rules for sd in seeds[rule]]           # fl.run's row order
    cfg = {(c["rule"], c["seed"]): c for c in configs}
    w0 = task.init_params([sd for _, sd in row])
    w0[:, task.column("t")] = float(c0["t0"])
    w0[:, task.column("alpha")] = torch.tensor([float(cfg[k]["alpha"]) for k in row], dtype=w0.dtype)
    w0[:, task.column("gamma")] = torch.tensor([float(cfg[k]["gamma"]) for k in row], dtype=w0.dtype)
    ckpt = None
    if checkpoint_dir:
        ckpt = Path(checkpoint_dir) / f"rare-users-{config_key({'runs': [config_key(c) for c in configs]})}.pt"
        if ckpt.is_file():
            log(f"resuming {len(configs)} runs from {ckpt.name}")
    try:
        res = fl.run(task, algorithms, seeds=seeds, rounds=T, availability=masks, p=np.asarray(c0["rho"]), w0=w0,
                     every=c0["eval_every"], diverge_factor=None, progress=progress,
                     desc=f"r = {c0['pattern_frac']}: {len(configs)} runs", checkpoint=ckpt, deadline=deadline)
    except fl.Deadline as e:
        raise Deadline(str(e)) from None
    C = data["num_classes"]
    tables = []
    for c in configs:
        vals, j = res.values[c["rule"]], seeds[c["rule"]].index(c["seed"])
        rows = []
        for k, r in enumerate(res.rounds):
            rows.append((int(r), "test_loss", float(vals["test_loss"][k, j]), -1))
            rows.append((int(r), "test_acc", float(vals["test_acc"][k, j]), -1))
            rows += [(int(r), "test_acc_class", float(vals[f"test_acc_class/{q}"][k, j]), q) for q in range(C)]
        agg = algorithms[c["rule"]].aggregator
        if isinstance(agg, aggregate.FedAU):
            omega = agg.weights(res.final[c["rule"]])[j].cpu().numpy()
            rows += [(int(T), "omega", float(omega[i]), i) for i in range(K)]
        tab = pd.DataFrame(rows, columns=["round", "metric", "value", "class"])
        tab.attrs["wall_time_s"] = res.wall_s
        tab.attrs["local_steps"] = " + ".join(task.paths)
        tables.append(tab)
    log(f"{len(configs)} runs x {res.rounds_done} rounds in {res.wall_s:.1f} s on {dev} "
        f"({len(configs) * max(res.rounds_done, 1) / max(res.wall_s, 1e-9):.2f} run-rounds/s)")
    return tables


def store_for(s: Mapping, root=None):
    """The page's results store: results/across/rare_users/ (smoke: results/tmp/across/rare_users, git-ignored);
    `root` replaces results/across."""
    if root is not None:
        return Store(Path(root) / "rare_users")
    if s["page_profile"] == "smoke":
        return Store(book_store("tmp").root / "across" / "rare_users")
    return Store(book_store("across").root / "rare_users")


def sweep(s: Mapping, *, root=None, device="auto", deadline: float | None = None, progress: bool = True,
          compute_missing: bool = True) -> pd.DataFrame:
    """Every run of settings `s`: stored ones are read, missing ones computed (one computation per r) and stored.
    Returns the joined tidy table (config fields as columns)."""
    store = store_for(s, root)
    configs = run_configs(s)
    missing = [c for c in configs if not store.done(c)]
    if missing and not compute_missing:
        raise FileNotFoundError(f"{len(missing)} of {len(configs)} runs are not in {store.name}; run "
                                "python -m flkit.sweep rare-users or set compute_missing=True")
    dev = resolve_device(device)

    def fn(batch):
        return run_batch(batch, dev, checkpoint_dir=store.root.parent / "checkpoints", deadline=deadline,
                         progress=progress)
    return sweep_batched(configs, fn, store, group_by=lambda c: c["pattern_frac"], device=str(dev), progress=False)


def stored(s: Mapping, *, root=None) -> tuple[pd.DataFrame, int, int]:
    """(the stored runs of settings `s`, how many are stored, how many there are); nothing computed."""
    store = store_for(s, root)
    configs = run_configs(s)
    done = [c for c in configs if store.done(c)]
    return (store.load_many(done) if done else pd.DataFrame()), len(done), len(configs)


# ------------------------------------------------------------------------------------------------ reading
def final_accuracies(df: pd.DataFrame, last_frac: float = 0.1, upto: int | None = None) -> pd.DataFrame:
    """Per run: test accuracy (%) overall and per class over the evaluations in the last `last_frac` of the
    rounds (the Fed-CVaR-Avg chapter's reading, ``cvar.final_accuracies``), counting rounds up to `upto` only
    (None: the runs' own T). Columns: rule, seed, pattern_frac, metric, class, value."""
    keep = df[df["metric"].isin(["test_acc", "test_acc_class"])].copy()
    T = int(keep["rounds"].max()) if upto is None else int(upto)
    keep = keep[(keep["round"] <= T) & (keep["round"] >= T - last_frac * T)]
    cols = [c for c in ("rule", "method", "alpha", "gamma", "seed", "pattern_frac") if c in keep.columns]
    out = keep.groupby(cols + ["metric", "class"], as_index=False)["value"].mean()
    out["value"] *= 100
    return out


def _quantity(acc: pd.DataFrame, q) -> pd.DataFrame:
    return acc[acc["metric"] == "test_acc"] if q == "overall" else acc[(acc["metric"] == "test_acc_class")
                                                                       & (acc["class"] == q)]


def _rare(r: float) -> tuple:
    return RARE_CLASSES[round(float(r), 6)]


def summary(acc: pd.DataFrame) -> pd.DataFrame:
    """Per r, quantity (each rare class, the rare classes' mean, overall) and rule: mean accuracy (%) over the
    seeds, its standard deviation and the number of seeds."""
    rows = []
    for r in sorted(set(acc["pattern_frac"]), reverse=True):
        at = acc[acc["pattern_frac"] == r]
        for q in [*_rare(r), "rare mean", "overall"]:
            for rule in [x for x in RULES if x in set(at["rule"])]:
                v = _per_seed(at, rule, q)
                rows.append(dict(r=r, quantity=str(q), rule=rule, method=LABELS[rule], seeds=len(v),
                                 mean=float(v.mean()), sd=float(v.std(ddof=1)) if len(v) > 1 else math.nan))
    return pd.DataFrame(rows)


def summary_wide(summ: pd.DataFrame) -> pd.DataFrame:
    """:func:`summary`'s means as a table: one row per (r, quantity) in the page's order (r descending; the rare
    classes, their mean, overall), one column per rule in :data:`RULES`' order."""
    order = {q: i for i, q in enumerate(["8", "9", "rare mean", "overall"])}
    t = summ.assign(_r=-summ["r"], _q=summ["quantity"].map(order))
    wide = t.pivot_table(index=["_r", "_q", "r", "quantity"], columns="rule", values="mean")
    wide = wide.droplevel([0, 1])[[x for x in RULES if x in wide.columns]]
    return wide.rename(columns=LABELS).rename_axis(columns="rule")


def _per_seed(at: pd.DataFrame, rule: str, q) -> pd.Series:
    g = at[at["rule"] == rule]
    if q == "rare mean":
        g = g[(g["metric"] == "test_acc_class") & g["class"].isin(_rare(float(g["pattern_frac"].iloc[0])))]
        return g.groupby("seed")["value"].mean()
    return _quantity(g, q).set_index("seed")["value"]


def paired(acc: pd.DataFrame, against: str = "fedavg") -> pd.DataFrame:
    """Every other rule against `against`, per r and quantity (each rare class, the rare classes' mean,
    overall), on the seeds both have: the means, the paired difference (points), two standard errors of it and
    the verdict of "the rule above `against`" and the check itself (``claims.compare``)."""
    rows = []
    for r in sorted(set(acc["pattern_frac"]), reverse=True):
        at = acc[acc["pattern_frac"] == r]
        if against not in set(at["rule"]):
            continue
        for q in [*_rare(r), "rare mean", "overall"]:
            b = _per_seed(at, against, q)
            for rule in [x for x in RULES if x in set(at["rule"]) and x != against]:
                a = _per_seed(at, rule, q)
                sd = sorted(set(a.index) & set(b.index))
                what = (f"r = {r:g}, {'class ' + str(q) if isinstance(q, (int, np.integer)) else q}: {LABELS[rule]} "
                        f"above {LABELS[against]} (accuracy over the last 10 % of the rounds, paired by seed, "
                        f"{len(sd)} seeds)")
                c = claims.compare(what, a.loc[sd].to_numpy(float), b.loc[sd].to_numpy(float))
                rows.append(dict(r=r, quantity=str(q), rule=rule, method=LABELS[rule], against=LABELS[against],
                                 seeds=len(sd), mean=float(a.loc[sd].mean()), against_mean=float(b.loc[sd].mean()),
                                 difference=c.ours, two_se=c.margin, verdict=c.verdict, check=c))
    return pd.DataFrame(rows, columns=["r", "quantity", "rule", "method", "against", "seeds", "mean", "against_mean",
                                       "difference", "two_se", "verdict", "check"])


def chapter_check(df: pd.DataFrame, s: Mapping, last_frac: float = 0.1) -> pd.DataFrame:
    """FedAvg and Fed-CVaR-Avg of this page against the Fed-CVaR-Avg chapter's stored runs of the same r and seeds
    (``cvar.stored``; read up to this page's T only: the chapter's runs are the same computation over more rounds,
    as the RAM draws, minibatch streams and constant steps do not depend on T), per r and quantity: both means,
    the paired difference (this page's minus the chapter's) with two standard errors, and the devices that
    computed each. Empty when the chapter has no stored runs at this setting."""
    rows = []
    ch = cvar.settings("mnist", "paper", ram="random-draw", settings=s["settings"], seeds=s["seeds"],
                       cells=s["cells"]) if s["page_profile"] != "smoke" else None
    if ch is None:
        return pd.DataFrame()
    theirs, n, _ = cvar.stored(ch)
    if not n:
        return pd.DataFrame()
    theirs = theirs.assign(rule=theirs["method"])
    T = s["rounds"]
    a, b = final_accuracies(df, last_frac, upto=T), final_accuracies(theirs, last_frac, upto=T)
    def devices(store, configs) -> str:
        keys = {config_key(c) for c in configs}
        return ", ".join(sorted({str(m.get("device")).split(" (")[0] for m in store.manifests() if m["key"] in keys}))
    dev_ours = devices(store_for(s), run_configs(s)) or "?"
    dev_theirs = devices(cvar.store_for(ch), cvar.run_configs(ch)) or "?"
    for r in sorted(set(a["pattern_frac"]) & set(b["pattern_frac"]), reverse=True):
        for rule in ("fedavg", "fed-cvar-avg"):
            for q in [*_rare(r), "overall"]:
                x = _quantity(a[(a["pattern_frac"] == r) & (a["rule"] == rule)], q).set_index("seed")["value"]
                y = _quantity(b[(b["pattern_frac"] == r) & (b["rule"] == rule)], q).set_index("seed")["value"]
                sd = sorted(set(x.index) & set(y.index))
                if not sd:
                    continue
                d = x.loc[sd].to_numpy(float) - y.loc[sd].to_numpy(float)
                rows.append(dict(r=r, method=LABELS[rule], quantity=str(q), seeds=len(sd), this_page=x.loc[sd].mean(),
                                 chapter=y.loc[sd].mean(), difference=float(d.mean()),
                                 two_se=2 * claims.se(d) if len(d) > 1 else math.nan,
                                 max_abs_difference=float(np.abs(d).max()), computed_here_on=dev_ours,
                                 chapter_computed_on=dev_theirs))
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------ FedAU's omega
def omega_from_mask(mask: np.ndarray, K: int | None) -> np.ndarray:
    """FedAU's weights after every round of `mask` ((R, T, N) or (T, N) bool: who was relayed), through the
    package's rule (``aggregate.FedAU(K).record``, as the training runs update them): (R, N), or (N,)."""
    m = torch.as_tensor(np.asarray(mask, dtype=bool))
    one = m.dim() == 2
    m = m.unsqueeze(0) if one else m
    if m.dim() != 3:
        raise ValueError(f"mask must have shape (T, N) or (R, T, N), got {tuple(m.shape)}")
    rule = aggregate.FedAU(K=K)
    st = rule.init(m.shape[0], m.shape[2], 1, torch.float64, "cpu")
    for t in range(m.shape[1]):
        st = rule.record(st, m[:, t])
    w = rule.weights(st).numpy()
    return w[0] if one else w


def _intervals_mean(idx: np.ndarray, N: int, K: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Independent of the package: (mean recorded interval, number of intervals) per user from the relayed
    users `idx` (T,), each interval split into pieces of K by the cutoff (the trailing open gap counts only its
    complete pieces of K)."""
    T = len(idx)
    mean, count = np.ones(N), np.zeros(N)
    for i in range(N):
        t = np.flatnonzero(idx == i)
        gaps = np.diff(np.concatenate([[-1], t])).astype(float)       # closed intervals
        tail = T - 1 - (t[-1] if t.size else -1)                      # rounds since the last relay
        if K is not None:
            pieces = [np.full(int((g - 1) // K), float(K)) for g in gaps] + [gaps - K * ((gaps - 1) // K)]
            gaps = np.concatenate(pieces + [np.full(int(tail // K), float(K))])
        if gaps.size:
            mean[i], count[i] = gaps.mean(), gaps.size
    return mean, count


def omega_stream(rho, rounds: int, seeds: Sequence[int]) -> np.ndarray:
    """The relayed users (len(seeds), rounds) of RAM streams (``participation.random_access_indices``)."""
    return np.stack([participation.random_access_indices(np.asarray(rho, dtype=float), rounds, int(sd))
                     for sd in seeds])


def omega_check(rho, rounds: int, seeds: Sequence[int], Ks=(None, FEDAU_K), *, package: bool = True) -> pd.DataFrame:
    """FedAU's omega on the RAM streams of `seeds` (`rounds` each) against its limit, per user and cutoff K:
    rho, 1/rho, the limit E[min(S, K)] = (1 - (1 - rho)^K)/rho (1/rho without a cutoff), omega after the last
    round through the package's rule (mean over the streams), the same from the intervals counted directly
    (``independent``: must be the same number), the relative error against the limit and its z-score with the
    geometric interval's standard error (variance (1 - rho)/rho^2 without a cutoff; the cutoff's
    E[min(S, K)^2] - E[min(S, K)]^2 with one), and rho x omega (1 when omega = 1/rho). ``package=False`` skips
    the package's rule (a loop over the rounds; long streams): ``omega`` is then the direct count."""
    rho = np.asarray(rho, dtype=float)
    if rho.ndim != 1 or (rho <= 0).any() or abs(rho.sum() - 1) > 1e-6:
        raise ValueError("rho must be a vector of positive probabilities that sum to 1")
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 2:
        raise ValueError(f"rounds must be an integer >= 2, got {rounds!r}")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must be a non-empty list")
    idx = omega_stream(rho, rounds, seeds)
    N = rho.size
    masks = np.eye(N, dtype=bool)[idx] if package else None            # (R, T, N)
    rows = []
    for K in Ks:
        ind = np.stack([_intervals_mean(i, N, K) for i in idx])         # (R, 2, N)
        pkg = omega_from_mask(masks, K) if package else ind[:, 0]       # (R, N)
        limit = 1 / rho if K is None else (1 - (1 - rho) ** K) / rho
        if K is None:
            var = (1 - rho) / rho ** 2
        else:
            k = np.arange(1, K + 1)[:, None]
            pk = np.where(k < K, (1 - rho) ** (k - 1) * rho, (1 - rho) ** (K - 1))   # P(min(S, K) = k)
            var = (k ** 2 * pk).sum(0) - limit ** 2
        n = ind[:, 1].sum(0)
        se = np.sqrt(var / np.maximum(n, 1))                              # of the pooled interval mean
        pooled = (ind[:, 0] * ind[:, 1]).sum(0) / np.maximum(n, 1)
        for i in range(N):
            rows.append(dict(K="inf" if K is None else K, user=i, rho=rho[i], inv_rho=1 / rho[i], limit=limit[i],
                             omega=float(pkg[:, i].mean()), omega_sd=float(pkg[:, i].std(ddof=1)) if len(idx) > 1
                             else math.nan, independent=float(ind[:, 0, i].mean()), package=package,
                             pooled=float(pooled[i]), intervals=int(n[i]),
                             rel_error=float(pooled[i] / limit[i] - 1), z=float((pooled[i] - limit[i]) / se[i]),
                             rho_omega=float(rho[i] * pkg[:, i].mean()), rho_limit=float(rho[i] * limit[i])))
    return pd.DataFrame(rows)


def omega_view(om_runs: pd.DataFrame, om_long: pd.DataFrame, rounds: int, n_seeds: int, users=OMEGA_USERS):
    """FedAU's omega against its limit for `users`, on the runs' RAM streams (`om_runs`, `rounds` rounds, `n_seeds`
    seeds) and on the long streams (`om_long`, :data:`OMEGA_STREAM`), styled for the page."""
    show = pd.concat([om_runs.assign(stream=f"runs' RAM, {rounds} rounds, {n_seeds} seeds"),
                      om_long.assign(stream=f"{OMEGA_STREAM['chains']} chains x {OMEGA_STREAM['rounds']:,} rounds")])
    show = show[show["user"].isin(list(users))][["stream", "K", "user", "rho", "inv_rho", "limit", "omega", "omega_sd",
                                                 "intervals", "rel_error", "z", "rho_omega"]]
    return show.style.hide(axis="index").format({"rho": "{:.4f}", "inv_rho": "{:.1f}", "limit": "{:.1f}",
                                                 "omega": "{:.1f}", "omega_sd": "{:.1f}", "rel_error": "{:+.3f}",
                                                 "z": "{:+.2f}", "rho_omega": "{:.3f}"})


def omega_numbers(om_runs: pd.DataFrame, om_long: pd.DataFrame, rho: np.ndarray, rounds: int, n_seeds: int,
                  doc_rounds: int = 4000) -> dict:
    """The numbers of the omega section for the prose: the largest |z| per cutoff on the long streams, the fewest
    intervals per user there, the rarest user's (29) error and intervals per run on the runs' streams, rho_i times
    the cutoff limit of users 29 and 27, and Corollary 4's cutoff for the rarest user over `doc_rounds` rounds."""
    zl = om_long.groupby("K")["z"].apply(lambda z: z.abs().max())
    rare = om_runs[(om_runs["K"] == "inf") & (om_runs["user"] == 29)].iloc[0]
    k50 = om_long[om_long["K"] == 50]
    return dict(om_z_inf=float(zl["inf"]), om_z_50=float(zl[50]), om_int=int(om_long["intervals"].min()),
                om_rare_err=100 * abs(float(rare["omega"] / rare["limit"] - 1)), om_T=rounds,
                om_rare_n=float(rare["intervals"]) / n_seeds,
                om_k50_rho=float(k50[k50["user"] == 29]["rho_limit"].iloc[0]),
                om_k50_rho27=float(k50[k50["user"] == 27]["rho_limit"].iloc[0]),
                om_cor4=f"{corollary4_K(rho.min(), doc_rounds):.0f}")


# ------------------------------------------------------------------------------------------------ checks
def checks(omega_long: pd.DataFrame, omega_runs: pd.DataFrame, pairs_fedavg: pd.DataFrame,
           pairs_cvar: pd.DataFrame, acc: pd.DataFrame, tie: float = 1.0) -> list[tuple[str, claims.Check]]:
    """The page's checks as (short name of the item in ``flkit.papers.across.items.ITEM``, check).

    "omega": on long RAM streams (`omega_long`, :func:`omega_check`), FedAU's omega matches its limit within 4
    standard errors for every user (no cutoff: 1/rho; K = 50: the cutoff mean); on the runs' own RAM streams
    (`omega_runs`, with the package's rule) the package's omega equals the relay intervals counted directly.
    "rare_lift": FedAU (K = inf) and known rho above FedAvg on each rare class (paired by seed).
    "rare_vs_cvar": the same two above Fed-CVaR-Avg on each rare class.
    "overall": the same two not below FedAvg overall by more than `tie` points (:func:`overall_checks`)."""
    out = []
    for K, g in omega_long.groupby("K", sort=False):
        z = float(g["z"].abs().max())
        worst = g.loc[g["z"].abs().idxmax()]
        lim = "1/rho_i" if K == "inf" else f"(1 - (1 - rho_i)^{K})/rho_i"
        out.append(("omega", claims.holds(
            f"K = {K}: FedAU's omega on {int(g['intervals'].min())}+ relay intervals per user of long RAM streams "
            f"estimates {lim} for all {len(g)} users; largest |z| (user {int(worst.user)}, rho = {worst.rho:.4f})",
            z <= 4, "every |z| <= 4 (standard error of the geometric interval mean)", ours=z, reference=4.0)))
    for K, g in omega_runs.groupby("K", sort=False):
        if not bool(g["package"].all()):
            raise ValueError("omega_runs must come from omega_check(..., package=True)")
        same = float((g["omega"] - g["independent"]).abs().max())
        out.append(("omega", claims.holds(f"K = {K}: on the runs' RAM streams the package's omega (aggregate.FedAU, "
                                          "as the training runs update it) equals the mean of the relay intervals "
                                          "counted directly; largest difference", same <= 1e-9,
                                          "max abs difference <= 1e-9", ours=same, reference=1e-9)))
    for key, pairs in (("rare_lift", pairs_fedavg), ("rare_vs_cvar", pairs_cvar)):
        p = pairs[pairs["rule"].isin(["fedau-kinf", "known-rho"]) & ~pairs["quantity"].isin(["overall", "rare mean"])]
        out += [(key, c) for c in p["check"]]
    return out + overall_checks(acc, tie)


def overall_checks(acc: pd.DataFrame, tie: float = 1.0) -> list[tuple[str, claims.Check]]:
    """"overall": FedAU (K = inf) and known rho not below FedAvg overall by more than `tie` points, paired by seed
    (``claims.compare`` with a tie threshold)."""
    out = []
    for r in sorted(set(acc["pattern_frac"]), reverse=True):
        at = acc[acc["pattern_frac"] == r]
        b = _per_seed(at, "fedavg", "overall")
        for rule in ("fedau-kinf", "known-rho"):
            if rule not in set(at["rule"]):
                continue
            a = _per_seed(at, rule, "overall")
            sd = sorted(set(a.index) & set(b.index))
            out.append(("overall", claims.compare(
                f"r = {r:g}, overall: {LABELS[rule]} not below FedAvg by more than {tie:g} point (accuracy over the "
                f"last 10 % of the rounds, paired by seed, {len(sd)} seeds)",
                a.loc[sd].to_numpy(float), b.loc[sd].to_numpy(float), threshold=tie)))
    return out


# ------------------------------------------------------------------------------------------------ figure
def plot(acc: pd.DataFrame, axes, title=lambda r: f"r = {100 * r:.0f} %") -> None:
    """Per r (one panel each): each rule's rare-class accuracy (mean over the rare classes) against its overall
    accuracy, one small marker per seed, lines joining each seed's FedAvg to the rule's run of that seed, and the
    mean over the seeds as a large marker."""
    rs = sorted(set(acc["pattern_frac"]), reverse=True)
    for ax, r in zip(np.atleast_1d(axes), rs):
        at = acc[acc["pattern_frac"] == r]
        base = (_per_seed(at, "fedavg", "overall"), _per_seed(at, "fedavg", "rare mean")) \
            if "fedavg" in set(at["rule"]) else None
        for rule in [x for x in RULES if x in set(at["rule"])]:
            x, y = _per_seed(at, rule, "overall"), _per_seed(at, rule, "rare mean")
            col = COLORS[rule]
            if base is not None and rule != "fedavg":
                for sd in sorted(set(x.index) & set(base[0].index)):
                    ax.plot([base[0][sd], x[sd]], [base[1][sd], y[sd]], color=col, lw=0.6, alpha=0.35)
            ax.scatter(x, y, s=14, color=col, alpha=0.6, lw=0)
            ax.scatter([x.mean()], [y.mean()], s=70, color=col, edgecolor="black", lw=0.7, label=LABELS[rule],
                       zorder=3)
        classes = ", ".join(str(c) for c in _rare(r))
        ax.set(xlabel="overall test accuracy (%)", ylabel="rare-class test accuracy (%), "
               f"class{'es' if len(_rare(r)) > 1 else ''} {classes}", title=title(r))
        ax.grid(alpha=0.3)


def figure(acc: pd.DataFrame, label: str):
    """The page's figure: :func:`plot` with one panel per r (Fig. 3's and Fig. 4's split), the legend below and
    the title labelled with the profile's reduction `label` (the Fed-CVaR-Avg chapter's ``titled``). Returns the
    figure."""
    rs = sorted(set(acc["pattern_frac"]), reverse=True)
    fig, axes = plots.figure(1, len(rs), width=8.0 if len(rs) > 1 else 5.2, row_height=3.9, sharey=False)
    plot(acc, axes[0], title=lambda r: f"Fig. {3 if r == 0.9 else 4}'s split, r = {100 * r:.0f} %")
    h, lab = axes[0][0].get_legend_handles_labels()
    fig.legend(h, lab, loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    fig.suptitle(titled(label, "Rare users under document 003's RAM: rare-class against overall accuracy, per rule",
                        width=110), fontsize=9)
    return fig


PAIRED_COLUMNS = ["r", "quantity", "method", "seeds", "mean", "against_mean", "difference", "two_se", "verdict"]


def paired_view(p: pd.DataFrame, against: str):
    """A table of :func:`paired` (every rule against the rule labelled `against`), styled for the page."""
    return p[PAIRED_COLUMNS].rename(columns={"against_mean": against}).style.hide(axis="index").format(
        {"mean": "{:.1f}", against: "{:.1f}", "difference": "{:+.2f}", "two_se": "{:.2f}"}, na_rep="n/a")


def compute_lines(s: Mapping, root=None) -> list[str]:
    """How long each stored computation of settings `s` (its rounds) took and where, one line each."""
    man = store_for(s, root).manifests()
    return [f"a computation of {size} runs took {wall_s / 60:.1f} min on {dev}"
            for wall_s, size, dev in sorted({(m["wall_time_s"], m["batch_size"], m["device"]) for m in man
                                             if m["config"]["rounds"] == s["rounds"]}, key=str)]


# ------------------------------------------------------------------------------------------------ the scale
def scale_of(parameters: Mapping) -> list[str]:
    """The page's departures from the document's setting, from the parameters it ran with (for
    ``scorecard.page_scale``): fewer rounds, seeds or values of r; the chapter's smoke subsets."""
    s = settings(parameters.get("profile") or "paper", seeds=parameters.get("seeds"))
    p = settings("paper")
    out = []
    if s["rounds"] != p["rounds"]:
        out.append(f"reduced: rounds {s['rounds']} (document: {p['rounds']})")
    if len(s["seeds"]) != len(p["seeds"]):
        out.append(f"reduced: seeds {len(s['seeds'])} (document: {len(p['seeds'])})")
    if s["settings"] != p["settings"]:
        out.append("reduced: Fig. 3's split only (r = 90 %, Fig. 4's r = 80 % not run)" if s["settings"] == [0.9]
                   else f"reduced: r in {s['settings']} (document: {p['settings']})")
    for k, name in (("train_subset", "training images"), ("test_subset", "test images")):
        if s[k] != p[k]:
            out.append(f"reduced: {name} {s[k]} (document: all)")
    if s["epochs"] != p["epochs"]:
        out.append(f"reduced: local epochs {s['epochs']} (document: {p['epochs']})")
    return out


# ------------------------------------------------------------------------------------------------ in words
def _pct(r: float) -> str:
    return f"r = {100 * r:.0f} %"


def _diff(row) -> str:
    if not math.isfinite(row.two_se):
        return f"{row.difference:+.1f} points, {row.seeds} seed: no standard error"
    return f"{row.difference:+.1f} ± {row.two_se:.1f} points, {row.verdict}"


def findings(summ: pd.DataFrame, pf: pd.DataFrame, pc: pd.DataFrame) -> dict[str, str]:
    """The page's findings as phrases for ``glue``, one clause per r run (each number from the tables): "best"
    the rule with the highest mean rare-class accuracy and its paired difference from FedAvg; "lift" the
    estimators of 1/rho (FedAU, K = inf; known rho) on the rare classes against FedAvg; "cvar" the same against
    Fed-CVaR-Avg; "cost" their overall accuracy against FedAvg's; "k50" FedAU with K = 50 against FedAvg on the
    rare classes; "mifa" MIFA against FedAvg on the rare classes and overall."""
    out = {k: [] for k in ("best", "lift", "cvar", "cost", "k50", "mifa")}
    for r in sorted(set(summ["r"]), reverse=True):
        rm = summ[(summ["r"] == r) & (summ["quantity"] == "rare mean")].set_index("rule")
        best = rm["mean"].idxmax()
        pr = pf[(pf["r"] == r) & (pf["quantity"] == "rare mean")].set_index("rule")
        pcr = pc[(pc["r"] == r) & (pc["quantity"] == "rare mean")].set_index("rule")
        po = pf[(pf["r"] == r) & (pf["quantity"] == "overall")].set_index("rule")
        fed = rm.loc["fedavg", "mean"]
        out["best"].append(f"{_pct(r)}: {LABELS[best]}, {rm.loc[best, 'mean']:.1f} % on the rare class"
                           f"{'es' if len(_rare(r)) > 1 else ''} against FedAvg's {fed:.1f} %"
                           + ("" if best == "fedavg" else f" ({_diff(pr.loc[best])})"))
        say = lambda t, rule: f"{LABELS[rule]} {t.loc[rule, 'mean']:.1f} % ({_diff(t.loc[rule])})"  # noqa: E731
        est = [x for x in ("fedau-kinf", "known-rho") if x in pr.index]
        out["lift"].append(f"{_pct(r)}: " + ", ".join(say(pr, x) for x in est) + f" against FedAvg's {fed:.1f} %")
        if len(pcr):
            out["cvar"].append(f"{_pct(r)}: " + ", ".join(say(pcr, x) for x in est if x in pcr.index)
                               + f" against Fed-CVaR-Avg's {pcr['against_mean'].iloc[0]:.1f} %")
        out["cost"].append(f"{_pct(r)}: " + ", ".join(say(po, x) for x in est)
                           + f" against FedAvg's {po['against_mean'].iloc[0]:.1f} % overall")
        if "fedau-k50" in pr.index:
            out["k50"].append(f"{_pct(r)}: {say(pr, 'fedau-k50')}")
        if "mifa" in pr.index:
            out["mifa"].append(f"{_pct(r)}: {say(pr, 'mifa')} on the rare classes, {say(po, 'mifa')} overall")
    return {k: "; ".join(v) or "n/a (not run)" for k, v in out.items()}
