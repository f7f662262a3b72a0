"""The FMNIST page's reading of the document's CNN runs (flkit.papers.hics.cnn): only stored runs are read, their
checks carry the scale of the seeds stored, and they replace the stand-in's checks of the same number."""
import math

import pandas as pd
import pytest

from flkit import datasets, results
from flkit.papers.claims import Check
from flkit.papers.hics import cnn, fmnist
from flkit.papers.verdicts import DOCUMENT_SCALE, scale_kind


def test_jobs_are_the_paper_profiles_setting2_main():
    js = cnn.jobs()
    assert [j["seed"] for j in js] == [0, 1, 2]
    assert all(j["model"] == "hics_fmnist_paper" and j["setting"] == "(2)" and j["group"] == "main"
               and j["methods"] == ["random", "pow-d", "CS", "HiCS-FL"] and j["rounds"] == 200 for j in js)
    assert js == [j for j in fmnist.jobs(fmnist.profile("paper")) if fmnist.is_setting2_main(j)]
    assert cnn.source("smoke") == "smoke" and cnn.source("reduced") == cnn.source("paper") == "paper"


def test_scale_follows_the_seeds_stored():
    frame = lambda seeds: pd.DataFrame(dict(seed=seeds))                                  # noqa: E731
    assert cnn.scale(frame([0, 1, 2, 2])) == DOCUMENT_SCALE
    two = cnn.scale(frame([1, 0]))
    assert two == "reduced: the document's CNN runs, seeds [0, 1] (document: [0, 1, 2])"
    assert scale_kind(two) == "reduced"
    assert scale_kind(cnn.scale(frame([0]), "smoke")) == "stand-in"       # the smoke profile's logistic regression


def _check(what, verdict="agrees", scale=""):
    return Check(what, verdict, 1.0, 1.0, 0.0, "rule", scale=scale)


def test_prefer_replaces_the_same_number_only():
    doc = {"Table 1: a": [_check("x", "differs", DOCUMENT_SCALE)],
           "Fig. 2": [_check("s2", "confirmed", "reduced: seeds")]}
    stand_in = {"Table 1: a": [_check("x"), _check("y")], "Fig. 2": [_check("s1"), _check("s2", "contradicted")],
                "Table 1: b": [_check("z")]}
    got = cnn.prefer(doc, stand_in)
    assert [(c.what, c.verdict) for c in got["Table 1: a"]] == [("x", "differs"), ("y", "agrees")]
    assert [(c.what, c.verdict) for c in got["Fig. 2"]] == [("s2", "confirmed"), ("s1", "agrees")]
    assert [c.what for c in got["Table 1: b"]] == ["z"]
    assert cnn.prefer({}, stand_in) == stand_in


@pytest.mark.usefixtures("shared_data")
def test_reads_stored_runs_only(tmp_path):
    store = results.Store(tmp_path)
    empty = cnn.runs(store, name="smoke")
    assert empty.empty
    filed, target = cnn.checks(empty, "smoke")
    assert filed == {} and math.isnan(target)
    v = cnn.values(empty, filed, target, "smoke")
    assert v["cnn_runs"] == 0 and v["cnn_checks"] == "none" and "No run" in v["cnn_words"]
    assert v["cnn_target"] == "none (no run stored)" and v["cnn_run_words"] == "no run of it is stored here yet"
    assert cnn.figure(empty, "smoke") is None
    assert list(cnn.table1(empty, target)["ours"]) == ["no run stored"] * 4

    data = datasets.load("fashion-mnist")
    first = cnn.jobs(name="smoke")[1]                                   # seed 1 only
    results.sweep([first], lambda j: fmnist.run_job(j, data), store, progress=False)
    t = cnn.runs(store, name="smoke")
    assert sorted(t["seed"].unique()) == [1] and set(t["method"]) == set(cnn.METHODS)
    filed, target = cnn.checks(t, "smoke")
    flat = [c for cs in filed.values() for c in cs]
    assert any(c.what.startswith("Table 1, FMNIST, HiCS-FL: rounds to 0.75") for c in flat)
    assert any(c.what.startswith("setting (2): HiCS-FL reaches the target no later than CS") for c in flat)
    assert all(c.scale == cnn.scale(t, "smoke") and "seeds [1]" in c.scale for c in flat)
    assert 0 < target < 1
    v = cnn.values(t, filed, target, "smoke")
    assert v["cnn_runs"] == 1 and v["cnn_seeds"] == "1" and v["cnn_of"] == 2 and v["cnn_target"] == f"{target:.3f}"
    assert "stored for seed 1 (of 0, 1)" in v["cnn_run_words"]
    t1 = cnn.table1(t, target)
    assert list(t1.index) == list(cnn.METHODS)
    assert all(f"{m} {t1.loc[m, 'ours: rounds to 0.750']}" in v["cnn_words"] for m in cnn.METHODS)
