"""Fused conv + LeakyReLU + 2x2 max-pool blocks for M stacked models, written in Triton.

The LeNet of Fed-CVaR's Table 1 is two blocks Conv2d(k, "same" padding) -> LeakyReLU -> MaxPool2d(2)
followed by fully connected layers. Stacking M such models as one grouped convolution
(`flkit.grouped.grouped_forward`) makes cuDNN loop over the M groups (and fall back to its depthwise
kernel for the 1-channel first layer): on an H100 a local step of 65 LeNets (batch 128) takes 6.5 ms.
Here each block is one implicit-GEMM kernel per direction, with the M models as a grid axis; the same
step takes 3.5 ms (benchmarks/bench_cvar_step.py, results/benchmarks/cvar_step_h100.log). That is still
several times what the step's memory traffic (about 1 GB) needs: every kernel gathers its im2col
operand from L1/L2 without reusing it through shared memory, which is where a faster version would go.

    forward   z = conv(x, W_m) + b_m, y = maxpool(leaky(z)), plus the argmax of each pool window
    backward  gz = the pool/LeakyReLU gradient routed to the argmax (never stores z),
              gW, gb = sum over samples and positions of gz * im2col(x) (split over programs, partial sums
              added up in a fixed order: deterministic), gx = conv_transpose(gz, W_m) when x needs it.

The first block can read its input straight from the dataset through the minibatch indices (`idx`,
padding entries < 0 read sample 0; their labels are ignored by the loss). Everything after the last
block (Flatten, Linear, elementwise layers) runs through `flkit.grouped.grouped_forward`.

Matrix products use TF32 on the GPU by default, like PyTorch's cuDNN convolutions (precision="ieee" for
full float32). On the CPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1 set before
triton is imported), which is how tests/test_fused.py checks them against torch's conv/pool in float32.
"""
from __future__ import annotations

import collections
import os

import torch
from torch import nn

from flkit.grouped import grouped_forward, supports_grouped

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - flkit works without triton; this module then does not
    triton = None

__all__ = ["available", "supports_fused", "conv_pool", "forward"]


def available(device: torch.device | str) -> bool:
    """True where the fused kernels can run: triton importable and a CUDA device, or any device under
    Triton's interpreter (TRITON_INTERPRET=1: exact but slow, for tests)."""
    if triton is None:
        return False
    return torch.device(device).type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def _is_block(conv, act, pool) -> bool:
    return (isinstance(conv, nn.Conv2d) and conv.bias is not None and conv.groups == 1
            and conv.stride == (1, 1) and conv.dilation == (1, 1) and conv.padding_mode == "zeros"
            and conv.kernel_size[0] == conv.kernel_size[1] and conv.kernel_size[0] % 2 == 1
            and conv.padding == (conv.kernel_size[0] // 2,) * 2
            and isinstance(act, nn.LeakyReLU)
            and isinstance(pool, nn.MaxPool2d) and pool.kernel_size in (2, (2, 2)) and pool.stride in (2, (2, 2))
            and pool.padding in (0, (0, 0)) and pool.dilation in (1, (1, 1)) and not pool.ceil_mode)


def _split(model: nn.Module):
    """(blocks, tail): the leading conv blocks as (name, conv, slope) and the rest as a Sequential."""
    kids = list(model.named_children()) if isinstance(model, nn.Sequential) else []
    blocks = []
    while len(kids) >= 3 and _is_block(*(m for _, m in kids[:3])):
        blocks.append((kids[0][0], kids[0][1], float(kids[1][1].negative_slope)))
        kids = kids[3:]
    return blocks, nn.Sequential(collections.OrderedDict(kids))


def supports_fused(model: nn.Module) -> bool:
    """True for Sequentials that start with Conv2d(odd k, stride 1, "same" zero padding, bias) ->
    LeakyReLU -> MaxPool2d(2) blocks (at least one) and continue with Flatten + layers of the engine's
    grouped family (Linear, elementwise)."""
    blocks, tail = _split(model)
    return (bool(blocks) and len(tail) > 0 and isinstance(tail[0], nn.Flatten)
            and not any(isinstance(m, (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d)) for m in tail)
            and supports_grouped(tail))


if triton is not None:
    @triton.jit
    def _fwd_kernel(x_ptr, idx_ptr, w_ptr, b_ptr, y_ptr, code_ptr, B, slope,
                    C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, O: tl.constexpr, KS: tl.constexpr,
                    GATHER: tl.constexpr, O_PAD: tl.constexpr, BK: tl.constexpr, BLOCK: tl.constexpr,
                    PREC: tl.constexpr):
        # rows of this program: (sample b, pooled position pp, window slot s), the 4 slots adjacent
        pid, m = tl.program_id(0), tl.program_id(1)
        PAD: tl.constexpr = KS // 2
        KK: tl.constexpr = KS * KS
        CK: tl.constexpr = C * KK
        WP: tl.constexpr = W // 2
        PP: tl.constexpr = (H // 2) * WP
        rows = pid * BLOCK + tl.arange(0, BLOCK)
        s = rows % 4
        b = rows // 4 // PP
        pp = rows // 4 % PP
        i = (pp // WP) * 2 + s // 2
        j = (pp % WP) * 2 + s % 2
        row_ok = b < B
        if GATHER:
            src = tl.maximum(tl.load(idx_ptr + m * B + b, mask=row_ok, other=0), 0)
        else:
            src = m * B + b
        base = src.to(tl.int64) * (C * H * W)
        o = tl.arange(0, O_PAD)
        acc = tl.zeros((BLOCK, O_PAD), dtype=tl.float32)
        for k0 in tl.static_range(0, CK, BK):
            ks = k0 + tl.arange(0, BK)
            c, kk = ks // KK, ks % KK
            ii = i[:, None] + (kk // KS - PAD)[None, :]
            jj = j[:, None] + (kk % KS - PAD)[None, :]
            ok = row_ok[:, None] & (ks < CK)[None, :] & (ii >= 0) & (ii < H) & (jj >= 0) & (jj < W)
            a = tl.load(x_ptr + base[:, None] + c[None, :] * (H * W) + ii * W + jj, mask=ok, other=0.0)
            wt = tl.load(w_ptr + m * (O * CK) + o[None, :] * CK + ks[:, None],
                         mask=(ks < CK)[:, None] & (o < O)[None, :], other=0.0)
            acc += tl.dot(a, wt, input_precision=PREC)
        acc += tl.load(b_ptr + m * O + o, mask=o < O, other=0.0)[None, :]
        z = tl.reshape(acc, (BLOCK // 4, 4, O_PAD))
        zmax = tl.max(z, axis=1)
        code = tl.argmax(z, axis=1)
        y = tl.where(zmax > 0, zmax, zmax * slope)
        prow = pid * (BLOCK // 4) + tl.arange(0, BLOCK // 4)
        bp, pq = prow // PP, prow % PP
        out = ((m * B + bp).to(tl.int64)[:, None] * O + o[None, :]) * PP + pq[:, None]
        ok = (bp < B)[:, None] & (o < O)[None, :]
        tl.store(y_ptr + out, y, mask=ok)
        tl.store(code_ptr + out, code.to(tl.int8), mask=ok)

    @triton.jit
    def _pool_grad_kernel(gy_ptr, y_ptr, code_ptr, gz_ptr, N, slope,
                          H: tl.constexpr, W: tl.constexpr, BLOCK: tl.constexpr):
        # gz (.., H, W) from gy (.., H/2, W/2): the window's argmax gets gy * leaky'(z), the rest 0
        e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        ok = e < N
        plane, p = e // (H * W), e % (H * W)
        i, j = p // W, p % W
        pe = plane * ((H // 2) * (W // 2)) + (i // 2) * (W // 2) + j // 2
        gy = tl.load(gy_ptr + pe, mask=ok, other=0.0)
        y = tl.load(y_ptr + pe, mask=ok, other=0.0)
        code = tl.load(code_ptr + pe, mask=ok, other=-1).to(tl.int32)
        g = tl.where(code == (i % 2) * 2 + j % 2, tl.where(y > 0, gy, gy * slope), 0.0)
        tl.store(gz_ptr + e, g, mask=ok)

    @triton.jit
    def _wgrad_kernel(gz_ptr, x_ptr, idx_ptr, gw_ptr, gb_ptr, B, rows_per_split,
                      C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, O: tl.constexpr, KS: tl.constexpr,
                      GATHER: tl.constexpr, O_PAD: tl.constexpr, CKB: tl.constexpr, BR: tl.constexpr,
                      PREC: tl.constexpr):
        # partial gW[m, split] = sum over this split's (b, p) rows of gz[m, b, :, p] im2col(x)[m, b, p, :]
        sp, cb, m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        splits = tl.num_programs(0)
        PAD: tl.constexpr = KS // 2
        KK: tl.constexpr = KS * KS
        CK: tl.constexpr = C * KK
        HW: tl.constexpr = H * W
        ks = cb * CKB + tl.arange(0, CKB)
        c, kk = ks // KK, ks % KK
        dh, dw = kk // KS - PAD, kk % KS - PAD
        o = tl.arange(0, O_PAD)
        acc = tl.zeros((O_PAD, CKB), dtype=tl.float32)
        gb = tl.zeros((O_PAD,), dtype=tl.float32)
        start = sp * rows_per_split
        end = tl.minimum(start + rows_per_split, B * HW)
        for r0 in range(start, end, BR):
            r = r0 + tl.arange(0, BR)
            r_ok = r < end
            b, p = r // HW, r % HW
            g = tl.load(gz_ptr + ((m * B + b).to(tl.int64)[None, :] * O + o[:, None]) * HW + p[None, :],
                        mask=r_ok[None, :] & (o < O)[:, None], other=0.0)          # (O_PAD, BR)
            if GATHER:
                src = tl.maximum(tl.load(idx_ptr + m * B + b, mask=r_ok, other=0), 0)
            else:
                src = m * B + b
            ii = (p // W)[:, None] + dh[None, :]
            jj = (p % W)[:, None] + dw[None, :]
            ok = r_ok[:, None] & (ks < CK)[None, :] & (ii >= 0) & (ii < H) & (jj >= 0) & (jj < W)
            a = tl.load(x_ptr + src.to(tl.int64)[:, None] * (C * HW) + c[None, :] * HW + ii * W + jj,
                        mask=ok, other=0.0)                                         # (BR, CKB)
            acc += tl.dot(g, a, input_precision=PREC)
            gb += tl.sum(g, axis=1)
        part = (m * splits + sp).to(tl.int64)
        tl.store(gw_ptr + (part * O + o[:, None]) * CK + ks[None, :], acc, mask=(o < O)[:, None] & (ks < CK)[None, :])
        tl.store(gb_ptr + part * O + o, gb, mask=(o < O) & (cb == 0))

    @triton.jit
    def _dgrad_kernel(gz_ptr, w_ptr, gx_ptr, B,
                      C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, O: tl.constexpr, KS: tl.constexpr,
                      C_PAD: tl.constexpr, BK: tl.constexpr, BLOCK: tl.constexpr, PREC: tl.constexpr):
        # gx[m, b, c, q] = sum over (o, tap) of gz[m, b, o, q - tap offset] W[m, o, c, tap]
        pid, m = tl.program_id(0), tl.program_id(1)
        PAD: tl.constexpr = KS // 2
        KK: tl.constexpr = KS * KS
        OKK: tl.constexpr = O * KK
        HW: tl.constexpr = H * W
        r = pid * BLOCK + tl.arange(0, BLOCK)
        b, q = r // HW, r % HW
        i, j = q // W, q % W
        r_ok = b < B
        c = tl.arange(0, C_PAD)
        acc = tl.zeros((BLOCK, C_PAD), dtype=tl.float32)
        for k0 in tl.static_range(0, OKK, BK):
            ks = k0 + tl.arange(0, BK)
            o, kk = ks // KK, ks % KK
            ii = i[:, None] - (kk // KS - PAD)[None, :]
            jj = j[:, None] - (kk % KS - PAD)[None, :]
            ok = r_ok[:, None] & (ks < OKK)[None, :] & (ii >= 0) & (ii < H) & (jj >= 0) & (jj < W)
            a = tl.load(gz_ptr + ((m * B + b).to(tl.int64)[:, None] * O + o[None, :]) * HW + ii * W + jj,
                        mask=ok, other=0.0)                                         # (BLOCK, BK)
            wt = tl.load(w_ptr + m * (O * C * KK) + (o[:, None] * C + c[None, :]) * KK + kk[:, None],
                         mask=(ks < OKK)[:, None] & (c < C)[None, :], other=0.0)   # (BK, C_PAD)
            acc += tl.dot(a, wt, input_precision=PREC)
        out = ((m * B + b).to(tl.int64)[:, None] * C + c[None, :]) * HW + q[:, None]
        tl.store(gx_ptr + out, acc, mask=r_ok[:, None] & (c < C)[None, :])


def _pow2(n: int, least: int = 16) -> int:
    return max(least, 1 << (int(n) - 1).bit_length())


# launch settings (benchmarks/bench_cvar_step.py tries others): rows per forward/dgrad program, K chunk,
# rows per wgrad iteration and per wgrad program (its partial sums are added up afterwards)
# (measured on an H100 for the Table 1 LeNet, 65 models, batch 128: warps=2 best; blocks within 10 %)
TUNE = dict(fwd_block=128, bk=32, dgrad_block=64, dgrad_bk=32, wgrad_br=64, wgrad_rows=1024, warps=2)


class _ConvPool(torch.autograd.Function):
    """y = maxpool2(leaky(conv(x, W_m) + b_m)) for M models; see `conv_pool`."""

    @staticmethod
    def forward(ctx, x, w, b, idx, slope, precision):
        M, O, C, KS, _ = w.shape
        B = idx.shape[1] if idx is not None else x.shape[1]
        H, W = x.shape[-2:]
        y = torch.empty(M, B, O, H // 2, W // 2, device=w.device, dtype=torch.float32)
        code = torch.empty(y.shape, device=w.device, dtype=torch.int8)
        grid = (triton.cdiv(B * H * W, TUNE["fwd_block"]), M)
        _fwd_kernel[grid](x, idx if idx is not None else w, w, b, y, code, B, slope, C=C, H=H, W=W, O=O, KS=KS,
                          GATHER=idx is not None, O_PAD=_pow2(O), BK=TUNE["bk"], BLOCK=TUNE["fwd_block"],
                          PREC=precision, num_warps=TUNE["warps"])
        ctx.save_for_backward(x, w, idx, y, code)
        ctx.slope, ctx.precision = slope, precision
        return y

    @staticmethod
    def backward(ctx, gy):
        x, w, idx, y, code = ctx.saved_tensors
        M, O, C, KS, _ = w.shape
        B, H, W = y.shape[1], 2 * y.shape[3], 2 * y.shape[4]
        gz = torch.empty(M, B, O, H, W, device=w.device, dtype=torch.float32)
        N = gz.numel()
        _pool_grad_kernel[(triton.cdiv(N, 1024),)](gy.contiguous(), y, code, gz, N, ctx.slope, H=H, W=W, BLOCK=1024)
        CK, CKB, BR = C * KS * KS, min(64, _pow2(C * KS * KS)), TUNE["wgrad_br"]
        rows = B * H * W
        per = triton.cdiv(min(TUNE["wgrad_rows"], rows), BR) * BR
        splits = triton.cdiv(rows, per)
        gw = torch.empty(M, splits, O, CK, device=w.device, dtype=torch.float32)
        gb = torch.empty(M, splits, O, device=w.device, dtype=torch.float32)
        _wgrad_kernel[(splits, triton.cdiv(CK, CKB), M)](
            gz, x, idx if idx is not None else w, gw, gb, B, per, C=C, H=H, W=W, O=O, KS=KS,
            GATHER=idx is not None, O_PAD=_pow2(O), CKB=CKB, BR=BR, PREC=ctx.precision, num_warps=TUNE["warps"])
        gx = None
        if ctx.needs_input_grad[0]:
            gx = torch.empty(M, B, C, H, W, device=w.device, dtype=torch.float32)
            _dgrad_kernel[(triton.cdiv(rows, TUNE["dgrad_block"]), M)](
                gz, w, gx, B, C=C, H=H, W=W, O=O, KS=KS, C_PAD=_pow2(C), BK=TUNE["dgrad_bk"],
                BLOCK=TUNE["dgrad_block"], PREC=ctx.precision, num_warps=TUNE["warps"])
        return gx, gw.sum(1).view_as(w), gb.sum(1), None, None, None


def conv_pool(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, idx: torch.Tensor | None = None,
              slope: float = 0.01, precision: str = "tf32") -> torch.Tensor:
    """maxpool2x2(leaky_relu(conv2d(x_m, W_m, b_m, padding=k//2), slope)) for M stacked models.

    weight (M, O, C, k, k), bias (M, O); x (M, B, C, H, W), or with ``idx`` (M, B) the dataset
    (N, C, H, W) read at x[idx] (entries < 0 read sample 0). H and W even. Returns (M, B, O, H/2, W/2);
    differentiable in x (when not gathered), weight and bias. precision: "tf32" or "ieee"."""
    if triton is None:
        raise RuntimeError("flkit.fused needs triton (pip install triton; it comes with CUDA builds of torch)")
    if precision not in ("tf32", "ieee"):
        raise ValueError(f"precision must be 'tf32' or 'ieee', got {precision!r}")
    if weight.dim() != 5 or weight.shape[-1] != weight.shape[-2] or weight.shape[-1] % 2 == 0:
        raise ValueError(f"weight must be (M, O, C, k, k) with odd k, got {tuple(weight.shape)}")
    M, O, C = weight.shape[:3]
    if bias.shape != (M, O):
        raise ValueError(f"bias must be ({M}, {O}), got {tuple(bias.shape)}")
    want = 4 if idx is not None else 5
    if x.dim() != want or x.shape[-3] != C or x.shape[-1] % 2 or x.shape[-2] % 2:
        raise ValueError(f"x must be {'(N, C, H, W)' if idx is not None else '(M, B, C, H, W)'} with C={C} and "
                         f"even H, W, got {tuple(x.shape)}")
    if idx is None and x.shape[0] != M:
        raise ValueError(f"x holds {x.shape[0]} models' inputs, weight {M}")
    if idx is not None and (idx.dim() != 2 or idx.shape[0] != M):
        raise ValueError(f"idx must be ({M}, B), got {tuple(idx.shape)}")
    for name, t in (("x", x), ("weight", weight), ("bias", bias)):
        if t.dtype != torch.float32:
            raise ValueError(f"{name} must be float32, got {t.dtype}")
    return _ConvPool.apply(x.contiguous(), weight.contiguous(), bias.contiguous(),
                           None if idx is None else idx.contiguous(), float(slope), precision)


def forward(model: nn.Module, params, x: torch.Tensor, idx: torch.Tensor, precision: str = "tf32") -> torch.Tensor:
    """Logits (M, B, classes) of M stacked models on the minibatches x[idx] (idx (M, B)); same as
    ``engine.grouped_forward(model, params, x[idx])`` with the leading conv blocks fused."""
    blocks, tail = _split(model)
    if not supports_fused(model):
        raise ValueError("the model does not start with Conv2d -> LeakyReLU -> MaxPool2d(2) blocks followed by "
                         "Flatten and Linear/elementwise layers; use flkit.engine.grouped_forward")
    h = None
    for name, _, slope in blocks:
        w, b = params[name + ".weight"], params[name + ".bias"]
        h = conv_pool(x, w, b, idx, slope, precision) if h is None else conv_pool(h, w, b, None, slope, precision)
    return grouped_forward(tail, params, h)
