"""flkit.papers.cvar.diagnosis.paired_gains: every Fed-CVaR-Avg cell against FedAvg on the same seeds."""
from __future__ import annotations

import pandas as pd
import pytest

from flkit.papers.cvar import diagnosis, items, mnist


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
    assert rare.loc[0.1, "difference"] == pytest.approx(1.0)
    assert rare.loc[0.1, "verdict"] == "not testable at this scale"
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
    high = mnist.confirm_mnist(_mnist_runs([0.95, 0.96, 0.94], [0.50, 0.52, 0.48])).set_index("rare_class")
    assert high.loc[9, "level"].verdict == "agrees" and high.loc[9, "paired"] == "confirmed"
    assert high.loc[9, "confirmed"]
    noisy = mnist.confirm_mnist(_mnist_runs([0.95, 0.96, 0.50], [0.50, 0.52, 0.90])).set_index("rare_class")
    assert noisy.loc[9, "fed_cvar_avg"] > noisy.loc[9, "fedavg"]
    assert noisy.loc[9, "paired"] == "not testable at this scale" and not noisy.loc[9, "confirmed"]
    low = mnist.confirm_mnist(_mnist_runs([0.50, 0.52, 0.48], [0.40, 0.41, 0.39])).set_index("rare_class")
    assert low.loc[9, "level"].verdict == "differs" and not low.loc[9, "confirmed"]
    checks = items.mnist(mnist.confirm_mnist(_mnist_runs([0.95, 0.96, 0.94], [0.5, 0.52, 0.48])))
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
    assert out.loc["9", "cvar_minus_step"] == pytest.approx(1.8)
    assert out.loc["9", "fedavg_larger_step"] == pytest.approx(42.2)
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
                    base = dict(round=100, method=method, alpha=alpha, gamma=alpha, seed=seed, pattern_frac=r,
                                rounds=100)
                    rows += [dict(base, metric="test_acc_class", value=0.5 + shift, **{"class": 9}),
                             dict(base, metric="test_acc_class", value=0.97, **{"class": 8}),
                             dict(base, metric="test_acc", value=0.9 - shift, **{"class": -1})]
        return pd.DataFrame(rows)
    out = diagnosis.scaling_by_seed(runs(0.0), runs(0.2))
    assert sorted(set(out.loc[0.9].index.get_level_values("quantity"))) == ["class 9", "overall"]
    assert sorted(set(out.loc[0.8].index.get_level_values("quantity"))) == ["class 8", "class 9", "overall"]
    assert out.loc[(0.9, "class 9", 0), ("Fed-CVaR-Avg", "authors'")] == pytest.approx(70.0)


# ------------------------------------------------------------------------------------- the long horizon
def _long_configs():
    from flkit.papers import cvar
    return cvar.run_configs(diagnosis.long_horizon(cvar.settings("mnist", "paper")))


def _long_table(base9: float, per_1000: float, rounds: int = 8000, every: int = 100) -> pd.DataFrame:
    """A made-up run: class-9 accuracy base9 + per_1000 * round / 1000 (a straight line, so the mean over a
    window is its value at the window's middle round), every other class 0.95, overall 0.9 + 0.001 * round / 1000."""
    rows = []
    for rnd in range(0, rounds + 1, every):
        rows.append(dict(round=rnd, metric="test_acc", value=0.9 + 1e-6 * rnd, **{"class": -1}))
        rows += [dict(round=rnd, metric="test_acc_class", value=base9 + per_1000 * rnd / 1000 if c == 9 else 0.95,
                      **{"class": c}) for c in range(10)]
    return pd.DataFrame(rows)


def _long_store(tmp_path, lines: dict[tuple[str, int], tuple[float, float]]):
    """A Store with the long-horizon runs of `lines` ((method, seed) -> (base9, per_1000)) and a decoy: the
    page's 4000-round FedAvg run of seed 0 (a different config), which must not be read."""
    from flkit.papers import cvar
    from flkit.results import Store
    store = Store(tmp_path / "mnist")
    by = {(c["method"], c["seed"]): c for c in _long_configs()}
    for (method, seed), (b, k) in lines.items():
        c = by.get((method, seed)) or dict(by[(method, 0)], seed=seed)
        store.save(c, _long_table(b, k))
    page = [c for c in cvar.run_configs(cvar.settings("mnist", "paper")) if c["seed"] == 0 and c["method"] == "fedavg"]
    store.save(page[0], _long_table(0.99, 0.0, rounds=4000))
    return store


def test_long_horizon_settings_are_the_ledgers_runs():
    """The paper profile's long-horizon runs are exactly those the ledger item cvar-mnist-horizon computes
    (the same store keys), Fig. 3's setting only, FedAvg and Fed-CVaR-Avg at alpha = gamma = 0.3, 8000 rounds."""
    from flkit import owed
    from flkit.papers import cvar
    from flkit.results import config_key
    item = next(i for i in owed.ITEMS if i.id == "cvar-mnist-horizon")
    assert "--rounds 8000" in item.command and "settings=[0.9]" in item.command and "--seeds 0 1 2" in item.command
    ledger = cvar.run_configs(cvar.settings("mnist", "paper", ram="random-draw", settings=[0.9], seeds=[0, 1, 2],
                                            rounds=8000))
    configs = _long_configs()
    assert sorted(map(config_key, configs)) == sorted(map(config_key, ledger))
    assert {(c["method"], c["alpha"], c["rounds"], c["pattern_frac"]) for c in configs} == {
        ("fedavg", 1.0, 8000, 0.9), ("fed-cvar-avg", 0.3, 8000, 0.9)}
    assert sorted({c["seed"] for c in configs}) == [0, 1, 2]


def test_horizon_effect_reads_both_windows_of_the_same_run(tmp_path):
    """Windows of the last 10 %: rounds 3600-4000 and 7200-8000 (every 100 rounds here), whose means on a
    straight line are its values at rounds 3800 and 7600; seed 2 has FedAvg only and is left out; the page's
    4000-round run of seed 0 is not read."""
    store = _long_store(tmp_path, {("fedavg", 0): (0.40, 0.005), ("fed-cvar-avg", 0): (0.45, 0.010),
                                   ("fedavg", 1): (0.50, 0.000), ("fed-cvar-avg", 1): (0.48, 0.020),
                                   ("fedavg", 2): (0.40, 0.0)})
    runs = diagnosis.horizon_runs(store)
    assert sorted(set(runs["seed"])) == [0, 1] and set(runs["rounds"]) == {8000}
    out = diagnosis.horizon_effect(store)
    rare = out[out["quantity"] == "9"].set_index("seed")
    assert list(rare.index) == [0, 1] and (rare["read_at"] == 4000).all() and (rare["rounds"] == 8000).all()
    assert rare.loc[0, "fedavg_read"] == pytest.approx(40 + 0.5 * 3.8)
    assert rare.loc[0, "fedavg_end"] == pytest.approx(40 + 0.5 * 7.6)
    assert rare.loc[0, "fedavg_change"] == pytest.approx(1.9)
    assert rare.loc[0, "fed_cvar_avg_read"] == pytest.approx(45 + 3.8)
    assert rare.loc[0, "fed_cvar_avg_change"] == pytest.approx(3.8)
    assert rare.loc[1, "fed_cvar_avg_end"] == pytest.approx(48 + 2 * 7.6)
    assert rare.loc[0, "gain_end"] == pytest.approx((45 + 7.6) - (40 + 3.8))      # paired within seed 0
    assert rare.loc[1, "gain_end"] == pytest.approx((48 + 15.2) - 50)
    assert rare.loc[1, "gain_read"] == pytest.approx((48 + 7.6) - 50)
    overall = out[out["quantity"] == "overall"].set_index("seed")
    assert overall.loc[0, "fedavg_change"] == pytest.approx(0.1 * 3.8) and len(out) == 4
    checks = diagnosis.horizon_checks(out)
    # FedAvg's changes 1.9 and 0: mean 0.95, 2 se 1.9 (inside); Fed-CVaR-Avg's 3.8 and 7.6: mean 5.7 > 2 se 3.8
    assert [c.verdict for c in checks[:2]] == ["not testable at this scale", "contradicted"]
    assert checks[1].ours == pytest.approx(5.7) and checks[1].margin == pytest.approx(3.8)
    gain = checks[2]
    assert gain.ours == pytest.approx(((45 + 7.6) - (40 + 3.8) + (48 + 15.2) - 50) / 2)
    w = diagnosis.horizon_words(out, checks)
    assert w["seeds"] == "2 of 3" and w["fed_end"] == "46.9 %" and w["cv_read"] == "52.2 %"   # (48.8 + 55.6) / 2
    assert w["cv_change"] == "+5.7 ± 3.8 points" and w["v_cv"] == "contradicted" and w["v_gain"] == gain.verdict


def test_horizon_checks_follow_the_slopes_rule_and_the_paired_rule(tmp_path):
    """FedAvg rising by 0.2 points per 1000 rounds (times 1 + 0.005 seed) in three seeds: changes of 0.76 points
    from window to window with a tiny spread, still rising: "levelled off" contradicted; Fed-CVaR-Avg flat
    (changes exactly 0): not testable at this scale; Fed-CVaR-Avg 10 points above FedAvg at the end in every
    seed: confirmed."""
    lines = {}
    for seed in range(3):
        lines[("fedavg", seed)] = (0.30 + 0.001 * seed, 0.002 + 1e-5 * seed)
        lines[("fed-cvar-avg", seed)] = (0.30 + 0.001 * seed + 0.1 + 0.0152 + 1e-5 * seed * 7.6, 0.0)
    out = diagnosis.horizon_effect(_long_store(tmp_path, lines))
    fed_ch = out.loc[out["quantity"] == "9", "fedavg_change"].to_numpy()
    assert fed_ch == pytest.approx([0.76 * (1 + 0.005 * s) for s in range(3)])
    gain = out.loc[out["quantity"] == "9", "gain_end"].to_numpy()
    assert gain == pytest.approx([10.0] * 3)
    v = {c.what.split(":")[0] + (" gain" if "above" in c.what else ""): c.verdict
         for c in diagnosis.horizon_checks(out)}
    assert list(v.values()) == ["contradicted", "not testable at this scale", "confirmed"]
    w = diagnosis.horizon_words(out, diagnosis.horizon_checks(out))
    assert w["seeds"] == "3 of 3" and w["v_fed"] == "contradicted" and w["v_gain"] == "confirmed"
    assert "levelled off by round 4000: FedAvg contradicted" in w["reading"]


def test_one_seed_is_not_testable_and_says_so(tmp_path):
    store = _long_store(tmp_path, {("fedavg", 0): (0.40, 0.005), ("fed-cvar-avg", 0): (0.45, 0.010)})
    out = diagnosis.horizon_effect(store)
    checks = diagnosis.horizon_checks(out)
    assert len(checks) == 3 and all(c.verdict == "not testable at this scale" for c in checks)
    assert checks[0].ours == pytest.approx(1.9) and "one seed" in checks[0].rule      # ours: the mean change
    assert checks[2].ours == pytest.approx((45 + 7.6) - (40 + 3.8))
    assert checks[2].rule.startswith("needs at least two seeds")
    w = diagnosis.horizon_words(out, checks)
    assert w["seeds"] == "1 of 3" and w["fed_change"] == "+1.9 points" and "one seed" in w["reading"]
    assert "not testable at this scale" in w["reading"]
    assert "from 41.9 % (the window ending at round 4000)" in w["numbers"]


def test_no_stored_run_gives_every_key_and_no_check(tmp_path):
    from flkit.results import Store
    for store in (Store(tmp_path / "none"), _long_store(tmp_path, {("fedavg", 0): (0.4, 0.0)})):
        assert diagnosis.horizon_runs(store).empty
        out = diagnosis.horizon_effect(store)
        assert out.empty and list(out.columns)[:3] == ["r", "quantity", "seed"]
        assert diagnosis.horizon_checks(out) == []
        w = diagnosis.horizon_words(out, [])
        full = diagnosis.horizon_words(*(lambda e: (e, diagnosis.horizon_checks(e)))(diagnosis.horizon_effect(
            _long_store(tmp_path / "full", {("fedavg", 0): (0.4, 0.0), ("fed-cvar-avg", 0): (0.4, 0.0)}))))
        assert set(w) == set(full) and w["seeds"] == "0 of 3" and "still to run" in w["reading"]
    with pytest.raises(ValueError, match="last_frac"):
        diagnosis.horizon_effect(Store(tmp_path / "none"), last_frac=0)


def test_every_glue_key_of_the_horizon_paragraph_exists_on_the_empty_path():
    import json
    import re
    from pathlib import Path
    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks/cvar/mnist.ipynb").read_text())
    md = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    used = {m for m in re.findall(r"\{glue:text\}`(hz_[^`]+)`", md)}
    have = {f"hz_{k}" for k in diagnosis.horizon_words(diagnosis.horizon_effect(None, df=pd.DataFrame()), [])}
    assert used and not (used - have), sorted(used - have)


def test_horizon_checks_are_filed_under_the_4000_round_item(tmp_path):
    from flkit.papers import scorecard
    lines = {(m, seed): (0.4 + 0.01 * seed + (0.05 if m != "fedavg" else 0), 0.001 * (seed + 1))
             for m in ("fedavg", "fed-cvar-avg") for seed in range(3)}
    hz = diagnosis.horizon_checks(diagnosis.horizon_effect(_long_store(tmp_path, lines)))
    base = items.mnist(mnist.confirm_mnist(_mnist_runs([0.95, 0.96, 0.94], [0.5, 0.52, 0.48])))
    got = items.mnist(mnist.confirm_mnist(_mnist_runs([0.95, 0.96, 0.94], [0.5, 0.52, 0.48])), horizon=hz)
    assert got[items.MNIST_HORIZON_ITEM] == hz and items.MNIST_HORIZON_ITEM not in base
    assert set(got) - {items.MNIST_HORIZON_ITEM} == set(base)
    assert hz[2].verdict == "confirmed" and all(c.scale == "" for c in hz)     # the page's scale
    assert scorecard.page_verdicts("003",
                                   {items.MNIST_HORIZON_ITEM: hz})[items.MNIST_HORIZON_ITEM] in scorecard.VERDICTS


def test_horizon_figure_draws_one_line_per_run_and_the_pages_horizon(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lines = {(m, seed): (0.4, 0.0) for m in ("fedavg", "fed-cvar-avg") for seed in range(2)}
    fig = diagnosis.horizon_figure(diagnosis.horizon_runs(_long_store(tmp_path, lines)))
    ax = fig.axes[0]
    runs = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 2]
    vertical = [ln for ln in ax.get_lines() if len(ln.get_xdata()) == 2 and ln.get_xdata()[0] == ln.get_xdata()[1]]
    assert len(runs) == 8 and [ln.get_xdata()[0] for ln in vertical] == [4000]   # each run: evaluations and EMA
    assert all(ln.get_ydata() == pytest.approx([40.0] * 81) for ln in runs)      # a constant run's EMA is itself
    assert len([ln for ln in runs if not ln.get_label().startswith("_")]) == 4
    plt.close(fig)
