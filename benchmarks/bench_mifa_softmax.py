"""MIFA's logistic experiment: the closed-form softmax-regression trainer against flkit.engine.local_train.

    python benchmarks/bench_mifa_softmax.py [--models 64] [--reps 3] [--threads 1]

One round's local training of `--models` clients of `flkit.mifa.softmax_task` (MNIST, 100 clients x 516
samples: the smallest shard; 2 epochs of batches 5 x 100 + 16 = 12 steps, weight decay 1e-3, step 0.05):
`SoftmaxTask.local_sgd` (closed-form
gradient, the clients' all-zero pixels skipped) vs `engine.local_train(vectorized="grouped")` on
nn.Sequential(Flatten, Linear(784, 10)) with the same batches, start and weight decay. Prints the best of
`--reps` timed calls (after one warm-up), the ratio, and the largest difference of the trained weights.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from flkit import engine, mifa  # noqa: E402


def best_of(fn, reps: int) -> tuple[float, object]:
    out = fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--groups", type=int, default=1,
                    help="models per client side by side (MIFA trains one per method): the closed form's G x C "
                         "columns share each minibatch; the engine trains models x groups models")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    task = mifa.softmax_task(100, 2, seed=0)
    n, m, D1 = task.x.shape
    C, P, B, E, G = task.num_classes, a.models, task.batch_size, task.epochs, a.groups
    g = torch.Generator().manual_seed(0)
    clients = torch.arange(P)
    perms = torch.argsort(torch.rand(P, E, m, generator=g), -1)                 # (P, epochs, m)
    W0 = 0.01 * torch.randn(P, D1, G * C, generator=g)                        # G models per client side by side

    closed_s, W1 = best_of(lambda: task.local_sgd(W0, clients, perms, a.lr), a.reps)

    net = nn.Sequential(nn.Flatten(), nn.Linear(D1 - 1, C))
    Wm = W0.view(P, D1, G, C).permute(0, 2, 1, 3).reshape(P * G, D1, C)      # model (client p, group j): row p G + j
    params = {"1.weight": Wm[:, :-1].transpose(1, 2).contiguous(), "1.bias": Wm[:, -1].contiguous()}
    x = task.x[:P, :, :-1].reshape(P * m, D1 - 1).contiguous()                # the clients' data, concatenated
    y = task.y[:P].reshape(-1)
    steps_per_epoch = -(-m // B)  # the short last batch of an epoch: index -1 pads it (ignored by the loss)
    padded = torch.full((P, E, steps_per_epoch * B), -1, dtype=torch.long)
    padded[:, :, :m] = perms + (clients * m)[:, None, None]                    # same order as local_sgd
    batches = padded.view(P, E * steps_per_epoch, B).repeat_interleave(G, 0)
    engine_s, out = best_of(lambda: engine.local_train(net, params, x, y, batches, lr=a.lr,
                                                       weight_decay=task.weight_decay, vectorized="grouped"), a.reps)
    P1 = out[0]
    W1e = torch.cat([P1["1.weight"].transpose(1, 2), P1["1.bias"][:, None]], 1)
    W1e = W1e.view(P, G, D1, C).permute(0, 2, 1, 3).reshape(P, D1, G * C)
    diff = float((W1e - W1).abs().max() / W1.abs().max())
    print(f"{P} clients x {G} models x {m} samples, {E} epochs of batch {B} ({E * steps_per_epoch} steps), "
          f"torch {torch.__version__}, {a.threads} thread(s)")
    print(f"closed form (SoftmaxTask.local_sgd): {closed_s * 1e3:8.1f} ms")
    print(f"engine.local_train (grouped):        {engine_s * 1e3:8.1f} ms   engine / closed form = "
          f"{engine_s / closed_s:.2f}x")
    print(f"max |W_engine - W_closed| / max |W_closed| = {diff:.1e}")


if __name__ == "__main__":
    main()
