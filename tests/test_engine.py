"""Engine: the vectorized paths must reproduce the sequential nn.Module + torch.optim reference.

All parity tests run on the CPU in float64 with tiny data, and assert a relative difference < 1e-5
for every parameter, buffer and optimiser-state tensor.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from flkit import engine as E
from flkit import models
from flkit.batches import BatchStream, epoch_batches, sample_batches
from flkit.fastsgd import FastSGD

SHAPES = {"cvar_mlp": (1, 28, 28), "cvar_lenet": (1, 28, 28), "hics_fmnist": (1, 28, 28),
          "fedau_cifar10": (3, 32, 32), "hics_cifar10": (3, 32, 32), "cvar_2d": (2,)}
SIZES = [10, 14, 7]  # three clients of unequal size: unequal numbers of steps (masking)


def rel_diff(a: dict, b: dict) -> float:
    out = 0.0
    for k in b:
        if isinstance(b[k], dict):
            out = max(out, rel_diff(a[k], b[k]))
        else:
            out = max(out, float((a[k] - b[k]).norm() / b[k].norm().clamp(min=1e-12)))
    return out


def setup(name, n_classes=10, seed=0):
    torch.manual_seed(seed)
    net = models.build(name).double()
    x = torch.randn(sum(SIZES), *SHAPES[name], dtype=torch.float64)
    y = torch.randint(0, n_classes, (sum(SIZES),))
    params = E.stack(net, len(SIZES), torch.Generator().manual_seed(seed + 1))
    batches, steps = epoch_batches(SIZES, 4, 1, torch.Generator().manual_seed(seed + 2))
    return net, params, x, y, batches, steps


def paths(net):
    return ["vmap", "grouped"] if E.supports_grouped(net, buffers=True) else ["vmap"]


def check_parity(net, params, x, y, batches, **kw):
    ref = E.local_train(net, params, x, y, batches, vectorized=False, **kw)
    for path in paths(net):
        out = E.local_train(net, params, x, y, batches, vectorized=path, **kw)
        assert rel_diff(out[0], ref[0]) < 1e-5, path
        assert rel_diff(out[1], ref[1]) < 1e-5, path
    assert rel_diff(ref[0], params) > 1e-4  # training did move the parameters
    return ref


CASES = {
    "sgd": dict(lr=0.05),
    "sgd_momentum_wd": dict(lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adam": dict(lr=1e-3, opt="adam", weight_decay=1e-4),
    "fedprox": dict(lr=0.05, prox_mu=0.5),
}


@pytest.mark.parametrize("name", ["cvar_mlp", "cvar_lenet"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_vectorized_matches_sequential(name, case):
    net, params, x, y, batches, steps = setup(name)
    check_parity(net, params, x, y, batches, steps=steps, **CASES[case])


def test_batchnorm_model_with_momentum_and_prox_in_vmap():
    net, params, x, y, batches, steps = setup("hics_fmnist")
    ref = check_parity(net, params, x, y, batches, steps=steps, lr=0.05, momentum=0.9, weight_decay=5e-4,
                       prox_mu=0.5)
    assert rel_diff({"rm": ref[0]["2.running_mean"]}, {"rm": params["2.running_mean"]}) > 0  # stats updated


def test_grouped_path_on_fedau_cnn():
    net, params, x, y, batches, steps = setup("fedau_cifar10")
    assert E.supports_grouped(net)
    check_parity(net, params, x, y, batches, steps=steps, lr=0.05)


def test_adam_state_carried_across_two_calls():
    net, params, x, y, batches, steps = setup("cvar_mlp")
    b2, s2 = epoch_batches(SIZES, 4, 1, torch.Generator().manual_seed(9))
    kw = dict(lr=1e-3, opt="adam")
    ref = E.local_train(net, params, x, y, batches, steps=steps, vectorized=False, **kw)
    ref = E.local_train(net, ref[0], x, y, b2, steps=s2, opt_state=ref[1], vectorized=False, **kw)
    out = E.local_train(net, params, x, y, batches, steps=steps, **kw)
    out = E.local_train(net, out[0], x, y, b2, steps=s2, opt_state=out[1], **kw)
    assert rel_diff(out[0], ref[0]) < 1e-5 and rel_diff(out[1], ref[1]) < 1e-5
    assert out[1]["step"].tolist() == (steps + s2).tolist()  # masked steps do not count


def test_masked_steps_leave_models_untouched():
    net, params, x, y, batches, _ = setup("cvar_mlp")
    steps = torch.tensor([0, 2, 3])
    for path in ["vmap", "grouped", False]:
        out, state = E.local_train(net, params, x, y, batches, lr=0.1, momentum=0.9, steps=steps, vectorized=path)
        assert all(torch.equal(out[k][0], params[k][0]) for k in params)
        assert all(torch.count_nonzero(v[0]) == 0 for v in state["momentum_buffer"].values())
    check_parity(net, params, x, y, batches, steps=steps, lr=0.1, momentum=0.9)


def cvar_objective(gamma=0.3, alpha=0.3):
    """(1 - g)(t + relu(L - t) / a) + g L with L the batch-mean loss (Fed-CVaR-Avg's local objective)."""
    def objective(logits, y, p):
        L = E.cross_entropy(logits, y)
        return (1 - gamma) * (p["t"] + F.relu(L - p["t"]) / alpha) + gamma * L
    return objective


@pytest.mark.parametrize("name", ["cvar_mlp", "cvar_lenet"])
def test_custom_objective_with_extra_scalar_and_its_own_lr(name):
    net, params, x, y, batches, steps = setup(name)
    params["t"] = torch.tensor([0.0, 1.0, 5.0], dtype=torch.float64)  # t > L for the last model: relu inactive
    ref = check_parity(net, params, x, y, batches, steps=steps, objective=cvar_objective(),
                       lr={"default": 0.05, "t": torch.tensor([0.01, 0.02, 0.03], dtype=torch.float64)})
    assert (ref[0]["t"] != params["t"]).all()


def test_padded_last_batch_equals_a_short_batch():
    net, params, x, y, _, _ = setup("cvar_mlp")
    batches, steps = epoch_batches(SIZES, 4, 2, torch.Generator().manual_seed(5), last="pad")
    assert (batches == -1).any()
    params["t"] = torch.tensor([0.0, 1.0, 5.0], dtype=torch.float64)
    # the reference drops the -1 slots (a genuinely shorter batch); vectorized paths mask their labels
    check_parity(net, params, x, y, batches, steps=steps, lr=0.05, objective=cvar_objective())


def test_per_model_learning_rates_and_lr_validation():
    net, params, x, y, batches, steps = setup("cvar_mlp")
    lr = torch.tensor([0.0, 0.05, 0.1], dtype=torch.float64)
    ref = check_parity(net, params, x, y, batches, steps=steps, lr=lr)
    assert all(torch.equal(ref[0][k][0], params[k][0]) for k in params)  # lr 0: unchanged
    with pytest.raises(ValueError, match="no learning rate"):
        E.local_train(net, dict(params, t=torch.zeros(3, dtype=torch.float64)), x, y, batches, lr={"t": 0.1})
    with pytest.raises(ValueError, match="shape"):
        E.local_train(net, params, x, y, batches, lr=torch.ones(2))


# ------------------------------------------------------------------------------------------ FastSGD
def small_cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Conv2d(3, 4, 3), torch.nn.Tanh(), torch.nn.Flatten(),
                               torch.nn.Linear(16, 6), torch.nn.ReLU(), torch.nn.Linear(6, 5)).double()


def fast_setup(seed=0):
    g = torch.Generator().manual_seed(seed)
    net = small_cnn()
    x = torch.randn(sum(SIZES), 1, 8, 8, generator=g, dtype=torch.float64)
    y = torch.randint(0, 5, (sum(SIZES),), generator=g)
    params = E.stack(net, len(SIZES), torch.Generator().manual_seed(seed + 1))
    gens = [torch.Generator().manual_seed(seed + 10 + m) for m in range(len(SIZES))]
    batches, steps = epoch_batches(SIZES, 4, 2, generators=gens, last="pad")  # padded last batches
    return net, params, x, y, batches, steps


@pytest.mark.parametrize("lr", ["float", "per_model", "per_tensor"])
def test_fast_sgd_equals_local_train_grouped(lr):
    """FastSGD with the default cross-entropy == local_train(vectorized="grouped") for plain SGD,
    masked steps (unequal clients, one frozen) and padded slots included, in float64 to 1e-10."""
    net, params, x, y, batches, steps = fast_setup()
    steps = steps.clone()
    steps[2] = 3  # stops mid-epoch
    lr = {"float": 0.1, "per_model": torch.tensor([0.1, 0.0, 0.05], dtype=torch.float64),
          "per_tensor": {"default": 0.1, "6.weight": torch.tensor([0.02, 0.2, 0.0], dtype=torch.float64),
                         "0.bias": 0.0}}[lr]
    assert (batches == -1).any() and len(set(steps.tolist())) == 3
    ref, _ = E.local_train(net, params, x, y, batches, lr=lr, steps=steps, vectorized="grouped")
    fast = FastSGD(net, params, x, y, 4, lr=lr)
    out = fast.train(batches, steps)
    assert out is fast.P and fast.backend == "grouped" and fast.graph is None
    assert rel_diff(out, ref) < 1e-10
    assert rel_diff(ref, params) > 1e-3  # training did move the parameters
    moved = {k for k in params if not torch.equal(out[k], params[k])}
    assert moved == set(params) - ({"0.bias"} if isinstance(lr, dict) else set())
    if isinstance(lr, dict):  # lr 0 for a whole tensor: a constant; for one model: that model's rows stay
        assert torch.equal(out["0.bias"], params["0.bias"]) and "0.bias" not in fast.trained
        assert torch.equal(out["6.weight"][2], params["6.weight"][2])
    if isinstance(lr, Tensor):
        assert all(torch.equal(out[k][1], params[k][1]) for k in params)


def test_fast_sgd_batched_objective_with_extra_and_constant():
    """A batched objective with a trained extra (t, its own lr) and per-model constants (lr 0) ==
    local_train with the same objective (vmapped per model), in float64 to 1e-10."""
    net, params, x, y, batches, steps = fast_setup(1)
    params |= {"t": torch.tensor([0.0, 1.0, 5.0], dtype=torch.float64),
               "alpha": torch.tensor([0.3, 0.5, 0.2], dtype=torch.float64)}

    def objective(logits, y, p):  # batched: (M, B, C) -> (M,); and per model: (B, C) -> ()
        L = E.cross_entropy(logits, y)
        return 0.7 * (p["t"] + F.relu(L - p["t"]) / p["alpha"]) + 0.3 * L

    lr = {"default": 0.05, "t": torch.tensor([0.01, 0.02, 0.03], dtype=torch.float64), "alpha": 0.0}
    ref, _ = E.local_train(net, params, x, y, batches, lr=lr, steps=steps, objective=objective, vectorized="vmap")
    fast = FastSGD(net, params, x, y, 4, lr=lr, objective=objective)
    assert fast.trained[-1] == "t" and "alpha" not in fast.trained
    out = fast.train(batches, steps)
    assert rel_diff(out, ref) < 1e-10 and (out["t"] != params["t"]).all()
    assert torch.equal(out["alpha"], params["alpha"])


def test_fast_sgd_input_validation():
    net, params, x, y, batches, steps = fast_setup()
    for kw in (dict(opt="adam"), dict(momentum=0.9), dict(weight_decay=1e-4), dict(prox_mu=0.1)):
        with pytest.raises(ValueError, match="plain SGD only"):
            FastSGD(net, params, x, y, 4, lr=0.1, **kw)
    with pytest.raises(ValueError, match="grouped family"):
        bn, bp, *_ = setup("hics_fmnist")
        FastSGD(bn, bp, x, y, 4, lr=0.1)
    with pytest.raises(ValueError, match="backend must be"):
        FastSGD(net, params, x, y, 4, lr=0.1, backend="cudnn")
    with pytest.raises(ValueError, match="nothing to train"):
        FastSGD(net, params, x, y, 4, lr=0.0)
    with pytest.raises(ValueError, match="no learning rate"):
        FastSGD(net, params, x, y, 4, lr={"0.weight": 0.1})
    with pytest.raises(ValueError, match="device"):
        FastSGD(net, params, x.to("meta"), y, 4, lr=0.1)
    fast = FastSGD(net, params, x, y, 4, lr=0.1, objective=lambda logits, y, p: E.cross_entropy(logits, y).sum())
    with pytest.raises(ValueError, match="one loss per model"):
        fast.train(batches, steps)
    with pytest.raises(ValueError, match="batches must be"):
        FastSGD(net, params, x, y, 4, lr=0.1).train(batches[:, :, :3], steps)


def test_dropout_model_trains_with_independent_masks():
    net, _, x, y, batches, _ = setup("hics_cifar10")
    params = E.stack(net, 3)  # identical copies, identical batches: only dropout can separate them
    same = batches[:1].expand(3, -1, -1)
    for path in ["vmap", "grouped"]:
        torch.manual_seed(0)
        out, _ = E.local_train(net, params, x, y, same, lr=0.1, vectorized=path)
        w = out["11.weight"]
        assert torch.isfinite(w).all() and not torch.equal(w[0], w[1])


def setup_fp32(name):
    net, params, x, y, batches, steps = setup(name)
    return net.float(), {k: v.float() for k, v in params.items()}, x.float(), y, batches, steps


def test_bf16_autocast_runs_close_to_fp32():
    net, params, x, y, batches, steps = setup_fp32("cvar_lenet")
    ref, _ = E.local_train(net, params, x, y, batches, steps=steps, lr=0.05)
    out, _ = E.local_train(net, params, x, y, batches, steps=steps, lr=0.05, autocast_dtype=torch.bfloat16)
    assert out["0.weight"].dtype == torch.float32
    assert rel_diff(out, ref) < 0.05


def test_bf16_autocast_with_batchnorm_in_vmap_path():
    net, params, x, y, batches, steps = setup_fp32("hics_fmnist")
    ref, _ = E.local_train(net, params, x, y, batches, steps=steps, lr=0.01)
    out, _ = E.local_train(net, params, x, y, batches, steps=steps, lr=0.01, autocast_dtype=torch.bfloat16)
    seq, _ = E.local_train(net, params, x, y, batches, steps=steps, lr=0.01, autocast_dtype=torch.bfloat16,
                           vectorized=False)
    assert out["2.running_mean"].dtype == torch.float32
    assert rel_diff(out, ref) < 2 * rel_diff(seq, ref)  # bf16 error of the same size as the reference's
    loss, _ = E.evaluate(net, out, x, y, autocast_dtype=torch.bfloat16)
    assert torch.isfinite(loss).all()


def test_stack_inits_are_seeded_independent_and_leave_global_rng_alone():
    net = models.build("fedau_svhn")
    state = torch.random.get_rng_state()
    a = E.stack(net, 3, torch.Generator().manual_seed(7))
    assert torch.equal(state, torch.random.get_rng_state())
    b = E.stack(net, 3, torch.Generator().manual_seed(7))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["0.weight"][0], a["0.weight"][1])
    assert torch.count_nonzero(a["0.bias"]) == 0  # the model's own init scheme was re-run
    copies = E.stack(net, 2)
    assert torch.equal(copies["0.weight"][1], net[0].weight)
    assert set(E.unstack(copies, 1)) == set(net.state_dict())
    m1 = E.to_module(net, a, 1)
    assert torch.equal(m1[0].weight, a["0.weight"][1])


def test_take_and_put_rows_of_a_state_tree():
    tree = {"step": torch.zeros(5), "exp_avg": {"w": torch.zeros(5, 2)}}
    sub = E.take(tree, torch.tensor([1, 3]))
    sub["step"] += 1
    sub["exp_avg"]["w"] += 2
    E.put(tree, torch.tensor([1, 3]), sub)
    assert tree["step"].tolist() == [0, 1, 0, 1, 0] and tree["exp_avg"]["w"][3].tolist() == [2, 2]


@pytest.mark.parametrize("name", ["cvar_lenet", "hics_fmnist"])
def test_evaluate_and_per_class_accuracy_match_per_model_modules(name):
    net, params, x, y, _, _ = setup(name)
    loss, acc = E.evaluate(net, params, x, y, batch_size=8, models_per_chunk=2)
    pca = E.per_class_accuracy(net, params, x, y, 12, batch_size=8)
    for m in range(3):
        mod = E.to_module(net, params, m).eval()
        with torch.no_grad():
            logits = mod(x)
        assert loss[m].item() == pytest.approx(F.cross_entropy(logits, y).item(), rel=1e-5)
        assert acc[m].item() == pytest.approx((logits.argmax(1) == y).double().mean().item())
        for c in range(10):
            if (y == c).any():
                assert pca[m, c].item() == pytest.approx((logits.argmax(1)[y == c] == c).double().mean().item())
    assert torch.isnan(pca[:, 10:]).all()  # absent classes
    assert torch.allclose(E.evaluate(net, params, x, y, vectorized=False)[0], loss)


def test_binary_single_logit_model():
    torch.manual_seed(0)
    net = models.build("linear", in_dim=10, out_dim=1).double()
    x, y = torch.randn(31, 10, dtype=torch.float64), torch.randint(0, 2, (31,))
    params = E.stack(net, 3, torch.Generator().manual_seed(0))
    batches, steps = epoch_batches([10, 14, 7], 4, 2, torch.Generator().manual_seed(1))
    check_parity(net, params, x, y, batches, steps=steps, lr=0.1)
    loss, acc = E.evaluate(net, params, x, y)
    logit = E.to_module(net, params, 0)(x)[:, 0]
    assert loss[0].item() == pytest.approx(F.binary_cross_entropy_with_logits(logit, y.double()).item(), rel=1e-5)


@pytest.mark.parametrize("last", ["wrap", "pad", "drop"])
def test_epoch_batches_are_permutations_of_each_clients_data(last):
    lists = [torch.arange(0, 10), torch.arange(10, 24), torch.arange(24, 31)]
    batches, steps = epoch_batches(lists, 4, 2, torch.Generator().manual_seed(0), last=last)
    per_epoch = {"wrap": [3, 4, 2], "pad": [3, 4, 2], "drop": [2, 3, 1]}[last]
    assert steps.tolist() == [2 * s for s in per_epoch] and batches.shape == (3, max(steps), 4)
    for m, idx in enumerate(lists):
        for e in range(2):
            got = batches[m, e * per_epoch[m]:(e + 1) * per_epoch[m]].flatten()
            got = got[got >= 0]
            if last == "drop":
                assert len(set(got.tolist())) == len(got) and set(got.tolist()) <= set(idx.tolist())
            else:
                assert set(got.tolist()) == set(idx.tolist())  # every sample once per epoch (+ wrap fill)
                assert len(got) == (len(idx) if last == "pad" else 4 * per_epoch[m])
    sizes_version, _ = epoch_batches([10, 14, 7], 4, 2, torch.Generator().manual_seed(0), last=last)
    assert torch.equal(sizes_version, batches)  # sizes == contiguous index blocks


def _make_batches_c0fd793(pool, n, epochs, batch_size, generators):
    """flkit.papers.cvar.make_batches as of commit c0fd793 (before its move into epoch_batches), verbatim but
    for names: the layout that epoch_batches(..., generators=...) must reproduce bit for bit."""
    M, W = pool.shape
    dev, B, H = pool.device, int(batch_size), int(epochs)
    keys = torch.full((M, H, W), 2.0, dtype=torch.float64, device=dev)
    for m, (g, nm) in enumerate(zip(generators, n.tolist())):
        keys[m, :, :nm] = torch.rand(H, nm, generator=g, device=dev, dtype=torch.float64)
    perm = keys.argsort(dim=-1)
    spe = (n + B - 1) // B
    spe_max = int(spe.max())
    j = torch.arange(spe_max * B, device=dev)
    pos = perm.gather(-1, j.clamp(max=W - 1).expand(M, H, -1))
    ids = pool.gather(1, pos.reshape(M, -1)).view(M, H, spe_max * B)
    ids = ids.masked_fill(j >= n[:, None, None], -1).view(M, H, spe_max, B)
    steps = spe * H
    s = torch.arange(int(steps.max()), device=dev)
    per = spe.clamp(min=1)[:, None]
    mi = torch.arange(M, device=dev)[:, None]
    batches = ids[mi, (s // per).clamp(max=H - 1), s % per]
    filler = pool[:, :1, None].expand_as(batches)
    batches = torch.where((s[None, :] >= steps[:, None])[..., None], filler, batches)
    return batches, steps


@pytest.mark.parametrize("case", range(8))
def test_epoch_batches_with_per_run_generators_equal_the_former_cvar_batches(case):
    """Per-run generators (pool (M, W) + sizes in, last="pad"): bit-identical to Fed-CVaR's former
    make_batches for random pools, sizes, epochs, batch sizes and seeds."""
    g = torch.Generator().manual_seed(100 + case)
    M, W = int(torch.randint(1, 6, (1,), generator=g)), int(torch.randint(1, 40, (1,), generator=g))
    n = torch.randint(1, W + 1, (M,), generator=g)
    n[0] = W if case % 2 else n[0]  # some runs fill the pool's width
    pool = torch.randint(0, 1000, (M, W), generator=g)
    for m in range(M):
        pool[m, n[m]:] = pool[m, 0]
    H, B = int(torch.randint(1, 4, (1,), generator=g)), int(torch.randint(1, 12, (1,), generator=g))
    seeds = torch.randint(0, 2**31, (M,), generator=g).tolist()
    gens = lambda: [torch.Generator().manual_seed(s) for s in seeds]  # noqa: E731
    ref_b, ref_s = _make_batches_c0fd793(pool, n, H, B, gens())
    b, s = epoch_batches(pool, B, H, generators=gens(), last="pad", sizes=n)
    assert torch.equal(b, ref_b) and torch.equal(s, ref_s)
    assert b.dtype == ref_b.dtype == torch.long and s.dtype == ref_s.dtype
    # index lists instead of a padded pool: the same batches
    b2, s2 = epoch_batches([pool[m, :n[m]] for m in range(M)], B, H, generators=gens(), last="pad")
    assert torch.equal(b2, ref_b) and torch.equal(s2, ref_s)


def test_per_run_generators_make_runs_independent():
    pool = torch.tensor([[10, 11, 12, 13, 14, 15, 16], [20, 21, 22, 20, 20, 20, 20]])
    n = torch.tensor([7, 3])
    gens = lambda seeds: [torch.Generator().manual_seed(s) for s in seeds]  # noqa: E731
    b, steps = epoch_batches(pool, 3, 2, generators=gens([0, 1]), last="pad", sizes=n)
    assert steps.tolist() == [6, 2] and b.shape == (2, 6, 3)
    for m in range(2):
        spe = steps[m] // 2
        for h in range(2):
            ep = b[m, h * spe:(h + 1) * spe].reshape(-1)
            assert sorted(ep[ep >= 0].tolist()) == sorted(pool[m, : n[m]].tolist())
    assert b[1, steps[1]:].eq(20).all()  # filler steps: the run's first index
    alone, _ = epoch_batches(pool[1:], 3, 2, generators=gens([1]), last="pad", sizes=n[1:])
    assert torch.equal(alone[0], b[1, : steps[1]])  # a run's batches do not depend on the other runs
    for last in ("wrap", "drop"):  # every layout takes per-run generators
        alone, _ = epoch_batches([[20, 21, 22]], 2, 2, generators=gens([1]), last=last)
        both, _ = epoch_batches([list(range(10, 17)), [20, 21, 22]], 2, 2, generators=gens([0, 1]), last=last)
        assert torch.equal(alone[0], both[1, : alone.shape[1]])
    with pytest.raises(ValueError, match="not both"):
        epoch_batches(pool, 3, 2, torch.Generator(), generators=gens([0, 1]), sizes=n)
    with pytest.raises(ValueError, match="one generator per model"):
        epoch_batches(pool, 3, 2, generators=gens([0]), sizes=n)
    with pytest.raises(ValueError, match="sizes"):
        epoch_batches(pool, 3, 2, sizes=torch.tensor([7, 8]))


def test_sample_batches_and_batch_stream():
    lists = [torch.arange(0, 20), torch.arange(20, 23)]
    b, s = sample_batches(lists, 4, 6, torch.Generator().manual_seed(0))
    assert b.shape == (2, 6, 4) and s.tolist() == [6, 6]
    assert all(len(set(row.tolist())) == 4 for row in b[0])  # no repeats within a batch
    assert set(b[1].flatten().tolist()) <= {20, 21, 22} and set(b[0].flatten().tolist()) <= set(range(20))
    stream = BatchStream([torch.arange(0, 10), torch.arange(10, 30)], 4, torch.Generator().manual_seed(0))
    b1, _ = stream.next([0, 1], 2)
    b2, _ = stream.next([0], 1)  # client 0 has 2 left < 4: they are skipped and a new permutation starts
    first_epoch = b1[0].flatten().tolist()
    assert len(set(first_epoch)) == 8 and len(set(b2[0, 0].tolist())) == 4
    b3, _ = stream.next([1], 3)  # client 1 continues where it stopped: 20 samples = 5 batches, no repeat
    seen = b1[1].flatten().tolist() + b3[0].flatten().tolist()
    assert sorted(seen) == list(range(10, 30))


def test_input_validation():
    net, params, x, y, batches, steps = setup("cvar_mlp")
    with pytest.raises(ValueError, match="leading axis"):
        E.local_train(net, params, x, y, batches[:2], lr=0.1)
    with pytest.raises(ValueError, match="steps"):
        E.local_train(net, params, x, y, batches, lr=0.1, steps=torch.tensor([1, 2, 99]))
    with pytest.raises(ValueError, match="opt"):
        E.local_train(net, params, x, y, batches, lr=0.1, opt="rmsprop")
    with pytest.raises(ValueError, match="grouped"):   # GroupNorm: outside the grouped family (BatchNorm is in it)
        gn = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.GroupNorm(2, 4), torch.nn.Flatten(),
                                 torch.nn.Linear(4 * 26 * 26, 10)).double()
        E.local_train(gn, E.stack(gn, 3), x, y, batches, lr=0.1, vectorized="grouped")
    with pytest.raises(ValueError, match="device"):
        E.local_train(net, params, x.to("meta"), y, batches, lr=0.1)
    with pytest.raises(ValueError, match="stack"):
        E.local_train(net, {"t": torch.zeros(3)}, x, y, batches, lr=0.1)


# ------------------------------------------------------------------ issue 17: exact laws, validation
def _one_step_by_hand(params, x, y, batches, lr, logits_of):
    """One SGD step per model written out: loss = cross-entropy of logits_of(x_b, W, b), w <- w - lr grad."""
    out = {k: v.clone() for k, v in params.items()}
    for m in range(batches.shape[0]):
        W, b = (params[k][m].clone().requires_grad_(True) for k in ("0.weight", "0.bias"))
        idx = batches[m, 0]
        gW, gb = torch.autograd.grad(F.cross_entropy(logits_of(x[idx], W, b), y[idx]), [W, b])
        out["0.weight"][m], out["0.bias"][m] = W.detach() - lr * gW, b.detach() - lr * gb
    return out


def test_bf16_autocast_is_applied_in_every_path():
    """Under autocast_dtype=bfloat16 the forward's products run in bf16 (inputs and weights rounded to
    bf16, 8 bits of mantissa), the loss and the update in float32. Exact hand computation of one step of
    a Linear model: grouped (baddbmm) and sequential (nn.Linear): F.linear on bf16 casts of x, W and b;
    vmap: functional_call's linear is batched as a bf16 matmul plus a float32 bias. Without autocast the
    result is the float32 step, off by ~1e-3 (bf16 rounding), so a silently skipped autocast fails."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 4))
    x, y = torch.randn(12, 6), torch.randint(0, 4, (12,))
    params = E.stack(net, 2, torch.Generator().manual_seed(1))
    batches = torch.arange(12).view(2, 1, 6)
    bf = torch.bfloat16
    linear_bf16 = lambda xb, W, b: F.linear(xb.to(bf), W.to(bf), b.to(bf)).float()  # noqa: E731
    matmul_bf16 = lambda xb, W, b: (xb.to(bf) @ W.to(bf).T).float() + b  # noqa: E731
    fp32 = _one_step_by_hand(params, x, y, batches, 0.5, F.linear)
    for path, by_hand in (("grouped", linear_bf16), (False, linear_bf16), ("vmap", matmul_bf16)):
        out, _ = E.local_train(net, params, x, y, batches, lr=0.5, vectorized=path, autocast_dtype=bf)
        want = _one_step_by_hand(params, x, y, batches, 0.5, by_hand)
        assert all(torch.equal(out[k], want[k]) for k in out), path
        assert out["0.weight"].dtype == torch.float32 and rel_diff(out, fp32) > 1e-4, path
    loss, _ = E.evaluate(net, params, x, y, autocast_dtype=bf, vectorized=False)
    for m in range(2):
        W, b = params["0.weight"][m], params["0.bias"][m]
        assert loss[m].item() == pytest.approx(F.cross_entropy(linear_bf16(x, W, b), y).item(), rel=1e-6)
        assert abs(loss[m].item() - F.cross_entropy(F.linear(x, W, b), y).item()) > 1e-5


def _keys_law(sizes, epochs, draw):
    """Per model and epoch the permutation: argsort of float64 keys drawn by `draw(epoch)` -> (M, n_max)."""
    n = torch.tensor(sizes)
    perms = []
    for e in range(epochs):
        keys = draw(e)
        keys[torch.arange(keys.shape[1]) >= n[:, None]] = 2.0
        perms.append(keys.argsort(1))
    return torch.stack(perms, 1)                                   # (M, epochs, n_max)


@pytest.mark.parametrize("mode", ["generator", "generators"])
def test_epoch_batches_draw_a_fresh_permutation_per_epoch(mode):
    """The documented law, written out: epoch e's order of model m is the argsort of float64 keys, drawn
    (one generator) as an (M, n_max) block per epoch in turn, or (per-model generators) as an
    (epochs, n_m) block from model m's own; "pad" cuts each epoch into ceil(n_m/B) batches, -1 padded.
    Two epochs must not repeat one permutation."""
    sizes, B, H = [10, 14, 7], 4, 3
    if mode == "generator":
        g = torch.Generator().manual_seed(3)
        batches, steps = epoch_batches(sizes, B, H, torch.Generator().manual_seed(3), last="pad")
        perm = _keys_law(sizes, H, lambda e: torch.rand(3, 14, generator=g, dtype=torch.float64))
    else:
        gens = lambda: [torch.Generator().manual_seed(40 + m) for m in range(3)]  # noqa: E731
        batches, steps = epoch_batches(sizes, B, H, generators=gens(), last="pad")
        keys = torch.full((3, H, 14), 2.0, dtype=torch.float64)
        for m, gm in enumerate(gens()):
            keys[m, :, :sizes[m]] = torch.rand(H, sizes[m], generator=gm, dtype=torch.float64)
        perm = _keys_law(sizes, H, lambda e: keys[:, e].clone())
    offsets = [0, 10, 24]
    for m, n in enumerate(sizes):
        spe = -(-n // B)
        assert steps[m] == H * spe
        for e in range(H):
            want = torch.full((spe * B,), -1, dtype=torch.long)
            want[:n] = perm[m, e, :n] + offsets[m]
            assert torch.equal(batches[m, e * spe:(e + 1) * spe].reshape(-1), want), (m, e)
        assert len({tuple(perm[m, e, :n].tolist()) for e in range(H)}) == H  # a fresh order every epoch


@pytest.mark.parametrize("bad", [-5, 0, True, 2.0])
def test_counts_are_positive_ints_before_any_work(bad):
    net, params, x, y, batches, steps = setup("cvar_mlp")
    lists = [torch.arange(0, 10), torch.arange(10, 24)]
    calls = [lambda: epoch_batches(lists, bad, 1), lambda: epoch_batches(lists, 4, bad),
             lambda: sample_batches(lists, bad, 3), lambda: sample_batches(lists, 4, bad),
             lambda: BatchStream(lists, bad), lambda: BatchStream(lists, 4).next([0], bad),
             lambda: E.evaluate(net, params, x, y, batch_size=bad),
             lambda: E.evaluate(net, params, x, y, models_per_chunk=bad),
             lambda: FastSGD(small_cnn(), E.stack(small_cnn(), 3), torch.zeros(4, 1, 8, 8, dtype=torch.float64),
                               torch.zeros(4, dtype=torch.long), bad, lr=0.1)]
    for call in calls:
        with pytest.raises(ValueError, match="int >= 1"):
            call()
