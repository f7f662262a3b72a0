"""Tasks for `flkit.fl.run`: a model, the clients' data and their local training, on a flat parameter
vector per run. :class:`EngineTask` trains any torch model with `flkit.engine.local_train`; the closed-form
problems of document 002 (quadratics, softmax regression) are declared fast tasks in `flkit.mifa`.

Randomness of local training is keyed by (seed, round, client) only: client i of a run with seed s draws
its round-t minibatches from ``torch_gen(s, f"batch/{t}/{i}")``, so every algorithm of a comparison sees
the same minibatches, a run's numbers do not depend on which runs share its batch, and a resumed run
repeats them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from flkit import engine
from flkit.seeding import torch_gen

__all__ = ["EngineTask"]


@dataclass
class EngineTask:
    r"""Clients that train a torch model with `flkit.engine.local_train` (plain or momentum SGD, weight
    decay, FedProx), on a split of one training set.

    clients: one index array per client into (x, y) (e.g. ``Partition.indices``); the same split for every
    run. Local work: ``steps`` minibatches of ``batch_size`` drawn independently (FedAU's "I local
    iterations", `engine.sample_batches`) or ``epochs`` passes over the client's data (`engine.epoch_batches`,
    short last batch padded). The update is the pseudo-gradient :math:`\Delta = x - y` (divided by the
    local step size when ``normalized``). Metrics: test loss and accuracy of every run's global model.
    The initial model of a run with seed s is the model's init under ``torch_gen(s, "init")``."""
    model: nn.Module
    x: Tensor
    y: Tensor
    clients: Sequence
    x_test: Tensor
    y_test: Tensor
    batch_size: int
    steps: int | None = None
    epochs: int | None = None
    local_lr: float = 0.1
    momentum: float = 0.0
    weight_decay: float = 0.0
    prox_mu: float = 0.0
    objective: object = None
    normalized: bool = False
    vectorized: bool | str = True
    chunk: int = 512
    names: list = field(init=False)
    shapes: list = field(init=False)

    def __post_init__(self):
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("give exactly one of steps (local iterations) or epochs")
        for k in ("steps", "epochs", "batch_size"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError(f"{k} must be a positive int, got {v!r}")
        if not self.clients or any(len(c) == 0 for c in self.clients):
            raise ValueError("every client needs at least one sample")
        state = engine.stack_copies(self.model, 1)
        self.names = list(state)
        self.shapes = [tuple(v.shape[1:]) for v in state.values()]
        self._index = [torch.as_tensor(np.asarray(c), dtype=torch.long) for c in self.clients]

    # ---------------------------------------------------------------- the fl.run protocol
    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def dim(self) -> int:
        return int(sum(np.prod(s, dtype=np.int64) for s in self.shapes))

    @property
    def dtype(self) -> torch.dtype:
        return next(iter(self.model.parameters())).dtype

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(c) for c in self.clients])

    def flatten(self, params: dict) -> Tensor:
        return torch.cat([params[k].reshape(params[k].shape[0], -1) for k in self.names], 1)

    def unflatten(self, w: Tensor) -> dict:
        out, i = {}, 0
        for k, s in zip(self.names, self.shapes):
            n = int(np.prod(s, dtype=np.int64))
            out[k] = w[:, i:i + n].reshape(w.shape[0], *s)
            i += n
        return out

    def init_params(self, seeds: Sequence[int]) -> Tensor:
        """(R, d): the initial model of each run (its seed's "init" stream)."""
        return torch.cat([self.flatten(engine.stack(self.model, 1, torch_gen(int(s), "init"))) for s in seeds])

    def batches(self, seed: int, t: int, client: int) -> tuple[Tensor, Tensor]:
        """The round-t minibatches (1, S, B) and steps (1,) of `client` in a run with `seed`."""
        g = torch_gen(int(seed), f"batch/{t}/{client}")
        idx = [self._index[client]]
        if self.steps is not None:
            return engine.sample_batches(idx, self.batch_size, self.steps, g)
        return engine.epoch_batches(idx, self.batch_size, self.epochs, g, last="pad")

    def client_updates(self, w: Tensor, active: Tensor, t: int, runs) -> tuple[Tensor, Tensor]:
        pairs = active.nonzero()
        delta = w.new_zeros(len(pairs), w.shape[1])
        for c0 in range(0, len(pairs), self.chunk):
            pr = pairs[c0:c0 + self.chunk]
            made = [self.batches(runs.seeds[int(r)], t, int(i)) for r, i in pr.tolist()]
            S = max(b.shape[1] for b, _ in made)
            batches = torch.stack([torch.cat([b[0], b[0, :1].expand(S - b.shape[1], -1)]) for b, _ in made])
            steps = torch.cat([s for _, s in made])
            lr = runs.local_lr[pr[:, 0]].to(w.dtype)
            w0 = w[pr[:, 0]]
            new, _ = engine.local_train(self.model, self.unflatten(w0), self.x, self.y, batches.to(self.x.device),
                                        lr=lr, momentum=self.momentum, weight_decay=self.weight_decay,
                                        prox_mu=self.prox_mu, objective=self.objective, steps=steps.to(self.x.device),
                                        vectorized=self.vectorized)
            d = w0 - self.flatten(new)
            delta[c0:c0 + len(pr)] = d / lr.unsqueeze(1) if self.normalized else d
        return pairs, delta

    def metrics(self, w: Tensor) -> dict[str, Tensor]:
        loss, acc = engine.evaluate(self.model, self.unflatten(w), self.x_test, self.y_test)
        return {"test_loss": loss, "test_acc": acc}

    def client_losses(self, w: Tensor, pairs: Tensor) -> Tensor:
        """(P,): training loss of run r's model on client i's data, for each pair (r, i)."""
        out = torch.empty(len(pairs), dtype=torch.float64)
        for k, (r, i) in enumerate(pairs.tolist()):
            idx = self._index[i].to(self.x.device)
            loss, _ = engine.evaluate(self.model, self.unflatten(w[r:r + 1]), self.x[idx], self.y[idx])
            out[k] = float(loss[0])
        return out
