"""The HiCS-FL chapter's scorecard filing (document 004): every check a page makes lands under an item of
flkit/papers/items/004.yaml, Table 1's FMNIST checks carry the document's numbers."""
import numpy as np
import pandas as pd
import pytest

from flkit.papers import claims, scorecard
from flkit.papers.hics import entropy as E, experiments as X, theory as TH
from flkit.partition import Partition

ITEMS = {it.id: it for it in scorecard.items("004")}


def _check(what):
    return claims.holds(what, True, "test")


@pytest.mark.parametrize("rules", [E.SCORECARD, TH.SCORECARD, X.SCORECARD])
def test_rules_name_checked_items(rules):
    for _, item in rules:
        assert item in ITEMS and ITEMS[item].status == "checked", item


def test_by_item_files_by_first_prefix_and_rejects_unknown():
    out = E.scorecard_checks([_check("Eq. 4: x"), _check("list (b): y"), _check("summed per-step form, z")])
    assert {k: [c.what for c in v] for k, v in out.items()} == {
        "Eq. (4)": ["Eq. 4: x"], "Fig. 9(b)": ["list (b): y"], "Eq. (6)": ["summed per-step form, z"]}
    with pytest.raises(ValueError, match="names no item"):
        E.scorecard_checks([_check("something new")])
    out = TH.scorecard_checks([_check("Theorem 1 (Eq. 50), pair u=1, k=2: mean gap >= bound"),
                               _check("Theorem 1 (Eq. 8), pair u=1, k=2: mean gap >= bound")])
    assert list(out) == ["Eq. (50)", "Theorem 1"]


def test_assignment_error_exact():
    labels = np.array([0, 0, 1, 1, 1])
    parts = [E.make_partition(np.repeat(np.arange(10), 50), 10, (0.1, 1.0, 10.0, 0.5, 0.01), s) for s in range(2)]
    assert E.assignment_error(parts, np.repeat(np.arange(10), 50)) == 0
    assert E.assignment_error(parts, np.repeat(np.arange(10), [50] * 9 + [53])) == 3
    with pytest.raises(ValueError, match="parts is empty"):
        E.assignment_error([], labels)


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
    ours = {m: [X.rounds_to_target(g.sort_values("round").value.to_numpy(), X.DOC_TARGET, np.arange(1, 41))
                for _, g in t[t.method == m].groupby("seed")] for m in hits}
    out = X.table1_checks(t)
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


def test_experiments_scorecard_merges_claims_and_table1():
    cs = [_check("setting (1): HiCS-FL reaches the target no later than CS (rounds)"),
          _check("HiCS-FL's speed-up over random larger in setting (1) than in (3)")]
    t1 = {"Table 1: FMNIST, speed-up, CS": [_check("t")]}
    out = X.scorecard_checks(cs, t1)
    assert [len(v) for v in out.values()] == [1, 1, 1] and "Fig. 2" in out
