"""Server rules of flkit.aggregate against hand-computed rounds; FedAU's weights against a hand trace."""
from __future__ import annotations

import math

import pytest
import torch

from flkit import aggregate as agg
from flkit.aggregate import TableState, Updates

DT = torch.float64

# One round, 3 clients, d = 2 (R = 1 run). Arrived: clients 0 and 2; p = (0.5, 0.25, 0.5).
DELTA = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]], dtype=DT)
MEMORY = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]], dtype=DT)
ACTIVE = torch.tensor([[True, False, True]])
P = torch.tensor([[0.5, 0.25, 0.5]], dtype=DT)


def updates(active=ACTIVE, delta=DELTA, p=P, counts=None, sizes=None):
    pairs = active.nonzero()
    c = torch.ones(len(pairs), dtype=DT) if counts is None else counts
    R, N = active.shape
    return Updates(pairs, delta[pairs[:, 0], pairs[:, 1]], c, R, N, None if p is None else p.expand(R, N), sizes)


def test_known_p_by_hand():
    # (1/3) * ([1,2]/0.5 + [5,6]/0.5) = (1/3) [12, 16]
    G, _ = agg.KnownP().apply(None, updates())
    assert torch.allclose(G, torch.tensor([[4.0, 16.0 / 3]], dtype=DT))
    with pytest.raises(ValueError, match="needs the participation probabilities"):
        agg.KnownP().apply(None, updates(p=None))


def test_fedavg_by_hand_weights_and_empty_round():
    G, _ = agg.FedAvg().apply(None, updates())
    assert torch.allclose(G, torch.tensor([[3.0, 4.0]], dtype=DT))
    sizes = torch.tensor([[10.0, 1.0, 30.0]], dtype=DT)          # (10 [1,2] + 30 [5,6]) / 40 = [4, 5]
    G, _ = agg.FedAvg("size").apply(None, updates(sizes=sizes))
    assert torch.allclose(G, torch.tensor([[4.0, 5.0]], dtype=DT))
    G, _ = agg.FedAvg().apply(None, updates(counts=torch.tensor([3.0, 1.0], dtype=DT)))  # drawn 3 times and once
    assert torch.allclose(G, torch.tensor([[2.0, 3.0]], dtype=DT))
    none = torch.zeros_like(ACTIVE)
    for rule in (agg.FedAvg(), agg.FedAvg("size")):
        G, _ = rule.apply(None, updates(active=none, sizes=sizes))
        assert torch.equal(G, torch.zeros(1, 2, dtype=DT))
    with pytest.raises(ValueError, match="uniform"):
        agg.FedAvg("sizes")


def test_average_all_by_hand():
    G, _ = agg.AverageAll().apply(None, updates())                # ([1,2] + [5,6]) / 3
    assert torch.allclose(G, torch.tensor([[2.0, 8.0 / 3]], dtype=DT))


def test_mifa_by_hand():
    G, st = agg.MIFA().apply(TableState(MEMORY.clone()), updates())
    assert torch.equal(st.table, torch.tensor([[[1.0, 2.0], [0.0, 1.0], [5.0, 6.0]]], dtype=DT))
    assert torch.allclose(G, torch.tensor([[2.0, 3.0]], dtype=DT))


def test_umifa_literal_by_hand():
    # client 0: [1,2]/0.5 - (2-1)[1,0] = [1,4]; client 2: [5,6]/0.5 - [2,2] = [8,10]; client 1 kept
    G, st = agg.UMIFA("literal").apply(TableState(MEMORY.clone()), updates())
    assert torch.allclose(st.table, torch.tensor([[[1.0, 4.0], [0.0, 1.0], [8.0, 10.0]]], dtype=DT))
    assert torch.allclose(G, torch.tensor([[3.0, 5.0]], dtype=DT))


def test_umifa_saga_by_hand():
    # estimates: y_0 + (D_0 - y_0)/0.5 = [1,4]; y_1 = [0,1]; y_2 + (D_2 - y_2)/0.5 = [8,10]; table <- raw D
    G, st = agg.UMIFA("saga").apply(TableState(MEMORY.clone()), updates())
    assert torch.allclose(G, torch.tensor([[3.0, 5.0]], dtype=DT))
    assert torch.equal(st.table, torch.tensor([[[1.0, 2.0], [0.0, 1.0], [5.0, 6.0]]], dtype=DT))


def test_fedvarp_by_hand():
    # (1/3) sum_n y_n + (1/2) sum_{n in S} (D_n - y_n) = [1, 1] + (1/2) ([0, 2] + [3, 4]) = [2.5, 4]
    G, st = agg.FedVarp().apply(TableState(MEMORY.clone()), updates(p=None))
    assert torch.allclose(G, torch.tensor([[2.5, 4.0]], dtype=DT))
    assert torch.equal(st.table, torch.tensor([[[1.0, 2.0], [0.0, 1.0], [5.0, 6.0]]], dtype=DT))
    G, _ = agg.FedVarp().apply(TableState(MEMORY.clone()), updates(active=torch.zeros_like(ACTIVE), p=None))
    assert torch.equal(G, torch.zeros_like(G))                     # nobody arrived: no step (the authors' code)


def test_momentum_by_hand_and_closed_form():
    rule = agg.Momentum(agg.MIFA(), 0.5)
    st = rule.init(1, 3, 2, DT, "cpu")
    assert torch.equal(st.inner.table, torch.zeros(1, 3, 2, dtype=DT))
    assert torch.equal(st.v, torch.zeros(1, 2, dtype=DT))
    st.inner.table, st.v = MEMORY.clone(), torch.tensor([[1.0, -1.0]], dtype=DT)
    v1, st = rule.apply(st, updates())
    assert torch.allclose(v1, torch.tensor([[2.5, 2.5]], dtype=DT))   # 0.5 [1,-1] + [2,3]
    v2, st = rule.apply(st, updates(active=torch.zeros_like(ACTIVE)))  # nobody: G = mean of the table = [2, 3]
    assert torch.allclose(v2, 0.5 * v1 + torch.tensor([[2.0, 3.0]], dtype=DT))
    beta, T = 0.7, 12                                               # constant G: v_T = sum_{k<T} beta^k G
    rule, st = agg.Momentum(agg.AverageAll(), beta), None
    st = rule.init(1, 3, 2, DT, "cpu")
    full = torch.ones(1, 3, dtype=torch.bool)
    for _ in range(T):
        v, st = rule.apply(st, updates(active=full))
    assert torch.allclose(v, sum(beta ** k for k in range(T)) * DELTA.mean(1))
    with pytest.raises(ValueError, match="beta"):
        agg.Momentum(agg.MIFA(), 1.0)


# FedAU (Algorithm 2 of document 000, the authors' code's order): participation of one client over rounds
TRACE = [1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1]


def _fedau_weights(K, trace=TRACE):
    rule = agg.FedAU(K)
    st = rule.init(1, 1, 1, DT, "cpu")
    out = []
    for a in trace:
        out.append(float(rule.weights(st)[0, 0]))
        st = rule.record(st, torch.tensor([[bool(a)]]))
    return out


def test_fedau_weights_hand_trace():
    # intervals recorded: t=0: 1 ; t=3: 3 ; t=5: 2 ; t=11: 6 (no cutoff). Weight read before recording.
    want = [1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2]
    assert _fedau_weights(None) == pytest.approx(want)
    # K = 2: absences of 2 rounds are recorded as intervals of 2: t=0: 1; t=2: 2 (cutoff); t=3: 1;
    # t=5: 2; t=7: 2 (cutoff); t=9: 2 (cutoff); t=11: 2 (cutoff at t=11: gap 2 reached by absence? no, arrival)
    got = _fedau_weights(2)
    means, ints = [], []
    gap = 0
    for a in TRACE:                                   # the rule in words, written independently
        means.append(sum(ints) / len(ints) if ints else 1.0)
        gap += 1
        if a or gap == 2:
            ints.append(gap)
            gap = 0
    assert got == pytest.approx(means)
    assert got[3] == pytest.approx(1.5) and got[4] == pytest.approx(4 / 3)


def test_fedau_aggregate_divides_by_N_and_uses_current_weights():
    rule = agg.FedAU(None)
    st = rule.init(1, 3, 2, DT, "cpu")
    G, st = rule.apply(st, updates())                 # omega = 1 for all before any interval
    assert torch.allclose(G, torch.tensor([[2.0, 8.0 / 3]], dtype=DT))
    idle = torch.zeros_like(ACTIVE)
    for _ in range(3):
        _, st = rule.apply(st, updates(active=idle))
    G, st = rule.apply(st, updates())                 # clients 0, 2 have one interval of 1: omega = 1
    assert torch.allclose(G, torch.tensor([[2.0, 8.0 / 3]], dtype=DT))
    assert torch.allclose(rule.weights(st), torch.tensor([[2.5, 1.0, 2.5]], dtype=DT))  # (1 + 4) / 2
    with pytest.raises(ValueError, match="cutoff"):
        agg.FedAU(0)


def test_fedau_weight_mean_is_inverse_p_for_bernoulli():
    # long-run mean interval of Bernoulli(p) participation is 1/p (geometric); with cutoff K its mean is
    # (1 - (1-p)^K) / p (the cutoff-geometric mean of the proof of Theorem 3)
    g = torch.Generator().manual_seed(0)
    p, T, R = torch.tensor([0.05, 0.2, 0.5], dtype=DT), 20000, 1
    for K in (None, 10):
        rule = agg.FedAU(K)
        st = rule.init(R, 3, 1, DT, "cpu")
        for _ in range(T):
            st = rule.record(st, torch.rand(R, 3, generator=g, dtype=DT) < p)
        want = 1 / p if K is None else (1 - (1 - p) ** K) / p
        assert torch.allclose(rule.weights(st)[0], want, rtol=0.06), (K, rule.weights(st), want)


def test_memory_floats():
    assert agg.memory_floats(agg.FedAU(50), 250, 1000) == 3 * 250
    assert agg.memory_floats(agg.MIFA(), 250, 1000) == 250 * 1000
    assert agg.memory_floats(agg.Momentum(agg.FedVarp(), 0.5), 10, 7) == 10 * 7 + 7
    assert agg.memory_floats(agg.FedAvg(), 250, 1000) == 0
    assert math.isfinite(1.0)
