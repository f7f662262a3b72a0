"""flkit.fl.run: FedAvg, FedAU, MIFA and FedVarp through the one round loop against a plain per-client loop
written here (float64), samplers through the probe, resume after a deadline, bad input."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from flkit import aggregate as agg
from flkit import fl, participation, sample
from flkit.tasks import EngineTask

DT = torch.float64
N, T, SEEDS = 6, 7, [3, 11]
P = np.array([0.9, 0.2, 0.5, 0.7, 0.3, 0.6])


def _task(**kw):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(120, 5, generator=g, dtype=DT)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long() + (x[:, 2] > 1).long()
    perm = torch.randperm(120, generator=g).numpy()
    clients = np.array_split(perm, N)
    model = torch.nn.Linear(5, 3).to(DT)
    args = dict(model=model, x=x, y=y, clients=clients, x_test=x[:40], y_test=y[:40], batch_size=4, steps=3,
                local_lr=0.2)
    return EngineTask(**(args | kw))


def _avail(seed):
    return participation.bernoulli(P, T, seed)


def _plain(task, rule, seed, lr):
    """The algorithms written out: per client an nn.Linear and torch.optim.SGD on the task's minibatches."""
    w = task.init_params([seed])[0].clone()
    mask = _avail(seed)
    table = torch.zeros(N, w.numel(), dtype=DT)
    intervals, gap = [[] for _ in range(N)], [0] * N
    for t in range(T):
        S = [i for i in range(N) if mask[t, i]]
        delta = {}
        for i in S:
            net = torch.nn.Linear(5, 3).to(DT)
            with torch.no_grad():
                net.weight.copy_(w[:15].view(3, 5))
                net.bias.copy_(w[15:])
            opt = torch.optim.SGD(net.parameters(), lr=task.local_lr)
            batches, steps = task.batches(seed, t, i)
            for s in range(int(steps[0])):
                idx = batches[0, s]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(task.x[idx]), task.y[idx]).backward()
                opt.step()
            delta[i] = w - torch.cat([net.weight.detach().reshape(-1), net.bias.detach()])
        if rule == "fedavg":
            G = sum(delta.values()) / len(S) if S else torch.zeros_like(w)
        elif rule == "fedau":
            omega = [np.mean(iv) if iv else 1.0 for iv in intervals]
            G = sum(omega[i] * delta[i] for i in S) / N if S else torch.zeros_like(w)
            for i in range(N):
                gap[i] += 1
                if i in delta:
                    intervals[i].append(gap[i])
                    gap[i] = 0
        elif rule == "mifa":
            for i in S:
                table[i] = delta[i]
            G = table.mean(0)
        elif rule == "fedvarp":
            G = table.mean(0) + (sum(delta[i] - table[i] for i in S) / len(S) if S else 0.0)
            for i in S:
                table[i] = delta[i]
        w = w - lr * G
    return w


ALGS = {"fedavg": fl.Algorithm(agg.FedAvg(), lr=1.0), "fedau": fl.Algorithm(agg.FedAU(), lr=1.5),
        "mifa": fl.Algorithm(agg.MIFA(), lr=1.0), "fedvarp": fl.Algorithm(agg.FedVarp(), lr=0.8)}


def test_four_rules_match_a_plain_per_client_loop():
    task = _task()
    res = fl.run(task, ALGS, seeds=SEEDS, rounds=T, availability=_avail, every=T)
    for a, alg in ALGS.items():
        for k, seed in enumerate(SEEDS):
            want = _plain(task, a, seed, alg.lr)
            got = res.final_w[len(SEEDS) * list(ALGS).index(a) + k]
            assert torch.allclose(got, want, rtol=0, atol=1e-10), (a, seed, (got - want).abs().max())
    # the same clients on the same rounds for every algorithm: the same client updates counted
    for a in ALGS:
        assert np.array_equal(res.evals[a], [_avail(s).sum() for s in SEEDS])
    tidy = res.tidy()
    assert set(tidy["method"]) == set(ALGS) and set(tidy["round"]) == {0, T}


def test_a_run_does_not_depend_on_its_neighbours():
    task = _task()
    both = fl.run(task, {"mifa": ALGS["mifa"]}, seeds=SEEDS, rounds=T, availability=_avail)
    alone = fl.run(task, {"mifa": ALGS["mifa"]}, seeds=SEEDS[1:], rounds=T, availability=_avail)
    assert torch.equal(both.final_w[1], alone.final_w[0])


def test_resume_after_deadline_gives_the_same_numbers(tmp_path):
    task = _task()
    algs = {"fedau": ALGS["fedau"], "powd": fl.Algorithm(agg.FedAvg(), sampler=sample.PowD(2, 4))}
    ref = fl.run(task, algs, seeds=SEEDS, rounds=T, availability=_avail, every=2)
    ck = tmp_path / "ck.pt"
    with pytest.raises(fl.Deadline):
        fl.run(task, algs, seeds=SEEDS, rounds=T, availability=_avail, every=2, checkpoint=ck, deadline=time.time() - 1)
    assert ck.is_file()
    res = fl.run(task, algs, seeds=SEEDS, rounds=T, availability=_avail, every=2, checkpoint=ck)
    assert res.resumed_from == 1 and not ck.exists()
    assert torch.equal(res.final_w, ref.final_w)
    assert res.tidy().equals(ref.tidy())
    with pytest.raises(fl.Deadline):
        fl.run(task, algs, seeds=SEEDS, rounds=T, availability=_avail, every=2, checkpoint=ck, deadline=time.time() - 1)
    with pytest.raises(RuntimeError, match="another run"):
        fl.run(task, algs, seeds=SEEDS, rounds=T, availability=_avail, every=3, checkpoint=ck)


def test_powd_sampler_reads_losses_through_the_probe():
    task = _task()
    res = fl.run(task, {"powd": fl.Algorithm(agg.FedAvg(), sampler=sample.PowD(2, 4))}, seeds=SEEDS, rounds=T,
                 availability=_avail)
    assert np.all(res.evals["powd"] <= 2 * T)
    assert np.all(res.evals["powd"] >= np.minimum(2, [_avail(s).sum(1) for s in SEEDS]).sum(1))


def test_divergence_is_marked_and_recorded_as_inf():
    task = _task(local_lr=50.0)
    res = fl.run(task, {"fedavg": fl.Algorithm(agg.FedAvg(), lr=50.0)}, seeds=SEEDS, rounds=T,
                 availability=_avail, diverge_factor=10.0)
    d = res.diverged["fedavg"]
    assert np.all(d > 0)
    k = list(res.rounds).index(d[0])
    assert np.isinf(res.values["fedavg"]["test_loss"][k:, 0]).all()


@pytest.mark.parametrize("kw,match", [(dict(rounds=-5), "rounds"), (dict(rounds=0), "rounds"),
                                      (dict(seeds=[]), "no seeds"), (dict(seeds=[1, 1]), "repeated"),
                                      (dict(every=0), "every"), (dict(p=1.5), "probability")])
def test_bad_input_is_rejected_before_work(kw, match):
    args = dict(seeds=SEEDS, rounds=T, availability=_avail) | kw
    with pytest.raises(ValueError, match=match):
        fl.run(_task(), ALGS, **args)
