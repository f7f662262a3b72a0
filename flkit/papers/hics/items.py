"""Which item of document 004 each check of the HiCS-FL pages tests (for `flkit.papers.scorecard.record`).

The pages build their checks as before (`claims.Check`, named by `what`); :func:`by_item` files each under the
item of ``flkit/papers/items/004.yaml`` it tests, by the first rule of the page whose prefix starts the check's
`what`. A check that no rule files raises, so that a page cannot record a check under no item or drop one
silently. Checks that the chapter's modules build already filed (Table 1's rounds and speed-ups,
:func:`flkit.papers.hics.fmnist.table1_checks`; its cost columns, :func:`flkit.papers.hics.costs.cost_checks`;
the setting-(3) diagnosis, :func:`diagnosis`) join the page's by :func:`merge`.

Filed by our judgement:
* entropy page: the "summed per-step form" of Eq. 6 is our reading of Eq. 5 (steps summed); it is filed with
  Eq. (6), whose scale it tests. The closeness checks of Fig. 9 are filed under their panel and under appendix
  6.11's claim of closeness (:data:`CLOSE_ITEM`): a figure whose estimates rank the clients but sit far from the
  diagonal is not reproduced by the ranking alone.
* fmnist page: the rounds to the target are Fig. 2's claim of fastest convergence; the setting-(3) checks test
  the claim of Sec. 4.1 and Fig. 4(a), which it reads.
* theory page: Figs. 11-12 with Fashion-MNIST as a stand-in for CIFAR-10, Fig. 6(a) and appendix 6.2's reading
  of it with logistic regression as a stand-in for the CNN.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from flkit.papers.claims import Check
from flkit.papers.hics.common import DOC, DOC_NAMES, TABLE1_COSTS

__all__ = ["DOC", "PRIVACY", "PARTITION", "CLOSE_ITEM", "COSINE_ITEM", "RULES", "ALSO", "DIAGNOSIS", "COSTS",
           "by_item", "table1", "diagnosis", "merge"]

PRIVACY = "Claim (appendix 6.5): the server cannot infer the clients' label distributions from the bias updates"
PARTITION = ("Claim (appendix 6.10): client k gets X_i^(k) N_i / sum_j X_i^(j) of the N_i samples of label i, "
             "each sample once")
CLOSE_ITEM = "Claim (appendix 6.11): the estimated entropy is close to the true entropy (Figs. 9-10)"
COSINE_ITEM = "Claim (Sec. 3.3): cosine similarity cannot distinguish balanced from imbalanced clients"
_S35 = "Claim (Sec. 3.5): "
_S41 = "Claim (Sec. 4.1): on FMNIST "

# page -> [(a prefix of the check's `what`, the item it tests)], first match wins
RULES: dict[str, list[tuple[str, str]]] = {
    "entropy": [
        ("Fig. 7:", "Fig. 7"), ("Fig. 8:", "Fig. 8"), ("FMNIST splits", PARTITION), ("Eq. 4:", "Eq. (4)"),
        ("Eq. 22", "Eq. (22)"), ("sum_i E_i = 1 at initialisation", "Claim (Sec. 3.2.1): at initialisation E_i = 1/C"),
        ("Eq. 6", "Eq. (6)"), ("summed per-step form", "Eq. (6)"), ("direction:", "Eq. (6)"),
        ("closeness, list (a):", "Fig. 9(a)"), ("closeness, list (b):", "Fig. 9(b)"),
        ("list (a):", "Fig. 9(a)"), ("list (b):", "Fig. 9(b)"), ("document: the server cannot infer", PRIVACY),
        ("Sec. 3.3:", COSINE_ITEM)],
    "fmnist": [
        ("setting (1): HiCS-FL reaches", "Fig. 2"), ("setting (2): HiCS-FL reaches", "Fig. 2"),
        ("setting (3): HiCS-FL reaches", "Fig. 2"),
        ("setting (1): HiCS-FL's training loss fluctuates", _S41 + "HiCS-FL has the least amount of variance"),
        ("setting (2): HiCS-FL's training loss fluctuates", _S41 + "HiCS-FL has the least amount of variance"),
        ("setting (3): HiCS-FL's training loss fluctuates", _S41 + "HiCS-FL has the least amount of variance"),
        ("HiCS-FL's speed-up over random larger in setting (1)",
         _S41 + "the acceleration is particularly significant in setting (1)")],
    "theory": [
        ("Theorem 1 (Eq. 8)", "Theorem 1"), ("Theorem 1 (Eq. 50)", "Eq. (50)"), ("Theorem 2,", "Theorem 2"),
        ("Lemma 2", "Lemma 2"),
        ("document: HiCS lowers the sampling term", _S35 + "only the sampling term of Theorem 2 depends on the "
         "sampler, and HiCS-FL makes it smaller than random sampling"),
        ("document: hence HiCS converges faster", _S35 + "hence HiCS-FL converges faster than random sampling when "
         "clients are imbalanced"),
        ("document: as gamma -> 0", _S35 + "as gamma^t decreases, H_Pi approaches H_M (random sampling's)"),
        ("document: HiCS leads to omega", _S35 + "HiCS-FL leads to omega_k^t = p_k exp(gamma^t H_hat_k) / sum_j p_j "
         "exp(gamma^t H_hat_j)"),
        ("Fig. 11:", "Fig. 11"), ("Fig. 12:", "Fig. 12"), ("Eq. 104 vs 105", "Eq. (104)"), ("Eq. 105:", "Eq. (105)"),
        ("Eq. 106:", "Eq. (106)"), ("Fig. 6(a):", "Fig. 6(a)"), ("Assumption 1:", "Assumption 1"),
        ("appendix 6.2:", "Claim (appendix 6.2): the local-global gradient difference follows the pattern of "
         "Assumption 1")],
}
# page -> [(prefix, item)]: every check whose `what` starts with the prefix is also filed under the item
ALSO: dict[str, list[tuple[str, str]]] = {"entropy": [("closeness, ", CLOSE_ITEM)]}

# the setting-(3) diagnosis of the fmnist page (flkit.papers.hics.diagnosis)
DIAGNOSIS = {"s3": "Claim (Sec. 4.1): on FMNIST setting (3) HiCS-FL performs similarly to CS with a smooth loss "
                   "(Fig. 4(a))",
             "fig4a": "Fig. 4(a)", "E": "Claim (Sec. 3.2.1): E_i decreases as training proceeds",
             "delta": "Claim (Sec. 3.2.2): delta decreases to 0 during training"}
# Table 1's cost columns: (method, "comp" or "comm") -> item (flkit.papers.hics.costs.cost_checks)
COSTS = {(m, col): f"Table 1: extra {col}., {DOC_NAMES[m]}" for m in TABLE1_COSTS for col in ("comp", "comm")}


def by_item(page: str, checks: Iterable[Check]) -> dict[str, list[Check]]:
    """{item id: [checks]} of one HiCS-FL page (`page` in :data:`RULES`), every check filed by the page's rules
    (the first prefix that starts its `what`), then under the items of :data:`ALSO`."""
    if page not in RULES:
        raise ValueError(f"page {page!r} is not a HiCS-FL page; choose one of {sorted(RULES)}")
    checks = list(checks)
    out: dict[str, list[Check]] = {}
    for c in checks:
        item = next((it for prefix, it in RULES[page] if c.what.startswith(prefix)), None)
        if item is None:
            raise ValueError(f"check {c.what!r} names no item of document {DOC}; prefixes known: "
                             f"{[p for p, _ in RULES[page]]}")
        out.setdefault(item, []).append(c)
    for prefix, item in ALSO.get(page, []):
        also = [c for c in checks if c.what.startswith(prefix)]
        if also:
            out[item] = also
    return out


def table1(column: str, method: str) -> str:
    """The item of Table 1's FMNIST ``column`` ("rounds to 0.75" or "speed-up") for ``method`` (a key of
    :data:`~flkit.papers.hics.common.DOC_NAMES`)."""
    if column not in ("rounds to 0.75", "speed-up"):
        raise ValueError(f"column must be 'rounds to 0.75' or 'speed-up', got {column!r}")
    return f"Table 1: FMNIST, {column}, {DOC_NAMES[method]}"


def diagnosis(s3: list, ed: list) -> dict[str, list[Check]]:
    r"""{item: checks} of the setting-(3) checks: against CS
    (:func:`flkit.papers.hics.diagnosis.similar_to_cs_checks`, the claim of Sec. 4.1 and Fig. 4(a), which it reads)
    and :math:`\mathcal E_i`, :math:`\delta` (:func:`flkit.papers.hics.diagnosis.e_delta_checks`, in that order)."""
    out = {}
    if s3:
        out[DIAGNOSIS["s3"]] = list(s3)
        out[DIAGNOSIS["fig4a"]] = list(s3)
    if ed:
        out[DIAGNOSIS["E"]] = [ed[0]]
        out[DIAGNOSIS["delta"]] = [ed[1]]
    return out


def merge(*filed: Mapping[str, list[Check]]) -> dict[str, list[Check]]:
    """One {item: checks} of several, in order: an item's checks are those of every part that files it."""
    out: dict[str, list[Check]] = {}
    for part in filed:
        for item, cs in part.items():
            out.setdefault(item, []).extend(cs)
    return out
