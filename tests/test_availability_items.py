"""The availability chapter's map from page checks to the items of document 001, and its Check builders."""
import math

import numpy as np
import pandas as pd
import pytest

from flkit.papers import scorecard
from flkit.papers.availability import cafed as C
from flkit.papers.availability import items as I
from flkit.papers.claims import Check


def test_every_key_names_an_item_of_the_yaml_on_its_own_page():
    known = {it.id: it for it in scorecard.items("001")}
    assert set(I.ITEM.values()) <= set(known)
    for page, keys in I.KEYS.items():
        for key in keys:
            it = known[I.item_of(page, key)]
            assert it.status == "checked", (page, key)
            assert it.page == f"availability/{page}", (page, key, it.page)


def test_every_checked_item_is_tested_by_some_key():
    targeted = {I.item_of(p, k) for p, keys in I.KEYS.items() for k in keys}
    checked = {it.id for it in scorecard.items("001") if it.status == "checked"}
    assert checked == targeted


def test_beyond_the_notes_items_say_so():
    for it in scorecard.items("001"):
        if "beyond the notes" in it.id.lower() or "README" in it.id:
            assert "beyond the notes" in it.where


def test_check_keeps_the_criterion_and_the_numbers():
    c = I.check("weights", "unbiased", "bias", True, ours=1e-31)
    assert c.verdict == "agrees" and c.ours == 1e-31 and c.rule == I.KEYS["weights"]["unbiased"][1]
    assert math.isnan(c.margin)
    d = I.check("cafed", "notes' p", "share", False, ours=0.5, reference=0.4, spread=0.01)
    assert d.verdict == "differs" and (d.ours, d.reference, d.spread) == (0.5, 0.4, 0.01)
    s = I.check("sampling", "the notes' 30K", "30K", True, "28,000 within 10% of 30K")
    assert s.rule == "28,000 within 10% of 30K"


def test_check_rejects_unknown_keys_and_missing_rules():
    with pytest.raises(ValueError, match="no check 'nope'"):
        I.check("weights", "nope", "x", True)
    with pytest.raises(ValueError, match="not one of"):
        I.check("fedau", "unbiased", "x", True)
    with pytest.raises(ValueError, match="pass `rule`"):
        I.check("sampling", "the notes' 30K", "x", True)


def test_by_item_groups_in_order_and_rejects_non_checks():
    a, b = I.check("markov", "thm1_random", "a", True), I.check("markov", "thm1_tight", "b", False)
    out = I.by_item("markov", [("thm1_random", a), ("thm1_tight", b), ("thm2", a)])
    assert out == {"Theorem 1": [a, b], "Theorem 2": [a]}
    with pytest.raises(TypeError, match="expected a claims.Check"):
        I.by_item("markov", [("thm2", (True, "text"))])


def _summary(cafed, others):
    rows = [dict(method="cafed", seed=s, time_avg=v, std_2nd_half=v) for s, v in enumerate(cafed)]
    for m, vals in others.items():
        rows += [dict(method=m, seed=s, time_avg=v, std_2nd_half=v) for s, v in enumerate(vals)]
    return pd.DataFrame(rows)


def test_readme_check_pairs_by_seed_against_the_best_other_method():
    summ = _summary([10.0, 11.0, 12.0], {"adafed": [9.0, 9.5, 10.0], "unbiased": [5.0, 5.0, 5.0]})
    c = C.readme_check(summ, "time_avg", "synthetic")
    d = np.array([1.0, 1.5, 2.0])
    assert isinstance(c, Check) and "AdaFed" in c.what
    assert c.verdict == "confirmed" and c.ours == pytest.approx(d.mean(), abs=1e-12)
    assert c.spread == pytest.approx(d.std(ddof=1) / np.sqrt(3), abs=1e-12)
    # lower is better for the standard deviation: the best other is Unbiased (5), CA-Fed is above it
    s = C.readme_check(summ, "std_2nd_half", "synthetic")
    assert "Unbiased" in s.what and s.verdict == "contradicted" and s.ours == pytest.approx(-6.0, abs=1e-12)
    with pytest.raises(ValueError, match="time_avg"):
        C.readme_check(summ, "max", "synthetic")
