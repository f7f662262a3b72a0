"""The chapter "Across the documents": the equivalences (every form of a rule on one seeded stream, a changed form
caught), the Markov map, the errata (every entry backed by stored evidence that shows its slip; evidence that does
not is rejected), the errata page's exact checks, and the book's own items in the scorecard."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from flkit import participation
from flkit.papers import claims, scorecard
from flkit.papers.across import equivalences as E
from flkit.papers.across import errata as R
from flkit.papers.across import fedau_cafed, rare_users, sensitivity
from flkit.papers.across.items import ITEM, PAGES, by_item

ROUNDS = 60


@pytest.fixture(scope="module")
def rows():
    return E.rule_rows(0, ROUNDS)


# --------------------------------------------------------------------------------------------- equivalences
@pytest.mark.parametrize("key", ["is", "varp", "mifa"])
def test_every_form_of_a_rule_gives_the_same_trajectory(rows, key):
    forms = rows[key]["forms"]
    assert len(forms) >= 3
    assert all(tr.shape == (ROUNDS + 1, E.SETTING["dim"]) and np.isfinite(tr).all() for tr in forms.values())
    assert E.max_diff(forms) <= E.TOL
    # the trajectories move: the comparison is not one of constants
    first = next(iter(forms.values()))
    assert np.abs(first[-1] - first[0]).max() > 0.1


@pytest.mark.parametrize("key", ["is", "varp", "mifa"])
def test_a_different_rule_is_told_apart(rows, key):
    ref = next(iter(rows[key]["forms"].values()))
    for label, tr in rows[key]["wrong"].items():
        assert E.max_diff({"ref": ref, "wrong": tr}) > E.WRONG_MIN, label


def test_changing_one_form_breaks_the_comparison(rows):
    """The written-out forms are independent code: a change in one of them (a server step off by 1e-6, one local
    step fewer, the weights of 'average all') is seen at the 1e-10 level."""
    s = E.stream(0, ROUNDS)
    g, tau = E.SETTING["local_lr"], E.SETTING["local_steps"]
    changed = {
        "is": E.algorithm1_000(s.A, s.b, s.bernoulli, 1 / s.p, s.w0, g, 1.0 + 1e-6, tau),
        "varp": E.fedvarp_000(s.A, s.b, s.uniform_k, s.w0, g, 1.0, tau - 1),
        "mifa": E.mifa_002(s.A, s.b, s.bernoulli, s.w0, g, tau - 1),
    }
    for key, tr in changed.items():
        forms = dict(rows[key]["forms"])
        assert E.max_diff(forms) <= E.TOL
        label = next(k for k in forms if k.startswith(("000", "002")))
        forms[label] = tr
        assert E.max_diff(forms) > E.TOL, key
    # average all (omega = 1) in Algorithm 1 is not importance sampling
    avg_all = E.algorithm1_000(s.A, s.b, s.bernoulli, np.ones(len(s.p)), s.w0, g, 1.0, tau)
    assert E.max_diff({"is": next(iter(rows["is"]["forms"].values())), "avg": avg_all}) > 1e-3


def test_max_diff_sees_a_non_finite_trajectory():
    a = np.zeros((3, 2))
    b = a.copy()
    b[2, 0] = np.inf
    assert E.max_diff({"a": a, "b": b}) == math.inf
    assert E.max_diff({"a": a, "b": a + 1e-12}) == pytest.approx(1e-12)


def test_saga_form_and_fedvarp_part_at_the_first_empty_round():
    cav = E.empty_round_caveat(0, ROUNDS)
    s = E.stream(0, ROUNDS)
    assert cav["first_empty"] == int(np.flatnonzero(~s.bernoulli.any(1))[0])
    assert cav["before"] <= E.TOL and cav["after"] > E.WRONG_MIN
    # with a participant in every round the two written-out forms agree throughout
    g, tau = E.SETTING["local_lr"], E.SETTING["local_steps"]
    assert E.max_diff({"saga": E.saga_002(s.A, s.b, s.uniform_k, s.w0, g, tau),
                       "varp": E.fedvarp_000(s.A, s.b, s.uniform_k, s.w0, g, 1.0, tau)}) <= E.TOL


def test_rules_table_and_checks():
    table, runs = E.rules_table([0, 1], ROUNDS)   # both streams have a round without any participant by then
    assert list(table["key"]) == ["is", "varp", "mifa"]
    assert table["same"].all() and table["told_apart"].all() and (table["max_abs_diff"] <= E.TOL).all()
    assert set(runs) == {0, 1}
    detail = E.forms_table(runs)
    assert (detail[detail["same_rule"]]["max_abs_diff_to_first_form"] <= E.TOL).all()
    assert (detail[~detail["same_rule"]]["max_abs_diff_to_first_form"] > E.WRONG_MIN).all()


# ------------------------------------------------------------------------------------------------- Markov
def test_markov_map_by_hand():
    pi, lam = E.to_cafed(0.1, 0.3)
    assert pi == pytest.approx(0.3) and lam == pytest.approx(2 / 3)
    x, p = E.to_fedau(0.5, -0.8)
    assert x == pytest.approx(0.9) and p == pytest.approx(0.5)
    # FedAU rescales where x (1/p - 1) > 1: the chain is CA-Fed's with the least feasible lambda
    pi, lam = E.to_cafed(0.5, 0.2)
    assert lam == pytest.approx(1 - 1 / (1 - 0.2))
    np.testing.assert_allclose(participation.transition_matrix(0.2, x=0.5),
                               participation.transition_matrix(0.2, lam=float(lam)), atol=1e-15)
    with pytest.raises(ValueError, match="feasible"):
        E.to_fedau(0.2, -0.5)          # below max(1 - 1/pi, 1 - 1/(1 - pi)) = -0.25
    with pytest.raises(ValueError):
        E.to_cafed(0.0, 0.3)


def test_markov_exact_both_ways():
    ex = E.markov_exact()
    cols = ["P_diff", "stationary_diff", "lam2_diff", "autocorr_diff"]
    assert (ex[cols].to_numpy() <= 1e-12).all()
    assert (ex.loc[~ex["rescaled"], "round_trip"] <= 1e-15).all()
    assert ex["rescaled"].any() and (~ex["rescaled"]).any()
    wrong = E.markov_exact(wrong=True)
    assert (wrong["P_diff"] > E.WRONG_MIN).all()


def test_markov_simulated_on_one_stream():
    sim = E.markov_simulated(chains=60, rounds=800)
    assert (sim["states_differing"] == 0).all()
    assert sim["z"].abs().max() <= 4.5
    wrong = E.markov_simulated(chains=60, rounds=800, wrong=True)
    assert (wrong.groupby(["p", "x"])["states_differing"].first() > 0).all()
    assert wrong["z"].abs().max() > 4


# ---------------------------------------------------------------------------------------------------- errata
def test_the_errata_list():
    assert len(R.ENTRIES) >= 20
    assert {e.doc for e in R.ENTRIES} == set(scorecard.DOCUMENTS)
    assert len({(e.doc, e.item) for e in R.ENTRIES}) == len(R.ENTRIES)
    for e in R.ENTRIES:
        assert e.says and e.shows and e.why and e.where, e.item
        assert (scorecard.BOOK / f"{e.page}.ipynb").is_file(), e.page
        assert any(v.expect == "fails" if isinstance(v, R.ByCheck) else (v.above, v.below) != (None, None)
                   for v in e.evidence), \
            f"{e.item}: no piece of evidence shows the document's statement failing"
    assert sum(e.changes for e in R.ENTRIES) >= 1 and sum(not e.changes for e in R.ENTRIES) >= 1


def test_the_chapter_index_counts_the_errata_as_listed():
    """The chapter index's summary sentence is typed: its counts must be the list's (slips per document, those
    in the authors' code, those that change a conclusion)."""
    import re
    text = (scorecard.BOOK / "across" / "index.md").read_text()
    words = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                        "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}
    number = lambda w: int(w) if w.isdigit() else (20 + words[w.split("-")[1]] if w.startswith("twenty-")  # noqa: E731
                                                   else words[w])
    m = re.search(r"\*\*([\w-]+) slips\*\*: (\d+) in 000, (\d+) in 001, (\d+) in 002, (\d+) in 003 and (\d+) in 004, "
                  r"(\w+) of them in the authors' code", text)
    assert m, "the errata sentence of across/index.md is not in the tested form"
    per_doc = [sum(e.doc == d for e in R.ENTRIES) for d in ("000", "001", "002", "003", "004")]
    assert number(m.group(1).lower()) == len(R.ENTRIES) and [int(g) for g in m.groups()[1:6]] == per_doc
    assert number(m.group(7).lower()) == sum(e.source == "authors' code" for e in R.ENTRIES)
    changes = re.search(r"(\w+) change a conclusion", text)
    assert changes and number(changes.group(1).lower()) == sum(e.changes for e in R.ENTRIES)


def test_every_erratum_rests_on_stored_evidence_that_shows_it():
    """Each entry's evidence is looked up in the committed executed pages (the scorecard's records and the
    numbers the pages glue): found, and showing the slip. A re-executed page that no longer shows a slip fails
    here, so an entry cannot outlive its evidence."""
    ev = R.evidence_table()
    missing = ev[~ev["found"]]
    assert missing.empty, missing[["entry", "item", "page", "key"]].to_string()
    wrong = ev[~ev["shows"]]
    assert wrong.empty, wrong[["entry", "item", "page", "key", "recorded"]].to_string()
    assert R.verify()["backed"].all()


def test_evidence_that_does_not_show_a_slip_is_rejected():
    e = R.ENTRIES[0]                                       # Theorem 3, line (ii)
    iv = next(v for v in e.evidence if v.key == "iv")      # line (iv) holds: the book's counter-statement
    cases = {
        "an agreeing check read as a failure": replace(iv, expect="fails"),
        "a check that does not exist": replace(iv, what="no such check"),
        "an item of another page": replace(iv, page="mifa/theory"),
    }
    for why, bad in cases.items():
        ev = R.evidence_table((replace(e, evidence=(bad,)),))
        assert not (ev["found"] & ev["shows"]).all(), why
    empty = next(v for x in R.ENTRIES for v in x.evidence if isinstance(v, R.ByGlue) and v.name == "empty_cyclic")
    assert R.evidence_table((replace(R.ENTRIES[3], evidence=(replace(empty, above=1e9),)),))["shows"].sum() == 0
    assert R.evidence_table((replace(R.ENTRIES[3], evidence=(replace(empty, name="nope"),)),))["found"].sum() == 0
    with pytest.raises(ValueError, match="no evidence"):
        replace(e, evidence=())
    with pytest.raises(ValueError, match="expect"):
        R.ByCheck("k", "fedau/theory", "x", "y", expect="maybe")


def test_the_errata_text_takes_the_recorded_values():
    s = R.summary()
    assert len(s) == len(R.ENTRIES)
    first = s.iloc[0]["shows"]
    ii = R.page_checks("fedau/theory")
    n = ii[ii["what"].str.contains("line (ii) holds in every cell with t < K", regex=False)]["ours"].iloc[0]
    assert f"{n:.0f}" in first
    md = R.markdown()
    for i, e in enumerate(R.ENTRIES, 1):
        assert f"**{i}. {e.item}**" in md


def test_the_errata_page_shows_every_entry():
    nb = json.loads((scorecard.BOOK / "across" / "errata.ipynb").read_text())
    text = "".join("".join(o.get("data", {}).get("text/markdown", ""))
                   for c in nb["cells"] for o in c.get("outputs", []))
    for i, e in enumerate(R.ENTRIES, 1):
        assert f"**{i}. {e.item}**" in text, f"book/across/errata is stale: re-execute it ({e.item})"


def test_the_slips_checked_on_the_errata_page_exactly():
    ns = R.norm_slip()
    assert ns["norm 1"]["chi2"] == Fraction(2, 3) and ns["norm inf"]["chi2"] == Fraction(2, 3)
    assert ns["norm 1"]["p"] == [Fraction(3, 10), Fraction(1, 10), Fraction(3, 5)]
    assert ns["norm 2"]["chi2"] == pytest.approx(2 / 3)
    assert ns["alpha/pi"]["chi2"] == 0
    tt = R.two_thirds()
    lit = tt[tt["reading"].str.startswith("literal")].set_index("L")
    assert lit.loc[10.0, "eta"] == pytest.approx(10 ** -0.6)
    assert lit.loc[10.0, "contraction"] == pytest.approx(10 ** 0.4 - 1)
    assert (lit.loc[lit.index > 2 ** 2.5, "contraction"] > 1).all()
    assert (lit.loc[lit.index < 2 ** 2.5, "contraction"] < 1).all()
    assert (tt.loc[~tt["reading"].str.startswith("literal"), "contraction"] < 1).all()
    h = R.horizon()
    assert set(map(tuple, h[h["beyond"]][["data", "method"]].to_numpy())) == {
        ("FMNIST", "DivFL"), ("CIFAR-10", "random"), ("CIFAR-10", "pow-d"), ("CIFAR-10", "CS"), ("CIFAR-10", "DivFL"),
        ("CIFAR-100", "DivFL")}
    sp = R.speedups()
    rounded = set(map(tuple, sp[~sp["rounded"]][["data", "method"]].to_numpy()))
    assert rounded == {("FMNIST", "pow-d"), ("CIFAR-100", "CS")}
    assert sp[~sp["rounded"]]["truncated"].all()
    cs = R.cluster_slots(draws=3000)
    assert cs["exact_paper"] == Fraction(10 ** 5, math.comb(50, 5)) and cs["exact_code"] == Fraction(120, 3125)
    for rule in ("paper", "code"):
        assert abs(cs[f"mc_{rule}"] - float(cs[f"exact_{rule}"])) <= 4 * cs[f"mc_{rule}_se"]


def test_the_errata_page_checks_state_the_documents_sentences():
    """Each own check of a slip differs (the document's sentence fails); each reading agrees; all file under
    items of book.yaml."""
    ck = R.checks(draws=2000)
    by = by_item(ck)
    ids = {it.id for it in scorecard.items(scorecard.OWN)}
    assert set(by) <= ids
    for key in ("norm", "two_thirds", "horizon", "powd", "cs100", "clusters"):
        assert any(c.failed for c in by[ITEM[key]]), key
    assert scorecard.page_verdicts(scorecard.OWN, by)[ITEM["norm"]] == "finding"


# ---------------------------------------------------------------------------------- the book's own items
def test_the_books_own_items_are_listed_apart():
    own = scorecard.items(scorecard.OWN)
    assert own and all(it.source == scorecard.OWN_SOURCE and it.page.startswith("across/") for it in own)
    assert {it.id for it in own} == set(ITEM.values())
    assert set(scorecard.items()) >= set(own)
    with pytest.raises(ValueError, match="book's own"):
        scorecard._check_item("001", dict(id="x", kind="claim", where="y", page="a/b", shown_as="z",
                                          source=scorecard.OWN_SOURCE))
    with pytest.raises(ValueError, match="book's own"):
        scorecard._check_item(scorecard.OWN, dict(id="x", kind="claim", where="y", page="a/b", shown_as="z"))
    t = pd.DataFrame(dict(document=["000", scorecard.OWN], verdict=["reproduced", "finding"],
                          scale=["document's setting"] * 2, still_to_run=["", ""], source=["", scorecard.OWN_SOURCE]))
    assert scorecard.counts(t).loc["000", "items"] == 1 and scorecard.counts(t)["items"].sum() == 1


def test_the_books_own_items_in_the_record():
    t = scorecard.table()
    mine = t[t["document"] == scorecard.OWN].set_index("item")
    assert set(mine.index) == set(ITEM.values())
    errata = {ITEM[k] for k in ("norm", "two_thirds", "horizon", "powd", "cs100", "clusters")}
    assert (mine.loc[sorted(errata), "verdict"] == "finding").all()
    h2h = {ITEM[k] for k in ("fedau_omega", "fedau_vs_oracle", "cafed_vs_fedau", "fedau_bias",   # measured comparisons:
                             "cvar_alpha", "hics_T", "mifa_beta", "fedau_eta",                # any verdict of the
                             "omega", "rare_lift", "rare_vs_cvar", "overall")}                # vocabulary
    assert (mine.drop(index=sorted(errata | h2h))["verdict"] == "reproduced").all()
    assert mine.loc[ITEM["fedau_omega"], "verdict"] == "reproduced"        # an exact limit, checked on long streams
    assert mine.loc[sorted(h2h), "verdict"].isin(scorecard.VERDICTS).all()
    assert not mine.loc[sorted(h2h), "verdict"].isin(["not attempted", "not executable here"]).any()
    text = scorecard.status_table(t)
    assert f"{len(mine)} items that the book states across the documents" in text
    # the documents' counts do not include them
    assert scorecard.counts(t)["items"].sum() == len(scorecard.own(t[t["document"] != scorecard.OWN]))


def test_each_page_lists_the_items_book_yaml_places_on_it():
    """items.PAGES agrees with book.yaml's `page` of every item (each item on one page), and each page's verdict
    box leads with the first of its items."""
    placed = {it.id: it.page for it in scorecard.items(scorecard.OWN)}
    listed = {ITEM[k]: f"across/{page}" for page, keys in PAGES.items() for k in keys}
    assert sum(len(keys) for keys in PAGES.values()) == len(listed) == len(ITEM)
    assert listed == placed
    for page, mod in dict(equivalences=E, errata=R, fedau_cafed=fedau_cafed, rare_users=rare_users,
                          sensitivity=sensitivity).items():
        assert mod.BOX["page"] == f"across/{page}" and mod.BOX["headline"] == ITEM[PAGES[page][0]], page


def test_by_item_refuses_a_check_of_another_page():
    c = claims.holds("x", True, "exact")
    assert by_item([("norm", c), ("norm", c)], "errata") == {ITEM["norm"]: [c, c]}
    assert by_item({"is": [c]}, "equivalences") == {ITEM["is"]: [c]}
    with pytest.raises(KeyError, match="not an item of page 'errata'"):
        by_item([("is", c)], "errata")
    with pytest.raises(KeyError, match="unknown page"):
        by_item([("is", c)], "nowhere")
    with pytest.raises(KeyError):
        by_item([("no such item", c)])


def test_the_errata_profile():
    assert R.profile("paper") == dict(draws=20_000, seeds=[0])
    assert R.profile("smoke", seeds=[3], draws=None) == dict(draws=2_000, seeds=[3])
    for bad, word in ((dict(draws=0), "draws"), (dict(seeds=[-1]), "seeds"), (dict(rounds=3), "unknown setting")):
        with pytest.raises(ValueError, match=word):
            R.profile("smoke", **bad)
    with pytest.raises(ValueError, match="smoke"):
        R.profile("huge")


def test_verdict_box_of_the_books_own():
    c = claims.holds("x", True, "exact")
    box = scorecard.verdict_box(scorecard.OWN, {ITEM["markov"]: [c]}, page="across/equivalences", tests="t")
    assert "of the book's own this page checks" in box and "**reproduced**" in box
    assert "Beyond the document" not in box
