"""The state and the checks every sampler shares: one "selection" generator per run and the (R, N)
sample counts n_i (:class:`SamplerState`), the validation of ``init`` and ``select``'s inputs, the counts a
selection returns, and the store of each (run, client)'s latest update that the learning samplers keep. The
samplers' protocol (``init``, ``select``, ``observe``) is described in :mod:`flkit.sample`."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from flkit.seeding import rng

__all__ = ["SamplerState"]


@dataclass
class SamplerState:
    """One generator per run (``rng(seeds[r], "selection")``) and the (R, N) sample counts n_i."""

    rngs: list
    sizes: np.ndarray


def _positive_int(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


def _base_state(runs, num_clients, sizes, seeds, k=None) -> SamplerState:
    runs = _positive_int(runs, "runs")
    num_clients = _positive_int(num_clients, "num_clients")
    if k is not None and k > num_clients:
        raise ValueError(f"k = {k} exceeds num_clients = {num_clients}; choose k <= num_clients")
    s = torch.as_tensor(sizes).detach().cpu().numpy().astype(np.float64)
    if s.shape != (runs, num_clients):
        raise ValueError(f"sizes must have shape (runs, num_clients) = {(runs, num_clients)}, got {s.shape}")
    if not np.all(np.isfinite(s) & (s > 0)):
        r, i = np.argwhere(~(np.isfinite(s) & (s > 0)))[0]
        raise ValueError(f"sizes[{r}, {i}] = {s[r, i]}; every client needs a finite sample count > 0")
    seeds = list(seeds)
    if len(seeds) != runs:
        raise ValueError(f"seeds must give one seed per run ({runs}), got {len(seeds)}")
    return SamplerState(rngs=[rng(int(sd), "selection") for sd in seeds], sizes=s)


def _available(available, state: SamplerState) -> np.ndarray:
    a = torch.as_tensor(available).detach().cpu().numpy()
    if a.dtype != np.bool_ or a.shape != state.sizes.shape:
        raise ValueError(f"available must be a bool tensor of shape {state.sizes.shape}, "
                         f"got dtype {a.dtype} and shape {a.shape}")
    return a


def _counts(per_run: list[np.ndarray], n: int) -> torch.Tensor:
    """(R, N) int64 counts from each run's array of drawn client indices (repeats allowed)."""
    return torch.from_numpy(np.stack([np.bincount(c, minlength=n) for c in per_run]).astype(np.int64))


def _draw(g: np.random.Generator, idx: np.ndarray, size: int, weights: np.ndarray | None,
          replace: bool) -> np.ndarray:
    """`size` clients among `idx`, uniformly (weights None) or with probabilities weights / sum."""
    p = None if weights is None else weights / weights.sum()
    return np.asarray(g.choice(idx, size=size, replace=replace, p=p), dtype=np.int64)


def _store_latest(updates: torch.Tensor | None, pairs, delta, shape: tuple[int, int]):
    """Write each (run, client)'s update into ``updates`` (R, N, d), the last one when a pair repeats.

    ``updates`` is allocated with zeros on the device and dtype of ``delta`` when None. Returns
    (updates, runs, clients): the distinct (run, client) pairs written, as int arrays.
    """
    pairs = torch.as_tensor(pairs).detach().cpu().long()
    R, N = shape
    if pairs.ndim != 2 or pairs.shape[1] != 2 or delta.ndim != 2 or delta.shape[0] != pairs.shape[0]:
        raise ValueError(f"pairs must be (P, 2) and delta (P, d) with the same P, "
                         f"got {tuple(pairs.shape)} and {tuple(delta.shape)}")
    if pairs.numel() and (pairs.min() < 0 or (pairs[:, 0] >= R).any() or (pairs[:, 1] >= N).any()):
        raise ValueError(f"pairs must hold (run < {R}, client < {N}), got run and client maxima "
                         f"{pairs.max(0).values.tolist()} and minimum {int(pairs.min())}")
    if updates is None:
        updates = torch.zeros(R, N, delta.shape[1], dtype=delta.dtype, device=delta.device)
    if delta.shape[1] != updates.shape[2]:
        raise ValueError(f"delta has {delta.shape[1]} coordinates, earlier ones {updates.shape[2]}")
    runs, clients = pairs[:, 0].numpy(), pairs[:, 1].numpy()
    keys = runs * N + clients
    last = len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]  # last occurrence of each pair
    if last.size:
        rows = torch.from_numpy(last)
        updates[pairs[rows, 0].to(updates.device), pairs[rows, 1].to(updates.device)] = \
            delta[rows.to(delta.device)].to(updates.dtype)
    return updates, runs[last], clients[last]
