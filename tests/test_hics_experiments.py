"""HiCS-FL FMNIST training page (flkit.papers.hics.experiments): profiles, smoothing, rounds to target, the
five methods through fl.run."""
import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.signal import savgol_filter

from flkit import fl, models
from flkit.papers.hics import experiments as X
from flkit.tasks import EngineTask


def test_profiles():
    for name in X.PROFILES:
        assert X.profile(name)["rounds"] >= 13
    assert X.profile("reduced")["model"] == "logreg" and X.profile("paper")["model"] == "hics_fmnist_paper"
    p = X.profile("paper")
    assert (p["clients"], p["k"], p["epochs"], p["batch_size"], p["lr"], p["rounds"]) == (50, 5, 2, 64, 0.001, 200)
    with pytest.raises(ValueError, match="unknown profile"):
        X.profile("huge")
    with pytest.raises(ValueError, match="settings"):
        X.profile("reduced", settings=["(4)"])
    with pytest.raises(ValueError, match="clients"):
        X.profile("reduced", clients=12)
    with pytest.raises(ValueError, match="k must"):
        X.profile("reduced", k=60)
    with pytest.raises(ValueError, match="model"):
        X.profile("reduced", model="resnet")
    with pytest.raises(ValueError, match="lr"):
        X.profile("reduced", lr=-1.0)


def test_jobs_of_reduced_profile():
    js = X.jobs(X.profile("reduced"))
    groups = pd.Series([j["group"] for j in js]).value_counts().to_dict()
    assert groups == {"main": 9, "divfl": 3, "lr_alt": 1}
    assert all(j["methods"] == ["random", "pow-d", "CS", "HiCS-FL"] and j["lr"] == 0.001 for j in js if j["group"] == "main")
    assert [(j["setting"], j["seed"]) for j in js if j["group"] == "divfl"] == [("(2)", 0), ("(2)", 1), ("(2)", 2)]
    assert len({str(sorted(j.items())) for j in js}) == len(js)
    assert X.split_alphas("(3)") == [0.001] * 5
    assert X.split_alphas("(1)") == [0.001, 0.002, 0.005, 0.01, 0.5]


@pytest.mark.parametrize("window,order,n", [(13, 3, 201), (5, 2, 30), (13, 3, 13), (7, 0, 40)])
def test_savgol_matches_scipy(window, order, n):
    y = np.random.default_rng(window + n).normal(size=n).cumsum()
    np.testing.assert_allclose(X.savgol(y, window, order), savgol_filter(y, window, order), rtol=0, atol=1e-10)


def test_savgol_rejects_bad_window():
    with pytest.raises(ValueError, match="window"):
        X.savgol(np.zeros(10), 13, 3)
    with pytest.raises(ValueError, match="window"):
        X.savgol(np.zeros(30), 12, 3)


def test_rounds_to_target_exact():
    r = np.arange(201)
    step = np.where(r >= 37, 0.8, 0.1)
    assert X.rounds_to_target(step, 0.75, smooth=False) == 37.0
    assert math.isnan(X.rounds_to_target(step, 0.81, smooth=False))
    cubic = (r / 200.0) ** 3                      # kept exactly by a cubic Savitzky-Golay filter
    assert X.rounds_to_target(cubic, 0.125 - 1e-9) == 100.0
    assert X.rounds_to_target(cubic, 0.125 + 1e-9) == 101.0
    assert X.rounds_to_target(cubic, 0.5, rounds=r * 2) == float(2 * np.flatnonzero(cubic >= 0.5 - 1e-12)[0])


def _tiny_task():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(200) % 3
    x = torch.randn(200, 1, 2, 2, generator=g) + y.view(-1, 1, 1, 1).float()
    clients = [np.arange(i, 200, 10) for i in range(10)]
    return EngineTask(models.logreg(4, 3), x, y, clients, x[:50], y[:50], batch_size=8, epochs=1, local_lr=0.1,
                      train_metrics=True)


def test_five_methods_run_and_repeat():
    cfg = dict(k=2, rounds=6)
    out = []
    for _ in range(2):
        task = _tiny_task()
        res = fl.run(task, X.algorithms(task, cfg, X.METHODS), seeds=[3], rounds=6, every=1)
        out.append(res.tidy())
    assert set(out[0]["method"]) == set(X.METHODS)
    pd.testing.assert_frame_equal(out[0], out[1])
    last = out[0][(out[0]["round"] == 6) & (out[0]["metric"] == "train_loss")]
    assert np.isfinite(last["value"]).all() and len(last) == 5


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown methods"):
        X.algorithms(_tiny_task(), dict(k=2, rounds=6), ["oracle"])


def test_table1_cells():
    rows = []
    for m, hit in zip(X.METHODS, (20, 10, 40, None, 5)):
        for seed in (0, 1):
            acc = np.where(np.arange(31) >= (hit or 99), 0.9, 0.1)
            rows += [dict(group="main", setting="(2)", method=m, seed=seed, round=t, metric="test_acc", value=v)
                     for t, v in enumerate(acc)]
    t1 = X.table1(pd.DataFrame(rows), 0.5, 30)
    assert t1.loc["DivFL", "ours: rounds to 0.750"] == "not reached in 30"
    assert t1.loc["random", "document: rounds to 0.75"] == 149
    assert t1.loc["HiCS-FL", "document: speed-up"] == "2.5x" and t1.loc["pow-d", "document: speed-up"] == "1.8x"


def test_claim_checks_include_divfl_only_with_hics_seeds():
    rows, var = [], []
    for s in ("(1)", "(2)"):
        for m, base in (("random", 100), ("pow-d", 120), ("CS", 90), ("HiCS-FL", 60), ("DivFL", 150)):
            if m == "DivFL" and s != "(2)":
                continue
            for seed in (0, 1, 2):
                rows.append(dict(group="divfl" if m == "DivFL" else "main", setting=s, method=m, seed=seed,
                                 rounds=float(base + seed)))
                var.append(dict(setting=s, method=m, seed=seed, fluctuation=0.01 * base, late_loss=0.5))
    rt, vr = pd.DataFrame(rows), pd.DataFrame(var)
    whats = [c.what for c in X.claim_checks(rt, vr, 200)]
    assert sum("DivFL" in w for w in whats) == 2 and all("setting (2)" in w for w in whats if "DivFL" in w)
    assert len(whats) == 2 * 3 * 2 + 2 + 1
    short = rt[~((rt.method == "DivFL") & (rt.seed > 0))]                 # DivFL with one seed: left out
    assert not any("DivFL" in c.what for c in X.claim_checks(short, vr[~((vr.method == "DivFL") & (vr.seed > 0))], 200))
