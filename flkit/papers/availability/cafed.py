r"""CA-Fed and its baselines on the CA-Fed paper's two small experiments: chapter code of the page on the
lecture notes' last lesson ("to speed up training we may want to ignore clients with low availability and
clients highly correlated over time").

CA-Fed (A. Rodio, F. Faticanti, O. Marfoq, G. Neglia, E. Leonardi, INFOCOM 2023) turns the notes'
Theorem 1 (error <= optimisation error of the biased objective F_B + a bias term) into a greedy rule that
drops clients from the aggregation when the estimated error does not increase. The algorithms are in the
package: the samplers ``flkit.sample.CAFed`` and ``flkit.sample.F3AST`` (Unbiased and AdaFed take every
available client, ``flkit.sample.AllAvailable``), the rule ``flkit.aggregate.InverseAvailability``
(weights q_k / pi_k; normalised for AdaFed) inside ``flkit.aggregate.ServerSGD`` (the server's SGD with
momentum 0.9 and weight decay 1e-2). This module holds the settings, the data, the reference numbers and
the figure helpers.

What the authors' code does (github.com/arodio/CA-Fed, commit e673587; files named below):

* availability (``data/utils.py``: ``compute_availability``, ``compute_stability``,
  ``generate_tasks_types``; ``data/constants.py``: ``JOINT_PROBABILITY_MATRIX``): a client is
  "available-shifting" (probability 1/2), "unavailable-stable" (1/4) or "unavailable-shifting" (1/4);
  pi = 1/2 +- 0.4; stable: lambda = max(0.9, 1 - 1/pi, 1 - 1/(1 - pi)); shifting: lambda =
  (N(0, 0.01^2) + 0.01)/2 clipped to the feasible range. The synthetic set splits the 24 clients in exact
  proportions (``--deterministic_split``), MNIST draws the counts of each cluster from a multinomial.
* synthetic data (``data/utils.py``, ``generate_synthetic_clustered``; ``paper_experiments/synthetic``):
  24 clients in 2 clusters of 12, x ~ N(0, I_10), 50 training and 150 test samples per client,
  y ~ Bernoulli(sigmoid(x . w*)) with one w* ~ N(0, I_10), labels of the second cluster flipped with
  probability 0.2; a linear model 10 -> 1 with the logistic loss.
* MNIST (``data/utils.py``, ``incongruent_split``; ``paper_experiments/mnist``): the 70 000 images of
  both splits shuffled and cut into 24 equal parts; a client's images from the training split train,
  those from the test split test; the clients are split in 2 clusters of 12 and each cluster swaps 2
  random pairs of labels; a linear model 784 -> 10, inputs normalised by (0.1307, 0.3081).
* training (``run_experiment.py``, ``client.py``, ``aggregator.py``, ``utils/optim.py``,
  ``utils/constants.py``): 150 rounds, 2 local epochs, SGD with momentum 0.9 and weight decay 1e-2 on the
  clients and on the server, the server applying the weighted sum of (global - local); q_k proportional to
  the clients' training sizes (``--objective_type weighted``); the oracle pi and lambda.
* local optima F_k^* (``utils/utils.py``, ``get_local_optimums``): scikit-learn's
  ``LogisticRegression(multi_class="multinomial", max_iter=1000)`` on the client's training data, its
  log-loss; on a ``ValueError`` the optimum is set to 0. MNIST's images are stored as (n, 28, 28)
  arrays, which scikit-learn refuses (it needs 2-D input): every MNIST optimum is 0 in the code, and we
  use 0. For the synthetic set we solve the same penalised problem exactly (:func:`local_optimum`).
* metrics (``aggregator.py``, ``write_logs``; ``run_experiment.py``): the q-weighted average of the
  clients' test accuracies, logged at round 0, at rounds 2, 5, ..., 38 and every 10 rounds
  (:func:`log_rounds`). The README's table (max, time-average, standard deviation over the second half,
  "average over three runs") is not produced by any script of the repository; :func:`summarize` is our
  reading of it on the logged rounds.

Departures: the clients' momentum restarts at zero every round (the code keeps each client's optimiser,
hence its momentum buffer, from its previous participation); CA-Fed's loss estimates use the training
loss (the code's "validation" loader is the client's test split); the test accuracy is the accuracy on
the union of the clients' test sets (for the synthetic set, whose clients have equal q and equal test
sets, the same number; for MNIST the clients' test sets differ by a few images); MNIST's baselines use
learning rates of our choice (the repository's tuning grid does not record the chosen values); the
availability of round 0 is one Markov step after the stationary initial draw (the code uses the initial
draw itself; both are stationary).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from flkit import aggregate, datasets, fl, models, participation, plots, sample
from flkit.papers import claims, settings
from flkit.papers.availability import common
from flkit.seeding import rng
from flkit.tasks import EngineTask

__all__ = [
    "SOURCE", "METHODS", "WITH_FEDAU", "FEDAU_K", "LABELS", "PALETTE", "TYPE_NAMES", "README", "readme_table",
           "PROFILES", "profile",
    "LRS", "Clients", "assign_types", "availability_parameters", "synthetic", "mnist", "local_optimum",
    "run_config", "make_task", "algorithms", "run_experiment", "log_rounds", "summarize", "compare_table",
           "paired_difference",
    "verdict", "readme_check", "usage_by_type", "usage_contrast", "lesson_check", "share_check", "worked_example",
    "plot_shares", "plot_curves", "plot_usage",
    "BOX", "CONTROL_LRS", "HAND_E", "configs", "share_runs", "synthetic_runs", "control_runs", "mnist_runs",
    "share_checks", "share_numbers", "matches_hand", "type_table", "difference_numbers", "control_numbers",
    "usage_numbers", "synthetic_numbers", "mnist_numbers",
]

SOURCE = "arodio/CA-Fed@e673587"
METHODS = ("unbiased", "f3ast", "adafed", "cafed")
LABELS = {"unbiased": "Unbiased", "f3ast": "F3AST", "adafed": "AdaFed", "cafed": "CA-Fed", "fedau": "FedAU"}
PALETTE = {"unbiased": "tab:red", "f3ast": "tab:blue", "adafed": "tab:green", "cafed": "tab:orange",
           "fedau": "tab:purple"}  # the first four as the code
# FedAU (document 000) as a fifth method beside them (the chapter "Across the documents"): every available client,
# weights q_k omega_k with omega FedAU's online estimate of 1/pi_k (aggregate.FedAUWeighted), cutoff K = 50 (the
# K of document 000's table), Unbiased's learning rates unless `lrs` has an entry "fedau". Not in METHODS: the
# CA-Fed page's runs, figures and tables stay those of the four methods.
WITH_FEDAU = METHODS + ("fedau",)
FEDAU_K = 50

# availability types (data/constants.py): (availability, stability) with their probabilities
TYPE_NAMES = ("available-shifting", "unavailable-stable", "unavailable-shifting")
TYPE_PROBS = (0.5, 0.25, 0.25)
AVAILABILITY_PARAMETER = 0.4     # pi = 1/2 +- 0.4 in every paper script
STABILITY_PARAMETER = 0.9        # nu of the stable clients
SHIFT_EPS = 0.01                 # the shifting clients' lambda ~ (N(0, eps^2) + eps) / 2
_ERR = 1e-8                      # data/constants.py ERROR

# README.md, "Results": average over three runs; (synthetic, MNIST), accuracy in percent
README = {
    "unbiased": {"max": (78.94, 64.87), "time_avg": (75.33, 61.39), "std_2nd_half": (0.48, 1.09)},
    "f3ast": {"max": (78.97, 64.91), "time_avg": (75.33, 61.52), "std_2nd_half": (0.40, 0.94)},
    "adafed": {"max": (78.69, 63.77), "time_avg": (74.81, 60.48), "std_2nd_half": (0.59, 1.37)},
    "cafed": {"max": (79.03, 64.94), "time_avg": (76.22, 62.76), "std_2nd_half": (0.28, 0.61)},
}

# learning rates (local, server). Synthetic: paper_experiments/synthetic/full_experiment.sh for every
# method. MNIST: CA-Fed from paper_experiments/mnist/run.sh; the baselines' values are not recorded in the
# repository (tune_learning_rates.sh only lists grids): ours, labelled as such on the page.
LRS = {
    "synthetic": {"unbiased": (0.03, 0.03), "f3ast": (0.03, 0.03), "adafed": (0.001, 1.0), "cafed": (0.01, 0.3)},
    "mnist": {"unbiased": (0.001, 0.1), "f3ast": (0.001, 0.1), "adafed": (0.001, 1.0), "cafed": (0.001, 0.1)},
}

PROFILES = {
    "smoke": dict(
        synthetic=dict(rounds=12, seeds=[0], beta=0.001),
        mnist=dict(rounds=3, seeds=[0], beta=0.0, train_fraction=0.1),
        share=dict(rounds=150, seeds=list(range(40))),
    ),
    # MNIST reduced (a labelled third profile): half of each client's training images, 2 seeds
    "reduced": dict(
        synthetic=dict(rounds=150, seeds=list(range(9)), beta=0.001),
        mnist=dict(rounds=150, seeds=[0, 1], beta=0.0, train_fraction=0.5),
        share=dict(rounds=150, seeds=list(range(400))),
    ),
    # the paper's setting: its MNIST data, three seeds (the README averages three runs)
    "paper": dict(
        synthetic=dict(rounds=150, seeds=list(range(9)), beta=0.001),
        mnist=dict(rounds=150, seeds=[0, 1, 2], beta=0.0, train_fraction=1.0),
        share=dict(rounds=150, seeds=list(range(400))),
    ),
}


def profile(name: str, seeds=None, mnist_seeds=None, **overrides) -> dict:
    """The page's settings under profile `name` ("smoke", "reduced", "paper"); a ValueError names the allowed
    ones. `overrides` replace top-level settings (None keeps the profile's); `seeds` and `mnist_seeds`, when
    given, replace the seeds of the synthetic and of the MNIST runs. Every setting is checked before any work
    (`settings.check_profile`: rounds >= 1, seeds non-empty, probabilities in (0, 1], ...)."""
    cfg = common.profile_of("cafed", PROFILES, name, overrides)
    for part, given in (("synthetic", seeds), ("mnist", mnist_seeds)):
        if given is not None:
            cfg[part]["seeds"] = [int(v) for v in given]
    return settings.check_profile(cfg, f"cafed profile {name!r}")


def readme_table() -> pd.DataFrame:
    """The README's numbers as a table: one row per (dataset, method), columns max, time_avg, std_2nd_half."""
    rows = [dict(dataset=ds, method=m, **{k: v[i] for k, v in README[m].items()})
            for i, ds in enumerate(("synthetic", "mnist")) for m in METHODS]
    return pd.DataFrame(rows)


# ================================================================================================
# clients: availability types, data, local optima
# ================================================================================================
@dataclass
class Clients:
    """One federation: the training pool (x, y) with one index array per client, the test set (x_test,
    y_test), and per client its availability pi, its second eigenvalue lam, its type (index into
    TYPE_NAMES), its cluster and its local optimum F_k^*."""
    name: str
    x: torch.Tensor
    y: torch.Tensor
    clients: list
    x_test: torch.Tensor
    y_test: torch.Tensor
    pi: np.ndarray
    lam: np.ndarray
    types: np.ndarray
    cluster: np.ndarray
    optima: np.ndarray
    w_star: np.ndarray | None = None

    def planted_accuracy(self) -> float:
        """Test accuracy of the planted linear rule 1[x . w* > 0] (synthetic set only): the Bayes rule of
        both clusters, since flipping labels with probability below 1/2 does not change it."""
        if self.w_star is None:
            raise ValueError(f"the {self.name} federation has no planted model")
        pred = (self.x_test.double().numpy() @ self.w_star > 0).astype(np.int64)
        return float((pred == self.y_test.numpy()).mean())

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(c) for c in self.clients])

    @property
    def q(self) -> np.ndarray:
        """The target weights q_k = n_k / sum_j n_j."""
        return self.sizes / self.sizes.sum()

    def describe(self) -> pd.DataFrame:
        """One row per client: cluster, type, pi, lambda, n_k, F_k^*."""
        return pd.DataFrame({"cluster": self.cluster + 1, "type": [TYPE_NAMES[t] for t in self.types],
                             "pi": self.pi, "lambda": self.lam, "n_train": self.sizes, "F_star": self.optima})


def assign_types(n: int, g: np.random.Generator, deterministic: bool) -> np.ndarray:
    """Type of each of n clients (0, 1, 2 = TYPE_NAMES). ``deterministic``: floor(n p) of each type, the
    remainder one by one to the types in order (``compute_count_per_cluster`` with
    ``--deterministic_split``); else multinomial counts. The clients get the types through a random
    permutation (``generate_tasks_types``)."""
    p = np.array(TYPE_PROBS)
    if deterministic:
        counts = np.floor(n * p).astype(int)
        for i in range(n - counts.sum()):
            counts[i % len(counts)] += 1
    else:
        counts = g.multinomial(n, p)
    types = np.empty(n, dtype=np.int64)
    types[g.permutation(n)] = np.repeat(np.arange(len(p)), counts)
    return types


def availability_parameters(types: np.ndarray, g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(pi, lam) of clients of the given types: pi = 1/2 + 0.4 (available) or 1/2 - 0.4 (unavailable);
    stable: lam = max(0.9, 1 - 1/pi + e, 1 - 1/(1-pi) + e); shifting: lam = (N(0, 0.01^2) + 0.01)/2
    clipped to [max(-1 + e, 1 - 1/pi + e, 1 - 1/(1-pi)) + e, 1 - e], e = 1e-8 (``compute_stability``)."""
    pi = np.where(types == 0, 0.5 + AVAILABILITY_PARAMETER, 0.5 - AVAILABILITY_PARAMETER)
    lam = np.empty(len(types))
    for k, (t, p) in enumerate(zip(types, pi)):
        if TYPE_NAMES[t].endswith("stable"):
            lam[k] = max(STABILITY_PARAMETER, 1 - 1 / p + _ERR, 1 - 1 / (1 - p) + _ERR)
        else:
            lo = max(-1 + _ERR, 1 - 1 / p + _ERR, 1 - 1 / (1 - p)) + _ERR
            lam[k] = np.clip(0.5 * (g.normal(0.0, SHIFT_EPS) + SHIFT_EPS), lo, 1 - _ERR)
    return pi, lam


def local_optimum(x: np.ndarray, y: np.ndarray, C: float = 1.0, tol: float = 1e-12) -> float:
    r"""F_k^* as the authors compute it for binary labels: the mean logistic loss at the minimiser of
    scikit-learn's multinomial objective with two classes, :math:`C\sum_i \ell_i + \frac12\|W\|^2`, which
    depends on the two rows only through u = w_1 - w_0 and is smallest at w_1 = -w_0 = u/2, i.e.
    :math:`C\sum_i \log(1 + e^{-s_i(u\cdot x_i + b)}) + \|u\|^2/4` (intercept not penalised). Solved by
    Newton's method with backtracking in float64 until the gradient's norm is below ``tol``."""
    X = np.hstack([np.asarray(x, dtype=np.float64), np.ones((len(x), 1))])
    y = np.asarray(y, dtype=np.float64)
    d = X.shape[1]
    reg = np.full(d, 0.5)
    reg[-1] = 0.0                                                   # d/du of ||u||^2/4 = u/2; no intercept penalty

    def f(th):
        z = X @ th
        return C * np.sum(np.logaddexp(0, z) - y * z) + 0.25 * th[:-1] @ th[:-1]

    th = np.zeros(d)
    for _ in range(100):
        s = 1 / (1 + np.exp(-(X @ th)))
        grad = C * X.T @ (s - y) + reg * th
        if np.linalg.norm(grad) < tol:
            break
        H = C * (X * (s * (1 - s))[:, None]).T @ X + np.diag(reg)
        step = np.linalg.solve(H, grad)
        t, f0 = 1.0, f(th)
        while f(th - t * step) > f0 - 0.25 * t * grad @ step and t > 1e-12:
            t /= 2
        th = th - t * step
    z = X @ th
    return float(np.mean(np.logaddexp(0, z) - y * z))


def synthetic(seed: int = 42, n_clients: int = 24, dim: int = 10, n_train: int = 50, n_test: int = 150,
              flip: float = 0.2) -> Clients:
    """The authors' synthetic clustered set (``generate_synthetic_clustered``; the paper scripts' values
    as defaults), drawn from our stream ``rng(seed, "cafed/synthetic")``: the numbers differ from the
    authors' seed-42 files, the law is the same. Clients 0-11 form cluster 1, 12-23 cluster 2 (labels
    flipped with probability ``flip``)."""
    if n_clients % 2:
        raise ValueError(f"n_clients must be even (two clusters of equal size), got {n_clients}")
    g = rng(seed, "cafed/synthetic")
    w = g.standard_normal(dim)
    half = n_clients // 2
    X = g.standard_normal((2, half, n_train, dim))
    Xt = g.standard_normal((2, half, n_test, dim))
    p, pt = 1 / (1 + np.exp(-(X @ w))), 1 / (1 + np.exp(-(Xt @ w)))
    p[1], pt[1] = flip * (1 - p[1]) + (1 - flip) * p[1], flip * (1 - pt[1]) + (1 - flip) * pt[1]
    Y, Yt = (g.random(p.shape) < p).astype(np.int64), (g.random(pt.shape) < pt).astype(np.int64)
    types = assign_types(n_clients, g, deterministic=True)
    pi, lam = availability_parameters(types, g)
    x, y = X.reshape(-1, dim), Y.reshape(-1)
    clients = [np.arange(k * n_train, (k + 1) * n_train) for k in range(n_clients)]
    optima = np.array([local_optimum(x[c], y[c]) for c in clients])
    return Clients("synthetic", torch.tensor(x, dtype=torch.float32), torch.tensor(y), clients,
                   torch.tensor(Xt.reshape(-1, dim), dtype=torch.float32), torch.tensor(Yt.reshape(-1)),
                   pi, lam, types, np.repeat([0, 1], half), optima, w)


def mnist(seed: int = 42, n_clients: int = 24, n_clusters: int = 2, swaps: int = 2, train_fraction: float = 1.0,
          root=None) -> Clients:
    """The authors' incongruent MNIST split (``incongruent_split``), drawn from ``rng(seed, "cafed/mnist")``:
    train and test images pooled (70 000), shuffled, cut into ``n_clients`` parts of equal size; a client
    trains on its images from MNIST's training split and is tested on those from its test split; clients
    are shuffled into ``n_clusters`` equal clusters, each swapping ``swaps`` random pairs of labels (4
    distinct digits). Types by multinomial draw per cluster. F_k^* = 0 for every client (the code's value,
    see the module docstring). ``train_fraction`` < 1 keeps that fraction of each client's training images
    (a reduced profile; 1 = the paper's data)."""
    if not 0 < train_fraction <= 1:
        raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction}")
    data = datasets.load("mnist", root)
    norm = lambda t: ((t.reshape(len(t), -1) - 0.1307) / 0.3081).contiguous()  # noqa: E731
    n_tr = len(data.y_train)
    y_all = torch.cat([data.y_train, data.y_test]).numpy()
    g = rng(seed, "cafed/mnist")
    parts = np.array_split(g.permutation(len(y_all)), n_clients)
    members = np.array_split(g.permutation(n_clients), n_clusters)
    y_new = y_all.copy()
    cluster, types = np.empty(n_clients, np.int64), np.empty(n_clients, np.int64)
    for c, ids in enumerate(members):
        pairs = g.choice(10, size=(swaps, 2), replace=False)
        types[ids] = assign_types(len(ids), g, deterministic=False)
        cluster[ids] = c
        idx = np.concatenate([parts[k] for k in ids])
        for a, b in pairs:
            lab = y_new[idx]
            y_new[idx] = np.where(lab == a, b, np.where(lab == b, a, lab))
    pi, lam = availability_parameters(types, g)
    clients = []
    for k in range(n_clients):
        tr = np.sort(parts[k][parts[k] < n_tr])
        clients.append(tr[: max(1, int(round(train_fraction * len(tr))))])
    return Clients("mnist", norm(data.x_train), torch.tensor(y_new[:n_tr]), clients, norm(data.x_test),
                   torch.tensor(y_new[n_tr:]), pi, lam, types, cluster, np.zeros(n_clients))


# ================================================================================================
# the experiment through flkit.fl.run
# ================================================================================================
def run_config(experiment: str, dataset: str, setting: dict, batch_size: int, **extra) -> dict:
    """The stored-run config of a sweep of the CA-Fed page: ``experiment`` ("cafed_synthetic", "cafed_mnist",
    ...), the profile's `setting` of `dataset` (rounds, seeds, beta, ...), the learning rates ``LRS[dataset]``,
    `batch_size`, the source; ``extra`` entries added (or replacing). The CA-Fed page's configs are these with
    no extra entry, so their keys (and stored runs) do not change when other pages add methods."""
    return dict(experiment=experiment, data_seed=42, **setting, lrs=LRS[dataset], batch_size=batch_size,
                source=SOURCE) | extra


def make_task(cl: Clients, batch_size: int, epochs: int = 2, train_metrics: bool = False) -> EngineTask:
    """The clients' local training: a linear model (1 logit: logistic loss; 10: cross-entropy), SGD with
    momentum 0.9 and weight decay 1e-2 (``utils/constants.py``), ``epochs`` passes in minibatches of
    ``batch_size`` (the short last batch kept, as the code's DataLoader). ``train_metrics``: also the loss and
    accuracy on the union of the clients' training data (``train_loss`` is the target objective F_T with
    q_k = n_k / sum_j n_j, without the weight decay term)."""
    classes = int(max(cl.y.max(), cl.y_test.max())) + 1
    out = 1 if classes == 2 else classes
    return EngineTask(models.linear(cl.x.shape[1], out), cl.x, cl.y, cl.clients, cl.x_test, cl.y_test,
                      batch_size=batch_size, epochs=epochs, momentum=0.9, weight_decay=1e-2,
                      eval_batch_size=4096, train_metrics=train_metrics)


def algorithms(cl: Clients, lrs: dict, rounds: int, beta: float, k: int = 12,
               methods: Sequence[str] = METHODS, K: int | None = FEDAU_K) -> dict[str, fl.Algorithm]:
    """The methods as ``fl.Algorithm`` s: sampler + rule + server SGD (momentum 0.9, weight decay 1e-2) + the
    (local, server) learning rates of ``lrs``. F3AST: k = 12 clients, smoothing 1/rounds. "fedau" (not in
    METHODS; see WITH_FEDAU): every available client (as Unbiased), ``aggregate.FedAUWeighted(K)``, the
    learning rates ``lrs["fedau"]`` if given, else Unbiased's; its rule never reads the availability pi."""
    unknown = sorted(set(methods) - set(WITH_FEDAU))
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose among {list(WITH_FEDAU)}")
    s = 1.0 / rounds
    parts = {
        "unbiased": (aggregate.InverseAvailability(), None),
        "f3ast": (aggregate.InverseAvailability(ema=s), sample.F3AST(k, cl.pi, s)),
        "adafed": (aggregate.InverseAvailability(normalize=True), None),
        "cafed": (aggregate.InverseAvailability(), sample.CAFed(cl.pi, cl.lam, cl.optima, beta=beta)),
    }
    if "fedau" in methods:
        parts["fedau"] = (aggregate.FedAUWeighted(K), None)
    out = {}
    for m in methods:
        rule, sampler = parts[m]
        local, server = lrs["unbiased"] if m == "fedau" and "fedau" not in lrs else lrs[m]
        out[m] = fl.Algorithm(aggregate.ServerSGD(rule, momentum=0.9, weight_decay=1e-2), sampler=sampler,
                              lr=server, local_lr=local, p=cl.pi, label=LABELS[m])   # FedAUWeighted reads no p
    return out


def run_experiment(cl: Clients, lrs: dict, rounds: int, seeds: Sequence[int], beta: float, batch_size: int,
                   methods: Sequence[str] = METHODS, progress: bool = False, train_metrics: bool = False,
                   K: int | None = FEDAU_K) -> pd.DataFrame:
    """Every method on the same Markov availability (one mask per seed, ``participation.markov`` with the
    clients' pi and lambda) for `rounds` rounds. Returns a tidy table: the test accuracy every round
    (metric test_acc, client = -1; with ``train_metrics`` also train_loss, the target objective) and, per
    client, the rounds it was available (metric available_rounds) and the rounds in which it was aggregated
    (aggregated_rounds) and the total weight it received (weight_sum), at round = rounds; for "fedau" (cutoff
    `K`) also its final weight omega per client (metric omega)."""
    rounds, seeds = settings.positive_int(rounds, "rounds"), settings.seeds(seeds)
    settings.positive_int(batch_size, "batch_size")
    task = make_task(cl, batch_size, train_metrics=train_metrics)
    masks = {int(s): participation.markov(cl.pi, rounds, int(s), lam=cl.lam) for s in seeds}
    res = fl.run(task, algorithms(cl, lrs, rounds, beta, methods=methods, K=K), seeds=list(seeds), rounds=rounds,
                 availability=masks, every=1, diverge_factor=None, progress=progress, desc=cl.name)
    table = res.tidy().assign(client=-1)
    table = table[table["metric"].isin(("test_acc", "train_loss") if train_metrics else ("test_acc",))]
    rows = []
    for m in methods:
        st = res.final[m].inner                                                   # WeightState, (S, N)
        for i, s in enumerate(res.seeds[m]):
            avail = masks[int(s)].sum(0)
            diag = [("available_rounds", avail), ("aggregated_rounds", st.rounds[i].cpu().numpy()),
                    ("weight_sum", st.weight[i].cpu().numpy())]
            if m == "fedau":
                diag.append(("omega", aggregate.FedAUWeighted(K).omega(st)[i].cpu().numpy()))
            for metric, v in diag:
                rows.append(pd.DataFrame({"method": m, "seed": int(s), "round": rounds, "metric": metric,
                                          "value": np.asarray(v, dtype=float), "client": np.arange(len(v))}))
    return pd.concat([table] + rows, ignore_index=True)


def log_rounds(rounds: int, log_freq: int = 10) -> np.ndarray:
    """The rounds at which the authors' code logs (``run_experiment.py``): round 0 (before training), then
    after step ii (the model of round ii + 1) when ii < 40 and ii % 3 == 1, or ii % log_freq == log_freq - 1."""
    after = [ii + 1 for ii in range(rounds) if (ii < 40 and ii % 3 == 1) or ii % log_freq == log_freq - 1]
    return np.array([0] + after)


def summarize(table: pd.DataFrame, rounds: int, grid: str = "log") -> pd.DataFrame:
    """Per method and seed, on the test accuracy in percent: ``max`` (largest value), ``time_avg`` (mean
    of the values: the last point of the code's cumulative-average curve) and ``std_2nd_half`` (standard
    deviation, ddof 0, of the values at rounds >= rounds/2); values at the code's logged rounds
    (``grid="log"``, :func:`log_rounds`) or at every round (``grid="all"``). Returns one row per (method,
    seed)."""
    if grid not in ("log", "all"):
        raise ValueError(f"grid must be 'log' (the code's logged rounds) or 'all', got {grid!r}")
    acc = table[(table["metric"] == "test_acc") & (table["client"] < 0)]
    keep = log_rounds(rounds) if grid == "log" else np.arange(rounds + 1)
    acc = acc[acc["round"].isin(keep)]
    rows = []
    for (m, s), g in acc.groupby(["method", "seed"]):
        v = 100 * g.sort_values("round")["value"].to_numpy()
        r = g.sort_values("round")["round"].to_numpy()
        rows.append(dict(method=m, seed=s, max=v.max(), time_avg=v.mean(), std_2nd_half=v[r >= rounds / 2].std()))
    return pd.DataFrame(rows)


def compare_table(summary: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Ours (mean and standard error over seeds) beside the README's value, per method and metric."""
    ref = readme_table().set_index(["dataset", "method"]).loc[dataset]
    rows = []
    for m in METHODS:
        g = summary[summary["method"] == m]
        if g.empty:
            continue
        row = {"method": LABELS[m]}
        for k in ("max", "time_avg", "std_2nd_half"):
            row[f"{k}: ours"] = g[k].mean()
            row[f"{k}: se"] = g[k].std(ddof=1) / np.sqrt(len(g)) if len(g) > 1 else np.nan
            row[f"{k}: README"] = ref.loc[m, k]
        rows.append(row)
    return pd.DataFrame(rows).set_index("method")


def paired_difference(summary: pd.DataFrame, metric: str, a: str = "cafed", b: str | None = None) -> dict:
    """Method `a` minus method `b` (default: the best other method on `metric`, highest for accuracies,
    lowest for std_2nd_half) on `metric`, paired by seed (every method of a seed sees the same
    availability): mean, standard error (NaN with one seed) and the number of seeds."""
    piv = summary.pivot_table(index="seed", columns="method", values=metric)
    if b is None:
        others = piv.drop(columns=a).mean()
        b = others.idxmin() if metric == "std_2nd_half" else others.idxmax()
    d = piv[a] - piv[b]
    return dict(a=a, b=b, metric=metric, diff=d.mean(), se=d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else np.nan,
                seeds=len(d))


def verdict(diff: float, se: float, better: str = "higher") -> str:
    """Reading of a paired difference: beyond 2 standard errors or not (one seed: no verdict)."""
    if not np.isfinite(se):
        return "one seed only: no standard error, no verdict"
    if abs(diff) <= 2 * se:
        return "within 2 standard errors of 0: not distinguishable with these seeds"
    good = (diff > 0) == (better == "higher")
    return f"{'better' if good else 'worse'} by more than 2 standard errors"


def readme_check(summary: pd.DataFrame, metric: str, dataset: str) -> claims.Check:
    """The README's claim "CA-Fed achieves higher time-average accuracy and a lower standard deviation" on
    `metric` ("time_avg": higher is better; "std_2nd_half": lower), against the best other method as in
    :func:`paired_difference`, as a ``claims.compare`` on the seed-paired values: confirmed when the paired
    difference in CA-Fed's favour exceeds 2 standard errors (the page's criterion), contradicted when it
    exceeds them the other way."""
    if metric not in ("time_avg", "std_2nd_half"):
        raise ValueError(f"metric must be 'time_avg' or 'std_2nd_half' (the README's claim), got {metric!r}")
    b = paired_difference(summary, metric)["b"]
    piv = summary.pivot_table(index="seed", columns="method", values=metric)
    better, worse = (piv["cafed"], piv[b]) if metric == "time_avg" else (piv[b], piv["cafed"])
    name = "time-average accuracy" if metric == "time_avg" else "standard deviation over the second half"
    what = (f"{dataset}: CA-Fed's {name} {'above' if metric == 'time_avg' else 'below'} that of the best other "
            f"method ({LABELS[b]}), points, seed-paired")
    return claims.compare(what, better.to_numpy(), worse.to_numpy())


def _usage(table: pd.DataFrame, cl: Clients) -> pd.DataFrame:
    """Per method, seed and type: the mean over the type's clients of (aggregated / available rounds)."""
    per = table[table["client"] >= 0].pivot_table(index=["method", "seed", "client"], columns="metric",
                                                  values="value").reset_index()
    per["frac"] = per["aggregated_rounds"] / per["available_rounds"].where(per["available_rounds"] > 0)
    per["type"] = [TYPE_NAMES[t] for t in cl.types[per["client"].to_numpy(dtype=int)]]
    return per.groupby(["method", "seed", "type"])["frac"].mean().unstack("type")


def usage_by_type(table: pd.DataFrame, cl: Clients) -> pd.DataFrame:
    """Per method and availability type: the fraction of the clients' available rounds in which the
    method aggregated them (mean over the clients of the type, then over the seeds)."""
    out = _usage(table, cl).groupby("method").mean()
    return out.reindex([m for m in METHODS if m in out.index]).rename(index=LABELS)


def usage_contrast(table: pd.DataFrame, cl: Clients, kind: str = "unavailable-stable",
                   method: str = "cafed") -> dict:
    """How much less `method` uses the clients of type `kind` than those of the other types: per seed,
    (mean fraction of the other types) - (fraction of `kind`), then mean and standard error over seeds."""
    u = _usage(table, cl).loc[method]
    d = u.drop(columns=kind).mean(1) - u[kind]
    d = d.dropna()
    return dict(diff=d.mean(), se=d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else np.nan, seeds=len(d))


def lesson_check(table: pd.DataFrame, cl: Clients, dataset: str, kind: str = "unavailable-stable") -> claims.Check:
    """The notes' lesson from Theorem 2 as CA-Fed's behaviour: CA-Fed aggregates the rare and correlated
    clients (type `kind`) in a smaller fraction of their available rounds than the other types, as a
    ``claims.compare`` on the per-seed fractions (the page's criterion: :func:`usage_contrast` beyond 2
    standard errors)."""
    u = _usage(table, cl).loc["cafed"]
    return claims.compare(f"{dataset}: fraction of their available rounds in which CA-Fed aggregates the other "
                          f"types minus the {kind} clients", u.drop(columns=kind).mean(1).to_numpy(),
                          u[kind].to_numpy())


# ================================================================================================
# the notes' claims
# ================================================================================================
def share_check(pi, lam, rounds: int, seeds: Sequence[int], groups=None, alpha=None) -> pd.DataFrame:
    r"""The notes' biased objective: aggregating the available clients with weights q_i, the expected
    aggregate weighs client i by :math:`p_i = \pi_i q_i / \sum_j \pi_j q_j`; with :math:`q_i = \alpha_i/\pi_i`,
    :math:`p_i = \alpha_i`. Monte Carlo on Markov availability (``participation.markov``): per seed, the
    share of client i in the total weight over `rounds` rounds, :math:`\sum_t q_i 1[i\in A_t] /
    \sum_t\sum_j q_j 1[j\in A_t]`; per group of clients (``groups``: one label per client, default their
    pi) the sum of their shares: mean over seeds, standard error, and the predicted sum of p_i. Rules:
    ``"q = alpha"`` and ``"q = alpha/pi"``; alpha uniform unless given."""
    pi, lam = settings.probabilities(pi, "pi"), np.asarray(lam, dtype=float)
    rounds, seeds = settings.positive_int(rounds, "rounds"), settings.seeds(seeds)
    if len(seeds) < 2:
        raise ValueError(f"share_check needs at least 2 seeds (a standard error over seeds), got {seeds}")
    alpha = np.full(len(pi), 1 / len(pi)) if alpha is None else np.asarray(alpha, dtype=float)
    counts = np.stack([participation.markov(pi, rounds, int(s), lam=lam).sum(0) for s in seeds])  # (S, N)
    groups = np.array([f"pi={v:g}" for v in pi] if groups is None else [str(v) for v in groups])
    if len(groups) != len(pi):
        raise ValueError(f"groups needs one label per client ({len(pi)}), got {len(groups)}")
    rows = []
    for rule, q in (("q = alpha", alpha), ("q = alpha/pi", alpha / pi)):
        share = counts * q / (counts * q).sum(1, keepdims=True)
        pred = pi * q / (pi * q).sum()
        for gname in dict.fromkeys(groups):
            sel = groups == gname
            v = share[:, sel].sum(1)
            rows.append(dict(rule=rule, group=gname, clients=int(sel.sum()), pi=float(pi[sel][0]),
                             measured=v.mean(), se=v.std(ddof=1) / np.sqrt(len(v)), predicted=pred[sel].sum(),
                             target=alpha[sel].sum()))
    out = pd.DataFrame(rows)
    out["z"] = (out["measured"] - out["predicted"]) / out["se"]
    return out


def worked_example(F_hat=(0.5, 2.25, 3.5, 3.75), lam=(0.2, 0.9, 0.0, 0.5)
                   ) -> tuple[pd.DataFrame, np.ndarray, list[int], dict]:
    r"""A 4-client case small enough to follow by hand: q = 1/4 each, pi = (0.5, 0.25, 1, 0.8), lambda =
    (0.2, 0.9, 0, 0.5), F* = (0.5, 0.25, 0.5, 0.75) and by default F_hat = (0.5, 2.25, 3.5, 3.75), i.e. gaps
    F_hat - F* = (0, 2, 3, 3), max gap 3. Since a = q/pi, the weights w = pi a / sum are q restricted to the
    kept clients and renormalised; with m of the 4 clients removed TV(q, w) = m/4, so
    E = (mean gap of the kept clients) + 3 (m/4)^2.

    Pass 1 (|lambda| decreasing: clients 1, 3, 0, 2), from E(all) = 2: without 1, 2 + 3/16 = 35/16 > 2
    (kept); without 3, 5/3 + 3/16 = 89/48 < 2 (excluded); without 3 and 0, 5/2 + 3/4 = 13/4 (kept);
    without 3 and 2, 1 + 3/4 = 7/4 < 89/48 (excluded). Pass 2 (pi increasing: 1, 0, 3, 2): without 3, 2
    and 1, 0 + 3 (3/4)^2 = 27/16 < 7/4 (excluded: client 1, kept in pass 1, goes now); removing 0 would
    leave nobody, which ends the pass. Result a = (1/2, 0, 0, 0), excluded in the order 3, 2, 1.
    Returns (trace table, allocation, excluded clients, inputs)."""
    inputs = dict(q=np.full(4, 0.25), pi=np.array([0.5, 0.25, 1.0, 0.8]), lam=np.asarray(lam, dtype=float),
                  F_hat=np.asarray(F_hat, dtype=float), F_star=np.array([0.5, 0.25, 0.5, 0.75]))
    trace: list = []
    a, excluded = sample.cafed_allocation(inputs["q"], inputs["pi"], inputs["lam"],
                                          inputs["F_hat"] - inputs["F_star"], trace=trace)
    tr = pd.DataFrame(trace).rename(columns={"pass_": "pass", "current": "E(current)", "candidate": "E(without k)",
                                             "taken": "excluded"})
    return tr, a, excluded, inputs


# ================================================================================================
# the page: its stored runs, its readings and its checks
# ================================================================================================
BOX = dict(page="availability/cafed",
           headline="Claim (what we learn from Theorem 2): to speed up training, ignore clients with low availability "
                    "and clients highly correlated over time",
           tests="the notes' lesson from Theorem 2 (to train faster, ignore rarely available and strongly correlated "
                 "clients), the biased objective F_B under Markov availability, CA-Fed's greedy exclusion rule, and "
                 "CA-Fed against Unbiased, AdaFed and F3AST beside the authors' README numbers")
# the control run: CA-Fed at Unbiased's learning rates (synthetic task)
CONTROL_LRS = {**LRS["synthetic"], "cafed": LRS["synthetic"]["unbiased"]}
# the hand computation of :func:`worked_example`: E at its first five steps
HAND_E = (35 / 16, 89 / 48, 13 / 4, 7 / 4, 27 / 16)


def configs(cfg: dict) -> dict:
    """The stored-run configs of the page under the settings `cfg` (:func:`profile`): "shares" (the notes' p on
    Markov availability), "synthetic", "control" (CA-Fed alone at Unbiased's learning rates) and "mnist"."""
    S, M = cfg["synthetic"], cfg["mnist"]
    return dict(shares=dict(experiment="cafed_shares", data_seed=42, **cfg["share"]),
                synthetic=run_config("cafed_synthetic", "synthetic", S, 32),
                control=run_config("cafed_synthetic", "synthetic", S, 32) | dict(
                    experiment="cafed_synthetic_control", lrs=CONTROL_LRS, methods=["cafed"]),
                mnist=run_config("cafed_mnist", "mnist", M, 64))


def share_runs(cl: Clients, cfg: dict, where) -> pd.DataFrame:
    """:func:`share_check` on the federation `cl` (groups: the availability types), read from the store `where`
    or made."""
    SH = cfg["share"]
    types = [TYPE_NAMES[t] for t in cl.types]
    return common.cached(where, configs(cfg)["shares"],
                         lambda: share_check(cl.pi, cl.lam, SH["rounds"], SH["seeds"], groups=types)
                         .assign(round=0, metric="share", value=lambda d: d["measured"]))


def synthetic_runs(cl: Clients, cfg: dict, where) -> pd.DataFrame:
    """:func:`run_experiment` on the synthetic federation `cl`, read from the store `where` or made."""
    S = cfg["synthetic"]
    return common.cached(where, configs(cfg)["synthetic"],
                         lambda: run_experiment(cl, LRS["synthetic"], S["rounds"], S["seeds"], S["beta"], 32))


def control_runs(cl: Clients, cfg: dict, where) -> pd.DataFrame:
    """CA-Fed alone at Unbiased's learning rates (:data:`CONTROL_LRS`) on the synthetic federation `cl`, read
    from the store `where` or made."""
    S = cfg["synthetic"]
    return common.cached(where, configs(cfg)["control"],
                         lambda: run_experiment(cl, CONTROL_LRS, S["rounds"], S["seeds"], S["beta"], 32,
                                                methods=["cafed"]))


def mnist_runs(cl: Clients, cfg: dict, where) -> pd.DataFrame:
    """:func:`run_experiment` on the MNIST federation `cl`, read from the store `where` or made."""
    M = cfg["mnist"]
    return common.cached(where, configs(cfg)["mnist"],
                         lambda: run_experiment(cl, LRS["mnist"], M["rounds"], M["seeds"], M["beta"], 64))


def _share_ok(r) -> bool:
    return abs(r["measured"] - r["predicted"]) <= 3 * r["se"]


def share_checks(shares: pd.DataFrame) -> list[dict]:
    """Per (rule, group) of :func:`share_runs`: the measured share against the notes' p, within 3 standard errors
    (ok), what is checked, the numbers, and a line for the page."""
    out = []
    for _, r in shares.iterrows():
        ok = _share_ok(r)
        out.append(dict(ok=ok, what=f"share of the aggregation weight, {r['rule']}, {r['group']}, against the notes' p",
                        ours=r["measured"], reference=r["predicted"], spread=r["se"],
                        line=f"{r['rule']:>12}, {r['group']:<21} measured {r['measured']:.4f} +- {r['se']:.4f}, notes' "
                             f"p {r['predicted']:.4f}: {'agrees' if ok else 'DISAGREES'} (|measured - p| <= 3 standard "
                             f"errors)"))
    return out


def share_numbers(shares: pd.DataFrame) -> dict:
    """The numbers of the shares that the page's prose glues."""
    sa = shares.set_index(["rule", "group"])
    naive = sa.loc[("q = alpha", "available-shifting")]
    se_ratio = (sa.loc[("q = alpha/pi", "unavailable-stable"), "se"]
                / sa.loc[("q = alpha/pi", "unavailable-shifting"), "se"])
    share_ok = [_share_ok(r) for _, r in shares.iterrows()]
    return dict(naive_share=naive["measured"], naive_target=naive["target"], n_share_ok=sum(share_ok),
                n_shares=len(shares), share_se_ratio=se_ratio, w_shares="hold" if all(share_ok) else "do not all hold")


def matches_hand(trace: pd.DataFrame, a, excluded) -> bool:
    """Whether :func:`worked_example` (default inputs) reproduces the hand computation: exclusion order
    [3, 2, 1], the values E of :data:`HAND_E` to 1e-12, allocation (1/2, 0, 0, 0)."""
    return bool(excluded == [3, 2, 1] and np.allclose(trace["E(without k)"].to_numpy()[:5], HAND_E, rtol=0, atol=1e-12)
                and np.array_equal(a, [0.5, 0, 0, 0]))


def type_table(cl: Clients) -> pd.DataFrame:
    """Per availability type: clients, pi, the range of lambda and the mean local optimum."""
    return cl.describe().groupby("type").agg(clients=("pi", "size"), pi=("pi", "first"), lam_min=("lambda", "min"),
                                             lam_max=("lambda", "max"), F_star_mean=("F_star", "mean")).round(4)


def difference_numbers(diffs: dict, prefix: str = "syn") -> dict:
    """The paired differences of CA-Fed against the best other method (:func:`paired_difference`, one per metric)
    as the page's prose glues them."""
    out = {}
    for m, d in diffs.items():
        out.update({f"{prefix}_{m}_b": LABELS[d["b"]], f"{prefix}_{m}_diff": d["diff"], f"{prefix}_{m}_se": d["se"],
                    f"{prefix}_{m}_n": d["seeds"],
                    f"{prefix}_{m}_v": verdict(d["diff"], d["se"], "lower" if m == "std_2nd_half" else "higher")})
    return out


def control_numbers(dc: dict) -> dict:
    """CA-Fed against Unbiased at equal learning rates (one paired difference per metric), as the prose glues."""
    out = {}
    for m, d in dc.items():
        out.update({f"ctl_{m}_diff": d["diff"], f"ctl_{m}_se": d["se"], f"ctl_{m}_n": d["seeds"],
                    f"ctl_{m}_v": verdict(d["diff"], d["se"])})
    return out


def usage_numbers(use: pd.DataFrame, uc: dict) -> dict:
    """CA-Fed's use of each availability type (:func:`usage_by_type`, :func:`usage_contrast`), as the prose glues."""
    ca = use.loc["CA-Fed"]
    return dict(use_as=ca["available-shifting"], use_us=ca["unavailable-stable"], use_ush=ca["unavailable-shifting"],
                uc_diff=uc["diff"], uc_se=uc["se"], uc_n=uc["seeds"], uc_v=verdict(uc["diff"], uc["se"]))


def synthetic_numbers(comp: pd.DataFrame, cl: Clients, use: pd.DataFrame, uc: dict, dc: dict) -> dict:
    """The reading of the synthetic task that the prose glues: accuracies against the README's and the planted
    rule's, CA-Fed's rank, how often it skips clients, and what the control run at equal learning rates says."""
    ca = use.loc["CA-Fed"]
    lesson = uc["diff"] > 2 * uc["se"]
    rank = comp["time_avg: ours"].rank(ascending=False)
    ct_ = dc["time_avg"]
    return dict(max_ours=comp["max: ours"].mean(), max_readme=comp["max: README"].mean(), planted=cl.planted_accuracy(),
                rank_ca=int(rank["CA-Fed"]), skip_min=1 - ca.max(), skip_max=1 - ca.min(),
                w_skip=("more often, beyond 2 standard errors" if lesson else
                        "about as often as the others (within 2 standard errors)"),
                w_ctl=("its lead in the table comes from its larger server step, not from the exclusions (which shrink "
                       "the unnormalized aggregate)" if ct_["diff"] < -2 * ct_["se"] else
                       "the exclusions help at equal step sizes" if ct_["diff"] > 2 * ct_["se"] else
                       "not distinguishable at equal step sizes"))


def mnist_numbers(tabm: pd.DataFrame, cl: Clients, summ_m: pd.DataFrame, comp_m: pd.DataFrame, use_m: pd.DataFrame,
                  rounds: int) -> dict:
    """The reading of the MNIST runs that the prose glues: accuracies against the README's, CA-Fed against the
    best other method and against Unbiased (same learning rates), its use of the unavailable-stable clients,
    and the fastest start (accuracy at round 10)."""
    dm = {m: paired_difference(summ_m, m) for m in ("time_avg", "std_2nd_half")}
    uc_m = usage_contrast(tabm, cl)
    du = paired_difference(summ_m, "time_avg", "cafed", "unbiased")   # same learning rates
    rank_m = comp_m["time_avg: ours"].rank(ascending=False)
    acc10 = tabm[(tabm["metric"] == "test_acc") & (tabm["round"] == min(10, rounds))].groupby("method")["value"].mean()
    return dict(mn_max_ours=comp_m["max: ours"].mean(), mn_max_readme=comp_m["max: README"].mean(),
                mn_rank=int(rank_m["CA-Fed"]), mn_ta_diff=dm["time_avg"]["diff"], mn_ta_se=dm["time_avg"]["se"],
                mn_ta_b=LABELS[dm["time_avg"]["b"]], mn_ta_n=dm["time_avg"]["seeds"],
                mn_ta_v=verdict(dm["time_avg"]["diff"], dm["time_avg"]["se"]), mn_un_diff=du["diff"], mn_un_se=du["se"],
                mn_sd_diff=dm["std_2nd_half"]["diff"], mn_sd_se=dm["std_2nd_half"]["se"],
                mn_sd_b=LABELS[dm["std_2nd_half"]["b"]], mn_use_us=use_m.loc["CA-Fed", "unavailable-stable"],
                mn_uc_diff=uc_m["diff"], mn_uc_se=uc_m["se"], mn_fast=LABELS[acc10.idxmax()], mn_fast_acc=acc10.max(),
                mn_fast_round=min(10, rounds), mn_next_acc=acc10.drop(acc10.idxmax()).max())


# ================================================================================================
# figures
# ================================================================================================
def plot_shares(shares: pd.DataFrame, title: str, ax=None):
    """Measured share of each group of clients (error bar: 2 standard errors) against the notes' p
    (crosses), for both choices of q."""
    if ax is None:
        ax = plots.figure(1, 1, row_height=3.2)[1][0, 0]
    groups = list(dict.fromkeys(shares["group"]))
    for j, (rule, g) in enumerate(shares.groupby("rule", sort=False)):
        g = g.set_index("group").loc[groups]
        x = np.arange(len(groups)) + (j - 0.5) * 0.35
        ax.bar(x, g["measured"], 0.35, yerr=2 * g["se"], capsize=3, label=f"{rule}: measured share",
               color=("tab:gray", "tab:purple")[j], alpha=0.7)
        ax.plot(x, g["predicted"], "kx", ms=9, mew=2, label="notes' p (sum over the group)" if j else None)
    ax.plot(np.arange(len(groups)), shares.groupby("group", sort=False)["target"].first().loc[groups], "_",
            color="tab:green", ms=40, mew=2, label="target alpha (sum over the group)")
    labels = [f"{g_}\n({int(shares[shares['group'] == g_]['clients'].iloc[0])} clients, "
              f"pi={shares[shares['group'] == g_]['pi'].iloc[0]:g})" for g_ in groups]
    ax.set_xticks(np.arange(len(groups)), labels)
    ax.set(ylabel="share of the aggregation weight")
    ax.legend()
    ax.set_title(textwrap.fill(title, 90), fontsize=9.5)
    return ax


def plot_curves(table: pd.DataFrame, title: str, axes=None, methods: Sequence[str] = METHODS):
    """Two panels: test accuracy per round and its time average (cumulative mean from round 0), mean over
    seeds with a band of +- one standard error; one curve per method of `methods` in the table."""
    if axes is None:
        axes = plots.figure(1, 2, row_height=3.0)[1][0]
    acc = table[(table["metric"] == "test_acc") & (table["client"] < 0)]
    # curves that nearly coincide (Unbiased, F3AST, CA-Fed on MNIST) stay apart by style: the widest drawn
    # first, then dashed and dotted lines, with markers at staggered rounds
    style = {"unbiased": ("-", 2.8, "o"), "f3ast": ("--", 1.6, "s"), "adafed": ("-", 1.2, "D"),
             "cafed": (":", 2.0, "^"),
             "fedau": ("-.", 1.8, "v")}
    for k, m in enumerate(methods):
        g = acc[acc["method"] == m].pivot_table(index="round", columns="seed", values="value") * 100
        if g.empty:
            continue
        ls, lw, mk = style.get(m, ("-", 1.4, None))
        step = max(1, len(g) // 6)
        for ax, v in ((axes[0], g), (axes[1], g.cumsum() / np.arange(1, len(g) + 1)[:, None])):
            mu, se = v.mean(1), v.std(1, ddof=1).fillna(0) / np.sqrt(v.shape[1])
            ax.plot(v.index, mu, color=PALETTE[m], label=LABELS[m], lw=lw, ls=ls, marker=mk, ms=5,
                    markevery=(step // 2 + k * step // 4, step))
            ax.fill_between(v.index, mu - se, mu + se, color=PALETTE[m], alpha=0.2, lw=0)
    axes[0].set(xlabel="communication round", ylabel="test accuracy (%)")
    axes[1].set(xlabel="communication round", ylabel="time-average test accuracy (%)")
    axes[1].legend()
    axes[0].figure.suptitle(textwrap.fill(title, 100), fontsize=9.5)
    return axes


def plot_usage(table: pd.DataFrame, cl: Clients, title: str, ax=None):
    """Per client (grouped by type), the fraction of its available rounds in which each method aggregated
    it, mean over seeds."""
    if ax is None:
        ax = plots.figure(1, 1, row_height=3.4)[1][0, 0]
    per = table[table["client"] >= 0].pivot_table(index=["method", "seed", "client"], columns="metric",
                                                  values="value").reset_index()
    per["frac"] = per["aggregated_rounds"] / per["available_rounds"].where(per["available_rounds"] > 0)
    frac = per.groupby(["method", "client"])["frac"].mean().unstack("client")
    order = np.lexsort((np.arange(len(cl.types)), cl.types))
    width = 0.2
    for j, m in enumerate(METHODS):
        if m in frac.index:
            ax.bar(np.arange(len(order)) + (j - 1.5) * width, frac.loc[m].to_numpy()[order], width,
                   color=PALETTE[m], label=LABELS[m])
    ax.set_xticks(np.arange(len(order)),
                  [str(k) if len(order) <= 30 or i % 2 == 0 else "" for i, k in enumerate(order)])
    for b in np.flatnonzero(np.diff(cl.types[order])) + 0.5:
        ax.axvline(b, color="k", lw=0.8, ls=":")
    starts = [0] + list(np.flatnonzero(np.diff(cl.types[order])) + 1)
    for s0, s1 in zip(starts, starts[1:] + [len(order)]):
        ax.text((s0 + s1 - 1) / 2, 1.03, f"{TYPE_NAMES[cl.types[order][s0]]}\n($\\pi$={cl.pi[order][s0]:g})",
                ha="center", va="bottom", linespacing=1.0)
    ax.set(xlabel="client (grouped by availability type)", ylabel="aggregated / available rounds", ylim=(0, 1.25))
    ax.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    ax.set_title(textwrap.fill(title, 90), fontsize=9.5, pad=16)
    return ax
