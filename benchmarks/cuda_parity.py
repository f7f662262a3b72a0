"""Fast paths vs. reference on a GPU: the CPU tests check parity in float64; this checks it on CUDA.

    python benchmarks/cuda_parity.py          # prints ||fast - reference|| / ||reference|| per path

engine.local_train(vectorized="grouped" | "vmap") against the sequential per-model loop, and the
Fed-CVaR local steps (cvar.FastLocalSGD, CUDA graphs) against cvar.round, in float32 with TF32 off.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from flkit import cvar, engine, models  # noqa: E402
from flkit.seeding import resolve_device, torch_gen  # noqa: E402


def rel(a: dict, b: dict) -> float:
    """||a - b|| / ||b|| over all floating-point entries of the state, flattened together."""
    keys = [k for k in b if b[k].is_floating_point()]
    diff = torch.cat([(a[k] - b[k]).double().flatten() for k in keys])
    return (diff.norm() / torch.cat([b[k].double().flatten() for k in keys]).norm()).item()


def main() -> None:
    dev = resolve_device("auto")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    g = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for name, shape in [("fedau_cifar10", (3, 32, 32)), ("cvar_mlp", (1, 28, 28)), ("hics_fmnist", (1, 28, 28))]:
        net = models.build(name).to(dev)
        x = torch.rand(512, *shape, device=dev, generator=g)
        y = torch.randint(0, 10, (512,), device=dev, generator=g)
        P = engine.stack(net, 6, torch_gen(0, "init", dev))
        batches = torch.randint(0, 512, (6, 5, 16), device=dev, generator=g)
        ref, _ = engine.local_train(net, P, x, y, batches, lr=0.05, momentum=0.9, vectorized=False)
        for path in ("grouped", "vmap"):
            if path == "grouped" and not engine.supports_grouped(net):
                continue
            out, _ = engine.local_train(net, P, x, y, batches, lr=0.05, momentum=0.9, vectorized=path)
            rows.append((f"engine {path}", name, rel(out, ref)))
    net = models.build("cvar_mlp").to(dev)
    x = torch.rand(400, 1, 28, 28, device=dev, generator=g)
    y = torch.randint(0, 10, (400,), device=dev, generator=g)
    M = 4
    state = cvar.init(engine.stack(net, M, torch_gen(0, "init", dev)), [1.0, 0.3, 0.1, 0.3], [0.3, 0.3, 0.1, 1.0])
    users = cvar.Users(torch.stack([torch.randperm(400, device=dev, generator=g)[:100] for _ in range(M)])[:, None],
                       torch.tensor([[100], [70], [33], [9]], device=dev))
    fast = cvar.FastLocalSGD(net, state.params, x, y, 32, 0.05, 0.01)
    sel = torch.zeros(M, dtype=torch.long, device=dev)
    for n in range(3):
        gens = lambda: [torch_gen(m, f"batch/{n}", dev) for m in range(M)]  # noqa: E731
        state, _ = cvar.round(state, net, x, y, users, sel, lr_theta=0.05, lr_t=0.01, epochs=2, batch_size=32,
                              generators=gens())
        fast.train(*cvar.make_batches(*users.relayed(sel), 2, 32, gens()))
    rows.append((f"cvar FastLocalSGD (graph: {fast.graph is not None})", "cvar_mlp", rel(fast.P, state.params)))
    print(f"device: {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}, torch {torch.__version__}")
    for path, name, r in rows:
        print(f"{path:<40} {name:<15} relative difference {r:.2e}")


if __name__ == "__main__":
    main()
