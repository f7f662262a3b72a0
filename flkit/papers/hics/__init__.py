"""HiCS-FL chapter (document 004: Chen & Vikalo, "Accelerating Non-IID Federated Learning via
Heterogeneity-Guided Client Sampling"). The sampler itself is :class:`flkit.sample.HiCS`; the modules here
hold the pages' settings, the document's formulas that are not an algorithm, and figure helpers.

* :mod:`flkit.papers.hics.common` - what the pages share: the document's settings and printed numbers, the
  partitions, the label entropies, the smoothing and the training task of the comparisons.
* :mod:`flkit.papers.hics.items` - which item of the document each check of the pages tests.
* :mod:`flkit.papers.hics.entropy` - page "data and entropy": the partitions (Figs. 7-8), the output-layer
  bias update (Eqs. 4-6, 22), the entropy estimate (Eq. 7, Fig. 9) and the privacy remark (appendix 6.5).
* :mod:`flkit.papers.hics.fmnist` - page "training comparison on FMNIST": the five samplers (Fig. 2, Figs.
  4(a), 13, 14, Table 1), with the CIFAR profiles; its pieces :mod:`~flkit.papers.hics.diagnosis` (HiCS-FL in
  setting (3)) and :mod:`~flkit.papers.hics.costs` (Table 1's cost columns).
* :mod:`flkit.papers.hics.theory` - page "theory": Theorem 1's entropy-gap bound on real clients (as stated
  and as its proof ends), Theorem 2 and Lemma 2 on quadratics with known constants, and the SGD-vs-Adam
  sign argument of Figs. 11-12 (Fashion-MNIST stand-in); its piece :mod:`~flkit.papers.hics.dissimilarity`
  (Assumption 1 and Fig. 6(a)).
"""
