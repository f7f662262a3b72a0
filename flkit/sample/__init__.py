"""Client samplers: which of the available clients train in round t, and how many times each.

A sampler is a frozen dataclass of hyper-parameters with three methods (FedJAX's shape):

* ``init(runs, num_clients, sizes, seeds) -> state``: ``sizes`` (R, N) holds n_i, the number of
  samples of client i in run r; run r draws from its own generator
  ``flkit.seeding.rng(seeds[r], "selection")``, kept in the state, so a run's choices do not depend on
  which other runs share the batch.
* ``select(state, t, available, probe) -> (counts, state)``: ``available`` (R, N) bool, the clients
  available in round t; ``counts`` (R, N) int64, how many times each client is drawn (an unavailable
  client is never drawn).
* ``observe(state, t, pairs, delta) -> state``: the updates of the clients that trained, ``pairs``
  (P, 2) = (run, client) and ``delta`` (P, d) = global model minus local model. Only samplers that
  learn from updates keep them.

``probe`` is the round loop's narrow window on training state: ``probe.losses(mask)`` (the current
global model's training loss on the asked clients, NaN elsewhere), ``probe.gradients(mask)`` (the asked
clients' gradients of their local objective over all their data at the current global model) and
``probe.updates(mask)`` (the updates the asked clients would send). :class:`PowD` and :class:`CAFed` ask
for losses, :class:`DivFL` for gradients (its default ``proxy="gradient"``) or updates
(``proxy="update"``); the other samplers never call it.

Samplers return counts only; weights are the aggregation rule's business. :class:`CAFed` and
:class:`F3AST` (and their baselines Unbiased and AdaFed, which are :class:`AllAvailable`) aggregate with
a_k = q_k / pi_k (q_k = n_k / sum_j n_j, pi_k the availability known to the server), the rule
``flkit.aggregate.InverseAvailability``: a CA-Fed client is either excluded (a_k = 0: not selected) or
kept with its full weight q_k / pi_k, so the selection carries all that the sampler decides.

Below, A_t is the set of available clients of one run, p_i = n_i / sum_{j in A_t} n_j the data
fractions renormalised over A_t, and k the number of draws per round. The papers assume every client
is available; we apply their rules to A_t, so "proportional to n_i" means p_i over A_t.
Samplers without replacement take all of A_t when |A_t| <= k. Samplers with replacement
(``ProportionalK(replace=True)``, ``ClusteredSampling``) make k draws whenever A_t is non-empty,
so that E[counts_i] = k p_i still holds when |A_t| < k (a client may then be drawn several times).

The samplers live in one module per family, and every name is importable from ``flkit.sample`` itself:
:mod:`flkit.sample.base` (the state and checks they share), :mod:`flkit.sample.uniform`
(:class:`~flkit.sample.uniform.AllAvailable`, :class:`~flkit.sample.uniform.UniformK`,
:class:`~flkit.sample.uniform.ProportionalK`), :mod:`flkit.sample.powd` (:class:`~flkit.sample.powd.PowD`),
:mod:`flkit.sample.clustered` (:class:`~flkit.sample.clustered.ClusteredSampling`), :mod:`flkit.sample.divfl`
(:class:`~flkit.sample.divfl.DivFL`), :mod:`flkit.sample.cafed` (:class:`~flkit.sample.cafed.CAFed`,
:class:`~flkit.sample.cafed.F3AST`) and :mod:`flkit.sample.hics` (:class:`~flkit.sample.hics.HiCS`, the document's
reading of HiCS-FL, and :class:`~flkit.sample.hics.HiCSAuthors`, the authors' code).
"""
from __future__ import annotations

from flkit.sample.base import SamplerState
from flkit.sample.cafed import CAFed, CAFedState, F3AST, F3ASTState, cafed_allocation, cafed_error
from flkit.sample.clustered import (ClusteredSampling, ClusteredState, arccos_distances, clustered_distributions,
                                    ward_distributions, weight_groups)
from flkit.sample.divfl import DivFL, DivFLState, facility_location_greedy, update_distances
from flkit.sample.divfl import PROXIES  # noqa: F401  (not in __all__, as before; flkit.papers.hics reads it)
from flkit.sample.hics import (HiCS, HiCSAuthors, HiCSBase, HiCSState, annealed_probs, entropy_estimate,
                               hics_distances, hics_draw, output_layer, ward_clusters)
from flkit.sample.powd import PowD
from flkit.sample.uniform import AllAvailable, ProportionalK, UniformK

__all__ = [
    "SamplerState",
    "ClusteredState",
    "AllAvailable",
    "UniformK",
    "ProportionalK",
    "PowD",
    "ClusteredSampling",
    "DivFLState",
    "DivFL",
    "weight_groups",
    "clustered_distributions",
    "ward_distributions",
    "arccos_distances",
    "update_distances",
    "facility_location_greedy",
    "CAFedState",
    "CAFed",
    "cafed_error",
    "cafed_allocation",
    "F3ASTState",
    "F3AST",
    "output_layer",
    "entropy_estimate",
    "annealed_probs",
    "hics_distances",
    "ward_clusters",
    "hics_draw",
    "HiCSState",
    "HiCSBase",
    "HiCS",
    "HiCSAuthors",
]
