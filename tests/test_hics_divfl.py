"""DivFL's proxy (HiCS-FL document, appendix 6.1.2: "1-step gradients were requested from all client[s] in each
round"): for a linear softmax model the vectors ``DivFL(proxy="gradient")`` selects on are the clients'
full-batch gradients at the global model, in closed form (softmax(XW^T + b) - onehot)^T [X, 1] / n_i; the
full-local-update variant (``proxy="update"``) is not, and the same check rejects it."""
import numpy as np
import pytest
import torch

from flkit import fl, sample as S
from flkit.tasks import EngineTask


def _task(epochs=2):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(150, 6, generator=g, dtype=torch.float64)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] + x[:, 2] > 0.5).long()                           # 4 classes
    sizes = [20, 25, 30, 35, 40]
    clients = np.split(torch.randperm(150, generator=g).numpy(), np.cumsum(sizes)[:-1])
    return EngineTask(model=torch.nn.Linear(6, 4).to(torch.float64), x=x, y=y, clients=clients, x_test=x[:30],
                      y_test=y[:30], batch_size=8, epochs=epochs, local_lr=0.3)


def _closed_form(task, w, r):
    """Each client's gradient of its mean cross-entropy at run r's model, in the task's flat layout."""
    p = task.unflatten(w[r:r + 1])
    W, b = p["weight"][0], p["bias"][0]
    out = []
    for idx in task.clients:
        X, Y = task.x[idx], task.y[idx]
        E = torch.softmax(X @ W.T + b, 1) - torch.nn.functional.one_hot(Y, 4).double()
        gW, gb = E.T @ X / len(idx), E.mean(0)
        out.append(torch.cat([gW.reshape(-1) if n == "weight" else gb for n in task.names]))
    return torch.stack(out)


def _vectors(proxy, task, w, seeds):
    """The vectors DivFL takes its distances on, through the round loop's probe (every client asked)."""
    runs = fl.Runs(seeds, torch.full((len(seeds),), task.local_lr, dtype=torch.float64), ["divfl"] * len(seeds))
    probe = fl._Probe(task, w, torch.arange(len(seeds)), 3, runs)
    s = S.DivFL(2, proxy=proxy)
    state = s.init(len(seeds), task.num_clients, torch.ones(len(seeds), task.num_clients, dtype=torch.float64), seeds)
    ask = np.ones((len(seeds), task.num_clients), dtype=bool)
    return s._vectors(state, ask, probe), probe.calls


def _check_is_gradient(vectors, task, w):
    for r, v in enumerate(vectors):
        torch.testing.assert_close(v, _closed_form(task, w, r), rtol=0, atol=1e-12)


def test_gradient_proxy_is_each_clients_gradient_at_the_global_model():
    task = _task()
    w = task.init_params([0, 7]) + 0.3 * torch.randn(2, task.dim, generator=torch.Generator().manual_seed(1),
                                                         dtype=torch.float64)
    vectors, calls = _vectors("gradient", task, w, [0, 7])
    _check_is_gradient(vectors, task, w)
    assert calls == {"losses": 0, "updates": 0, "gradients": 1}
    assert not torch.allclose(vectors[0], vectors[1])          # two runs, two models, two sets of gradients


def test_the_full_update_variant_fails_the_same_check():
    """The deliberately wrong proxy for the document's DivFL: two epochs of minibatch SGD are not the gradient
    (nor any common multiple of it: the directions differ client by client)."""
    task = _task()
    w = task.init_params([0])
    vectors, calls = _vectors("update", task, w, [0])
    assert calls["updates"] == 1 and calls["gradients"] == 0
    with pytest.raises(AssertionError):
        _check_is_gradient(vectors, task, w)
    g = _closed_form(task, w, 0)
    cos = torch.nn.functional.cosine_similarity(vectors[0], g, dim=1)
    assert cos.min() < 0.9999, "the update is not even parallel to the gradient for every client"


def test_gradient_proxy_distances_keep_their_order_under_a_common_step_size():
    """A step size common to all clients (the one-step update eta * grad) scales every distance alike: the
    greedy choice is the same."""
    task = _task()
    w = task.init_params([3])
    (v,), _ = _vectors("gradient", task, w, [3])
    D1, D2 = S.update_distances(v), S.update_distances(0.05 * v)
    assert S.facility_location_greedy(D1, 3).tolist() == S.facility_location_greedy(D2, 3).tolist()
