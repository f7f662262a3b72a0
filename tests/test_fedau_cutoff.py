"""FedAU's cutoff study (flkit.papers.fedau.cutoff): its profiles on the table's, its runs (the table's runs where
they coincide, the stored ones found again), Theorem 3's bias term and Corollary 4's K, and the checks."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from flkit.papers.fedau import common, cutoff, table
from flkit.results import config_key


def test_a_profile_is_the_tables_with_the_cutoff_grid():
    assert set(cutoff.PROFILES) == set(table.PROFILES) >= {"smoke", "paper"}
    for name in cutoff.PROFILES:
        s, t = cutoff.profile(name), table.profile(name)
        assert {k: v for k, v in s.items() if k not in cutoff.GRIDS[name]} == t
        assert {k: s[k] for k in cutoff.GRIDS[name]} == cutoff.GRIDS[name]
        # the table's runs do not depend on the grid: the same configs from either profile
        assert [config_key(c) for c in table.configs(s)] == [config_key(c) for c in table.configs(t)]
    s = cutoff.profile("reduced", cutoff_seeds=[4], rounds=500)
    assert s["cutoff_seeds"] == [4] and s["rounds"] == 500 and s["profile"] == "reduced"


@pytest.mark.parametrize("bad,msg", [(dict(cutoffs=[0, None]), "cutoffs"), (dict(p_mins=[1.5]), "p_mins"),
                                     (dict(cutoff_seeds=[1, 1]), "repeated"), (dict(rounds=0), "rounds"),
                                     (dict(cutof=[5]), "unknown setting")])
def test_bad_settings_fail_before_any_work(bad, msg):
    with pytest.raises(ValueError, match=msg):
        cutoff.profile("reduced", **bad)
    with pytest.raises(ValueError, match="choose one of .*smoke"):
        cutoff.profile("reducd")


def test_configs_are_fedau_runs_of_the_grid_under_bernoulli():
    s = cutoff.profile("paper")
    cs = cutoff.configs(s)
    assert len(cs) == len(s["p_mins"]) * len(s["cutoffs"]) * len(s["cutoff_seeds"]) == 4 * 7 * 5
    assert {(c["pattern"], c["rule"], c["gamma"], c["eta"]) for c in cs} == {("bernoulli", "fedau", 0.1, 1.0)}
    assert {(c["K"], c["method"]) for c in cs} == {(K, f"FedAU (K = {K or 'inf'})") for K in s["cutoffs"]}
    assert {(c["p_min"], c["seed"]) for c in cs} == {(p, k) for p in s["p_mins"] for k in s["cutoff_seeds"]}
    assert len({config_key(c) for c in cs}) == len(cs)


def test_cutoff_runs_reuse_the_table_runs():
    s = cutoff.profile("reduced")
    table_keys = {config_key(c) for c in table.configs(s)}
    cut = [c for c in cutoff.configs(s) if c["p_min"] == s["p_min"] and c["K"] in (50, None)]
    assert len(cut) == 2 * len(s["cutoff_seeds"]) and all(config_key(c) in table_keys for c in cut)
    # the CNN spot-check's study is a subset of its table: the sweep's --study all adds no run
    s = cutoff.profile("cnn-spot")
    assert {config_key(c) for c in cutoff.configs(s)} <= {config_key(c) for c in table.configs(s)}


def test_the_published_pages_runs_are_found_in_the_store():
    """The executed profile's runs are stored under their config keys: a change of a config's keys or values
    would orphan them (the page, reading with compute_missing=False, would stop)."""
    s = cutoff.profile("reduced")
    store = table.store_for(s)
    assert all(store.done(c) for c in cutoff.configs(s))
    assert all(store.done(c) for c in table.configs(s))


def test_corollary4_K_and_its_table():
    assert common.corollary4_K(0.02, 1000) == pytest.approx(math.log(1000) / (-2 * math.log(0.98)), rel=1e-12)
    # (1 - p)^(2K) = 1/T at Corollary 4's K
    assert (1 - 0.05) ** (2 * common.corollary4_K(0.05, 5000)) == pytest.approx(1 / 5000, rel=1e-9)
    t = cutoff.corollary4_table(cutoff.profile("reduced"))
    assert list(t["p_min"]) == [0.005, 0.02, 0.05]
    assert list(t["Corollary 4's K at this T"]) == [round(math.log(1000) / (-2 * math.log1p(-p))) for p in t.p_min]
    assert list(t["at T = 10,000"]) == [round(math.log(10000) / (-2 * math.log1p(-p))) for p in t.p_min]


def test_bias_term_falls_with_K_and_is_at_most_the_worst_clients():
    s = cutoff.profile("smoke", cutoffs=[1, 5, 20, None], p_mins=[0.05, 0.2], cutoff_seeds=[1, 2])
    b = cutoff.bias_terms(s)
    assert len(b) == 2 * 4 * 2 and set(b.p_min) == {0.05, 0.2}
    assert (b[~np.isfinite(b.K)].bias == 0).all()
    for (pm, seed), g in b[np.isfinite(b.K)].groupby(["p_min", "seed"]):
        g = g.sort_values("K")
        assert (np.diff(g.bias) < 0).all() and (g.bias > 0).all()
        assert (g.min_p >= pm - 1e-12).all()
        # every client's (1 - p_n)^(2K) is at most the rarest one's
        assert (g.bias <= (1 - g.min_p) ** (2 * g.K) + 1e-15).all()
    # the term at K = 1 is the mean of (1 - p_n)^2 over the seed's p_n
    c = dict(table.base_config(s), p_min=0.05, seed=2)
    p = common.split(c, common.load_data(c, "cpu")[1].numpy())[1]
    assert b[(b.p_min == 0.05) & (b.seed == 2) & (b.K == 1)].bias.iloc[0] == pytest.approx(np.mean((1 - p) ** 2))


def _frame(acc: dict, s) -> pd.DataFrame:
    """Final-window runs: {(p_min, K): accuracies in % per seed} as the sweep's tidy frame (one evaluation)."""
    return pd.DataFrame([dict(p_min=pm, K=K, seed=k, round=s["rounds"], metric="test_acc", value=v / 100)
                         for (pm, K), vals in acc.items() for k, v in enumerate(vals, 1)])


def test_checks_summary_and_best_follow_the_runs():
    s = cutoff.profile("smoke", cutoffs=[5, 50, 500, None], p_mins=[0.02], cutoff_seeds=[1, 2, 3], rounds=1000,
                       eval_every=100, window=100)
    base = np.array([80.0, 81.0, 79.0])
    df = _frame({(0.02, 5): base - 4 + np.array([0.1, -0.1, 0.0]), (0.02, 50): base + 1 + np.array([0.2, -0.2, 0.1]),
                 (0.02, 500): base + np.array([0.1, 0.0, -0.1]), (0.02, None): base}, s)
    cs = cutoff.summarize(df, s)
    assert list(cs.K) == [5, 50, 500, np.inf] and (cs.seeds == 3).all()
    assert cs[cs.K == 5]["mean"].iloc[0] == pytest.approx(76.0)
    assert cs[cs.K == np.inf]["sd"].iloc[0] == pytest.approx(1.0)
    got = {c.what: c.verdict for c in cutoff.checks(df, s)}
    k4 = common.corollary4_K(0.02, 1000)
    assert got == {"p_min = 0.02: no cutoff >= K = 5": "confirmed", "p_min = 0.02: K = 50 >= no cutoff": "confirmed",
                   f"p_min = 0.02: K = 500 (>= Corollary 4's {k4:.0f}) within 0.5 point of no cutoff": "confirmed"}
    # the cutoffs' accuracies swapped with no cutoff's: the first two readings turn over
    wrong = _frame({(0.02, 5): base + 4, (0.02, 50): base - 1, (0.02, 500): base + 3, (0.02, None): base}, s)
    got = [c.verdict for c in cutoff.checks(wrong, s)]
    assert got == ["contradicted", "contradicted", "contradicted"]
    best = cutoff.best_cutoffs(cs)
    assert list(best.best_K) == [50] and best.best_acc.iloc[0] == pytest.approx(81.0 + 1 / 30)
    v = cutoff.glue_values(cutoff.checks(df, s), cs, best, s)
    assert v["n_checks"] == v["n_ok"] == 3 and v["n_nt"] == 0 and v["best_K"] == "50"
    assert v["best_gain"] == pytest.approx(1 + 1 / 30) and v["k4_range"] == f"{k4:.0f} to {k4:.0f}"
    assert v["acc_spread"] == pytest.approx(81 + 1 / 30 - 76)


def test_sweep_reads_the_table_runs_it_shares(tmp_path):
    """The study's run with no cutoff at the table's p_min and seed is the table's: stored once, read back."""
    s = cutoff.profile("smoke", rounds=4, eval_every=2, window=2, cutoffs=[5, None], cutoff_seeds=[1])
    shared = table.sweep(dict(s, methods=["FedAU (K = inf)"], patterns=["bernoulli"]), root=tmp_path, device="cpu",
                         progress=False, cpu_threads=1)
    assert shared.attrs["computed"] == 1
    df = cutoff.sweep(s, root=tmp_path, device="cpu", progress=False, cpu_threads=1)
    assert df.attrs == {"computed": 1, "stored": 1}
    again = cutoff.sweep(s, root=tmp_path, progress=False, compute_missing=False)
    assert again.attrs == {"computed": 0, "stored": 2} and set(again.K.fillna(np.inf)) == {5, np.inf}
    assert cutoff.header(s) == ("profile 'smoke': Fashion-MNIST, model logreg, 4 rounds, K in [5, 'inf'], "
                                "p_min in [0.05], seeds [1]")
