"""The contracts of the round loop :func:`flkit.fl.run`: what a task, a server rule and a client sampler provide.

They are :class:`typing.Protocol` s: nothing inherits from them; a class fits when it has the members (checked
by a type checker, and by ``isinstance`` for the required methods, since they are ``runtime_checkable``).
Shapes: R runs side by side (the rows of the runs axis, or one algorithm's rows), N clients, d parameters,
P (run, client) pairs.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from flkit.aggregate import Updates

__all__ = ["Task", "Aggregator", "Sampler", "Probe"]


@runtime_checkable
class Task(Protocol):
    """The model and the clients' local training, on a flat parameter vector of ``dim`` floats per run.

    Required: ``num_clients`` (N), ``dim`` (d), ``client_updates(w (R, d), active (R, N) bool, t, runs)``
    returning ``(pairs (P, 2) long, delta (P, d))`` or ``(pairs, delta, local models (P, d))`` for the active
    (run, client) pairs, with delta the global model minus the local one (a pseudo-gradient), and
    ``metrics(w (R, d)) -> {name: (R,)}`` (the first metric is the one divergence is judged on). ``runs`` is a
    :class:`flkit.fl.Runs`: randomness of local training is keyed by (seed, round, client) only.

    Optional, read with ``getattr`` when present: ``dtype`` (default float32); ``local_lr`` (the clients' step
    size, default 1.0, when the algorithm gives none); ``sizes`` ((N,) sample counts, for samplers and the
    rules weighting by size); ``key`` (a value that names the task's data in the checkpoint key);
    ``init_params(seeds) -> (R, d)`` (the initial models, each from its seed's "init" stream; default zeros);
    ``client_losses(w, pairs, runs) -> (P,)`` and ``client_gradients(w, pairs, runs) -> (P, d)`` (what a
    :class:`Probe` reads); ``state_dict()`` / ``load_state_dict(state)`` (a state the task keeps across rounds,
    saved in checkpoints).
    """

    @property
    def num_clients(self) -> int: ...

    @property
    def dim(self) -> int: ...

    def client_updates(self, w: Tensor, active: Tensor, t: int, runs: Any) -> tuple[Tensor, ...]: ...

    def metrics(self, w: Tensor) -> Mapping[str, Tensor]: ...


@runtime_checkable
class Probe(Protocol):
    """The round loop's narrow window on training state, for one algorithm's R rows at round t's global models.

    ``losses(mask (R, N) bool) -> (R, N)``: the current global model's training loss on the asked clients, NaN
    elsewhere (``task.client_losses``); ``gradients(mask) -> (pairs (P, 2), (P, d))``: the asked clients'
    gradients of their local objective over all their data at the current global model, or at the models
    ``at`` (R, d) when given (``task.client_gradients``); ``updates(mask) -> (pairs, delta (P, d))``: the
    updates the asked clients would send; ``models() -> (R, d)``: round t's global models themselves (what the
    server holds; a rule that evaluates clients at an earlier model keeps it from here). Pairs are (run within
    the algorithm, client)."""

    def models(self) -> Tensor: ...

    def losses(self, mask: Tensor) -> Tensor: ...

    def gradients(self, mask: Tensor, at: Tensor | None = None) -> tuple[Tensor, Tensor]: ...

    def updates(self, mask: Tensor) -> tuple[Tensor, Tensor]: ...


@runtime_checkable
class Aggregator(Protocol):
    """A server rule (:mod:`flkit.aggregate`): how a round's client updates become the server's direction.

    ``init(R, N, d, dtype, device) -> state`` (any value: None, or a small mutable dataclass);
    ``apply(state, upd: Updates) -> (G (R, d), state)``; the server then steps x <- x - lr G.

    Optional class attributes: ``returns_model = True``: G holds the new models themselves (rows of runs that
    received an update; the others keep theirs), not a direction; ``wants_probe = True``: ``apply`` is called
    with ``probe=`` a :class:`Probe` of the algorithm's rows at the round's global models (before the step), for
    rules that evaluate the clients beyond the updates they sent.
    """

    def init(self, R: int, N: int, d: int, dtype: torch.dtype, device: torch.device) -> Any: ...

    def apply(self, state: Any, upd: Updates) -> tuple[Tensor, Any]: ...


@runtime_checkable
class Sampler(Protocol):
    """A client sampler (:mod:`flkit.sample`): which of the available clients train in round t, how many times.

    ``init(runs, num_clients, sizes (R, N) float64, seeds) -> state`` (run r draws from its own generator of
    ``seeds[r]``); ``select(state, t, available (R, N) bool, probe: Probe) -> (counts (R, N) int64, state)``
    (an unavailable client is never drawn).

    Optional: ``observe(state, t, pairs (P, 2), delta (P, d)) -> state``: the updates of the clients that
    trained (pairs are (run within the algorithm, client)), for samplers that learn from them.
    """

    def init(self, runs: int, num_clients: int, sizes: Tensor, seeds: Sequence[int]) -> Any: ...

    def select(self, state: Any, t: int, available: Tensor, probe: Probe) -> tuple[Tensor, Any]: ...
