"""The HiCS-FL Fashion-MNIST CNN (BatchNorm, PReLU, dropout) trained with a round's clients at once must give the
numbers of the one-client-at-a-time loop (flkit.engine.local_train(vectorized=False), torch.optim, nn.Module):
client updates, aggregated models, BatchNorm running statistics and metrics, for clients of unequal sizes (short,
padded last batches), plain SGD, FedProx and Adam; and deliberately wrong variants of the batched path must fail
the same comparison.

Tolerance: float64 throughout. The paths compute the same arithmetic in another order (grouped convolutions,
BatchNorm statistics summed by rows first), so they differ by float64 rounding, ~1e-16 relative per operation;
over the few local steps here the largest measured difference is 1e-10 relative (Adam, whose step divides by
sqrt(v) + eps and so magnifies rounding where v is tiny), 1e-13 with SGD. TOL = 1e-8 (about 4.5e7 float64
epsilons) leaves two orders of magnitude above that, while each wrong variant below moves the parameters by
more than 1e-4 relative.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from flkit import datasets, engine, fl, models
from flkit import grouped as G
from flkit.batches import epoch_batches
from flkit.papers.hics import common, fmnist
from flkit.tasks import EngineTask

TOL = 1e-8
# engine.evaluate accumulates losses in float32 (logits cast to float32): models equal to TOL give losses equal
# up to a few float32 roundings of the logits and of the sum; 16 float32 epsilons (1.9e-6) bounds that, where
# a wrong variant moves a loss by more than 1e-3 relative.
METRIC_RTOL = 16 * float(np.finfo(np.float32).eps)
SIZES = [20, 11, 29, 5, 15, 35]            # batch 8: 3, 2, 4, 1, 2, 5 steps an epoch, every last batch short
B = 8


def rel_diff(a, b) -> float:
    out = 0.0
    for k in b:
        if isinstance(b[k], dict):
            out = max(out, rel_diff(a[k], b[k]))
        else:
            out = max(out, float((a[k] - b[k]).norm() / b[k].norm().clamp(min=1e-12)))
    return out


def engine_case(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    net = models.hics_fmnist_paper().double()
    n = sum(SIZES)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, 1, 28, 28, generator=g, dtype=torch.float64) + 0.3 * y.view(-1, 1, 1, 1)
    params = engine.stack(net, len(SIZES), torch.Generator().manual_seed(seed + 1))
    gens = [torch.Generator().manual_seed(100 + i) for i in range(len(SIZES))]
    batches, steps = epoch_batches(SIZES, B, 2, generators=gens, last="pad")
    keep = engine.dropout_masks(net, x[:1], B, steps, [torch.Generator().manual_seed(200 + i)
                                                        for i in range(len(SIZES))])
    return net, params, x, y, batches, steps, keep


OPTS = {"sgd": dict(lr=0.05), "fedprox": dict(lr=0.05, prox_mu=0.1),
        "adam_fedprox": dict(lr=1e-3, opt="adam", prox_mu=0.1)}


@pytest.mark.parametrize("opt", sorted(OPTS))
def test_batched_cnn_matches_the_one_client_loop(opt):
    net, params, x, y, batches, steps, keep = engine_case()
    assert (batches < 0).any() and len(set(steps.tolist())) > 2       # short last batches, unequal steps
    assert engine.supports_grouped(net, buffers=True) and not engine.supports_grouped(net)
    ref, ref_state = engine.local_train(net, params, x, y, batches, steps=steps, vectorized=False, dropout_keep=keep,
                                        **OPTS[opt])
    for path, skip in (("grouped", False), ("grouped", True), ("vmap", True)):
        out, state = engine.local_train(net, params, x, y, batches, steps=steps, vectorized=path, dropout_keep=keep,
                                        skip_done=skip, **OPTS[opt])
        assert rel_diff(out, ref) < TOL, (path, skip)
        assert rel_diff(state, ref_state) < TOL, (path, skip)
    for k in ("2.running_mean", "2.running_var", "6.running_mean", "6.running_var", "1.weight", "5.weight"):
        assert (ref[k] != params[k]).any(dim=-1).all(), k                # every client moved its BN stats, PReLU


def test_wrong_batched_variants_fail_the_parity_check(monkeypatch):
    """Three mistakes the parity test must catch: BatchNorm statistics that count the padded slots of a short
    batch, BatchNorm statistics shared by the clients of the call (one BatchNorm over their stacked batches),
    and dropout from torch's RNG instead of each client's masks."""
    net, params, x, y, batches, steps, keep = engine_case()
    kw = dict(steps=steps, lr=0.05)
    ref, _ = engine.local_train(net, params, x, y, batches, vectorized=False, dropout_keep=keep, **kw)

    def wrong(**patch):
        with monkeypatch.context() as m:
            for name, fn in patch.items():
                m.setattr(G, name, fn)     # where grouped_forward looks them up
            return engine.local_train(net, params, x, y, batches, vectorized="grouped", dropout_keep=keep, **kw)[0]

    real = G._masked_batch_norm
    padded_in = wrong(_masked_batch_norm=lambda h, valid, *a: real(h, torch.ones_like(valid), *a))

    def shared(layer, name, params, buffers, h, layout, M, valid, new_buffers):
        Bh, MC = h.shape[:2]
        hm = h.reshape(Bh, M, MC // M, *h.shape[2:]).transpose(0, 1).reshape(M * Bh, MC // M, *h.shape[2:])
        out = F.batch_norm(hm, None, None, params[name + ".weight"][0], params[name + ".bias"][0], True, 0.0,
                           layer.eps)
        return out.reshape(M, Bh, MC // M, *h.shape[2:]).transpose(0, 1).reshape(h.shape)
    shared_stats = wrong(_grouped_batch_norm=shared)
    torch.manual_seed(0)
    global_rng = engine.local_train(net, params, x, y, batches, vectorized="grouped", **kw)[0]
    for out in (padded_in, shared_stats, global_rng):
        assert rel_diff(out, ref) > 1e-4 > TOL


def test_batchnorm_leaves_padded_slots_out_and_keeps_running_stats_per_model():
    """_masked_batch_norm on rows with padding equals torch's BatchNorm on the valid rows alone, per model."""
    g = torch.Generator().manual_seed(3)
    h = torch.randn(2, 5, 3, 4, 4, generator=g, dtype=torch.float64)        # M = 2 models, batch 5, 3 channels
    valid = torch.tensor([[True] * 5, [True, True, True, False, False]])
    w, b = torch.rand(2, 3, generator=g, dtype=torch.float64), torch.rand(2, 3, generator=g, dtype=torch.float64)
    rm, rv = torch.rand(2, 3, generator=g, dtype=torch.float64), 1 + torch.rand(2, 3, generator=g, dtype=torch.float64)
    bn = torch.nn.BatchNorm2d(3).double()
    grouped = h.transpose(0, 1).reshape(5, 6, 4, 4)
    new = {}
    out = G._grouped_batch_norm(bn, "bn", {"bn.weight": w, "bn.bias": b},
                               {"bn.running_mean": rm, "bn.running_var": rv}, grouped, "grouped", 2, valid, new)
    out = out.reshape(5, 2, 3, 4, 4).transpose(0, 1)
    for m in range(2):
        n = int(valid[m].sum())
        rm_m, rv_m = rm[m].clone(), rv[m].clone()
        want = F.batch_norm(h[m, :n], rm_m, rv_m, w[m], b[m], True, bn.momentum, bn.eps)
        torch.testing.assert_close(out[m, :n], want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(new["bn.running_mean"][m], rm_m, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(new["bn.running_var"][m], rv_m, rtol=1e-12, atol=1e-12)


def test_grouped_eval_forward_with_batchnorm_and_prelu_matches_each_module():
    net, params, x, *_ = engine_case()
    params = {k: v + 0.1 * torch.rand_like(v) if "running" in k else v for k, v in params.items()}  # non-trivial stats
    net.eval()
    pn = {k for k, _ in net.named_parameters()}
    got = engine.grouped_forward(net, {k: params[k] for k in pn}, x[:7], shared=True,
                                 buffers={k: v for k, v in params.items() if k not in pn})
    for m in range(len(SIZES)):
        want = engine.to_module(net, params, m).eval()(x[:7])
        torch.testing.assert_close(got[m], want, rtol=1e-12, atol=1e-12)


def test_dropout_masks_are_each_models_own_and_drop_p():
    net = models.hics_fmnist_paper()
    x = torch.zeros(1, 1, 28, 28)
    gens = lambda seeds: [torch.Generator().manual_seed(s) for s in seeds]     # noqa: E731
    a = engine.dropout_masks(net, x, 64, [3, 7, 5], gens([1, 2, 3]))["8"]
    b = engine.dropout_masks(net, x, 64, [5], gens([3]))["8"]
    assert a.shape == (3, 7, 64, 32, 4, 4) and a.dtype == torch.bool
    assert torch.equal(a[2, :5], b[0]) and a[0, 3:].all()                  # own generator; unused rows kept
    frac = a[1].double().mean()
    assert abs(float(frac) - 0.8) < 4 * (0.2 * 0.8 / a[1].numel()) ** 0.5   # p = 0.2, within 4 standard errors
    with pytest.raises(ValueError, match="one generator per model"):
        engine.dropout_masks(net, x, 64, [3, 7], gens([1]))


def test_dropout_keep_input_is_checked_before_any_work():
    net, params, x, y, batches, steps, keep = engine_case()
    with pytest.raises(ValueError, match="one mask per Dropout layer"):
        engine.local_train(net, params, x, y, batches, steps=steps, lr=0.1, dropout_keep={})
    with pytest.raises(ValueError, match="must be bool"):
        engine.local_train(net, params, x, y, batches, steps=steps, lr=0.1, dropout_keep={"8": keep["8"][:, :2]})


# ------------------------------------------------------------------------------------ the HiCS-FL task
def hics_task(vectorized, opt="sgd", prox_mu=0.0, dropout=True):
    """experiments.make_task on synthetic Fashion-MNIST-shaped data, in float64, clients of unequal sizes."""
    g = torch.Generator().manual_seed(5)
    n = sum(SIZES)
    y = torch.arange(n) % 10
    x = (torch.rand(n, 1, 28, 28, generator=g, dtype=torch.float64) * 0.5 + 0.05 * y.view(-1, 1, 1, 1)).clamp(0, 1)
    data = datasets.Dataset("fashion-mnist", x, y, x[:60], y[:60], [str(c) for c in range(10)])
    perm = np.random.default_rng(0).permutation(n)
    part = SimpleNamespace(indices=np.split(perm, np.cumsum(SIZES)[:-1]))
    cfg = dict(model="hics_fmnist_paper", subset=None, batch_size=B, epochs=2, lr=0.05, opt=opt, prox_mu=prox_mu,
               vectorized=vectorized)
    task = common.make_task(data, part, cfg)
    task.model.double()
    if not dropout:
        task.dropout_stream = None
    return task


@pytest.mark.parametrize("mu", [0.0, 0.1])
def test_hics_runs_match_the_one_client_loop(mu):
    """Four rounds of random and HiCS-FL sampling (K = 2 of 6 clients; HiCS-FL's warm-up is 3 rounds) with the
    Fashion-MNIST runs' plain SGD (and the FedProx term): the same metrics every round and the same final
    models with a round's clients trained together and one at a time."""
    out = {}
    for vec in (False, True):
        task = hics_task(vec, "sgd", mu)
        assert task.dropout_stream == common.DROPOUT_STREAM
        res = fl.run(task, fmnist.algorithms(task, dict(k=2, rounds=4), ["random", "HiCS-FL"]), seeds=[1], rounds=4,
                     every=1)
        assert task.paths == [f"local_train/vectorized={vec}"]
        out[vec] = res
    a, b = out[True].tidy(), out[False].tidy()
    keys = ["method", "round", "metric"]
    assert len(a) == len(b) and (a[keys].values == b[keys].values).all()
    acc = a.metric.str.endswith("_acc").to_numpy()
    np.testing.assert_array_equal(a["value"][acc], b["value"][acc])       # accuracies: the same samples right
    np.testing.assert_allclose(a["value"][~acc], b["value"][~acc], rtol=METRIC_RTOL, atol=0)
    assert rel_diff({"w": out[True].final_w}, {"w": out[False].final_w}) < TOL
    w0 = hics_task(True).init_params([1])
    assert all(rel_diff({"w": out[True].final_w[r]}, {"w": w0[0]}) > 1e-2 for r in range(2))   # training moved them
    assert not torch.equal(out[True].final_w[0], out[True].final_w[1])                          # two methods


def test_adam_fedprox_client_updates_match():
    """Adam + FedProx (the CIFAR runs' optimiser) on the CNN through the task: every client's update of the first
    round agrees. Compared from the initial model only: once a conv channel stays on PReLU's linear side for a
    whole batch, the BatchNorm after it makes the loss flat along that channel's bias, whose gradient is then
    rounding noise that Adam scales up to steps of up to ~lr. Two computations of the same round then part at
    that noise's level whatever computes them: measured from the model after one round, the one-client loop alone
    moves by 1.1e-5 (relative; 0.8 % in the second conv's bias) between ATen's AVX-512 and default kernels, the
    batched path by 3.8e-5 (2.6 % in the same bias), all other tensors below 2e-5. Plain SGD (the Fashion-MNIST
    runs') has no such amplification: the four-round test above holds at TOL."""
    runs = fl.Runs([1], torch.tensor([0.01], dtype=torch.float64), ["x"])
    ups = {}
    for vec in (False, True):
        task = hics_task(vec, "adam", 0.1)
        ups[vec] = task.client_updates(task.init_params([1]), torch.ones(1, len(SIZES), dtype=torch.bool), 0, runs)[1]
    assert rel_diff({"d": ups[True]}, {"d": ups[False]}) < TOL
    plain = hics_task(True, "sgd", 0.0).client_updates(hics_task(True).init_params([1]),
                                                       torch.ones(1, len(SIZES), dtype=torch.bool), 0, runs)[1]
    assert rel_diff({"d": plain}, {"d": ups[False]}) > 1e-2                 # Adam + prox: not SGD's update


def test_task_without_client_dropout_streams_differs():
    """The wrong variant at the task level: dropout from torch's RNG (the old setting) does not reproduce the
    one-client loop, so the test above would fail without each client's own masks."""
    ups = {}
    for vec in (False, True):
        task = hics_task(vec, dropout=False)
        w = task.init_params([1])
        active = torch.zeros(1, len(SIZES), dtype=torch.bool)
        active[0, [1, 3, 4]] = True
        torch.manual_seed(0)
        ups[vec] = task.client_updates(w, active, 0, fl.Runs([1], torch.tensor([0.05], dtype=torch.float64), ["x"]))[1]
    assert rel_diff({"d": ups[True]}, {"d": ups[False]}) > 1e-4


def test_client_masks_do_not_depend_on_the_other_clients():
    task = hics_task(True)
    one = task._keep([1], [3], 4, [1])["8"]
    three = task._keep([1, 1, 2], [0, 3, 3], 4, [1, 1, 2])["8"]
    s3 = task._host_steps([3], [1])[0]
    assert torch.equal(three[1, :s3], one[0, :s3]) and not torch.equal(three[2, :s3], one[0, :s3])
    with pytest.raises(ValueError, match="dropout_stream needs backend='engine'"):
        EngineTask(models.hics_fmnist_paper(), task.x, task.y, task.clients, task.x_test, task.y_test, batch_size=B,
                   epochs=1, backend="fast", dropout_stream="d/{t}/{client}")


def test_fig6_cnn_trains_every_client_at_once_with_the_loops_numbers(monkeypatch):
    """Fig. 6(a) with the document's CNN (appendix 6.2; flkit.papers.hics.dissimilarity): trained with the 250
    clients of a round together (its default on a GPU), a tiny float64 run records the rows (gradient differences,
    test accuracy) of the one-client loop up to the rows' rounding to 6 significant digits (one unit: rtol 1e-5)."""
    from flkit.papers.hics import dissimilarity
    g = torch.Generator().manual_seed(0)
    y = torch.arange(10).repeat(40)
    data = SimpleNamespace(x_train=torch.rand(400, 1, 28, 28, generator=g, dtype=torch.float64), y_train=y,
                           x_test=torch.rand(50, 1, 28, 28, generator=g, dtype=torch.float64),
                           y_test=torch.arange(10).repeat(5))
    cfg = dict(dissimilarity.FIG6, model="hics_fmnist_paper", clients=4, size=20, rounds=3, every=1, batch_size=8,
               lr=0.05)
    real, seen, rows = dissimilarity.fig6_task, [], {}
    for vec in (True, False):
        def task_of(data, part, cfg, vec=vec):
            task = real(data, part, cfg)
            task.model.double()
            seen.append((task.backend, task.vectorized, task.dropout_stream))
            task.vectorized = vec
            return task
        monkeypatch.setattr(dissimilarity, "fig6_task", task_of)
        rows[vec] = dissimilarity.run_fig6(cfg, data)
    assert seen[0] == ("engine", False, common.DROPOUT_STREAM)                  # on a CPU: the loop by default
    a, b = rows[True], rows[False]
    pd_cols = ["round", "metric", "client"]
    assert (a[pd_cols].values == b[pd_cols].values).all() and a["round"].max() == 2
    np.testing.assert_allclose(a["value"], b["value"], rtol=1e-5, atol=0)
    moved = a[(a.metric == "grad_norm2")]["value"].to_numpy()
    assert abs(moved[-1] - moved[0]) > 1e-3 * moved[0]                     # training changed the model


def test_masked_batch_norm_gradient_is_the_derivative():
    """The closed-form backward of the masked BatchNorm against finite differences (torch.autograd.gradcheck,
    float64), with rows left out of the statistics, per-row and per-channel masks, with and without the affine."""
    g = torch.Generator().manual_seed(1)
    h = torch.randn(5, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.rand(3, generator=g, dtype=torch.float64).add(0.5).requires_grad_(True)
    b = torch.randn(3, generator=g, dtype=torch.float64, requires_grad=True)
    rows = torch.tensor([1.0, 1, 1, 0, 0], dtype=torch.float64)[:, None]
    per_channel = torch.tensor([[1.0, 1, 1], [1, 1, 1], [1, 0, 1], [0, 0, 1], [1, 0, 0]], dtype=torch.float64)
    for v in (rows, per_channel):
        n = v.sum(0).expand(3) * 4
        f = lambda h, w, b: G._MaskedBatchNorm.apply(h, v, n, w, b, 1e-5)[0]          # noqa: E731
        assert torch.autograd.gradcheck(f, (h, w, b))
        assert torch.autograd.gradcheck(lambda h: G._MaskedBatchNorm.apply(h, v, n, None, None, 1e-5)[0], (h,))


def test_the_cnn_trains_its_clients_together_on_a_gpu_and_one_at_a_time_on_a_cpu():
    assert common.batch_clients("hics_fmnist_paper", torch.device("cuda"))
    assert common.batch_clients("hics_fmnist_paper", "cuda:1")
    assert not common.batch_clients("hics_fmnist_paper", "cpu")
    assert all(common.batch_clients(m, "cpu") for m in ("logreg", "hics_cifar10", "hics_cifar100"))
    task = hics_task("auto")
    assert task.vectorized is False and task.dropout_stream == common.DROPOUT_STREAM and task.skip_done
