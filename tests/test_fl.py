"""flkit.fl.run: FedAvg, FedAU, MIFA and FedVarp through the one round loop against a plain per-client loop
written here (float64), samplers through the probe, resume after a deadline, bad input."""
from __future__ import annotations

import dataclasses
import inspect
import os
import time
import types

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
            G = table.mean(0) + sum(delta[i] - table[i] for i in S) / len(S) if S else torch.zeros_like(w)
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
                                      (dict(rounds=True), "rounds"), (dict(rounds=2.0), "rounds"),
                                      (dict(seeds=[]), "no seeds"), (dict(seeds=[1, 1]), "repeated"),
                                      (dict(seeds=[-1]), "seed"), (dict(every=0), "every"),
                                      (dict(track_every=-5), "track_every"), (dict(p=1.5), "probability"),
                                      (dict(p=0.0), "probability"), (dict(p=[0.5, 0.0, 1, 1, 1, 1]), "probability")])
def test_bad_input_is_rejected_before_work(kw, match):
    args = dict(seeds=SEEDS, rounds=T, availability=_avail) | kw
    with pytest.raises(ValueError, match=match):
        fl.run(_task(), ALGS, **args)


# ------------------------------------------------------------------ issue 17: closed forms, kill, resume
class _Line:
    """A closed-form task: every arrived client of a run with seed s sends delta = speed[s], so FedAvg with
    lr 1 moves the run's one parameter to w_t = -speed[s] t exactly (dyadic speeds). Metrics: "gap" =
    10 + w or "root" = sqrt(2.5 + w) (NaN once w < -2.5)."""
    num_clients, dim, dtype = 2, 1, DT

    def __init__(self, speed, metric="gap", sizes=None):
        self.speed, self.metric = speed, metric
        if sizes is not None:
            self.sizes = sizes

    def client_updates(self, w, active, t, runs):
        pairs = active.nonzero()
        speed = [self.speed[runs.seeds[r]] for r in pairs[:, 0].tolist()]
        return pairs, torch.tensor(speed, dtype=DT).reshape(-1, 1)         # (0, 1) in a round without clients

    def metrics(self, w):
        return {"gap": 10 + w[:, 0]} if self.metric == "gap" else {"root": torch.sqrt(2.5 + w[:, 0])}


def _line_run(speed, seeds, **kw):
    return fl.run(_Line(speed, kw.pop("metric", "gap")), {"a": fl.Algorithm(agg.FedAvg())}, seeds=seeds, **kw)


def test_rounds_to_target_and_the_stop_rule_by_hand():
    """gap_t = 10 - speed t meets eps = 6 first at t = 4 / speed (equality counts): seed 5 (speed 1) at
    round 4, seed 9 (speed 1/4) at round 16; the default stop rule waits for every run; client updates are
    counted until a run's hit (2 clients per round)."""
    speed = {5: 1.0, 9: 0.25}
    res = _line_run(speed, [5, 9], rounds=20, target=("gap", 6.0))
    assert res.hit["a"].tolist() == [4, 16] and res.rounds_done == 16 and res.rounds.tolist() == list(range(17))
    assert res.evals["a"].tolist() == [8.0, 32.0] and res.diverged["a"].tolist() == [-1, -1]
    assert res.final_w[:, 0].tolist() == [-16.0, -4.0]
    short = _line_run(speed, [5, 9], rounds=10, target=("gap", 6.0))    # seed 9 never gets there
    assert short.hit["a"].tolist() == [4, -1] and short.rounds_done == 10 and short.evals["a"].tolist() == [8.0, 20.0]
    full = _line_run(speed, [5, 9], rounds=20, target=("gap", 6.0), stop_early=False)
    assert full.hit["a"].tolist() == [4, 16] and full.rounds_done == 20 and full.evals["a"].tolist() == [8.0, 32.0]
    out = full.outcomes().set_index(["seed", "metric"])["value"]
    assert out[(9, "hit_round")] == 16 and out[(5, "client_updates")] == 8


def test_recorded_rounds_end_at_the_last_round_and_tidy_rows_carry_their_seed():
    res = _line_run({5: 1.0, 9: 0.25, 2: 0.5}, [5, 9, 2], rounds=7, every=3)
    assert res.rounds.tolist() == [0, 3, 6, 7]
    tidy = res.tidy()
    assert len(tidy) == 3 * 4
    want = {5: 1.0, 9: 0.25, 2: 0.5}
    for row in tidy.itertuples():
        assert row.value == 10 - want[row.seed] * row.round, row


def test_nan_metric_marks_a_run_diverged():
    """root_t = sqrt(2.5 - speed t): seed 5 (speed 1) becomes NaN at round 3: diverged at 3 (the claim
    holds through non-finiteness); seed 7 (speed -2) exceeds 2 x its initial value at round 4
    (sqrt(10.5) > 2 sqrt(2.5)); seed 9 (speed 1/4) stays finite and below: never diverged (rejected).
    A diverged run stops training (no client updates counted) and records +inf from then on."""
    res = _line_run({5: 1.0, 7: -2.0, 9: 0.25}, [5, 7, 9], rounds=8, metric="root", diverge_factor=2.0)
    assert res.diverged["a"].tolist() == [3, 4, -1]
    v = res.values["a"]["root"]
    # torch's float64 sqrt may differ from numpy's by 1 ulp on some CPUs' kernels (flkit.numerics): 2 ulps
    ulps = lambda a, b: np.abs(a - b) <= 2 * np.spacing(b)  # noqa: E731
    assert ulps(v[:3, 0], np.sqrt(2.5 - np.arange(3))).all() and np.isposinf(v[3:, 0]).all()
    assert np.isfinite(v[:4, 1]).all() and np.isposinf(v[4:, 1]).all()
    assert ulps(v[:, 2], np.sqrt(2.5 - 0.25 * np.arange(9))).all()
    assert res.evals["a"].tolist() == [6.0, 8.0, 16.0] and res.final_w[:, 0].tolist() == [-3.0, 8.0, -2.0]


class _Killed(Exception):
    pass


def test_periodic_checkpoint_then_a_hard_kill_resumes_to_identical_results(tmp_path):
    """checkpoint_every_s=0: a checkpoint after every round, with no deadline. A kill in round 4 (an
    exception out of local training) leaves the checkpoint of round 4 on disk; the same call resumes from
    it and gives the uninterrupted run's models, metric rows (every round recorded) and outcomes exactly."""
    algs = {"fedau": ALGS["fedau"], "powd": fl.Algorithm(agg.FedAvg(), sampler=sample.PowD(2, 4))}
    kw = dict(seeds=SEEDS, rounds=T, availability=_avail, every=1)
    ref = fl.run(_task(), algs, **kw)
    ck, task, seen = tmp_path / "ck.pt", _task(), []
    train = task.client_updates

    def killed_in_round_4(w, active, t, runs):
        if t == 4:
            seen.append(torch.load(ck, weights_only=False)["t"] if ck.is_file() else None)
            raise _Killed
        return train(w, active, t, runs)

    task.client_updates = killed_in_round_4
    with pytest.raises(_Killed):
        fl.run(task, algs, **kw, checkpoint=ck, checkpoint_every_s=0)
    assert seen == [4] and ck.is_file()                      # saved during the run: nothing but round 4 lost
    res = fl.run(_task(), algs, **kw, checkpoint=ck, checkpoint_every_s=0)
    assert res.resumed_from == 4 and res.rounds_done == T - 4 and not ck.exists()
    assert res.rounds.tolist() == list(range(T + 1))          # the rows buffered before the kill survived
    assert torch.equal(res.final_w, ref.final_w)
    assert res.tidy().equals(ref.tidy()) and res.outcomes().equals(ref.outcomes())


def test_an_algorithms_own_local_step_size_wins():
    alg = {"a": fl.Algorithm(agg.FedAvg(), local_lr=0.05)}
    own = fl.run(_task(local_lr=0.2), alg, seeds=SEEDS, rounds=3, availability=_avail)
    same = fl.run(_task(local_lr=0.05), {"a": fl.Algorithm(agg.FedAvg())}, seeds=SEEDS, rounds=3, availability=_avail)
    task_lr = fl.run(_task(local_lr=0.2), {"a": fl.Algorithm(agg.FedAvg())}, seeds=SEEDS, rounds=3,
                     availability=_avail)
    assert torch.equal(own.final_w, same.final_w) and not torch.allclose(own.final_w, task_lr.final_w)


@pytest.mark.parametrize("mode", ["steps", "epochs"])
def test_engine_task_minibatches_follow_the_seed_round_client_stream(mode):
    """Client i's minibatches in round t of a run with seed s: flkit.batches.sample_batches (steps) or
    flkit.batches.epoch_batches (epochs, padded) of its indices with torch_gen(s, f"batch/{t}/{i}"): new every round."""
    from flkit.batches import epoch_batches, sample_batches
    from flkit.seeding import torch_gen
    task = _task(**({"steps": 3} if mode == "steps" else {"steps": None, "epochs": 2}))
    idx = torch.as_tensor(task.clients[2])
    rounds = []
    for t in range(3):
        got, steps = task.batches(11, t, 2)
        g = torch_gen(11, f"batch/{t}/2")
        want = (sample_batches([idx], 4, 3, g) if mode == "steps"
                else epoch_batches([idx], 4, 2, generators=[g], last="pad"))
        assert torch.equal(got, want[0]) and torch.equal(steps, want[1])
        rounds.append(got)
    assert not torch.equal(rounds[0], rounds[1]) and not torch.equal(rounds[1], rounds[2])


@pytest.mark.parametrize("kw", [dict(steps=-5), dict(steps=True), dict(batch_size=0), dict(chunk=-5),
                                dict(eval_batch_size=0), dict(steps=None, epochs=2.0)])
def test_engine_task_counts_are_positive_ints(kw):
    with pytest.raises(ValueError, match="positive int"):
        _task(**kw)


# ------------------------------------------------------------------ issue 24: checkpoint key, inputs, temp files
def _ones(rounds, n=2):
    return lambda s: np.ones((rounds, n), dtype=bool)


def _gap_mask(s):
    m = np.ones((6, 2), dtype=bool)
    m[2] = False                                   # nobody on round 2
    return m


_SAME = dict(seeds=[5, 9], rounds=6, availability=_ones(6), p=0.5, every=1, target=("gap", -100.0))  # never met
_CHANGES = {"availability": dict(availability=_gap_mask),
            "availability as an array": dict(availability=_gap_mask(0)),
            "algorithm's availability": dict(algs={"a": fl.Algorithm(agg.FedAvg(), availability=_gap_mask)}),
            "p": dict(p=0.25), "p per client": dict(p=[0.5, 0.25]), "p per seed": dict(p={5: 0.5, 9: 0.25}),
            "algorithm's p": dict(algs={"a": fl.Algorithm(agg.FedAvg(), p=0.25)}),
            "server lr": dict(algs={"a": fl.Algorithm(agg.FedAvg(), lr=0.5)}),
            "w0": dict(w0=[1.0]), "diverge_factor": dict(diverge_factor=3.0), "diverge_ref": dict(diverge_ref=2.0),
            "target": dict(target=("gap", -50.0)), "stop_early": dict(stop_early=False), "stop_when":
                dict(stop_when=fl.all_hit_or_diverged), "sizes": dict(task=_Line({5: 1.0, 9: 0.25}, sizes=[1, 3])),
            "track": dict(track=lambda w: {"w": w[:, 0]}), "track_every": dict(track_every=2), "every": dict(every=2)}


def _line(ck=None, algs=None, task=None, **kw):
    return fl.run(task or _Line({5: 1.0, 9: 0.25}), algs or {"a": fl.Algorithm(agg.FedAvg())},
                  **(_SAME | dict(checkpoint=ck) | kw))


@pytest.mark.parametrize("change", list(_CHANGES))
def test_a_checkpoint_of_another_experiment_is_refused_and_the_same_call_resumes(tmp_path, change):
    """The checkpoint key covers the availability masks used, p, w0, the server step size and every
    keyword argument that changes the numbers: a call that differs in one of them refuses the checkpoint
    (it would resume someone else's trajectory) and the same call resumes to the uninterrupted result."""
    ck = tmp_path / "ck.pt"
    with pytest.raises(fl.Deadline):
        _line(ck, deadline=time.time() - 1)
    assert ck.is_file()
    with pytest.raises(RuntimeError, match="belongs to another run.*remove it"):
        _line(ck, **_CHANGES[change])
    assert ck.is_file()
    res, ref = _line(ck), _line()
    assert res.resumed_from == 1 and not ck.exists()
    assert torch.equal(res.final_w, ref.final_w) and res.tidy().equals(ref.tidy())


def test_resume_with_equal_inputs_of_another_type_is_accepted(tmp_path):
    """The digests are of the values used: p as a list or an array, a mask as a callable or a dict."""
    ck = tmp_path / "ck.pt"
    with pytest.raises(fl.Deadline):
        _line(ck, p=np.array([0.5, 0.25]), deadline=time.time() - 1)
    res = _line(ck, p=[0.5, 0.25], availability={5: np.ones((9, 2)), 9: np.ones((6, 2), dtype=int)})
    assert res.resumed_from == 1


def test_the_divergence_reference_survives_a_resume(tmp_path):
    """gap_t = 10 + 2t (speed -2) exceeds 2 x its initial 10 first at round 6. Killed in round 4 and
    resumed, the run must still compare with 10 (not with gap_4 = 18, which it would never exceed by
    round 8): diverged at 6, as uninterrupted."""
    ck, seen = tmp_path / "ck.pt", []
    kw = dict(seeds=[5], rounds=8, diverge_factor=2.0, availability=_ones(8))
    ref = _line_run({5: -2.0}, **kw)
    assert ref.diverged["a"].tolist() == [6]
    task = _Line({5: -2.0})
    train = task.client_updates

    def killed_in_round_4(w, active, t, runs):
        if t == 4:
            seen.append(torch.load(ck, weights_only=False)["t"])
            raise _Killed
        return train(w, active, t, runs)

    task.client_updates = killed_in_round_4
    with pytest.raises(_Killed):
        fl.run(task, {"a": fl.Algorithm(agg.FedAvg())}, **kw, checkpoint=ck, checkpoint_every_s=0)
    assert seen == [4]
    res = _line_run({5: -2.0}, **kw, checkpoint=ck)
    assert res.resumed_from == 4 and res.diverged["a"].tolist() == [6]
    assert res.outcomes().equals(ref.outcomes()) and res.tidy().equals(ref.tidy())


@pytest.mark.parametrize("kw,match", [
    (dict(availability=0.3), r"availability must be None.*'all'.*got 0\.3"),
    (dict(availability=float("nan")), r"availability must be None.*'all'.*got nan"),
    (dict(availability=True), r"availability must be"), (dict(availability="some"), r"got 'some'"),
    (dict(availability=lambda s: np.full((T, N), 0.5)), r"availability\(3\) holds 0\.5.*bool or 0/1"),
    (dict(availability={3: np.full((T, N), np.nan), 11: np.ones((T, N))}), r"availability of seed 3 holds nan"),
    (dict(availability=lambda s: 0.3), r"availability\(3\) has shape \(\)"),
    (dict(availability={3: np.ones((T, N))}), r"availability has no entry for seed 11"),
    (dict(availability=np.ones((T - 1, N))), r"availability has shape \(6, 6\); need \(>= 7, 6\)"),
    (dict(diverge_factor=0.0), r"diverge_factor must be None .* > 0.*got 0\.0"),
    (dict(diverge_factor=-2.0), "diverge_factor"), (dict(diverge_factor=float("nan")), "diverge_factor"),
    (dict(diverge_factor="10"), "diverge_factor"), (dict(diverge_ref=float("nan")), "diverge_ref"),
    (dict(diverge_ref=-1.0), "diverge_ref")])
def test_bad_availability_and_divergence_settings_are_rejected_before_work(kw, match):
    task = _task()
    calls = []
    task.client_updates = lambda *a: calls.append(a)
    with pytest.raises(ValueError, match=match):
        fl.run(task, ALGS, **(dict(seeds=SEEDS, rounds=T, availability=_avail) | kw))
    assert not calls


def test_an_algorithms_own_bad_availability_names_the_algorithm():
    bad = {"a": fl.Algorithm(agg.FedAvg(), availability=lambda s: np.full((T, N), 2))}
    with pytest.raises(ValueError, match=r"algorithm 'a' availability\(3\) holds 2"):
        fl.run(_task(), bad, seeds=SEEDS, rounds=T)


@pytest.mark.parametrize("field,v", [("lr", -1.0), ("lr", float("nan")), ("lr", float("inf")), ("lr", "1"),
                                     ("lr", None), ("local_lr", -0.1), ("local_lr", float("nan"))])
def test_a_negative_or_non_finite_step_size_is_refused_at_construction(field, v):
    with pytest.raises(ValueError, match=rf"Algorithm {field} must be a finite number >= 0.*got {v!r}"):
        fl.Algorithm(agg.FedAvg(), **{field: v})
    assert fl.Algorithm(agg.FedAvg(), lr=0.0, local_lr=np.float32(0.1)).lr == 0.0


def test_a_checkpoint_path_that_is_a_folder_is_refused_before_work(tmp_path):
    calls, task = [], _Line({5: 1.0})
    train = task.client_updates
    task.client_updates = lambda *a: (calls.append(a[2]), train(*a))[1]
    with pytest.raises(ValueError, match="checkpoint .* is not a file"):
        fl.run(task, {"a": fl.Algorithm(agg.FedAvg())}, seeds=[5], rounds=4, checkpoint=tmp_path,
               deadline=time.time() - 1)
    assert not calls and not tmp_path.with_name(tmp_path.name + ".tmp").exists()
    assert not [p for p in tmp_path.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_failed_checkpoint_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    real = torch.save

    def half_written(obj, f):
        real({"partial": 1}, f)
        raise OSError("disk full")

    monkeypatch.setattr(fl.torch, "save", half_written)
    with pytest.raises(OSError, match="disk full"):
        _line_run({5: 1.0}, [5], rounds=4, checkpoint=tmp_path / "ck.pt", checkpoint_every_s=0)
    assert list(tmp_path.iterdir()) == []


def test_stale_checkpoint_temp_files_are_removed_and_fresh_ones_kept(tmp_path):
    """A killed checkpoint writer's temporary file (.<name>.<pid>.<hex>.tmp, the results store's
    pattern) is removed by the next run with that checkpoint once older than a minute."""
    old, fresh = tmp_path / ".ck.pt.1.dead.tmp", tmp_path / ".ck.pt.2.beef.tmp"
    for f in (old, fresh):
        f.write_bytes(b"partial")
    os.utime(old, (time.time() - 3600,) * 2)
    _line_run({5: 1.0}, [5], rounds=2, checkpoint=tmp_path / "ck.pt")
    assert not old.exists() and fresh.exists()


def test_a_large_checkpoint_is_written_in_parts_under_the_cap(tmp_path, monkeypatch):
    """A state over fl.PART_BYTES goes to parts of at most that size plus a small index (written last); the run
    resumes from them to the same numbers, a rewrite removes the parts it no longer names, the end removes all."""
    monkeypatch.setattr(fl, "PART_BYTES", 1500)
    obj = {"w": torch.arange(3000, dtype=torch.float32), "t": 3}
    ck = tmp_path / "ck.pt"
    written = fl.save_checkpoint(obj, ck)
    parts = [p for p in written if p != ck]
    assert len(parts) >= 7 and all(p.stat().st_size <= 1500 for p in parts) and ck.stat().st_size < 3000
    got = fl.load_checkpoint(ck)
    assert got["t"] == 3 and torch.equal(got["w"], obj["w"])
    fl.save_checkpoint({"w": obj["w"] + 1, "t": 4}, ck)
    assert not any(p.exists() for p in parts) and fl.load_checkpoint(ck)["t"] == 4
    fl.save_checkpoint({"t": 5}, ck)                                # small again: one file, no parts
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.pt"] and fl.load_checkpoint(ck) == {"t": 5}
    fl.save_checkpoint(obj, ck)
    victim = next(p for p in tmp_path.iterdir() if ".part" in p.name)
    victim.write_bytes(b"x" * victim.stat().st_size)
    with pytest.raises(RuntimeError, match="do not match"):
        fl.load_checkpoint(ck)
    fl.remove_checkpoint(ck)
    assert list(tmp_path.iterdir()) == []
    task = _task()
    algs = {"fedau": ALGS["fedau"]}
    ref = fl.run(task, algs, seeds=SEEDS, rounds=T, availability=_avail, every=2)
    with pytest.raises(fl.Deadline):
        fl.run(task, algs, seeds=SEEDS, rounds=T, availability=_avail, every=2, checkpoint=ck, deadline=time.time() - 1)
    assert len(list(tmp_path.glob("ck.pt.*.part*"))) > 1
    res = fl.run(task, algs, seeds=SEEDS, rounds=T, availability=_avail, every=2, checkpoint=ck)
    assert res.resumed_from == 1 and torch.equal(res.final_w, ref.final_w) and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ issue 31: the checkpoint key, pinned
_PINNED_KEY = "e6e8e550063b6637"
_PINNED_PARTS = {"task": "70f87ed242cfad6b", "algorithms": "b20e2f227444f11f", "seeds": "91a4aad954a1b3a1",
                 "rounds": "3af5d6e7f9476d9d", "every": "0555debc8a653494", "target": "bdb3b8c87ebf46ad",
                 "stop_early": "7522d315bb64415d", "stop_when": "e15961ee577142b3", "diverge": "91fba3369cac6090",
                 "track": "6608785650006e97", "track_every": "28cb03b06c288e88", "availability": "f3cc04bcb78d10c7",
                 "p": "48baf56755587301", "w0": "28382723e0c533fc", "sizes": "b84a932fc3abb85f"}
_CKPT_FIELDS = {"key", "key_parts", "w", "agg", "smp", "t", "hit", "diverged", "evals", "first", "store", "wall",
                "task"}


def test_the_checkpoint_key_and_fields_are_pinned(tmp_path):
    """The key of a fixed small call (two algorithms, one with a sampler, its own p and step sizes; 2 seeds;
    availability, p, w0, sizes, target, stop rule, divergence settings) is the literal hex the loop gave when the
    checkpoints under results/*/checkpoints were written: a refactor of fl.run that changed how the key is made
    would make every committed checkpoint refuse to resume ("belongs to another run"). The checkpoint's fields are
    pinned too (an old checkpoint must load)."""
    algs = {"avg": fl.Algorithm(agg.FedAvg(), sampler=sample.UniformK(1), lr=0.5, local_lr=0.25),
            "au": fl.Algorithm(agg.FedAU(K=3), p=[0.5, 0.75])}
    ck = tmp_path / "ck.pt"
    with pytest.raises(fl.Deadline):
        fl.run(_Line({5: 1.0, 9: 0.25}, sizes=[1, 3]), algs, seeds=[5, 9], rounds=6, availability=_gap_mask,
               p=0.5, w0=[1.0], every=2, target=("gap", 6.0), stop_when=fl.all_hit_or_diverged, diverge_factor=3.0,
               diverge_ref=12.0, checkpoint=ck, deadline=time.time() - 1)
    state = fl.load_checkpoint(ck)
    assert set(state) == _CKPT_FIELDS and state["t"] == 1
    assert state["key_parts"] == _PINNED_PARTS
    assert state["key"] == _PINNED_KEY


# ------------------------------------------------------------------ issue 31: the contracts, and a rule's probe
class _Centers:
    """Client i of a run with seed s: f_i(w) = (w - c)^2 / 2, c = s + i (one parameter, N = 2): one local step
    of size 1 lands on c, so delta = w - c = grad f_i(w)."""
    num_clients, dim, dtype = 2, 1, DT

    def _c(self, pairs, runs):
        return torch.tensor([runs.seeds[r] + i for r, i in pairs.tolist()], dtype=DT).reshape(-1, 1)

    def client_updates(self, w, active, t, runs):
        pairs = active.nonzero()
        return pairs, w[pairs[:, 0]] - self._c(pairs, runs)

    def client_gradients(self, w, pairs, runs):
        return w[pairs[:, 0]] - self._c(pairs, runs)

    def metrics(self, w):
        return {"w": w[:, 0].clone()}


@dataclasses.dataclass(frozen=True)
class _FullGradient:
    """A toy rule that reads the probe, not the updates: G = (1/N) sum over every client (available or not) of
    grad f_i at the probe's models (``at_zero``: at w = 0 instead). Its state lists the rounds it probed."""
    at_zero: bool = False
    wants_probe = True

    def init(self, R, N, d, dtype, device):
        return []

    def apply(self, state, upd, probe):
        at = torch.zeros(upd.R, 1, dtype=DT) if self.at_zero else None
        pairs, g = probe.gradients(torch.ones(upd.R, upd.N, dtype=torch.bool), at)
        return torch.zeros(upd.R, 1, dtype=DT).index_add_(0, pairs[:, 0], g) / upd.N, state + [probe.t]


class _NoFlag(_FullGradient):
    wants_probe = False


def test_a_rule_that_wants_the_probe_reads_its_rows_at_the_rounds_models():
    """c_bar(s) = s + 1/2, w_0 = 4, nobody available in round 0; each algorithm its own seeds, so a probe of other
    rows reads other c. FedAvg (no probe): G = w - c_bar when anyone arrived, lr 1: w stays 4 in round 0, then
    w_2 = c_bar. The probing rule (lr 1/2) reads every client's gradient at round t's models of its own rows:
    w_{t+1} = (w_t + c_bar) / 2 in both rounds, availability or not; at w = 0 (lr 1/4): G = -c_bar, so
    w_1 = 4 + c_bar / 4 and w_2 = 4 + c_bar / 2. A rule without the flag gets no probe (its apply needs one)."""
    avail = lambda s: np.array([[False, False], [True, True]])  # noqa: E731
    algs = {"plain": fl.Algorithm(agg.FedAvg()), "full": fl.Algorithm(_FullGradient(), lr=0.5),
            "zero": fl.Algorithm(_FullGradient(at_zero=True), lr=0.25)}
    seeds = {"plain": [1, 2], "full": [3, 5], "zero": [2, 7]}
    res = fl.run(_Centers(), algs, seeds=seeds, rounds=2, availability=avail, w0=[4.0])
    c = {a: np.array(s) + 0.5 for a, s in seeds.items()}
    w1 = (4 + c["full"]) / 2
    want = {"plain": [[4, 4], [4, 4], c["plain"]], "full": [[4, 4], w1, (w1 + c["full"]) / 2],
            "zero": [[4, 4], 4 + c["zero"] / 4, 4 + c["zero"] / 2]}
    for a, rows in want.items():
        assert res.values[a]["w"].tolist() == np.array(rows, dtype=float).tolist(), a
    assert res.final["full"] == [0, 1] and res.final["zero"] == [0, 1] and res.final["plain"] is None
    with pytest.raises(TypeError, match="probe"):
        fl.run(_Centers(), {"a": fl.Algorithm(_NoFlag())}, seeds=[1], rounds=1)


def test_the_probe_checks_the_models_it_is_asked_at():
    runs = fl.Runs([1, 2], torch.ones(2, dtype=DT), ["a", "a"])
    probe = fl._Probe(_Centers(), torch.zeros(2, 1, dtype=DT), torch.arange(2), 0, runs)
    with pytest.raises(ValueError, match=r"at must have shape \(2, 1\)"):
        probe.gradients(torch.ones(2, 2, dtype=torch.bool), torch.zeros(1, 1))
    w = torch.tensor([[1.0], [2.0], [3.0]], dtype=DT)          # the models of the algorithm's rows 0 and 2, a copy
    probe = fl._Probe(_Centers(), w, torch.tensor([0, 2]), 0, runs)
    got = probe.models()
    got += 10
    assert got.tolist() == [[11.0], [13.0]] and w.tolist() == [[1.0], [2.0], [3.0]]


def _names(f):
    return [n for n in inspect.signature(f).parameters if n != "self"]


def test_the_package_rules_samplers_and_tasks_fit_the_protocols():
    """Every rule of flkit.aggregate and sampler of flkit.sample has the protocol's methods with its parameters
    (names and order, so a keyword call works too; a rule with wants_probe, ZeroSARAH, also ``probe``); the tasks
    of flkit.tasks and the test tasks are Tasks; a sampler is no Aggregator and a rule no Sampler."""
    from flkit.protocols import Aggregator, Probe, Sampler, Task
    from flkit.tasks import QuadraticTask
    rules = [getattr(agg, n) for n in agg.__all__ if hasattr(getattr(agg, n), "apply")]
    samplers = [getattr(sample, n) for n in sample.__all__ if hasattr(getattr(sample, n), "select")]
    assert len(rules) >= 12 and len(samplers) >= 9
    for cls, proto in [(c, Aggregator) for c in rules] + [(c, Sampler) for c in samplers]:
        assert issubclass(cls, proto), cls
        for m in ("init", "apply", "select"):
            if hasattr(proto, m):          # a rule with wants_probe takes the probe as its last parameter
                probe = ["probe"] if m == "apply" and getattr(cls, "wants_probe", False) else []
                assert _names(getattr(cls, m)) == _names(getattr(proto, m)) + probe, (cls, m)
    for cls in samplers:
        assert _names(cls.observe) == ["state", "t", "pairs", "delta"], cls
        assert not issubclass(cls, Aggregator)
    assert not any(issubclass(c, Sampler) for c in rules)
    assert _names(fl._Probe.gradients) == _names(Probe.gradients)
    assert isinstance(fl._Probe(_Centers(), torch.zeros(1, 1), torch.arange(1), 0, None), Probe)
    assert all(isinstance(t, Task) for t in (_task(), _Line({5: 1.0}), _Centers()))
    problem = types.SimpleNamespace(A=torch.ones(3, 2, dtype=DT), b=torch.zeros(3, 2, dtype=DT), w_star=None)
    assert isinstance(QuadraticTask(problem), Task)
    assert not isinstance(agg.FedAvg(), Task)
