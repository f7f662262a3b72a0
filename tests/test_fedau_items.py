"""Document 000's catalogue and the FedAU pages' filing of their checks (flkit.papers.fedau.items)."""
from __future__ import annotations

import pytest

from flkit import owed
from flkit.papers import claims, scorecard
from flkit.papers.fedau import items, table

ITEMS = {it.id: it for it in scorecard.items("000")}


def _check(what: str) -> claims.Check:
    return claims.holds(what, True, "test")


def test_every_rule_names_a_checked_item():
    # an item is shown on one page (its `page`); another page may add checks of it (the weights page checks
    # the cutoff geometric law of the theory page's item)
    for page, rules in items.RULES.items():
        for _, item in rules:
            assert item in ITEMS, item
            assert ITEMS[item].status == "checked", item


def test_owed_ids_of_checked_items_are_in_the_ledger():
    ledger = {o.id for o in owed.ITEMS}
    assert all(it.owed in ledger for it in ITEMS.values() if it.owed)


def test_every_checked_item_is_reachable_from_its_page():
    filed = {(f"fedau/{p}", it) for p, rules in items.RULES.items() for _, it in rules}
    for it in ITEMS.values():
        if it.status == "checked":
            assert (it.page, it.id) in filed, it.id


def test_table_cells_one_per_number_of_the_document_and_owed():
    cells = [it for it in ITEMS.values() if it.kind == "table cell"]
    assert len(cells) == len(table.REFERENCE) == 168
    ledger = {o.id for o in owed.ITEMS}
    for it in cells:
        assert it.status == "not executable" and it.missing and it.value is None
        assert it.owed == "fedau-table-" + {"SVHN": "svhn", "CIFAR-10": "cifar10", "CIFAR-100": "cifar100",
                                            "CINIC-10": "cinic10"}[it.id.split(", ")[0].removeprefix("Table: ")]
        assert it.owed in ledger


@pytest.mark.parametrize("page, what, item", [
    ("theory", "Thm 1: bias fraction of omega=1/p, eta=0.1 (T = 8000) = prediction", items.OMEGA),
    ("theory", "Thm 1: bias fraction of omega=1, eta=1 (T = 8000) = prediction", items.OMEGA),
    ("theory", "Thm 1: bias fraction of FedAU, K = 50 (T = 8000) = prediction", items.THM1),
    ("theory", "Thm 3: measured term ≤ averaged bound (iv), every (K, T)", items.THM3),
    ("theory", "Thm 3 proof, line (ii) holds in every cell with t < K", items.THM3_PROOF),
    ("weights", "bernoulli: simulated rate - p_n, mean over clients", items.STATIONARY),
    ("weights", "markov, K = 50: omega_T at p_n = 0.02 vs predicted limit", items.CUTOFF_BIAS),
    ("weights", "bernoulli, K = inf: omega_T at p_n = 0.02 vs predicted limit", items.ESTIMATE),
    ("weights", "cyclic: omega_T = exact finite-horizon closed form (max rel. difference)", items.ALG2),
    ("table", "Bernoulli: FedAU (K = inf) >= Average participating", items.T_PART),
    ("table", "cyclic (L = 100): FedAU (K = inf) >= Average all", items.T_ALL),
    ("table", "cyclic: FedAU (K = inf) >= FedVarp", items.T_MEMORY_BEHIND),
])
def test_by_item_files_each_check_under_its_item(page, what, item):
    assert items.by_item(page, [_check(what)]) == {item: [_check(what)]}


def test_by_item_refuses_an_unfiled_check_and_an_unknown_page():
    with pytest.raises(ValueError, match="no item of document 000"):
        items.by_item("table", [_check("something else")])
    with pytest.raises(ValueError, match="not a FedAU page"):
        items.by_item("mifa", [])
