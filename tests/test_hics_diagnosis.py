"""HiCS-FL's setting-(3) diagnosis (flkit.papers.hics.diagnosis), the 'distinct' cluster draw, Table 1's cost
columns (flkit.papers.hics.costs) and the entropy page's closeness and Sec. 3.3 checks."""
import math

import numpy as np
import pandas as pd
import pytest
import torch

from flkit import sample as S
from flkit.papers import claims
from flkit.papers.hics import costs, diagnosis, entropy, items
from flkit.seeding import rng


# ------------------------------------------------------------------------------ the draw "distinct"
def test_distinct_draw_takes_one_client_from_each_of_k_distinct_groups():
    labels = np.repeat(np.arange(5), [3, 4, 2, 5, 6])
    w = np.arange(1, 21, dtype=float)
    for seed in range(20):
        pick = S.hics_draw(rng(seed, "t"), labels, np.full(5, 0.2), w, 5, "distinct")
        assert sorted(labels[pick].tolist()) == [0, 1, 2, 3, 4] and len(set(pick.tolist())) == 5
        paper = S.hics_draw(rng(seed, "t"), labels, np.full(5, 0.2), w, 5, "paper")
        assert len(set(paper.tolist())) == 5
    # k < M: the groups come from pi (a group of probability 0 is never drawn), the client within by weight
    pi = np.array([0.5, 0.5, 0.0, 0.0, 0.0])
    got = np.array([S.hics_draw(rng(s, "t"), labels, pi, w, 2, "distinct") for s in range(200)])
    assert set(labels[got.ravel()].tolist()) == {0, 1}
    first = got[labels[got] == 0]
    assert abs(np.mean(first == 2) - 3 / 6) < 0.1          # client 2 weighs 3 of group 0's 1 + 2 + 3
    with pytest.raises(ValueError, match="draws k = 6 distinct groups, more than the M = 5"):
        S.hics_draw(rng(0, "t"), labels, np.full(5, 0.2), w, 6, "distinct")
    with pytest.raises(ValueError, match="rule must be 'paper', 'code' or 'distinct'"):
        S.hics_draw(rng(0, "t"), labels, np.full(5, 0.2), w, 2, "other")


def test_hics_draw_field_is_checked_and_used():
    with pytest.raises(ValueError, match="draw must be None"):
        S.HiCS(k=2, rounds=10, bias=slice(0, 3), draw="uniform")
    with pytest.raises(ValueError, match="clusters \\(M = 2\\) must be >= k"):
        S.HiCS(k=3, rounds=10, bias=slice(0, 3), clusters=2, draw="distinct")


def _hics_run(sampler, T=12, N=10, C=4, seed=0):
    """Selections of ``sampler`` over T rounds on fixed synthetic bias updates (one run)."""
    g = rng(seed, "updates")
    U = torch.from_numpy(g.normal(size=(N, C)) * 0.01)
    state = sampler.init(1, N, torch.full((1, N), 100.0, dtype=torch.float64), [seed])
    out = []
    for t in range(T):
        c, state = sampler.select(state, t, torch.ones(1, N, dtype=torch.bool))
        pairs = c.nonzero()
        state = sampler.observe(state, t, pairs, -U[pairs[:, 1]])
        out.append(c[0].numpy().copy())
    return np.array(out), state


def test_hics_distinct_takes_one_client_per_cluster_after_warmup():
    s = S.HiCS(k=3, rounds=12, bias=slice(0, 4), draw="distinct")
    counts, state = _hics_run(s)
    warm = s.warmup_rounds(10)                                 # ceil(10 / 3) = 4: the last takes the 1 left
    assert counts[:warm].sum(1).tolist() == [3, 3, 3, 1] and (counts[warm:].sum(1) == 3).all()
    assert set(np.unique(counts)) <= {0, 1}
    lab = state.labels[0]
    assert len(set(lab[counts[-1] > 0].tolist())) == 3


# ------------------------------------------------------------------------------ the logged sampler
def test_logged_sampler_changes_nothing_and_logs_what_it_did():
    N, C = 10, 4
    counts = np.zeros((N, C), dtype=int)
    counts[np.arange(N), np.arange(N) % C] = 50
    counts[0, 1] = 25                                         # client 0 holds two classes
    inner = S.HiCS(k=3, rounds=12, bias=slice(0, C))
    plain, _ = _hics_run(inner)
    logged = diagnosis.Logged(inner, counts)
    got, state = _hics_run(logged)
    assert np.array_equal(plain, got)
    f = logged.frame([0]).pivot_table(index="round", columns="metric", values="value")
    warm = inner.warmup_rounds(N)
    assert (f.loc[1:warm, "mode"] == diagnosis.MODES["warmup"]).all()
    assert (f.loc[warm + 1:, "mode"] == diagnosis.MODES["hics"]).all()
    for t in range(12):
        chosen = np.flatnonzero(got[t])
        row = f.loc[t + 1]
        assert row["distinct_classes"] == (counts[chosen].sum(0) > 0).sum()
        assert [row[f"client/{j}"] for j in range(len(chosen))] == chosen.tolist() and row["selected"] == len(chosen)
        shares = counts[chosen].sum(0) / counts[chosen].sum()
        assert np.allclose([row[f"class_share/{i}"] for i in range(C)], shares)
    last = f.loc[12]
    lab = state.labels[0]
    assert last["distinct_clusters"] == len(set(lab[got[-1] > 0].tolist()))
    pis = np.array([last[f"pi/{m}"] for m in range(int(last["clusters"]))])
    assert np.isclose(pis.sum(), 1) and last["pi_max"] == pis.max()


# ------------------------------------------------------------------------------ E_i and delta
class _Task:
    def __init__(self, model, x, y):
        self.model, self.x, self.y = model, x, y
        self.names = [k for k, _ in model.named_parameters()]
        self.shapes = [tuple(v.shape) for _, v in model.named_parameters()]

    def unflatten(self, w):
        out, i = {}, 0
        for k, s in zip(self.names, self.shapes):
            n = int(np.prod(s))
            out[k] = w[:, i:i + n].reshape(w.shape[0], *s)
            i += n
        return out


def test_e_tracker_matches_definition_1():
    C, n = 3, 30
    torch.manual_seed(0)
    x = torch.randn(n * C, 4, dtype=torch.float64)
    y = torch.arange(C).repeat_interleave(n)
    task = _Task(torch.nn.Linear(4, C).to(torch.float64), x, y)
    pool = diagnosis.class_pool(y.numpy(), C, per_class=n)
    track = diagnosis.e_tracker(task, pool, C)
    zero = torch.zeros(1, 4 * C + C, dtype=torch.float64)          # uniform predictions: E_i = 1/C, delta = 0
    out = track(zero)
    assert np.allclose([float(out[f"E/{i}"][0]) for i in range(C)], 1 / C)
    assert math.isclose(float(out["E_sum"][0]), 1.0) and abs(float(out["delta"][0])) < 1e-15
    w = torch.cat([torch.zeros(1, 4 * C, dtype=torch.float64),
                   torch.tensor([[1.0, 0.0, -1.0]], dtype=torch.float64)], 1)
    p = torch.softmax(torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64), 0).numpy()   # the same for every sample
    out = track(torch.cat([zero, w]))
    Ei = np.array([float(out[f"E/{i}"][1]) for i in range(C)])
    assert np.allclose(Ei, p) and math.isclose(float(out["delta"][1]), np.abs(p.sum() / C - p).max())
    with pytest.raises(ValueError, match="at least 2 images of every class"):
        diagnosis.class_pool(np.array([0, 0, 1]), 2)


def test_e_delta_checks_see_a_fall_and_a_rise():
    rounds = np.arange(41)
    rows = [dict(seed=s, round=r, E_sum=1 - r / 50 + 0.01 * s,
                 delta=0.1 + 0.001 * r * (s + 1)) for s in range(3) for r in rounds]
    c = diagnosis.e_delta_checks(pd.DataFrame(rows), window=5)
    assert c[0].verdict == "confirmed" and c[1].verdict == "contradicted"


# ------------------------------------------------------------------------------ pairing and words
def _late(values):
    return pd.DataFrame([dict(method=m, seed=s, late_loss=v) for m, vs in values.items() for s, v in enumerate(vs)])


def test_paired_gap_and_the_words_follow_the_numbers():
    late = _late({"CS": [0.6, 0.7, 0.65], "paper": [1.1, 1.2, 1.0], "distinct": [0.62, 0.71, 0.66],
                  "gamma0 = 0": [1.0, 1.1, 0.95], "T/2": [1.15, 1.18, 1.05]})
    gap = diagnosis.paired_gap(late, "CS")
    assert np.isclose(gap.loc["paper", "gap"], np.mean([0.5, 0.5, 0.35]))
    assert np.isclose(gap.loc["distinct", "share_of_paper_gap"], np.mean([0.02, 0.01, 0.01]) / gap.loc["paper", "gap"])
    w = diagnosis.diagnosis_words(gap)
    assert w["explains"].startswith("the with-replacement draw") and "gamma0 = 0" in w["keeps"] and "T/2" in w["keeps"]
    assert w["temperature"].startswith("halving T widens the gap")
    w2 = diagnosis.diagnosis_words(diagnosis.paired_gap(late[late.method != "distinct"], "CS"))
    assert w2["explains"] == "none of the candidate causes alone" and w2["closes"] == "none"
    both = late.copy()
    both.loc[both.method == "gamma0 = 0", "late_loss"] = [0.61, 0.72, 0.66]
    w3 = diagnosis.diagnosis_words(diagnosis.paired_gap(both, "CS"))
    assert w3["explains"].startswith("the weighting of the clusters") and "M = K" in w3["explains"]
    only_uniform = both[both.method != "distinct"]
    w4 = diagnosis.diagnosis_words(diagnosis.paired_gap(only_uniform, "CS"))
    assert w4["explains"].startswith("the weighting of the clusters") and "M = K" not in w4["explains"]


def test_similar_to_cs_checks():
    late = _late({"CS": [0.6, 0.7, 0.65], "HiCS-FL": [0.61, 0.69, 0.66]})
    var = pd.DataFrame([dict(setting="(3)", method=m, seed=s, fluctuation=f) for m, fs in
                        (("CS", [0.02, 0.03, 0.025]), ("HiCS-FL", [0.01, 0.012, 0.011])) for s, f in enumerate(fs)])
    c = diagnosis.similar_to_cs_checks(late, var)
    assert [x.verdict for x in c] == ["confirmed", "confirmed"]
    far = _late({"CS": [0.6, 0.7, 0.65], "HiCS-FL": [1.1, 1.2, 1.0]})
    rough = var.assign(fluctuation=np.where(var.method == "HiCS-FL", 0.05 + var.seed * 0.001, var.fluctuation))
    c = diagnosis.similar_to_cs_checks(far, rough)
    assert [x.verdict for x in c] == ["contradicted", "contradicted"]
    assert set(items.diagnosis(c, []).keys()) == {items.DIAGNOSIS["s3"], items.DIAGNOSIS["fig4a"]}


# ------------------------------------------------------------------------------ Table 1's cost columns
def test_cost_counts_follow_what_each_sampler_asks():
    N, K = 50, 5
    d1, d2 = 200, 800
    cost = costs.measure((d1, d2), timed=2, wall_time=False)
    at = cost.set_index(["method", "dim"])
    for d in (d1, d2):
        assert at.loc[("pow-d", d), "comm_numbers"] == (N - K) * d + N           # the model out, a loss back
        assert at.loc[("DivFL", d), "comm_numbers"] == (N - K) * d + N * d       # the model out, a gradient back
        assert at.loc[("DivFL", d), "client_numbers"] == N * d
        for m in ("random", "CS", "HiCS-FL"):
            assert at.loc[(m, d), "comm_numbers"] == 0 and at.loc[(m, d), "client_numbers"] == 0
    upd = costs.measure((d1, d2), timed=2, methods=("DivFL",), divfl_proxy="update", wall_time=False).set_index("dim")
    assert (upd.comm_numbers == 2 * (N - K) * upd.index).all()                # model out, update back, unselected
    sl = costs.slopes(cost)
    assert np.isclose(sl.loc["DivFL", "comm"], 1.0) and sl.loc["CS", "comm"] == 0.0
    with pytest.raises(ValueError, match="at least two ints"):
        costs.measure((100,))


def test_server_count_follows_the_counting_rules():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with costs.ServerCount() as n:
        a @ b                                    # mm: reads 12 + 20, 3 * 5 * 4 multiply-adds
    assert (n.reads, n.macs, n.handed) == (32, 60, 0)
    u = torch.randn(10, 7)
    with costs.ServerCount() as n:
        u[3], u.T, u[:, :2]                      # views read nothing
        u[torch.tensor([1, 4, 4])]               # a gather reads 3 rows of 7 and 3 indices
        u[torch.tensor([0, 2])] = torch.ones(2, 7)   # an indexed write reads the 14 values and 2 indices
        torch.cdist(u[None], u[None], compute_mode="donot_use_mm_for_euclid_dist")   # 10 * 10 * 7 terms
        with n.paused():
            u.sum()                              # the probe's work: not counted
        u[:3].numpy()                            # 21 numbers handed to numpy
    assert (n.reads, n.macs, n.handed) == (3 * 7 + 3 + 14 + 2 + 2 * 70, 10 * 10 * 7, 21)
    # CS's observe: one row of the Gram matrix per trained client, K N d multiply-adds
    N, K, d = 12, 3, 50
    cs = S.ClusteredSampling(K)
    state = cs.init(1, N, torch.ones(1, N), [0])
    pairs = torch.tensor([[0, 1], [0, 5], [0, 7]])
    with costs.ServerCount() as n:
        cs.observe(state, 0, pairs, torch.randn(K, d))
    assert n.macs == K * N * d


def test_cost_counts_are_exact_and_grow_as_table_1_prints():
    dims = (400, 1_600, 6_400)
    one = costs.measure(dims, wall_time=False)
    two = costs.measure(dims, wall_time=False)
    pd.testing.assert_frame_equal(one, two)                  # the same numbers twice, on any machine
    assert one.server_s.isna().all()
    at = one.set_index(["method", "dim"]).server_ops
    assert at.loc["random"].nunique() == 1                   # random sampling never reads an update
    sl = costs.slopes(one)
    assert abs(sl.loc["CS", "server"] - 1) < 0.05 and abs(sl.loc["DivFL", "server"] - 1) < 0.05
    for m in ("HiCS-FL", "pow-d"):                           # the server's extra work: the same at every size
        extra = at.loc[m] - at.loc["random"]
        assert extra.nunique() == 1 and sl.loc[m, "server"] == 0.0, m
    checks = costs.cost_checks(sl, dims)
    assert all(c[0].verdict == "agrees" for c in checks.values()), {k: c[0].ours for k, c in checks.items()}
    # a count that misses observe misses CS's Gram matrix: CS's extra computation no longer grows and is caught
    blind = costs.slopes(costs.measure(dims, wall_time=False, count_steps=("select",)))
    assert blind.loc["CS", "server"] < 0.2
    assert costs.cost_checks(blind, dims)[items.COSTS[("CS", "comp")]][0].verdict == "differs"
    with pytest.raises(ValueError, match="random sampling's row"):
        costs.slopes(one[one.method != "random"])
    with pytest.raises(ValueError, match="count_steps"):
        costs.measure(dims, count_steps="observe")


def test_cost_checks_agree_with_the_printed_orders_and_fail_a_wrong_one():
    ok = pd.DataFrame({"server": [0.0, 1.0, 0.9, 0.05], "client": [1.0, 0.0, 1.0, 0.0], "comm": [1.0, 0.0, 1.0, 0.0],
                       "client_at_max": [1e6, 0, 1e6, 0], "comm_at_max": [1e6, 0, 2e6, 0],
                       "server_s_at_max": [0, 0.1, 1, 0.001]},
                      index=["pow-d", "CS", "DivFL", "HiCS-FL"])
    checks = costs.cost_checks(ok)
    assert len(checks) == 8 and all(c[0].verdict == "agrees" for c in checks.values())
    assert all(c[0].scale.startswith("stand-in: synthetic updates") for c in checks.values())
    bad = ok.copy()
    bad.loc["HiCS-FL", "server"] = 1.0          # a HiCS-FL that grew with the model: O(C) is contradicted
    bad.loc["CS", "comm_at_max"] = 5.0           # a CS that sent something extra
    bad.loc["pow-d", ["client", "server"]] = [0.0, 0.0]
    bad.loc["pow-d", "client_at_max"] = 0.0      # a pow-d whose extra work did not grow
    checks = costs.cost_checks(bad)
    assert checks[items.COSTS[("HiCS-FL", "comp")]][0].verdict == "differs"
    assert checks[items.COSTS[("CS", "comm")]][0].verdict == "differs"
    assert checks[items.COSTS[("pow-d", "comp")]][0].verdict == "differs"


# ------------------------------------------------------------------------------ entropy page
def test_closeness_check_uses_a_tenth_of_ln_c():
    thr = 0.1 * math.log(10)
    assert entropy.closeness_check("(a)", [0.1, 0.12]).verdict == "agrees"
    c = entropy.closeness_check("(b)", [0.83, 0.9])
    assert c.verdict == "differs" and math.isclose(c.reference, thr) and "no number" in c.rule
    assert entropy.closeness_check("(b)", [thr - 0.01, thr - 0.02]).verdict == "agrees"


def test_separation_auc_is_exact_on_built_updates():
    assert entropy._auc(np.array([2.0, 3.0]), np.array([1.0, 2.0])) == (1 + 1 + 0.5 + 1) / 4
    # balanced clients (group of alpha 0.5) share one direction, imbalanced another: cosine separates perfectly
    N, C = 10, 3
    db = np.zeros((N, C))
    db[:2] = [1.0, 0.0, 0.0]                 # group 0 (smallest alpha)
    db[8:] = [0.0, 1.0, 0.0]                 # group 4 (largest alpha)
    db[2:8] = [0.0, 0.0, 1.0]
    tab = pd.DataFrame([dict(round=0, metric="delta_b", client=k, **{"class": i}, value=db[k, i])
                        for k in range(N) for i in range(C)])
    sf = entropy.separation_frame({("(x)", 0): tab}, None, {"(x)": (0.001, 0.01, 0.05, 0.1, 0.5)}, 0.01)
    assert sf.auc_cosine.iloc[0] == 1.0
    checks = entropy.separation_checks(pd.concat([sf] * 3, ignore_index=True).assign(auc_cosine=[1.0, 0.98, 0.99]))
    assert checks[0].verdict == "contradicted"


def test_the_new_checks_are_filed_under_checked_items_of_their_pages():
    from flkit.papers import scorecard
    known = {it.id: it for it in scorecard.items("004")}
    for item in items.DIAGNOSIS.values():
        assert known[item].status == "checked" and known[item].page == "hics/fmnist", item
    for item in items.COSTS.values():
        assert known[item].status == "checked" and known[item].page == "hics/fmnist", item
        assert scorecard.scale_kind(known[item].scale) == "stand-in"
    for item in (items.CLOSE_ITEM, items.COSINE_ITEM):
        assert known[item].status == "checked" and known[item].page == "hics/entropy", item
    # Fig. 9's panels carry the closeness checks: the ranking alone cannot make them reproduced
    close = entropy.closeness_check("(b)", [0.85, 0.9])
    out = items.by_item("entropy", [close, claims.holds("list (b): Spearman rho(H_hat, H) > 0, every seed", True, "t")])
    assert [c.what for c in out["Fig. 9(b)"]][0].startswith("closeness") and out[items.CLOSE_ITEM] == [close]
    v = scorecard.page_verdicts("004", out)
    assert v["Fig. 9(b)"] == "partly" and v[items.CLOSE_ITEM] == "not reproduced"
