"""Where the time of a Fed-CVaR Table 1 local step goes, and what makes it faster (a GPU study).

    python benchmarks/bench_cvar_step.py [--models 65] [--batch 128] [--steps 200] [--profile]

One local step of Algorithm 1 for M stacked LeNets (cvar_lenet, batch B of Fashion-MNIST-shaped
inputs) through flkit.fastsgd.FastSGD with Fed-CVaR's batched objective: forward, the CVaR objective's
gradients, in-place SGD. Each variant is captured in a CUDA
graph and replayed `--steps` times after a warm-up; prints ms per step and the ratio to the baseline
(the grouped NCHW convolutions, FastSGD's "grouped" backend, used for the stored reduced runs). Every variant
is also checked against the baseline's first-step update (relative difference printed).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from flkit import engine, models, objectives  # noqa: E402
from flkit.fastsgd import FastSGD  # noqa: E402
from flkit.papers.cvar import algorithm  # noqa: E402
from flkit.seeding import torch_gen  # noqa: E402

LR = algorithm.learning_rates(1e-2, 5e-4)  # Table 1's eta_theta, eta_t


def timed(fn, steps: int) -> float:
    """ms per call of fn() (a graph replay or an eager step), after a warm-up, GPU synchronized."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, nargs="+", default=[65])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--profile", choices=["grouped", "fused"], help="print this backend's kernel table")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS),
                    help=f"of {list(VARIANTS)}; 'fused k=v ...' sets flkit.fused.TUNE entries for that variant")
    a = ap.parse_args()
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, B={a.batch}")
    net = models.build("cvar_lenet").to(dev)
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.rand(6000, 1, 28, 28, device=dev, generator=g)
    y = torch.randint(0, 10, (6000,), device=dev, generator=g)
    for M in a.models:
        P0 = algorithm.init(engine.stack(net, M, torch_gen(0, "init", dev)), 0.3, 0.1).params
        idx = torch.randint(0, 6000, (M, a.batch), device=dev, generator=g)
        base = ref_ms = None   # the baseline's update and time (none when the baseline failed)
        for name in ["baseline"] + [v for v in a.variants if v != "baseline"]:
            setup = VARIANTS.get(name) or _tuned(name)
            torch.backends.cudnn.benchmark = name != "baseline"
            try:
                fast = FastSGD(net, P0, x, y, a.batch, lr=LR, objective=objectives.cvar_objective, cuda_graph=False,
                                      backend="fused" if name.startswith("fused") else "grouped")
                restore = setup(fast)
                start = {k: v.clone() for k, v in fast.P.items()}
                fast.idx.copy_(idx)
                fast._step()
                upd = torch.cat([(fast.P[k] - start[k]).flatten() for k in start])
                if base is None:
                    base = upd
                err = ((upd - base).norm() / base.norm()).item()
                fast._capture()
                fast.idx.copy_(idx)
                fast.active.fill_(True)
                ms = timed(fast.graph.replay, a.steps)
                eager = timed(fast._step, max(a.steps // 10, 5))
                restore()
            except Exception as e:  # a variant that fails is reported, not fatal
                print(f"M={M:<4} {name:<14} failed: {type(e).__name__}: {e}")
                continue
            if name == "baseline":
                ref_ms = ms
            speedup = f"{ref_ms / ms:5.2f}x" if ref_ms is not None else "  n/a"
            print(f"M={M:<4} {name:<14} graph {ms:7.3f} ms/step  eager {eager:7.3f}  baseline/this {speedup}"
                  f"  update vs baseline {err:.1e}")
        if a.profile:
            from torch.profiler import ProfilerActivity, profile
            torch.backends.cudnn.benchmark = False
            fast = FastSGD(net, P0, x, y, a.batch, lr=LR, objective=objectives.cvar_objective, cuda_graph=False,
                                  backend=a.profile)
            fast.idx.copy_(idx)
            fast._step()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    fast._step()
                torch.cuda.synchronize()
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=70))


# ------------------------------------------------------------------------------------- variants
def _nothing(fast):
    return lambda: None


def _conv_variant(make):
    """A variant that replaces torch.nn.functional.conv2d (which grouped_forward calls) by make(conv2d)."""
    def setup(fast):
        orig = F.conv2d
        F.conv2d = make(orig)
        return lambda: setattr(F, "conv2d", orig)
    return setup


def _channels_last(orig):
    """Grouped convolutions in NHWC (weights and activations channels_last)."""
    cl = torch.channels_last
    return lambda h, w, b, *args: orig(h.contiguous(memory_format=cl), w.contiguous(memory_format=cl), b, *args)


def _bf16(fast):
    """bfloat16 autocast around the step (precision changes: for information only)."""
    step = fast._step

    def s():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            step()
    fast._step = s
    return lambda: None


def _unfold(orig):
    """Each conv as im2col + batched matmul over the M models (no grouped conv)."""
    def conv(h, w, b, stride, padding, dilation, groups):
        Bn, MC, H, W = h.shape
        M = groups
        C, k = MC // M, w.shape[-1]
        O = w.shape[0] // M
        cols = F.unfold(h, k, dilation, padding, stride)                     # (B, M*C*k*k, L)
        cols = cols.view(Bn, M, C * k * k, cols.shape[-1])
        out = torch.einsum("bmkl,mok->bmol", cols, w.view(M, O, C * k * k))  # (B, M, O, L)
        if b is not None:
            out = out + b.view(1, M, O, 1)
        return out.reshape(Bn, M * O, H, W)
    return conv


def _ieee(fast):
    """The fused kernels with full float32 products (no TF32)."""
    from flkit import fused
    orig = fused.forward
    fused.forward = lambda *a, **k: orig(*a, **k, precision="ieee")

    def restore():
        fused.forward = orig
    return restore


def _tuned(name: str):
    """'fused k=v ...': the fused kernels with some flkit.fused.TUNE entries changed."""
    from flkit import fused
    if not name.startswith("fused "):
        raise ValueError(f"unknown variant {name!r}")
    new = {k: int(v) for k, v in (kv.split("=") for kv in name.split()[1:])}

    def setup(fast):
        old = dict(fused.TUNE)
        fused.TUNE.update(new)
        return lambda: fused.TUNE.update(old)
    return setup


VARIANTS = {"baseline": _nothing, "cudnn.benchmark": _nothing, "channels_last": _conv_variant(_channels_last),
            "unfold+bmm": _conv_variant(_unfold), "bf16": _bf16, "fused": _nothing, "fused ieee": _ieee}


if __name__ == "__main__":
    main()
