"""Models: parameter counts (hand-computed from the authors' architectures listed in
book/appendix/provenance.md), shapes, inits."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from flkit import models

# name -> (input shape, outputs, parameters). Counts: conv = c_in*c_out*k*k + c_out, fc = in*out + out.
EXPECTED = {
    # 3*32*9+32 = 896, 32*32*9+32 = 9248, then the FC stack
    "fedau_svhn": ((3, 32, 32), 10, 896 + 9248 + (2048 * 128 + 128) + (128 * 10 + 10)),
    "fedau_cifar10": ((3, 32, 32), 10, 896 + 9248 + (2048 * 256 + 256) + (256 * 64 + 64) + (64 * 10 + 10)),
    "fedau_cifar100": ((3, 32, 32), 100, 896 + 9248 + (2048 * 512 + 512) + (512 * 256 + 256) + (256 * 100 + 100)),
    "fedau_cinic10": ((3, 32, 32), 10, 896 + 9248 + (2048 * 512 + 512) + (512 * 256 + 256) + (256 * 10 + 10)),
    "fedau_fmnist": ((1, 28, 28), 10, (9 * 32 + 32) + 9248 + (1568 * 128 + 128) + (128 * 10 + 10)),
    "cvar_mlp": ((1, 28, 28), 10, (784 * 128 + 128) + (128 * 128 + 128) + (128 * 10 + 10)),
    "cvar_lenet": ((1, 28, 28), 10, (25 * 6 + 6) + (6 * 16 * 25 + 16) + (784 * 120 + 120) + (120 * 84 + 84)
                   + (84 * 10 + 10)),
    "cvar_2d": ((2,), 3, (2 * 64 + 64) + (64 * 3 + 3)),
    # conv1 has no bias; each PReLU has 1 weight; each BN has 2*C affine parameters (stats are buffers)
    "hics_fmnist": ((1, 28, 28), 10, 9 * 32 + 1 + 64 + (32 * 32 * 9 + 32) + 1 + 64 + (32 * 64 * 9 + 64) + 1 + 128
                    + (3136 * 64 + 64) + (64 * 10 + 10)),
    # the document's FMNIST network: conv1-32 5x5, PReLU, BN, conv32-32 5x5, PReLU, BN, fc 512-10
    "hics_fmnist_paper": ((1, 28, 28), 10, (25 * 32 + 32) + 1 + 64 + (32 * 32 * 25 + 32) + 1 + 64 + (512 * 10 + 10)),
    "hics_cifar10": ((3, 32, 32), 10, (3 * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (64 * 64 * 9 + 64) + (1024 * 64 + 64)
                     + (64 * 10 + 10)),
    "hics_cifar100": ((3, 32, 32), 100, (3 * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (64 * 64 * 9 + 64) + (1024 * 64 + 64)
                      + (64 * 100 + 100)),
    "mifa_cnn_cifar10": ((3, 32, 32), 10, (3 * 32 * 25 + 32) + (32 * 64 * 25 + 64) + (1600 * 512 + 512)
                         + (512 * 10 + 10)),
    "cafed_cnn_cifar10": ((3, 32, 32), 10, (3 * 32 * 25 + 32) + (32 * 64 * 25 + 64) + (1600 * 2048 + 2048)
                          + (2048 * 10 + 10)),
    "logreg": ((1, 28, 28), 10, 784 * 10 + 10),
    "linear": ((10,), 1, 11),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parameter_count_and_output_shape(name):
    shape, classes, count = EXPECTED[name]
    net = models.build(name)
    assert models.count_parameters(net) == count
    assert net(torch.randn(2, *shape)).shape == (2, classes)


def test_every_model_is_covered_and_aliases_resolve():
    assert set(models.NAMES) == set(EXPECTED)
    assert models.count_parameters(models.build("fedau_cnn_cifar10")) == EXPECTED["fedau_cifar10"][2]
    assert isinstance(models.build("hics_cnn_fmnist")[2], nn.BatchNorm2d)
    with pytest.raises(ValueError, match="unknown model"):
        models.build("resnet")


def test_fedau_init_is_kaiming_with_zero_bias_except_last_layer():
    torch.manual_seed(0)
    net = models.build("fedau_cifar10")
    layers = [m for m in net if isinstance(m, (nn.Conv2d, nn.Linear))]
    for m in layers[:-1]:
        assert torch.count_nonzero(m.bias) == 0
        fan_in = m.weight[0].numel()
        assert m.weight.std().item() == pytest.approx((2 / fan_in) ** 0.5, rel=0.1)  # Kaiming normal, ReLU gain
    assert torch.count_nonzero(layers[-1].bias) > 0  # PyTorch default init


def test_cvar_2d_quirk_flags():
    net = models.build("cvar_2d", num_classes=4, zero_init=True, double_softmax=True)
    assert all(torch.count_nonzero(m.weight) == 0 for m in net if isinstance(m, nn.Linear))
    out = net(torch.randn(5, 2))
    assert out.shape == (5, 4)
    assert torch.allclose(out.sum(1), torch.ones(5))  # probabilities: the authors' softmax before CE
    plain = models.build("cvar_2d")
    assert not isinstance(plain[-1], nn.Softmax) and torch.count_nonzero(plain[0].weight) > 0


def test_init_weights_redraws_everything():
    net = models.build("hics_fmnist")
    before = {k: v.clone() for k, v in net.state_dict().items()}
    net[2].running_mean.fill_(3.0)
    net.init_weights()
    assert torch.count_nonzero(net[2].running_mean) == 0  # BN statistics reset too
    assert not torch.equal(before["0.weight"], net[0].weight)


@pytest.mark.parametrize("shape", [(3, 4, 24, 24), (2, 3, 25, 23), (5, 7, 7)])
def test_maxpool_without_autograd_is_the_native_pool_bit_for_bit(shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-2, 3, shape, generator=g).float()      # many ties within windows
    x.view(-1)[::37] = torch.randn(x.numel() // 37 + 1, generator=g)[: x.view(-1)[::37].numel()]
    x.view(-1)[5] = float("nan")                               # NaN propagates as in the native kernel
    pool = models.MaxPool2d(2)
    with torch.no_grad():
        out = pool(x)
    ref = nn.functional.max_pool2d(x, 2)
    assert out.shape == ref.shape and torch.equal(out.isnan(), ref.isnan())
    assert torch.equal(out.nan_to_num(9.0), ref.nan_to_num(9.0))


def test_maxpool_with_autograd_is_nn_maxpool_and_works_under_vmap():
    x = torch.randint(0, 2, (2, 3, 8, 8)).float().requires_grad_()   # ties: one element of a window gets the gradient
    gy = torch.randn(2, 3, 4, 4)
    g_ours, = torch.autograd.grad(models.MaxPool2d(2)(x), x, gy)
    g_ref, = torch.autograd.grad(nn.MaxPool2d(2)(x), x, gy)
    assert torch.equal(g_ours, g_ref)
    xs = torch.randn(4, 2, 3, 9, 9)
    with torch.no_grad():
        batched = torch.func.vmap(models.MaxPool2d(2))(xs)
    assert torch.equal(batched, nn.functional.max_pool2d(xs.flatten(0, 1), 2).view(4, 2, 3, 4, 4))
    other = models.MaxPool2d(3, stride=1)                             # other windows: the native pool
    with torch.no_grad():
        assert torch.equal(other(xs[0]), nn.functional.max_pool2d(xs[0], 3, stride=1))


def test_every_max_pool_of_the_models_is_the_fast_one():
    for name in EXPECTED:
        pools = [m for m in models.build(name).modules() if isinstance(m, nn.MaxPool2d)]
        assert all(type(m) is models.MaxPool2d for m in pools), name
