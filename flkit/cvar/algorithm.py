"""Algorithm 1 of document 003 (FED-CVaR-AVG) for M stacked runs: the server state, one round, and a
fast path for long runs (`FastLocalSGD`)."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from flkit.cvar.objective import IGNORE, objective, surrogate

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


def make_batches(pool: torch.Tensor, n: torch.Tensor, epochs: int, batch_size: int,
                 generators: Sequence[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
    """Minibatches of H = `epochs` passes over each run's relayed user (a fresh permutation per epoch).

    pool (M, N_max), n (M,): each run's user indices and size. Run m draws its permutations from its own
    generator only (float64 keys of width n[m], argsort), so its batches do not depend on the other
    runs. Returns batches (M, S, B) and steps (M,) = H ceil(n/B), with `flkit.engine.epoch_batches`'
    ``last="pad"`` layout: a short last batch of an epoch is padded with -1 (ignored by the loss),
    steps past a run's own are filler (masked by the engine)."""
    M, W = pool.shape
    dev, B, H = pool.device, int(batch_size), int(epochs)
    keys = torch.full((M, H, W), 2.0, dtype=torch.float64, device=dev)
    for m, (g, nm) in enumerate(zip(generators, n.tolist())):  # one device sync for all runs
        keys[m, :, :nm] = torch.rand(H, nm, generator=g, device=dev, dtype=torch.float64)
    perm = keys.argsort(dim=-1)                                       # (M, H, W)
    spe = (n + B - 1) // B                                            # steps per epoch (M,)
    spe_max = int(spe.max())
    j = torch.arange(spe_max * B, device=dev)
    pos = perm.gather(-1, j.clamp(max=W - 1).expand(M, H, -1))        # (M, H, spe_max*B)
    ids = pool.gather(1, pos.reshape(M, -1)).view(M, H, spe_max * B)
    ids = ids.masked_fill(j >= n[:, None, None], -1).view(M, H, spe_max, B)
    steps = spe * H
    s = torch.arange(int(steps.max()), device=dev)
    per = spe.clamp(min=1)[:, None]
    mi = torch.arange(M, device=dev)[:, None]
    batches = ids[mi, (s // per).clamp(max=H - 1), s % per]          # (M, S, B)
    filler = pool[:, :1, None].expand_as(batches)
    batches = torch.where((s[None, :] >= steps[:, None])[..., None], filler, batches)
    return batches, steps


def round(state: State, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, users: Users,
          selected: torch.Tensor, *, lr_theta, lr_t, epochs: int, batch_size: int,
          generators: Sequence[torch.Generator], vectorized: bool | str = True) -> tuple[State, dict]:
    """One round of Algorithm 1 for M runs.

    selected (M,): the user I_n the RAM relays in each run. Every run's global (theta, t) is trained by
    H epochs of joint SGD on G_{I_n} (steps eta_theta = lr_theta, eta_t = lr_t; floats or (M,) tensors)
    over that user's data, and becomes the new global model. `generators`: one torch.Generator per run
    (on x's device) for this round's minibatch order.

    Returns the new state and diagnostics: {"user": selected, "t": t^{n+1}, "steps": local steps}."""
    from flkit.engine import local_train
    pool, n = users.relayed(selected)
    batches, steps = make_batches(pool, n, epochs, batch_size, generators)
    lr = {"default": lr_theta, "t": lr_t, "alpha": 0.0, "gamma": 0.0}
    params, _ = local_train(model, state.params, x, y, batches, lr=lr, objective=objective, steps=steps,
                            vectorized=vectorized)
    return State(params, state.round + 1), {"user": selected, "t": params["t"], "steps": steps}


# ================================================================================================
# A fast path for long runs: batched objective, in-place updates, CUDA graphs
# ================================================================================================
class FastLocalSGD:
    """The local steps of Algorithm 1 for M stacked runs, specialised for speed.

    Same update rule as `round` (which calls `flkit.engine.local_train` with `objective`): plain SGD on
    (theta, t), step sizes eta_theta and eta_t, the objective's gradients as in `grad_G`, models of the
    engine's grouped family (`flkit.engine.supports_grouped`). Differences are in the mechanics only:
    the objective is evaluated for the M runs at once (no vmap), the state is updated in place, and on
    CUDA each local step is one replay of a captured CUDA graph (a step of these small models is a few
    hundred tiny kernels, so launching them one by one would dominate the time). The graph is checked
    against an eager step after capture and dropped, with a warning, if they disagree or capture fails.
    tests/test_cvar.py checks that a round through this class equals `round` bit for bit on the CPU.

    backend: how the M models' forward/backward runs. "grouped": `flkit.engine.grouped_forward` (the
    conv layers as cuDNN grouped convolutions); "fused": `flkit.fused` (Triton kernels for the
    Conv -> LeakyReLU -> MaxPool blocks, TF32 like cuDNN; 1.8x faster for the Table 1 LeNet on an H100,
    benchmarks/bench_cvar_step.py); "auto": fused on CUDA with triton and a model it supports, else
    grouped. The backend used is in `self.backend`, the fused products' precision in `self.precision`.

    params: the state dict of `State` (theta stacked, "t", "alpha", "gamma"); lr_theta, lr_t: floats
    or (M,) tensors. `P` holds the current state (static tensors, updated in place)."""

    def __init__(self, model: torch.nn.Module, params: Mapping[str, torch.Tensor], x: torch.Tensor,
                 y: torch.Tensor, batch_size: int, lr_theta, lr_t, cuda_graph: bool = True,
                 log: Callable[[str], None] = print, backend: str = "auto"):
        from flkit import fused
        from flkit.engine import supports_grouped
        if not supports_grouped(model):
            raise ValueError("FastLocalSGD needs a model of the engine's grouped family; use cvar.round")
        if backend not in ("auto", "fused", "grouped"):
            raise ValueError(f"backend must be 'auto', 'fused' or 'grouped', got {backend!r}")
        can_fuse = fused.supports_fused(model) and fused.available(x.device)
        if backend == "fused" and not can_fuse:
            raise ValueError("backend='fused' needs triton, a CUDA device (or TRITON_INTERPRET=1) and a model of "
                             "Conv2d -> LeakyReLU -> MaxPool2d(2) blocks (flkit.fused.supports_fused)")
        auto_fuse = backend == "auto" and can_fuse and x.device.type == "cuda"  # never the slow interpreter
        self.backend = "fused" if backend == "fused" or auto_fuse else "grouped"
        self.precision = "tf32"  # of the fused kernels' products ("ieee": full float32)
        self.model, self.x, self.y = model, x, y
        self.pnames = [k for k, _ in model.named_parameters()]
        self.P = {k: v.detach().clone() for k, v in params.items()}
        first = self.P["t"]
        M, dev = first.shape[0], first.device
        as_m = lambda v: torch.as_tensor(v, dtype=first.dtype, device=dev).reshape(-1).expand(M).clone()  # noqa: E731
        self.lr = {k: as_m(lr_theta) for k in self.pnames} | {"t": as_m(lr_t)}
        self.idx = torch.zeros(M, batch_size, dtype=torch.long, device=dev)
        self.active = torch.ones(M, dtype=torch.bool, device=dev)
        self.graph = None
        if cuda_graph and dev.type == "cuda":
            try:
                self._capture()
            except Exception as e:  # pragma: no cover - GPU only
                self.graph = None
                log(f"FastLocalSGD: CUDA graph capture failed ({type(e).__name__}: {e}); running eagerly")
            else:  # pragma: no cover - GPU only
                if not self._graph_matches_eager():
                    self.graph = None
                    log("FastLocalSGD: CUDA graph and eager step disagree; running eagerly")

    def _step(self) -> None:
        from flkit import fused
        from flkit.engine import cross_entropy, grouped_forward
        x, y, idx, P = self.x, self.y, self.idx, self.P
        yb = torch.where(idx >= 0, y[idx.clamp(min=0)], IGNORE)
        names = self.pnames + ["t"]
        leaves = {k: P[k].detach().requires_grad_(True) for k in names}
        theta = {k: leaves[k] for k in self.pnames}
        if self.backend == "fused":
            logits = fused.forward(self.model, theta, x, idx, self.precision)
        else:
            logits = grouped_forward(self.model, theta, x[idx.clamp(min=0)])
        f = cross_entropy(logits, yb)                                                  # (M,)
        loss = surrogate(f, leaves["t"], P["alpha"], P["gamma"]).sum()                 # the M runs' sum
        grads = torch.autograd.grad(loss, [leaves[k] for k in names])
        with torch.no_grad():
            for k, d in zip(names, grads):
                p = P[k]
                shape = (-1,) + (1,) * (p.dim() - 1)
                p.copy_(torch.where(self.active.view(shape), p - self.lr[k].view(shape) * d, p))

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

    def train(self, batches: torch.Tensor, steps: torch.Tensor) -> None:
        """Run the local steps of one round: batches (M, S, B), steps (M,) as from `make_batches`."""
        S = batches.shape[1]
        act = torch.arange(S, device=batches.device) < steps[:, None]
        for s in range(S):
            self.idx.copy_(batches[:, s])
            self.active.copy_(act[:, s])
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
