"""Chapter code of "Across the documents": what the book states about the five documents together.

* :mod:`flkit.papers.across.errata`: every slip the book demonstrates in a document or in its authors' code, as
  data (:data:`~flkit.papers.across.errata.ENTRIES`), each tied to the stored check or glued number of the page
  that shows it, and the small exact checks of the slips that no other page checks;
* :mod:`flkit.papers.across.equivalences`: the rules that the documents write under different names, each run
  in its documents' own forms and through the package's round loop on one seeded stream, and the map between
  the two parametrizations of Markov availability;
* :mod:`flkit.papers.across.fedau_cafed`: FedAU (000) as a fifth method beside CA-Fed and its baselines (001) on
  the same Markov availability streams, and the limit of FedAU's weights on a two-state chain;
* :mod:`flkit.papers.across.sensitivity`: four claims read again from their chapters' stored runs along the one
  parameter each hinges on (alpha = gamma, T and gamma^0, beta, eta);
* :mod:`flkit.papers.across.rare_users`: the rules for unknown participation statistics of documents 000 and 002
  (FedAU, known-rho weighting, MIFA) under document 003's random access model, beside FedAvg and Fed-CVaR-Avg, on
  003's MNIST split, and FedAU's weights against 1/rho_i there.

The chapter's items are the book's own (``flkit/papers/items/book.yaml``, :data:`ITEM`): scored by the scorecard
and listed apart, never counted among a document's items. Algorithms stay in the package (``flkit.aggregate``,
``flkit.participation``, ``flkit.sample``); this package holds the documents' forms written out, the comparisons
and the errata.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from flkit.papers.claims import Check

__all__ = ["DOC", "ITEM", "by_item"]

DOC = "book"      # scorecard.OWN: the book's own items

# the items of items/book.yaml, by a short name
ITEM = {
    # errata page: the slips no other page checks, and the errata list itself
    "norm": "Erratum 001: 'q_k = alpha_k / ||alpha||_p' gives p_k = alpha_k and chi^2_{alpha||p} = 0",
    "two_thirds": "Erratum 002: 'Reddi paper suggest we can use something like 1/(L eta^{2/3})'",
    "horizon": "Erratum 004: Table 1's rounds to the target accuracy lie within the rounds run (200, 500, 1000)",
    "powd": "Erratum 004: Table 1, FMNIST, pow-d (ideal): 79 rounds against random's 149, speed-up 1.8x",
    "cs100": "Erratum 004: Table 1, CIFAR-100, CS: 530 rounds against random's 549, speed-up 1.03x",
    "clusters": ("Erratum 004: sampling the clusters uniformly 'reduces to the conventional clustered sampling "
                 "strategy'"),
    "errata": "Errata: every entry rests on a stored check that shows the slip",
    # equivalences page
    "is": ("Same rule: FedAvg with importance sampling (002) = known participation statistics (000) = "
           "unnormalized aggregation with q = alpha/pi (001)"),
    "varp": "Same rule: U-MIFA with SAGA memory (002) = FedVarp (000), with p = |S_t|/N",
    "mifa": "Same rule: MIFA (000) = MIFA (002)",
    "markov": "Same chain: CA-Fed's Markov availability (pi, lambda) (001) = FedAU's Markov participation (x, p) (000)",
    # FedAU beside CA-Fed on the same Markov streams
    "fedau_omega": ("FedAU's weight on a Markov chain converges to 1/pi without cutoff, to 1/(pi (1 + b a^(K-1) / "
                    "(1 - a^K))) with cutoff K"),
    "fedau_vs_oracle": ("Under CA-Fed's Markov availability FedAU, estimating pi online, is at least as good as "
                        "Unbiased, which knows pi"),
    "cafed_vs_fedau": ("CA-Fed beats FedAU: higher time-average accuracy, lower second-half standard deviation, lower "
                       "target objective"),
    "fedau_bias": "FedAU's aggregation weights stay closer to the target weights than CA-Fed's",
    # where a claim hinges on one parameter (sensitivity page)
    "cvar_alpha": "Fed-CVaR-Avg is above FedAvg on the rare classes and overall (003, Figs. 3-4) at every tested alpha = gamma",
    "hics_T": ("HiCS-FL performs similarly to CS in FMNIST setting (3) (004, Sec. 4.1) at every tested temperature T "
               "and gamma^0"),
    "mifa_beta": "Momentum lowers the final gap of MIFAm, U-MIFAm and U-MIFAm with SAGA memory (002) at every tested beta",
    "fedau_eta": ("FedAU stays ahead of average participating and average all (000, main table) at every tested server "
                  "step eta"),
    # rare users under document 003's random access model
    "omega": ("Under document 003's RAM, FedAU's interval weights estimate 1/rho_i (no cutoff) and "
              "(1 - (1 - rho_i)^K)/rho_i (cutoff K)"),
    "rare_lift": ("Under document 003's RAM (MNIST, the split of Figs. 3-4), weighting by 1/rho_i, known or estimated "
                  "by FedAU (K = inf), lifts the rare classes above FedAvg"),
    "rare_vs_cvar": ("Under document 003's RAM (MNIST, the split of Figs. 3-4), weighting by 1/rho_i, known or "
                     "estimated by FedAU (K = inf), lifts the rare classes above Fed-CVaR-Avg (alpha = gamma = 0.3)"),
    "overall": ("Under document 003's RAM (MNIST, the split of Figs. 3-4), weighting by 1/rho_i, known or estimated "
                "by FedAU (K = inf), keeps FedAvg's overall accuracy (within 1 point)"),
}


def by_item(pairs: Iterable[tuple[str, Check]] | Mapping[str, Iterable[Check]]) -> dict[str, list[Check]]:
    """{item id: [checks]} for ``scorecard.record("book", ...)`` from (short name, check) pairs (or a mapping
    short name -> checks), in the order given; a short name that is not in :data:`ITEM` raises KeyError."""
    items = pairs.items() if isinstance(pairs, Mapping) else [(k, [c]) for k, c in pairs]
    out: dict[str, list[Check]] = {}
    for key, checks in items:
        out.setdefault(ITEM[key], []).extend(checks)
    return out
