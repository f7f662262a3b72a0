"""Minibatch indices for local training: which samples each of M models (clients of a round, runs) takes at
each of its local steps, as ``batches`` (M, S, B) of indices into x (-1: padding) and ``steps`` (M,), the valid
steps of each model; :func:`flkit.engine.local_train` and :class:`flkit.fastsgd.FastSGD` consume them.

* :func:`epoch_batches`: ``epochs`` passes over each model's data, a fresh permutation per epoch (the last,
  partial batch wrapped, padded or dropped);
* :func:`sample_batches`: ``num_steps`` independent minibatches per model ("I local iterations");
* :class:`BatchStream`: per-client shuffled streams that persist across rounds (FedAU's loader).

Randomness: each permutation is the argsort of float64 keys drawn from the generator(s) given (torch's global
RNG without one); see each function for the order of the draws.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["epoch_batches", "sample_batches", "BatchStream"]


def _count(value, name: str) -> int:
    """A count (batch size, epochs, steps, chunk): an int >= 1 (numpy ints too; bools and floats refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


def _index_table(sizes_or_index_lists, device, sizes=None) -> tuple[Tensor, Tensor]:
    """(M, n_max) table of each model's sample indices (padded with its first index) and sizes (M,).
    Sizes mean contiguous blocks of a concatenation: model m owns [sum(sizes[:m]), sum(sizes[:m+1])).
    With ``sizes``, the first argument already is such a table (M, W) (any padding) and ``sizes`` its
    rows' lengths; it is used as it is (no host round trip)."""
    if sizes is not None:
        table, n = torch.as_tensor(sizes_or_index_lists), torch.as_tensor(sizes)
        if table.dim() != 2 or table.dtype != torch.long or n.shape != table.shape[:1] or n.dtype != torch.long:
            raise ValueError(f"with sizes, give a LongTensor (M, W) of index rows and sizes a LongTensor (M,); got "
                             f"{table.dtype} {tuple(table.shape)} and {n.dtype} {tuple(n.shape)}")
        n = n.to(device)
        if len(n) and not bool(((n >= 0) & (n <= table.shape[1])).all()):
            raise ValueError(f"sizes must be in [0, {table.shape[1]}] (the table's width), got {n.tolist()}")
        return table.to(device), n
    items = list(sizes_or_index_lists)
    if all(np.ndim(a) == 0 for a in items):
        sizes = [int(a) for a in items]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        items = [np.arange(offsets[i], offsets[i + 1]) for i in range(len(sizes))]
    lists = [torch.as_tensor(a.cpu() if isinstance(a, Tensor) else np.asarray(a), dtype=torch.long).reshape(-1)
             for a in items]
    sizes_host = [len(a) for a in lists]                  # the width from host ints: no tensor read
    n = torch.tensor(sizes_host, dtype=torch.long)
    table = torch.zeros(len(lists), max(1, max(sizes_host) if sizes_host else 1), dtype=torch.long)
    for i, a in enumerate(lists):
        if len(a):
            table[i, :len(a)], table[i, len(a):] = a, a[0]
    return table.to(device), n.to(device)


def _permutations(n: Tensor, width: int, generator, device) -> Tensor:
    """(len(n), width) rows whose first n[i] entries are a uniform random permutation of 0..n[i]-1."""
    keys = torch.rand(len(n), width, generator=generator, device=device, dtype=torch.float64)
    keys.masked_fill_(torch.arange(width, device=device) >= n[:, None], 2.0)
    return keys.argsort(dim=1)


def _epoch_permutations(n: Tensor, width: int, epochs: int, generator, generators, device) -> Tensor:
    """(M, epochs, width): per model and epoch, a permutation of 0..n[m]-1 in the first n[m] entries.

    One generator: each epoch draws (M, width) float64 keys for all models at once. Per-model
    generators: model m draws (epochs, n[m]) float64 keys from its own generator only, so its
    permutations do not depend on the other models (keys of the unused width are 2.0, sorted last)."""
    if generators is None:
        return torch.stack([_permutations(n, width, generator, device) for _ in range(epochs)], 1)
    keys = torch.full((len(n), epochs, width), 2.0, dtype=torch.float64, device=device)
    for m, (g, nm) in enumerate(zip(generators, n.tolist())):  # one device sync for all models
        keys[m, :, :nm] = torch.rand(epochs, nm, generator=g, device=device, dtype=torch.float64)
    return keys.argsort(dim=-1)


def epoch_batches(sizes_or_index_lists, batch_size: int, epochs: int = 1, generator: torch.Generator | None = None,
                  *, generators=None, sizes: Tensor | None = None, last: str = "wrap",
                  device=None) -> tuple[Tensor, Tensor]:
    """Minibatches for ``epochs`` passes over each model's data: a fresh permutation per epoch.

    ``sizes_or_index_lists``: per model either its indices into x (arrays/tensors) or its size (then
    models own consecutive blocks of x); or, with ``sizes`` (LongTensor (M,)), a LongTensor (M, W) whose
    row m holds model m's indices in its first sizes[m] entries (any padding after; used in place, e.g.
    on the GPU). Returns ``batches`` (M, S, B) and ``steps`` (M,) = epochs * batches-per-epoch;
    S = max(steps); steps beyond a model's own are filler (masked; index: the model's first sample).

    Randomness: ``generator`` (one stream: each epoch draws float64 keys (M, n_max) for all models;
    None: torch's global RNG) or ``generators`` (one per model, all on one device: model m draws
    (epochs, n_m) float64 keys from its own, so its batches do not depend on which other models share
    the call; Fed-CVaR's runs use this). The permutation of an epoch is the argsort of its keys.

    The last, partial batch of an epoch (n_m not a multiple of B) follows ``last``:
      * ``"wrap"`` (default): ceil(n_m/B) full batches; the last is topped up with the first samples of
        the same epoch's permutation (those few are seen twice in that epoch; a client with n_m < B has
        its samples repeated to fill one batch). Works with any objective.
      * ``"pad"``: ceil(n_m/B) batches; the missing slots are index -1, whose labels the default
        :func:`flkit.engine.cross_entropy` ignores, so each step equals PyTorch's ``DataLoader(shuffle=True,
        drop_last=False)`` with its short last batch (BatchNorm batch statistics excepted: padded
        slots hold a real sample). Custom objectives must use :func:`flkit.engine.cross_entropy` or mask y < 0.
      * ``"drop"``: floor(n_m/B) batches (``drop_last=True``; clients with n_m < B get 0 steps).
    """
    if last not in ("wrap", "pad", "drop"):
        raise ValueError(f"last must be 'wrap', 'pad' or 'drop', got {last!r}")
    batch_size, epochs = _count(batch_size, "batch_size"), _count(epochs, "epochs")
    if generator is not None and generators is not None:
        raise ValueError("give generator= (one stream for all models) or generators= (one per model), not both")
    gens = None if generators is None else list(generators)
    gdev = (gens[0].device if gens else generator.device if generator is not None else torch.device("cpu"))
    if gens is not None and len({g.device for g in gens}) > 1:
        raise ValueError(f"generators must share one device, got {sorted({str(g.device) for g in gens})}")
    table, n = _index_table(sizes_or_index_lists, gdev, sizes)
    M, B = len(n), batch_size
    if gens is not None and len(gens) != M:
        raise ValueError(f"generators: one generator per model ({M}), got {len(gens)}")
    spe = n // B if last == "drop" else (n + B - 1) // B
    steps, spe_max = spe * epochs, max(1, int(spe.max()) if M else 1)
    j = torch.arange(spe_max * B, device=gdev)
    perm = _epoch_permutations(n, table.shape[1], epochs, generator, gens, gdev)         # (M, epochs, W)
    pos = perm.gather(2, (j[None, :] % n.clamp(min=1)[:, None])[:, None].expand(M, epochs, -1))
    ids = table.gather(1, pos.reshape(M, -1)).view(M, epochs, spe_max * B)
    if last == "pad":
        ids = ids.masked_fill(j >= n[:, None, None], -1)
    tab = ids.view(M, epochs, spe_max, B)
    s, per = torch.arange(int(steps.max()) if M else 0, device=gdev), spe.clamp(min=1)[:, None]
    batches = tab[torch.arange(M, device=gdev)[:, None], (s // per).clamp(max=epochs - 1), s % per]
    batches = torch.where((s[None, :] >= steps[:, None])[..., None], table[:, :1, None].expand_as(batches), batches)
    return batches.to(device or gdev), steps.to(device or gdev)


def sample_batches(index_lists, batch_size: int, num_steps: int, generator: torch.Generator | None = None, *,
                   replace: bool = False, device=None) -> tuple[Tensor, Tensor]:
    """``num_steps`` independent minibatches per model ("I local iterations"): each batch is B samples
    drawn uniformly from the model's data without replacement within the batch (with replacement if
    ``replace`` or if n_m < B, then samples repeat), independently across steps.

    Note: FedAU's code instead walks a per-client shuffled DataLoader that persists across rounds and
    skips short last batches; :class:`BatchStream` reproduces that exactly.
    Returns ``batches`` (M, num_steps, B) and ``steps`` (M,) (0 for models without data).
    """
    batch_size, num_steps = _count(batch_size, "batch_size"), _count(num_steps, "num_steps")
    gdev = generator.device if generator is not None else torch.device("cpu")
    table, n = _index_table(index_lists, gdev)
    M, B = len(n), batch_size
    if replace:
        pos = (torch.rand(M, num_steps, B, generator=generator, device=gdev, dtype=torch.float64)
               * n[:, None, None]).long()
    else:
        keys = torch.rand(M, num_steps, table.shape[1], generator=generator, device=gdev, dtype=torch.float64)
        keys.masked_fill_(torch.arange(table.shape[1], device=gdev) >= n[:, None, None], 2.0)
        perm = keys.argsort(dim=2)
        first_b = torch.arange(B, device=gdev) % n.clamp(min=1)[:, None]  # (M, B); wraps when n_m < B
        pos = perm.gather(2, first_b[:, None, :].expand(M, num_steps, B))
    batches = table.gather(1, pos.clamp(max=table.shape[1] - 1).reshape(M, -1)).view(M, num_steps, B)
    steps = torch.where(n > 0, num_steps, 0)
    return batches.to(device or gdev), steps.to(device or gdev)


class BatchStream:
    """Per-client minibatch streams that persist across rounds, as in FedAU's code (IBM/fedau@6e9cce9, ``main.py``,
    ``sample_minibatch``):
    each client walks through a random permutation of its data B samples at a time; when fewer than
    B samples are left they are skipped and a fresh permutation starts (``DataLoader(shuffle=True)``
    restarted on a short batch). A client with n < B gets its samples repeated to fill a batch
    (the authors' loader would give it a short batch).

    >>> stream = BatchStream(partition.indices, 16, torch_gen(seed, "batch", device))
    >>> batches, steps = stream.next(active_clients, num_steps=5)     # (k, 5, 16), (k,)
    """

    def __init__(self, index_lists, batch_size: int, generator: torch.Generator | None = None):
        self.generator, self.B = generator, _count(batch_size, "batch_size")
        self.device = generator.device if generator is not None else torch.device("cpu")
        self.table, self.n = _index_table(index_lists, self.device)
        self.perm = _permutations(self.n, self.table.shape[1], generator, self.device)
        self.cursor = torch.zeros_like(self.n)

    def next(self, clients, num_steps: int) -> tuple[Tensor, Tensor]:
        """Minibatches (len(clients), num_steps, B) for the given client ids (distinct), and steps."""
        num_steps = _count(num_steps, "num_steps")
        c = torch.as_tensor(clients.cpu() if isinstance(clients, Tensor) else np.asarray(clients),
                            dtype=torch.long).reshape(-1).to(self.device)
        out = []
        for _ in range(num_steps):
            restart = c[self.cursor[c] + self.B > self.n[c]]
            if len(restart):
                self.perm[restart] = _permutations(self.n[restart], self.table.shape[1], self.generator, self.device)
                self.cursor[restart] = 0
            pos = (self.cursor[c, None] + torch.arange(self.B, device=self.device)) % self.n[c, None].clamp(min=1)
            out.append(self.table[c].gather(1, self.perm[c].gather(1, pos)))
            self.cursor[c] += self.B
        batches = torch.stack(out, 1) if out else torch.zeros(len(c), 0, self.B, dtype=torch.long, device=self.device)
        return batches, torch.where(self.n[c] > 0, num_steps, 0)
