"""Local training of many models at once (clients of a round, independent runs), plus a sequential reference.

Parameters of M models live in one dict ``name -> Tensor`` whose leading axis indexes the model
(``stack(model, M, generator)``). The dict holds the model's parameters, its floating-point buffers
(BatchNorm running statistics) and any extra trainable tensors that are not part of the model, such
as Fed-CVaR's threshold ``t`` (shape (M,)). Server code averages or indexes these tensors directly.

Update rule of :func:`local_train` for model m at its local step s < steps[m], with minibatch
b = batches[m, s] (PyTorch's SGD/Adam semantics, so both paths give the same numbers)::

    g      = grad_w objective(model(w; x[b]), y[b], w)      # default: mean cross-entropy
           + prox_mu * (w - anchor)                          # FedProx: d/dw of mu/2 ||w - anchor||^2
           + weight_decay * w                                # L2, coupled (torch.optim style)
    SGD:   buf = momentum * buf + g  (buf = 0 at the start)  ;  w = w - lr * buf   (buf = g if momentum=0)
    Adam:  k = k + 1 ; m1 = b1 m1 + (1-b1) g ; m2 = b2 m2 + (1-b2) g^2
           w = w - lr / (1 - b1^k) * m1 / (sqrt(m2) / sqrt(1 - b2^k) + eps)

The prox and weight-decay terms apply to model parameters only; extras (``t``) get the plain
optimiser with their own step size. Steps with s >= steps[m] leave model m, its buffers and its
optimiser state untouched (the per-model Adam counter k only counts real steps).

Three implementations of the same rule (``vectorized=``):
  * ``"grouped"``: a hand-written forward for flat Sequential stacks of Conv2d/Linear/pooling/
    elementwise/PReLU/BatchNorm layers: the M models' convolutions run as one grouped convolution (models
    stacked along the channel axis, ``groups=M``), their Linear layers as one ``baddbmm``, their BatchNorms
    as one native BatchNorm over the M x C channels (so each model's batch and running statistics are its
    own); autograd of the summed per-model losses gives every model's gradient (the models do not interact).
  * ``"vmap"``: ``torch.func.vmap`` of ``functional_call`` over the stacked parameters (any model, incl.
    BatchNorm with per-model running statistics, PReLU, Dropout with ``randomness="different"``), and
    the same single autograd backward. (Not ``vmap(grad(loss))``: that form crashes on normalization
    layers under autocast, pytorch/pytorch#184890, and gave no speed-up over this one on CPU.)
  * ``False``: a plain loop over models with ``nn.Module`` copies and ``torch.optim`` (the reference).
``True`` picks "grouped" when the model supports it (:func:`supports_grouped` with ``buffers=True``) and
"vmap" otherwise.

Padded batches (index -1, a short last batch) and BatchNorm: the vectorized paths leave the padded slots
out of each model's batch statistics (on the steps that have any), so a step equals the reference's shorter
batch. Dropout: ``dropout_keep`` gives every path the same keep masks (:func:`dropout_masks` draws them
from one generator per model), else each path draws from torch's global RNG (see Randomness).

:class:`flkit.fastsgd.FastSGD` is a fourth implementation of the rule for plain SGD on grouped-family models
only, built for long chains of small steps (CUDA graphs, the Triton kernels of :mod:`flkit.fused`). The
minibatch indices ``batches`` and ``steps`` come from :mod:`flkit.batches` (:func:`flkit.batches.epoch_batches`,
:func:`flkit.batches.sample_batches`, :class:`flkit.batches.BatchStream`).

Randomness: without ``dropout_keep``, dropout masks use torch's global RNG in every path (seed it with
``torch.manual_seed`` for repeatable runs); the vectorized and sequential paths draw different masks.
"""
from __future__ import annotations

import copy
from contextlib import nullcontext
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from flkit.batches import _count
from flkit.grouped import _BN, Params, _drop, _masked_batch_norm, grouped_forward, supports_grouped

__all__ = [
    "stack", "stack_copies", "unstack", "to_module", "take", "put", "cross_entropy", "supports_grouped",
    "grouped_forward", "local_train", "evaluate", "per_class_accuracy", "dropout_masks",
]

Objective = Callable[[Tensor, Tensor, Params], Tensor]


# ----------------------------------------------------------------------------------- stacked params
def _state(model: nn.Module) -> Params:
    """Parameters and floating buffers of one model (BatchNorm's integer counter is not state here)."""
    out = {k: v.detach() for k, v in model.named_parameters()}
    out.update({k: v.detach() for k, v in model.named_buffers() if v.is_floating_point()})
    return out


def stack_copies(params_or_model: nn.Module | Params, M: int) -> Params:
    """M identical copies of one model's state (a module, or a dict of unstacked tensors)."""
    single = _state(params_or_model) if isinstance(params_or_model, nn.Module) else params_or_model
    return {k: v.detach().unsqueeze(0).repeat(M, *([1] * v.dim())) for k, v in single.items()}


def stack(model: nn.Module, M: int, generator: torch.Generator | None = None) -> Params:
    """Parameters of M models with a leading axis M, on the model's device.

    Without a generator: M copies of ``model``'s current parameters (FedAvg: all clients start from the
    global model). With one: M independent initialisations; for each copy a seed is drawn from
    ``generator`` and the model's init is re-run under it (``model.init_weights()`` for
    :class:`flkit.models.Net`, else every submodule's ``reset_parameters()``). The init runs on the CPU
    and leaves torch's global RNG untouched. ``model`` itself is not modified.
    """
    if generator is None:
        return stack_copies(model, M)
    seeds = torch.randint(0, 2**62, (M,), generator=generator, device=generator.device).tolist()
    device = next(iter(_state(model).values())).device
    work = copy.deepcopy(model).cpu()
    copies = []
    for seed in seeds:
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            if hasattr(work, "init_weights"):
                work.init_weights()
            else:
                for m in work.modules():
                    if hasattr(m, "reset_parameters"):
                        m.reset_parameters()
        copies.append({k: v.clone() for k, v in _state(work).items()})
    return {k: torch.stack([c[k] for c in copies]).to(device) for k in copies[0]}


def unstack(params: Params, m: int) -> Params:
    """The state of model ``m`` (views, no leading axis)."""
    return {k: v[m] for k, v in params.items()}


def take(tree, idx):
    """Index every tensor of a (nested) dict along its leading axis: clients' rows of a table."""
    if isinstance(tree, dict):
        return {k: take(v, idx) for k, v in tree.items()}
    return tree[idx]


def put(tree, idx, sub) -> None:
    """In place: ``tree[...][idx] = sub[...]`` for every tensor of a (nested) dict (e.g. Adam states)."""
    for k, v in sub.items():
        if isinstance(v, dict):
            put(tree[k], idx, v)
        else:
            tree[k][idx] = v


def _clone(tree):
    return {k: _clone(v) for k, v in tree.items()} if isinstance(tree, dict) else tree.detach().clone()


def _load(module: nn.Module, state: Params) -> nn.Module:
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if name in state:
                t.copy_(state[name])
    return module


def to_module(model: nn.Module, params: Params, m: int) -> nn.Module:
    """A copy of ``model`` holding model ``m``'s parameters and buffers."""
    first = next(iter(params.values()))
    return _load(copy.deepcopy(model).to(device=first.device, dtype=first.dtype), unstack(params, m))


# ---------------------------------------------------------------------------------------------- loss
def _sample_losses(logits: Tensor, y: Tensor) -> Tensor:
    """Per-sample loss: softmax cross-entropy, or the logistic loss when there is a single logit."""
    yc = y.clamp(min=0)
    if logits.shape[-1] == 1:
        return F.binary_cross_entropy_with_logits(logits[..., 0], yc.to(logits.dtype), reduction="none")
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), yc.reshape(-1).long(),
                           reduction="none").view(y.shape)


def _predict(logits: Tensor) -> Tensor:
    return (logits[..., 0] > 0).long() if logits.shape[-1] == 1 else logits.argmax(-1)


def cross_entropy(logits: Tensor, y: Tensor, p: Params | None = None) -> Tensor:
    """Mean loss over the batch (last axis of ``y``), ignoring labels < 0 (padding of a short last
    batch, see :func:`flkit.batches.epoch_batches`): equal to ``F.cross_entropy(logits, y)`` on the valid samples.
    One logit means binary labels and the logistic loss. The default ``objective``; call it from
    custom objectives (``L = cross_entropy(logits, y)``) to keep the padding semantics."""
    valid = (y >= 0).to(logits.dtype)
    return (_sample_losses(logits, y) * valid).sum(-1) / valid.sum(-1).clamp(min=1)


# ------------------------------------------------------------- per-model BatchNorm and dropout masks
class _KeepMask(nn.Module):
    """Stands in for an ``nn.Dropout`` in the sequential reference: applies ``self.keep`` (set per step)."""

    def __init__(self, p: float):
        super().__init__()
        self.p, self.keep = p, None

    def forward(self, h: Tensor) -> Tensor:
        return _drop(h, self.keep, self.p) if self.training else h


def _sub(tree: Params, name: str) -> Params:
    pre = name + "."
    return {k[len(pre):]: v for k, v in tree.items() if k.startswith(pre)}


def _walk_forward(model: nn.Sequential, p: Params, bufs: Params, xb: Tensor, valid: Tensor | None,
                  keep: dict[str, Tensor] | None) -> tuple[Tensor, Params]:
    """One model of a flat Sequential in training mode, layer by layer (vmapped over models by the caller):
    BatchNorm with statistics over the rows where ``valid`` (None: all rows), Dropout with the given keep
    masks (None: torch's RNG); every other layer through ``functional_call``. Returns the logits and the
    BatchNorm running statistics after the step."""
    h, new_bufs = xb, {}
    for name, layer in model.named_children():
        lp, lb = _sub(p, name), _sub(bufs, name)
        if isinstance(layer, _BN):
            if valid is not None:
                h, rm, rv = _masked_batch_norm(h, valid, lp.get("weight"), lp.get("bias"), lb.get("running_mean"),
                                               lb.get("running_var"), layer.momentum, layer.eps)
                if rm is not None:
                    new_bufs[name + ".running_mean"], new_bufs[name + ".running_var"] = rm, rv
            else:  # torch's own BatchNorm on clones of the running statistics (updated in place)
                lb = {k: v.clone() for k, v in lb.items()}
                for k, v in layer.named_buffers():
                    if not v.is_floating_point():
                        lb[k] = v.clone()
                h = functional_call(layer, (lp, lb), (h,))
                new_bufs.update({f"{name}.{k}": v for k, v in lb.items() if v.is_floating_point()})
        elif isinstance(layer, nn.Dropout) and keep is not None:
            h = _drop(h, keep[name], layer.p)
        else:
            h = functional_call(layer, (lp, lb), (h,)) if (lp or lb) else layer(h)
    return h, new_bufs


def _dropout_layers(model: nn.Module) -> list[tuple[str, nn.Dropout]]:
    """The Dropout layers of a model; keep masks need them as direct children of a flat Sequential."""
    drops = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.modules.dropout._DropoutNd)]
    kids = dict(model.named_children()) if isinstance(model, nn.Sequential) else {}
    bad = [n for n, m in drops if kids.get(n) is not m or type(m) is not nn.Dropout]
    if bad:
        raise ValueError(f"dropout masks need nn.Dropout layers as children of a flat nn.Sequential; {bad} are not")
    return drops


@torch.no_grad()
def _dropout_shapes(model: nn.Module, sample: Tensor) -> dict[str, tuple[int, ...]]:
    """The per-sample input shape of each Dropout layer, from one forward of ``sample`` (1, ...) in eval mode."""
    names = {m: n for n, m in _dropout_layers(model)}
    shapes, hooks = {}, []
    for m, n in names.items():
        hooks.append(m.register_forward_pre_hook(
            lambda mod, args, n=n: shapes.__setitem__(n, tuple(args[0].shape[1:]))))
    was = model.training
    model.eval()
    try:
        model(sample)
    finally:
        model.train(was)
        for hk in hooks:
            hk.remove()
    return shapes


def dropout_masks(model: nn.Module, sample: Tensor, batch_size: int, steps, generators,
                  device=None) -> dict[str, Tensor]:
    """Keep masks for the Dropout layers of a flat Sequential, for :func:`local_train`'s ``dropout_keep``:
    name -> bool (M, S, B, *shape), S = max(steps), True where a unit is kept.

    Model m draws ``torch.rand(steps[m], B, *shape)`` (float32) from ``generators[m]`` for each Dropout layer
    in order and keeps the units whose number is >= p, so its masks depend on its own generator and
    steps only (not on the other models of the call); rows past steps[m] are True (unused). ``steps``:
    host ints (a list or array, one per model); ``sample``: one input (1, ...) to find the activation shapes."""
    B = _count(batch_size, "batch_size")
    steps = [int(s) for s in (steps.tolist() if isinstance(steps, Tensor) else steps)]
    gens = list(generators)
    if len(gens) != len(steps):
        raise ValueError(f"one generator per model: {len(steps)} steps, {len(gens)} generators")
    layers = dict(_dropout_layers(model))
    shapes = _dropout_shapes(model, sample) if layers else {}
    S = max(steps, default=0)
    dev = torch.device(device) if device is not None else (gens[0].device if gens else sample.device)
    out = {n: torch.ones(len(steps), S, B, *shapes[n], dtype=torch.bool, device=dev) for n in layers}
    for m, (g, st) in enumerate(zip(gens, steps)):
        for n, layer in layers.items():
            if st:
                u = torch.rand(st, B, *shapes[n], generator=g, device=g.device, dtype=torch.float32)
                out[n][m, :st] = u >= layer.p
    return out


# ------------------------------------------------------------------------------------- local train
def _names(model: nn.Module, params: Params) -> tuple[list[str], list[str], list[str]]:
    pnames = [k for k, _ in model.named_parameters()]
    bnames = [k for k, v in model.named_buffers() if v.is_floating_point()]
    missing = [k for k in pnames + bnames if k not in params]
    if missing:
        raise ValueError(f"params lacks {missing[:3]}...; build it with flkit.engine.stack(model, M)")
    extras = [k for k in params if k not in pnames and k not in bnames]
    return pnames, bnames, extras


def _lr_table(lr, names: list[str], M: int, like: Tensor) -> dict[str, Tensor]:
    if not isinstance(lr, dict):
        lr = {"default": lr}
    out = {}
    for k in names:
        v = lr.get(k, lr.get("default"))
        if v is None:
            raise ValueError(f"no learning rate for {k!r}: give lr[{k!r}] or lr['default']")
        v = torch.as_tensor(v, dtype=like.dtype, device=like.device)
        if v.dim() == 0:
            v = v.expand(M)
        if v.shape != (M,):
            raise ValueError(f"lr for {k!r} must be a float or a Tensor of shape ({M},), got {tuple(v.shape)}")
        out[k] = v
    return out


def _bcast(v: Tensor, like: Tensor) -> Tensor:
    return v.view(-1, *([1] * (like.dim() - 1)))


def _autocast(device: torch.device, dtype):
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def _gather(x: Tensor, y: Tensor, idx: Tensor, padded: bool = True) -> tuple[Tensor, Tensor]:
    """Minibatch x[idx], y[idx]; indices < 0 are padding: any sample, label -100 (ignored)."""
    if not padded:
        return x[idx], y[idx]
    xb, yb = x[idx.clamp(min=0)], y[idx.clamp(min=0)]
    return xb, torch.where(idx >= 0, yb, torch.full_like(yb, -100))


def _init_opt_state(opt: str, momentum: float, P: Params, trainable: list[str], M: int) -> dict:
    if opt == "adam":
        like = P[trainable[0]]
        return {"step": torch.zeros(M, dtype=like.dtype, device=like.device),
                "exp_avg": {k: torch.zeros_like(P[k]) for k in trainable},
                "exp_avg_sq": {k: torch.zeros_like(P[k]) for k in trainable}}
    if momentum:
        return {"momentum_buffer": {k: torch.zeros_like(P[k]) for k in trainable}}
    return {}


def local_train(model: nn.Module, params: Params, x: Tensor, y: Tensor, batches: Tensor, *, lr,
                momentum: float = 0.0, weight_decay: float = 0.0, prox_mu: float = 0.0, anchor: Params | None = None,
                objective: Objective | None = None, steps: Tensor | None = None, opt: str = "sgd",
                opt_state: dict | None = None, vectorized: bool | str = True, betas: tuple[float, float] = (0.9, 0.999),
                eps: float = 1e-8, autocast_dtype: torch.dtype | None = None,
                dropout_keep: dict[str, Tensor] | None = None, skip_done: bool = False) -> tuple[Params, dict]:
    """Train M models on their own minibatches (update rule in the module docstring).

    Args:
        model: the architecture (its own parameters are not used or changed).
        params: dict name -> (M, ...) from :func:`stack`; extra entries (e.g. ``t`` of shape (M,)) are
            trained too and passed to ``objective`` but not to the model.
        x, y: the data, on the same device as params (a whole training set or the clients' concatenation).
        batches: LongTensor (M, S, B) of indices into x/y; -1 marks padding (label ignored by
            :func:`cross_entropy`; in the reference loop the batch is just shorter).
        lr: float, Tensor (M,), or dict name -> float | Tensor (M,) with an optional "default" entry.
        steps: LongTensor (M,), valid steps per model (default: all S).
        opt: "sgd" (with ``momentum``, ``weight_decay``) or "adam" (``betas``, ``eps``, ``weight_decay``).
        opt_state: the state returned by an earlier call (same layout: per model along axis 0), to carry
            momentum buffers / Adam moments across rounds; None starts fresh (zeros, step 0).
        prox_mu, anchor: FedProx term mu/2 ||w - anchor||^2; anchor defaults to ``params``.
        objective: ``objective(logits, y, p) -> scalar`` for one model (p: its trainable dict incl.
            extras); must be vmap-compatible (no ``.item()``). Default :func:`cross_entropy`.
            Per-model constants (e.g. a CVaR level per run) can ride along as extras with lr 0.
        vectorized: True (auto), "grouped", "vmap", or False (sequential reference loop).
        autocast_dtype: e.g. torch.bfloat16 to run the forward/backward under autocast (params stay fp32).
        dropout_keep: keep masks of the model's Dropout layers, name -> bool (M, S, B, *activation shape)
            (:func:`dropout_masks` draws them from one generator per model); every path applies them
            (h * keep / (1 - p)), so all paths give the same numbers. None: torch's global RNG, which
            the paths draw from differently.
        skip_done: vectorized paths: a step computes only the models that still have steps (the models are
            ordered by their steps for the call, so those are a leading block of the stack, and put back at the
            end), where by default every step computes all M and masks the finished ones. Saves the finished
            models' arithmetic (on a CPU, where it costs time); same numbers up to rounding.

    BatchNorm (grouped and vmap paths): each model's batch statistics and running statistics are its own; padded slots
    (index -1) are left out of the batch statistics, so a padded short batch equals the shorter batch of
    the sequential reference (the vmap path then walks the flat Sequential layer by layer).

    Returns:
        (params, opt_state): new dict (the input is not modified) and the optimiser state
        (``{}`` for plain SGD; ``{"momentum_buffer": {...}}``; Adam: ``{"step": (M,), "exp_avg": {...},
        "exp_avg_sq": {...}}``).
    """
    pnames, bnames, extras = _names(model, params)
    trainable = pnames + extras
    if batches.dim() != 3 or batches.dtype != torch.long:
        raise ValueError(f"batches must be a LongTensor (M, S, B), got {batches.dtype} {tuple(batches.shape)}")
    M, S, _ = batches.shape
    bad = [k for k, v in params.items() if v.shape[:1] != (M,)]
    if bad:
        raise ValueError(f"params {bad[:3]} do not have a leading axis of size M={M} (from batches)")
    if opt not in ("sgd", "adam"):
        raise ValueError(f"opt must be 'sgd' or 'adam', got {opt!r}")
    if vectorized not in (True, False, "grouped", "vmap"):
        raise ValueError(f"vectorized must be True, False, 'grouped' or 'vmap', got {vectorized!r}")
    steps_list = [S] * M if steps is None else [int(s) for s in steps.tolist()]
    if len(steps_list) != M or min(steps_list, default=0) < 0 or max(steps_list, default=0) > S:
        raise ValueError(f"steps must be a LongTensor ({M},) with values in [0, {S}]")
    dev = params[trainable[0]].device
    if x.device != dev or y.device != dev:
        raise ValueError(f"x and y must be on the parameters' device {dev}, got {x.device} and {y.device}")
    objective = objective or cross_entropy
    batches = batches.to(x.device)
    P = {k: v.detach().clone() for k, v in params.items()}
    lrs = _lr_table(lr, trainable, M, P[trainable[0]])
    if prox_mu:
        anchor = {k: (params if anchor is None else anchor)[k].detach() for k in pnames}
    state = _init_opt_state(opt, momentum, P, trainable, M) if opt_state is None else _clone(opt_state)
    hp = dict(opt=opt, momentum=momentum, weight_decay=weight_decay, prox_mu=prox_mu, betas=betas, eps=eps)
    if dropout_keep is not None:
        names = {n for n, _ in _dropout_layers(model)}
        if set(dropout_keep) != names:
            raise ValueError(f"dropout_keep must have one mask per Dropout layer {sorted(names)}, "
                             f"got {sorted(dropout_keep)}")
        bad = [n for n, k in dropout_keep.items() if k.dtype != torch.bool or k.shape[:3] != batches.shape]
        if bad:
            raise ValueError(f"dropout_keep[{bad[0]!r}] must be bool (M, S, B, ...) = {tuple(batches.shape)} + "
                             f"shape, got {dropout_keep[bad[0]].dtype} {tuple(dropout_keep[bad[0]].shape)}")
        dropout_keep = {n: k.to(x.device) for n, k in dropout_keep.items()}
    was_training = model.training
    model.train()
    try:
        if vectorized is False:
            _train_sequential(model, P, state, x, y, batches, steps_list, lrs, anchor, objective, pnames, bnames,
                              extras, hp, autocast_dtype, dropout_keep)
        elif skip_done and steps_list != sorted(steps_list, reverse=True):
            order = sorted(range(M), key=lambda m: -steps_list[m])        # stable: ties keep their order
            o = torch.tensor(order, device=dev)
            back = torch.argsort(o)
            P, state = take(P, o), take(state, o)
            _train_vectorized(model, P, state, x, y, batches[o], [steps_list[m] for m in order], take(lrs, o),
                              None if anchor is None else take(anchor, o), objective, pnames, bnames, extras, hp,
                              autocast_dtype, vectorized, None if dropout_keep is None else take(dropout_keep, o),
                              skip_done=True)
            P, state = take(P, back), take(state, back)
        else:
            _train_vectorized(model, P, state, x, y, batches, steps_list, lrs, anchor, objective, pnames, bnames,
                              extras, hp, autocast_dtype, vectorized, dropout_keep, skip_done=skip_done)
    finally:
        model.train(was_training)
    return P, state


def _train_vectorized(model, P, state, x, y, batches, steps_list, lrs, anchor, objective, pnames, bnames, extras,
                      hp, autocast_dtype, vectorized, keep=None, skip_done=False):
    """Each step: one batched forward of all M models, the M losses summed, one autograd backward (the
    models share no parameters, so d(sum)/dw_m = d loss_m/dw_m), then the optimiser on the stacks. With
    ``skip_done`` the models come ordered by their steps (descending) and a step computes the leading block
    of those that still have steps (views of the stacks, updated in place)."""
    trainable = pnames + extras
    grouped_ok = supports_grouped(model, buffers=True)
    path = vectorized if vectorized in ("grouped", "vmap") else ("grouped" if grouped_ok else "vmap")
    if path == "grouped" and not grouped_ok:
        raise ValueError("vectorized='grouped' needs a flat Sequential of Conv2d/Linear/pool/elementwise/PReLU/"
                         "BatchNorm layers; use vectorized='vmap'")
    bns = [m for m in model.modules() if isinstance(m, _BN)]
    if any(m.momentum is None for m in bns):
        raise ValueError("BatchNorm with momentum=None (cumulative average) is not supported by the vectorized path")
    int_bufs = {k: v for k, v in model.named_buffers() if not v.is_floating_point()}
    # steps with a padded slot (one host read for the call): there BatchNorm leaves the padded slots out
    short = (batches < 0).any(2).any(0).tolist() if batches.shape[1] else []
    padded = any(short)
    # vmap: layer by layer where BatchNorm must leave padded slots out or dropout masks are given
    walk = path == "vmap" and ((padded and bool(bns)) or keep is not None)
    if walk and (not isinstance(model, nn.Sequential)
                 or any(sum(1 for _ in layer.children()) for layer in model.children())):
        raise ValueError("BatchNorm with padded batches, or dropout masks, need a flat nn.Sequential in the vmap "
                         "path (use last='wrap' batches or vectorized=False)")

    def forward_one(p, bufs, xb):  # one model; buffers are cloned so BatchNorm can update them in place
        bufs = {k: v.clone() for k, v in bufs.items()} | {k: v.clone() for k, v in int_bufs.items()}
        return functional_call(model, (p, bufs), (xb,)), {k: bufs[k] for k in bnames}

    forward_all = vmap(forward_one, randomness="different")
    kdim = None if keep is None else 0
    walk_all = vmap(lambda p, b, xb, kp: _walk_forward(model, p, b, xb, None, kp), in_dims=(0, 0, 0, kdim),
                    randomness="different")
    walk_masked = vmap(lambda p, b, xb, v, kp: _walk_forward(model, p, b, xb, v, kp), in_dims=(0, 0, 0, 0, kdim),
                       randomness="different")
    per_model_objective = cross_entropy if objective is cross_entropy else vmap(objective, randomness="different")
    steps_t = torch.tensor(steps_list, device=batches.device)
    M_all, P_all, state_all, lrs_all, anchor_all = len(steps_list), P, state, lrs, anchor
    for s in range(max(steps_list, default=0)):
        m = sum(1 for st in steps_list if st > s) if skip_done else M_all     # the leading block still training
        if m < M_all:
            cut = slice(0, m)
            P, state, lrs = take(P_all, cut), take(state_all, cut), take(lrs_all, cut)
            anchor = None if anchor_all is None else take(anchor_all, cut)
        idx = batches[:m, s]
        xb, yb = _gather(x, y, idx, padded)
        kp = None if keep is None else {n: k[:m, s] for n, k in keep.items()}
        valid = (idx >= 0) if short[s] and bns else None
        leaves = {k: P[k].detach().requires_grad_(True) for k in trainable}
        theta, bufs = {k: leaves[k] for k in pnames}, {k: P[k] for k in bnames}
        with _autocast(xb.device, autocast_dtype):
            if path == "grouped":
                new_bufs = {}
                logits = grouped_forward(model, theta, xb, keep=kp, buffers=bufs, valid=valid, new_buffers=new_bufs)
            elif walk and valid is not None:
                logits, new_bufs = walk_masked(theta, bufs, xb, valid, kp)
            elif walk:
                logits, new_bufs = walk_all(theta, bufs, xb, kp)
            else:
                logits, new_bufs = forward_all(theta, bufs, xb)
        losses = per_model_objective(logits.float() if autocast_dtype else logits, yb, leaves)  # (M,)
        grads = torch.autograd.grad(losses.sum(), [leaves[k] for k in trainable], allow_unused=True)
        g = {k: torch.zeros_like(P[k]) if gk is None else gk for k, gk in zip(trainable, grads)}
        active = None if all(st > s for st in steps_list[:m]) else (steps_t[:m] > s)
        _update(P, g, {k: v.detach() for k, v in new_bufs.items()}, state, lrs, active, pnames, extras, anchor, **hp)


def _masked(dst: Tensor, new: Tensor, active: Tensor | None) -> Tensor:
    """dst <- new for the active models (all if active is None); returns dst."""
    return dst.copy_(new if active is None else torch.where(_bcast(active, new), new, dst))


@torch.no_grad()
def _update(P, g, new_bufs, state, lrs, active, pnames, extras, anchor, *, opt, momentum, weight_decay, prox_mu,
            betas, eps):
    """One optimiser step on every model (the rule of the module docstring), skipping inactive models."""
    for k, v in new_bufs.items():
        _masked(P[k], v, active)
    if opt == "adam":
        step = state["step"] + (1 if active is None else active.to(state["step"].dtype))
        bc1, bc2 = 1 - betas[0] ** step.clamp(min=1), 1 - betas[1] ** step.clamp(min=1)
    for k in pnames + extras:
        p, d = P[k], g[k]
        if prox_mu and k in anchor:
            d = d + prox_mu * (p - anchor[k])
        if weight_decay and k not in extras:
            d = d + weight_decay * p
        if opt == "sgd":
            if momentum:
                buf = state["momentum_buffer"][k]
                d = buf.mul_(momentum).add_(d) if active is None else _masked(buf, buf * momentum + d, active)
            if active is None:
                p.addcmul_(_bcast(lrs[k], p), d, value=-1)
            else:
                _masked(p, p - _bcast(lrs[k], p) * d, active)
        else:
            m1, m2 = state["exp_avg"][k], state["exp_avg_sq"][k]
            n1, n2 = torch.lerp(m1, d, 1 - betas[0]), m2 * betas[1] + (1 - betas[1]) * d * d
            denom = (n2.sqrt() / _bcast(bc2.sqrt(), p)) + eps
            _masked(p, p - _bcast(lrs[k] / bc1, p) * n1 / denom, active)
            _masked(m1, n1, active)
            _masked(m2, n2, active)
    if opt == "adam":
        state["step"].copy_(step)


def _train_sequential(model, P, state, x, y, batches, steps_list, lrs, anchor, objective, pnames, bnames, extras,
                      hp, autocast_dtype, keep=None):
    """The reference: one nn.Module copy and one torch.optim optimiser per model, trained in turn."""
    first = P[pnames[0]]
    lrs = {k: v.tolist() for k, v in lrs.items()}
    padded = bool((batches < 0).any())
    for m, n_steps in enumerate(steps_list):
        net = _load(copy.deepcopy(model).to(device=first.device, dtype=first.dtype), unstack(P, m)).train()
        masks = {}
        if keep is not None:   # the Dropout layers apply the given masks
            for n in keep:
                masks[n] = net._modules[n] = _KeepMask(net._modules[n].p)
        named = dict(net.named_parameters()) | {k: P[k][m].clone().requires_grad_(True) for k in extras}
        groups = [{"params": [t], "lr": float(lrs[k][m]), "weight_decay": 0.0 if k in extras else hp["weight_decay"]}
                  for k, t in named.items()]
        if hp["opt"] == "sgd":
            optim = torch.optim.SGD(groups, lr=0.0, momentum=hp["momentum"], foreach=False)
            if hp["momentum"] and state:
                for k, t in named.items():
                    optim.state[t]["momentum_buffer"] = state["momentum_buffer"][k][m].clone()
        else:
            optim = torch.optim.Adam(groups, lr=0.0, betas=hp["betas"], eps=hp["eps"], foreach=False)
            if float(state["step"][m]) > 0:
                for k, t in named.items():
                    optim.state[t] = {"step": torch.tensor(float(state["step"][m])),
                                      "exp_avg": state["exp_avg"][k][m].clone(),
                                      "exp_avg_sq": state["exp_avg_sq"][k][m].clone()}
        for s in range(n_steps):
            idx = batches[m, s]
            if keep is not None:
                for n, mod in masks.items():
                    mod.keep = keep[n][m, s][idx >= 0] if padded else keep[n][m, s]
            idx = idx[idx >= 0] if padded else idx
            with _autocast(first.device, autocast_dtype):
                logits = net(x[idx])
            loss = objective(logits.float() if autocast_dtype else logits, y[idx], named)
            if hp["prox_mu"]:
                loss = loss + hp["prox_mu"] / 2 * sum(((named[k] - anchor[k][m]) ** 2).sum() for k in pnames)
            optim.zero_grad()
            loss.backward()
            for t in named.values():  # an unused extra gets a zero gradient (the vectorized paths do the same)
                if t.grad is None:
                    t.grad = torch.zeros_like(t)
            optim.step()
        with torch.no_grad():
            for k, t in list(named.items()) + [(k, v) for k, v in net.named_buffers() if k in bnames]:
                P[k][m] = t.detach()
            for k, t in named.items():
                st = optim.state.get(t, {})
                if hp["opt"] == "sgd" and hp["momentum"] and st.get("momentum_buffer") is not None:
                    state["momentum_buffer"][k][m] = st["momentum_buffer"]
                elif hp["opt"] == "adam" and st:
                    state["exp_avg"][k][m], state["exp_avg_sq"][k][m] = st["exp_avg"], st["exp_avg_sq"]
                    state["step"][m] = float(st["step"])


# ---------------------------------------------------------------------------------------- evaluate
def _logit_chunks(model, params, x, batch_size, models_per_chunk, vectorized, autocast_dtype):
    """Yield (model slice, data slice, logits (Mc, b, C)) over chunks of models and of the data."""
    pnames, bnames, _ = _names(model, params)
    M = params[pnames[0]].shape[0]
    batch_size = _count(batch_size, "batch_size")
    mc = max(1, (65536 if x.is_cuda else 8192) // batch_size) if models_per_chunk is None \
        else _count(models_per_chunk, "models_per_chunk")
    grouped = vectorized in (True, "grouped") and supports_grouped(model)
    if vectorized is False:  # reference: one functional_call per model
        def fwd(p, xb):
            return torch.stack([functional_call(model, unstack(p, i), (xb,)) for i in range(len(p[pnames[0]]))])
    else:
        fwd = vmap(lambda p, xb: functional_call(model, p, (xb,)), in_dims=(0, None))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), _autocast(x.device, autocast_dtype):
            for m0 in range(0, M, mc):
                sub = {k: params[k][m0:m0 + mc] for k in pnames + bnames}
                for i0 in range(0, x.shape[0], batch_size):
                    xb = x[i0:i0 + batch_size]
                    logits = grouped_forward(model, sub, xb, shared=True) if grouped else fwd(sub, xb)
                    yield slice(m0, m0 + mc), slice(i0, i0 + batch_size), logits.float()
    finally:
        model.train(was_training)


def evaluate(model: nn.Module, params: Params, x: Tensor, y: Tensor, batch_size: int = 1024, *,
             models_per_chunk: int | None = None, vectorized: bool | str = True,
             autocast_dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
    """Mean loss (cross-entropy, or logistic loss for one logit) and accuracy of each of the M models on
    (x, y), in eval mode (BatchNorm running statistics, no dropout), without gradients.

    Data go in chunks of ``batch_size``, models in chunks of ``models_per_chunk`` (default: 65536 //
    batch_size on CUDA, 8192 // batch_size on CPU) to bound memory. Returns two float tensors (M,).
    """
    M = next(iter(params.values())).shape[0]
    loss, correct = torch.zeros(M, device=x.device), torch.zeros(M, device=x.device)
    for ms, ds, logits in _logit_chunks(model, params, x, batch_size, models_per_chunk, vectorized, autocast_dtype):
        yb = y[ds].expand(logits.shape[0], -1)
        loss[ms] += _sample_losses(logits, yb).sum(1)
        correct[ms] += (_predict(logits) == yb).sum(1)
    return loss / len(y), correct / len(y)


def per_class_accuracy(model: nn.Module, params: Params, x: Tensor, y: Tensor, num_classes: int,
                       batch_size: int = 1024, *, models_per_chunk: int | None = None, vectorized: bool | str = True,
                       autocast_dtype: torch.dtype | None = None) -> Tensor:
    """(M, num_classes) accuracy of each model on each class of (x, y); NaN for classes absent from y."""
    M = next(iter(params.values())).shape[0]
    correct = torch.zeros(M, num_classes, device=x.device)
    for ms, ds, logits in _logit_chunks(model, params, x, batch_size, models_per_chunk, vectorized, autocast_dtype):
        onehot = F.one_hot(y[ds], num_classes).float()
        correct[ms] += (_predict(logits) == y[ds]).float() @ onehot
    counts = torch.bincount(y, minlength=num_classes).float()
    return correct / counts  # 0/0 -> NaN for absent classes
