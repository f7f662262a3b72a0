"""HiCS-FL training comparisons (flkit.papers.hics.fmnist): profiles (Fashion-MNIST, CIFAR-10, CIFAR-100),
smoothing, rounds to target, the five methods through fl.run, the CIFAR smoke profile end to end on fake files."""
import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.signal import savgol_filter

from flkit import fl, models
from flkit.papers.hics import common, fmnist
from flkit.tasks import EngineTask


def test_profiles():
    for name in fmnist.PROFILES:
        assert fmnist.profile(name)["rounds"] >= 13
    assert fmnist.profile("reduced")["model"] == "logreg" and fmnist.profile("paper")["model"] == "hics_fmnist_paper"
    p = fmnist.profile("paper")
    assert (p["clients"], p["k"], p["epochs"], p["batch_size"], p["lr"], p["rounds"]) == (50, 5, 2, 64, 0.001, 200)
    with pytest.raises(ValueError, match="unknown profile"):
        fmnist.profile("huge")
    with pytest.raises(ValueError, match="settings"):
        fmnist.profile("reduced", settings=["(4)"])
    with pytest.raises(ValueError, match="clients"):
        fmnist.profile("reduced", clients=12)
    with pytest.raises(ValueError, match="k must"):
        fmnist.profile("reduced", k=60)
    with pytest.raises(ValueError, match="model"):
        fmnist.profile("reduced", model="resnet")
    with pytest.raises(ValueError, match="lr"):
        fmnist.profile("reduced", lr=-1.0)
    assert fmnist.profile("paper")["divfl_table1_rounds"] == 600
    assert fmnist.profile("reduced")["divfl_table1_rounds"] is None
    assert fmnist.profile("smoke")["divfl_table1_rounds"] is None
    for bad in (12, 600.0, True, "600"):
        with pytest.raises(ValueError, match=r"divfl_table1_rounds must be None .* an int >= 13"):
            fmnist.profile("reduced", divfl_table1_rounds=bad)
    longer = fmnist.jobs(fmnist.profile("paper", rounds=700))           # 600 < rounds: DivFL runs the common horizon
    assert {j["rounds"] for j in longer} == {700}
    assert fmnist.jobs(fmnist.profile("reduced", divfl_table1_rounds=200)) == fmnist.jobs(fmnist.profile("reduced"))


def test_jobs_of_reduced_profile():
    js = fmnist.jobs(fmnist.profile("reduced"))
    groups = pd.Series([j["group"] for j in js]).value_counts().to_dict()
    assert groups == {"main": 9, "divfl": 9, "lr_alt": 1, "powd_d": 3}
    # the pow-d diagnostic: the authors' candidate set d = 2K in Table 1's setting, paired with the main runs' seeds
    assert [(j["setting"], j["seed"], j["methods"], j["powd_d"]) for j in js if j["group"] == "powd_d"] == [
        ("(2)", s, ["pow-d"], 10) for s in (0, 1, 2)]
    assert all("powd_d" not in j for j in js if j["group"] != "powd_d")     # the stored jobs' keys unchanged
    assert all(j["methods"] == ["random", "pow-d", "CS", "HiCS-FL"] and j["lr"] == 0.001
               for j in js if j["group"] == "main")
    assert [(j["setting"], j["seed"]) for j in js if j["group"] == "divfl"] == [(s, i) for s in ("(1)", "(2)", "(3)")
                                                                              for i in (0, 1, 2)]
    assert len({str(sorted(j.items())) for j in js}) == len(js)
    assert common.split_alphas("(3)") == [0.001] * 5
    assert common.split_alphas("(1)") == [0.001, 0.002, 0.005, 0.01, 0.5]


def test_reduced_jobs_are_the_stored_ones():
    """The published page reads these runs from the book's store: a change of any job's config loses them."""
    from flkit import results
    store = results.book_store("hics")
    js = fmnist.jobs(fmnist.profile("reduced"))
    assert len(js) == 22 and all(store.done(j) for j in js)
    assert all(j["rounds"] == 200 for j in js)


def test_jobs_of_paper_profile():
    js = fmnist.jobs(fmnist.profile("paper"))
    assert len(js) == 21                                      # 9 main + 9 DivFL + the lr_alt run + 2 pow-d, d = 2K
    long = [(j["group"], j["setting"], j["seed"], j["methods"]) for j in js if j["rounds"] == 600]
    assert long == [("divfl", "(2)", s, ["DivFL"]) for s in (0, 1, 2)]
    assert all(j["rounds"] == 200 for j in js if j["rounds"] != 600)
    # client trainings: K per round for the four cheap methods; DivFL with the document's one-step gradient proxy:
    # the K selected plus N full-batch gradients, each one pass over a client's data (1/R of a training)
    assert all(j["divfl_proxy"] == "gradient" for j in js if j["group"] == "divfl")
    doc = fmnist.profile("paper", powd_d_seeds=[])             # the document's setting, without the diagnostic
    assert (fmnist.client_trainings(doc)
            == (9 * 4 + 2) * 5 * 200 + (6 * 200 + 3 * 600) * (5 + 50 / 2) == 128_000)
    assert fmnist.client_trainings(fmnist.profile("paper")) == 128_000 + 2 * 5 * 200
    # with the full-update proxy N + K (the probe trains every client, then the selected train)
    update = fmnist.profile("paper", divfl_proxy="update", powd_d_seeds=[])
    assert fmnist.client_trainings(update) == 38_000 + 3000 * 55 == 203_000
    # pow-d's loss probe, in probes of every client: d = N each round, the diagnostic's d = 2K a fifth of one
    assert fmnist.loss_probes(doc) == 3 * 3 * 200 and fmnist.loss_probes(fmnist.profile("paper")) == 1800 + 80


def test_divfl_proxy_is_part_of_the_store_key():
    """Every profile's DivFL uses the document's one-step gradient proxy, whose jobs carry divfl_proxy; the
    reduced profile's earlier full-update runs carry no key (their stored configs) and stay stored, so the two
    never share a key; a bad proxy is refused."""
    from flkit import results
    red = fmnist.profile("reduced")
    assert red["divfl_proxy"] == "gradient" == fmnist.profile("paper")["divfl_proxy"]
    grad = [j for j in fmnist.jobs(red) if j["group"] == "divfl"]
    upd = [j for j in fmnist.jobs(fmnist.profile("reduced", divfl_proxy="update")) if j["group"] == "divfl"]
    assert all("divfl_proxy" not in j for j in upd) and all(j["divfl_proxy"] == "gradient" for j in grad)
    assert not {results.config_key(j) for j in upd} & {results.config_key(j) for j in grad}
    store = results.book_store("hics")
    assert len(upd) == 9 and all(store.done(j) for j in upd)                # the labelled variant's runs
    main = [j for j in fmnist.jobs(fmnist.profile("reduced", divfl_proxy="update")) if j["group"] != "divfl"]
    assert main == [j for j in fmnist.jobs(red) if j["group"] != "divfl"]     # the other methods' keys do not move
    with pytest.raises(ValueError, match="divfl_proxy must be one of"):
        fmnist.profile("reduced", divfl_proxy="ideal")


@pytest.mark.parametrize("window,order,n", [(13, 3, 201), (5, 2, 30), (13, 3, 13), (7, 0, 40)])
def test_savgol_matches_scipy(window, order, n):
    y = np.random.default_rng(window + n).normal(size=n).cumsum()
    np.testing.assert_allclose(common.savgol(y, window, order), savgol_filter(y, window, order), rtol=0, atol=1e-10)


def test_savgol_rejects_bad_window():
    with pytest.raises(ValueError, match="window"):
        common.savgol(np.zeros(10), 13, 3)
    with pytest.raises(ValueError, match="window"):
        common.savgol(np.zeros(30), 12, 3)


def test_rounds_to_target_exact():
    r = np.arange(201)
    step = np.where(r >= 37, 0.8, 0.1)
    assert common.rounds_to_target(step, 0.75, smooth=False) == 37.0
    assert math.isnan(common.rounds_to_target(step, 0.81, smooth=False))
    cubic = (r / 200.0) ** 3                      # kept exactly by a cubic Savitzky-Golay filter
    assert common.rounds_to_target(cubic, 0.125 - 1e-9) == 100.0
    assert common.rounds_to_target(cubic, 0.125 + 1e-9) == 101.0
    assert common.rounds_to_target(cubic, 0.5, rounds=r * 2) == float(2 * np.flatnonzero(cubic >= 0.5 - 1e-12)[0])


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
        res = fl.run(task, fmnist.algorithms(task, cfg, common.METHODS), seeds=[3], rounds=6, every=1)
        out.append(res.tidy())
    assert set(out[0]["method"]) == set(common.METHODS)
    pd.testing.assert_frame_equal(out[0], out[1])
    last = out[0][(out[0]["round"] == 6) & (out[0]["metric"] == "train_loss")]
    assert np.isfinite(last["value"]).all() and len(last) == 5


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown methods"):
        fmnist.algorithms(_tiny_task(), dict(k=2, rounds=6), ["oracle"])


def test_table1_cells():
    rows = []
    for m, hit in zip(common.METHODS, (20, 10, 40, None, 5)):
        for seed in (0, 1):
            acc = np.where(np.arange(31) >= (hit or 99), 0.9, 0.1)
            rows += [dict(group="main", setting="(2)", method=m, seed=seed, round=t, metric="test_acc", value=v)
                     for t, v in enumerate(acc)]
    t1 = fmnist.table1(pd.DataFrame(rows), 0.5)
    assert t1.loc["DivFL", "ours: rounds to 0.750"] == "not reached in 30 rounds"
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
    whats = [c.what for c in fmnist.claim_checks(rt, vr, 200)]
    assert sum("DivFL" in w for w in whats) == 2 and all("setting (2)" in w for w in whats if "DivFL" in w)
    assert len(whats) == 2 * 3 * 2 + 2 + 1
    short = rt[~((rt.method == "DivFL") & (rt.seed > 0))]                 # DivFL with one seed: left out
    short_vr = vr[~((vr.method == "DivFL") & (vr.seed > 0))]
    assert not any("DivFL" in c.what for c in fmnist.claim_checks(short, short_vr, 200))


def test_claim_words_group_checks_by_claim_and_baseline():
    rows, var = [], []
    for s in ("(1)", "(2)", "(3)"):
        for m, base in (("random", 50), ("pow-d", 120), ("CS", 90), ("HiCS-FL", 60)):
            for seed in (0, 1, 2):
                rows.append(dict(group="main", setting=s, method=m, seed=seed, rounds=float(base + seed)))
                var.append(dict(setting=s, method=m, seed=seed, fluctuation=0.01 * base + 0.001 * seed * (m == "CS")))
    checks = fmnist.claim_checks(pd.DataFrame(rows), pd.DataFrame(var), 200)
    assert fmnist.claim_words(checks, "confirmed") == (
        "HiCS-FL reaches the target sooner than pow-d in settings (1), (2) and (3); HiCS-FL reaches the target "
        "sooner than CS in settings (1), (2) and (3); its training loss fluctuates less than pow-d's in settings (1), "
        "(2) and (3); its training loss fluctuates less than CS's in settings (1), (2) and (3)")
    assert fmnist.claim_words(checks, "contradicted") == (
        "HiCS-FL reaches the target sooner than random in settings (1), (2) and (3); its training loss fluctuates "
        "less than random's in settings (1), (2) and (3)")
    assert fmnist.claim_words(checks, "not testable at this scale") == (
        "HiCS-FL's speed-up over random larger in setting (1) than in (2); "
        "HiCS-FL's speed-up over random larger in setting (1) than in (3)")
    assert fmnist.claim_words([], "confirmed") == "none"


def _ramp(cross: int, rounds: int) -> np.ndarray:
    """A line through 0.7505 at round ``cross`` rising 0.001 a round: kept exactly by the cubic Savitzky-Golay
    filter, so the smoothed curve first reaches 0.75 at ``cross``."""
    return 0.7505 + 0.001 * (np.arange(rounds + 1) - cross)


def _rows(group, setting, method, seed, acc, loss):
    return [dict(group=group, setting=setting, method=method, seed=seed, round=t, metric=k, value=float(v))
            for k, vals in (("test_acc", acc), ("train_loss", loss)) for t, v in enumerate(vals)]


def test_powd_d_sets_the_candidates_and_stays_out_of_table1():
    """pow-d takes ``powd_d`` candidates where the job gives it (the authors' d = 2K), else the document's d = N; the
    diagnostic's runs (group "powd_d") never enter Table 1's pow-d row nor its checks."""
    task = _tiny_task()
    N = task.num_clients
    assert fmnist.algorithms(task, dict(k=2, rounds=6), ["pow-d"])["pow-d"].sampler.d == N
    assert fmnist.algorithms(task, dict(k=2, rounds=6, powd_d=3), ["pow-d"])["pow-d"].sampler.d == 3
    for bad in (1, 51, 10.0, True):
        with pytest.raises(ValueError, match=r"powd_d must be None .* an int in \[k = 5, clients = 50\]"):
            fmnist.profile("reduced", powd_d=bad)
    rows = []
    for seed in (0, 1):
        for m, cross in (("random", 149), ("pow-d", 79), ("CS", 114), ("HiCS-FL", 60)):
            rows += _rows("main", "(2)", m, seed, _ramp(cross + seed, 200), np.ones(201))
        rows += _rows("powd_d", "(2)", "pow-d", seed, _ramp(20, 200), np.ones(201))
    table = pd.DataFrame(rows)
    assert fmnist.table1(table, 0.75).loc["pow-d", "ours: rounds to 0.750"] == "80 ± 1"
    assert fmnist.table1_checks(table)["Table 1: FMNIST, rounds to 0.75, pow-d (ideal)"][0].ours == 79.5


def test_powd_job_runs_with_its_candidates_and_reports_its_wall_time():
    """The smoke profile's pow-d diagnostic job (d = 4 of 10 clients) runs through run_job, pow-d only, and
    its table carries the run's wall time (fl.Result.wall_s: every piece of a resumed run) for the store."""
    from flkit import datasets
    job = next(j for j in fmnist.jobs(fmnist.profile("smoke")) if j["group"] == "powd_d")
    t = fmnist.run_job(job, datasets.load("fashion-mnist"))
    assert set(t["method"]) == {"pow-d"} and t["round"].max() == job["rounds"] and job["powd_d"] == 4
    assert t.attrs["wall_time_s"] > 0


def test_powd_diagnostic_reads_both_candidate_sets_paired_by_seed():
    """powd_compare: per variant and seed the rounds to 0.75 (the smoothed crossing), the late accuracy (the raw mean
    of the last POWD_LATE rounds); powd_values: the paired late difference under claims.compare, and the words say
    which candidate set reaches 0.75 in how many seeds."""
    rows = []
    for seed in (0, 1, 2):
        rows += _rows("main", "(2)", "random", seed, _ramp(100 + seed, 200), np.ones(201))
        rows += _rows("main", "(2)", "pow-d", seed, np.full(201, 0.6 + 0.01 * seed), np.ones(201))
        rows += _rows("main", "(2)", "CS", seed, _ramp(50, 200), np.ones(201))        # not a variant
        powd = [r | {"powd_d": 10} for r in _rows("powd_d", "(2)", "pow-d", seed, _ramp(90 + 2 * seed, 200),
                                                   np.ones(201))]
        rows += powd
    table = pd.DataFrame(rows)
    cmp = fmnist.powd_compare(fmnist.powd_variants(table), 0.7)
    assert set(cmp["variant"]) == {"random", "pow-d, d = N", "pow-d, d = 10"}
    got = cmp.set_index(["variant", "seed"])
    assert got.loc[("pow-d, d = 10", 1), "rounds to 0.75"] == 92.0
    assert np.isnan(got.loc[("pow-d, d = N", 2), "rounds to 0.75"])
    late = 0.7505 + 0.001 * (np.arange(181, 201) - 94).mean()           # seed 2's ramp crosses at 94
    assert got.loc[("pow-d, d = 10", 2), "late accuracy"] == pytest.approx(late, abs=1e-12)
    assert got.loc[("pow-d, d = N", 2), "late accuracy"] == pytest.approx(0.62, abs=1e-12)
    v = fmnist.powd_values(cmp, "x")
    diffs = [0.7505 + 0.001 * ((np.arange(181, 201) - 90 - 2 * s).mean()) - (0.6 + 0.01 * s) for s in (0, 1, 2)]
    assert v["x_powd_diff"] == pytest.approx(np.mean(diffs), abs=1e-12) and v["x_powd_verdict"] == "confirmed"
    assert v["x_powd_reach"] == 3 and "reaches 0.75 in 3 of 3 seeds (after 92 ± 2 rounds)" in v["x_powd_words"]
    assert "it reaches 0.75 in 0 of 3" in v["x_powd_words"] and "higher than d = N's" in v["x_powd_words"]
    view = fmnist.powd_view(cmp)
    assert list(view.index) == ["random", "pow-d, d = N", "pow-d, d = 10"]
    assert view.loc["pow-d, d = N", "rounds to 0.75"] == "not reached in 200 rounds"
    assert view["document (Table 1): rounds to 0.75"].tolist() == [149, 79, "none (the document runs d = N)"]
    none = fmnist.powd_values(fmnist.powd_compare(fmnist.powd_variants(table[table.group == "main"]), 0.7), "y")
    assert none["y_powd_words"].startswith("No run of pow-d with the authors' candidate set")


def test_table1_counts_divfl_after_the_common_horizon():
    rows = []
    for seed in (0, 1, 2):
        for m, cross in (("random", 149), ("pow-d", 79), ("CS", 114), ("HiCS-FL", 60)):
            rows += _rows("main", "(2)", m, seed, _ramp(cross + seed - 1, 200), np.ones(201))
        rows += _rows("divfl", "(2)", "DivFL", seed, _ramp(477 + seed, 600), np.ones(601))
    table = pd.DataFrame(rows)
    t1 = fmnist.table1(table, 0.75)
    assert t1.loc["DivFL", "ours: rounds to 0.750"] == "478 ± 1"
    assert t1.loc["random", "ours: rounds to 0.750"] == "149 ± 1"
    assert t1.loc["DivFL", "ours: speed-up (0.750)"] == "0.3x"        # 149 / 478
    chk = fmnist.table1_checks(table)
    div = chk["Table 1: FMNIST, rounds to 0.75, DivFL (ideal)"][0]
    assert div.ours == 478.0 and div.verdict == "agrees"
    sp = chk["Table 1: FMNIST, speed-up, DivFL (ideal)"][0]
    assert sp.ours == pytest.approx(np.mean([148 / 477, 149 / 478, 150 / 479]), abs=1e-12)
    # cut to the common horizon, DivFL does not reach 0.75; the cell names its own horizon
    cut = fmnist.table1(fmnist.truncate(table, 200), 0.75)
    assert cut.loc["DivFL", "ours: rounds to 0.750"] == "not reached in 200 rounds"
    never = table[~((table.method == "DivFL") & (table.metric == "test_acc"))]
    never = pd.concat([never, pd.DataFrame(sum((_rows("divfl", "(2)", "DivFL", s, np.full(601, 0.5), [])
                                                for s in (0, 1, 2)), []))])
    assert fmnist.table1(never, 0.75).loc["DivFL", "ours: rounds to 0.750"] == "not reached in 600 rounds"


def test_truncation_gives_the_200_round_numbers():
    """A 600-round DivFL run cut to 200 rounds gives the fluctuation, rounds to target and claim checks of the
    same run stopped at 200 rounds; read whole it gives other numbers."""
    rng = np.random.default_rng(7)
    short, long = [], []
    for s in ("(1)", "(2)"):
        for m, cross in (("random", 120), ("pow-d", 150), ("CS", 100), ("HiCS-FL", 80), ("DivFL", 170)):
            if m == "DivFL" and s != "(2)":
                continue
            g = "divfl" if m == "DivFL" else "main"
            for seed in (0, 1, 2):
                T = 600 if m == "DivFL" else 200
                acc = _ramp(cross + 3 * seed, T) + rng.normal(0, 0.002, T + 1)
                loss = 1 / (1 + np.arange(T + 1) / 50) + rng.normal(
                    0, 0.01 * (1 + (m == "DivFL") * 5 * (np.arange(T + 1) > 200)))
                long += _rows(g, s, m, seed, acc, loss)
                short += _rows(g, s, m, seed, acc[:201], loss[:201])
    short, long = pd.DataFrame(short), pd.DataFrame(long)
    cut = fmnist.truncate(long, 200)
    pd.testing.assert_frame_equal(cut, short)
    for f in (lambda t: fmnist.variability(t, start=100), lambda t: fmnist.rounds_table(t, 0.9),
              lambda t: fmnist.smoothed_mean(t, "train_loss")):
        pd.testing.assert_frame_equal(f(cut), f(short), check_exact=True)
    var_long, var_short = fmnist.variability(long, start=100), fmnist.variability(short, start=100)
    assert not np.allclose(var_long.fluctuation, var_short.fluctuation)       # the later rounds would enter
    rt_long, rt_short = fmnist.rounds_table(long, 0.9), fmnist.rounds_table(short, 0.9)
    d2 = (rt_short.method == "DivFL")
    assert rt_short[d2]["rounds"].isna().all() and (rt_long[d2]["rounds"] > 200).all()   # crossings near 320
    checks = lambda rt, var: [(c.what, c.verdict, c.ours) for c in fmnist.claim_checks(rt, var, 200)]
    assert checks(fmnist.rounds_table(cut, 0.9), fmnist.variability(cut, start=100)) == checks(rt_short, var_short)
    assert any("DivFL" in w for w, _, _ in checks(rt_short, var_short))
    with pytest.raises(ValueError, match="truncate"):
        fmnist.claim_checks(rt_long, var_short, 200)
    with pytest.raises(ValueError, match="rounds must be an int"):
        fmnist.truncate(long, 200.0)


def test_longer_divfl_run_starts_as_the_shorter_one():
    """The engine's DivFL run of 12 rounds, cut to 6, is the run of 6 rounds (what truncation assumes)."""
    out = {}
    for T in (6, 12):
        task = _tiny_task()
        res = fl.run(task, fmnist.algorithms(task, dict(k=2, rounds=T), ["DivFL", "random"]), seeds=[1], rounds=T,
                     every=1)
        t = res.tidy()
        out[T] = t[t["metric"].isin(["test_acc", "train_loss"])].reset_index(drop=True)
    assert out[12]["round"].max() == 12
    pd.testing.assert_frame_equal(fmnist.truncate(out[12], 6), out[6], check_exact=True)


# ------------------------------------------------------------------------------------------ CIFAR-10 / CIFAR-100
_CIFAR_KEYS = {"dataset", "opt", "prox_mu", "temperature", "gamma0"}
_FMNIST_KEYS = ["experiment", "model", "clients", "k", "epochs", "batch_size", "rounds", "subset", "group", "setting",
                "alphas", "seed", "methods", "lr"]


def test_cifar_profiles_are_the_documents():
    """Sec. 4.1 and appendix 6.1: FedProx (mu 0.1) with Adam, eta 0.001, R = 2, B = 64, 20% of the clients."""
    from flkit.datasets import PAPER_STATS
    c10, c100 = fmnist.profile("paper-cifar10"), fmnist.profile("paper-cifar100")
    for c in (c10, c100):
        assert (c["opt"], c["prox_mu"], c["lr"], c["epochs"], c["batch_size"], c["temperature"]) == \
            ("adam", 0.1, 0.001, 2, 64, 0.0015)
        assert c["seeds"] == c["divfl_seeds"] == [0, 1, 2] and c["lr_alt"] is None and c["subset"] is None
    assert (c10["dataset"], c10["model"], c10["clients"], c10["k"], c10["rounds"], c10["gamma0"]) == \
        ("cifar10", "hics_cifar10", 50, 10, 500, 4.0)
    assert (c100["dataset"], c100["model"], c100["clients"], c100["k"], c100["rounds"], c100["gamma0"]) == \
        ("cifar100", "hics_cifar100", 100, 20, 1000, 2.0)
    assert c10["settings"] == ["(1)", "(2)", "(3)"] and c100["settings"] == ["(1)", "(2)"]   # the document's lists
    assert common.split_alphas("(1)", "cifar10") == [0.001, 0.01, 0.1, 0.5, 1.0]
    assert common.split_alphas("(3)", "cifar10") == [0.001, 0.002, 0.005, 0.01, 0.1]
    assert common.split_alphas("(2)", "cifar100") == [0.001, 0.005, 0.01, 0.1, 1.0]
    assert common.DATASETS["cifar10"]["norm"] == PAPER_STATS[("hics", "cifar10")] == common.DATASETS["cifar100"]["norm"]
    count = lambda name: models.count_parameters(models.build(name))
    assert count("hics_cifar100") - count("hics_cifar10") == 90 * 65     # 90 more outputs of the 64-wide layer
    assert {n: fmnist.store_name(n) for n in fmnist.PROFILES} == {
        "smoke": "tmp/hics", "reduced": "hics", "paper": "hics", "paper-cifar10": "hics_cifar10",
        "paper-cifar100": "hics_cifar100", "smoke-cifar10": "tmp/hics_cifar10"}


def test_jobs_of_cifar_profiles():
    js = fmnist.jobs(fmnist.profile("paper-cifar10"))
    # per setting x seed one main job; setting (2) splits it: random, pow-d, CS at 1500 rounds, HiCS-FL at 500
    assert len(js) == 3 * 3 + 3 + 3 * 3
    assert all(set(j) == set(_FMNIST_KEYS) | _CIFAR_KEYS | {"train_loss_images"}
               | ({"divfl_proxy"} if j["group"] == "divfl" else set()) and j["dataset"] == "cifar10" for j in js)
    assert {j["train_loss_images"] for j in js} == {10_000}    # the training loss on a sample of 10,000 images
    assert all(j["divfl_proxy"] == "gradient" for j in js if j["group"] == "divfl")     # the document's DivFL
    assert all(j["experiment"] == "cifar10_training" and (j["opt"], j["prox_mu"]) == ("adam", 0.1) for j in js)
    main = [(j["setting"], j["seed"], tuple(j["methods"]), j["rounds"]) for j in js if j["group"] == "main"]
    assert main == [(s, i, m, T) for s in ("(1)", "(2)", "(3)") for i in (0, 1, 2) for m, T in (
        [(("random", "pow-d", "CS"), 1500), (("HiCS-FL",), 500)] if s == "(2)"
        else [(("random", "pow-d", "CS", "HiCS-FL"), 500)])]
    div = [(j["setting"], j["seed"], j["rounds"]) for j in js if j["group"] == "divfl"]
    assert div == [(s, i, 1500 if s == "(2)" else 500) for s in ("(1)", "(2)", "(3)") for i in (0, 1, 2)]
    # every method runs at least as long as the document's Table 1 says it needs (HiCS-FL within its 500)
    for name in ("paper-cifar10", "paper-cifar100"):
        cfg = fmnist.profile(name)
        doc = common.DOC_TABLE1_CIFAR[cfg["dataset"]]["rounds"]
        longest = {m: max(j["rounds"] for j in fmnist.jobs(cfg) if m in j["methods"] and j["setting"] == "(2)")
                   for m in common.METHODS}
        assert all(longest[m] >= doc[m] for m in common.METHODS) and longest["HiCS-FL"] == cfg["rounds"]
    js = fmnist.jobs(fmnist.profile("paper-cifar100"))
    assert len(js) == 2 * 3 + 2 * 3 and {j["dataset"] for j in js} == {"cifar100"}
    assert all(j["methods"] == ["random", "pow-d", "CS", "HiCS-FL"] and j["rounds"] == 1000
               for j in js if j["group"] == "main")
    div = [(j["setting"], j["rounds"]) for j in js if j["group"] == "divfl"]
    assert div == [("(1)", 1000)] * 3 + [("(2)", 1400)] * 3
    assert all(j["gamma0"] == 2.0 and j["clients"] == 100 and j["k"] == 20 for j in js)
    # K per round; DivFL with the document's one-step gradient proxy: K + N / R (R = 2)
    assert fmnist.client_trainings(fmnist.profile("paper-cifar10")) == \
        (6 * 4 * 500 + 3 * 3 * 1500 + 3 * 500) * 10 + (6 * 500 + 3 * 1500) * 35 == 532_500
    assert fmnist.client_trainings(fmnist.profile("paper-cifar100")) == 6 * 4 * 1000 * 20 + (3 * 1000 + 3 * 1400) * 70 \
        == 984_000
    # the owed-work ledger's counts (flkit/owed.py) were made with the full-update proxy, N + K for DivFL
    assert fmnist.client_trainings(fmnist.profile("paper-cifar10", divfl_proxy="update")) == \
        (6 * 4 * 500 + 3 * 3 * 1500 + 3 * 500) * 10 + (6 * 500 + 3 * 1500) * 60 == 720_000
    assert fmnist.client_trainings(fmnist.profile("paper-cifar100", divfl_proxy="update")) == \
        6 * 4 * 1000 * 20 + (3 * 1000 + 3 * 1400) * 120 == 1_344_000


def test_fmnist_jobs_keep_their_stored_configs():
    """The results store keys runs by config: Fashion-MNIST jobs carry none of the CIFAR keys; DivFL jobs carry
    divfl_proxy unless it is the full update (the reduced profile's stored runs); train_loss_images only where
    the training loss is not over every training image (the paper profile, which has no stored runs)."""
    for name in ("smoke", "reduced", "paper"):
        proxy = fmnist.profile(name)["divfl_proxy"]
        sample = ["train_loss_images"] if name == "paper" else []
        for j in fmnist.jobs(fmnist.profile(name)):
            extra = (["divfl_proxy"] if j["group"] == "divfl" and proxy != "update" else
                     ["powd_d"] if j["group"] == "powd_d" else [])
            assert list(j) == _FMNIST_KEYS[:8] + sample + _FMNIST_KEYS[8:] + extra
            assert j["experiment"] == "fmnist_training"
    assert all(j["train_loss_images"] == 10_000 for j in fmnist.jobs(fmnist.profile("paper")))
    assert fmnist.jobs(fmnist.profile("reduced", train_loss_images=None)) == fmnist.jobs(fmnist.profile("reduced"))
    # not above rounds
    assert fmnist.jobs(fmnist.profile("reduced", table1_rounds=13)) == fmnist.jobs(fmnist.profile("reduced"))
    adam = fmnist.jobs(fmnist.profile("smoke", opt="adam", prox_mu=0.1))        # an override is part of the config
    assert all(set(j) - {"divfl_proxy", "powd_d"} == {*_FMNIST_KEYS, "opt", "prox_mu"}
               and (j["opt"], j["prox_mu"]) == ("adam", 0.1) for j in adam)


# ------------------------------------------------------------------------------------------ the training loss
def test_train_loss_sample_is_class_stratified_and_the_same_in_every_run():
    """Each class its share (one image each, the rest by shares, largest remainders), without repeats; the same
    images for the same seed, others for another; the jobs take seed 0's; bad sizes refused before any draw."""
    y = np.repeat(np.arange(10), 6000)
    for m, lo, hi in ((10_000, 1000, 1000), (6001, 600, 601), (10, 1, 1), (60_000, 6000, 6000)):
        idx = common.train_loss_sample(y, m, 0)
        per = np.bincount(y[idx], minlength=10)
        assert len(idx) == len(np.unique(idx)) == m and per.min() == lo and per.max() == hi
        assert (np.diff(idx) > 0).all()
    a, b = common.train_loss_sample(y, 500, 1), common.train_loss_sample(y, 500, 2)
    assert (a == common.train_loss_sample(y, 500, 1)).all() and not (a == b).all()
    skew = np.r_[np.zeros(5), np.ones(95)].astype(int)                    # 5 % of one class: 1 + (7 - 2) x 5 %
    assert np.bincount(skew[common.train_loss_sample(skew, 7, 0)]).tolist() == [1, 6]
    for bad in (9, 60_001):
        with pytest.raises(ValueError, match=r"train_loss_images must lie in \[10, 60000\]"):
            common.train_loss_sample(y, bad, 0)
    assert common.train_loss_idx(y, None) is None
    assert torch.equal(common.train_loss_idx(y, 500), torch.as_tensor(common.train_loss_sample(y, 500, 0)))
    for bad in (5, True, 1.5, "10000"):
        with pytest.raises(ValueError, match="train_loss_images must be None"):
            fmnist.profile("paper", train_loss_images=bad)


def test_engine_task_train_metrics_over_a_sample():
    """EngineTask(train_idx=...): "train_loss" and "train_acc" of the images train_idx, the test metrics as ever;
    all the images in order give the whole set's numbers exactly."""
    from flkit import engine
    task = _tiny_task()
    w = task.init_params([0, 1])
    whole = task.metrics(w)
    idx = torch.tensor([3, 7, 8, 40, 41, 150])
    task.train_idx = idx
    part = task.metrics(w)
    loss, acc = engine.evaluate(task.model, task.unflatten(w), task.x[idx], task.y[idx])
    torch.testing.assert_close(part["train_loss"], loss, rtol=0, atol=0)
    torch.testing.assert_close(part["train_acc"], acc, rtol=0, atol=0)
    assert not torch.allclose(part["train_loss"], whole["train_loss"])
    for k in ("test_loss", "test_acc"):
        torch.testing.assert_close(part[k], whole[k], rtol=0, atol=0)
    every = _tiny_task()
    every.train_idx = torch.arange(len(every.y))
    torch.testing.assert_close(every.metrics(w)["train_loss"], whole["train_loss"], rtol=0, atol=0)


def test_a_job_with_a_training_loss_sample():
    """A smoke job with train_loss_images: the test accuracy of every round as the job over all training images
    (the sample changes no training), the training loss every round over the sample: equal to the whole set's
    when the sample is every image, and, at the last round, the loss of the final models on the sample."""
    from flkit import datasets, engine
    if not datasets.available("fashion-mnist"):
        pytest.skip("needs the Fashion-MNIST files")
    data = datasets.load("fashion-mnist")
    job = next(j for j in fmnist.jobs(fmnist.profile("smoke")) if fmnist.is_setting2_main(j))
    whole = fmnist.run_job(job, data)
    for images in (4000, 300):
        t = fmnist.run_job(dict(job, train_loss_images=images), data)
        pd.testing.assert_frame_equal(t[t.metric == "test_acc"], whole[whole.metric == "test_acc"], check_exact=True)
        tl, wl = t[t.metric == "train_loss"], whole[whole.metric == "train_loss"]
        assert sorted(set(tl["round"])) == list(range(job["rounds"] + 1)) and len(tl) == len(wl)
        same = np.array_equal(tl["value"].to_numpy(), wl["value"].to_numpy())
        assert same == (images == 4000)                          # 4000: the smoke profile's every training image
    cfg = dict(fmnist.profile("smoke"), subset=job["subset"])
    labels = data.y_train[:job["subset"]].numpy()
    part = common.make_partition(labels, cfg["clients"], job["alphas"], job["seed"])
    idx = common.train_loss_idx(labels, 300)
    task = common.make_task(data, part, cfg, train_idx=idx)
    res = fl.run(task, fmnist.algorithms(task, cfg, ["random"]), seeds=[job["seed"]], rounds=3, every=1)
    loss, _ = engine.evaluate(task.model, task.unflatten(res.final_w), task.x[idx], task.y[idx])
    assert res.values["random"]["train_loss"][-1, 0] == pytest.approx(float(loss[0]), abs=0, rel=1e-12)


def test_the_cnn_evaluates_in_small_chunks_on_a_cpu():
    """64 images a chunk for the Fashion-MNIST CNN on a CPU (large chunks cost more in the kernel than the
    forward itself), 1,024 elsewhere; the two give the same loss and accuracy up to rounding."""
    from flkit import engine
    assert common.eval_batch("hics_fmnist_paper", "cpu") == 64
    assert common.eval_batch("hics_fmnist_paper", "cuda") == common.eval_batch("logreg", "cpu") == 1024
    assert common.eval_batch("hics_cifar10", "cpu") == 1024
    net = models.build("hics_fmnist_paper")
    params = engine.stack_copies(net, 2)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(300, 1, 28, 28, generator=g), torch.arange(300) % 10
    small, big = (engine.evaluate(net, params, x, y, batch_size=b) for b in (64, 1024))
    torch.testing.assert_close(small[0], big[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(small[1], big[1], rtol=0, atol=0)


_DATASETS = "['cifar10', 'cifar100', 'fashion-mnist']"


@pytest.mark.parametrize("call,value,allowed", [
    (lambda: fmnist.profile("paper", dataset="svhn"), "'svhn'", _DATASETS),
    (lambda: fmnist.profile("paper-cifar11"), "'paper-cifar11'", "'paper-cifar10', 'paper-cifar100'"),
    (lambda: common.split_alphas("(1)", "cifar-10"), "'cifar-10'", _DATASETS),
    (lambda: common.split_alphas("(3)", "cifar100"), "'(3)'", "['(1)', '(2)']"),
    (lambda: fmnist.profile("paper-cifar100", settings=["(3)"]), "['(3)']", "['(1)', '(2)']"),
    (lambda: fmnist.profile("paper-cifar10", opt="rmsprop"), "'rmsprop'", "'sgd' or 'adam'"),
    (lambda: fmnist.profile("paper-cifar10", prox_mu=-0.1), "-0.1", ">= 0"),
    (lambda: fmnist.profile("paper-cifar10", table1_rounds=5), "5", "an int >= 13"),
    (lambda: fmnist.profile("paper-cifar100", model="hics_cifar10"), "'hics_cifar10'", "['hics_cifar100']"),
])
def test_bad_cifar_input_is_one_line(call, value, allowed):
    with pytest.raises(ValueError) as e:
        call()
    msg = str(e.value)
    assert "\n" not in msg and value in msg and allowed in msg


def test_engine_task_trains_with_adam_and_the_prox_term():
    """EngineTask(opt="adam", prox_mu=...) gives engine.local_train's Adam + FedProx update."""
    from flkit import engine
    task = _tiny_task()
    task.opt, task.prox_mu = "adam", 0.1
    w = task.init_params([0])
    runs = fl.Runs([0], torch.tensor([0.05]), ["x"])
    active = torch.zeros(1, 10, dtype=torch.bool)
    active[0, 3] = True
    _, delta, local = task.client_updates(w, active, 0, runs)
    batches, steps = task.batches(0, 0, 3)
    ref, _ = engine.local_train(task.model, task.unflatten(w), task.x, task.y, batches, lr=0.05, steps=steps,
                                opt="adam", prox_mu=0.1)
    torch.testing.assert_close(local, task.flatten(ref))
    sgd, _ = engine.local_train(task.model, task.unflatten(w), task.x, task.y, batches, lr=0.05, steps=steps)
    assert not torch.allclose(local, task.flatten(sgd))
    with pytest.raises(ValueError, match="opt must be"):
        EngineTask(models.logreg(4, 3), task.x, task.y, task.clients, task.x_test, task.y_test, batch_size=8,
                   epochs=1, opt="rmsprop")
    with pytest.raises(ValueError, match="plain SGD"):
        EngineTask(models.logreg(4, 3), task.x, task.y, task.clients, task.x_test, task.y_test, batch_size=8,
                   epochs=1, opt="adam", backend="fast")


def test_smoke_cifar10_end_to_end(tmp_path, monkeypatch):
    """python -m flkit.sweep hics smoke-cifar10 on tiny CIFAR-10 files in torchvision's on-disk format: every method
    has test_acc and train_loss rows for every round of its job, in the profile's own store folder."""
    from test_datasets import make_cifar

    from flkit import datasets, results, sweep
    make_cifar(tmp_path / "data", monkeypatch, per_file=20)            # 100 training, 20 test images
    monkeypatch.setenv("FLKIT_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path / "results"))
    assert sweep.main(["hics", "smoke-cifar10"]) == 0
    cfg = fmnist.profile("smoke-cifar10")
    store = results.book_store("tmp/hics_cifar10")
    assert (tmp_path / "results" / "tmp" / "hics_cifar10").is_dir()
    js = fmnist.jobs(cfg)
    assert {m for j in js for m in j["methods"]} == set(common.METHODS) and all(store.done(j) for j in js)
    for j in js:
        t = store.load(j)
        for m in j["methods"]:
            for metric in ("test_acc", "train_loss"):
                d = t[(t.method == m) & (t.metric == metric)]
                assert sorted(d["round"]) == list(range(j["rounds"] + 1)) and np.isfinite(d["value"]).all()
    fm = datasets.Dataset("fashion-mnist", *[torch.zeros(1)] * 4, [])
    with pytest.raises(ValueError, match="job of dataset 'cifar10' given data of 'fashion-mnist'"):
        fmnist.run_job(js[0], fm)


@pytest.mark.parametrize("extra", [[], ["--set", "train_loss_images=500"]], ids=["all-images", "paper-like"])
def test_hics_jobs_resume_from_a_piece_to_identical_results(tmp_path, monkeypatch, extra):
    """python -m flkit.sweep hics smoke --setting (2) --group main with a deadline that stops after one round:
    exit 75, the job's checkpoint under the store's checkpoints/ (under 16 MiB); the next call resumes it and
    stores the same bytes as an uninterrupted sweep; the checkpoint is removed. The same with the training loss
    over a sample of the training images, as the paper profile records it (paper-like)."""
    from flkit import datasets, owed, results, sweep
    from flkit.papers.hics import sweeps
    if not datasets.available("fashion-mnist"):
        pytest.skip("needs the Fashion-MNIST files")
    argv = ["hics", "smoke", "--setting", "(2)", "--group", "main"] + extra
    js = sweep.parse(argv)[2]["jobs"]
    assert len(js) == 2 and all(fmnist.is_setting2_main(j) for j in js)
    assert js == sweeps.selected(fmnist.profile("smoke", train_loss_images=500 if extra else None), "(2)", "main")
    assert [j.get("train_loss_images") for j in js] == [500 if extra else None] * 2
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path / "a"))
    assert sweep.main(argv + ["--max-minutes", "0.001"]) == 75
    store = results.book_store("tmp/hics")
    ckpts = list((store.root / "checkpoints").glob("job-*.pt"))
    assert len(ckpts) == 1 and ckpts[0].stat().st_size <= owed.FILE_CAP and not any(store.done(j) for j in js)
    assert sweep.main(argv) == 0 and all(store.done(j) for j in js) and not ckpts[0].exists()
    a = {p.name: p.read_bytes() for p in store.root.glob("*.csv")}
    monkeypatch.setenv("FLKIT_RESULTS", str(tmp_path / "b"))
    assert sweep.main(argv) == 0
    b = {p.name: p.read_bytes() for p in results.book_store("tmp/hics").root.glob("*.csv")}
    assert len(a) == 2 and a == b
