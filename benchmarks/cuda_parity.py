"""Fast paths vs. reference on a GPU: the CPU tests check parity in float64; this checks it on CUDA.

    python benchmarks/cuda_parity.py          # prints ||fast - reference|| / ||reference|| per path
    python benchmarks/cuda_parity.py --out results/benchmarks/window_parity_h100.csv   # also as a CSV
    python benchmarks/cuda_parity.py --device cpu --quick                               # the CPU dry run's

engine.local_train(vectorized="grouped" | "vmap") against the sequential per-model loop, the Fed-CVaR
local steps through flkit.fastsgd.FastSGD (CUDA graphs) against algorithm.run_round, and the Triton kernels of
flkit.fused against torch's conv/pool and FastSGD's grouped backend, in float32 with TF32 off. The
one-model loop of the CNNs still to run at a document's scale (HiCS-FL's Fashion-MNIST CNN
``hics_fmnist_paper``, dropout off; FedAU's ``fedau_fmnist``) in float32 on the device against the same
loop in float64 on the CPU: the relative difference of the update (trained minus initial state).
``--quick``: only those rows (seconds on a CPU).
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from flkit import engine, models, objectives  # noqa: E402
from flkit.batches import epoch_batches  # noqa: E402
from flkit.fastsgd import FastSGD  # noqa: E402
from flkit.papers.cvar import algorithm  # noqa: E402
from flkit.seeding import resolve_device, torch_gen  # noqa: E402


def rel(a: dict, b: dict) -> float:
    """||a - b|| / ||b|| over all floating-point entries of the state, flattened together."""
    keys = [k for k in b if b[k].is_floating_point()]
    diff = torch.cat([(a[k] - b[k]).double().flatten() for k in keys])
    return (diff.norm() / torch.cat([b[k].double().flatten() for k in keys]).norm()).item()


def update_vs_float64(dev, g, name: str, build: dict, batch: int, lr: float) -> float:
    """||update on dev (float32) - update on the CPU (float64)|| / ||the latter||, 5 steps of the one-model loop
    (engine.local_train(vectorized=False)) from the same start on the same batches, 2 models."""
    net = models.build(name, **build).to(dev)
    x = torch.rand(512, 1, 28, 28, device=dev, generator=g)
    y = torch.randint(0, 10, (512,), device=dev, generator=g)
    P = engine.stack(net, 2, torch_gen(0, "init", dev))
    batches = torch.randint(0, 512, (2, 5, batch), device=dev, generator=g)
    out, _ = engine.local_train(net, P, x, y, batches, lr=lr, vectorized=False)
    cpu = torch.device("cpu")
    net64 = models.build(name, **build).double()
    P64 = {k: (v.double() if v.is_floating_point() else v).to(cpu) for k, v in P.items()}
    ref, _ = engine.local_train(net64, P64, x.double().to(cpu), y.to(cpu), batches.to(cpu), lr=lr, vectorized=False)
    keys = [k for k in ref if ref[k].is_floating_point()]
    d_fast = torch.cat([(out[k].double().cpu() - P64[k]).flatten() for k in keys])
    d_ref = torch.cat([(ref[k] - P64[k]).flatten() for k in keys])
    return ((d_fast - d_ref).norm() / d_ref.norm()).item()


def _parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda[:i]")
    ap.add_argument("--quick", action="store_true",
                    help="only the float32-vs-float64 rows (the CNNs still to run at a document's scale)")
    ap.add_argument("--out", type=Path, default=None, help="also write the rows as a CSV")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = _parse(argv)
    dev = resolve_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    g = torch.Generator(device=dev).manual_seed(0)
    rows = [(f"float32 on {dev.type} vs float64 cpu (update)", name,
             update_vs_float64(dev, g, name, build, batch, lr))
            for name, build, batch, lr in (("hics_fmnist_paper", dict(dropout=0.0), 64, 1e-3),   # HiCS: SGD, B 64
                                           ("fedau_fmnist", {}, 16, 0.1))]                       # FedAU: SGD, B 16
    if args.quick:
        return _report(dev, rows, args.out)
    for name, shape in [("fedau_cifar10", (3, 32, 32)), ("fedau_fmnist", (1, 28, 28)), ("cvar_mlp", (1, 28, 28)),
                        ("hics_fmnist", (1, 28, 28))]:
        net = models.build(name).to(dev)
        x = torch.rand(512, *shape, device=dev, generator=g)
        y = torch.randint(0, 10, (512,), device=dev, generator=g)
        P = engine.stack(net, 6, torch_gen(0, "init", dev))
        batches = torch.randint(0, 512, (6, 5, 16), device=dev, generator=g)
        ref, _ = engine.local_train(net, P, x, y, batches, lr=0.05, momentum=0.9, vectorized=False)
        for path in ("grouped", "vmap"):
            if path == "grouped" and not engine.supports_grouped(net, buffers=True):
                continue
            out, _ = engine.local_train(net, P, x, y, batches, lr=0.05, momentum=0.9, vectorized=path)
            rows.append((f"engine {path}", name, rel(out, ref)))
    rows += hics_rows(dev, g)
    net = models.build("cvar_mlp").to(dev)
    x = torch.rand(400, 1, 28, 28, device=dev, generator=g)
    y = torch.randint(0, 10, (400,), device=dev, generator=g)
    M = 4
    state = algorithm.init(engine.stack(net, M, torch_gen(0, "init", dev)), [1.0, 0.3, 0.1, 0.3], [0.3, 0.3, 0.1, 1.0])
    users = algorithm.Users(torch.stack([torch.randperm(400, device=dev, generator=g)[:100]
                                         for _ in range(M)])[:, None],
                       torch.tensor([[100], [70], [33], [9]], device=dev))
    fast = FastSGD(net, state.params, x, y, 32, lr=algorithm.learning_rates(0.05, 0.01),
                   objective=objectives.cvar_objective)
    sel = torch.zeros(M, dtype=torch.long, device=dev)
    for n in range(3):
        gens = lambda: [torch_gen(m, f"batch/{n}", dev) for m in range(M)]  # noqa: E731
        state, _ = algorithm.run_round(state, net, x, y, users, sel, lr_theta=0.05, lr_t=0.01, epochs=2, batch_size=32,
                              generators=gens())
        pool, size = users.relayed(sel)
        fast.train(*epoch_batches(pool, 32, 2, generators=gens(), sizes=size, last="pad"))
    rows.append((f"cvar FastSGD (graph: {fast.graph is not None})", "cvar_mlp", rel(fast.P, state.params)))
    rows += fused_rows(dev, g)
    _report(dev, rows, args.out)


def _report(dev, rows, out) -> None:
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"device: {name}, torch {torch.__version__}")
    for path, model, r in rows:
        print(f"{path:<40} {model:<17} relative difference {r:.2e}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["path", "model", "relative_difference", "device", "torch"])
            w.writerows([(p, m, f"{r:.3e}", name, torch.__version__) for p, m, r in rows])
        print(f"wrote {out}")


def hics_rows(dev, g) -> list:
    """The HiCS-FL Fashion-MNIST CNN (BatchNorm, PReLU, dropout) as its runs train it on a GPU: clients of unequal
    sizes (padded short batches), dropout masks per client, steps only for the clients that still have them
    (eta = 0.001, inputs centred as the runs'). Yardstick: float32's own rounding error, the float32 reference
    against the same loop in float64."""
    net = models.build("hics_fmnist_paper").to(dev)
    sizes = [300, 90, 150, 20, 211]
    x = (torch.rand(sum(sizes), 1, 28, 28, device=dev, generator=g) - 0.5) / 0.5
    y = torch.randint(0, 10, (sum(sizes),), device=dev, generator=g)
    P = engine.stack(net, len(sizes), torch_gen(0, "init", dev))
    gens = lambda tag: [torch_gen(i, tag, dev) for i in range(len(sizes))]  # noqa: E731
    batches, steps = epoch_batches(sizes, 64, 2, generators=gens("batch"), last="pad")
    keep = engine.dropout_masks(net, x[:1], 64, steps.tolist(), gens("dropout"))
    kw = dict(steps=steps, lr=0.001, dropout_keep=keep)
    ref, _ = engine.local_train(net, P, x, y, batches, vectorized=False, **kw)
    out, _ = engine.local_train(net, P, x, y, batches, vectorized="grouped", skip_done=True, **kw)
    exact, _ = engine.local_train(net.double(), {k: v.double() for k, v in P.items()}, x.double(), y, batches,
                                  vectorized=False, **kw)
    return [("engine grouped, padded, dropout masks", "hics_fmnist_paper", rel(out, ref)),
            ("  yardstick: float32 loop vs float64 loop", "hics_fmnist_paper", rel(ref, exact))]


def fused_rows(dev, g) -> list:
    """flkit.fused (Triton, full float32 products) against torch's conv/LeakyReLU/max-pool and against
    FastSGD's grouped backend, on the Table 1 LeNet's two block shapes."""
    import torch.nn.functional as F
    from flkit import fused
    if not fused.available(dev):
        return [("flkit.fused (not available here)", "-", float("nan"))]
    rows = []
    for C, O, H, gather in ((1, 6, 28, True), (6, 16, 14, False)):
        M, B = 5, 32
        w = (0.2 * torch.randn(M, O, C, 5, 5, device=dev, generator=g)).requires_grad_()
        b = (0.1 * torch.randn(M, O, device=dev, generator=g)).requires_grad_()
        if gather:
            x, idx = torch.randn(300, C, H, H, device=dev, generator=g), torch.randint(0, 300, (M, B), device=dev)
            xin = x[idx]
        else:
            x = xin = torch.randn(M, B, C, H, H, device=dev, generator=g).requires_grad_()
            idx = None
        y = fused.conv_pool(x, w, b, idx, 0.01, precision="ieee")
        ref = torch.stack([F.max_pool2d(F.leaky_relu(F.conv2d(xin[m], w[m], b[m], padding=2), 0.01), 2)
                           for m in range(M)])
        gy = torch.randn(y.shape, device=dev, generator=g)
        wrt = [w, b] + ([] if gather else [x])
        got = dict(zip(["w", "b", "x"], torch.autograd.grad((y * gy).sum(), wrt)), y=y)
        exp = dict(zip(["w", "b", "x"], torch.autograd.grad((ref * gy).sum(), wrt)), y=ref)
        rows.append(("fused.conv_pool fwd+grads (ieee)", f"{C}->{O} on {H}x{H}", rel(got, exp)))
    net = models.build("cvar_lenet").to(dev)
    x = torch.rand(2000, 1, 28, 28, device=dev, generator=g)
    y = torch.randint(0, 10, (2000,), device=dev, generator=g)
    P0 = algorithm.init(engine.stack(net, 8, torch_gen(0, "init", dev)), 0.3, 0.1).params
    out = {}
    for backend in ("grouped", "fused"):
        fast = FastSGD(net, P0, x, y, 128, lr=algorithm.learning_rates(1e-2, 5e-4), objective=objectives.cvar_objective,
                              backend=backend)
        fast.precision = "ieee"
        gb = torch.Generator(device=dev).manual_seed(1)
        fast.train(torch.randint(0, 2000, (8, 20, 128), device=dev, generator=gb), torch.full((8,), 20, device=dev))
        out[backend] = fast.P
    rows.append(("FastSGD fused vs grouped, 20 steps", "cvar_lenet", rel(out["fused"], out["grouped"])))
    return rows


if __name__ == "__main__":
    main()
