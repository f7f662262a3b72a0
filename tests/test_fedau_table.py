"""FedAU's main table (flkit.papers.fedau.table, with the data and the document's numbers of
flkit.papers.fedau.common): settings, the document's numbers, the runs' independence from their batch, the
claim checks, the step-size tuning and the CNN spot-check (the cutoff study: tests/test_fedau_cutoff.py)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from flkit import aggregate, fl
from flkit.papers import claims
from flkit.papers.fedau import common, cutoff, table as T


def test_profiles_and_errors():
    s = T.profile("paper")
    assert (s["clients"], s["rounds"], s["local_steps"], s["batch"], s["seeds"]) == (250, 10000, 5, 16, [1, 2, 3, 4, 5])
    assert T.model_name(s) == "fedau_fmnist" and T.model_name(T.profile("paper", dataset="cifar10")) == "fedau_cifar10"
    assert len(T.configs(s)) == 7 * 3 * 5
    for bad, msg in [(dict(rounds=0), "rounds"), (dict(dataset="mnist"), "dataset"), (dict(patterns=["x"]), "patterns"),
                     (dict(seeds=[1, 1]), "repeated"), (dict(window=20000), "window"), (dict(p_min=1.5), "p_min")]:
        with pytest.raises(ValueError, match=msg):
            T.profile("paper", **bad)
    with pytest.raises(ValueError, match="unknown profile"):
        T.profile("papr")


def test_step_sizes_are_the_readme_pairs():
    assert {m: (g, e) for m, (_, _, g, e) in T.METHODS.items()} == {
        "FedAU (K = inf)": (0.1, 1.0), "FedAU (K = 50)": (0.1, 1.0), "Average participating": (0.0562, 1.78),
        "Average all": (0.1, 10.0), "FedVarp": (0.0562, 1.0), "MIFA": (0.0562, 1.0), "Known p": (0.0562, 1.0)}
    assert T.rule("fedau", 50) == aggregate.FedAU(50) and isinstance(T.rule("known_p"), aggregate.KnownP)


def test_reference_is_the_documents_table():
    r = common.REFERENCE
    assert len(r) == 3 * 7 * 4 * 2 and not r.duplicated(["pattern", "method", "dataset", "split"]).any()
    pick = lambda *k: r[(r.pattern == k[0]) & (r.method == k[1]) & (r.dataset == k[2]) & (r.split == k[3])]  # noqa: E731
    assert tuple(pick("cyclic", "MIFA", "cifar10", "test")[["mean", "sd"]].iloc[0]) == (70.6, 1.1)
    assert tuple(pick("bernoulli", "FedAU (K = 50)", "cinic10", "train")[["mean", "sd"]].iloc[0]) == (66.7, 0.3)
    assert tuple(pick("markov", "Known p", "svhn", "test")[["mean", "sd"]].iloc[0]) == (88.6, 0.2)


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    s = T.profile("smoke", patterns=["bernoulli"], seeds=[1, 2], rounds=6, eval_every=3, window=3)
    root = tmp_path_factory.mktemp("fedau")
    return s, root, T.sweep(s, root=root, progress=False, device="cpu")


def test_a_run_does_not_depend_on_its_batch(smoke_runs):
    s, root, df = smoke_runs
    c = next(c for c in T.configs(s) if c["method"] == "Known p" and c["seed"] == 2)
    alone = T.run_batch([c], "cpu")[0]
    together = df[(df.method == "Known p") & (df.seed == 2)][["round", "metric", "value"]].reset_index(drop=True)
    a = alone.sort_values(["metric", "round"]).value.to_numpy()
    b = together.sort_values(["metric", "round"]).value.to_numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert set(alone.metric) == {"test_loss", "test_acc", "train_loss", "train_acc"}


def test_stored_runs_are_read_back(smoke_runs):
    s, root, df = smoke_runs
    again = T.sweep(s, root=root, progress=False, compute_missing=False)
    assert again.attrs == {"computed": 0, "stored": len(T.configs(s))}
    with pytest.raises(RuntimeError, match="not stored"):
        T.sweep(T.profile("smoke", seeds=[7], patterns=["bernoulli"]), root=root, progress=False, compute_missing=False)


def _frame(per_seed: dict, s) -> pd.DataFrame:
    rows = [dict(pattern=p, method=m, K=None, p_min=0.02, seed=k, round=s["rounds"], metric="test_acc", value=v / 100)
            for (p, m), vals in per_seed.items() for k, v in enumerate(vals)]
    return pd.DataFrame(rows)


def test_checks_follow_the_rule():
    s = T.profile("smoke", patterns=["bernoulli"])
    base = np.array([80.0, 81.0, 79.5, 80.5, 80.2])
    df = _frame({("bernoulli", "FedAU (K = inf)"): base, ("bernoulli", "FedAU (K = 50)"): base - 2.0,
                 ("bernoulli", "Average participating"): base - 3.0 + np.array([0.1, -0.1, 0.2, 0.0, -0.2]),
                 ("bernoulli", "Average all"): base + np.array([1.0, -1.0, 0.5, -0.5, 0.1]),
                 ("bernoulli", "Known p"): base - 0.1}, s)
    got = {c.what.split(": ", 1)[1]: c.verdict for c in T.checks(df, s)}
    assert got == {"FedAU (K = inf) >= Average participating": "confirmed",
                   "FedAU (K = inf) >= Average all": "not testable at this scale",
                   "FedAU (K = inf) within 1 point of known p": "confirmed",
                   "FedAU (K = 50) >= FedAU (K = inf)": "contradicted"}


def test_claims_rule():
    c = claims.agree("x", [77.0, 77.5, 76.8, 77.2, 77.1], 77.1, ref_sd=0.4)
    assert c.verdict == "agrees" and c.margin == pytest.approx(2 * math.hypot(claims.se([77.0, 77.5, 76.8, 77.2, 77.1]),
                                                                               0.4 / math.sqrt(5)))
    assert claims.agree("x", [70.0, 70.1, 69.9], 77.1, ref_sd=0.4).verdict == "differs"
    assert claims.compare("a", [1, 2, 3], [0, 1, 2]).verdict == "confirmed"          # differences all 1, se 0
    assert claims.compare("a", [1], [0]).verdict == "not testable at this scale"
    assert claims.close("a", [1.0, 1.1, 0.9], [1.0, 1.0, 1.0], threshold=0.5).verdict == "confirmed"
    assert claims.close("a", [3.0, 3.1, 2.9], [1.0, 1.0, 1.0], threshold=0.5).verdict == "contradicted"


def test_p_per_seed_reaches_the_rule():
    """fl.run's p given per seed: each run's KnownP divides by its own seed's p."""
    from flkit.tasks import QuadraticTask, quadratic_task  # noqa: F401
    task = quadratic_task(n=6, dim=3, seed=0)
    mask = {s: np.ones((3, 6), dtype=bool) for s in (0, 1)}
    p = {0: np.full(6, 0.5), 1: np.full(6, 0.25)}
    both = fl.run(task, {"k": fl.Algorithm(aggregate.KnownP(), lr=0.1)}, seeds=[0, 1], rounds=3, availability=mask, p=p)
    for s in (0, 1):
        one = fl.run(task, {"k": fl.Algorithm(aggregate.KnownP(), lr=0.1)}, seeds=[s], rounds=3, availability=mask,
                     p=p[s])
        torch.testing.assert_close(both.final_w[s], one.final_w[0])
    assert not torch.allclose(both.final_w[0], both.final_w[1])
    with pytest.raises(ValueError, match="no entry for seed 1"):
        fl.run(task, {"k": fl.Algorithm(aggregate.KnownP())}, seeds=[0, 1], rounds=1, availability=mask, p={0: p[0]})


def test_sweep_keeps_the_table_methods_apart():
    s = T.profile("paper")
    groups = {}
    for c in T.configs(s):
        groups.setdefault(repr(sorted(T.sweep_group(c).items())), set()).add(c["method"])
    assert len(groups) == 6                                     # 3 patterns x (memoryless, tables)
    assert {frozenset(m) for m in groups.values()} == {frozenset({"MIFA", "FedVarp"}),
                                                        frozenset(set(T.METHODS) - {"MIFA", "FedVarp"})}


def test_differences_reports_every_method_against_fedau_with_the_documents_columns():
    """Each method minus FedAU (K = inf), paired over seeds, with the direction by the two-se rule, beside the
    document's differences on its four data sets (typed once in common._DOC)."""
    s = dict(rounds=100, window=50, patterns=["bernoulli"])
    rows = []
    base = {1: 0.80, 2: 0.82, 3: 0.81}
    shift = {"FedAU (K = inf)": 0.0, "MIFA": 0.02, "Average all": -0.001}
    noise = {1: 0.0, 2: 0.004, 3: -0.004}
    for m, d in shift.items():
        for seed, b in base.items():
            v = b + d + (noise[seed] if m == "Average all" else 0.0)
            rows.append(dict(pattern="bernoulli", method=m, seed=seed, metric="test_acc", round=100, value=v))
    out = T.differences(pd.DataFrame(rows), s).set_index("method")
    assert set(out.index) == {"MIFA", "Average all"}
    assert out.loc["MIFA", "ours"] == pytest.approx(2.0) and out.loc["MIFA", "direction"] == "ahead"
    assert out.loc["Average all", "ours"] == pytest.approx(-0.1)
    assert out.loc["Average all", "direction"] == "inside noise"
    assert out.loc["MIFA", "document, CIFAR-10"] == pytest.approx(77.5 - 77.1)
    assert out.loc["MIFA", "document, CIFAR-100"] == pytest.approx(48.4 - 52.3)
    assert out.loc["MIFA", "document_ahead"] == "1 of 4"


def test_ours_label_names_what_departs_from_the_document():
    assert T.ours_label(T.profile("reduced")) == "Fashion-MNIST, logistic regression, 1,000 rounds (ours)"
    paper = T.profile("paper")
    assert T.ours_label(paper) == "Fashion-MNIST (ours)"
    assert T.ours_label(T.profile("reduced"), steps="retuned") == (
        "Fashion-MNIST, logistic regression, 1,000 rounds, retuned step sizes (ours)")


# ------------------------------------------------------------------------------------- step-size tuning
def test_the_grid_is_the_lattice_10_to_the_k_over_4():
    for k in range(-16, 13):
        assert T.step(k) == float(f"{10 ** (k / 4):.3g}") and T.lattice_index(T.step(k)) == k
    # the authors' published values are lattice points, so their stored runs are points of the grid
    assert [T.lattice_index(v) for v in (0.0562, 0.1, 1.0, 1.78, 10.0)] == [-5, -4, 0, 1, 4]
    with pytest.raises(ValueError, match="not on the lattice"):
        T.lattice_index(0.05)
    with pytest.raises(ValueError, match="lattice index"):
        T.step(0.5)
    assert T.grid(range(-5, -3), range(0, 2)) == [(0.0562, 1.0), (0.0562, 1.78), (0.1, 1.0), (0.1, 1.78)]


def test_tuning_runs_span_the_stated_ranges_apart_from_the_table():
    s = T.profile("reduced")
    ranges = T.first_ranges(s)
    # every method but K = 50 (which takes K = inf's pair), one lattice step either side of the authors' pair
    assert set(ranges) == set(T.METHODS) - {"FedAU (K = 50)"}
    for m, (g, e) in ranges.items():
        kg, ke = T.lattice_index(T.METHODS[m][2]), T.lattice_index(T.METHODS[m][3])
        assert (list(g), list(e)) == ([kg - 1, kg, kg + 1], [ke - 1, ke, ke + 1])
    cs = T.tune_configs(s, ranges)
    assert len(cs) == sum(len(g) * len(e) for g, e in ranges.values()) * len(s["tune_seeds"])
    for m, (g, e) in ranges.items():
        got = {(c["gamma"], c["eta"]) for c in cs if c["method"] == m}
        assert got == {(float(f"{10 ** (i / 4):.3g}"), float(f"{10 ** (j / 4):.3g}")) for i in g for j in e}
        assert got == set(T.grid(g, e)) and (T.METHODS[m][2], T.METHODS[m][3]) in got
    assert {c["pattern"] for c in cs} == {"bernoulli"} and {c["seed"] for c in cs} == {0}
    assert not {c["seed"] for c in cs} & set(s["seeds"])
    assert all((c["clients"], c["rounds"], c["validation"]) == (250, 1000, 10000) for c in cs)
    with pytest.raises(ValueError, match="disjoint"):
        T.profile("reduced", seeds=[0, 1])


def _scores():
    # made up: validation accuracy peaks at (0.178, 1.0) for FedAU; the test accuracy, wrongly read, at (0.0562, 1.78)
    rows = []
    for g in (0.0562, 0.1, 0.178):
        for e in (0.562, 1.0, 1.78):
            val = 80 - 3 * abs(T.lattice_index(g) + 3) - 2 * abs(T.lattice_index(e))
            test = 80 - 3 * abs(T.lattice_index(g) + 5) - 2 * abs(T.lattice_index(e) - 1)
            rows.append(dict(method="FedAU (K = inf)", gamma=g, eta=e, val_acc=float(val), test_acc=float(test),
                             train_loss=1.0))
    return pd.DataFrame(rows)


def _picks_the_validation_argmax(rule) -> bool:
    r = rule(_scores(), 0.1).set_index("method").loc["FedAU (K = inf)"]
    return (r.gamma, r.eta) == (0.178, 1.0)


def test_select_takes_the_validation_argmax_and_never_the_test_accuracy():
    assert _picks_the_validation_argmax(T.select)
    # a deliberately wrong rule that reads the test accuracy fails the same test
    wrong = lambda sc, tol: T.select(sc.assign(val_acc=sc["test_acc"]), tol)  # noqa: E731
    assert not _picks_the_validation_argmax(wrong)
    # the rule reads only val_acc: dropping every other metric changes nothing
    assert _picks_the_validation_argmax(lambda sc, tol: T.select(sc[["method", "gamma", "eta", "val_acc"]], tol))
    # ties (within tol) go to the point nearest the authors' (0.1, 1.0); outside tol the argmax wins
    sc = _scores()
    sc.loc[(sc.gamma == 0.1) & (sc.eta == 1.0), "val_acc"] = 80 - 0.05
    assert tuple(T.select(sc, 0.1).iloc[0][["gamma", "eta"]]) == (0.1, 1.0)
    assert tuple(T.select(sc, 0.01).iloc[0][["gamma", "eta"]]) == (0.178, 1.0)
    # a diverged run (-inf) is never chosen; all diverged: a clear error
    sc = _scores().assign(val_acc=-np.inf)
    with pytest.raises(ValueError, match="diverged"):
        T.select(sc, 0.1)


def test_an_edge_selection_widens_its_range_only():
    ranges = {"FedAU (K = inf)": (range(-5, -2), range(-1, 2))}
    chosen = pd.DataFrame([dict(method="FedAU (K = inf)", gamma=0.178, eta=1.0)])   # k = -3 (edge), 0 (inside)
    assert T._extend(ranges, chosen) == {"FedAU (K = inf)": (range(-5, -1), range(-1, 2))}
    inside = pd.DataFrame([dict(method="FedAU (K = inf)", gamma=0.1, eta=1.0)])
    assert T._extend(ranges, inside) == ranges


def test_the_tuned_table_differs_from_the_authors_only_in_step_sizes():
    from flkit.results import config_key
    s = T.profile("reduced")
    tuned = {m: (T.step(T.lattice_index(g) + 2), T.step(T.lattice_index(e) - 1))
             for m, (_, _, g, e) in T.METHODS.items()}
    a, b = T.configs(s), T.configs(s, steps=tuned)
    assert len(a) == len(b) == 105
    for x, y in zip(a, b):
        steps = ("gamma", "eta")
        assert {k: v for k, v in x.items() if k not in steps} == {k: v for k, v in y.items() if k not in steps}
        assert (y["gamma"], y["eta"]) == tuned[x["method"]] != (x["gamma"], x["eta"])
    # the authors' pairs give the stored runs' configs unchanged
    same = {m: (g, e) for m, (_, _, g, e) in T.METHODS.items()}
    assert [config_key(c) for c in T.configs(s, steps=same)] == [config_key(c) for c in a]
    with pytest.raises(ValueError, match="unknown methods"):
        T.configs(s, steps={"FedAvg": (0.1, 1.0)})


def test_the_validation_split_holds_training_images_out_and_never_the_test_set():
    held, kept = common.validation_split(100, 20)
    assert len(held) == 20 and len(kept) == 80
    assert not set(held) & set(kept) and set(held) | set(kept) == set(range(100))
    s = T.profile("smoke")
    c = T.tune_configs(s, T.first_ranges(s))[0]
    x, y, xv, yv = common.load_data(c, "cpu")
    x0, y0, xt, yt = common.load_data(dict(c, validation=None), "cpu")
    h, k = common.validation_split(len(y0), s["tune_validation"])
    assert torch.equal(xv, x0[h]) and torch.equal(x, x0[k]) and len(yv) == s["tune_validation"]
    assert xv.shape[0] != xt.shape[0] or not torch.equal(xv, xt)


def test_tune_on_a_tiny_profile(tmp_path):
    s = T.profile("smoke", patterns=["bernoulli"], rounds=4, eval_every=2, window=2, tune_extend=1)
    res = T.tune(s, root=tmp_path, device="cpu")
    assert set(res["steps"]) == set(T.METHODS) and res["steps"]["FedAU (K = 50)"] == res["steps"]["FedAU (K = inf)"]
    for m, (g, e) in res["ranges"].items():
        sc = res["scores"][res["scores"].method == m]
        assert set(zip(sc.gamma, sc.eta)) == set(T.grid(g, e))
        assert res["steps"][m] in set(T.grid(g, e))
    # read back from the store; the page's table of the study has a row per method
    again = T.tune(s, root=tmp_path, device="cpu", compute_missing=False)
    assert again["steps"] == res["steps"]
    assert list(T.tuning_table(res, s).index) == list(T.METHODS)
    # the page's numbers of the study: picking by validation accuracy again differs from the selection nowhere
    v = T.tuning_values(res, s, res["selected"].set_index("method"))
    assert v["n_tuned"] == len(res["selected"]) == len(T.METHODS) - 1 and v["n_grid"] == len(res["scores"])
    assert v["n_loss_differs"] == 0
    assert v["n_moved"] + len(v["kept"].split(", ")) * (v["kept"] != "none") == v["n_tuned"]
    assert v["n_smaller"] <= v["n_moved"] and v["max_gain"] >= 0 and v["max_gain_method"] in T.METHODS


# ------------------------------------------------------------------------------------- the CNN spot-check
def test_cnn_spot_profile_is_the_authors_cnn_at_a_reduced_scale():
    from flkit.results import config_key
    s = T.profile("cnn-spot")
    assert T.model_name(s) == "fedau_fmnist"
    assert (s["rounds"], s["seeds"], s["patterns"]) == (1000, [1, 2], ["bernoulli"])
    assert s["methods"] == ["FedAU (K = inf)", "FedAU (K = 50)", "MIFA", "Average participating", "Known p"]
    cs = T.configs(s)
    assert len(cs) == 5 * 2 and {c["model"] for c in cs} == {"fedau_fmnist"}
    # the authors' published pairs, not retuned: every run is the table's config without steps of ours
    assert all((c["gamma"], c["eta"]) == T.METHODS[c["method"]][2:] for c in cs)
    assert [config_key(c) for c in T.configs(s, steps={m: T.METHODS[m][2:] for m in s["methods"]})] == \
        [config_key(c) for c in cs]
    # its cutoff study adds no run (so --study all costs nothing more), and it shares no run with the other profiles
    keys = {config_key(c) for c in cs}
    assert {config_key(c) for c in cutoff.configs(cutoff.profile("cnn-spot"))} <= keys
    for other in ("reduced", "paper"):
        assert not keys & {config_key(c) for c in T.configs(T.profile(other))}
    assert T.spot_scale(s) == "reduced: 1,000 of 10,000 rounds, 2 seeds, Bernoulli only, 5 of the 7 methods"
    assert T.spot_scale(T.profile("paper")) == "10,000 rounds, 5 seeds"
    assert T.store_for(s).name == T.store_for(T.profile("reduced")).name      # the book's store, as the page reads it


@pytest.mark.parametrize("bad,msg",
                         [(dict(model="logreg"), "authors' CNN"), (dict(methods=["FedAU (K = 3)"]), "methods"),
                                     (dict(methods=[]), "methods"), (dict(seeds=[1, 1]), "repeated"),
                                     (dict(rounds=0), "rounds"), (dict(window=2000), "window"),
                                     (dict(patterns=["periodic"]), "patterns"), (dict(p_min=-0.1), "p_min"),
                                     (dict(cycles=3), "unknown setting")])
def test_cnn_spot_bad_settings_fail_before_any_work(bad, msg, monkeypatch):
    monkeypatch.setattr(T, "run_batch", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(ValueError, match=msg):
        T.profile("cnn-spot", **bad)
    from flkit import sweep
    (k, v), = bad.items()
    with pytest.raises(SystemExit) as e:
        sweep.main(["fedau", "--profile", "cnn-spot", "--device", "cpu", "--set", f"{k}={v!r}".replace("'", "")])
    assert e.value.code == 2


# smoke-sized: the CNN spot-check's methods and seeds on 8 clients, 4 rounds, a few hundred images
TINY_SPOT = dict(clients=8, rounds=4, eval_every=2, window=2, train_subset=400, test_subset=100, tune_validation=100)


@pytest.fixture(scope="module")
def spot_runs(tmp_path_factory):
    s = T.profile("cnn-spot", **TINY_SPOT)
    root = tmp_path_factory.mktemp("fedau_spot")
    before = T.spot_runs(s, root=root)
    df = T.sweep(s, root=root, device="cpu", progress=False, cpu_threads=1)
    return s, root, before, df


def test_cnn_spot_runs_end_to_end_and_read_back(spot_runs):
    s, root, before, df = spot_runs
    assert before[0] is None and before[1:] == (0, 10)
    assert df.attrs == {"computed": 10, "stored": 0}
    again, done, total = T.spot_runs(s, root=root)                # the page's reading: nothing computed
    assert (done, total) == (10, 10) and again.attrs == {"computed": 0, "stored": 10}
    key = ["method", "seed", "round", "metric"]
    a, b = df.sort_values(key).reset_index(drop=True), again.sort_values(key).reset_index(drop=True)
    np.testing.assert_allclose(a["value"].to_numpy(), b["value"].to_numpy(), rtol=0, atol=1e-12)
    assert set(again["model"]) == {"fedau_fmnist"} and set(again["round"]) == {0, 2, 4}
    assert sorted(again.groupby("method").seed.unique().map(sorted).map(tuple)) == [(1, 2)] * 5
    # model=None and the CNN's name are the same runs; logistic regression is refused by this profile
    named = T.sweep(T.profile("cnn-spot", **TINY_SPOT, model="fedau_fmnist"), root=root, progress=False,
                    compute_missing=False)
    assert named.attrs["computed"] == 0


def test_cnn_spot_differences_are_fedau_minus_each_method(spot_runs):
    s, root, _, df = spot_runs
    d = T.spot_differences(df, s)
    assert list(d.method) == ["FedAU (K = 50)", "MIFA", "Average participating", "Known p"]
    assert (d.seeds == 2).all() and set(d.pattern) == {"Bernoulli"}
    ps = T.per_seed(df, s)
    for _, r in d.iterrows():
        diff = ps.loc[("bernoulli", "FedAU (K = inf)")].to_numpy() - ps.loc[("bernoulli", r.method)].to_numpy()
        assert r["FedAU minus method (points)"] == pytest.approx(diff.mean(), abs=1e-9)       # not method minus FedAU
        assert r["2 s.e."] == pytest.approx(abs(diff[0] - diff[1]), abs=1e-9)   # two standard errors of two values
        c = claims.compare("x", -diff, np.zeros(2))                # the reversed difference reverses the direction
        flip = {"confirmed": "FedAU behind", "contradicted": "FedAU ahead"}.get(c.verdict, "inside noise")
        assert r.direction == flip
    # beside itself: every direction and sign agrees
    both = T.spot_differences(df, s, beside=(df, s, "same"))
    assert (both["same: direction"] == both.direction).all()
    text = T.spot_summary(both, 10, 10, label="same")
    assert "in 4 of 4, the sign of the mean in 4 of 4" in text["status"] and text["status"].startswith("All 10 runs")
    r = both.set_index("method").loc["MIFA"]                         # each difference read out, both models
    m, e = r["FedAU minus method (points)"], r["2 s.e."]
    assert f"MIFA {m:+.1f} ± {e:.1f} (same {m:+.1f} ± {e:.1f})" in text["found"]
    assert "differs" not in text["status"]
    flipped = both.copy()                                          # one direction moved: named, with both readings
    flipped.loc[flipped.method == "MIFA", "same: direction"] = "FedAU behind"
    moved = T.spot_summary(flipped, 10, 10, label="same")["found"]
    assert "in 3 of 4" in moved and "differs for MIFA (" in moved and "FedAU behind with same)" in moved
    assert moved.count("differs for") == 1 and "Known p (" not in moved
    missing = T.spot_summary(None, 3, 10)
    assert set(missing) == set(text) and "still to run at this scale (3 of 10 stored)" in missing["status"]


def test_sweep_estimate_stores_nothing(tmp_path, monkeypatch, capsys):
    """python -m flkit.sweep fedau --estimate times a trial of each pending batch (the 8 memoryless runs, the 2 MIFA
    runs apart) and projects over the runs' exact client updates and evaluations; nothing is stored."""
    from flkit import sweep
    from flkit.papers.fedau import sweeps as mod
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path))
    sets = [a for k, v in TINY_SPOT.items() for a in ("--set", f"{k}={v}")]
    assert sweep.main(["fedau", "--profile", "cnn-spot", "--study", "all", "--device", "cpu", "--threads", "1",
                       "--estimate", "--estimate-rounds", "2", *sets]) == 0
    out = capsys.readouterr().out
    assert "batch of 8 runs" in out and "batch of 2 runs (MIFA)" in out and "10 runs pending in 2 batch(es)" in out
    assert not list(tmp_path.rglob("*.csv"))
    s = T.profile("cnn-spot", **TINY_SPOT)
    total = sum(mod.client_updates(c) for c in T.configs(s))
    x, y, _, _ = common.load_data(T.configs(s)[0], "cpu")
    assert total == sum(int(common.mask(c, common.split(c, y.numpy())[1]).sum()) for c in T.configs(s))
    assert f"{sum(mod.client_updates(c) for c in T.configs(s) if c['rule'] == 'mifa'):,} client updates" in out
