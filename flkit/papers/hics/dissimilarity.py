r"""Assumption 1 on Fashion-MNIST (document 004, Sec. 3.1, Eq. 3; appendix 6.2, Fig. 6(a)), for the theory page.

**Assumption 1** (bounded dissimilarity): for every client k and round t,

.. math:: \|\nabla F_k(\theta^t) - \nabla F(\theta^t)\|^2
          \le -\exp\big(\beta[H(\mathcal D^{(k)}) - H(\mathcal D_0)]\big)\rho
          + \kappa = \sigma_k^2, \qquad \beta > 0,\ \kappa > \rho > 0,

with :math:`H(\mathcal D_0) = \ln C` (the uniform distribution). **Appendix 6.2** tests it with 250 clients whose
Dirichlet alphas are "250 values in the interval [0.01, 50]", all clients participating in each of 500 rounds;
in each round every client computes its gradient at the global model, a super-client holding the union of the
clients' data computes the "true" gradient, and Fig. 6(a) plots :math:`\|\eta_t\nabla F_k - \eta_t\nabla F\|^2`
against :math:`H(\mathcal D^{(k)})` with two curves of Eq. 3's form that "envelop 95% of the points" (FMNIST:
beta = 1.0, rho = 0.13, kappa = 0.14 and beta = 1.5, rho = 0.025, kappa = 0.022,
:data:`flkit.papers.hics.common.DOC_CURVES`).

**Our reading** (the document leaves these open):

* alphas: ``np.geomspace(0.01, 50, 250)`` (log-uniform, deterministic), client k getting the k-th;
* client k's labels: :math:`p_k \sim \mathrm{Dir}(\alpha_k\mathbf 1_C)` (stream ``rng(seed, "fig6/dirichlet")``),
  ``size`` images with counts :math:`\mathrm{round}(\mathrm{size}\cdot p_k)` (largest remainder), drawn without
  replacement from the class's training images independently of the other clients (stream
  ``rng(seed, "fig6/images")``; two clients may share an image). Every client holds ``size`` images, so the
  super-client's gradient on the union of the clients' data is :math:`\frac1N\sum_k\nabla F_k` (Eq. 2's
  :math:`\nabla F`) for a model without batch statistics; its label distribution is the mean of the clients',
  close to uniform (:func:`union_entropy`);
* the gradients: each client's mean cross-entropy over all its data at :math:`\theta^t` (dropout off; batch
  statistics over the client's data for a model that has them), recorded every ``every`` rounds; the plotted
  quantity is the left side of Eq. 3, unscaled: the document's axis is :math:`\eta_t^2` times it, which changes
  :math:`\rho` and :math:`\kappa` and neither :math:`\beta` nor :math:`\rho/\kappa`;
* training between the recorded rounds: FedAvg with every client, R = 2 epochs of mini-batch SGD, B = 64,
  :math:`\eta` = 0.001 constant (appendix 6.1; the page's reading of the learning-rate decay), equal weights.

The document's CNN trains the 250 clients of a round together on a GPU (:func:`fig6_task`: 8 sequential local steps
a round instead of 2,000); on one CPU thread it takes about a minute a round, 8 h for the 500 rounds (extrapolated in
:mod:`flkit.owed`), so the page runs multinomial logistic regression (:func:`flkit.models.logreg`) as a labelled
stand-in; the CNN is owed (``python -m flkit.sweep hics-fig6``, ledger item ``hics-fig6-paper``).

**Envelopes.** For a fixed :math:`\beta` the curve :math:`y = \kappa - \rho u`, :math:`u = e^{\beta(x - \ln C)}`, is
linear in :math:`(\kappa, \rho)`: :func:`tight_envelope` finds the curve of least area over :math:`[0, \ln C]` lying
above every point (Assumption 1 as stated, a bound for all k and t; a linear program per :math:`\beta` of a grid).
Every such curve is concave and decreasing in H; :func:`thirds` and :func:`shape_ratio` test whether the 95% level
of the points (:func:`binned_quantile`, what the document's curves envelop) has that shape.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from scipy import optimize, stats

from flkit import engine, fl, models, plots, results
from flkit.fl import Runs
from flkit.papers import claims
from flkit.partition import Partition
from flkit.papers.hics.common import DOC_CURVES, DROPOUT_STREAM, NORM, batch_clients, label_fractions, true_entropy
from flkit.seeding import rng
from flkit.tasks import EngineTask

__all__ = ["FIG6", "MODELS", "BETAS", "spread_alphas", "dirichlet_clients", "union_entropy", "fig6_task",
           "gradient_differences", "run_fig6", "fig6_config", "fig6_runs", "point_frame", "binned_quantile",
           "tight_envelope", "envelope_curve", "round_spearman", "thirds", "shape_ratio", "doc_shape_ratio",
           "fig6_checks",
           "plot_fig6", "shape_table", "fig6_summary"]

FIG6 = dict(clients=250, alpha_lo=0.01, alpha_hi=50.0, size=240, rounds=500, every=10, epochs=2, batch_size=64,
            lr=0.001, seed=0, model="logreg")          # appendix 6.2 (clients, alphas, rounds), 6.1 (R, B, eta)
BETAS = tuple(float(b) for b in np.round(np.geomspace(0.02, 8.0, 40), 4))   # the beta grid of the envelope fits
MODELS = {"logreg": models.logreg, "hics_fmnist_paper": models.hics_fmnist_paper}


# ---------------------------------------------------------------------------------------- the clients
def spread_alphas(lo: float, hi: float, n: int) -> np.ndarray:
    """``n`` alphas spread log-uniformly over [lo, hi] (both ends included)."""
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo!r}, hi={hi!r}")
    if n < 2:
        raise ValueError(f"n must be >= 2, got {n!r}")
    return np.geomspace(lo, hi, n)


def _largest_remainder(p: np.ndarray, size: int) -> np.ndarray:
    raw = p * size
    c = np.floor(raw).astype(np.int64)
    short = size - int(c.sum())
    c[np.argsort(-(raw - c), kind="stable")[:short]] += 1
    return c


def dirichlet_clients(labels, alphas, size: int, seed: int) -> Partition:
    """One client per alpha: label fractions :math:`p_k\\sim\\mathrm{Dir}(\\alpha_k\\mathbf 1_C)`, ``size`` images
    with counts round(size p_k) (largest remainder), drawn without replacement from the class's images,
    independently of the other clients (module docstring)."""
    y = np.asarray(labels)
    C = int(y.max()) + 1
    pools = [np.flatnonzero(y == c) for c in range(C)]
    if size < 1 or size > min(len(p) for p in pools):
        raise ValueError(f"size must be in [1, {min(len(p) for p in pools)}] (the smallest class), got {size!r}")
    if np.any(np.asarray(alphas) <= 0):
        raise ValueError(f"every alpha must be > 0, got min {np.min(alphas)!r}")
    g_dir, g_img = rng(seed, "fig6/dirichlet"), rng(seed, "fig6/images")
    idx = []
    for a in alphas:
        counts = _largest_remainder(g_dir.dirichlet(np.full(C, float(a))), size)
        idx.append(np.concatenate([g_img.choice(pools[c], n, replace=False) for c, n in enumerate(counts) if n]))
    return Partition.from_indices(idx, y, C)


def union_entropy(part: Partition) -> float:
    """Entropy (nats) of the label distribution of the union of the clients' data (the super-client's)."""
    total = part.counts.sum(0, keepdims=True)
    return float(true_entropy(total / total.sum())[0])


def fig6_task(data, part: Partition, cfg: dict) -> EngineTask:
    """The clients of ``part`` training ``cfg['model']`` with plain SGD (R epochs, batch B, eta; short last
    batches as a shuffling DataLoader), inputs normalised as the authors' code. Logistic regression: all clients
    of a round at once (the engine's ``fast`` backend). The CNN: ``local_train`` with per-client BatchNorm
    statistics and dropout masks from each client's own stream, as the training page's CNN; its clients train
    together on a GPU and one at a time on a CPU (:func:`flkit.papers.hics.common.batch_clients`), with the
    same numbers up to rounding."""
    mean, std = NORM
    model = MODELS[cfg["model"]]().to(data.x_train.device)
    fast = engine.supports_grouped(model)
    return EngineTask(model, (data.x_train - mean) / std, data.y_train, part.indices, (data.x_test - mean) / std,
                      data.y_test, batch_size=cfg["batch_size"], epochs=cfg["epochs"], local_lr=cfg["lr"],
                      backend="fast" if fast else "engine", vectorized=fast or batch_clients(cfg["model"],
                                                                                             data.x_train.device),
                      dropout_stream=None if fast else DROPOUT_STREAM, skip_done=not fast)


# ---------------------------------------------------------------------------------------- the run
def gradient_differences(task: EngineTask, w: torch.Tensor) -> tuple[np.ndarray, float]:
    r"""At the global model ``w`` (1, d): :math:`\|\nabla F_k - \nabla F\|^2` for every client (float64) and
    :math:`\|\nabla F\|^2`, with :math:`\nabla F = \frac1N\sum_k\nabla F_k` (equal client sizes)."""
    net = engine.to_module(task.model, task.unflatten(w), 0).train()
    for m in net.modules():
        if isinstance(m, torch.nn.Dropout):
            m.eval()
    params = [p for p in net.parameters()]
    grads = []
    for idx in task.clients:
        i = torch.as_tensor(np.asarray(idx), dtype=torch.long, device=task.x.device)
        loss = F.cross_entropy(net(task.x[i]), task.y[i].long())
        grads.append(torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)]).double())
    G = torch.stack(grads)
    gbar = G.mean(0)
    return ((G - gbar) ** 2).sum(1).cpu().numpy(), float((gbar ** 2).sum())


def run_fig6(cfg: dict, data, *, checkpoint=None, deadline: float | None = None,
             checkpoint_every_s: float = 300.0) -> pd.DataFrame:
    """FedAvg with every client for ``cfg['rounds']`` rounds; at rounds 0, every, 2 every, ... (< rounds) the
    gradient differences of every client (metric ``grad_diff2``, column ``client``), :math:`\\|\\nabla F\\|^2`
    (``grad_norm2``) and the test accuracy (``test_acc``). Values rounded to 6 significant digits (the store
    keeps small files).

    checkpoint: a file where the state (round, model, rows so far, keyed by the config) is saved every
    ``checkpoint_every_s`` seconds and before ``deadline`` (a ``time.time()`` value: the loop stops when two
    more rounds and 10 s might not fit and raises :class:`flkit.fl.Deadline`); a later call resumes from it to
    the same numbers (local training is keyed by seed, round and client) and removes it at the end."""
    labels = data.y_train.cpu().numpy()
    part = dirichlet_clients(labels, spread_alphas(cfg["alpha_lo"], cfg["alpha_hi"], cfg["clients"]), cfg["size"],
                             cfg["seed"])
    task = fig6_task(data, part, cfg)
    N, seed = task.num_clients, cfg["seed"]
    w = task.init_params([seed])
    runs = Runs([seed], torch.tensor([float(cfg["lr"])], dtype=task.dtype), ["FedAvg, full participation"])
    everyone = torch.ones(1, N, dtype=torch.bool)
    frames, t0 = [], 0
    ckpt = None if checkpoint is None else Path(checkpoint)
    key = results.config_key(fig6_config(cfg))
    if ckpt is not None and ckpt.is_file():
        S = fl.load_checkpoint(ckpt)
        if S["key"] != key:
            raise RuntimeError(f"checkpoint {ckpt} belongs to another run (key {S['key']} != {key}); remove it")
        t0, w, frames = S["t"], S["w"].to(w.device), S["frames"]

    def save(t_next: int) -> None:
        fl.save_checkpoint(dict(key=key, t=t_next, w=w.cpu(), frames=frames), ckpt)

    tic, last = time.perf_counter(), time.time()
    for t in range(t0, cfg["rounds"]):
        if ckpt is not None and t > t0:
            now = time.time()
            per_round = (time.perf_counter() - tic) / (t - t0)
            if deadline is not None and now + 2 * per_round + 10 > deadline:
                save(t)
                raise fl.Deadline(f"stopped at round {t} of {cfg['rounds']}; resume with the same call "
                                  f"(checkpoint {ckpt})")
            if now - last > checkpoint_every_s:
                save(t)
                last = now
        if t % cfg["every"] == 0:
            d2, g2 = gradient_differences(task, w)
            acc = float(task.metrics(w)["test_acc"].reshape(-1)[0])
            frames += [pd.DataFrame({"round": t, "metric": "grad_diff2", "client": np.arange(N), "value": d2}),
                       pd.DataFrame({"round": [t, t], "metric": ["grad_norm2", "test_acc"], "client": -1,
                                     "value": [g2, acc]})]
        _, delta, _ = task.client_updates(w, everyone, t, runs)
        w = w - delta.mean(0, keepdim=True)
    out = pd.concat(frames, ignore_index=True)
    out["value"] = [float(f"{v:.6g}") for v in out["value"]]
    if ckpt is not None:
        fl.remove_checkpoint(ckpt)
    return out


def fig6_config(cfg: dict) -> dict:
    """The stored job of a Fig. 6 configuration (its key in the results store)."""
    return dict(experiment="fig6_assumption1", **{k: cfg[k] for k in FIG6})


def fig6_checkpoint(cfg: dict, store) -> Path:
    """Where the run of ``cfg`` keeps its mid-run state: ``<store>/checkpoints/fig6-<key>.pt``."""
    return store.root / "checkpoints" / f"fig6-{results.config_key(fig6_config(cfg))}.pt"


def fig6_runs(cfg: dict, data, store, *, deadline: float | None = None) -> tuple[pd.DataFrame, Partition, float]:
    """The run of ``cfg`` (computed once, then read from ``store``), its clients, and the seconds it took when
    it was computed (the last piece's, when it was computed in pieces). deadline: as :func:`run_fig6`'s, with
    the checkpoint :func:`fig6_checkpoint`."""
    c = fig6_config(cfg)
    ck = fig6_checkpoint(cfg, store)
    table = results.sweep([c], lambda j: run_fig6(j, data, checkpoint=ck, deadline=deadline), store,
                          progress=False)
    labels = data.y_train.cpu().numpy()
    part = dirichlet_clients(labels, spread_alphas(cfg["alpha_lo"], cfg["alpha_hi"], cfg["clients"]), cfg["size"],
                             cfg["seed"])
    return table, part, float(store.manifest(c)["wall_time_s"])


def point_frame(table: pd.DataFrame, part: Partition, cfg: dict) -> pd.DataFrame:
    """One row per (recorded round, client): alpha, H(D^(k)) (nats) and y = ||grad F_k - grad F||^2."""
    alphas = spread_alphas(cfg["alpha_lo"], cfg["alpha_hi"], part.num_clients)
    H = true_entropy(label_fractions(part)) + 0.0          # no -0.0 for one-class clients
    t = table[table["metric"] == "grad_diff2"]
    k = t["client"].to_numpy(dtype=int)
    return pd.DataFrame({"round": t["round"].to_numpy(), "client": k, "alpha": alphas[k], "H": H[k],
                         "y": t["value"].to_numpy(dtype=float)})


# ---------------------------------------------------------------------------------------- envelopes
def envelope_curve(x, beta: float, rho: float, kappa: float, C: int = 10) -> np.ndarray:
    """Eq. 3's right side: -exp(beta [x - ln C]) rho + kappa."""
    return kappa - rho * np.exp(beta * (np.asarray(x, dtype=float) - math.log(C)))


def binned_quantile(x, y, bins: int = 12, q: float = 0.95, C: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """The ``q`` quantile of y in ``bins`` equal bins of x over [0, ln C] (empty bins left out): (midpoints,
    levels), the level the document's curves "envelop"."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    edges = np.linspace(0.0, math.log(C), bins + 1)
    b = np.clip(np.digitize(x, edges[1:-1]), 0, bins - 1)
    keep = [i for i in range(bins) if (b == i).any()]
    return (edges[keep] + edges[np.array(keep) + 1]) / 2, np.array([np.quantile(y[b == i], q) for i in keep])


def tight_envelope(x, y, betas=BETAS, C: int = 10) -> dict:
    """Assumption 1 as a bound for every point: per beta, the (kappa, rho >= 0) of least area
    :math:`\\int_0^{\\ln C}(\\kappa - \\rho e^{\\beta(x - \\ln C)})dx` with the curve >= every y (a linear
    program); the beta of least area wins. Returns beta, rho, kappa, the area, and ``constant_area`` =
    max(y) ln C, the area of the usual bound :math:`\\sigma_m^2 = \\max_k\\sigma_k^2` (Sec. 3.1)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    lnC = math.log(C)
    best = None
    for b in betas:
        u = np.exp(b * (x - lnC))
        c = np.array([lnC, -(1 - math.exp(-b * lnC)) / b])          # area = c . (kappa, rho)
        res = optimize.linprog(c, A_ub=np.column_stack([-np.ones_like(u), u]), b_ub=-y,
                               bounds=[(None, None), (0, None)], method="highs")
        if res.status != 0:
            raise RuntimeError(f"envelope fit failed at beta={b}: {res.message}")
        if best is None or res.fun < best["area"] - 1e-15:
            best = dict(beta=float(b), kappa=float(res.x[0]), rho=float(res.x[1]), area=float(res.fun))
    best["constant_area"] = float(y.max() * lnC)
    return best


def round_spearman(pts: pd.DataFrame) -> pd.DataFrame:
    """Per recorded round: Spearman's rank correlation of y with H over the clients."""
    return pd.DataFrame([dict(round=r, spearman=float(stats.spearmanr(g["H"], g["y"]).statistic))
                         for r, g in pts.groupby("round")])


# ---------------------------------------------------------------------------------------- checks
def thirds(x, y, q: float = 0.95, C: int = 10) -> np.ndarray:
    """The ``q`` quantile of y over the points whose x lies in each third of [0, ln C] (low, middle, high)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    edges = np.linspace(0.0, math.log(C), 4)
    b = np.clip(np.digitize(x, edges[1:-1]), 0, 2)
    if any((b == i).sum() == 0 for i in range(3)):
        raise ValueError("every third of [0, ln C] needs at least one point")
    return np.array([np.quantile(y[b == i], q) for i in range(3)])


def shape_ratio(levels) -> float:
    """(middle - high) / (low - middle) of three levels: > 1 when the fall steepens towards ln C (a concave
    decreasing shape, as every curve of Eq. 3's form), < 1 when it flattens (convex)."""
    lo, mid, hi = levels
    return float((mid - hi) / (lo - mid))


def doc_shape_ratio(curve: str = "blue", C: int = 10) -> float:
    """:func:`shape_ratio` of a document curve at the midpoints of the thirds of [0, ln C]."""
    mids = (np.arange(3) + 0.5) * math.log(C) / 3
    return shape_ratio(envelope_curve(mids, **DOC_CURVES[curve], C=C))


def fig6_checks(pts: pd.DataFrame, tight: dict, rs: pd.DataFrame, C: int = 10) -> list:
    """The page's checks (filed by the theory page's rules, :data:`flkit.papers.hics.items.RULES`):

    * ``Fig. 6(a):`` the points have the shape of the document's curves: every curve of Eq. 3's form is concave
      and decreasing in H, so the 95% quantile of y (the level the document's curves envelop) falls more from the
      middle to the high third of [0, ln C] than from the low to the middle third (:func:`shape_ratio` > 1;
      reference: the document's blue curve at the thirds' midpoints);
    * ``Assumption 1:`` the least-area curve of Eq. 3's form above every point (a bound for every client and
      round) has beta > 0, kappa > rho > 0 and is tighter than the constant bound sigma_m^2 (ours = its area
      over the constant bound's, < 1);
    * ``appendix 6.2:`` the difference grows as H decreases: Spearman's rho(H, y) < 0 in every recorded round
      (ours = the largest of the per-round values)."""
    ratio = shape_ratio(thirds(pts["H"], pts["y"], C=C))
    area = tight["area"] / tight["constant_area"]
    okt = tight["beta"] > 0 and tight["kappa"] > tight["rho"] > 0 and area < 1
    worst = float(rs["spearman"].max())
    return [
        claims.holds("Fig. 6(a): the points fall as Eq. 3's curves do (concave: steeper towards ln C)", ratio > 1,
                     "stated: 95% quantile of y over the thirds of [0, ln C]: (middle - high) / (low - middle) > 1, as "
                     "for every curve of Eq. 3's form; reference: the document's blue curve", ours=ratio,
                     reference=doc_shape_ratio("blue", C)),
        claims.holds("Assumption 1: a bound of Eq. 3's form holds for every client and round, tighter than the "
                     "constant sigma_m^2", okt,
                     f"stated: the least-area curve above every point (beta = {tight['beta']:g}, rho = "
                     f"{tight['rho']:.4g}, kappa = {tight['kappa']:.4g}) has beta > 0, kappa > rho > 0 and area < the "
                     "constant bound's; ours = the area ratio", ours=area, reference=1.0),
        claims.holds("appendix 6.2: the local-global gradient difference grows as H(D^(k)) decreases (every round)",
                     worst < 0, f"stated: Spearman's rho(H, ||grad F_k - grad F||^2) over the {pts.client.nunique()} "
                     f"clients < 0 in each of the {len(rs)} recorded rounds; ours = the largest", ours=worst,
                     reference=0.0)]


# ---------------------------------------------------------------------------------------- the figure
def plot_fig6(pts: pd.DataFrame, tight: dict, title: str, C: int = 10):
    """Fig. 6(a): y against H(D^(k)) for every client and recorded round (colour: round), the 95% level of the
    points in 12 bins of H, the least-area bound of Eq. 3's form above every point, and the document's blue
    curve scaled to our 95% level in the lowest third (its shape only); left linear, right logarithmic y."""
    fig, axes = plots.figure(1, 2, width=7.0, row_height=3.9)
    xs = np.linspace(0, math.log(C), 200)
    mid, lev = binned_quantile(pts["H"], pts["y"], C=C)
    blue = envelope_curve(xs, **DOC_CURVES["blue"], C=C)
    scale = thirds(pts["H"], pts["y"], C=C)[0] / envelope_curve(math.log(C) / 6, **DOC_CURVES["blue"], C=C)
    for ax, log in zip(axes[0], (False, True)):
        sc = ax.scatter(pts["H"], pts["y"], c=pts["round"], s=3, cmap="viridis", alpha=0.5, lw=0)
        ax.plot(mid, lev, "ko-", ms=3, lw=1.2, label="ours: 95% level (12 bins of H)")
        ax.plot(xs, envelope_curve(xs, tight["beta"], tight["rho"], tight["kappa"], C), "r:", lw=1.4,
                label="ours: least bound of Eq. 3's form")
        ax.plot(xs, scale * blue, "b--", lw=1.2, label="document's blue curve, scaled (shape)")
        ax.set(xlabel=r"$H(\mathcal{D}^{(k)})$ (nats)", ylabel=r"$\|\nabla F_k(\theta^t) - \nabla F(\theta^t)\|^2$")
        if log:
            ax.set_yscale("log")
            ax.set_ylim(max(float(pts["y"].min()), 1e-3), None)
            ax.set_title("log scale")
        else:
            ax.set_ylim(0, float(pts["y"].max()) * 1.05)
            ax.set_title("linear scale")
    fig.colorbar(sc, ax=axes[0, 1], label="round t")
    # the legend below both panels, at the book's size: inside, it covered the lower-left points of the log panel
    fig.legend(*axes[0, 1].get_legend_handles_labels(), loc="outside lower center", ncol=2)
    from textwrap import fill
    fig.suptitle(fill(title, 95), fontsize=9.5)
    return fig


# ---------------------------------------------------------------------------------------- the theory page
def shape_table(levels) -> pd.DataFrame:
    """The 95% quantile of y in the thirds of [0, ln 10] (``levels``: :func:`thirds`) beside the document's two
    curves at the thirds' midpoints, with each row's :func:`shape_ratio`."""
    mids = (np.arange(3) + 0.5) * math.log(10) / 3
    shape = pd.DataFrame({"ours: 95% quantile of y": levels,
                          **{f"document's {c} curve": envelope_curve(mids, **DOC_CURVES[c])
                             for c in ("blue", "green")}},
                         index=["H in [0, ln10/3)", "H in [ln10/3, 2 ln10/3)", "H in [2 ln10/3, ln10]"]).T
    shape["(middle - high) / (low - middle)"] = [shape_ratio(r) for r in shape.to_numpy()]
    return shape


def fig6_summary(pts: pd.DataFrame, tight: dict, rs: pd.DataFrame, part: Partition, table: pd.DataFrame,
                 wall_s: float) -> tuple[dict, str]:
    """The prose's numbers of Fig. 6(a) (``f6_<name>``, floats) and one line in words: the points, the clients'
    entropies, the union's, the test accuracy at the first and last recorded rounds, the least bound of Eq. 3's
    form (:func:`tight_envelope`), the 95% levels of the thirds and their shape ratio beside the document's, the
    per-round Spearman correlations (:func:`round_spearman`) and the minutes the run took when computed."""
    acc = table[table.metric == "test_acc"].set_index("round")["value"]
    H = pts.drop_duplicates("client")["H"]
    lv = thirds(pts.H, pts.y)
    values = dict(n=len(pts), H_min=H.min(), H_max=H.max(), union_H=union_entropy(part),
                  acc_first=acc.iloc[0], acc_last=acc.iloc[-1], wall_min=wall_s / 60,
                  lv_lo=lv[0], lv_mid=lv[1], lv_hi=lv[2], ratio=shape_ratio(lv), doc_ratio=doc_shape_ratio("blue"),
                  t_beta=tight["beta"], t_rho=tight["rho"], t_kappa=tight["kappa"],
                  t_area=tight["area"] / tight["constant_area"], rs_max=rs.spearman.max(),
                  rs_median=rs.spearman.median())
    words = (f"{len(pts):,} points; H from {H.min():.3f} to {H.max():.3f} nats (ln 10 = {math.log(10):.3f}); the "
             f"union's labels have entropy {union_entropy(part):.4f}; test accuracy {acc.iloc[0]:.3f} -> "
             f"{acc.iloc[-1]:.3f}; least bound above every point: beta = {tight['beta']:g}, rho = {tight['rho']:.5g}, "
             f"kappa = {tight['kappa']:.5g}; the run took {wall_s / 60:.1f} min when computed")
    return {f"f6_{k}": float(v) for k, v in values.items()}, words
