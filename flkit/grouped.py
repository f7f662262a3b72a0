"""The forward pass of M stacked models of the grouped family, shared by :mod:`flkit.engine` (its "grouped"
local training, :class:`flkit.fastsgd.FastSGD`, evaluation) and :mod:`flkit.fused` (the layers after its Triton
blocks).

A flat ``nn.Sequential`` of Conv2d/Linear/pooling/elementwise/PReLU/BatchNorm layers runs for M models at once:
convolutions as one grouped convolution (models stacked along the channel axis, ``groups=M``), Linear layers as
one ``baddbmm``, BatchNorms as one native BatchNorm over the M x C channels (each model's batch and running
statistics are its own), with an optional per-row mask that leaves padded slots out of the batch statistics.
The names are re-exported by :mod:`flkit.engine`, whose docstring states the update rule they serve.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["supports_grouped", "grouped_forward"]

Params = dict[str, Tensor]
_BN = nn.modules.batchnorm._BatchNorm


# ----------------------------------------------------------------------------- grouped fast forward
_ELEMENTWISE = (nn.ReLU, nn.LeakyReLU, nn.Tanh, nn.Sigmoid, nn.Dropout, nn.Identity, nn.Softmax, nn.LogSoftmax)


def supports_grouped(model: nn.Module, buffers: bool = False) -> bool:
    """True for flat ``nn.Sequential`` stacks of Conv2d, Linear, MaxPool2d/AvgPool2d, Flatten and
    elementwise layers (ReLU, LeakyReLU, Tanh, Sigmoid, Dropout, Softmax over the last axis), without buffers.

    With ``buffers=True`` (the family :func:`flkit.engine.local_train` trains on the grouped path) also PReLU and
    BatchNorm (BatchNorm2d on images, BatchNorm1d on flat features; momentum not None): each model's batch and running
    statistics are its own channels of one native BatchNorm over the M models' stacked channels."""
    if not isinstance(model, nn.Sequential):
        return False
    if not buffers and any(True for _ in model.buffers()):
        return False
    layout = "flat"                     # what the layer sees: images (after a conv or pool) or flat features
    for layer in model:
        t = type(layer)
        if t is nn.Conv2d:
            if layer.padding_mode != "zeros":
                return False
            layout = "image"
        elif issubclass(t, (nn.MaxPool2d, nn.AvgPool2d)):
            layout = "image"
        elif t is nn.Flatten:
            if (layer.start_dim, layer.end_dim) != (1, -1):
                return False
            layout = "flat"
        elif t is nn.Linear:
            layout = "flat"
        elif t in (nn.Softmax, nn.LogSoftmax):
            if layer.dim not in (-1, 1):
                return False
        elif buffers and t is nn.PReLU:
            pass
        elif buffers and t in (nn.BatchNorm1d, nn.BatchNorm2d):
            if layer.momentum is None or (t is nn.BatchNorm2d) != (layout == "image"):
                return False
        elif t not in _ELEMENTWISE:
            return False
    return True


def _channels_first(h: Tensor, layout: str, M: int) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
    """h as (B, M*C, ...) with each model's channels side by side, and the map back to the layout."""
    if layout == "grouped":
        return h, lambda t: t
    B, rest = h.shape[1], h.shape[2:]                                    # batched: (M, B, C)
    return h.transpose(0, 1).reshape(B, -1), lambda t: t.reshape(B, M, *rest).transpose(0, 1)


def _grouped_batch_norm(layer, name: str, params: Params, buffers: Params | None, h: Tensor, layout: str, M: int,
                        valid: Tensor | None, new_buffers: dict | None) -> Tensor:
    """BatchNorm of M models at once: their channels are the channels of one native BatchNorm (per-model
    batch statistics and running statistics); with ``valid`` (M, B), statistics over the valid rows only."""
    hc, back = _channels_first(h, layout, M)
    w, b = params.get(name + ".weight"), params.get(name + ".bias")
    w = None if w is None else w.reshape(-1)
    b = None if b is None else b.reshape(-1)
    tracked = buffers is not None and name + ".running_mean" in buffers
    rm = buffers[name + ".running_mean"].reshape(-1) if tracked else None
    rv = buffers[name + ".running_var"].reshape(-1) if tracked else None
    if not layer.training:
        if not tracked:
            out = F.batch_norm(hc, None, None, w, b, True, 0.0, layer.eps)
        else:
            out = F.batch_norm(hc, rm, rv, w, b, False, 0.0, layer.eps)
        return back(out)
    if valid is None:
        rm = None if rm is None else rm.clone()
        rv = None if rv is None else rv.clone()
        out = F.batch_norm(hc, rm, rv, w, b, True, layer.momentum, layer.eps)
    else:
        C = hc.shape[1] // M
        v = valid.transpose(0, 1).repeat_interleave(C, dim=1)             # (B, M*C)
        out, rm, rv = _masked_batch_norm(hc, v, w, b, rm, rv, layer.momentum, layer.eps)
    if tracked and new_buffers is not None:
        new_buffers[name + ".running_mean"], new_buffers[name + ".running_var"] = rm.view(M, -1), rv.view(M, -1)
    return back(out)


def grouped_forward(model: nn.Sequential, params: Params, x: Tensor, shared: bool = False,
                    keep: dict[str, Tensor] | None = None, buffers: Params | None = None,
                    valid: Tensor | None = None, new_buffers: dict | None = None) -> Tensor:
    """Logits (M, B, classes) of M stacked models on inputs x (M, B, ...) or, with ``shared``, on one
    batch x (B, ...) seen by all models. Image activations are kept as (B, M*C, H, W) (model-major
    channels) so every conv layer of the M models is one grouped convolution, every BatchNorm one native
    BatchNorm over the M*C channels and every PReLU one native PReLU.

    ``keep``: the Dropout layers' keep masks of this step, name -> bool (M, B, *activation shape) (see
    :func:`flkit.engine.dropout_masks`); without them Dropout draws from torch's global RNG. ``buffers``: the stacked
    BatchNorm running statistics (M, C) (training mode: the batch statistics normalise, and the updated
    running statistics go to ``new_buffers``; eval mode: the running statistics normalise). ``valid``
    (M, B) bool: the rows that count in BatchNorm's batch statistics (None: all)."""
    M = next(iter(params.values())).shape[0]
    h, layout = x, ("shared" if shared else "batched")  # batched: (M, B, ...); grouped: (B, M*C, H, W)
    for name, layer in model.named_children():
        if isinstance(layer, (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d)) and layout != "grouped":
            if layout == "batched":
                h = h.transpose(0, 1).reshape(h.shape[1], -1, *h.shape[3:])
            else:
                h = h.repeat(1, M, 1, 1)
            layout = "grouped"
        if isinstance(layer, (_BN, nn.PReLU)) and layout == "shared":
            h, layout = h.expand(M, *h.shape), "batched"
        if isinstance(layer, nn.Conv2d):
            b = params.get(name + ".bias")
            h = F.conv2d(h, params[name + ".weight"].flatten(0, 1), None if b is None else b.flatten(),
                         layer.stride, layer.padding, layer.dilation, M * layer.groups)
        elif isinstance(layer, nn.Linear):
            if layout == "grouped":
                raise ValueError(f"layer {name!r}: a Linear after a Conv2d needs an nn.Flatten in between")
            if layout == "shared":
                h = h.expand(M, *h.shape)
            w, b = params[name + ".weight"].transpose(1, 2), params.get(name + ".bias")
            h = torch.bmm(h, w) if b is None else torch.baddbmm(b.unsqueeze(1), h, w)
            layout = "batched"
        elif isinstance(layer, nn.Flatten):
            if layout == "grouped":
                h, layout = h.reshape(h.shape[0], M, -1).transpose(0, 1), "batched"
            else:
                h = h.flatten(2 if layout == "batched" else 1)
        elif isinstance(layer, (nn.Softmax, nn.LogSoftmax)):
            if layout == "grouped":
                raise ValueError(f"layer {name!r}: Softmax is supported on logits only")
            h = (F.softmax if isinstance(layer, nn.Softmax) else F.log_softmax)(h, dim=-1)
        elif isinstance(layer, _BN):
            if (layout == "grouped") != isinstance(layer, nn.BatchNorm2d) or h.dim() != (4 if layout == "grouped"
                                                                                         else 3):
                raise ValueError(f"layer {name!r}: BatchNorm2d on images and BatchNorm1d on flat features only")
            h = _grouped_batch_norm(layer, name, params, buffers, h, layout, M, valid, new_buffers)
        elif isinstance(layer, nn.PReLU):
            w = params[name + ".weight"]                                  # (M, 1) or (M, C)
            if layout == "grouped":
                C = h.shape[1] // M
                h = F.prelu(h, w.expand(M, C).reshape(-1))
            else:
                h = torch.where(h > 0, h, w.view(M, 1, -1) * h)
        elif isinstance(layer, nn.Dropout) and keep is not None and layer.training:
            k = keep[name]                                            # (M, B, *shape)
            if layout == "grouped":
                k = k.transpose(0, 1).reshape(h.shape)
            elif layout == "shared":
                raise ValueError(f"layer {name!r}: dropout masks need each model's own batch (not shared=True)")
            h = _drop(h, k, layer.p)
        else:
            h = layer(h)
    return h



def _drop(h: Tensor, keep: Tensor, p: float) -> Tensor:
    """Inverted dropout with a given keep mask (bool, h's shape): h * keep / (1 - p) (0 when p = 1)."""
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
    return h * (keep.to(h.dtype) * scale)


class _MaskedBatchNorm(torch.autograd.Function):
    """out = (h - mean) / sqrt(var + eps) * w + b for h (B, C, P), mean and biased var over the rows with v = 1
    (v: (B, 1) or (B, C) of 0/1) and the P positions, n = their count per channel; also returns mean and var.
    The backward in closed form (a few passes over h instead of autograd's chain of elementwise ops): with
    xhat = (h - mean) / sqrt(var + eps), k = w / sqrt(var + eps) and sums over every row and position,
    dL/db = sum g, dL/dw = sum g xhat, dL/dh = k (g - v (sum g + xhat sum g xhat) / n): the rows left out of
    the statistics (v = 0) get the direct term only."""
    generate_vmap_rule = True

    @staticmethod
    def forward(flat, v, n, weight, bias, eps):
        mean = (flat.sum(2) * v).sum(0) / n                                 # row sums first: one pass over h
        centred = flat - mean[:, None]
        var = (torch.linalg.vector_norm(centred, dim=2) ** 2 * v).sum(0) / n   # biased, over the valid rows
        inv = torch.rsqrt(var + eps)
        if weight is None:
            out = centred * inv[:, None]
        else:
            out = torch.addcmul(bias[:, None], centred, (inv * weight)[:, None])
        return out, mean, var, centred, inv

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, v, n, weight, _, _ = inputs
        _, _, _, centred, inv = output
        ctx.save_for_backward(centred, inv, v, n, weight)
        ctx.mark_non_differentiable(*output[1:])
        ctx.affine = weight is not None

    @staticmethod
    def backward(ctx, g, *_):
        centred, inv, v, n, weight = ctx.saved_tensors
        gb = g.sum((0, 2))                                                  # sum g
        gw = (g * centred).sum((0, 2)) * inv                                # sum g xhat
        k = inv * weight if ctx.affine else inv
        a = v * ((k * gb) / n)                                              # (B, C): k v sum(g) / n
        c = v * ((k * gw * inv) / n)                                        # (B, C): coefficient of (h - mean)
        gx = torch.addcmul(g * k[:, None] - a[..., None], centred, -c[..., None])
        return gx, None, None, (gw if ctx.affine else None), (gb if ctx.affine else None), None


def _masked_batch_norm(h: Tensor, valid: Tensor, weight, bias, running_mean, running_var, momentum: float,
                       eps: float) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Training-mode BatchNorm of one model's batch h (B, C, ...) whose statistics count only the rows with
    ``valid`` (B,) true (the padded slots of a short last batch are left out, as if the batch were shorter):
    mean and biased variance over the valid rows (and spatial positions) normalise every row; the running
    statistics move by ``momentum`` towards the mean and the unbiased variance, as torch's BatchNorm does.
    ``valid`` may also be (B, C): a row's validity per channel (the M models' channels side by side)."""
    work = h.float() if h.dtype in (torch.float16, torch.bfloat16) else h   # statistics in float32 at least
    C, per = work.shape[1], work[0, 0].numel()                              # channels, values per row and channel
    v = valid.to(work.dtype)
    v = v[:, None] if v.dim() == 1 else v                                   # (B, 1) or (B, C)
    n = v.sum(0) * per                                                      # values per channel
    n = n.expand(C) if n.numel() == 1 else n
    out, mean, var, _, _ = _MaskedBatchNorm.apply(work.reshape(work.shape[0], C, per), v, n, weight, bias, eps)
    out = out.view(work.shape)
    new_mean = new_var = None
    if running_mean is not None:
        m = momentum
        new_mean = (1 - m) * running_mean + m * mean.to(running_mean.dtype)
        new_var = (1 - m) * running_var + m * (var * (n / (n - 1))).to(running_var.dtype)
    return out.to(h.dtype), new_mean, new_var
