"""The documents' models, as flat ``nn.Sequential`` stacks.

Every model is a :class:`Net` (an ``nn.Sequential`` with an ``init_weights()`` method), so that

* :func:`flkit.engine.stack` can draw M independent initialisations by re-running ``init_weights``
  under a seeded generator, and
* :mod:`flkit.engine` can train conv/linear/ReLU/max-pool stacks, with PReLU and BatchNorm too, with its
  grouped fast path (other layers go through ``torch.func.vmap``).

Architectures follow the authors' public code; each docstring names the repository (@ commit) and the file,
and book/appendix/provenance.md lists them. Where our model departs from the code, the docstring says so.

=====================  ============================================================  ==========
name (alias)           architecture                                                  parameters
=====================  ============================================================  ==========
fedau_svhn             conv3-32 / conv32-32 (3x3 p1, ReLU, pool2), fc 2048-128-10       273,706
fedau_cifar10          same convs, fc 2048-256-64-10                                     551,786
fedau_cifar100         same convs, drop .2, fc 2048-512-256-100 (drop .2 after each)   1,216,260
fedau_cinic10          as fedau_cifar100 with 10 outputs                               1,193,130
fedau_fmnist           convs on 1 channel, fc 1568-128-10                                211,690
cvar_mlp               784-128-128-10, leaky ReLU                                        118,282
cvar_lenet             conv1-6 / conv6-16 (5x5 p2), fc 784-120-84-10, leaky ReLU        107,786
cvar_2d                2-64-C, ReLU (+ authors' zero init / softmax quirks as flags)   387 (C=3)
hics_fmnist            3 conv blocks with PReLU + BatchNorm, fc 3136-64-10               229,709
hics_fmnist_paper      2 conv blocks (5x5) with PReLU + BatchNorm, drop .2, fc 512-10     31,724
hics_cifar10           FedAvg-paper CNN, dropout .2, fc 1024-64-10                       122,570
hics_cifar100          as hics_cifar10 with 100 outputs                                  128,420
mifa_cnn_cifar10       conv3-32 / conv32-64 (5x5, ReLU, pool2), fc 1600-512-10           878,538
cafed_cnn_cifar10      conv3-32 / conv32-64 (5x5, ReLU, pool2), fc 1600-2048-10        3,353,034
logreg(in_dim, C)      one linear layer (MIFA l2-logistic: 784 -> 10)                 7,850
linear(in_dim, out)    one linear layer (CA-Fed synthetic 10 -> 1, MNIST 784 -> 10)
=====================  ============================================================  ==========

Models that take images also accept them flattened where their first layer is ``Flatten``.
"""
from __future__ import annotations

import numbers

import torch
from torch import nn

__all__ = [
    "Net", "MaxPool2d", "build", "NAMES", "count_parameters",
    "fedau_svhn", "fedau_cifar10", "fedau_cifar100", "fedau_cinic10", "fedau_fmnist",
    "cvar_mlp", "cvar_lenet", "cvar_2d", "hics_fmnist", "hics_fmnist_paper", "hics_cifar10",
    "hics_cifar100", "mifa_cnn_cifar10", "cafed_cnn_cifar10", "logreg", "linear",
]


class MaxPool2d(nn.MaxPool2d):
    """``nn.MaxPool2d`` that, without autograd (evaluation, loss probes), pools 2x2 windows of stride 2 as the
    elementwise maximum of the four strided views: the same numbers bit for bit (a maximum rounds nothing; NaN
    propagates as in the native kernel), about 10x faster on one CPU thread than torch's NCHW pooling kernel,
    which made pooling a third of an evaluation of the HiCS-FL CNN. With autograd, or other windows, it is
    ``nn.MaxPool2d``: its backward routes each window's gradient to one element, as the documents' code does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or not self._strided_max():
            return super().forward(x)
        h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2              # floor mode: drop an odd last row/column
        x = x[..., :h, :w]
        return torch.maximum(torch.maximum(x[..., 0::2, 0::2], x[..., 0::2, 1::2]),
                             torch.maximum(x[..., 1::2, 0::2], x[..., 1::2, 1::2]))

    def _strided_max(self) -> bool:
        two = (2, (2, 2))
        return (self.kernel_size in two and self.stride in two and self.padding in (0, (0, 0))
                and self.dilation in (1, (1, 1)) and not self.ceil_mode and not self.return_indices)


class Net(nn.Sequential):
    """A flat stack of layers with a named initialisation scheme.

    ``init`` is one of
      * ``"default"``: PyTorch's default init of each layer;
      * ``"fedau"``: Kaiming-normal (fan_in, ReLU gain) weights and zero biases on every Conv2d and
        on every Linear except the last one (the authors apply it to their ``conv`` and ``fc1`` blocks;
        their final ``fc2`` keeps PyTorch's default), IBM/fedau@6e9cce9 ``model/cnn_*.py``;
      * ``"hics"``: Xavier-uniform weights with ReLU gain on every Conv2d/Linear, default biases
        (CityChan/HiCS-FL@25f309d ``server/server_hics.py``);
      * ``"zero"``: all Linear weights zero, biases default (the Fed-CVaR 2-D notebooks of risk-aware-FL@f4a32c0).
    """

    def __init__(self, *layers: nn.Module, init: str = "default"):
        super().__init__(*layers)
        if init not in ("default", "fedau", "hics", "zero"):
            raise ValueError(f"init must be 'default', 'fedau', 'hics' or 'zero', got {init!r}")
        self.init = init
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """(Re-)initialise all parameters and buffers; draws from torch's global CPU generator."""
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()
        layers = [m for m in self.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
        if self.init == "fedau":
            last_linear = [m for m in layers if isinstance(m, nn.Linear)][-1]
            for m in layers:
                if m is not last_linear:
                    nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
        elif self.init == "hics":
            for m in layers:
                nn.init.xavier_uniform_(m.weight, gain=nn.init.calculate_gain("relu"))
        elif self.init == "zero":
            for m in layers:
                if isinstance(m, nn.Linear):
                    nn.init.zeros_(m.weight)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars (BatchNorm running statistics are buffers and not counted)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# --------------------------------------------------------------------------------------------- FedAU
def _fedau_convs(in_ch: int) -> list[nn.Module]:
    return [nn.Conv2d(in_ch, 32, 3, padding=1), nn.ReLU(), MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), MaxPool2d(2), nn.Flatten()]


def fedau_svhn(num_classes: int = 10) -> Net:
    """FedAU SVHN CNN (IBM/fedau@6e9cce9 ``model/cnn_svhn.py``): two 3x3 conv blocks, FC 2048-128-10."""
    return Net(*_fedau_convs(3), nn.Linear(2048, 128), nn.ReLU(), nn.Linear(128, num_classes), init="fedau")


def fedau_cifar10(num_classes: int = 10) -> Net:
    """FedAU CIFAR-10 CNN (IBM/fedau@6e9cce9 ``model/cnn_cifar10.py``): two 3x3 conv blocks, FC 2048-256-64-10."""
    return Net(*_fedau_convs(3), nn.Linear(2048, 256), nn.ReLU(), nn.Linear(256, 64), nn.ReLU(),
               nn.Linear(64, num_classes), init="fedau")


def fedau_cifar100(num_classes: int = 100, dropout: float = 0.2) -> Net:
    """FedAU CIFAR-100 CNN (IBM/fedau@6e9cce9 ``model/cnn_cifar100.py``): conv blocks, Dropout,
    FC 2048-512-256-100 with Dropout."""
    return Net(*_fedau_convs(3), nn.Dropout(dropout), nn.Linear(2048, 512), nn.ReLU(), nn.Dropout(dropout),
               nn.Linear(512, 256), nn.ReLU(), nn.Dropout(dropout), nn.Linear(256, num_classes), init="fedau")


def fedau_cinic10(num_classes: int = 10, dropout: float = 0.2) -> Net:
    """FedAU CINIC-10 CNN: the CIFAR-100 model with 10 outputs (IBM/fedau@6e9cce9 ``model/cnn_cinic10.py``)."""
    return fedau_cifar100(num_classes, dropout)


def fedau_fmnist(num_classes: int = 10) -> Net:
    """FedAU Fashion-MNIST CNN (IBM/fedau@6e9cce9 ``model/cnn_mnist.py``): conv blocks on 1 channel,
    FC 1568-128-10 (ReLU)."""
    return Net(*_fedau_convs(1), nn.Linear(1568, 128), nn.ReLU(), nn.Linear(128, num_classes), init="fedau")


# ------------------------------------------------------------------------------------------ Fed-CVaR
def cvar_mlp(in_dim: int = 784, hidden: int = 128, num_classes: int = 10) -> Net:
    """Fed-CVaR MNIST MLP 784-128-128-10 with leaky ReLU (slope 0.01), default init
    (risk-aware-FL@f4a32c0 ``script for Mnist.py``)."""
    return Net(nn.Flatten(), nn.Linear(in_dim, hidden), nn.LeakyReLU(), nn.Linear(hidden, hidden), nn.LeakyReLU(),
               nn.Linear(hidden, num_classes))


def cvar_lenet(num_classes: int = 10) -> Net:
    """Fed-CVaR Fashion-MNIST LeNet (risk-aware-FL@f4a32c0 ``script for FashionMnist.py``): conv 1-6, 6-16
    (5x5, pad 2), FC 784-120-84-10."""
    return Net(nn.Conv2d(1, 6, 5, padding=2), nn.LeakyReLU(), MaxPool2d(2),
               nn.Conv2d(6, 16, 5, padding=2), nn.LeakyReLU(), MaxPool2d(2), nn.Flatten(),
               nn.Linear(784, 120), nn.LeakyReLU(), nn.Linear(120, 84), nn.LeakyReLU(), nn.Linear(84, num_classes))


def cvar_2d(num_classes: int = 3, hidden: int = 64, *, zero_init: bool = False, double_softmax: bool = False) -> Net:
    """Fed-CVaR 2-D synthetic model 2-64-C with ReLU (the three 2-D notebooks of risk-aware-FL@f4a32c0).

    Two quirks of the authors' notebooks are available as flags, both off by default:
      * ``zero_init=True``: both Linear weight matrices start at zero (biases keep PyTorch's default),
        so all 64 hidden units stay identical copies of each other during training;
      * ``double_softmax=True``: a Softmax ends the model, and the CrossEntropy loss applied on top
        takes a second softmax (the loss then lives in [log C - 1 + ..., log C], gradients shrink).

    ``hidden=0`` gives the linear softmax model 2-C (multinomial logistic regression, the document's
    "logistic regression"); the flags apply to it too (zero_init: its weight matrix starts at zero).
    """
    if isinstance(hidden, bool) or not isinstance(hidden, numbers.Integral) or hidden < 0:
        raise ValueError(f"hidden must be an integer >= 0 (0: the linear softmax model 2-C), got {hidden!r}")
    hidden = int(hidden)
    layers = [nn.Linear(2, hidden), nn.ReLU(),
              nn.Linear(hidden, num_classes)] if hidden else [nn.Linear(2, num_classes)]
    if double_softmax:
        layers.append(nn.Softmax(dim=-1))
    return Net(*layers, init="zero" if zero_init else "default")


# ------------------------------------------------------------------------------------------- HiCS-FL
def hics_fmnist(num_classes: int = 10) -> Net:
    """HiCS-FL FMNIST_CNN (CityChan/HiCS-FL@25f309d ``cnn.py``): conv(no bias)-PReLU-BN, conv-PReLU-BN-pool,
    conv-PReLU-BN-pool, FC 3136-64 (ReLU) - 10, Xavier-uniform (ReLU gain) weights. This is the network
    the authors' scripts run; the document's appendix describes another one (two 5x5 convolutions, one
    linear layer), which is the unused ``FMNIST_CNN`` of the repository's ``models.py``.

    BatchNorm: in training mode the batch statistics normalise the batch and the running statistics
    are buffers; :mod:`flkit.engine` stacks them per model and updates them functionally (vmap path).
    """
    return Net(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.PReLU(), nn.BatchNorm2d(32),
               nn.Conv2d(32, 32, 3, padding=1), nn.PReLU(), nn.BatchNorm2d(32), MaxPool2d(2),
               nn.Conv2d(32, 64, 3, padding=1), nn.PReLU(), nn.BatchNorm2d(64), MaxPool2d(2),
               nn.Flatten(), nn.Linear(3136, 64), nn.ReLU(), nn.Linear(64, num_classes), init="hics")


def hics_fmnist_paper(num_classes: int = 10, dropout: float = 0.2) -> Net:
    """The FMNIST network of the HiCS-FL document (appendix 6.1.1: "two 5x5 convolutional layers and two 2x2
    max-pooling layers (with a stride of 2), followed by a fully-connected layer"), with the layers of the
    repository's unused ``FMNIST_CNN`` (CityChan/HiCS-FL@25f309d ``models.py``): conv1-32 (5x5, no pad)-PReLU-BN-
    pool2, conv32-32 (5x5)-PReLU-BN-pool2-Dropout .2, FC 512-10; Xavier-uniform (ReLU gain) weights as the
    server code initialises every model (``server/server_hics.py``). The scripts train :func:`hics_fmnist`."""
    return Net(nn.Conv2d(1, 32, 5), nn.PReLU(), nn.BatchNorm2d(32), MaxPool2d(2),
               nn.Conv2d(32, 32, 5), nn.PReLU(), nn.BatchNorm2d(32), MaxPool2d(2), nn.Dropout(dropout),
               nn.Flatten(), nn.Linear(512, num_classes), init="hics")


def hics_cifar10(num_classes: int = 10, dropout: float = 0.2) -> Net:
    """HiCS-FL CIFAR10_CNN, the FedAvg-paper CNN (CityChan/HiCS-FL@25f309d ``cnn.py``): conv3-32, conv32-64,
    conv64-64 (3x3, no pad), ReLU + pool after the first two, Dropout .2 after each conv block (none after
    conv3's activation, which it lacks), FC 1024-64 (ReLU) - 10, Xavier-uniform (ReLU gain) weights."""
    return Net(nn.Conv2d(3, 32, 3), nn.ReLU(), MaxPool2d(2), nn.Dropout(dropout),
               nn.Conv2d(32, 64, 3), nn.ReLU(), MaxPool2d(2), nn.Dropout(dropout),
               nn.Conv2d(64, 64, 3), nn.Dropout(dropout), nn.Flatten(),
               nn.Linear(1024, 64), nn.ReLU(), nn.Linear(64, num_classes), init="hics")


def hics_cifar100(num_classes: int = 100, dropout: float = 0.2) -> Net:
    """The HiCS-FL document's CIFAR-100 network: appendix 6.1.1 gives CIFAR10 and CIFAR100 one description
    ("three 3x3-convolutional layers and two 2x2-maxpooling layers ..., followed by two fully-connected
    layers; dimension of the hidden layer was 64"), so :func:`hics_cifar10`'s layers with 100 outputs. The
    authors' public code (CityChan/HiCS-FL@25f309d) has no CIFAR-100 network or configuration."""
    return hics_cifar10(num_classes, dropout)


# --------------------------------------------------------------------------------------- MIFA, CA-Fed
def mifa_cnn_cifar10(num_classes: int = 10) -> Net:
    """MIFA ``cnn`` (hmgxr128/MIFA_code@c1099d9 ``src/models/model.py::TwoConvOneFc``): conv3-32 (5x5),
    ReLU, pool2, conv32-64 (5x5), ReLU, pool2, FC 1600-512 (ReLU)-10, PyTorch default init."""
    return Net(nn.Conv2d(3, 32, 5), nn.ReLU(), MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(), MaxPool2d(2),
               nn.Flatten(), nn.Linear(1600, 512), nn.ReLU(), nn.Linear(512, num_classes))


def cafed_cnn_cifar10(num_classes: int = 10) -> Net:
    """CA-Fed CIFAR-10 CNN (arodio/CA-Fed@e673587 ``models.py::CIFAR10CNN``): as ``mifa_cnn_cifar10`` with
    FC 1600-2048-10, ReLU after each conv and after the hidden FC."""
    return Net(nn.Conv2d(3, 32, 5), nn.ReLU(), MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(), MaxPool2d(2),
               nn.Flatten(), nn.Linear(1600, 2048), nn.ReLU(), nn.Linear(2048, num_classes))


def logreg(in_dim: int = 784, num_classes: int = 10) -> Net:
    """Multinomial logistic regression (MIFA's MNIST l2-logistic; the l2 term is the optimiser's
    weight decay, hmgxr128/MIFA_code@c1099d9 ``run_mnist_logit.sh``). Inputs are flattened."""
    return Net(nn.Flatten(), nn.Linear(in_dim, num_classes))


def linear(in_dim: int = 10, out_dim: int = 1, bias: bool = True) -> Net:
    """A single linear layer on flattened inputs (CA-Fed synthetic 10->1 and MNIST 784->10;
    arodio/CA-Fed@e673587 ``models.py::LinearLayer``).
    With ``out_dim=1`` the engine's default loss is the binary logistic loss."""
    return Net(nn.Flatten(), nn.Linear(in_dim, out_dim, bias=bias))


_BUILDERS = {f.__name__: f for f in (
    fedau_svhn, fedau_cifar10, fedau_cifar100, fedau_cinic10, fedau_fmnist, cvar_mlp, cvar_lenet, cvar_2d,
    hics_fmnist, hics_fmnist_paper, hics_cifar10, hics_cifar100, mifa_cnn_cifar10, cafed_cnn_cifar10, logreg,
    linear)}
_ALIASES = {  # the spellings used in the team's API note
    "fedau_cnn_svhn": "fedau_svhn", "fedau_cnn_cifar10": "fedau_cifar10", "fedau_cnn_cifar100": "fedau_cifar100",
    "fedau_cnn_cinic10": "fedau_cinic10", "fedau_cnn_fmnist": "fedau_fmnist", "hics_cnn_fmnist": "hics_fmnist",
    "hics_cnn_cifar10": "hics_cifar10", "mifa_cnn": "mifa_cnn_cifar10", "cafed_cnn": "cafed_cnn_cifar10",
}
NAMES = tuple(_BUILDERS)


def build(name: str, **kw) -> Net:
    """Build a model by name (see the module table; ``fedau_cnn_cifar10``-style aliases work too).

    Keyword arguments go to the builder, e.g. ``build("cvar_2d", num_classes=4, zero_init=True)``.
    The model is built on the CPU with torch's global generator; use :func:`flkit.engine.stack`
    with a seeded generator for reproducible, independent initialisations.
    """
    key = _ALIASES.get(name, name)
    if key not in _BUILDERS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(NAMES)} (or aliases {sorted(_ALIASES)})")
    return _BUILDERS[key](**kw)
