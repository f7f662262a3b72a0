"""Tasks for `flkit.fl.run`: a model, the clients' data and their local training, on a flat parameter
vector per run. :class:`EngineTask` trains any torch model with `flkit.engine.local_train`; the closed-form
problems of document 002 are declared fast tasks: :class:`QuadraticTask` (exact local GD) and
:class:`SoftmaxTask` (l2 softmax regression with a batched closed-form gradient that trains the models of
all methods side by side; it stays beside the engine because it is several times faster for this model,
measured in the MIFA chapter's notes, and tests/test_mifa.py checks it against torch autograd).

Randomness of local training is keyed by (seed, round, client) only: client i of a run with seed s draws
its round-t minibatches from ``torch_gen(s, f"batch/{t}/{i}")``, so every algorithm of a comparison sees
the same minibatches, a run's numbers do not depend on which runs share its batch, and a resumed run
repeats them.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from flkit import datasets, engine, partition
from flkit.batches import epoch_batches, sample_batches
from flkit.datasets import QuadraticProblem, quadratic_clients
from flkit.fastsgd import FastSGD
from flkit.seeding import rng, torch_gen

__all__ = ["EngineTask", "QuadraticTask", "quadratic_task", "symmetric_quadratic", "heterogeneous_quadratic",
           "flat_quadratic", "SoftmaxTask", "softmax_task"]


@dataclass
class EngineTask:
    r"""Clients that train a torch model with the engine, on a split of one training set.

    clients: one index array per client into (x, y) (e.g. ``Partition.indices``), the same split for every
    run, or a dict of such lists keyed by the run's seed (``split_by="seed"``) or by its algorithm's name
    (``split_by="name"``). Local work: ``steps`` minibatches of
    ``batch_size`` drawn independently (FedAU's "I local iterations", `flkit.batches.sample_batches`) or
    ``epochs`` passes over the client's data (`flkit.batches.epoch_batches`, short last batch padded).
    backend: "engine" (`engine.local_train`: plain or momentum SGD, or Adam with ``opt="adam"`` (torch's
    defaults; fresh moments every round, no optimiser state is kept between rounds), weight decay, FedProx,
    any objective written for one model) or "fast" (`flkit.fastsgd.FastSGD`: plain SGD, a batched objective,
    in-place updates, CUDA graphs and fused kernels on a GPU). extras: per-run scalars trained beside the model
    and passed to the objective (e.g. a CVaR threshold), or constants when their step size in ``extras_lr`` is 0.
    The update is the pseudo-gradient :math:`\Delta = x - y` (divided by the local step size when
    ``normalized``); the local models :math:`y` are returned too (for rules in model form).
    Minibatches of client i in round t of a run with seed s come from ``torch_gen(s, stream)`` on the data's
    device, ``stream`` formatted with t and client (default ``"batch/{t}/{client}"``). Dropout: from torch's
    global RNG (None, the default), or with ``dropout_stream`` (e.g. ``"dropout/{t}/{client}"``, backend
    "engine") from ``torch_gen(s, dropout_stream)``: keep masks drawn per client and round
    (`engine.dropout_masks`), so every local-training path gives the same numbers and a resumed run
    repeats them. ``skip_done``: a local step computes only the clients that still have steps (`engine.local_train`;
    clients of unequal sizes, on a CPU).
    Metrics: test loss and accuracy (and per-class accuracy "test_acc_class/<c>" with ``per_class``) of
    every run's global model; with ``train_metrics`` also "train_loss" and "train_acc" on the whole training
    set (x, y), as FedAU's code reports them, or on its images ``train_idx`` (indices into x) when given. The
    initial model of a run with seed s is the model's init under ``torch_gen(s, "init")``, extras 0."""
    model: nn.Module
    x: Tensor
    y: Tensor
    clients: object
    x_test: Tensor
    y_test: Tensor
    batch_size: int
    steps: int | None = None
    epochs: int | None = None
    local_lr: float = 0.1
    opt: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    prox_mu: float = 0.0
    objective: object = None
    normalized: bool = False
    backend: str = "engine"
    vectorized: bool | str = True
    fast_backend: str = "auto"
    cuda_graph: bool = True
    extras: Sequence[str] = ()
    extras_lr: dict = field(default_factory=dict)
    stream: str = "batch/{t}/{client}"
    dropout_stream: str | None = None
    skip_done: bool = False     # engine.local_train's: steps compute only the clients that still have steps
    split_by: str = "seed"
    per_class: int | None = None
    train_metrics: bool = False
    train_idx: object = None    # the images of (x, y) whose loss and accuracy train_metrics gives (None: all)
    eval_batch_size: int = 1024
    chunk: int = 512
    dedup: bool = True          # draw the batches of pairs with the same (seed, client, split) once a round
    log: object = print
    names: list = field(init=False)
    shapes: list = field(init=False)

    def __post_init__(self):
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("give exactly one of steps (local iterations) or epochs")
        for k in ("steps", "epochs", "batch_size", "eval_batch_size", "chunk"):
            v = getattr(self, k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
                raise ValueError(f"{k} must be a positive int, got {v!r}")
        if self.split_by not in ("seed", "name"):
            raise ValueError(f"split_by must be 'seed' or 'name', got {self.split_by!r}")
        if self.backend not in ("engine", "fast"):
            raise ValueError(f"backend must be 'engine' or 'fast', got {self.backend!r}")
        if self.opt not in ("sgd", "adam"):
            raise ValueError(f"opt must be 'sgd' or 'adam', got {self.opt!r}")
        if self.backend == "fast" and self.opt != "sgd":
            raise ValueError("backend='fast' runs plain SGD (opt='sgd'); use backend='engine' for Adam")
        if self.backend == "fast" and self.steps is not None:
            raise ValueError("backend='fast' trains epochs (give epochs=, not steps=)")
        if self.dropout_stream is not None and self.backend != "engine":
            raise ValueError("dropout_stream needs backend='engine' (FastSGD draws dropout from torch's RNG)")
        if self.dropout_stream is not None:
            engine._dropout_layers(self.model)     # Dropout layers a flat Sequential's children: else ValueError
        splits = self.clients if isinstance(self.clients, dict) else {None: self.clients}
        if len({len(c) for c in splits.values()}) != 1:
            raise ValueError("every split needs the same number of clients")
        for c in splits.values():
            if not len(c) or any(len(i) == 0 for i in c):
                raise ValueError("every client needs at least one sample")
        state = engine.stack_copies(self.model, 1)
        self.names = list(state) + list(self.extras)
        self.shapes = [tuple(v.shape[1:]) for v in state.values()] + [()] * len(self.extras)
        width = max(len(i) for c in splits.values() for i in c)
        self._pool = {}                                    # seed -> (N, width) indices padded with the first
        for key, c in splits.items():
            pool = torch.zeros(len(c), width, dtype=torch.long)
            for i, idx in enumerate(c):
                idx = torch.as_tensor(np.asarray(idx), dtype=torch.long)
                pool[i, :len(idx)], pool[i, len(idx):] = idx, idx[0]
            self._pool[key] = (pool.to(self.x.device), torch.tensor([len(i) for i in c], device=self.x.device))
        # the same index lists on the host: `steps` minibatches are drawn from them without reading a device tensor
        self._host = {key: [np.asarray(i, dtype=np.int64).reshape(-1) for i in c] for key, c in splits.items()}
        self._fast = None
        self.steps_done = 0
        self.paths: list[str] = []     # how local training computed, one entry per change (resumed pieces too)

    # ---------------------------------------------------------------- the fl.run protocol
    @property
    def num_clients(self) -> int:
        return len(next(iter(self._pool.values()))[1])

    @property
    def dim(self) -> int:
        return int(sum(np.prod(s, dtype=np.int64) for s in self.shapes))

    @property
    def dtype(self) -> torch.dtype:
        return next(iter(self.model.parameters())).dtype

    @property
    def sizes(self) -> np.ndarray | None:
        return None if isinstance(self.clients, dict) else np.array([len(c) for c in self.clients])

    def _split(self, key):
        return self._pool[key if isinstance(self.clients, dict) else None]

    def _key(self, runs, r: int):
        return runs.names[r] if self.split_by == "name" else runs.seeds[r]

    def flatten(self, params: dict) -> Tensor:
        return torch.cat([params[k].reshape(params[k].shape[0], -1) for k in self.names], 1)

    def unflatten(self, w: Tensor) -> dict:
        out, i = {}, 0
        for k, s in zip(self.names, self.shapes):
            n = int(np.prod(s, dtype=np.int64))
            out[k] = w[:, i:i + n].reshape(w.shape[0], *s)
            i += n
        return out

    def column(self, name: str) -> int:
        """Index of a scalar entry (an extra) in the flat vector."""
        i = 0
        for k, s in zip(self.names, self.shapes):
            if k == name:
                return i
            i += int(np.prod(s, dtype=np.int64))
        raise KeyError(name)

    def init_params(self, seeds: Sequence[int]) -> Tensor:
        """(R, d): the initial model of each run (its seed's "init" stream), extras 0."""
        w = torch.cat([self.flatten(engine.stack(self.model, 1, torch_gen(int(s), "init"))
                                    | {k: torch.zeros(1, device=self.x.device) for k in self.extras})
                       for s in seeds])
        return w.to(self.x.device)

    def _generator(self, seed: int, t: int, client: int) -> torch.Generator:
        return torch_gen(int(seed), self.stream.format(t=t, client=client), self.x.device)

    def batches(self, seed: int, t: int, client: int, split=None) -> tuple[Tensor, Tensor]:
        """The round-t minibatches (1, S, B) and steps (1,) of `client` in a run with `seed` (and the
        key of its split, when the task has several)."""
        return self._batches([seed], [client], t, [seed if split is None else split])

    def _batches(self, seeds, clients, t, splits) -> tuple[Tensor, Tensor]:
        """The round-t minibatches (P, S, B) and steps (P,) of the (seed, client, split) of each pair. A pair's
        batches depend on those three and t only, so runs that share a seed (a comparison's methods) share
        them: each distinct (seed, client, split) is drawn once and repeated (``dedup``; bitwise the same
        batches as drawing every pair, a FedAU batch of 7 methods x 5 seeds draws 7x fewer)."""
        return self._once(self._draw, seeds, clients, t, splits)

    def _once(self, draw, seeds, clients, t, splits):
        """``draw(seeds, clients, t, splits)`` (a tuple or dict of tensors with one row per pair), with each
        distinct (seed, client, split) drawn once and its rows repeated where ``dedup``."""
        if not self.dedup:
            return draw(seeds, clients, t, splits)
        keys = [(int(s), int(c), repr(k)) for s, c, k in zip(seeds, clients, splits)]
        first: dict = {}
        where = [first.setdefault(k, i) for i, k in enumerate(keys)]
        if len(first) == len(keys):
            return draw(seeds, clients, t, splits)
        uniq = list(first.values())                       # positions of each key's first pair
        slot = {i: j for j, i in enumerate(uniq)}
        out = draw([seeds[i] for i in uniq], [clients[i] for i in uniq], t, [splits[i] for i in uniq])
        rows = [slot[i] for i in where]
        pick = lambda v: v.index_select(0, torch.tensor(rows, dtype=torch.long, device=v.device))  # noqa: E731
        return {k: pick(v) for k, v in out.items()} if isinstance(out, dict) else tuple(pick(v) for v in out)

    def _host_steps(self, clients, splits) -> list[int]:
        """Each pair's local steps, from the host copy of the index lists (no device read)."""
        if self.steps is not None:
            return [self.steps] * len(clients)
        n = [len(self._host[k if isinstance(self.clients, dict) else None][c]) for k, c in zip(splits, clients)]
        return [self.epochs * -(-m // self.batch_size) for m in n]          # epoch_batches(last="pad")

    def _draw_keep(self, seeds, clients, t, splits) -> dict:
        """The round-t dropout keep masks of each pair (`engine.dropout_masks`), from its own
        ``torch_gen(seed, dropout_stream)``; rows past its steps are unused."""
        gens = [torch_gen(int(s), self.dropout_stream.format(t=t, client=c), self.x.device)
                for s, c in zip(seeds, clients)]
        return engine.dropout_masks(self.model, self.x[:1], self.batch_size, self._host_steps(clients, splits), gens)

    def _keep(self, seeds, clients, t, splits) -> dict | None:
        """The pairs' dropout keep masks (None without ``dropout_stream``, or a model without Dropout)."""
        if self.dropout_stream is None or not engine._dropout_layers(self.model):
            return None
        return self._once(self._draw_keep, seeds, clients, t, splits)

    def _draw(self, seeds, clients, t, splits) -> tuple[Tensor, Tensor]:
        gens = [self._generator(s, t, c) for s, c in zip(seeds, clients)]
        if self.steps is not None:   # each pair's indices from the host copy (no device read, the same batches)
            host = [self._host[k if isinstance(self.clients, dict) else None][c] for k, c in zip(splits, clients)]
            made = [sample_batches([idx], self.batch_size, self.steps, g) for idx, g in zip(host, gens)]
            return torch.cat([b for b, _ in made]), torch.cat([s for _, s in made])
        rows = [self._split(k) for k in splits]
        pool = torch.stack([p[c] for (p, _), c in zip(rows, clients)])
        n = torch.stack([m[c] for (_, m), c in zip(rows, clients)])
        return epoch_batches(pool, self.batch_size, self.epochs, generators=gens, sizes=n, last="pad")

    def _lr(self, lr: Tensor) -> dict:
        return {"default": lr, **{k: self.extras_lr.get(k, 0.0) for k in self.extras}}

    def _train(self, params: dict, batches: Tensor, steps: Tensor, lr: Tensor, keep: dict | None = None) -> dict:
        self.steps_done += int(batches.shape[1])
        if self.backend == "engine":
            new, _ = engine.local_train(self.model, params, self.x, self.y, batches, lr=self._lr(lr),
                                        opt=self.opt, momentum=self.momentum, weight_decay=self.weight_decay,
                                        prox_mu=self.prox_mu, objective=self.objective, steps=steps,
                                        vectorized=self.vectorized, dropout_keep=keep, skip_done=self.skip_done)
            return new
        M = batches.shape[0]
        if self._fast is None or next(iter(self._fast.P.values())).shape[0] != M:
            self._fast = FastSGD(self.model, params, self.x, self.y, self.batch_size, lr=self._lr(lr),
                                 objective=self.objective, backend=self.fast_backend,
                                 cuda_graph=self.cuda_graph, log=self.log)
        for k, v in params.items():
            self._fast.P[k].copy_(v)
        self._fast.train(batches, steps)
        return self._fast.P

    def _note_path(self) -> None:
        if not self.paths or self.paths[-1] != self.path:
            self.paths.append(self.path)

    def state_dict(self) -> dict:
        """What a checkpoint of `flkit.fl.run` keeps of the task: the local-training paths so far."""
        return {"paths": list(self.paths)}

    def load_state_dict(self, state: dict) -> None:
        self.paths = list(state.get("paths", []))

    @property
    def path(self) -> str:
        """How local training computes: "FastSGD/<backend>/<graph|eager>" or "local_train/vectorized=..."."""
        if self.backend == "fast" and self._fast is not None:
            return f"FastSGD/{self._fast.backend}/{'graph' if self._fast.graph is not None else 'eager'}"
        return f"local_train/vectorized={self.vectorized}" if self.backend == "engine" else "FastSGD"

    def client_updates(self, w: Tensor, active: Tensor, t: int, runs) -> tuple[Tensor, Tensor, Tensor]:
        pairs = active.nonzero()
        delta = w.new_zeros(len(pairs), w.shape[1])
        local = w.new_zeros(len(pairs), w.shape[1])
        rr_all, cc_all = pairs[:, 0].tolist(), pairs[:, 1].tolist()   # one host transfer for the round
        draw = lambda a, b: self._batches([runs.seeds[r] for r in rr_all[a:b]], cc_all[a:b], t,  # noqa: E731
                                          [self._key(runs, r) for r in rr_all[a:b]])
        masks = lambda a, b: self._keep([runs.seeds[r] for r in rr_all[a:b]], cc_all[a:b], t,  # noqa: E731
                                        [self._key(runs, r) for r in rr_all[a:b]])
        # `steps` minibatches: each pair's draw is its own, so the round's distinct pairs are drawn at once (across
        # chunks); epochs: a chunk's batches are padded to its longest client, so each chunk draws its own
        whole = draw(0, len(pairs)) if self.steps is not None and len(pairs) else None
        for c0 in range(0, len(pairs), self.chunk):
            pr = pairs[c0:c0 + self.chunk]
            batches, steps = ((whole[0][c0:c0 + self.chunk], whole[1][c0:c0 + self.chunk]) if whole is not None
                              else draw(c0, c0 + len(pr)))
            lr = runs.local_lr[pr[:, 0]].to(device=w.device, dtype=w.dtype)
            w0 = w[pr[:, 0]]
            keep = masks(c0, c0 + len(pr))
            if keep is not None:                           # padded to the chunk's longest client, as its batches
                keep = {k: v[:, :batches.shape[1]] for k, v in keep.items()}
            new = self.flatten(self._train(self.unflatten(w0), batches, steps, lr, keep))
            self._note_path()
            d = w0 - new
            delta[c0:c0 + len(pr)] = d / lr.unsqueeze(1) if self.normalized else d
            local[c0:c0 + len(pr)] = new
        return pairs, delta, local

    def metrics(self, w: Tensor) -> dict[str, Tensor]:
        params = self.unflatten(w)
        loss, acc = engine.evaluate(self.model, params, self.x_test, self.y_test, batch_size=self.eval_batch_size)
        out = {"test_loss": loss, "test_acc": acc}
        if self.train_metrics:
            x, y = self.x, self.y
            if self.train_idx is not None:                # the images gathered once and kept
                if "_train_sample" not in self.__dict__:
                    self._train_sample = (x[self.train_idx], y[self.train_idx])
                x, y = self._train_sample
            tl, ta = engine.evaluate(self.model, params, x, y, batch_size=self.eval_batch_size)
            out |= {"train_loss": tl, "train_acc": ta}
        if self.per_class:
            pc = engine.per_class_accuracy(self.model, params, self.x_test, self.y_test, self.per_class,
                                           batch_size=self.eval_batch_size)
            out |= {f"test_acc_class/{c}": pc[:, c] for c in range(self.per_class)}
        return out

    def client_losses(self, w: Tensor, pairs: Tensor, runs) -> Tensor:
        """(P,): training loss of run r's model on client i's data, for each pair (r, i)."""
        out = torch.empty(len(pairs), dtype=torch.float64)
        for k, (r, i) in enumerate(pairs.tolist()):
            pool, n = self._split(self._key(runs, r))
            idx = pool[i, :int(n[i])]
            loss, _ = engine.evaluate(self.model, self.unflatten(w[r:r + 1]), self.x[idx], self.y[idx])
            out[k] = float(loss[0])
        return out


    def client_gradients(self, w: Tensor, pairs: Tensor, runs) -> Tensor:
        r"""(P, d): for each pair (r, i), the gradient :math:`\nabla F_i` of client i's local objective (the
        task's ``objective``, default the mean cross-entropy, over all of client i's data in one batch) at run
        r's model, in the flat layout of ``w``: the direction of one full-batch gradient step from the global
        model (DivFL's proxy, :class:`flkit.sample.DivFL`). The model is in training mode with dropout off
        (batch statistics of the client's data for batch norm); the FedProx term vanishes at the global model
        and is not added. Floating buffers and extras the objective does not use get zero columns. Each client's
        data is gathered once and kept (a copy of the training set at most)."""
        out = w.new_zeros(len(pairs), w.shape[1])
        if not len(pairs):
            return out
        objective = self.objective or engine.cross_entropy
        net = copy.deepcopy(self.model).to(device=w.device, dtype=w.dtype).train()
        for m in net.modules():
            if isinstance(m, nn.Dropout):
                m.eval()
        pnames = [k for k, _ in net.named_parameters()]
        cache = self.__dict__.setdefault("_client_data", {})      # each client's data gathered once
        for k, (r, i) in enumerate(pairs.tolist()):
            key = (repr(self._key(runs, r)) if isinstance(self.clients, dict) else None, i)
            if key not in cache:
                pool, n = self._split(self._key(runs, r))
                idx = pool[i, :int(n[i])]
                cache[key] = (self.x[idx], self.y[idx])
            xi, yi = cache[key]
            params = self.unflatten(w[r:r + 1])
            # fresh copies: batch norm in training mode writes its running statistics into the buffers given
            state = {name: v[0].detach().clone().requires_grad_(name in pnames) for name, v in params.items()
                     if name not in self.extras}
            extras = {e: params[e][0].detach().clone().requires_grad_(True) for e in self.extras}
            logits = torch.func.functional_call(net, state, (xi,))
            leaves = [(name, state[name]) for name in pnames] + list(extras.items())
            loss = objective(logits, yi, dict(leaves))
            grads = torch.autograd.grad(loss, [v for _, v in leaves], allow_unused=True)
            got = {name: g for (name, _), g in zip(leaves, grads) if g is not None}
            out[k] = torch.cat([got[name].reshape(-1) if name in got else w.new_zeros(int(np.prod(s, dtype=np.int64)))
                                for name, s in zip(self.names, self.shapes)]).to(w.dtype)
        return out


# ================================================================================================
# the closed-form tasks of document 002 (declared fast tasks)
# ================================================================================================
def _psi(w: Tensor) -> Tensor:
    return (w * w / (1 + w * w)).sum(-1)


def _dpsi(w: Tensor) -> Tensor:
    return 2 * w / (1 + w * w) ** 2


@dataclass
class QuadraticTask:
    r"""Clients :math:`f_i(w) = \frac12 (w-b_i)^\top A_i (w-b_i) + \lambda \sum_j \frac{w_j^2}{1+w_j^2}`
    (``problem`` = a :class:`flkit.datasets.QuadraticProblem` giving the diagonal A_i and b_i; lam > 0 adds
    the non-convex term, whose second derivative lies in [-lam/2, 2 lam]), :math:`f = \frac1n\sum_i f_i`.

    Local training = ``local_steps`` GD steps with the server's step size eta, in closed form per
    coordinate (lam = 0): :math:`\Delta_i = \frac1\eta(1-(1-\eta A_i)^\tau)(w-b_i)`; with
    ``local_steps=1``, :math:`\Delta_i = \nabla f_i(w)` (what the document's analysis uses)."""
    problem: object
    lam: float = 0.0
    local_steps: int = 1

    def __post_init__(self):
        if self.local_steps < 1:
            raise ValueError("local_steps must be >= 1")
        if self.lam and self.local_steps != 1:
            raise ValueError("the non-convex variant supports local_steps=1 only")
        A, b = self.problem.A, self.problem.b
        self._H = A.mean(0)                         # global Hessian (diagonal)
        self._h = (A * b).mean(0)                   # grad f(w) = H w - h (+ lam psi'(w))
        self._w_star = self.problem.w_star

    @property
    def n(self) -> int:
        return self.problem.A.shape[0]

    @property
    def dim(self) -> int:
        return self.problem.A.shape[1]

    num_clients = n
    dtype = torch.float64

    def client_updates(self, w: Tensor, active: Tensor, t: int, runs) -> tuple[Tensor, Tensor]:
        """`flkit.fl` task protocol: the updates of the active (run, client) pairs, from the dense
        :meth:`updates` (closed form; the step sizes are the runs' local ones)."""
        pairs = active.nonzero()
        return pairs, self.updates(w, active, runs.local_lr)[pairs[:, 0], pairs[:, 1]]

    @property
    def L(self) -> float:
        """Smoothness constant of every f_i (max curvature, + 2 lam for the non-convex term)."""
        return float(self.problem.A.max()) + 2 * self.lam

    @property
    def f_star(self) -> float | None:
        return float(self.problem.f_star) if self.lam == 0 else None

    @property
    def sigma_G2(self) -> float:
        r"""sup over clients of :math:`\|\nabla f_i(w)-\nabla f(w)\|^2` when all A_i are equal (then it
        does not depend on w); NaN otherwise."""
        A = self.problem.A
        if not torch.allclose(A, A[:1].expand_as(A)):
            return float("nan")
        d = A[0] * (self.problem.b - self.problem.b.mean(0))
        return float((d * d).sum(-1).max())

    def client_grads(self, w: Tensor) -> Tensor:
        g = self.problem.client_grads(w)
        if self.lam:
            g = g + self.lam * _dpsi(w).unsqueeze(-2)
        return g

    def client_gradients(self, w: Tensor, pairs: Tensor, runs=None) -> Tensor:
        """(P, d): grad f_i at run r's model for each pair (r, i) (the probe's gradients; ``runs`` not needed)."""
        r, i = pairs[:, 0], pairs[:, 1]
        g = self.problem.A[i] * (w[r] - self.problem.b[i])
        return g + self.lam * _dpsi(w[r]) if self.lam else g

    def f(self, w: Tensor) -> Tensor:
        v = self.problem.f(w)
        return v + self.lam * _psi(w) if self.lam else v

    def grad(self, w: Tensor) -> Tensor:
        g = self._H * w - self._h
        return g + self.lam * _dpsi(w) if self.lam else g

    def updates(self, w: Tensor, active: Tensor, eta: Tensor, seeds=None, t: int = 0) -> Tensor:
        """Delta for every (run, client): (B, n, d). `active`, `seeds`, `t` are not needed (deterministic)."""
        if self.local_steps == 1:
            return self.client_grads(w)
        A, b = self.problem.A, self.problem.b
        e = eta.reshape(-1, 1, 1).to(A.dtype)
        factor = (1 - (1 - e * A) ** self.local_steps) / e
        return factor * (w.unsqueeze(-2) - b)

    def updates_sparse(self, w: Tensor, active: Tensor, eta, seeds=None, t: int = 0,
                       groups: int = 1) -> tuple[Tensor, Tensor, Tensor]:
        """The updates of the active clients only, in the layout of :meth:`SoftmaxTask.updates_sparse`:
        pairs (P, 2) = (run, client) active in some block, block_active (groups, P), values (P, groups, d)."""
        Bn, n = active.shape
        R = Bn // groups
        act = active.view(groups, R, n)
        pairs = act.any(0).nonzero()
        rr, ii = pairs[:, 0], pairs[:, 1]
        W = w.view(groups, R, -1)[:, rr]                                  # (groups, P, d)
        A, b = self.problem.A[ii], self.problem.b[ii]                     # (P, d)
        if self.local_steps == 1:
            vals = A * (W - b)
            if self.lam:
                vals = vals + self.lam * _dpsi(W)
        else:
            e = torch.as_tensor(eta, dtype=A.dtype).reshape(-1).expand(Bn).view(groups, R)[:, rr].unsqueeze(-1)
            vals = (1 - (1 - e * A) ** self.local_steps) / e * (W - b)
        return pairs, act[:, rr, ii], vals.transpose(0, 1)

    def metrics(self, w: Tensor) -> dict[str, Tensor]:
        g = self.grad(w)
        out = {"grad_norm2": (g * g).sum(-1)}
        if self.lam == 0:
            # f(w) - f* = 1/2 (w - w*)^T H (w - w*) exactly (H = mean A_i): no cancellation near w*
            e = w - self._w_star
            out = {"gap": 0.5 * (self._H * e * e).sum(-1), **out}
        else:
            out = {"f": self.f(w), **out}
        return out


def quadratic_task(n: int = 10, dim: int = 10, seed: int = 0, *, mu: float = 0.2, L: float = 2.0,
                   heterogeneity: float = 1.0, local_steps: int = 1) -> QuadraticTask:
    """The heterogeneous quadratic of the Figures 1-3 experiment: `flkit.datasets.quadratic_clients`
    (diagonal A_i with the spectrum geomspace(mu, L, dim) in a client-specific order, b_i = c +
    heterogeneity * z_i; problem data from rng(seed, "data"))."""
    return QuadraticTask(quadratic_clients(n, dim, seed, heterogeneity=heterogeneity, mu=mu, L=L),
                         local_steps=local_steps)


def symmetric_quadratic(n: int, dim: int = 10, seed: int = 0, *, mu: float = 0.1, L: float = 1.0,
                        sigma_G2: float = 1.0, lam: float = 0.0, center_scale: float = 1.0) -> QuadraticTask:
    r"""A family of problems whose global objective does not depend on n (for the theory checks).

    All clients share :math:`A = \mathrm{diag}(\mathrm{geomspace}(\mu, L, d))`; :math:`b_i = c \pm u_k` in
    antithetic pairs (n even) with :math:`A u_k = \sigma_G\, q_{k \bmod d}`, where :math:`q_0,\dots,q_{d-1}`
    is a random orthonormal basis. Hence :math:`\bar b = c`, :math:`f(w) = \frac12(w-c)^\top A(w-c) +`
    const (+ the non-convex term), :math:`\|\nabla f_i(w) - \nabla f(w)\|^2 = \sigma_G^2` exactly for every
    client and every w (the document's bounded-client-variance assumption holds with equality), and when
    n/2 is a multiple of d the clients' deviations have covariance exactly :math:`(\sigma_G^2/d) I` for
    every n. c ~ N(0, center_scale^2 I) and the basis come from rng(seed, "data"), shared by all n."""
    if n < 2 or n % 2:
        raise ValueError(f"n must be an even number >= 2 (antithetic client pairs), got {n}")
    spectrum = np.geomspace(mu, L, dim)
    g = rng(seed, "data")
    c = center_scale * g.standard_normal(dim)
    q, _ = np.linalg.qr(g.standard_normal((dim, dim)))
    Au = math.sqrt(sigma_G2) * q.T[np.arange(n // 2) % dim]          # rows: A u_k
    u = Au / spectrum
    b = np.concatenate([c + u, c - u])
    A = np.broadcast_to(spectrum, (n, dim)).copy()
    return QuadraticTask(QuadraticProblem(torch.tensor(A, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)),
                         lam=lam)


def heterogeneous_quadratic(n: int, dim: int = 10, seed: int = 0, *, mu: float = 0.1, L: float = 1.0,
                            sigma_G2: float = 1.0, h: float = 0.8, lam: float = 0.0,
                            center_scale: float = 1.0) -> QuadraticTask:
    r"""The family of :func:`symmetric_quadratic` with heterogeneous client Hessians, same global objective.

    :math:`H = \mathrm{diag}(\mathrm{geomspace}(\mu, L, d))` is the global Hessian. Client pair k (clients k
    and k + n/2) has :math:`A_{k} = H(1 + h\,s_k)` and :math:`A_{k+n/2} = H(1 - h\,s_k)` with a random sign
    vector :math:`s_k \in \{\pm1\}^d` (rng(seed, "hessians")): each coordinate's curvature is
    :math:`(1+h)H_{jj}` for one client of the pair and :math:`(1-h)H_{jj}` for the other, so every client's
    spectrum is a different mix of the two, and :math:`\frac1n\sum_i A_i = H` for every even n. Optima:
    :math:`A_i b_i = A_i c \pm \sigma_G q_{k \bmod d}` (same c and basis q as :func:`symmetric_quadratic`),
    hence :math:`w^\star = c`, :math:`f(w) = \frac12 (w-c)^\top H (w-c) +` const (+ the non-convex term), the
    same global objective as the identical-Hessian family, and :math:`\|\nabla f_i(w^\star)\|^2 = \sigma_G^2`
    for every client. Away from the optimum :math:`\nabla f_i(w) - \nabla f(w) = \pm h\,H s_k (w - c) \mp
    \sigma_G q` grows with :math:`\|w - c\|` (the document's bounded-variance assumption holds on bounded
    sets only). Every f_i is (1 + h) L-smooth (+ 2 lam)."""
    if n < 2 or n % 2:
        raise ValueError(f"n must be an even number >= 2 (antithetic client pairs), got {n}")
    if not 0 <= h < 1:
        raise ValueError(f"h (relative spread of the client curvatures) must lie in [0, 1), got {h}")
    spectrum = np.geomspace(mu, L, dim)
    g = rng(seed, "data")
    c = center_scale * g.standard_normal(dim)
    q, _ = np.linalg.qr(g.standard_normal((dim, dim)))
    s = rng(seed, "hessians").choice([-1.0, 1.0], size=(n // 2, dim))
    A = np.concatenate([spectrum * (1 + h * s), spectrum * (1 - h * s)])
    Aq = math.sqrt(sigma_G2) * q.T[np.arange(n // 2) % dim]
    b = np.concatenate([c + Aq / A[: n // 2], c - Aq / A[n // 2:]])
    return QuadraticTask(QuadraticProblem(torch.tensor(A, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)),
                         lam=lam)


def flat_quadratic(n: int, dim: int = 32, seed: int = 0, *, zeros: int = 2, lam_min: float = 1e-5, L: float = 1.0,
                   sigma_G2: float = 0.1) -> QuadraticTask:
    r"""A convex, not strongly convex quadratic on which the optimality gap of gradient descent falls like
    1/T over a wide range of T (for the epsilon-dependence of the complexity tables).

    All clients share :math:`A = \mathrm{diag}(0,\dots,0,\lambda_1,\dots,\lambda_{d'})`: `zeros` zero
    eigenvalues (f is flat there: mu = 0 and the minimizers form the affine set :math:`w^\star +
    \mathrm{span}(e_1..e_{zeros})`; `QuadraticProblem.w_star` picks the mean of the b_i in those
    coordinates) and :math:`\lambda_j = \mathrm{geomspace}(\lambda_{\min}, L, d')`, d' = dim - zeros. The
    centre c has :math:`|c_j| = 1` (random signs, rng(seed, "data")), so from w_0 = 0 every eigendirection
    carries the same initial error and gradient descent with step eta has
    :math:`f(w_T) - f^\star = \frac12\sum_j \lambda_j (1-\eta\lambda_j)^{2T} \approx \frac{1}{4\eta T\,\ln r}`
    (r: the ratio of consecutive lambda_j) while :math:`1/(\eta L) \ll T \ll 1/(\eta \lambda_{\min})`, and
    :math:`\|\nabla f(w_T)\|^2 \propto 1/T^2` there. Client optima :math:`b_i = c \pm u_k` (antithetic pairs)
    with :math:`A u_k = \sigma_G q_k`, q_k from an orthonormal basis of the non-flat coordinates, so
    :math:`\|\nabla f_i - \nabla f\|^2 = \sigma_G^2` exactly, everywhere."""
    if n < 2 or n % 2:
        raise ValueError(f"n must be an even number >= 2 (antithetic client pairs), got {n}")
    if not 0 <= zeros < dim - 1:
        raise ValueError(f"zeros (flat directions) must lie in [0, dim - 2] = [0, {dim - 2}], got {zeros}")
    if not 0 < lam_min < L:
        raise ValueError(f"lam_min must lie in (0, L = {L}), got {lam_min}")
    spectrum = np.concatenate([np.zeros(zeros), np.geomspace(lam_min, L, dim - zeros)])
    g = rng(seed, "data")
    c = g.choice([-1.0, 1.0], size=dim)
    q, _ = np.linalg.qr(g.standard_normal((dim - zeros, dim - zeros)))
    Au = np.zeros((n // 2, dim))
    Au[:, zeros:] = math.sqrt(sigma_G2) * q.T[np.arange(n // 2) % (dim - zeros)]
    u = np.divide(Au, spectrum, out=np.zeros_like(Au), where=spectrum > 0)
    b = np.concatenate([c + u, c - u])
    A = np.broadcast_to(spectrum, (n, dim)).copy()
    return QuadraticTask(QuadraticProblem(torch.tensor(A, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)))


@dataclass
class SoftmaxTask:
    r"""l2-regularised multinomial logistic regression over clients with equal-size local data sets.

    :math:`f_i(W) = \frac1{m}\sum_{(x,y)\in D_i} \mathrm{CE}(W^\top[x;1], y) + \frac{wd}{2}\|W\|^2`,
    W of shape (D+1, C) (weights and bias, flattened to d = (D+1) C); :math:`f = \frac1n\sum_i f_i`.
    Local training (MIFA's code, hmgxr128/MIFA_code@c1099d9, run_mnist_logit.sh and src/models/worker.py): ``epochs``
    passes of minibatch SGD with batch size
    ``batch_size`` (last batch smaller, no drop), step size eta, weight decay wd on every parameter,
    minibatch order from torch_gen(seed, "batch-<round>"), the same for all methods.
    The gradient of the softmax cross-entropy is written in closed form, and every (seed, client) pair
    trains the models of all methods side by side (one matrix product for all of them)."""
    x: Tensor           # (n, m, D+1) float32, last column = 1
    y: Tensor           # (n, m) int64
    x_test: Tensor      # (N_test, D+1)
    y_test: Tensor
    num_classes: int = 10
    epochs: int = 2
    batch_size: int = 100
    weight_decay: float = 1e-3
    chunk: int = 32
    f_star: float | None = None
    description: str = ""

    @property
    def n(self) -> int:
        return self.x.shape[0]

    @property
    def dim(self) -> int:
        return self.x.shape[2] * self.num_classes

    num_clients = n
    dtype = torch.float32

    def client_updates(self, w: Tensor, active: Tensor, t: int, runs) -> tuple[Tensor, Tensor]:
        """`flkit.fl` task protocol. The rows must be `groups` blocks of the same seeds (methods side by
        side): the clients active in any block of a seed are trained once for all blocks (same minibatch
        order), see :meth:`updates_sparse`."""
        if not runs.groups:
            raise ValueError("SoftmaxTask needs every algorithm of a run to use the same seeds")
        S = runs.group_size
        pairs, bact, values = self.updates_sparse(w, active, runs.local_lr, runs.seeds[:S], t, runs.groups)
        g, k = bact.nonzero(as_tuple=True)                        # block g, pair k
        rows = torch.stack([g * S + pairs[k, 0], pairs[k, 1]], 1)
        order = torch.argsort(rows[:, 0] * self.n + rows[:, 1])
        return rows[order], values[k, g][order]

    def _objective(self, W: Tensor) -> Tensor:
        """f(W) for W (B, D+1, C), float64 result."""
        X = self.x.reshape(-1, self.x.shape[-1])
        Y = self.y.reshape(-1)
        B, D1, C = W.shape
        total = torch.zeros(B, dtype=torch.float64)
        Wf = W.permute(1, 0, 2).reshape(D1, B * C)
        for s in range(0, X.shape[0], 8192):
            z = (X[s:s + 8192] @ Wf).view(-1, B, C).double()
            lse = torch.logsumexp(z, -1)
            zy = z.gather(-1, Y[s:s + 8192].view(-1, 1, 1).expand(-1, B, 1)).squeeze(-1)
            total += (lse - zy).sum(0)
        reg = 0.5 * self.weight_decay * (W.double() ** 2).sum((1, 2))
        return total / X.shape[0] + reg

    def metrics(self, w: Tensor) -> dict[str, Tensor]:
        W = w.view(w.shape[0], self.x.shape[-1], self.num_classes)
        f = self._objective(W)
        z = (self.x_test @ W.permute(1, 0, 2).reshape(W.shape[1], -1)).view(-1, W.shape[0], self.num_classes)
        acc = (z.argmax(-1) == self.y_test.view(-1, 1)).double().mean(0)
        out = {"loss": f, "test_acc": acc}
        if self.f_star is not None:
            out = {"gap": f - self.f_star, **out}
        return out

    def __post_init__(self):
        # Pixels that are zero in every sample of a client get no data gradient there (only weight decay):
        # each client trains on its own non-zero columns (padded to a common width with a zero column),
        # the other rows of W decay in closed form. Same numbers, about a quarter fewer flops on MNIST.
        n, m, D1 = self.x.shape
        nz = (self.x != 0).any(1)                                          # (n, D1)
        width = int(nz.sum(1).max())
        cols = torch.full((n, width), D1, dtype=torch.long)                # D1 = the padding (zero) column
        for i in range(n):
            c = nz[i].nonzero().squeeze(1)
            cols[i, :len(c)] = c
        x_pad = torch.cat([self.x, self.x.new_zeros(n, m, 1)], -1)
        self._cols = cols
        self._x_sub = torch.gather(x_pad, 2, cols.unsqueeze(1).expand(n, m, width)).contiguous()

    def local_sgd(self, W: Tensor, clients: Tensor, perms: Tensor, lr: float) -> Tensor:
        """K epochs of minibatch SGD for P models W (P, D+1, C') (C' = groups x C: several models side by
        side) on clients (P,), minibatch orders perms (P, epochs, m), step size lr. Per step, with batch
        b: W <- (1 - lr wd) W - (lr/|b|) X_b^T (softmax(X_b W) - onehot(y_b)). Returns the final W."""
        P, D1, GC = W.shape
        C = self.num_classes
        G = GC // C
        m = self.x.shape[1]
        lr = float(lr)
        cols = self._cols[clients]                                          # (P, width)
        width = cols.shape[1]
        Wpad = torch.cat([W, W.new_zeros(P, 1, GC)], 1)
        Ws = torch.gather(Wpad, 1, cols.unsqueeze(-1).expand(P, width, GC))  # rows the data touch
        n_steps = 0
        for e in range(self.epochs):
            for s0 in range(0, m, self.batch_size):
                s1 = min(s0 + self.batch_size, m)
                idx = perms[:, e, s0:s1]
                xb = self._x_sub[clients.unsqueeze(1), idx]                  # (P, b, width)
                yb = self.y[clients.unsqueeze(1), idx]                       # (P, b)
                r = torch.softmax(torch.bmm(xb, Ws).view(P, s1 - s0, G, C), -1)
                r.scatter_add_(-1, yb.view(P, -1, 1, 1).expand(-1, -1, G, 1),
                               torch.full((P, s1 - s0, G, 1), -1.0, dtype=r.dtype))
                Ws = torch.baddbmm(Ws, xb.transpose(1, 2), r.view(P, s1 - s0, GC),
                                   beta=1 - lr * self.weight_decay, alpha=-lr / (s1 - s0))
                n_steps += 1
        out = Wpad * (1 - lr * self.weight_decay) ** n_steps                # untouched rows: decay only
        out.scatter_(1, cols.unsqueeze(-1).expand(P, width, GC), Ws)
        return out[:, :D1]

    def updates_sparse(self, w: Tensor, active: Tensor, eta, seeds: Sequence[int], t: int = 0,
                       groups: int = 1) -> tuple[Tensor, Tensor, Tensor]:
        """Updates of the clients active in round t, for `groups` blocks of R runs (one block per method,
        same seeds in the same order; w (groups R, d), active (groups R, n)).

        The clients active in any block of a run are trained once for all blocks, with a shared minibatch
        order. Returns pairs (P, 2) = (run, client), block_active (groups, P) bool and values
        (P, groups, d): the update of each pair's client from each block's model."""
        Bn, n = active.shape
        R = Bn // groups
        D1, C = self.x.shape[-1], self.num_classes
        W0 = w.view(groups, R, D1, C)
        act = active.view(groups, R, n)
        union = act.any(0)                                                 # (R, n)
        alive = torch.isfinite(w).all(-1).view(groups, R)
        lr = torch.as_tensor(eta, dtype=w.dtype).reshape(-1)
        if not torch.allclose(lr, lr[:1].expand_as(lr)):
            raise ValueError("SoftmaxTask needs one step size for all runs of a simulation")
        lr0 = float(lr[0])
        pairs = union.nonzero()                                            # (P, 2): run, client
        values = torch.zeros(len(pairs), groups, D1 * C, dtype=w.dtype)
        if len(pairs) == 0:
            return pairs, act[:, pairs[:, 0], pairs[:, 1]], values
        m = self.x.shape[1]
        perms = torch.empty(len(pairs), self.epochs, m, dtype=torch.long)
        for r in range(R):
            sel = (pairs[:, 0] == r).nonzero().squeeze(1)
            if len(sel):
                g = torch_gen(int(seeds[r]), f"batch-{t}")
                perms[sel] = torch.argsort(torch.rand(len(sel), self.epochs, m, generator=g), -1)
        for c0 in range(0, len(pairs), self.chunk):
            pr = pairs[c0:c0 + self.chunk]
            rr, ii = pr[:, 0], pr[:, 1]
            P = len(pr)
            W0p = W0[:, rr].permute(1, 2, 0, 3).reshape(P, D1, groups * C)        # models side by side
            ok = alive[:, rr].T.repeat_interleave(C, 1).unsqueeze(1)              # diverged runs: not trained
            W0p = torch.where(ok, W0p, torch.zeros((), dtype=W0p.dtype))
            W1p = self.local_sgd(W0p, ii, perms[c0:c0 + P], lr0)
            delta = (W0p - W1p) / lr0
            values[c0:c0 + P] = delta.view(P, D1, groups, C).permute(0, 2, 1, 3).reshape(P, groups, D1 * C)
        return pairs, act[:, pairs[:, 0], pairs[:, 1]], values

    def updates(self, w: Tensor, active: Tensor, eta, seeds: Sequence[int], t: int = 0,
                groups: int = 1) -> Tensor:
        """Dense form of :meth:`updates_sparse`: (groups R, n, d), zeros for inactive pairs."""
        Bn, n = active.shape
        R = Bn // groups
        pairs, bact, values = self.updates_sparse(w, active, eta, seeds, t, groups)
        out = torch.zeros(groups, R, n, values.shape[-1], dtype=w.dtype)
        if len(pairs):
            vals = torch.where(bact.T.unsqueeze(-1), values, torch.zeros((), dtype=values.dtype))
            out[:, pairs[:, 0], pairs[:, 1]] = vals.transpose(0, 1)
        return out.view(Bn, n, -1)

    def solve(self, max_evals: int = 300) -> dict:
        """f* by full-batch L-BFGS (float32, closed-form gradient; the problem is wd-strongly convex).

        Sets and returns f_star evaluated with the same function as the metrics (so gaps are consistent),
        with the final gradient norm and the certified bound f(W) - f* <= ||grad f(W)||^2 / (2 wd)."""
        X = self.x.reshape(-1, self.x.shape[-1])
        Y = self.y.reshape(-1)
        N, C = X.shape[0], self.num_classes
        W = torch.zeros(X.shape[1], C, requires_grad=True)
        opt = torch.optim.LBFGS([W], lr=1, max_iter=max_evals, max_eval=max_evals, tolerance_grad=1e-7,
                                tolerance_change=1e-12, history_size=30, line_search_fn="strong_wolfe")

        def closure():
            with torch.no_grad():
                g = torch.zeros_like(W)
                loss = 0.0
                for s0 in range(0, N, 8192):
                    z = X[s0:s0 + 8192] @ W
                    lse = torch.logsumexp(z, 1)
                    loss += float((lse - z.gather(1, Y[s0:s0 + 8192, None]).squeeze(1)).double().sum())
                    pr = torch.softmax(z, 1)
                    pr[torch.arange(len(z)), Y[s0:s0 + 8192]] -= 1
                    g += X[s0:s0 + 8192].T @ pr
                W.grad = g / N + self.weight_decay * W
                return torch.tensor(loss / N + 0.5 * self.weight_decay * float((W.double() ** 2).sum()))
        opt.step(closure)
        closure()
        gn2 = float((W.grad.double() ** 2).sum())
        with torch.no_grad():
            self.f_star = float(self._objective(W.detach().unsqueeze(0))[0])
        return {"f_star": self.f_star, "grad_norm2": gn2, "suboptimality_bound": gn2 / (2 * self.weight_decay)}


def softmax_task(num_clients: int = 100, classes_per_client: int = 2, *, seed: int = 0, subset: int | None = None,
                 synthetic: bool = False, **kw) -> SoftmaxTask:
    """MNIST l2-logistic regression with MIFA's 2-classes-per-client split (`flkit.partition.shards`).

    Pixels in [0, 1], flattened, no standardisation, plus a constant 1 for the bias. ``subset`` keeps the
    a random `subset` of every client's samples (smoke runs). ``synthetic=True`` (or MNIST absent) builds a
    labelled stand-in: 10 Gaussian classes in 784 dimensions, same split (never used by the paper profile)."""
    desc = "MNIST (real), MIFA 2-class shards"
    if synthetic:
        x_tr, y_tr, x_te, y_te = _synthetic_images(seed)
        desc = "SYNTHETIC Gaussian classes (MNIST stand-in), MIFA 2-class shards"
    else:
        ds = datasets.load("mnist")
        x_tr, y_tr = ds.x_train.reshape(len(ds.x_train), -1), ds.y_train
        x_te, y_te = ds.x_test.reshape(len(ds.x_test), -1), ds.y_test
    part = partition.shards(y_tr.numpy(), num_clients, classes_per_client, seed=seed)
    sizes = part.sizes
    m = int(sizes.min()) if subset is None else min(int(subset), int(sizes.min()))
    g = rng(seed, "subset")
    idx = torch.as_tensor(np.stack([ix if m == len(ix) else g.permutation(ix)[:m] for ix in part.indices]))
    ones = torch.ones(*idx.shape, 1)
    x = torch.cat([x_tr[idx], ones], -1).contiguous()
    x_test = torch.cat([x_te, torch.ones(len(x_te), 1)], -1)
    return SoftmaxTask(x=x, y=y_tr[idx], x_test=x_test, y_test=y_te, description=desc, **kw)


def _synthetic_images(seed: int):
    g = torch_gen(seed, "data")
    means = torch.rand(10, 784, generator=g)
    y = torch.arange(12000) % 10
    x = (means[y] + 0.3 * torch.randn(12000, 784, generator=g)).clamp(0, 1)
    return x[:10000], y[:10000], x[10000:], y[10000:]
