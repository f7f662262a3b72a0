"""The chapter's items and how each page's checks map onto them, for the scorecard.

The chapter's items are the book's own (``flkit/papers/items/book.yaml``, document id :data:`DOC`): scored by the
scorecard and listed apart, never counted among a document's items. Each page builds its checks as (short name,
:class:`~flkit.papers.claims.Check`) pairs; :data:`ITEM` maps every short name to the item it tests,
:data:`PAGES` lists the short names each page checks (its headline first), and :func:`by_item` files a page's
checks under their items for ``scorecard.record("book", ...)``.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from flkit.papers.across.common import DOC
from flkit.papers.claims import Check

__all__ = ["DOC", "ITEM", "PAGES", "by_item"]

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
    "cvar_alpha": "Fed-CVaR-Avg is above FedAvg on the rare classes and overall (003, Figs. 3-4) at every tested "
        "alpha = gamma",
    "hics_T": ("HiCS-FL performs similarly to CS in FMNIST setting (3) (004, Sec. 4.1) at every tested temperature T "
               "and gamma^0"),
    "mifa_beta": "Momentum lowers the final gap of MIFAm, U-MIFAm and U-MIFAm with SAGA memory (002) at every tested "
        "beta",
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

# page -> the short names of the items its checks go under; the first is the headline of its verdict box
PAGES = {
    "equivalences": ("is", "varp", "mifa", "markov"),
    "errata": ("errata", "norm", "two_thirds", "horizon", "powd", "cs100", "clusters"),
    "fedau_cafed": ("fedau_vs_oracle", "fedau_omega", "cafed_vs_fedau", "fedau_bias"),
    "rare_users": ("rare_lift", "omega", "rare_vs_cvar", "overall"),
    "sensitivity": ("cvar_alpha", "hics_T", "mifa_beta", "fedau_eta"),
}


def by_item(pairs: Iterable[tuple[str, Check]] | Mapping[str, Iterable[Check]], page: str | None = None
            ) -> dict[str, list[Check]]:
    """{item id: [checks]} for ``scorecard.record("book", ...)`` from (short name, check) pairs (or a mapping
    short name -> checks), in the order given; a short name that is not in :data:`ITEM` (or, with `page`, not
    one of that page's :data:`PAGES`) raises KeyError."""
    if page is not None and page not in PAGES:
        raise KeyError(f"unknown page {page!r}; the chapter's pages are {sorted(PAGES)}")
    items = pairs.items() if isinstance(pairs, Mapping) else [(k, [c]) for k, c in pairs]
    out: dict[str, list[Check]] = {}
    for key, checks in items:
        if page is not None and key not in PAGES[page]:
            raise KeyError(f"{key!r} is not an item of page {page!r} ({', '.join(PAGES[page])})")
        out.setdefault(ITEM[key], []).extend(checks)
    return out
