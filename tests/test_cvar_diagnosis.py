"""flkit.papers.cvar.diagnosis.paired_gains: every Fed-CVaR-Avg cell against FedAvg on the same seeds."""
from __future__ import annotations

import pandas as pd
import pytest

from flkit.papers.cvar import diagnosis


def _runs(gains: dict[tuple[float, float], list[float]]) -> pd.DataFrame:
    """Two rounds of made-up runs at r = 0.9: FedAvg's class-9 accuracy 0.40 + 0.01 seed; each Fed-CVaR-Avg
    cell adds its per-seed gain (in points); overall accuracy 0.9 for every run."""
    rows = []
    for seed in range(3):
        for (alpha, gamma), g in [((1.0, 1.0), [0.0] * 3), *gains.items()]:
            method = "fedavg" if alpha == 1.0 else "fed-cvar-avg"
            for rnd in (90, 100):
                acc9 = 0.40 + 0.01 * seed + g[seed] / 100
                rows += [dict(round=rnd, metric="test_acc_class", value=acc9, **{"class": 9}, method=method,
                              alpha=alpha, gamma=gamma, seed=seed, pattern_frac=0.9, rounds=100),
                         dict(round=rnd, metric="test_acc", value=0.9, **{"class": -1}, method=method,
                              alpha=alpha, gamma=gamma, seed=seed, pattern_frac=0.9, rounds=100)]
    return pd.DataFrame(rows)


def test_each_cell_is_paired_with_fedavg_on_its_seeds():
    out = diagnosis.paired_gains(_runs({(0.3, 0.3): [3.0, 3.2, 2.8], (0.1, 0.1): [5.0, -4.0, 2.0]}))
    rare = out[out["quantity"] == "9"].set_index("alpha")
    assert rare.loc[0.3, "difference"] == pytest.approx(3.0) and rare.loc[0.3, "verdict"] == "confirmed"
    assert rare.loc[0.1, "difference"] == pytest.approx(1.0) and rare.loc[0.1, "verdict"] == "not testable at this scale"
    assert rare.loc[0.3, "fedavg"] == pytest.approx(41.0) and (rare["seeds"] == 3).all()
    overall = out[out["quantity"] == "overall"]
    assert (overall["difference"] == 0).all() and len(out) == 4


def test_gain_words_and_the_strong_risk_settings():
    from flkit.papers import cvar
    out = diagnosis.paired_gains(_runs({(0.1, 0.1): [3.0, 3.2, 2.8]}))
    w = diagnosis.gain_words(out, 0.1, 0.1)
    assert w["rare"] == "class 9: 44.0 % against 41.0 % (paired difference +3.0 ± 0.2 points, confirmed)"
    assert w["overall"].startswith("90.0 % against 90.0 % (paired difference +0.0 ± 0.0 points") and w["seeds"] == "3"
    assert diagnosis.gain_words(out, 0.3, 0.3)["rare"].startswith("n/a")
    s = cvar.settings("mnist", "paper", ram="random-draw")
    strong = diagnosis.strong_risk(s)
    assert strong["cells"] == [[0.1, 0.1]] and strong["settings"] == [0.9, 0.8] and strong["seeds"] == [0, 1, 2]
    assert strong["ram"] == "random-draw" and strong["rounds"] == 4000
    assert diagnosis.strong_risk(cvar.settings("mnist", "smoke"))["seeds"] == cvar.settings("mnist", "smoke")["seeds"]


def test_for_reading_names_the_columns():
    out = diagnosis.for_reading(diagnosis.paired_gains(_runs({(0.3, 0.3): [3.0, 3.2, 2.8]})))
    assert list(out["r"]) == ["90 %", "90 %"] and "paired difference (points)" in out.columns


def test_scaling_effect_pairs_each_method_across_the_two_inputs():
    """The authors' scaling minus the document's, per method and quantity, on the seeds both have; only the
    Fed-CVaR-Avg cells the authors'-scaling runs have are compared."""
    doc = _runs({(0.3, 0.3): [3.0, 3.0, 3.0], (0.1, 0.1): [9.0, 9.0, 9.0]})
    auth = _runs({(0.3, 0.3): [13.0, 11.0, 12.0]})
    auth = auth[auth["seed"] < 2]                                     # two seeds stored so far
    auth.loc[(auth["method"] == "fedavg") & (auth["metric"] == "test_acc_class"), "value"] += 0.05
    out = diagnosis.scaling_effect(doc, auth).set_index(["method", "quantity"])
    assert (out["seeds"] == 2).all() and len(out) == 4
    assert out.loc[("fedavg", "9"), "difference"] == pytest.approx(5.0)
    assert out.loc[("fedavg", "9"), "verdict"] == "confirmed"
    cv = out.loc[("fed-cvar-avg", "9")]
    assert cv["difference"] == pytest.approx(9.0) and cv["document_inputs"] == pytest.approx(43.5)
    assert out.loc[("fed-cvar-avg", "overall"), "difference"] == pytest.approx(0.0)
    w = diagnosis.scaling_words(out.reset_index(), diagnosis.paired_gains(auth))
    assert w["seeds"] == "2" and "Fed-CVaR-Avg on class 9: 52.5 % against 43.5 % (+9.0" in w["effect"]
    assert w["gain"].startswith("class 9: 52.5 % against 45.5 % (+7.0")
    assert diagnosis.scaling_words(out.reset_index().iloc[0:0], out.iloc[0:0])["effect"].startswith("n/a")


def test_authors_scaling_settings_keep_the_pages_design():
    from flkit.papers import cvar
    s = cvar.settings("mnist", "paper")
    a = diagnosis.authors_scaling(s)
    assert a["input_scaling"] == "authors" and a["seeds"] == [0, 1, 2] and a["settings"] == s["settings"]
    assert a["ram"] == s["ram"] == "random-draw" and a["cells"] == s["cells"] and a["rounds"] == 4000


def _mnist_runs(cv9: list[float], fed9: list[float]) -> pd.DataFrame:
    """One evaluation per run at r = 0.9: class-9 accuracy per seed (fractions), overall 0.9."""
    rows = []
    for seed, (a, b) in enumerate(zip(cv9, fed9)):
        for method, acc, alpha in (("fed-cvar-avg", a, 0.3), ("fedavg", b, 1.0)):
            base = dict(round=100, method=method, alpha=alpha, gamma=alpha, seed=seed, pattern_frac=0.9, rounds=100)
            rows += [dict(base, metric="test_acc_class", value=acc, **{"class": 9}),
                     dict(base, metric="test_acc", value=0.9, **{"class": -1})]
    return pd.DataFrame(rows)


def test_mnist_rare_class_reading_is_one_sided_and_paired():
    """'Over 80 %' is one-sided (95 % agrees); 'above FedAvg' is paired over seeds: a higher mean with one seed
    the other way round is inside noise, not confirmed."""
    from flkit.papers import cvar
    high = cvar.confirm_mnist(_mnist_runs([0.95, 0.96, 0.94], [0.50, 0.52, 0.48])).set_index("rare_class")
    assert high.loc[9, "level"].verdict == "agrees" and high.loc[9, "paired"] == "confirmed" and high.loc[9, "confirmed"]
    noisy = cvar.confirm_mnist(_mnist_runs([0.95, 0.96, 0.50], [0.50, 0.52, 0.90])).set_index("rare_class")
    assert noisy.loc[9, "fed_cvar_avg"] > noisy.loc[9, "fedavg"]
    assert noisy.loc[9, "paired"] == "not testable at this scale" and not noisy.loc[9, "confirmed"]
    low = cvar.confirm_mnist(_mnist_runs([0.50, 0.52, 0.48], [0.40, 0.41, 0.39])).set_index("rare_class")
    assert low.loc[9, "level"].verdict == "differs" and not low.loc[9, "confirmed"]
    checks = cvar.scorecard_mnist(cvar.confirm_mnist(_mnist_runs([0.95, 0.96, 0.94], [0.5, 0.52, 0.48])))
    assert [c.verdict for c in checks["Fig. 3(c)"]] == ["agrees", "confirmed"]


def test_larger_step_is_fedavg_alone_with_the_largest_step_weight():
    """FedAvg's step times (1 - gamma) / alpha + gamma at the document's alpha = gamma = 0.3: 2.6333...; the
    risk-neutral cell of `cells` is FedAvg's own run, so the settings give one run per seed, all FedAvg."""
    from flkit.papers import cvar
    s = cvar.settings("mnist", "paper")
    big = diagnosis.larger_step(s)
    assert diagnosis.STEP_FACTOR == pytest.approx(0.7 / 0.3 + 0.3)
    assert big["lr_theta"] == pytest.approx(2.6333333e-3) and big["ram"] == "random-draw" and big["rounds"] == 4000
    configs = cvar.run_configs(big)
    assert [(c["method"], c["seed"], c["pattern_frac"]) for c in configs] == [("fedavg", k, 0.9) for k in range(3)]
    assert all(c["lr_theta"] == big["lr_theta"] and c["lr_t"] == s["lr_t"] for c in configs)


def test_step_effect_pairs_the_larger_step_with_fedavg_and_with_fed_cvar_avg():
    """The larger step's runs are FedAvg runs of their own store; each comparison is paired over the seeds all
    three methods have."""
    base = _runs({(0.3, 0.3): [3.0, 3.2, 2.8]})
    big = _runs({})
    big.loc[big["metric"] == "test_acc_class", "value"] += [0.01, 0.01, 0.012, 0.012, 0.014, 0.014]
    big = big[big["seed"] < 3]
    out = diagnosis.step_effect(base, big).set_index("quantity")
    assert out.loc["9", "step_gain"] == pytest.approx(1.2) and out.loc["9", "step_gain_verdict"] == "confirmed"
    assert out.loc["9", "cvar_minus_step"] == pytest.approx(1.8) and out.loc["9", "fedavg_larger_step"] == pytest.approx(42.2)
    assert out.loc["overall", "step_gain"] == pytest.approx(0.0) and (out["seeds"] == 3).all()
    w = diagnosis.step_words(out.reset_index())
    assert w["gain"].startswith("class 9: 42.2 % against 41.0 % (+1.2 ± ") and w["seeds"] == "3"
    assert w["rest"].startswith("class 9: 44.0 % against 42.2 % (+1.8 ± ")
    assert w["reading"].startswith("Fed-CVaR-Avg is ahead of the larger step beyond two standard errors")
    same = out.reset_index().assign(cvar_minus_step_verdict="not testable at this scale")
    assert "a larger step alone accounts for" in diagnosis.step_words(same)["reading"]
    none = same.assign(step_gain_verdict="not testable at this scale")
    assert "cannot tell a larger step from" in diagnosis.step_words(none)["reading"]
    empty = diagnosis.step_words(out.reset_index().iloc[0:0])
    assert empty["gain"].startswith("n/a") and set(empty) == set(w)   # the page glues every key either way


def test_scaling_by_seed_shows_each_settings_own_rare_classes():
    """Class 8 is rare at r = 80 % only: at r = 90 % it is a frequent class and must not be listed (nor feed the
    page's rare-class spans)."""
    def runs(shift):
        rows = []
        for r in (0.9, 0.8):
            for method, alpha in (("fedavg", 1.0), ("fed-cvar-avg", 0.3)):
                for seed in range(2):
                    base = dict(round=100, method=method, alpha=alpha, gamma=alpha, seed=seed, pattern_frac=r, rounds=100)
                    rows += [dict(base, metric="test_acc_class", value=0.5 + shift, **{"class": 9}),
                             dict(base, metric="test_acc_class", value=0.97, **{"class": 8}),
                             dict(base, metric="test_acc", value=0.9 - shift, **{"class": -1})]
        return pd.DataFrame(rows)
    out = diagnosis.scaling_by_seed(runs(0.0), runs(0.2))
    assert sorted(set(out.loc[0.9].index.get_level_values("quantity"))) == ["class 9", "overall"]
    assert sorted(set(out.loc[0.8].index.get_level_values("quantity"))) == ["class 8", "class 9", "overall"]
    assert out.loc[(0.9, "class 9", 0), ("Fed-CVaR-Avg", "authors'")] == pytest.approx(70.0)
