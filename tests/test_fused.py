"""flkit.fused: the Triton conv + LeakyReLU + max-pool blocks against torch, on the CPU through Triton's
interpreter (tests/conftest.py sets TRITON_INTERPRET=1), in float32 with full-precision products."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from flkit import engine, models, objectives
from flkit.fastsgd import FastSGD
from flkit.papers.cvar import algorithm
from flkit.seeding import torch_gen

fused = pytest.importorskip("flkit.fused")
if fused.triton is None or not fused.available("cpu"):
    pytest.skip("triton (interpreter) not available", allow_module_level=True)


def reference(x, w, b, slope):
    """maxpool2(leaky(conv2d)) per model with torch's own ops: x (M, B, C, H, W)."""
    k = w.shape[-1]
    return torch.stack([F.max_pool2d(F.leaky_relu(F.conv2d(x[m], w[m], b[m], padding=k // 2), slope), 2)
                        for m in range(w.shape[0])])


@pytest.mark.parametrize("gather", [False, True])
@pytest.mark.parametrize("C,O,k,H,W", [(1, 6, 5, 8, 6), (3, 2, 3, 6, 4)])
def test_conv_pool_matches_torch(gather, C, O, k, H, W):
    g = torch.Generator().manual_seed(C + 10 * k)
    M, B, slope = 2, 3, 0.2
    w = torch.randn(M, O, C, k, k, generator=g).requires_grad_()
    b = torch.randn(M, O, generator=g).requires_grad_()
    if gather:
        data = torch.randn(7, C, H, W, generator=g)
        idx = torch.tensor([[1, 5, -1], [6, 0, 2]])
        x, xin = data, data[idx.clamp(min=0)]
    else:
        x = xin = torch.randn(M, B, C, H, W, generator=g).requires_grad_()
        idx = None
    y = fused.conv_pool(x, w, b, idx, slope, precision="ieee")
    ref = reference(xin, w, b, slope)
    assert y.shape == (M, B, O, H // 2, W // 2)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    gy = torch.randn(y.shape, generator=g)
    wrt = [w, b] + ([] if gather else [x])
    for got, exp in zip(torch.autograd.grad((y * gy).sum(), wrt), torch.autograd.grad((ref * gy).sum(), wrt)):
        torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)


def test_backward_is_deterministic():
    """The weight gradient's split partial sums are added in a fixed order: same inputs, same bits."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 2, 6, 6, generator=g)
    w = torch.randn(2, 3, 2, 3, 3, generator=g).requires_grad_()
    b = torch.zeros(2, 3, requires_grad=True)
    grads = [torch.autograd.grad(fused.conv_pool(x, w, b, precision="ieee").square().sum(), [w, b]) for _ in range(2)]
    assert all(torch.equal(p, q) for p, q in zip(*grads))


def small_lenet():
    return nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.LeakyReLU(0.1), nn.MaxPool2d(2),
                         nn.Conv2d(2, 3, 3, padding=1), nn.LeakyReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(12, 5), nn.LeakyReLU(), nn.Linear(5, 4))


def test_forward_equals_grouped_forward():
    net = small_lenet()
    P = engine.stack(net, 3, torch_gen(0, "init"))
    x = torch.randn(20, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    idx = torch.tensor([[0, 3, 19, -1], [5, 5, 2, 1], [7, 8, 9, 10]])
    got = fused.forward(net, P, x, idx, precision="ieee")
    exp = engine.grouped_forward(net, P, x[idx.clamp(min=0)])
    torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-6)


def test_fast_sgd_fused_equals_grouped():
    """Three steps of FastSGD with Fed-CVaR's batched objective (padded batch, a masked step)
    through both backends."""
    net = small_lenet()
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(30, 1, 8, 8, generator=g), torch.randint(0, 4, (30,), generator=g)
    P0 = algorithm.init(engine.stack(net, 3, torch_gen(0, "init")), [0.3, 1.0, 0.1], [0.1, 0.0, 0.3]).params
    batches = torch.randint(0, 30, (3, 3, 6), generator=g)
    batches[1, 2, 4:] = -1
    out = {}
    for backend in ("grouped", "fused"):
        fast = FastSGD(net, P0, x, y, 6, lr=algorithm.learning_rates(0.1, 0.05), objective=objectives.cvar_objective,
                              backend=backend)
        fast.precision = "ieee"
        assert fast.backend == backend
        fast.train(batches, torch.tensor([3, 3, 2]))
        out[backend] = fast.P
    for k in out["grouped"]:
        torch.testing.assert_close(out["fused"][k], out["grouped"][k], rtol=1e-5, atol=1e-6, msg=k)
    assert not torch.equal(out["fused"]["t"], P0["t"])


def test_auto_backend_never_picks_the_interpreter():
    net = models.build("cvar_lenet")
    P = algorithm.init(engine.stack(net, 1, torch_gen(0, "init")), 0.3, 0.1).params
    x, y = torch.zeros(4, 1, 28, 28), torch.zeros(4, dtype=torch.long)
    fast = FastSGD(net, P, x, y, 2, lr=algorithm.learning_rates(0.1, 0.1), objective=objectives.cvar_objective)
    assert fast.backend == "grouped"
    with pytest.raises(ValueError, match="backend must be"):
        FastSGD(net, P, x, y, 2, lr=algorithm.learning_rates(0.1, 0.1), backend="cudnn")
    with pytest.raises(ValueError, match="backend='fused' needs"):
        FastSGD(models.build("cvar_mlp"), engine.stack(models.build("cvar_mlp"), 1), x, y, 2, lr=0.1,
                       backend="fused")


def test_supports_fused():
    assert fused.supports_fused(models.build("cvar_lenet"))
    assert fused.supports_fused(small_lenet())
    assert not fused.supports_fused(models.build("cvar_mlp"))      # no conv block
    assert not fused.supports_fused(models.build("hics_fmnist"))   # BatchNorm, PReLU
    assert not fused.supports_fused(nn.Sequential(nn.Conv2d(1, 2, 3, padding=1, stride=2), nn.LeakyReLU(),
                                                  nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2, 2)))
    assert not fused.supports_fused(nn.Sequential(nn.Conv2d(1, 2, 3), nn.LeakyReLU(),  # not "same" padding
                                                  nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2, 2)))
    assert not fused.supports_fused(nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(),
                                                  nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2, 2)))
    with pytest.raises(ValueError, match="grouped_forward"):
        fused.forward(models.build("cvar_mlp"), {}, torch.zeros(1, 1, 28, 28), torch.zeros(1, 1, dtype=torch.long))


def test_conv_pool_rejects_bad_input():
    w, b = torch.zeros(2, 3, 1, 3, 3), torch.zeros(2, 3)
    x = torch.zeros(2, 4, 1, 6, 6)
    with pytest.raises(ValueError, match="precision"):
        fused.conv_pool(x, w, b, precision="fp16")
    with pytest.raises(ValueError, match="odd k"):
        fused.conv_pool(x, torch.zeros(2, 3, 1, 2, 2), b)
    with pytest.raises(ValueError, match=r"bias must be \(2, 3\)"):
        fused.conv_pool(x, w, torch.zeros(3))
    with pytest.raises(ValueError, match="even H, W"):
        fused.conv_pool(torch.zeros(2, 4, 1, 5, 6), w, b)
    with pytest.raises(ValueError, match="float32"):
        fused.conv_pool(x.double(), w, b)
    with pytest.raises(ValueError, match=r"idx must be \(2, B\)"):
        fused.conv_pool(torch.zeros(9, 1, 6, 6), w, b, idx=torch.zeros(3, 4, dtype=torch.long))
