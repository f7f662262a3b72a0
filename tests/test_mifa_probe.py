"""The numbers and verdicts the MIFA and availability pages print, against hand-computed values: rounds to a
target (closed-form gradient descent on a diagonal quadratic), the stop rule, the summary table, the slope
fit, the error-floor averages, f* of the softmax regression (an independent float64 solver), the verdict
functions (a case where the claim holds and one where it must be rejected), and the profiles' validation."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from flkit import tasks
from flkit.papers.availability import cafed as C
from flkit.papers.availability import markov as M
from flkit.papers.availability import sampling as S
from flkit.papers.availability import weights as W
from flkit.papers.mifa import common, experiments, logistic, methods, quadratic, theory


# ------------------------------------------------------------------ gradient descent in closed form
def _gd_gaps(task, eta: float, rounds: int, w0=None) -> np.ndarray:
    """gap(w_t), t = 0..rounds, of full gradient descent on a diagonal quadratic, from the closed form
    w_t - w* = (1 - eta H)^t (w_0 - w*), H = mean_i A_i (numpy, independent of flkit's loop)."""
    H = task.problem.A.numpy().mean(0)
    w_star = task.problem.w_star.numpy()
    e0 = (np.zeros_like(w_star) if w0 is None else w0) - w_star
    t = np.arange(rounds + 1)[:, None]
    e = (1 - eta * H) ** t * e0
    return 0.5 * (H * e * e).sum(1)


def _grad_norms(task, eta: float, rounds: int) -> np.ndarray:
    H = task.problem.A.numpy().mean(0)
    w_star = task.problem.w_star.numpy()
    t = np.arange(rounds + 1)[:, None]
    g = H * (1 - eta * H) ** t * (0 - w_star)
    return (g * g).sum(1)


def _between(gaps, k):
    """A target strictly between gap(k-1) and gap(k): the first round meeting it is exactly k."""
    return math.sqrt(gaps[k - 1] * gaps[k])


def test_hit_round_is_the_first_round_meeting_the_target():
    task = tasks.quadratic_task(n=4, dim=3, seed=1)
    eta, k = 0.3, 17
    gaps = _gd_gaps(task, eta, 40)
    assert np.all(np.diff(gaps) < 0)
    eps = _between(gaps, k)
    res = methods.simulate(task, ["fedgd", "mifa", "fedavg_is"], seeds=[0, 1], eta=eta, p=1.0, rounds=40, every=40,
                        target=("gap", eps))
    for m in ("fedgd", "mifa", "fedavg_is"):             # p = 1: every method is gradient descent
        np.testing.assert_array_equal(res.hit[m], [k, k])
        np.testing.assert_array_equal(res.evals[m], [4 * k, 4 * k])   # rounds 0..k-1, 4 clients each
    out = res.outcomes(pd.DataFrame({"seed": [0, 1]}))
    assert out[out["metric"] == "hit_round"]["value"].tolist() == [float(k)] * 6
    # a target met by w_0 itself is hit at round 0; one never met gives -1
    res0 = methods.simulate(task, ["fedgd"], seeds=[0], eta=eta, p=1.0, rounds=5, target=("gap", gaps[0]))
    assert res0.hit["fedgd"].tolist() == [0]
    never = methods.simulate(task, ["fedgd"], seeds=[0], eta=eta, p=1.0, rounds=5, target=("gap", gaps[6]))
    assert never.hit["fedgd"].tolist() == [-1] and never.evals["fedgd"].tolist() == [4 * 5]


def test_rounds_to_epsilon_matches_closed_form_gd():
    task = tasks.quadratic_task(n=4, dim=3, seed=1)
    eta_L, k = 0.6, 23
    eta = eta_L / task.L
    gaps = _gd_gaps(task, eta, 60)
    eps_rel = _between(gaps, k) / gaps[0]
    # the relative target differs from the same number read as an absolute one
    assert int(np.argmax(gaps <= eps_rel)) != k
    out = experiments.rounds_to_epsilon(task, "fedgd", eta_L=[eta_L], seeds=[0, 1], max_rounds=60, metric="gap",
                                 eps_rel=eps_rel)
    hit = out[out["metric"] == "hit_round"]
    assert hit["value"].tolist() == [k, k] and hit["seed"].tolist() == [0, 1]
    assert out[out["metric"] == "client_updates"]["value"].tolist() == [4 * k, 4 * k]
    assert out["eps"].iloc[0] == pytest.approx(eps_rel * gaps[0], rel=1e-12)


def test_first_median_hit_by_hand():
    hit = torch.tensor([[5, 9, -1], [3, 4, 7]])
    one = [torch.tensor([0, 1, 2])]
    # method 0: median (2nd of 3) hit at 9; method 1: at 4; the loop needs every method: max = 9
    assert methods.first_median_hit(hit, one) == 9.0
    two = [torch.tensor([0]), torch.tensor([1, 2])]
    # groups {0}, {1, 2}: method 0 -> min(5, 9) = 5 (group {1,2}: median = 1st of 2 hit = 9); method 1 -> 3
    assert methods.first_median_hit(hit, two) == 5.0
    assert methods.first_median_hit(torch.tensor([[-1, -1, 4]]), one) == math.inf      # median never hit


def test_stop_factor_ends_the_loop_at_factor_times_the_first_median_hit():
    task = tasks.quadratic_task(n=4, dim=3, seed=1)
    fast, slow = 0.3, 0.05
    g_fast, g_slow = _gd_gaps(task, fast, 200), _gd_gaps(task, slow, 200)
    k = 11
    eps = _between(g_fast, k)
    k_slow = int(np.argmax(g_slow <= eps))
    assert k_slow > 3 * k
    res = methods.simulate(task, ["fedgd"], seeds=[0, 0], eta=[fast, slow], p=1.0, rounds=200, every=200,
                        target=("gap", eps), stop_factor=3.0)
    assert res.rounds[-1] == 3 * k
    assert res.hit["fedgd"].tolist() == [k, -1]
    full = methods.simulate(task, ["fedgd"], seeds=[0, 0], eta=[fast, slow], p=1.0, rounds=200, every=200,
                         target=("gap", eps))
    assert full.hit["fedgd"].tolist() == [k, k_slow]


# ------------------------------------------------------------------ summary, fit_slope, growth rate
def _table(values: dict) -> pd.DataFrame:
    rows = []
    for (meth, seed), vals in values.items():
        for r, v in zip((0, 10, 20, 30), vals):
            rows.append(dict(method=meth, seed=seed, round=r, metric="gap", value=v))
    rows.append(dict(method="a", seed=0, round=0, metric="other", value=-5.0))
    return pd.DataFrame(rows)


def test_summary_by_hand():
    df = _table({("a", 0): [1.0, 0.5, 0.1, 0.05], ("a", 1): [1.0, 0.1, 0.08, 0.02], ("a", 2): [1.0, 0.9, 0.7, 0.2],
                 ("b", 0): [1.0, 0.3, np.inf, np.inf], ("b", 1): [1.0, np.nan, 0.3, 0.3],
                 ("b", 2): [1.0, 0.6, 0.2, 0.1]})
    tab = common.summary(df, "gap", threshold=0.1)
    assert list(tab.index) == ["a", "b"]
    assert tab.loc["a", "final (median)"] == 0.05 and tab.loc["b", "final (median)"] == 0.3   # of 0.1, 0.3, inf
    assert tab.loc["a", "diverged runs"] == "0/3" and tab.loc["b", "diverged runs"] == "2/3"   # inf and NaN count
    # first round with gap <= 0.1 (equality counts): a -> 20, 10, never; median 20. b -> 30 only once: median never
    assert tab.loc["a", "rounds to 0.1 (median)"] == 20.0
    assert tab.loc["b", "rounds to 0.1 (median)"] == math.inf
    assert tab.loc["a", "label"] == "a"
    assert "rounds to 0.1 (median)" not in common.summary(df, "gap").columns


def test_fit_slope_by_hand():
    x = np.array([1.0, 2.0, 4.0, 8.0, 0.0, -1.0, 3.0])
    y = np.array([3.0, 12.0, 48.0, 192.0, 5.0, 5.0, np.nan])     # y = 3 x^2 on the usable points
    s, c = common.fit_slope(x, y)
    assert s == pytest.approx(2.0, abs=1e-12) and c == pytest.approx(math.log(3.0), abs=1e-12)
    s, c = common.fit_slope([1.0, 10.0], [5.0, 0.5])
    assert s == pytest.approx(-1.0, abs=1e-12) and c == pytest.approx(math.log(5.0), abs=1e-12)
    assert all(math.isnan(v) for v in common.fit_slope([1.0, 2.0], [1.0, -1.0]))


def test_umifa_growth_rate_matches_the_simulated_table():
    # (1/t) log|e_t| for the literal rule: |1 - 1/p| per participation, p participations per round
    for p in (0.1, 0.3, 0.7):
        assert experiments.umifa_growth_rate(p) == pytest.approx(p * math.log(abs(1 / p - 1)), rel=1e-15)
    g = experiments.table_error_growth([0.25], rounds=40, runs=3, n=4)
    pred = g[g["metric"] == "predicted_log10"].set_index("round")["value"]
    assert pred[40] == pytest.approx(40 * 0.25 * math.log10(3.0), rel=1e-12)


# ------------------------------------------------------------------ error floor: the averages' windows
def test_error_floor_averages_by_hand():
    task = tasks.symmetric_quadratic(4, dim=3, seed=0)
    T, eta = 12, 0.5
    g = _grad_norms(task, eta, T)
    gaps = _gd_gaps(task, eta, T)
    df = experiments.error_floor(task, ["fedavg_is"], etas=[eta], ps=[1.0], seeds=[0], rounds=T)
    got = df.set_index("metric")["value"]
    want = {"avg_all": g[:T].mean(), "avg_tail": g[6:12].mean(), "avg_from1": g[1:12].mean(),
            "avg_q2": g[3:6].mean(), "avg_q4": g[9:12].mean(), "gap0": gaps[0], "gap1": gaps[1], "tau_max": 0.0}
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-300), k


def test_longest_absence_by_hand():
    # client 0 absent at most 2 rounds in a row, client 1 the last 3 rounds; run 2: every client every round
    mask = np.array([[[1, 0], [0, 0], [0, 1], [1, 0], [0, 0], [1, 0]], [[1, 1]] * 6], dtype=bool)
    assert experiments.longest_absence(mask).tolist() == [3.0, 0.0]


# ------------------------------------------------------------------ f* of the softmax regression
def _tiny_softmax(wd=0.05):
    g = torch.Generator().manual_seed(3)
    n, m, D, Cc = 2, 9, 4, 3
    x = torch.cat([torch.rand(n, m, D, generator=g), torch.ones(n, m, 1)], -1)
    y = torch.randint(0, Cc, (n, m), generator=g)
    return tasks.SoftmaxTask(x=x, y=y, x_test=x[0], y_test=y[0], num_classes=Cc, weight_decay=wd)


def _reference_optimum(task):
    """min_W mean CE(X W, y) + wd/2 |W|^2 in float64 with scipy's L-BFGS-B (independent of SoftmaxTask)."""
    from scipy import optimize
    X = task.x.reshape(-1, task.x.shape[-1]).double().numpy()
    Y = task.y.reshape(-1).numpy()
    N, D1, Cc, wd = X.shape[0], X.shape[1], task.num_classes, task.weight_decay
    onehot = np.eye(Cc)[Y]

    def fg(v):
        Wm = v.reshape(D1, Cc)
        z = X @ Wm
        zmax = z.max(1, keepdims=True)
        lse = zmax[:, 0] + np.log(np.exp(z - zmax).sum(1))
        f = np.mean(lse - z[np.arange(N), Y]) + 0.5 * wd * (v @ v)
        pr = np.exp(z - lse[:, None])
        return f, (X.T @ (pr - onehot) / N + wd * Wm).ravel()

    r = optimize.minimize(fg, np.zeros(D1 * Cc), jac=True, method="L-BFGS-B",
                          options=dict(gtol=1e-12, ftol=1e-16, maxiter=2000))
    assert np.linalg.norm(fg(r.x)[1]) < 1e-7           # f - min f <= |grad|^2 / (2 wd) < 1e-12
    return r.fun


@pytest.mark.parametrize("wd", [0.05, 0.5])
def test_softmax_solve_finds_the_optimum(wd):
    task = _tiny_softmax(wd)
    info = task.solve()
    ref = _reference_optimum(task)
    assert task.f_star == info["f_star"]
    assert info["f_star"] == pytest.approx(ref, abs=2e-6)
    # the certificate: f(W) - f* <= |grad|^2 / (2 wd), and the solver's gradient is near 0
    assert info["grad_norm2"] < 1e-7 and info["suboptimality_bound"] == pytest.approx(info["grad_norm2"] / (2 * wd))
    assert info["f_star"] - ref <= info["suboptimality_bound"] + 2e-6
    gap = task.metrics(torch.zeros(1, task.dim))["gap"]
    assert float(gap[0]) == pytest.approx(math.log(3) - ref, abs=2e-6)     # f(0) = ln C


# ------------------------------------------------------------------ verdicts: one holding, one rejected
def test_cafed_verdict_by_hand():
    assert C.verdict(3.0, np.nan).startswith("one seed only")
    assert C.verdict(1.5, 1.0).startswith("within 2 standard errors")        # 1.5 se: not distinguishable
    assert C.verdict(-2.0, 1.0).startswith("within 2 standard errors")       # the rule is |diff| <= 2 se
    assert C.verdict(2.5, 1.0) == "better by more than 2 standard errors"
    assert C.verdict(-2.5, 1.0) == "worse by more than 2 standard errors"
    assert C.verdict(-2.5, 1.0, better="lower") == "better by more than 2 standard errors"
    assert C.verdict(2.5, 1.0, better="lower") == "worse by more than 2 standard errors"


def test_cafed_paired_difference_by_hand():
    s = pd.DataFrame({"method": ["cafed", "f3ast", "unbiased"] * 2, "seed": [0, 0, 0, 1, 1, 1],
                      "time_avg": [80.0, 78.0, 79.0, 82.0, 79.5, 78.0],
                      "std_2nd_half": [0.3, 0.5, 0.2, 0.3, 0.5, 0.6]})
    d = C.paired_difference(s, "time_avg")               # best other by mean: f3ast 78.75 over unbiased 78.5
    assert d["b"] == "f3ast" and d["diff"] == pytest.approx(2.25) and d["seeds"] == 2
    assert d["se"] == pytest.approx(np.std([2.0, 2.5], ddof=1) / math.sqrt(2))
    e = C.paired_difference(s, "std_2nd_half")           # lowest other: unbiased (0.4) over f3ast (0.5)
    assert e["b"] == "unbiased" and e["diff"] == pytest.approx(-0.1)


def _exclusion_tab(opt_all, opt_corr, bias_corr):
    names = list(M.STRATEGIES)
    rows = []
    for T, a, c in zip((30, 100), opt_all, opt_corr):
        for k, m in enumerate(names):
            opt = {0: a, 1: c}.get(k, 1.0)
            bias = {0: 0.0, 1: bias_corr}.get(k, 0.5)
            rows.append(dict(budget=T, strategy=m, opt=opt, bias=bias, total=opt + bias, total_se=0.01, chi2=0.0))
    out = pd.DataFrame(rows)
    out["best total"] = out.groupby("budget")["total"].transform("min") == out["total"]
    return out.set_index(["budget", "strategy"])


def test_exclusion_verdict_holds_and_is_rejected():
    ok, text = M.exclusion_verdict(_exclusion_tab([0.5, 0.2], [0.3, 0.1], 0.05))
    assert ok and "at 2 of 2 budgets" in text
    ok, text = M.exclusion_verdict(_exclusion_tab([0.5, 0.2], [0.3, 0.25], 0.05))   # not lower at budget 100
    assert not ok and "at 1 of 2 budgets" in text
    ok, _ = M.exclusion_verdict(_exclusion_tab([0.5, 0.2], [0.3, 0.1], 0.0))         # no bias added
    assert not ok


def test_step_verdict_holds_and_is_rejected():
    T = 10 ** 4
    exps = [0.0, 0.5, 0.75, 1.0, 1.2]
    st = M.step_table(M.step_sums(exps, T), {a: M.step_sum_limits(a) for a in exps}, T)
    ok, text = M.step_verdict(st, 0.75, 1.0)
    assert ok and "[0.75, 1.0]" in text
    assert not M.step_verdict(st, 0.75, 0.5)[0]          # a = 1/2: sum ln(t) eta_t^2 diverges
    assert not M.step_verdict(st, 1.2)[0]                # a > 1: sum eta_t converges
    bad = st.copy()
    bad.loc[0.75, "S1(T)"] *= 1 + 1e-5                   # partial sums off their large-T form
    assert not M.step_verdict(bad, 0.75)[0]


def _findings_inputs():
    keys = ["fair_differ", "fair_runs", "unbiased", "normalized_biased", "var_alpha_pi", "var_fedavg", "floor_exact",
            "example_p", "example_unnorm", "example_norm", "limit_unnorm_FB", "case_1", "case_2", "case_3",
            "limit_norm_FB"]
    checks = {k: ("1", k, True) for k in keys}
    found = dict(fair_rel=0.3, var_ap=(3, 4), var_q1=(4, 4), var_exc_at_opt_only=False, floor_slope=1.01,
                 cross=0.1, example_norm="(2/5, 1/5, 2/5)", norm_FB=(1, 3))
    return checks, found


def test_finding_words_follow_every_check():
    checks, found = _findings_inputs()
    base = W.finding_words(checks, found)
    assert base["fw_fair"] == "lead to different minimizers on every test problem"
    assert base["fw_less_var"] == "holds in every setting" and base["fw_unbiased"] == "is exactly unbiased"
    assert base["fw_cross"] == "at η ≥ 0.1"
    assert W.finding_words(checks, dict(found, cross=None))["fw_cross"] == "at no step of the grid"
    for k in checks:
        flipped = dict(checks)
        flipped[k] = (checks[k][0], k, False)
        assert W.finding_words(flipped, found) != base, k     # every check's outcome changes the words


def test_zscore_by_hand():
    assert W.zscore(3.0, 1.0, 0.5) == pytest.approx(4.0)
    assert W.zscore(1.0, 1.0, 0.0) == 0.0                   # deterministic and exact: agrees
    assert W.zscore(1.0, 1.5, 0.0) == math.inf              # deterministic and wrong: rejected
    assert W.zscore(1.0, 1.0 + 1e-7, 0.0, tol=1e-6) == 0.0


def test_share_check_predicted_shares_by_hand():
    pi, lam = np.array([0.8, 0.2]), np.zeros(2)
    out = C.share_check(pi, lam, 50, [0, 1, 2]).set_index(["rule", "group"])
    # q = alpha: p_i = pi_i / sum pi = (0.8, 0.2); q = alpha / pi: p_i = alpha_i = (1/2, 1/2)
    assert out.loc[("q = alpha", "pi=0.8"), "predicted"] == pytest.approx(0.8, abs=1e-15)
    assert out.loc[("q = alpha/pi", "pi=0.2"), "predicted"] == pytest.approx(0.5, abs=1e-15)
    r = out.loc[("q = alpha", "pi=0.2")]
    assert r["z"] == pytest.approx((r["measured"] - r["predicted"]) / r["se"], rel=1e-12)


# ------------------------------------------------------------------ settings: one clear error before any work
@pytest.mark.parametrize("page", [quadratic, logistic, theory])
def test_mifa_profiles_check_their_settings(page):
    for name in page.PROFILES:
        assert page.profile(name) == page.PROFILES[name]
    with pytest.raises(ValueError, match=r"unknown profile 'huge'.*\['paper', 'smoke'\]"):
        page.profile("huge")


def test_mifa_profile_overrides_are_checked():
    cfg = quadratic.profile("smoke", seeds=[3, 4], eta=None)
    assert cfg["seeds"] == [3, 4] and cfg["eta"] == 0.02
    cfg = quadratic.profile("smoke", eta=1, p_values=[1], rounds={1: 5})      # numbers as the page uses them
    assert type(cfg["eta"]) is float and cfg["p_values"] == [1.0] and type(cfg["p_values"][0]) is float
    assert cfg["rounds"] == {1.0: 5} and all(type(k) is float for k in cfg["rounds"])
    bad = [(quadratic, dict(seed=[0]), r"unknown setting\(s\) \['seed'\]"),
           (quadratic, dict(seeds=[]), "seeds is empty"),
           (quadratic, dict(seeds=[0, 0]), "repeated seeds"),
           (quadratic, dict(rounds={0.01: 600, 0.1: -5, 0.5: 10}), r"rounds\[0.1\] must be an int >= 1, got -5"),
           (quadratic, dict(rounds={0.01: 600}), r"rounds has no entry for p = \[0.1, 0.5\]"),
           (quadratic, dict(p_values=[0.1, 1.5]), r"p_values must lie in \(0, 1\], got 1.5"),
           (quadratic, dict(p_values=[0.0]), r"p_values must lie in \(0, 1\], got 0.0"),
           (quadratic, dict(eta=-0.1), "eta must lie in"),
           (quadratic, dict(betas=[0.5, 1.0]), r"betas must lie in \[0, 1\)"),
           (logistic, dict(subset=0), "subset must be an int >= 1"),
           (logistic, dict(beta=1.0), r"beta must lie in \[0, 1\)"),
           (theory, dict(floor=dict(etas=[0.01], ps=[0.5, 2.0], rounds=100)), r"floor.ps must lie in"),
           (theory, dict(growth=dict(ps=[0.5], rounds=0, runs=2)), "growth.rounds must be an int >= 1")]
    for page, over, match in bad:
        with pytest.raises(ValueError, match=match):
            page.profile("smoke", **over)


def _quad():
    return tasks.quadratic_task(n=4, dim=3, seed=0)


@pytest.mark.parametrize("call, match", [
    (lambda t: methods.simulate(t, ["mifa"], seeds=[0], eta=0.1, p=0.5, rounds=-5),
     "rounds must be an int >= 1, got -5"),
    (lambda t: methods.simulate(t, ["mifa"], seeds=[], eta=0.1, p=0.5, rounds=5), r"seeds \(one per run\) is empty"),
    (lambda t: methods.simulate(t, ["mifa"], seeds=[0], eta=0.1, p=1.5, rounds=5), r"p must lie in \(0, 1\], got 1.5"),
    (lambda t: methods.simulate(t, ["fedgd"], seeds=[0], eta=0.1, p=0.0, rounds=5), r"p must lie in \(0, 1\], got 0.0"),
    (lambda t: methods.simulate(t, ["mifa"], seeds=[0], eta=0.0, p=0.5, rounds=5), "eta"),
    (lambda t: methods.simulate(t, ["mifam"], seeds=[0], eta=0.1, p=0.5, beta=1.0, rounds=5), "beta"),
    (lambda t: methods.simulate(t, [], seeds=[0], eta=0.1, p=0.5, rounds=5), "methods is empty"),
    (lambda t: methods.simulate(t, ["mifa2"], seeds=[0], eta=0.1, p=0.5, rounds=5), "unknown method 'mifa2'"),
    (lambda t: experiments.error_floor(t, ["mifa"], etas=[0.1], ps=[0.5], seeds=[0], rounds=3),
     "rounds must be an int >= 4"),
    (lambda t: experiments.error_floor(t, ["mifa"], etas=[0.1], ps=[0.5], seeds=[], rounds=10), "seeds is empty"),
    (lambda t: experiments.error_floor(t, ["mifa"], etas=[0.1], ps=[1.2], seeds=[0], rounds=10), "ps must lie in"),
    (lambda t: experiments.one_round_monte_carlo(t, p=0.5, t0=0, draws=10), "t0"),
    (lambda t: experiments.one_round_monte_carlo(t, p=0.5, t0=2, draws=1), "draws must be an int >= 2"),
    (lambda t: experiments.one_round_monte_carlo(t, p=-0.5, t0=2, draws=10), "p must lie in"),
    (lambda t: experiments.table_error_growth([0.5], rounds=0, runs=2), "rounds must be an int >= 1"),
    (lambda t: experiments.table_error_growth([0.5], rounds=3, runs=0), "runs must be an int >= 1"),
    (lambda t: experiments.table_error_growth([], rounds=3, runs=2), "ps is empty"),
    (lambda t: experiments.step_size_sweep(t, ["mifa"], eta_L=[1.0], seeds=[], rounds=3), "seeds is empty"),
    (lambda t: experiments.step_size_sweep(t, ["mifa"], eta_L=[1.0], seeds=[0], rounds=3, b=5),
     r"b \(clients per round\)"),
    (lambda t: experiments.rounds_to_epsilon(t, "fedgd", eta_L=[1.0], seeds=[0], max_rounds=0, metric="gap",
                                             eps_rel=0.1),
     "max_rounds must be an int >= 1"),
    (lambda t: experiments.rounds_to_epsilon(t, "fedgd", eta_L=[1.0], seeds=[0], max_rounds=9, metric="gap",
                                             eps_rel=0.0),
     r"eps_rel \(target relative to the initial gap\) must lie in \(0, 1\)"),
    (lambda t: experiments.rounds_to_epsilon(t, "fedgd", eta_L=[-1.0], seeds=[0], max_rounds=9, metric="gap",
                                             eps_rel=0.1),
     "eta_L must lie in"),
    (lambda t: methods.bernoulli_masks([], 0.5, 5, 4), "seeds is empty"),
    (lambda t: experiments.umifa_growth_rate(0.0), r"p must lie in \(0, 1\]"),
])
def test_mifa_functions_reject_bad_settings(call, match):
    with pytest.raises(ValueError, match=match):
        call(_quad())


def test_umifa_growth_rate_at_full_participation():
    assert experiments.umifa_growth_rate(1.0) == -math.inf      # one participation makes the entry exact


@pytest.mark.parametrize("mod", [C, M, S, W])
def test_availability_profiles_check_their_settings(mod):
    for name in mod.PROFILES:
        assert mod.profile(name) == mod.PROFILES[name]
    with pytest.raises(ValueError, match="unknown profile 'huge'"):
        mod.profile("huge")
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['sedes'\]"):
        mod.profile("smoke", sedes=[0])


@pytest.mark.parametrize("mod, over, match", [
    (C, dict(synthetic=dict(rounds=0, seeds=[0], beta=0.0)), "synthetic.rounds must be an int >= 1, got 0"),
    (C, dict(mnist=dict(rounds=3, seeds=[], beta=0.0, train_fraction=0.1)), "mnist.seeds is empty"),
    (C, dict(mnist=dict(rounds=3, seeds=[0], beta=0.0, train_fraction=1.5)), r"train_fraction must lie in \(0, 1\]"),
    (M, dict(seeds=[]), "seeds is empty"),
    (M, dict(ac=dict(cases=[(0.5, 0.9)], lags=[1], rounds=-1, chains=10)), "ac.rounds must be an int >= 1"),
    (M, dict(ac=dict(cases=[(1.2, 0.9)], lags=[1], rounds=10, chains=10)), r"ac.cases: pi must lie in \(0, 1\)"),
    (M, dict(mixing=dict(cases=[(0.2, -0.9)], steps=5, rounds=10, chains=10)), "mixing.cases"),
    (S, dict(seeds=[-1]), "seeds must hold ints >= 0"),
    (S, dict(objective=dict(rounds=50, burn_in=50, lr=0.05, seeds=[0])), "burn_in"),
    (W, dict(floor=dict(etas=[0.1], rounds=0, seeds=[0])), "floor.rounds must be an int >= 1"),
    (W, dict(limits=dict(eta=0.05, rounds=10, seeds=[0], pi_const=0.0)), r"limits.pi_const must lie in \(0, 1\]"),
])
def test_availability_profile_overrides_are_checked(mod, over, match):
    with pytest.raises(ValueError, match=match):
        mod.profile("smoke", **over)


@pytest.mark.parametrize("call, match", [
    (lambda: C.share_check([0.5, 0.5], [0.0, 0.0], 0, [0, 1]), "rounds must be an int >= 1"),
    (lambda: C.share_check([0.5, 0.5], [0.0, 0.0], 10, []), "seeds is empty"),
    (lambda: C.share_check([0.5, 1.5], [0.0, 0.0], 10, [0, 1]), r"pi must lie in \(0, 1\]"),
    (lambda: C.run_experiment(None, {}, -5, [0], 0.0, 32), "rounds must be an int >= 1, got -5"),
    (lambda: C.run_experiment(None, {}, 5, [], 0.0, 32), "seeds is empty"),
    (lambda: M.autocorrelation_check([(0.5, 0.5)], [1], 0, 10), "rounds must be an int >= 1"),
    (lambda: M.autocorrelation_check([(0.5, 0.5)], [10], 10, 10), r"lags must be ints in \[1, rounds\)"),
    (lambda: M.mixing_check([(0.5, 0.5)], 5, 5, 10), "rounds must exceed steps"),
    (lambda: M.theorem1_sample(0), "problems must be an int >= 1"),
    (lambda: M.lambda_sweep(dict(pi=0.5, lams=[0.0], rounds=0, eta0=0.3, a=0.75, n=4, dim=3, every=1), [0]),
     "rounds must be an int >= 1"),
    (lambda: M.lambda_sweep(dict(pi=0.5, lams=[0.0], rounds=5, eta0=0.3, a=0.75, n=4, dim=3, every=1), []),
     "seeds is empty"),
    (lambda: M.exclusion_runs(dict(rounds=5, eta0=0.15, a=0.75, n=8, dim=3, mu=1.0, L=2.0, heterogeneity=1.0,
                                   every=1), [], 0), "seeds is empty"),
    (lambda: M.step_sums([0.5], 5), "T must be an int >= 10"),
    (lambda: S.inclusion_monte_carlo([0.5, 0.5], 1, 0, 0), "rounds must be an int >= 1"),
    (lambda: S.objective_check([0.5, 0.5], 1, [[0.0], [1.0]], rounds=10, burn_in=10, lr=0.1, seeds=[0]), "burn_in"),
    (lambda: S.objective_check([0.5, 0.5], 1, [[0.0], [1.0]], rounds=10, burn_in=2, lr=0.1, seeds=[]),
     "seeds is empty"),
    (lambda: S.scheme_monte_carlo([1.0, 2.0], 1, "I", runs=0, draws_per_run=5, seed=0), "runs must be an int >= 1"),
    (lambda: W.monte_carlo_weights([0.5, 0.5], [1.0, 1.0], 1, 0, normalize=True), "draws must be an int >= 2"),
    (lambda: W.worked_example_table(0, 0), "draws must be an int >= 2"),
    (lambda: W.fairness_table(4, 2, 0, 1.0, 0.2, 2.0, 1.0), "seeds must be an int >= 1"),
    (lambda: W.floor_runs(None, [0.5, 0.5], [0.1], 10, []), "seeds is empty"),
    (lambda: W.floor_runs(None, [0.5, 0.0], [0.1], 10, [0]), r"pi must lie in \(0, 1\]"),
    (lambda: W.limit_runs(None, {}, 0.1, -1, [0]), "rounds must be an int >= 1"),
    (lambda: W.spread_table(None, [0.0, 0.5]), r"pi_mins must lie in \(0, 1\]"),
])
def test_availability_functions_reject_bad_settings(call, match):
    with pytest.raises(ValueError, match=match):
        call()
