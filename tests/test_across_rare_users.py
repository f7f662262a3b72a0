"""Under document 003's RAM: FedAvg, Fed-CVaR-Avg, FedAU, known rho and MIFA on one stream per seed
(flkit.papers.across.rare_users)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from flkit import aggregate, participation
from flkit.papers.across import rare_users as RU

REPO = Path(__file__).resolve().parents[1]


class _Stop(Exception):
    pass


def _capture(monkeypatch):
    """Replace flkit.fl.run by a recorder that stops before any round: (task, algorithms, kwargs)."""
    from flkit import fl
    seen = {}

    def fake(task, algorithms, **kw):
        seen.update(task=task, algorithms=algorithms, kw=kw)
        raise _Stop
    monkeypatch.setattr(fl, "run", fake)
    return seen


def test_every_rule_sees_the_chapters_ram_draws_and_split(monkeypatch):
    """The mask fed to every rule of a seed is the one cvar.run_batch feeds the chapter's run of that seed, and
    so is the split."""
    from flkit.papers import cvar
    s = RU.settings("smoke", r=[0.9])
    cc = cvar.run_configs(cvar.settings("mnist", "smoke", settings=[0.9], ram="random-draw"))
    seen = _capture(monkeypatch)
    with pytest.raises(_Stop):
        cvar.run_batch(cc, "cpu", progress=False, log=lambda m: None)
    theirs_mask = {c["seed"]: seen["algorithms"][str(m)].availability[c["seed"]] for m, c in enumerate(cc)}
    theirs_split = {c["seed"]: seen["task"].clients[str(m)] for m, c in enumerate(cc)}
    with pytest.raises(_Stop):
        RU.run_batch(RU.run_configs(s), "cpu", progress=False, log=lambda m: None)
    mine = seen["kw"]["availability"]
    assert set(seen["algorithms"]) == set(RU.RULES)
    assert all(a.availability is None for a in seen["algorithms"].values())   # every rule: the seed's mask
    assert seen["kw"]["seeds"] == {rule: [0, 1] for rule in RU.RULES}
    for seed in (0, 1):
        assert np.array_equal(np.asarray(mine[seed]), np.asarray(theirs_mask[seed]))
        assert (np.asarray(mine[seed]).sum(1) == 1).all()
        assert [list(i) for i in seen["task"].clients[seed]] == [list(i) for i in theirs_split[seed]]
    assert not np.array_equal(mine[0], mine[1])
    np.testing.assert_array_equal(seen["kw"]["p"], np.asarray(cc[0]["rho"]))


def test_fedavg_and_fed_cvar_avg_are_the_chapters_runs():
    """The page's FedAvg and Fed-CVaR-Avg are the chapter's computation: bitwise the same numbers (smoke, CPU)."""
    from flkit.papers import cvar
    s = RU.settings("smoke", r=[0.9], rounds=6, rules=["fedavg", "fed-cvar-avg", "known-rho"])
    cs = RU.run_configs(s)
    mine = RU.run_batch(cs, "cpu", progress=False, log=lambda m: None)
    cc = cvar.run_configs(cvar.settings("mnist", "smoke", settings=[0.9], ram="random-draw", rounds=6))
    theirs = cvar.run_batch(cc, "cpu", progress=False, log=lambda m: None)
    keep = ["test_acc", "test_loss", "test_acc_class"]
    for c, t in zip(cc, theirs):
        rule = "fedavg" if c["method"] == "fedavg" else "fed-cvar-avg"
        j = next(i for i, m in enumerate(cs) if m["rule"] == rule and m["seed"] == c["seed"])
        a = mine[j][mine[j]["metric"].isin(keep)].reset_index(drop=True)
        b = t[t["metric"].isin(keep)].reset_index(drop=True)
        assert a[["round", "metric", "class"]].equals(b[["round", "metric", "class"]])
        assert np.array_equal(a["value"].to_numpy(), b["value"].to_numpy()), (rule, c["seed"])
    k = next(i for i, m in enumerate(cs) if m["rule"] == "known-rho" and m["seed"] == 0)
    assert not np.array_equal(mine[k]["value"].to_numpy(), mine[0]["value"].to_numpy())   # another rule differs


def test_a_shorter_run_is_the_prefix_of_a_longer_one():
    """The stored 4000-round runs read up to round 1000 are a 1000-round run: the RAM draws of a shorter run are
    the first of a longer one's (the minibatch stream is keyed by the round, the steps are constant)."""
    rho = RU.settings("paper")
    rho = RU.run_configs(rho)[0]["rho"]
    for seed in (0, 3):
        long = participation.random_access_indices(rho, 4000, seed)
        assert np.array_equal(long[:1000], participation.random_access_indices(rho, 1000, seed))
    s = RU.settings("smoke", r=[0.9])
    assert s["lr_theta"] == 1e-3 and "schedule" not in str(s)


def _rho():
    return np.asarray(RU.run_configs(RU.settings("paper"))[0]["rho"])


def test_fedau_omega_estimates_inverse_rho_under_the_ram():
    """FedAU's omega on long RAM streams: within 4 standard errors of 1/rho_i (no cutoff) and of the cutoff mean
    (1 - (1 - rho_i)^50)/rho_i (K = 50) for every user, and within 5 % of it; against 1/rho_i the cutoff's
    estimate is told apart (the check can fail)."""
    rho = _rho()
    om = RU.omega_check(rho, 400_000, [0, 1, 2, 3], package=False)
    for K, g in om.groupby("K"):
        assert g["z"].abs().max() <= 4, K
        assert g["rel_error"].abs().max() <= 0.05, K
    inf = om[om["K"] == "inf"]
    np.testing.assert_allclose(inf["limit"], 1 / rho)
    k50 = om[om["K"] == 50]
    wrong = (k50["pooled"] - 1 / k50["rho"]) / (k50["pooled"] * 0.02)
    assert (wrong.iloc[-3:] < -10).all()                    # the rare users: K = 50 is far below 1/rho
    assert k50["rho_limit"].iloc[-1] == pytest.approx(1 - (1 - 0.0053) ** 50)


def test_package_omega_is_the_direct_interval_count_and_the_runs_use_it():
    rho = _rho()
    om = RU.omega_check(rho, 6000, [0, 1], package=True)
    assert (om["omega"] - om["independent"]).abs().max() <= 1e-9
    s = RU.settings("smoke", r=[0.9], rules=["fedau-k50", "fedau-kinf"])
    cs = RU.run_configs(s)
    tabs = RU.run_batch(cs, "cpu", progress=False, log=lambda m: None)
    for c, t in zip(cs, tabs):
        got = t[t["metric"] == "omega"].sort_values("class")["value"].to_numpy()
        K = 50 if c["rule"] == "fedau-k50" else None
        want = RU.omega_from_mask(RU.ram_mask(c["rho"], c["rounds"], c["seed"]), K)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


def test_known_rho_update_is_unbiased_for_the_full_average():
    """One relayed user i with probability rho_i: E[KnownP's G] = sum_i rho_i Delta_i / (N rho_i) = the mean of all
    users' updates, exactly; FedAvg's relay gives the rho-weighted mean instead (told apart)."""
    g = np.random.default_rng(3)
    N, d = 7, 4
    rho = g.random(N) + 0.05
    rho /= rho.sum()
    delta = torch.tensor(g.standard_normal((N, d)), dtype=torch.float64)
    expect_known, expect_fedavg = torch.zeros(d, dtype=torch.float64), torch.zeros(d, dtype=torch.float64)
    for i in range(N):
        upd = aggregate.Updates(torch.tensor([[0, i]]), delta[i:i + 1], torch.ones(1, dtype=torch.float64), 1, N,
                                p=torch.tensor(rho)[None], local=delta[i:i + 1])
        G, _ = RU.aggregator("known-rho").apply(None, upd)
        expect_known += rho[i] * G[0]
        Gf, _ = aggregate.FedAvg().apply(None, upd)
        expect_fedavg += rho[i] * Gf[0]
    torch.testing.assert_close(expect_known, delta.mean(0), rtol=0, atol=1e-12)
    assert (expect_fedavg - delta.mean(0)).abs().max() > 1e-3
    torch.testing.assert_close(expect_fedavg, (torch.tensor(rho)[:, None] * delta).sum(0), rtol=0, atol=1e-12)


def test_paired_comparisons_and_checks_on_known_numbers():
    """A rule 10 points above FedAvg on class 9 in every seed is confirmed; the checks name the page's items."""
    rows = []
    for seed in range(3):
        for rule in RU.RULES:
            lift = {"known-rho": 10.0, "fedau-kinf": 8.0}.get(rule, 0.0) + 0.1 * seed
            rows.append(dict(rule=rule, seed=seed, pattern_frac=0.9, metric="test_acc_class", **{"class": 9},
                             value=40.0 + lift))
            rows.append(dict(rule=rule, seed=seed, pattern_frac=0.9, metric="test_acc", **{"class": -1},
                             value=90.0 - (3.0 if rule == "known-rho" else 0.0) + 0.01 * seed * (rule == "mifa")))
    acc = pd.DataFrame(rows)
    pf = RU.paired(acc)
    row = pf[(pf["rule"] == "known-rho") & (pf["quantity"] == "9")].iloc[0]
    assert row["difference"] == pytest.approx(10.0) and row["verdict"] == "confirmed"
    om = RU.omega_check(_rho(), 3000, [0, 1])
    ck = RU.checks(om, om, pf, RU.paired(acc, "fed-cvar-avg"), acc)
    assert {k for k, _ in ck} == {"omega", "rare_lift", "rare_vs_cvar", "overall"}
    over = {c.what.split(":")[1].split(" not")[0].strip(): c.verdict for k, c in ck if k == "overall"}
    assert over == {"FedAU (K = inf)": "confirmed", "known rho": "contradicted"}     # -3 points, beyond the tie
    with pytest.raises(ValueError, match="package=True"):
        RU.checks(om, RU.omega_check(_rho(), 3000, [0, 1], package=False), pf, pf, acc)


def test_profile_is_settings_by_the_template_name():
    """The page's profile() is settings() (kept for the script and the ledger), with the same overrides."""
    assert RU.profile("reduced") == RU.settings("reduced")
    assert RU.profile("smoke", seeds=[3], r=[0.9]) == RU.settings("smoke", seeds=[3], r=[0.9])
    assert RU.run_configs(RU.profile("paper")) == RU.run_configs(RU.settings("paper"))


@pytest.mark.parametrize("call, match", [
    (lambda: RU.settings("huge"), "profile"),
    (lambda: RU.settings("smoke", rules=["fedprox"]), "rules"),
    (lambda: RU.settings("smoke", rules=[]), "rules"),
    (lambda: RU.settings("smoke", rounds=0), "rounds"),
    (lambda: RU.settings("smoke", seeds=[-1]), "seeds"),
    (lambda: RU.profile("huge"), "smoke"),
    (lambda: RU.profile("smoke", epochs=2), "unknown setting"),
    (lambda: RU.profile("smoke", rounds=0), "rounds"),
    (lambda: RU.aggregator("scaffold"), "unknown rule"),
    (lambda: RU.omega_check([0.5, 0.6], 100, [0]), "sum to 1"),
    (lambda: RU.omega_check(_rho(), 1, [0]), "rounds"),
    (lambda: RU.omega_check(_rho(), 100, []), "seeds"),
    (lambda: RU.run_batch(RU.run_configs(RU.settings("smoke")), "cpu"), "agree"),
    (lambda: RU.run_batch([], "cpu"), "no configs"),
])
def test_bad_input_is_refused_before_any_work(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_sweep_refuses_bad_input_in_one_line():
    out = subprocess.run([sys.executable, "-m", "flkit.sweep", "rare-users", "--rules", "fedprox"],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2 and "rules must be" in out.stderr and out.stdout == ""


def test_scale_words_follow_the_profile():
    assert RU.scale_of({"profile": "paper"}) == []
    red = RU.scale_of({"profile": "reduced"})
    assert any("rounds 1000" in p for p in red) and any("Fig. 3" in p for p in red)
    assert all(p.startswith("reduced: ") for p in red)


def test_chapter_check_reads_the_chapters_runs_up_to_this_pages_round():
    """Fed the chapter's own stored runs (4000 rounds, read up to round 1000), the comparison with the chapter is
    exactly zero; a shifted copy is seen."""
    from flkit.papers import cvar
    s = RU.settings("reduced")
    ch = cvar.settings("mnist", "paper", ram="random-draw", settings=s["settings"], seeds=s["seeds"], cells=s["cells"])
    theirs, n, total = cvar.stored(ch)
    if n < total:
        pytest.skip("the chapter's stored runs are not all here")
    fake = theirs.assign(rule=theirs["method"])
    got = RU.chapter_check(fake, s)
    assert len(got) == 4 and (got["difference"] == 0).all() and (got["seeds"] == 3).all()
    assert set(got["chapter_computed_on"]) == {"cuda"}
    acc = RU.final_accuracies(fake, upto=1000)
    assert acc.groupby("rule").size().min() > 0
    late = fake[(fake["round"] >= 900) & (fake["round"] <= 1000) & (fake["metric"] == "test_acc")]
    want = late[(late["method"] == "fedavg") & (late["seed"] == 0)]["value"].mean() * 100
    got0 = acc[(acc["rule"] == "fedavg") & (acc["seed"] == 0) & (acc["metric"] == "test_acc")]["value"].iloc[0]
    assert got0 == pytest.approx(want)
    shifted = fake.assign(value=fake["value"] + 0.01 * (fake["method"] == "fedavg"))
    moved = RU.chapter_check(shifted, s)
    assert moved.loc[moved["method"] == "FedAvg", "difference"].round(6).eq(1.0).all()


@pytest.mark.parametrize("profile", sorted(RU.PROFILES))
def test_every_profiles_scale_is_a_valid_scale(profile):
    """The page's scale, joined from scale_of's parts, must read as one scale of the book's vocabulary (a '; '
    inside a part once split it into a part without its kind, and the page refused to publish)."""
    from flkit.papers import verdicts
    parts = RU.scale_of({"profile": profile})
    kind = verdicts.scale_kind("; ".join(parts) if parts else verdicts.DOCUMENT_SCALE)
    assert kind == (verdicts.DOCUMENT_SCALE if profile == "paper" else "reduced")
