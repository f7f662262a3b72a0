"""The single-device overfitting page's helpers (flkit.papers.fedau.overfitting): the single client of FedAU's
split, the profiles, the tables and checks on a hand-made result, and a tiny training run."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from flkit import partition
from flkit.papers.fedau import overfitting as of

# Fashion-MNIST's training set holds exactly 6,000 images per class; FedAU's split depends on the labels
# only through these counts and their storage order, so this label vector gives the page's clients' counts
FMNIST_LABELS = np.repeat(np.arange(10), 6000)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_single_client_is_one_client_of_fedaus_split(seed):
    c = of.single_client(FMNIST_LABELS, seed)
    part = partition.fedau_dirichlet(FMNIST_LABELS, 250, 0.1, seed=seed)
    assert 0 <= c.client < 250
    assert np.array_equal(c.indices, part.indices[c.client])
    assert np.array_equal(c.counts, np.bincount(FMNIST_LABELS[c.indices], minlength=10))
    assert c.size == len(c.indices) == part.sizes[c.client]
    assert 150 <= c.size <= 350                               # ~ 60,000 / 250 = 240 samples
    assert 1 <= len(of.main_classes(c.counts)) <= 4          # a few classes hold >= 5% of them
    again = of.single_client(FMNIST_LABELS, seed)              # same seed, same client
    assert again.client == c.client and np.array_equal(again.indices, c.indices)


def test_single_clients_of_the_page():
    """The three clients of the page (seeds 0, 1, 2), exact: id, size, label counts (classes 0-9)."""
    want = {0: (179, 236, [0, 0, 2, 0, 0, 225, 9, 0, 0, 0]),
            1: (221, 229, [10, 6, 1, 27, 0, 29, 0, 0, 16, 140]),
            2: (106, 221, [59, 0, 4, 2, 0, 10, 0, 144, 2, 0])}
    for seed, (client, size, counts) in want.items():
        c = of.single_client(FMNIST_LABELS, seed)
        assert (c.client, c.size, c.counts.tolist()) == (client, size, counts), seed
    assert [of.main_classes(want[s][2]) for s in want] == [[5], [9, 5, 3, 8], [7, 0]]


def test_main_classes():
    assert of.main_classes([0, 100, 4, 30, 8]) == [1, 3, 4]     # 8 / 142 >= 5%, 4 / 142 < 5%
    assert of.main_classes([5, 5], share=0.5) == [0, 1]


def test_profiles_and_bad_values():
    assert of.profile("paper")["seeds"] == [0, 1, 2] and of.profile("paper")["lr"] == 0.1
    assert of.profile("smoke", steps=60, checkpoints=[0, 30, 60])["steps"] == 60
    with pytest.raises(ValueError, match="unknown profile 'fast'"):
        of.profile("fast")
    with pytest.raises(ValueError, match="checkpoints must be increasing ints from 0 to steps"):
        of.profile("smoke", steps=50)
    with pytest.raises(ValueError, match="lr must lie in"):
        of.profile("smoke", lr=-1.0)
    with pytest.raises(ValueError, match="unknown setting"):
        of.profile("smoke", epochs=3)
    with pytest.raises(ValueError, match="model must be"):
        of.profile("smoke", model="resnet")


def _result(train_single, test_single, train_all, test_all) -> pd.DataFrame:
    rows = []
    for k, s in enumerate((0, 1, 2)):
        for setting, tr, te in (("single", train_single, test_single), ("all", train_all, test_all)):
            rows += [dict(setting=setting, seed=s, step=100, metric="final_train_acc", value=tr[k]),
                     dict(setting=setting, seed=s, step=100, metric="final_test_acc", value=te[k])]
    return pd.DataFrame(rows)


def test_tables_and_checks_on_a_hand_made_result():
    df = _result([1.0, 0.99, 1.0], [0.3, 0.2, 0.25], [0.80, 0.82, 0.81], [0.79, 0.80, 0.80])
    t = of.final_table(df)
    one = t[t["setting"] == "single"].sort_values("seed")
    assert np.allclose(one["gap"], [70.0, 79.0, 75.0])
    g = of.gap_table(df)
    assert list(g.index) == ["single device's data", "all devices' data"]
    assert g.loc["all devices' data", "gap (mean)"] == pytest.approx(4.0 / 3)
    assert [c.verdict for c in of.checks(df)] == ["agrees", "agrees", "confirmed", "confirmed"]
    # the reading fails where it should: no fit, a large all-data gap, a single device as good as all data
    bad = _result([0.8, 0.82, 0.81], [0.79, 0.80, 0.80], [0.95, 0.96, 0.97], [0.7, 0.7, 0.7])
    assert [c.verdict for c in of.checks(bad)] == ["differs", "differs", "contradicted", "contradicted"]


class _Data:
    """A small stand-in with Fashion-MNIST's shapes: 10 classes of 60 training images, 100 test images."""
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.y_train = torch.arange(10).repeat_interleave(60)
        self.x_train = torch.rand(600, 1, 28, 28, generator=g) + self.y_train.view(-1, 1, 1, 1) / 10
        self.y_test = torch.arange(10).repeat_interleave(10)
        self.x_test = torch.rand(100, 1, 28, 28, generator=g) + self.y_test.view(-1, 1, 1, 1) / 10


def test_train_curves_tiny_run_is_seeded_and_complete():
    cfg = of.profile("smoke", seeds=[0, 1], steps=6, checkpoints=[0, 3, 6], num_clients=10, train_subset=50,
                     test_subset=40, final_train_subset=80, final_test_subset=None, model="logreg")
    data = _Data()
    df = of.train_curves(data, cfg, cfg["seeds"])
    assert df.equals(of.train_curves(data, cfg, cfg["seeds"]))          # same seeds, same numbers
    curve = df[df["metric"] == "test_acc"]
    assert sorted(curve["step"].unique()) == [0, 3, 6] and len(curve) == 3 * 2 * 2
    f = df[df["metric"] == "final_test_acc"]
    assert len(f) == 4 and f["value"].between(0, 1).all()
    step0 = df[(df["step"] == 0) & df["metric"].isin(["train_acc", "test_acc"])]
    for s in (0, 1):                    # both models of a seed start from the same initialization
        a = step0[(step0["seed"] == s) & (step0["setting"] == "all")].set_index("metric")["value"]
        b = step0[(step0["seed"] == s) & (step0["setting"] == "single")].set_index("metric")["value"]
        assert a["test_acc"] == b["test_acc"]
    size = df[(df["metric"] == "client_size")].sort_values("seed")["value"].to_numpy()
    want = [of.single_client(data.y_train.numpy(), s, 10, 0.1).size for s in (0, 1)]
    assert np.array_equal(size, want)
