"""partition -> participation -> engine -> results in a dozen lines: FedAvg on 2-D blobs."""
import numpy as np
import pandas as pd
import torch

from flkit import datasets, engine, models, participation, partition, results
from flkit.batches import sample_batches
from flkit.seeding import torch_gen


def fedavg(cfg: dict) -> pd.DataFrame:
    X, y = datasets.blobs_2d([(0, 0), (2, 2), (0, 3)], 200, 0.5, seed=cfg["seed"])
    split = partition.dirichlet(y.numpy(), cfg["clients"], alpha=0.5, seed=cfg["seed"])
    mask = torch.as_tensor(participation.bernoulli(np.full(cfg["clients"], cfg["p"]), cfg["rounds"], cfg["seed"]))
    net, batch_gen = models.build("cvar_2d", num_classes=3), torch_gen(cfg["seed"], "batch")
    w = engine.stack(net, 1, torch_gen(cfg["seed"], "init"))
    rows = []
    for r in range(cfg["rounds"]):
        active = mask[r].nonzero().flatten().tolist()
        if active:
            batches, steps = sample_batches([split.indices[i] for i in active], 16, 5, batch_gen)
            local, _ = engine.local_train(net, engine.stack_copies(engine.unstack(w, 0), len(active)), X, y,
                                          batches, steps=steps, lr=0.1)
            w = {k: v.mean(0, keepdim=True) for k, v in local.items()}  # average of the participants
        rows.append(dict(round=r, metric="train_acc", value=engine.evaluate(net, w, X, y)[1].item()))
    return pd.DataFrame(rows)


def test_pipeline_learns_resumes_and_is_reproducible(tmp_path):
    store, calls = results.Store(tmp_path), []
    counted = lambda c: calls.append(c) or fedavg(c)  # noqa: E731
    configs = [dict(seed=s, clients=10, p=0.3, rounds=30) for s in (0, 1)]
    first = results.sweep(configs, counted, store, progress=False)
    again = results.sweep(configs, counted, store, progress=False)
    assert len(calls) == 2, "the second sweep must reuse the stored runs"
    pd.testing.assert_frame_equal(first, again)
    final = first[first["round"] == 29]["value"]
    assert (final > 0.9).all(), final  # three well-separated blobs: far above chance (1/3)
    pd.testing.assert_frame_equal(fedavg(configs[0]), store.load(configs[0])[["round", "metric", "value"]],
                                  check_dtype=False, atol=1e-7)
