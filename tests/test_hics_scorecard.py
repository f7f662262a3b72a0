"""The HiCS-FL chapter's scorecard filing (document 004): every check a page makes lands under an item of
flkit/papers/items/004.yaml, Table 1's FMNIST checks carry the document's numbers."""
import numpy as np
import pandas as pd
import pytest

from flkit.papers import claims, scorecard
from flkit.papers.hics import common, entropy, fmnist, items

ITEMS = {it.id: it for it in scorecard.items("004")}


def _check(what):
    return claims.holds(what, True, "test")


@pytest.mark.parametrize("page", sorted(items.RULES))
def test_rules_name_checked_items_of_their_page(page):
    for _, item in items.RULES[page] + items.ALSO.get(page, []):
        assert item in ITEMS and ITEMS[item].status == "checked" and ITEMS[item].page == f"hics/{page}", item


def test_every_page_has_rules_and_a_notebook():
    from pathlib import Path
    pages = {p.stem for p in (Path(__file__).resolve().parents[1] / "notebooks" / "hics").glob("*.ipynb")}
    assert set(items.RULES) == pages


def test_by_item_files_by_first_prefix_and_rejects_unknown():
    out = items.by_item("entropy", [_check("Eq. 4: x"), _check("list (b): y"), _check("summed per-step form, z")])
    assert {k: [c.what for c in v] for k, v in out.items()} == {
        "Eq. (4)": ["Eq. 4: x"], "Fig. 9(b)": ["list (b): y"], "Eq. (6)": ["summed per-step form, z"]}
    with pytest.raises(ValueError, match="names no item"):
        items.by_item("entropy", [_check("something new")])
    with pytest.raises(ValueError, match="not a HiCS-FL page"):
        items.by_item("experiments", [])
    out = items.by_item("theory", [_check("Theorem 1 (Eq. 50), pair u=1, k=2: mean gap >= bound"),
                                   _check("Theorem 1 (Eq. 8), pair u=1, k=2: mean gap >= bound")])
    assert list(out) == ["Eq. (50)", "Theorem 1"]
    # a check one page files is unknown to another
    with pytest.raises(ValueError, match="names no item"):
        items.by_item("fmnist", [_check("Eq. 4: x")])


def test_closeness_is_filed_twice_and_last():
    close, rank = _check("closeness, list (a): x"), _check("list (a): Spearman")
    out = items.by_item("entropy", [close, rank, _check("Eq. 4: y")])
    assert list(out) == ["Fig. 9(a)", "Eq. (4)", items.CLOSE_ITEM]
    assert out["Fig. 9(a)"] == [close, rank] and out[items.CLOSE_ITEM] == [close]
    assert items.CLOSE_ITEM not in items.by_item("entropy", [rank])


def test_assignment_error_exact():
    labels = np.array([0, 0, 1, 1, 1])
    parts = [common.make_partition(np.repeat(np.arange(10), 50), 10, (0.1, 1.0, 10.0, 0.5, 0.01), s) for s in range(2)]
    assert entropy.assignment_error(parts, np.repeat(np.arange(10), 50)) == 0
    assert entropy.assignment_error(parts, np.repeat(np.arange(10), [50] * 9 + [53])) == 3
    with pytest.raises(ValueError, match="parts is empty"):
        entropy.assignment_error([], labels)


def _acc_table(hits: dict, rounds: int = 40):
    """A test-accuracy table where method m's seed s jumps from 0.5 to 0.9 at round hits[m][s] (None: never)."""
    rows = []
    for m, per_seed in hits.items():
        for s, h in enumerate(per_seed):
            for r in range(1, rounds + 1):
                v = 0.9 if h is not None and r >= h else 0.5
                rows.append(dict(group="main", setting="(2)", method=m, seed=s, round=r, metric="test_acc", value=v))
    return pd.DataFrame(rows)


def test_table1_checks_against_the_document():
    hits = {"random": [30, 30], "HiCS-FL": [12, 12], "CS": [None, None]}
    t = _acc_table(hits)
    ours = {m: [common.rounds_to_target(g.sort_values("round").value.to_numpy(), common.DOC_TARGET, np.arange(1, 41))
                for _, g in t[t.method == m].groupby("seed")] for m in hits}
    out = fmnist.table1_checks(t)
    assert set(out) == {f"Table 1: FMNIST, {w}, {n}" for w in ("rounds to 0.75", "speed-up")
                        for n in ("Random", "HiCS-FL", "CS")}
    c = out["Table 1: FMNIST, rounds to 0.75, HiCS-FL"][0]
    assert c.reference == 60 and c.ours == pytest.approx(np.mean(ours["HiCS-FL"]), abs=1e-12)
    sp = out["Table 1: FMNIST, speed-up, HiCS-FL"][0]
    assert sp.reference == 2.5 and sp.ours == pytest.approx(ours["random"][0] / ours["HiCS-FL"][0], abs=1e-12)
    assert out["Table 1: FMNIST, speed-up, Random"][0].verdict == "agrees"
    assert out["Table 1: FMNIST, rounds to 0.75, CS"][0].verdict == "not testable at this scale"
    for k in out:
        assert k in ITEMS and ITEMS[k].owed == "hics-fmnist-paper"


def test_fmnist_page_merges_claims_table1_diagnosis_and_costs():
    cs = [_check("setting (1): HiCS-FL reaches the target no later than CS (rounds)"),
          _check("HiCS-FL's speed-up over random larger in setting (1) than in (3)")]
    t1 = {items.table1("speed-up", "CS"): [_check("t")]}
    s3, ed = [_check("s3 a"), _check("s3 b")], [_check("E"), _check("delta")]
    cost = {items.COSTS[("CS", "comp")]: [_check("c")], "Fig. 2": [_check("extra")]}
    out = items.merge(items.by_item("fmnist", cs), t1, items.diagnosis(s3, ed), cost)
    assert list(out) == ["Fig. 2", items.RULES["fmnist"][-1][1], "Table 1: FMNIST, speed-up, CS",
                         items.DIAGNOSIS["s3"], items.DIAGNOSIS["fig4a"], items.DIAGNOSIS["E"],
                         items.DIAGNOSIS["delta"],
                         "Table 1: extra comp., CS"]
    assert [c.what for c in out["Fig. 2"]] == [cs[0].what, "extra"]       # an item filed twice keeps both, in order
    assert out[items.DIAGNOSIS["s3"]] == s3 and out[items.DIAGNOSIS["E"]] == [ed[0]]
    assert len(cs) == 2 and len(t1[items.table1("speed-up", "CS")]) == 1   # the parts are not changed
    with pytest.raises(ValueError, match="column must be"):
        items.table1("rounds", "CS")


def test_table1_a_method_that_never_reaches_the_target_differs_when_the_runs_are_long_enough():
    """pow-d never reaches 0.75 in 100 rounds (document: 79) while random does: rounds and speed-up differ, with
    the bounds as "ours"; in 60 rounds (fewer than 79), or when random never reaches it either: not testable."""
    t = _acc_table({"random": [50, 70], "pow-d": [None, None]}, rounds=100)
    out = fmnist.table1_checks(t)
    r, sp = out["Table 1: FMNIST, rounds to 0.75, pow-d (ideal)"][0], out["Table 1: FMNIST, speed-up, pow-d (ideal)"][0]
    assert (r.verdict, r.ours, r.reference) == ("differs", 100.0, 79.0) and "within 100 rounds" in r.what
    base = fmnist.rounds_table(t, common.DOC_TARGET).set_index("method").loc["random", "rounds"]
    assert sp.verdict == "differs" and sp.ours == pytest.approx(base.max() / 100) and sp.reference == 1.8
    assert 0.5 < sp.ours < 0.75
    short = fmnist.table1_checks(_acc_table({"random": [50, 55], "pow-d": [None, None]}, rounds=60))
    assert short["Table 1: FMNIST, rounds to 0.75, pow-d (ideal)"][0].verdict == "not testable at this scale"
    # random's runs longer than CS's (random reaches 0.75 at ~290, CS never in 120): the speed-up bound 290/120
    # is above the document's 1.3 and does not decide it, while the rounds still differ
    slow = fmnist.table1_checks(pd.concat([_acc_table({"random": [290, 290]}, rounds=300),
                                           _acc_table({"CS": [None, None]}, rounds=120)]))
    assert slow["Table 1: FMNIST, rounds to 0.75, CS"][0].verdict == "differs"
    sp = slow["Table 1: FMNIST, speed-up, CS"][0]
    assert sp.verdict == "not testable at this scale" and sp.ours > 1.3
    neither = fmnist.table1_checks(_acc_table({"random": [None, None], "pow-d": [None, None]}, rounds=100))
    assert neither["Table 1: FMNIST, speed-up, pow-d (ideal)"][0].verdict == "not testable at this scale"
