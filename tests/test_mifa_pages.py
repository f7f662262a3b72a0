"""The MIFA pages' modules (flkit.papers.mifa.quadratic, .logistic, .theory, .complexity): the configurations they
build at the paper profile name the runs stored in results/mifa (a changed key would make a page recompute, or
report a missing run), and the small readings the pages glue, against hand-computed cases."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from flkit import results
from flkit.papers.mifa import common, complexity, experiments, logistic, problems, quadratic, theory

STORE = results.book_store("mifa")


def _no_compute(*args, **kwargs):
    raise AssertionError("a stored run was not found: the page would compute it again")


# ------------------------------------------------------------------ the stored runs are found
def test_quadratic_configs_name_the_stored_runs(monkeypatch):
    monkeypatch.setattr(quadratic, "_run_beta_sweep", _no_compute)
    monkeypatch.setattr(quadratic, "_run_curves", _no_compute)
    cfg = quadratic.profile("paper")
    task = quadratic.task()
    gap0 = quadratic.initial_gap(task)
    sw = quadratic.beta_sweep(task, cfg, gap0, STORE)
    beta, values = quadratic.figure_beta(sw[sw["metric"] == "hit_round"], cfg["betas"])
    assert values["q_beta"] == beta
    assert all(STORE.done(c) for c in quadratic.curve_configs(cfg, beta, gap0).values())
    # a config that differs in one value (another step size) names no stored run: the check can fail
    other = quadratic.profile("paper", eta=0.03)
    assert not any(STORE.done(c) for c in quadratic.beta_sweep_configs(other, gap0))


def test_logistic_configs_name_the_stored_runs():
    cfg = logistic.profile("paper")
    data = logistic.data_config(cfg["subset"], synthetic=False)
    fstar = dict(experiment="logistic_fstar", data=data, local=logistic.LOCAL)
    assert STORE.done(fstar)
    f_star = float(STORE.load(fstar).set_index("metric")["value"]["f_star"])
    curves, sweeps = logistic.curve_configs(cfg, data, f_star), logistic.sweep_configs(cfg, data, f_star)
    assert all(STORE.done(c) for c in [*curves.values(), *sweeps.values()])
    assert not any(STORE.done(c) for c in logistic.curve_configs(cfg, data, f_star + 1e-9).values())


def test_theory_sections_read_their_stored_runs(monkeypatch):
    for name in ("error_floor", "one_round_monte_carlo", "table_error_growth"):
        monkeypatch.setattr(experiments, name, _no_compute)
    monkeypatch.setattr(complexity, "simulate", _no_compute)
    cfg = theory.profile("paper")
    fl = theory.floor_runs(problems.floor_task(), cfg, STORE)
    assert set(fl["start"]) == {"optimum", "zero"}
    assert len(theory.monte_carlo_runs(problems.mc_task(), cfg, STORE)) > 0
    assert len(theory.growth_runs(cfg, STORE)) > 0
    assert len(complexity.plateau_runs(cfg, STORE)) > 0
    with pytest.raises(AssertionError, match="not found"):      # another horizon: no stored run
        theory.growth_runs(theory.profile("paper", growth=dict(ps=[0.1], rounds=7, runs=2)), STORE)


# ------------------------------------------------------------------ the pages' readings
def test_spread_and_two_decimals():
    assert common.two_decimals(-0.001) == "0.00" and common.two_decimals(-0.3) == "-0.30"
    assert common.spread([0.5, np.nan, 1.25]) == "0.50 to 1.25"
    assert common.spread([0.501, 0.499]) == "0.50"                       # both ends read the same: once


def test_figure_beta_is_the_largest_beta_every_run_reaches():
    rows = [("mifam", 0.5, 10), ("umifam_saga", 0.5, 12), ("mifam", 0.9, 8), ("umifam_saga", 0.9, -1),
            ("mifam", 0.0, 30), ("umifam_saga", 0.0, 40)]
    hits = pd.DataFrame(rows, columns=["method", "beta", "value"])
    beta, values = quadratic.figure_beta(hits, [0.0, 0.5, 0.9])
    assert beta == 0.5 and values["q_ok_betas"] == "0, 0.5" and values["q_ok_max"] == 0.5
    assert quadratic.figure_beta(hits, [0.0, 0.5, 0.9], beta=0.9)[0] == 0.9     # the page's parameter wins
    assert quadratic.figure_beta(hits[hits["value"] < 0], [0.9])[0] == 0.0       # none reaches: no momentum


def test_logistic_ranking_leaves_out_diverged_methods():
    tab = pd.DataFrame({"final (median)": [0.3, 0.1, 0.2], "diverged runs": ["0/3", "1/3", "0/3"]},
                       index=["mifa", "umifa", "mifam"])
    assert logistic.ranking(tab) == ["mifam", "mifa"]
