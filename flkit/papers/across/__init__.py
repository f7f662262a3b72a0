"""Chapter code of "Across the documents" (what the book states about the five documents together), in the
chapters' template: `common` (what the pages share: the book's own items, the results stores, the page's clock),
`items` (the book's own items and how each page's checks map onto them) and one module per page:

* :mod:`~flkit.papers.across.errata`: every slip the book demonstrates in a document or in its authors' code, as
  data, each tied to the stored check or glued number of the page that shows it, and the small exact checks of
  the slips that no other page checks;
* :mod:`~flkit.papers.across.equivalences`: the rules that the documents write under different names, each run
  in its documents' own forms and through the package's round loop on one seeded stream, and the map between
  the two parametrizations of Markov availability;
* :mod:`~flkit.papers.across.fedau_cafed`: FedAU (000) as a fifth method beside CA-Fed and its baselines (001) on
  the same Markov availability streams, and the limit of FedAU's weights on a two-state chain;
* :mod:`~flkit.papers.across.sensitivity`: four claims read again from their chapters' stored runs along the one
  parameter each hinges on (alpha = gamma, T and gamma^0, beta, eta);
* :mod:`~flkit.papers.across.rare_users`: the rules for unknown participation statistics of documents 000 and 002
  (FedAU, known-rho weighting, MIFA) under document 003's random access model, beside FedAvg and Fed-CVaR-Avg, on
  003's MNIST split, and FedAU's weights against 1/rho_i there.

The chapter's items are scored by the scorecard and listed apart, never counted among a document's items.
Algorithms stay in the package (``flkit.aggregate``, ``flkit.participation``, ``flkit.sample``); this package holds
the documents' forms written out, the comparisons and the errata.
"""
