"""Algorithm 1 of document 003 (FED-CVaR-AVG) for M stacked runs: the server state, the relayed users'
minibatches and step sizes, and one round. The local steps themselves are `flkit.engine`'s
(`local_train` here; `engine.FastSGD` with the same objective for long runs, see experiments)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from flkit.batches import epoch_batches
from flkit.engine import local_train
from flkit.objectives import cvar_objective

@dataclass
class State:
    """Server state of M independent runs of Algorithm 1.

    params: the global (theta, t) of every run, a dict name -> Tensor with leading axis M: the model's
        parameters (theta), "t" (M,) the CVaR threshold, and the per-run constants "alpha" and "gamma"
        (M,), carried as extras with step size 0 so that `flkit.engine.local_train` hands each model its
        own alpha and gamma (they never change).
    round: number of rounds done (n); the params are the model broadcast at the start of round n + 1.
    """

    params: dict[str, torch.Tensor]
    round: int = 0

    @property
    def t(self) -> torch.Tensor:
        return self.params["t"]

    @property
    def theta(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.params.items() if k not in EXTRAS}


EXTRAS = ("t", "alpha", "gamma")


def init(theta: Mapping[str, torch.Tensor], alpha, gamma, t0: float = 0.0) -> State:
    """State at n = 0: theta^1 stacked over M runs (from `flkit.engine.stack`), t^1 = t0 (0 in the
    document's code), and each run's (alpha, gamma) (floats, or sequences of length M)."""
    first = next(iter(theta.values()))
    M, dev = first.shape[0], first.device

    def col(v, name):
        v = torch.as_tensor(v, dtype=first.dtype, device=dev).reshape(-1)
        v = v.expand(M).clone() if v.numel() == 1 else v
        if v.shape != (M,):
            raise ValueError(f"{name} must be a float or have one value per run ({M}), got {tuple(v.shape)}")
        return v

    a, g = col(alpha, "alpha"), col(gamma, "gamma")
    if not bool(((a > 0) & (a <= 1)).all()):
        raise ValueError(f"alpha must be in (0, 1], got {a.tolist()}")
    if not bool(((g >= 0) & (g <= 1)).all()):
        raise ValueError(f"gamma must be in [0, 1], got {g.tolist()}")
    params = {k: v.detach().clone() for k, v in theta.items()}
    params.update(t=torch.full((M,), float(t0), dtype=first.dtype, device=dev), alpha=a, gamma=g)
    return State(params, 0)


@dataclass
class Users:
    """The K users' datasets of each of M runs, as padded index pools into a shared training set.

    pool: (M, K, N_max) LongTensor of sample indices (rows padded with their first index);
    size: (M, K) LongTensor, N_i of each user in each run."""

    pool: torch.Tensor
    size: torch.Tensor

    @classmethod
    def from_partitions(cls, partitions: Sequence, device=None) -> "Users":
        """One `flkit.partition.Partition` per run (all with the same number of users K)."""
        K = {p.num_clients for p in partitions}
        if len(K) != 1:
            raise ValueError(f"all runs need the same number of users, got {sorted(K)}")
        width = max(max(len(i) for i in p.indices) for p in partitions)
        pool = torch.zeros(len(partitions), K.pop(), width, dtype=torch.long)
        size = torch.zeros(pool.shape[:2], dtype=torch.long)
        for m, p in enumerate(partitions):
            for i, idx in enumerate(p.indices):
                if len(idx) == 0:
                    raise ValueError(f"run {m}: user {i} holds no data")
                idx = torch.as_tensor(np.asarray(idx), dtype=torch.long)
                pool[m, i, : len(idx)], pool[m, i, len(idx):] = idx, idx[0]
                size[m, i] = len(idx)
        return cls(pool.to(device), size.to(device))

    def relayed(self, selected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices (M, N_max), sizes (M,)) of the user each run relays."""
        m = torch.arange(self.pool.shape[0], device=self.pool.device)
        return self.pool[m, selected], self.size[m, selected]


def learning_rates(lr_theta, lr_t) -> dict:
    """The per-tensor step sizes of the local steps, in `flkit.engine`'s ``lr`` convention: eta_theta
    for the model (the "default"), eta_t for t, 0 for the constants alpha and gamma (floats or (M,))."""
    return {"default": lr_theta, "t": lr_t, "alpha": 0.0, "gamma": 0.0}


def run_round(state: State, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, users: Users,
          selected: torch.Tensor, *, lr_theta, lr_t, epochs: int, batch_size: int,
          generators: Sequence[torch.Generator], vectorized: bool | str = True) -> tuple[State, dict]:
    """One round of Algorithm 1 for M runs.

    selected (M,): the user I_n the RAM relays in each run. Every run's global (theta, t) is trained by
    H epochs of joint SGD on G_{I_n} (steps eta_theta = lr_theta, eta_t = lr_t; floats or (M,) tensors)
    over that user's data, and becomes the new global model. `generators`: one torch.Generator per run
    (on x's device) for this round's minibatch order.

    Minibatches: `flkit.engine.epoch_batches` over the relayed user's indices, a fresh permutation per
    epoch, with one generator per run (run m's batches do not depend on the other runs) and
    ``last="pad"`` (a short last batch is padded with -1, ignored by the loss: the authors' DataLoader
    keeps it). The steps: `flkit.engine.local_train` with `objective` (the surrogate of G_i).

    Returns the new state and diagnostics: {"user": selected, "t": t^{n+1}, "steps": local steps}."""
    pool, n = users.relayed(selected)
    batches, steps = epoch_batches(pool, batch_size, epochs, generators=generators, sizes=n, last="pad")
    params, _ = local_train(model, state.params, x, y, batches, lr=learning_rates(lr_theta, lr_t),
                            objective=cvar_objective, steps=steps, vectorized=vectorized)
    return State(params, state.round + 1), {"user": selected, "t": params["t"], "steps": steps}
