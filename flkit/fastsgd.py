"""Plain SGD of many stacked models for long chains of small steps: :class:`FastSGD`.

A fourth implementation of :func:`flkit.engine.local_train`'s update rule, for plain SGD on grouped-family
models only, built for long chains of small steps: a batched objective (the M models' losses in one call),
static tensors updated in place, CUDA-graph replay of each step on a GPU, and the Triton kernels of
:mod:`flkit.fused` as an optional backend. Its minibatches come from :mod:`flkit.batches`.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from flkit import fused
from flkit.batches import _count
from flkit.engine import _bcast, _lr_table, _names, cross_entropy
from flkit.grouped import Params, grouped_forward, supports_grouped

__all__ = ["FastSGD", "BatchedObjective"]

BatchedObjective = Callable[[Tensor, Tensor, Params], Tensor]


class FastSGD:
    """Plain SGD of M stacked models, specialised for long chains of small steps (Fed-CVaR's runs).

    The update rule is :func:`flkit.engine.local_train`'s with ``opt="sgd"`` and nothing else: no momentum, no
    weight decay, no prox term (``opt``, ``momentum``, ``weight_decay``, ``prox_mu`` are accepted only
    to raise a ValueError when set; use :func:`local_train` for those). At a step s < steps[m] with
    minibatch b = batches[m, s], for every tensor k of ``params`` with a nonzero learning rate::

        P[k][m] <- P[k][m] - lr[k][m] * d objective(...)[m] / d P[k][m]

    and models with s >= steps[m] are left untouched. Tensors whose learning rate is 0 for every model
    are constants: handed to the objective, never differentiated or changed (e.g. Fed-CVaR's per-run
    alpha and gamma). The model must be of the grouped family (:func:`flkit.grouped.supports_grouped`: no buffers).

    What differs from :func:`local_train` is the mechanics only:
      * a batched objective ``objective(logits (M, B, C), y (M, B), P) -> (M,)``, one call per step for
        the M models at once (no vmap); y holds -100 in padded slots (index -1); P holds every tensor of
        ``params``, the trained ones as autograd leaves. Default :func:`flkit.engine.cross_entropy` (already batched);
        a per-model objective of local_train written with batched ops works unchanged.
      * static tensors: the state ``self.P``, the step's indices and active mask are allocated once and
        updated in place (``P[k] <- where(active, P[k] - lr * grad, P[k])``);
      * on CUDA each step is one replay of a captured CUDA graph (a step of these small models is a few
        hundred tiny kernels, whose launches would dominate the time). After capture the graph is
        checked against an eager step and dropped, with a message through ``log``, if capture fails or
        the two disagree; ``self.graph`` is None when running eagerly.
      * ``backend``: "grouped" runs the models through :func:`flkit.grouped.grouped_forward` (convolutions as grouped
        convolutions); "fused" through :mod:`flkit.fused` (Triton kernels for Conv -> LeakyReLU ->
        MaxPool2d(2) blocks, TF32 products like cuDNN; ``self.precision = "ieee"`` for full float32);
        "auto": fused on CUDA when triton is there and the model fits (:func:`flkit.fused.supports_fused`),
        else grouped (never Triton's slow CPU interpreter). ``self.backend`` says which is used.

    Rounding: same operations as local_train's grouped path except that local_train's unmasked steps
    use ``addcmul_`` (tests/test_engine.py: equal to 1e-10 in float64).

    >>> sgd = FastSGD(model, params, x, y, batch_size=32, lr={"default": 0.05, "t": 0.01, "alpha": 0.0})
    >>> sgd.train(*epoch_batches(pool, 32, 2, generators=gens, sizes=n, last="pad"))   # sgd.P: new state
    """

    def __init__(self, model: nn.Module, params: Params, x: Tensor, y: Tensor, batch_size: int, *, lr,
                 objective: BatchedObjective | None = None, backend: str = "auto", cuda_graph: bool = True,
                 log: Callable[[str], None] = print, opt: str = "sgd", momentum: float = 0.0,
                 weight_decay: float = 0.0, prox_mu: float = 0.0):
        if opt != "sgd" or momentum or weight_decay or prox_mu:
            raise ValueError(f"FastSGD runs plain SGD only (opt='sgd', no momentum, weight_decay or prox_mu); got "
                             f"opt={opt!r}, momentum={momentum}, weight_decay={weight_decay}, prox_mu={prox_mu}: "
                             "use flkit.engine.local_train")
        if not supports_grouped(model):
            raise ValueError("FastSGD needs a model of the grouped family (flkit.engine.supports_grouped); "
                             "use flkit.engine.local_train")
        if backend not in ("auto", "fused", "grouped"):
            raise ValueError(f"backend must be 'auto', 'fused' or 'grouped', got {backend!r}")
        batch_size = _count(batch_size, "batch_size")
        pnames, _, extras = _names(model, params)
        first = params[pnames[0]]
        M, dev = first.shape[0], first.device
        bad = [k for k, v in params.items() if v.shape[:1] != (M,)]
        if bad:
            raise ValueError(f"params {bad[:3]} do not have the leading axis M={M} of {pnames[0]!r}")
        if x.device != dev or y.device != dev:
            raise ValueError(f"x and y must be on the parameters' device {dev}, got {x.device} and {y.device}")
        can_fuse = fused.supports_fused(model) and fused.available(x.device)
        if backend == "fused" and not can_fuse:
            raise ValueError("backend='fused' needs triton, a CUDA device (or TRITON_INTERPRET=1) and a model of "
                             "Conv2d -> LeakyReLU -> MaxPool2d(2) blocks (flkit.fused.supports_fused)")
        auto_fuse = backend == "auto" and can_fuse and dev.type == "cuda"  # never the slow interpreter
        self.backend = "fused" if backend == "fused" or auto_fuse else "grouped"
        self.precision = "tf32"  # of the fused kernels' products ("ieee": full float32)
        self.model, self.x, self.y, self.objective = model, x, y, objective or cross_entropy
        self.pnames = pnames
        self.P = {k: v.detach().clone() for k, v in params.items()}
        lrs = _lr_table(lr, pnames + extras, M, first)
        self.trained = [k for k in pnames + extras if bool((lrs[k] != 0).any())]
        if not self.trained:
            raise ValueError("every learning rate is 0: nothing to train")
        self.lr = {k: lrs[k].clone() for k in self.trained}
        self.idx = torch.zeros(M, batch_size, dtype=torch.long, device=dev)
        self.active = torch.ones(M, dtype=torch.bool, device=dev)
        self.graph = None
        if cuda_graph and dev.type == "cuda":
            try:
                self._capture()
            except Exception as e:  # pragma: no cover - GPU only
                self.graph = None
                log(f"FastSGD: CUDA graph capture failed ({type(e).__name__}: {e}); running eagerly")
            else:  # pragma: no cover - GPU only
                if not self._graph_matches_eager():
                    self.graph = None
                    log("FastSGD: CUDA graph and eager step disagree; running eagerly")

    def _step(self) -> None:
        """One masked SGD step of the M models on the minibatch indices in ``self.idx``."""
        idx, P = self.idx, self.P
        yb = torch.where(idx >= 0, self.y[idx.clamp(min=0)], -100)
        leaves = {k: P[k].detach().requires_grad_(True) for k in self.trained}
        args = P | leaves
        theta = {k: args[k] for k in self.pnames}
        if self.backend == "fused":
            logits = fused.forward(self.model, theta, self.x, idx, self.precision)
        else:
            logits = grouped_forward(self.model, theta, self.x[idx.clamp(min=0)])
        losses = self.objective(logits, yb, args)
        if losses.shape != idx.shape[:1]:
            raise ValueError(f"the objective must return one loss per model, shape ({idx.shape[0]},); "
                             f"got {tuple(losses.shape)}")
        grads = torch.autograd.grad(losses.sum(), [leaves[k] for k in self.trained], allow_unused=True)
        with torch.no_grad():
            for k, d in zip(self.trained, grads):
                if d is None:  # the objective does not depend on it: zero gradient, no change
                    continue
                p, act = P[k], _bcast(self.active, P[k])
                p.copy_(torch.where(act, p - _bcast(self.lr[k], p) * d, p))

    def _capture(self) -> None:  # pragma: no cover - GPU only
        self.idx.zero_()
        self.active.fill_(False)  # warm-up and capture leave the state unchanged
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step()
        self.graph = graph

    def _graph_matches_eager(self) -> bool:  # pragma: no cover - GPU only
        g = torch.Generator(device=self.x.device).manual_seed(0)
        self.idx.copy_(torch.randint(0, len(self.y), self.idx.shape, generator=g, device=self.x.device))
        self.active.fill_(True)
        start = {k: v.clone() for k, v in self.P.items()}
        self.graph.replay()
        replayed = {k: v.clone() for k, v in self.P.items()}
        for k in self.P:
            self.P[k].copy_(start[k])
        self._step()
        ok = all(torch.allclose(replayed[k], self.P[k], rtol=1e-5, atol=1e-6) for k in self.P)
        for k in self.P:
            self.P[k].copy_(start[k])
        return ok

    def train(self, batches: Tensor, steps: Tensor | None = None) -> Params:
        """Run the local steps: batches (M, S, B) of indices into x (-1: padding), steps (M,) the valid
        steps of each model (default: all S), e.g. from :func:`flkit.batches.epoch_batches`. Updates and
        returns ``self.P``."""
        M, B = self.idx.shape
        if batches.dim() != 3 or batches.shape[0] != M or batches.shape[2] != B:
            raise ValueError(f"batches must be (M={M}, S, B={B}), got {tuple(batches.shape)}")
        S = batches.shape[1]
        steps = torch.full((M,), S, device=batches.device) if steps is None else steps
        if steps.shape != (M,):
            raise ValueError(f"steps must have shape ({M},), got {tuple(steps.shape)}")
        act = torch.arange(S, device=batches.device) < steps[:, None]
        for s in range(S):
            self.idx.copy_(batches[:, s])
            self.active.copy_(act[:, s])
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
        return self.P
