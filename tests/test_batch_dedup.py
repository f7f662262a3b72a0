"""EngineTask draws the minibatches of each distinct (seed, client, split) once a round: bitwise the batches of
drawing every (run, client) pair, and the same trajectories (issue 26, FedAU's index generation)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from flkit import aggregate, fl, models
from flkit.tasks import EngineTask


def _task(dedup: bool, **kw) -> EngineTask:
    g = torch.Generator().manual_seed(0)
    y = torch.arange(300) % 3
    x = torch.randn(300, 1, 2, 2, generator=g) + y.view(-1, 1, 1, 1).float()
    rng = np.random.default_rng(0)
    splits = {s: [np.sort(rng.choice(300, size=int(rng.integers(5, 40)), replace=False)) for _ in range(12)]
              for s in (0, 1, 2)}                                  # one split per seed, clients of unequal sizes
    base = dict(batch_size=8, steps=3, local_lr=0.1, split_by="seed")
    base.update(kw)
    return EngineTask(models.logreg(4, 3), x, y, splits, x[:50], y[:50], dedup=dedup, **base)


@pytest.mark.parametrize("kw", [dict(steps=3), dict(steps=None, epochs=2)], ids=["steps", "epochs"])
def test_dedup_draws_bitwise_the_same_batches(kw):
    seeds = [0, 1, 2, 0, 1, 2, 0, 0, 2]                             # three methods x three seeds, repeats
    clients = [3, 3, 3, 3, 3, 3, 7, 3, 11]
    a, b = _task(True, **kw), _task(False, **kw)
    for t in (0, 5):
        ba, sa = a._batches(seeds, clients, t, seeds)
        bb, sb = b._batches(seeds, clients, t, seeds)
        assert ba.dtype == bb.dtype and torch.equal(ba, bb) and torch.equal(sa, sb)
    assert not torch.equal(ba[0], ba[1])                            # different seeds, different batches


def test_dedup_gives_the_same_trajectories_and_draws_fewer_generators(monkeypatch):
    """fl.run of 3 methods x 3 seeds, every client every round (chunks of 5 pairs, so duplicates span chunks):
    the same final models with and without de-duplication; with it, 3 x 12 generators a round instead of 108."""
    algs = {m: fl.Algorithm(aggregate.FedAvg(), lr=1.0, local_lr=lr) for m, lr in (("a", 0.1), ("b", 0.05), ("c", 0.2))}
    counts = {}
    out = {}
    for dedup in (True, False):
        task = _task(dedup, chunk=5)
        made = []
        real = task._generator
        monkeypatch.setattr(task, "_generator", lambda s, t, c, real=real, made=made: made.append(1) or real(s, t, c))
        out[dedup] = fl.run(task, algs, seeds=[0, 1, 2], rounds=3).final_w
        counts[dedup] = len(made) / 3
    assert torch.equal(out[True], out[False])
    assert counts == {True: 36, False: 108}


def test_dedup_is_a_field_with_the_default_on():
    f = {x.name: x for x in dataclasses.fields(EngineTask)}["dedup"]
    assert f.default is True


def test_steps_batches_from_the_host_copy_are_the_device_pools():
    """The `steps` draw reads each client's indices from the host copy: bitwise the batches of the former draw
    from the device pool (``pool[c, :n[c]]``), with the same generator."""
    from flkit.batches import sample_batches
    task = _task(True)
    for seed, client, t in ((0, 3, 0), (1, 7, 4), (2, 11, 9)):
        pool, n = task._split(seed)
        old, old_steps = sample_batches([pool[client, :int(n[client])]], 8, 3, task._generator(seed, t, client))
        new, new_steps = task._batches([seed], [client], t, [seed])
        assert torch.equal(old, new) and torch.equal(old_steps, new_steps)
