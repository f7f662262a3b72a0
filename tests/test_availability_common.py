"""The availability chapter's shared pieces (document 001): the profile helper and the pages' profiles, the
results store, the pages' checks ledger (``items.Checks``), and the stored-run configs of the four pages: the
published profile's configs are exactly the runs stored under results/availability/, so a changed config key
(which would leave a page without its runs, recomputing them) fails here before any page runs."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from flkit import results
from flkit.papers.availability import cafed, common, items, markov, sampling, weights

REPO = Path(__file__).resolve().parents[1]
TOY = {"smoke": {"rounds": 1, "seeds": [0]}, "paper": {"rounds": 2, "seeds": [0, 1]}}


# ------------------------------------------------------------------------------------------- profiles
def test_profile_of_names_the_allowed_profiles_and_checks_the_overrides():
    with pytest.raises(ValueError, match=r"unknown profile 'big'; choose one of \['paper', 'smoke'\]"):
        common.profile_of("toy", TOY, "big", {})
    assert common.profile_of("toy", TOY, "paper", {"rounds": None}) == {"rounds": 2, "seeds": [0, 1]}
    assert common.profile_of("toy", TOY, "paper", {"rounds": 5})["rounds"] == 5
    with pytest.raises(ValueError, match="toy profile 'smoke': rounds must be an int >= 1, got 0"):
        common.profile_of("toy", TOY, "smoke", {"rounds": 0})
    with pytest.raises(ValueError, match="unknown setting"):
        common.profile_of("toy", TOY, "smoke", {"round": 3})
    common.profile_of("toy", TOY, "paper", {})["seeds"].append(9)        # a copy: the profile is unchanged
    assert TOY["paper"]["seeds"] == [0, 1]


def test_the_pages_seeds_replace_only_their_runs_seeds():
    c = cafed.profile("smoke", seeds=[5, 6])
    assert c["synthetic"]["seeds"] == [5, 6] and c["mnist"]["seeds"] == cafed.PROFILES["smoke"]["mnist"]["seeds"]
    assert cafed.profile("smoke", mnist_seeds=[4])["mnist"]["seeds"] == [4]
    w = weights.profile("smoke", seeds=[3], mc_draws=50)
    assert w["floor"]["seeds"] == w["limits"]["seeds"] == [3] and w["mc_draws"] == 50
    assert w["server"]["seeds"] == weights.PROFILES["smoke"]["server"]["seeds"]
    assert markov.profile("smoke", seeds=[7])["seeds"] == [7] and sampling.profile("smoke", seeds=[2])["seeds"] == [2]
    assert markov.profile("smoke") == markov.profile("smoke", seeds=None)
    with pytest.raises(ValueError, match="repeated seeds"):
        cafed.profile("smoke", seeds=[1, 1])
    with pytest.raises(ValueError, match="seeds must hold ints >= 0"):
        weights.profile("smoke", seeds=[-1])


# ------------------------------------------------------------------------------------------- the store
def test_only_the_published_profile_writes_to_the_book(tmp_path, monkeypatch):
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    assert common.store("paper").root == tmp_path / "availability"
    assert common.store("smoke").root == tmp_path / "tmp" / "availability"
    assert common.stored_at(results.book_store("availability", REPO / "results")) == "results/availability"


def test_cached_computes_a_missing_run_once(tmp_path):
    store, calls = results.Store(tmp_path), []

    def compute():
        calls.append(1)
        return pd.DataFrame({"round": [0, 1], "metric": "x", "value": [1.5, 2.5]})

    a = common.cached(store, {"experiment": "toy", "n": 2}, compute)
    b = common.cached(store, {"experiment": "toy", "n": 2}, compute)
    assert len(calls) == 1 and a["value"].tolist() == b["value"].tolist() == [1.5, 2.5]
    assert (b["experiment"] == "toy").all()                     # the config's columns come back with the table


def test_clock_reports_the_profile_and_both_times():
    line = common.start().line("paper")
    assert line.startswith("profile=paper; wall time ") and "CPU time" in line and "(1 thread)" in line


# ------------------------------------------------------------------------------------------- the checks ledger
def test_checks_print_each_criterion_and_keep_it_for_the_scorecard(capsys):
    c = items.Checks("weights")
    c.add("unbiased", True, "exact bias <= 1e-20", section="2")
    c.add("agg_mc", False, "Monte Carlo within 4 s.e.")
    assert capsys.readouterr().out == "agrees: exact bias <= 1e-20\nDISAGREES: Monte Carlo within 4 s.e.\n"
    first = c.entries[0][2]
    assert first.what == "Section 2: exact bias <= 1e-20" and first.verdict == "agrees"
    assert first.rule == items.KEYS["weights"]["unbiased"][1]              # the criterion of KEYS, unchanged
    assert c.entries[1][2].verdict == "differs"
    assert c.n_agree == 1 and len(c) == 2 and c.ok("unbiased") and not c.ok("unbiased", "agg_mc")
    assert c.by_item() == {items.item_of("weights", "unbiased"): [first],
                           items.item_of("weights", "agg_mc"): [c.entries[1][2]]}
    with pytest.raises(KeyError, match="no check named"):
        c.ok("limit_exact")
    with pytest.raises(ValueError, match="no check 'nope'"):
        c.add("nope", True, "x")
    with pytest.raises(TypeError, match="claims.Check"):
        c.keep("unbiased", (True, "x"))
    with pytest.raises(ValueError, match="not one of"):
        items.Checks("fedau")


def test_checks_given_a_rule_print_it_and_recurring_names_share_their_key(capsys):
    c = items.Checks("sampling")
    c.add("uploads = K E min(N, |A_k|), pi = 0.2", True, rule="|diff| <= 2 s.e.")
    c.add("uploads = K E min(N, |A_k|), pi = 0.3", False, rule="|diff| <= 2 s.e.")
    c.add("5/6, exact", True, rule="exact rational equality", echo=False)
    assert capsys.readouterr().out.splitlines() == [
        "agrees: uploads = K E min(N, |A_k|), pi = 0.2 (|diff| <= 2 s.e.)",
        "DISAGREES: uploads = K E min(N, |A_k|), pi = 0.3 (|diff| <= 2 s.e.)"]
    assert [k for _, k, _ in c.entries][:2] == ["uploads = K E min(N, |A_k|)"] * 2
    assert c.entries[2][2].what == "5/6, exact" and c.entries[2][2].rule == "exact rational equality"
    assert list(c.verdicts().values()) == [True, False, True]
    with pytest.raises(ValueError, match="pass `rule`"):
        c.add("the notes' 30K", True)


def test_a_recurring_name_passes_only_when_all_its_checks_pass():
    c = items.Checks("cafed")
    c.add("notes' p", True, "share a", echo=False)
    c.add("notes' p", False, "share b", echo=False)
    assert not c.ok("notes' p") and c.verdicts() == {"notes' p": False} and c.n_agree == 1


# ------------------------------------------------------------------------------------------- the stored runs
def _published_configs() -> list[dict]:
    out = []
    for page in (cafed, markov, sampling, weights):
        for c in page.configs(page.profile(common.PUBLISHED)).values():
            out += c if isinstance(c, list) else [c]
    return out


def test_the_published_configs_are_the_stored_runs():
    store = results.book_store(common.CHAPTER, REPO / "results")
    cfgs = _published_configs()
    assert len({results.config_key(c) for c in cfgs}) == len(cfgs) == 4 + 7 + 6 + 3
    missing = [(c["experiment"], results.config_key(c)) for c in cfgs if not store.done(c)]
    assert missing == [], "a page's config no longer finds its stored run: its key changed"
    # the checker can fail: one changed setting is another run
    changed = dict(cfgs[0], data_seed=43)
    assert not store.done(changed)
