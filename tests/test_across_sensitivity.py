"""Where a claim hinges on one parameter (flkit.papers.across.sensitivity): the pairing by seed, the run selection,
the readers against the chapters' own, the empty-store paths and the scale of each claim."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from flkit import results
from flkit.papers import claims, scorecard
from flkit.papers.across import sensitivity as SN
from flkit.papers.across.items import ITEM
from flkit.papers.cvar import common as ex
from flkit.papers.cvar import diagnosis

DOC_LR = ex.PAPER["mnist"]["lr_theta"]


def _cfg(**kw):
    c = dict(experiment="mnist", method="fed-cvar-avg", alpha=0.3, gamma=0.3, pattern_frac=0.9, lr_theta=DOC_LR,
             rounds=4000, seed=0)
    c.update(kw)
    return c


# ---------------------------------------------------------------------------------------------- pairing
def test_paired_aligns_by_seed_not_by_position():
    a = pd.Series([10.0, 11.0, 14.0], index=[2, 0, 1])
    b = pd.Series([9.0, 10.0, 12.0, 99.0], index=[0, 1, 2, 3])      # seed 3 only in b: left out
    x, y, seeds = SN.paired(a, b)
    assert seeds == [0, 1, 2]
    np.testing.assert_array_equal(x - y, [2.0, 4.0, -2.0])


def test_pairing_by_seed_changes_the_standard_error():
    # a shared per-seed offset (the seed's split) cancels in the paired difference, not in an unpaired one
    offset = np.array([0.0, 10.0, 20.0, 30.0])
    a = pd.Series(offset + np.array([1.0, 1.2, 0.9, 1.1]), index=range(4))
    b = pd.Series(offset, index=range(4))
    row = SN._row("a above b", a, b)
    unpaired = claims.compare("a above b", a.to_numpy(), b.to_numpy()[::-1])     # seeds mixed up
    assert row["difference"] == pytest.approx(1.05)
    assert row["se"] == pytest.approx(claims.se([1.0, 1.2, 0.9, 1.1]))
    assert row["verdict"] == "confirmed"
    assert unpaired.spread > 10 * row["se"] and unpaired.verdict != "confirmed"


# ---------------------------------------------------------------------------------------------- selection
def test_cvar_selection_excludes_authors_scaling_and_the_larger_step():
    configs = [_cfg(), _cfg(alpha=0.1, gamma=0.1), _cfg(method="fedavg", alpha=1.0, gamma=1.0),
               _cfg(input_scaling="authors"), _cfg(method="fedavg", alpha=1.0, gamma=1.0, input_scaling="authors"),
               _cfg(method="fedavg", alpha=1.0, gamma=1.0, lr_theta=DOC_LR * diagnosis.STEP_FACTOR),
               _cfg(rounds=8000), _cfg(alpha=0.2, gamma=0.2), _cfg(alpha=0.1, gamma=0.3),
               _cfg(input_scaling="document", seed=1)]
    curve, step = SN.cvar_select(configs)
    assert [(c["method"], c["alpha"], c["seed"]) for c in curve] == [
        ("fed-cvar-avg", 0.3, 0), ("fed-cvar-avg", 0.1, 0), ("fedavg", 1.0, 0), ("fed-cvar-avg", 0.3, 1)]
    assert all(c.get("input_scaling", "document") == "document" for c in curve + step)
    assert len(step) == 1 and step[0]["lr_theta"] == pytest.approx(DOC_LR * diagnosis.STEP_FACTOR)


def test_cvar_selection_on_the_stored_runs():
    store = results.Store(results.book_store("cvar").root / "mnist")
    curve, step = SN.cvar_select(m["config"] for m in store.manifests())
    assert curve and step
    assert {c["alpha"] for c in curve} <= set(SN.CVAR_ALPHAS)
    assert not any(c.get("input_scaling") == "authors" for c in curve + step)
    assert all(c["lr_theta"] == DOC_LR for c in curve) and all(c["method"] == "fedavg" for c in step)


# ---------------------------------------------------------------------------------------------- readers
def _tidy(runs):
    """A tidy frame as the store joins it: per run (method, alpha, seed, r, accuracy of class 9, overall)."""
    rows = []
    for method, alpha, seed, r, c9, overall in runs:
        for rnd in (3900, 4000):
            base = dict(run_key=f"{method}{alpha}{seed}{r}", method=method, alpha=alpha, gamma=alpha, seed=seed,
                        pattern_frac=r, rounds=4000, round=rnd)
            rows.append(dict(base, metric="test_acc", value=overall, **{"class": -1}))
            rows.append(dict(base, metric="test_acc_class", value=c9, **{"class": 9}))
    return pd.DataFrame(rows)


def test_cvar_gains_pairs_by_seed_and_agrees_with_the_mnist_page():
    runs = [("fedavg", 1.0, s, 0.9, 0.40 + 0.1 * s, 0.90) for s in range(3)]
    runs += [("fed-cvar-avg", 0.3, s, 0.9, 0.45 + 0.1 * s + 0.01 * s, 0.91) for s in range(3)]
    runs += [("fed-cvar-avg", 0.1, s, 0.9, 0.50 + 0.1 * s, 0.92) for s in (0, 1)]   # one seed fewer
    df = _tidy(runs)
    g = SN.cvar_gains(df).set_index(["alpha", "quantity"])
    assert g.loc[(0.3, "class 9"), "difference"] == pytest.approx(6.0)          # 5 + 1 points on average, in %
    assert g.loc[(0.3, "class 9"), "seeds"] == 3 and g.loc[(0.1, "class 9"), "seeds"] == 2
    assert g.loc[(0.1, "class 9"), "difference"] == pytest.approx(10.0)
    assert g.loc[(0.1, "overall"), "difference"] == pytest.approx(2.0)
    ref = diagnosis.paired_gains(df).set_index(["alpha", "quantity"])
    for (a, q), r in g.iterrows():
        key = (a, "9" if q == "class 9" else "overall")
        assert r["difference"] == pytest.approx(ref.loc[key, "difference"])
        assert r["verdict"] == ref.loc[key, "verdict"]


def test_cvar_gains_marks_the_larger_step_apart():
    df = _tidy([("fedavg", 1.0, s, 0.9, 0.40, 0.90 + 0.01 * s) for s in range(2)]
               + [("fed-cvar-avg", 0.3, s, 0.9, 0.42, 0.90) for s in range(2)])
    step = _tidy([("fedavg", 1.0, s, 0.9, 0.45 + 0.01 * s, 0.90) for s in range(2)])
    g = SN.cvar_gains(df, step)
    assert set(g["method"]) == {"fed-cvar-avg", f"fedavg, {diagnosis.STEP_FACTOR:.2f}x step"}
    assert all(c.what.startswith("r = 0.9") for c in SN.cvar_checks(g))
    assert len(SN.cvar_checks(g)) == 2           # the reference is not a point of the claim


def test_mifa_effects_sign_and_diverged_runs():
    tab = pd.DataFrame([("mifam", 0.0, s, 1e-2) for s in range(3)] + [("mifam", 0.5, s, 1e-3 * (1 + s / 10))
                                                                       for s in range(3)]
                       + [("mifam", 0.9, s, 1e-1) for s in range(3)]
                       + [("umifam", 0.0, s, np.inf) for s in range(3)]
                       + [("umifam", 0.5, s, np.inf) for s in range(3)],
                       columns=["method", "beta", "seed", "value"])
    e = SN.mifa_effects({0.1: tab}).set_index(["method", "beta"])
    assert e.loc[("mifam", 0.5), "difference"] == pytest.approx(np.mean(np.log10(1e-1 * (1 + np.arange(3) / 10))))
    assert e.loc[("mifam", 0.5), "verdict"] == "confirmed"
    assert e.loc[("mifam", 0.9), "difference"] == pytest.approx(1.0)
    assert e.loc[("mifam", 0.9), "verdict"] == "contradicted"
    assert e.loc[("umifam", 0.5), "diverged"] == 3
    assert len(SN.mifa_checks(e.reset_index())) == 2        # every run of U-MIFAm diverged: no paired value


def test_fedau_leads_against_each_rival_at_every_eta():
    curves = pd.DataFrame(
        [(SN.FEDAU, "selected gamma", 0.1, e, v) for e, v in ((0.5, 83.0), (1.0, 83.4), (2.0, 80.0))]
        + [(SN.FEDAU, "selected", 0.1, 1.0, 83.4), (SN.FEDAU, "authors'", 0.1, 1.0, 83.4)]
        + [(r, "selected", 0.05, 1.0, 81.0) for r in SN.FEDAU_RIVALS],
        columns=["method", "kind", "gamma", "eta", "val_acc"])
    leads = SN.fedau_leads(curves, tol=0.1)
    assert len(leads) == 6 and leads.groupby("eta")["holds"].all().to_dict() == {0.5: True, 1.0: True, 2.0: False}
    cs = SN.fedau_checks(leads, 0.1)
    assert [c.verdict for c in cs].count("differs") == 2
    assert SN.fedau_numbers(curves, leads)["fa_fail"] == "2"


# ---------------------------------------------------------------------------------------------- empty paths
def test_empty_store_gives_a_not_testable_check_and_every_glue_key(tmp_path):
    empty = results.Store(tmp_path / "none")
    df, step = SN.cvar_runs(empty)
    assert df.empty and step.empty
    g = SN.cvar_gains(df, step)
    assert g.empty and [c.verdict for c in SN.cvar_checks(g)] == [claims.NOT_TESTABLE]
    ref, var, rounds = SN.hics_runs(empty)
    hx = SN.hics_gaps(ref, var, rounds)
    assert hx.empty and [c.verdict for c in SN.hics_checks(hx)] == [claims.NOT_TESTABLE]
    assert SN.mifa_runs(empty) == {}
    mf = SN.mifa_effects({})
    assert [c.verdict for c in SN.mifa_checks(mf)] == [claims.NOT_TESTABLE]
    keys = set(SN.cvar_numbers(g)) | set(SN.hics_numbers(hx)) | set(SN.mifa_numbers(mf))
    full = set(SN.cvar_numbers(SN.cvar_gains(_tidy([("fedavg", 1.0, 0, 0.9, 0.4, 0.9)]))))
    assert full <= keys and "cv80_c8_01" in keys and "hx_g0_late" in keys and "mf_001_mifam_095" in keys
    assert set(SN.fedau_numbers(pd.DataFrame(columns=["method", "kind", "gamma", "eta", "val_acc"]),
                                pd.DataFrame())) >= {"fa_hold", "fa_fail", "fa_lead_worst"}
    for f in (SN.plot_cvar, SN.plot_mifa):
        f(pd.DataFrame(columns=["r", "p", "quantity", "method", "alpha", "difference", "two_se"]), "empty")


# ---------------------------------------------------------------------------------------------- settings, scale
def test_profile_rejects_bad_input():
    assert SN.profile("paper")["seeds"] is None
    with pytest.raises(ValueError, match="unknown profile"):
        SN.profile("huge")
    with pytest.raises(ValueError, match="at least two"):
        SN.profile("paper", seeds=[0])
    with pytest.raises(ValueError, match="cvar_settings"):
        SN.profile("paper", cvar_settings=[0.7])


def test_each_claim_carries_its_scale_and_the_items_exist():
    assert SN.claim_scale("cvar") == scorecard.DOCUMENT_SCALE
    assert scorecard.scale_kind(SN.claim_scale("hics")) == "stand-in" and "DivFL" not in SN.claim_scale("hics")
    assert "Fashion-MNIST" in SN.claim_scale("fedau") and "retuned" not in SN.claim_scale("fedau")
    assert "'smoke' profile" in SN.claim_scale("cvar", "smoke")
    assert "'smoke' profile" in scorecard.page_scale("across/sensitivity", dict(profile="smoke"))
    ids = {it.id for it in scorecard.items(scorecard.OWN)}
    for k in ("cvar_alpha", "hics_T", "mifa_beta", "fedau_eta"):
        assert ITEM[k] in ids
    c = SN._scaled(claims.compare("x", [1, 2], [0, 0]), SN.claim_scale("hics"))
    assert c.scale.startswith("stand-in")
    assert not math.isnan(c.ours)


def test_every_glue_key_of_the_prose_exists_on_the_empty_path():
    """A key the prose reads but no code path glues fails the book's build: every key is glued by a numbers
    function (which returns all its keys when nothing is stored) or named in a code cell of the page."""
    import json
    import re
    from pathlib import Path
    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks/across/sensitivity.ipynb").read_text())
    text = {t: "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == t)
            for t in ("markdown", "code")}
    used = {m.split(":")[0] for m in re.findall(r"\{glue:(?:text|md)\}`([^`]+)`", text["markdown"])}
    empty = pd.DataFrame(columns=["method", "kind", "gamma", "eta", "val_acc"])
    have = (set(SN.cvar_numbers(pd.DataFrame())) | set(SN.hics_numbers(pd.DataFrame())) |
            set(SN.mifa_numbers(SN.mifa_effects({}))) | set(SN.fedau_numbers(empty, pd.DataFrame())))
    named = set(re.findall(r"\b(\w+)=", text["code"])) | {f"scale_{c}" for c in SN.CLAIMS}
    assert used and not (used - have - named), sorted(used - have - named)


def test_the_items_state_the_scale_their_claims_derive():
    """Each item's `scale:` in items/book.yaml is the scale derived from the stored runs its claim reads (the page
    joins four scales; the verdict box states each item's own)."""
    own = {it.id: it for it in scorecard.items(scorecard.OWN)}
    for key, claim in (("cvar_alpha", "cvar"), ("hics_T", "hics"), ("mifa_beta", "mifa"), ("fedau_eta", "fedau")):
        assert own[ITEM[key]].scale == SN.claim_scale(claim), key
