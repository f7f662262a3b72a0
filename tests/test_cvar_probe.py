"""Fed-CVaR-Avg (document 003): the numbers and verdicts the book shows, on hand-computed cases where the
answer is known and cases where a claim must be rejected; the stored final model; the rows a run records;
resuming a real (MNIST) batch; the settings' validation."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from flkit import models
from flkit.papers import cvar
from flkit.papers.cvar import common, fmnist_table, mnist, ram, runs, synthetic_2d
from flkit.results import Store, canonical_order

quiet = lambda _: None  # noqa: E731


# ------------------------------------------------------------------------------------ Table 1 (fmnist)
def _ours(cells: dict) -> pd.DataFrame:
    """An `ours` frame (gamma, alpha, quantity, seed, value) from {(gamma, alpha, quantity): [per seed]}."""
    rows = [dict(gamma=g, alpha=a, quantity=q, seed=s, value=v)
            for (g, a, q), vals in cells.items() for s, v in enumerate(vals)]
    return pd.DataFrame(rows)


def _document_as_ours(**changes) -> pd.DataFrame:
    """The document's Table 1 read as our result (one seed), with some cells changed:
    changes[(gamma, alpha, quantity)] = [values per seed]."""
    ref = fmnist_table.table1_reference()
    cells = {(r.gamma, r.alpha, r.quantity): [r.value] for r in ref.itertuples()}
    cells.update(changes.get("cells", {}))
    return _ours(cells)


def _verdicts(ours: pd.DataFrame) -> pd.DataFrame:
    return fmnist_table.confirm_table1(ours).set_index("claim")


CLAIMS = ["best overall cell is (gamma, alpha) = (0.1, 0.1)",
          "pattern 2: from ~60 % (FedAvg) to > 71 % at (0.1, 0.1)",
          "pattern 1 also improves over FedAvg at (0.1, 0.1)",
          "pattern 2 is harder than pattern 1 for FedAvg",
          "every risk-aware cell (gamma < 1, alpha < 1) beats FedAvg overall"]


def test_confirm_table1_holds_on_the_documents_own_table():
    v = _verdicts(_document_as_ours())
    assert list(v.index) == CLAIMS and v["confirmed"].all()
    assert v["ours"].tolist() == ["(0.1, 0.1): 86.55", "60.25 -> 71.68", "84.51 -> 88.68", "60.25 vs 84.51",
                                  "12 of 12 (means), 12 confirmed"]


@pytest.mark.parametrize("cells, rejected, ours", [
    # pattern 2 at (0.1, 0.1): mean over seeds 70.5 (> 61, < 71): the "> 71 %" claim is rejected
    ({(0.1, 0.1, "pattern 2"): [69.0, 72.0]}, 1, "60.25 -> 70.50"),
    # ... and above 71 but not above FedAvg's
    ({(0.1, 0.1, "pattern 2"): [71.5], (1.0, 1.0, "pattern 2"): [72.0]}, 1, "72.00 -> 71.50"),
    # one risk-aware cell below FedAvg overall: 11 of 12
    ({(0.3, 0.3, "overall"): [84.0]}, 4, "11 of 12 (means), 11 confirmed"),
    # every risk-aware cell but one below FedAvg: 1 of 12 (the claim says every cell)
    ({(g, a, "overall"): [84.0] for g in (0.0, 0.1, 0.2, 0.3) for a in (0.3, 0.2, 0.1) if (g, a) != (0.1, 0.1)},
     4, "1 of 12 (means), 1 confirmed"),
    # the best overall cell elsewhere
    ({(0.0, 0.2, "overall"): [86.0, 88.0]}, 0, "(0.0, 0.2): 87.00"),
    # pattern 1 not better than FedAvg at (0.1, 0.1)
    ({(0.1, 0.1, "pattern 1"): [84.51]}, 2, "84.51 -> 84.51"),
    # FedAvg's pattern 2 easier than its pattern 1
    ({(1.0, 1.0, "pattern 1"): [59.0]}, 3, "60.25 vs 59.00"),
])
def test_confirm_table1_rejects_each_claim_on_its_own(cells, rejected, ours):
    v = _verdicts(_document_as_ours(cells=cells))
    assert v["confirmed"].tolist() == [i != rejected for i in range(5)]
    assert v.loc[CLAIMS[rejected], "ours"] == ours


def test_confirm_table1_says_not_testable_inside_the_noise():
    """Five seeds whose spread (+-4 points, in a different order in every cell) dwarfs the differences of
    the document's means: the claims on small differences are not testable, the 24-point gap is confirmed."""
    g = np.random.default_rng(0)
    ref = fmnist_table.table1_reference()
    offsets = np.array([-4.0, -2.0, 0.0, 2.0, 4.0])      # mean 0: every cell's mean is the document's value
    cells = {(r.gamma, r.alpha, r.quantity): list(r.value + g.permutation(offsets)) for r in ref.itertuples()}
    v = _verdicts(_ours(cells))
    assert v.loc[CLAIMS[0], "verdict"] == "not testable at this scale"      # 86.55 vs 86.5: inside the noise
    assert v.loc[CLAIMS[4], "verdict"] == "not testable at this scale"      # 1-2 points against sd 5
    assert v.loc[CLAIMS[3], "verdict"] == "confirmed"                       # 24 points apart
    assert set(v["verdict"]) <= {"confirmed", "contradicted", "not testable at this scale"}
    assert (v["confirmed"] == (v["verdict"] == "confirmed")).all()


def _stored_fmnist(values: dict) -> pd.DataFrame:
    """Rows as `Store.load_many` gives them for fmnist runs: values[(alpha, gamma)] = per seed
    (overall, class 8, class 9), in [0, 1], at the last round; a round-0 evaluation that must be ignored."""
    rows = []
    for (a, g), per_seed in values.items():
        for seed, (acc, c8, c9) in enumerate(per_seed):
            key = f"{a}-{g}-{seed}"
            for rnd, scale in ((0, 0.1), (250, 1.0)):
                for metric, cls, v in (("test_acc", -1, acc), ("test_acc_class", 8, c8), ("test_acc_class", 9, c9),
                                       ("test_acc_class", 0, 0.99)):
                    rows.append(dict(run_key=key, method=common.method_of(a, g), alpha=a, gamma=g, seed=seed,
                                     pattern_frac=0.8, rounds=250, round=rnd, metric=metric, value=v * scale,
                                     **{"class": cls}))
    return pd.DataFrame(rows)


def test_table1_ours_maps_classes_8_and_9_to_patterns_1_and_2():
    df = _stored_fmnist({(1.0, 1.0): [(0.85, 0.84, 0.60), (0.84, 0.86, 0.62)],
                         (0.1, 0.1): [(0.87, 0.88, 0.72), (0.86, 0.90, 0.70)]})
    ours = fmnist_table.table1_ours(df)
    # 5 gammas x 4 alphas of the document's grid; only (0.1, 0.1) and the 8 risk-neutral cells have runs
    assert len(ours) == 9 * 3 * 2
    got = ours.set_index(["gamma", "alpha", "quantity", "seed"])["value"]
    assert got[(0.1, 0.1, "overall", 0)] == pytest.approx(87.0, abs=1e-12)
    assert got[(0.1, 0.1, "pattern 1", 1)] == pytest.approx(90.0, abs=1e-12)   # class 8
    assert got[(0.1, 0.1, "pattern 2", 1)] == pytest.approx(70.0, abs=1e-12)   # class 9
    for g, a in [(0.0, 1.0), (0.3, 1.0), (1.0, 0.3), (1.0, 1.0)]:             # risk-neutral: the FedAvg run
        assert got[(g, a, "pattern 2", 0)] == pytest.approx(60.0, abs=1e-12)
    cmp = fmnist_table.table1_compare(ours).set_index(["gamma", "alpha", "quantity"])
    row = cmp.loc[(0.1, 0.1, "pattern 2")]
    assert row["ours"] == pytest.approx(71.0) and row["n"] == 2
    assert row["ours sd"] == pytest.approx(math.sqrt(2.0))                    # sd of (72, 70), ddof=1
    assert row["document"] == 71.681 and row["document sd"] == 2.419
    assert row["difference"] == pytest.approx(71.0 - 71.681)
    assert np.isnan(cmp.loc[(0.2, 0.3, "overall"), "ours"])                  # no run: NaN, not dropped
    wide = fmnist_table.table1_wide(cmp)
    assert wide.loc[0.1, (0.1, "pattern 2")] == "71.00 ± 1.41 | 71.68 (-0.68)"
    assert wide.loc[0.2, (0.3, "overall")] == "n/a (not run) | 86.17"
    assert fmnist_table.table1_wide(cmp, decimals=1).loc[0.1, (0.1, "pattern 2")] == "71.0 ± 1.4 | 71.7 (-0.7)"
    assert list(wide.columns) == [(a, q) for a in fmnist_table.TABLE1_ALPHAS for q in fmnist_table.QUANTITIES]
    # the claims read from it: pattern 2 at (0.1, 0.1) is 71.0, not above 71
    v = _verdicts(ours)
    assert v.loc[CLAIMS[1], "ours"] == "61.00 -> 71.00" and not v.loc[CLAIMS[1], "confirmed"]
    assert v.loc[CLAIMS[2], "ours"] == "85.00 -> 89.00" and v.loc[CLAIMS[2], "confirmed"]


# ------------------------------------------------------------------------------ Figs. 3-4 (mnist)
def _stored_mnist(curves: dict, T: int = 100) -> pd.DataFrame:
    """curves[(r, method, metric, class)] = per seed {round: value in [0, 1]}."""
    rows = []
    for (r, method, metric, cls), per_seed in curves.items():
        a, g = (1.0, 1.0) if method == "fedavg" else (0.3, 0.3)
        for seed, by_round in enumerate(per_seed):
            for rnd, v in by_round.items():
                rows.append(dict(run_key=f"{r}-{method}-{seed}", method=method, alpha=a, gamma=g, seed=seed,
                                 pattern_frac=r, rounds=T, round=rnd, metric=metric, value=v, **{"class": cls}))
    return pd.DataFrame(rows)


def _late(v80, v90, v95, v100):
    return {0: 0.1, 80: v80, 90: v90, 95: v95, 100: v100}


def test_final_accuracies_window_by_hand():
    df = _stored_mnist({(0.9, "fedavg", "test_acc", -1): [_late(0.0, 0.3, 0.6, 0.9)]})
    last = common.final_accuracies(df).set_index("seed")["value"]
    assert last[0] == pytest.approx(90.0)                        # the last round only
    win = common.final_accuracies(df, 0.1).set_index("seed")["value"]
    assert win[0] == pytest.approx(60.0)                         # rounds >= 90: (30 + 60 + 90) / 3
    win = common.final_accuracies(df, 0.2).set_index("seed")["value"]
    assert win[0] == pytest.approx(45.0)                         # rounds >= 80: (0 + 30 + 60 + 90) / 4


def test_confirm_mnist_by_hand_with_claims_that_hold_and_fail():
    flat = lambda v: _late(0.0, v, v, v)  # noqa: E731  (round 80 outside the last 10 %: must not count)
    curves = {
        # Fig. 3(c): r = 0.9, class 9: FedAvg 51, proposed 84: confirmed, better in every seed
        (0.9, "fedavg", "test_acc_class", 9): [flat(0.50), flat(0.52)],
        (0.9, "fed-cvar-avg", "test_acc_class", 9): [flat(0.85), flat(0.83)],
        # Fig. 4(c): r = 0.8, class 8: proposed 75, above FedAvg but more than 2 se below 80 %: rejected
        (0.8, "fedavg", "test_acc_class", 8): [flat(0.60), flat(0.62)],
        (0.8, "fed-cvar-avg", "test_acc_class", 8): [flat(0.76), flat(0.74)],
        # Fig. 4(d): r = 0.8, class 9: proposed 85 > FedAvg 60 on average, but worse in seed 1: the paired
        # difference (+25, se 30) is inside the noise, so "above FedAvg" is not confirmed
        (0.8, "fedavg", "test_acc_class", 9): [flat(0.30), flat(0.90)],
        (0.8, "fed-cvar-avg", "test_acc_class", 9): [flat(0.85), flat(0.85)],
        # overall: better at r = 0.9, worse at r = 0.8
        (0.9, "fedavg", "test_acc", -1): [flat(0.90), flat(0.92)],
        (0.9, "fed-cvar-avg", "test_acc", -1): [flat(0.93), flat(0.95)],
        (0.8, "fedavg", "test_acc", -1): [flat(0.90), flat(0.90)],
        (0.8, "fed-cvar-avg", "test_acc", -1): [flat(0.88), flat(0.90)],
    }
    got = mnist.confirm_mnist(_stored_mnist(curves))
    assert got["figure"].tolist() == ["Fig. 3(c)", "Fig. 4(c)", "Fig. 4(d)", "Fig. 3(b)", "Fig. 4(b)"]
    np.testing.assert_allclose(got["fedavg"], [51.0, 61.0, 60.0, 91.0, 90.0])
    np.testing.assert_allclose(got["fed_cvar_avg"], [84.0, 75.0, 85.0, 94.0, 89.0])
    assert got["confirmed"].tolist() == [True, False, False, True, False]
    assert got["better_every_seed"].tolist() == [True, True, False, True, False]
    assert got["seeds"].tolist() == [2] * 5


# -------------------------------------------------------------------------------------- Fig. 2
def _stored_2d(acc: dict) -> pd.DataFrame:
    """acc[(panel, method)] = per seed [accuracy of class 0, 1, ...] at the last round (round 0: chance)."""
    assignment = {"a": ((0,), (1,), (2,)), "b": ((0,), (1,), (2, 3)), "c": ((0, 1),) * 24 + ((2,),) * 6}
    rows = []
    for (panel, method), per_seed in acc.items():
        for seed, classes in enumerate(per_seed):
            for rnd in (0, 4000):
                for c, v in enumerate(classes):
                    rows.append(dict(run_key=f"{panel}-{method}-{seed}", panel=panel, authors_model=False,
                                     method=method, seed=seed, assignment=assignment[panel], rounds=4000,
                                     round=rnd, metric="test_acc_class", value=v if rnd else 0.33,
                                     **{"class": c}))
    return pd.DataFrame(rows)


def test_fig2_accuracy_and_verdict_by_hand():
    df = _stored_2d({
        # (a): FedAvg fails on class 2 (30 %), the proposed method classifies all (worst class 94 %)
        ("a", "fedavg"): [[1.0, 1.0, 0.2], [1.0, 0.98, 0.4]],
        ("a", "fed-cvar-avg"): [[0.95, 0.99, 0.92], [0.97, 0.99, 0.96]],
        # (b): FedAvg fails on class 2, but the proposed method's class 3 is at 85 %: rejected
        ("b", "fedavg"): [[1.0, 1.0, 0.3, 0.8], [1.0, 1.0, 0.3, 0.8]],
        ("b", "fed-cvar-avg"): [[0.99, 0.99, 0.95, 0.85], [0.99, 0.99, 0.95, 0.85]],
        # (c): FedAvg does not fail on the rare users' class 2 (60 %): rejected
        ("c", "fedavg"): [[0.99, 0.99, 0.6], [0.99, 0.99, 0.6]],
        ("c", "fed-cvar-avg"): [[0.99, 0.99, 0.97], [0.99, 0.99, 0.97]],
    })
    acc = synthetic_2d.fig2_accuracy(df).set_index(["panel", "method", "class"])
    assert acc.loc[("a", "fedavg", 2), "mean"] == pytest.approx(30.0)
    assert acc.loc[("a", "fedavg", 2), "sd"] == pytest.approx(100 * math.sqrt(0.02))   # sd(0.2, 0.4), ddof=1
    assert acc.loc[("a", "fedavg", 1), "sd"] == pytest.approx(100 * math.sqrt(0.0002))
    assert (acc["seeds"] == 2).all()
    v = synthetic_2d.confirm_fig2(df).set_index("panel")
    assert v["rare_classes"].tolist() == ["[2]", "[2, 3]", "[2]"]
    assert v["fedavg_fails"].tolist() == [True, True, False]
    assert v["proposed_classifies_all"].tolist() == [True, False, True]
    assert v["confirmed"].tolist() == [True, False, False]
    np.testing.assert_allclose(v["fedavg_rare"], [30.0, 55.0, 60.0])               # (b): mean of 30 and 80
    np.testing.assert_allclose(v["proposed_worst_class"], [94.0, 85.0, 97.0])


# --------------------------------------------------------------------------- the stored final model
def _param_rows(model: torch.nn.Module, T: int = 7) -> pd.DataFrame:
    """The "param" rows run_batch writes (round T, name, flat index in "class"), with other metrics."""
    rows = [(T, "param", float(v), i, k) for k, p in model.named_parameters()
            for i, v in enumerate(p.detach().reshape(-1).tolist())]
    rows += [(0, "test_acc", 0.5, -1, ""), (T, "test_acc", 0.9, -1, ""), (T, "t", 0.1, -1, "")]
    return pd.DataFrame(rows, columns=["round", "metric", "value", "class", "name"])


def test_params_from_table_restores_every_tensor_whatever_the_row_order(tmp_path):
    torch.manual_seed(0)
    model = models.build("cvar_2d", num_classes=3, hidden=5)
    want = {k: p.detach().clone() for k, p in model.named_parameters()}
    table = _param_rows(model)
    shuffled = table.sample(frac=1.0, random_state=1).reset_index(drop=True)
    for tab in (table, shuffled, table.iloc[::-1]):
        got = runs.params_from_table(tab, model)
        assert list(got) == list(want)
        for k in want:
            assert got[k].shape == (1, *want[k].shape)
            torch.testing.assert_close(got[k][0], want[k], rtol=0, atol=0)
    # through the store (8 significant digits): the same model to float32 rounding
    store = Store(tmp_path)
    store.save({"run": 1}, shuffled)
    got = runs.params_from_table(store.load({"run": 1}), model)
    for k in want:
        torch.testing.assert_close(got[k][0], want[k], rtol=2e-7, atol=1e-12)


# ---------------------------------------------------------------------------- the rows of a run
def _smoke_2d(**kw):
    s = cvar.settings("synthetic_2d", "smoke", panels=["b"], authors_model_seeds=[], **kw)
    return cvar.run_configs(s)


def test_rows_recorded_at_the_evaluation_and_threshold_rounds():
    """t every t_every rounds, the test metrics every eval_every rounds, both at rounds 0 and T also
    when T is not a multiple (T = 7, eval_every = 3, t_every = 2); the final model's params at T."""
    cfgs = [dict(c, eval_every=3, t_every=2) for c in _smoke_2d(rounds=7, seeds=[0])]
    tabs = cvar.run_batch(cfgs, "cpu", progress=False, log=quiet)
    model = cvar.build_model(cfgs[0])
    for tab in tabs:
        rounds = lambda m: sorted(set(tab.loc[tab["metric"] == m, "round"]))  # noqa: E731
        assert rounds("test_acc") == rounds("test_loss") == [0, 3, 6, 7]
        assert rounds("test_acc_class") == [0, 3, 6, 7]
        assert tab[tab["metric"] == "test_acc_class"].groupby("round").size().eq(4).all()  # panel b: 4 classes
        assert rounds("t") == [0, 2, 4, 6, 7]
        assert rounds("param") == [7]
        assert (tab["metric"] == "param").sum() == sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------- resume in a real setting
def test_mnist_batch_killed_mid_run_resumes_to_the_same_tables(tmp_path, monkeypatch):
    """The MNIST smoke configs (real data, the paper's MLP, both r, FedAvg and Fed-CVaR-Avg) killed at
    round 4 of 7 with a checkpoint after every round, resumed: the same tables as an uninterrupted run,
    and the same stored bytes."""
    from flkit.tasks import EngineTask
    try:
        cfgs = cvar.run_configs(cvar.settings("mnist", "smoke", seeds=[1], rounds=7))
        ref = cvar.run_batch(cfgs, "cpu", progress=False, log=quiet)
    except FileNotFoundError as e:  # flkit.datasets.DatasetNotFoundError
        pytest.skip(f"MNIST not available: {e}")
    assert len(cfgs) == 4 and {(c["pattern_frac"], c["alpha"]) for c in cfgs} == {(0.9, 1.0), (0.9, 0.3),
                                                                                  (0.8, 1.0), (0.8, 0.3)}
    real = EngineTask.client_updates

    def killed_at_round_4(self, w, active, t, runs):
        if t == 4:
            raise KeyboardInterrupt("simulated kill")
        return real(self, w, active, t, runs)

    monkeypatch.setattr(EngineTask, "client_updates", killed_at_round_4)
    with pytest.raises(KeyboardInterrupt):
        cvar.run_batch(cfgs, "cpu", progress=False, log=quiet, checkpoint_dir=tmp_path, checkpoint_every_s=0)
    monkeypatch.setattr(EngineTask, "client_updates", real)
    (ckpt,) = tmp_path.glob("batch-*.pt")
    assert torch.load(ckpt, weights_only=False)["t"] == 4
    out = cvar.run_batch(cfgs, "cpu", progress=False, log=quiet, checkpoint_dir=tmp_path, checkpoint_every_s=0)
    assert not list(tmp_path.glob("batch-*.pt"))
    for c, a, b in zip(cfgs, ref, out):
        pd.testing.assert_frame_equal(a, b)
        assert sorted(set(a.loc[a["metric"] == "test_acc", "round"])) == [0, 3, 6, 7]
        assert sorted(set(a.loc[a["metric"] == "t", "round"])) == list(range(8))
        if c["alpha"] == 1.0:
            assert (a.loc[a["metric"] == "t", "value"] == 0).all()   # FedAvg: t stays at t^1 = 0
        else:
            assert (a.loc[(a["metric"] == "t") & (a["round"] > 0), "value"] != 0).all()
    s1, s2 = Store(tmp_path / "one"), Store(tmp_path / "two")
    for c, a, b in zip(cfgs, ref, out):
        s1.save(c, a.sample(frac=1.0, random_state=0))  # whatever order the rows come in
        s2.save(c, b)
        assert s1.path(c).read_bytes() == s2.path(c).read_bytes()
        pd.testing.assert_frame_equal(s1.load(c), canonical_order(a), check_exact=False, rtol=1e-7, atol=1e-12)


# ------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize("experiment, override, match", [
    ("mnist", dict(rounds=-5), "rounds must be an integer >= 1, got -5"),
    ("mnist", dict(rounds=0), "rounds must be an integer >= 1, got 0"),
    ("fmnist", dict(rounds=2.5), "rounds must be an integer >= 1, got 2.5"),
    ("synthetic_2d", dict(rounds=True), "rounds must be an integer >= 1 or None, got True"),
    ("mnist", dict(seeds=[]), r"seeds must be a non-empty list of distinct integers >= 0, got \[\]"),
    ("fmnist", dict(seeds=[0, 0]), "seeds must be a non-empty list of distinct integers"),
    ("synthetic_2d", dict(seeds=[-1]), "seeds must be a non-empty list"),
    ("fmnist", dict(alphas=[1.0, 0.0]), r"alphas must be a number in \(0, 1\], got 0.0"),
    ("fmnist", dict(alphas=[1.5]), r"alphas must be a number in \(0, 1\], got 1.5"),
    ("fmnist", dict(gammas=[-0.1]), r"gammas must be a number in \[0, 1\], got -0.1"),
    ("synthetic_2d", dict(gamma=1.5), r"gamma must be a number in \[0, 1\], got 1.5"),
    ("synthetic_2d", dict(alphas=[]), "alphas must be a non-empty list"),
    ("mnist", dict(cells=[[0.0, 0.3]]), r"cells alpha must be a number in \(0, 1\], got 0.0"),
    ("mnist", dict(cells=[[0.3, 1.2]]), r"cells gamma must be a number in \[0, 1\], got 1.2"),
    ("mnist", dict(cells=[]), "cells must be a non-empty list"),
    ("mnist", dict(settings=[0.9, 1.0]), r"settings must be a number in \(0, 1\), got 1.0"),
    ("fmnist", dict(frequent_frac=0.0), r"frequent_frac must be a number in \(0, 1\), got 0.0"),
    ("mnist", dict(lr_theta=0.0), r"lr_theta must be a number in \(0, inf\), got 0.0"),
    ("fmnist", dict(lr_t=-1e-4), r"lr_t must be a number in \[0, inf\)"),
    ("mnist", dict(epochs=0), "epochs must be an integer >= 1"),
    ("fmnist", dict(batch_size=0), "batch_size must be an integer >= 1"),
    ("mnist", dict(eval_every=0), "eval_every must be an integer >= 1"),
    ("mnist", dict(train_subset=-1), "train_subset must be an integer >= 1 or None"),
    ("synthetic_2d", dict(panels=["d"]), r"panels must be a non-empty list of \['a', 'b', 'c'\]"),
])
def test_settings_out_of_range_is_one_clear_error(experiment, override, match):
    with pytest.raises(ValueError, match=match):
        cvar.settings(experiment, "smoke", **override)


def test_settings_in_range_pass_and_unknown_names_fail():
    for e, profiles in common.PROFILES.items():
        for p in profiles:
            assert cvar.settings(e, p)["profile"] == p
    assert cvar.settings("fmnist", "smoke", alphas=[1.0, 1e-3], gammas=[0.0, 1.0], rounds=1)["rounds"] == 1
    with pytest.raises(ValueError, match="unknown experiment 'cifar'"):
        cvar.settings("cifar", "smoke")
    with pytest.raises(ValueError, match="unknown profile 'full' for mnist"):
        cvar.settings("mnist", "full")


def test_bad_settings_stop_a_sweep_and_a_batch_before_any_work(tmp_path):
    s = cvar.settings("mnist", "smoke")
    s["rounds"] = -5  # edited after `settings`
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got -5"):
        cvar.sweep(s, root=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())
    (c,) = _smoke_2d(seeds=[0], alphas=[0.1])
    for bad, match in ((dict(alpha=0.0), r"alpha must be in \(0, 1\]"),
                       (dict(gamma=-0.5), r"gamma must be in \[0, 1\]"),
                       (dict(rounds=0), "rounds must be an integer >= 1, got 0")):
        with pytest.raises(ValueError, match=match):
            cvar.run_batch([dict(c, **bad)], "cpu", progress=False, log=quiet, checkpoint_dir=tmp_path)
    assert not any(tmp_path.iterdir())


def test_split_summary_of_the_mnist_page():
    """Who holds what (the MNIST page's table): users 0-26 the common classes, 27-29 the rare ones
    (r = 0.9: class 9; r = 0.8: classes 8 and 9), each rare user a third of the rare samples (stratified,
    up to one per class), and the RAM mass of each group: the caption's 0.0107 + 0.0078 + 0.0053, divided by
    the sum of the authors' printed vector (1.0003)."""
    s = cvar.settings("mnist", "smoke", ram="authors")
    try:
        tab = runs.split_summary(s).set_index(["r", "group"])
    except FileNotFoundError as e:  # flkit.datasets.DatasetNotFoundError
        pytest.skip(f"MNIST not available: {e}")
    y = runs._image_data("mnist", s["train_subset"], s["test_subset"], "cpu")[1].numpy()
    assert list(tab.index) == [(0.9, "frequent"), (0.9, "rare"), (0.8, "frequent"), (0.8, "rare")]
    for r, rare in ((0.9, [9]), (0.8, [8, 9])):
        common = [c for c in range(10) if c not in rare]
        assert tab.loc[(r, "frequent"), "users"] == "0-26" and tab.loc[(r, "rare"), "users"] == "27-29"
        assert tab.loc[(r, "frequent"), "classes"] == str(common) and tab.loc[(r, "rare"), "classes"] == str(rare)
        counts = [int((y == c).sum()) for c in rare]
        lo, hi = sum(n // 3 for n in counts), sum(-(-n // 3) for n in counts)
        got = [int(v) for v in tab.loc[(r, "rare"), "samples_per_user"].split("-")]
        assert lo <= got[0] <= got[1] <= hi and sum(counts) in range(3 * got[0], 3 * got[1] + 1)
        rare_mass = 0.0238 / sum(ram.AUTHORS_RHO_K30)
        assert tab.loc[(r, "rare"), "rho_total"] == pytest.approx(rare_mass, abs=1e-12)
        assert tab.loc[(r, "frequent"), "rho_total"] == pytest.approx(1 - rare_mass, abs=1e-12)
    # the page's default, a random draw, keeps the caption's three values as they are
    drawn = runs.split_summary(cvar.settings("mnist", "smoke")).set_index(["r", "group"])
    assert drawn.loc[(0.9, "rare"), "rho_total"] == pytest.approx(0.0238, abs=1e-12)
