"""flkit.papers.cvar.weights: the above-t step counts and gradient weights read off a threshold trajectory."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flkit.papers.cvar import weights

REPO = Path(__file__).resolve().parents[1]


def _trajectory(above: list[list[bool]], alpha, gamma, lr_t, dtype=np.float32) -> np.ndarray:
    """t after each round of Algorithm 1's t-steps, in float32 as the models train it."""
    t, out = dtype(0.0), [0.0]
    for rnd in above:
        for a in rnd:
            t = dtype(t - dtype(lr_t * (1 - gamma) * (1 - a / alpha)))
        out.append(float(t))
    return np.array(out)


def test_above_steps_and_weights_are_recovered_exactly():
    rng = np.random.default_rng(0)
    steps = rng.integers(20, 200, size=50)
    above = [list(rng.random(s) < 0.3) for s in steps]
    t = _trajectory(above, 0.3, 0.3, 1e-4)
    a = weights.above_steps(t, steps, 0.3, 0.3, 1e-4)
    assert a.tolist() == [sum(r) for r in above]
    w = weights.round_weights(t, steps, 0.3, 0.3, 1e-4)
    assert np.allclose(w, 0.3 * steps + 0.7 / 0.3 * a)
    assert np.allclose(weights.round_weights(t, steps, 1.0, 1.0, 1e-4), steps)    # FedAvg: 1 per step


def test_a_trajectory_that_is_not_algorithm_1s_is_refused():
    steps = np.full(10, 100)
    t = _trajectory([[True] * 30 + [False] * 70] * 10, 0.3, 0.3, 1e-4)
    with pytest.raises(ValueError, match="whole number"):
        weights.above_steps(t + np.linspace(0, 5e-5, 11), steps, 0.3, 0.3, 1e-4)     # half a step off
    with pytest.raises(ValueError, match="whole number"):
        weights.above_steps(t, steps, 0.2, 0.3, 1e-4)                               # the wrong alpha
    with pytest.raises(ValueError, match="one more"):
        weights.above_steps(t[1:], steps, 0.3, 0.3, 1e-4)


def _stored_mnist_run(method: str):
    """The first stored 4,000-round run of `method` at the document's setting (alpha = gamma = 0.3 for
    Fed-CVaR-Avg, lr 1e-3, normalized inputs): variants stored beside it (alpha = 0.1, the authors' input
    scaling, a larger FedAvg step) must not be picked by accident."""
    from flkit import datasets
    from flkit.results import Store
    if not datasets.available("mnist"):
        pytest.skip("MNIST is not in the data cache")
    store = Store(REPO / "results" / "cvar" / "mnist")
    for p in sorted(store.root.glob("*.json")):
        c = json.loads(p.read_text())["config"]
        document = (c.get("input_scaling") is None and c["lr_theta"] == 1e-3
                    and (method != "fed-cvar-avg" or (c["alpha"], c["gamma"]) == (0.3, 0.3)))
        if c["method"] == method and c["rounds"] == 4000 and document and store.done(c):
            return c, store.load(c)
    pytest.skip(f"no stored {method} MNIST run")


def test_a_stored_run_reads_as_algorithm_1():
    """Every one of 4,000 rounds of a stored Fed-CVaR-Avg run gives a whole number of above-t steps in
    [0, S_n] (the reading raises otherwise); its rare users, relayed in about 94 rounds, get more weight per
    step than its frequent users, and at most (1 - gamma) / alpha + gamma."""
    config, table = _stored_mnist_run("fed-cvar-avg")
    df = weights.group_weights([(config, table)]).set_index("group")
    parts = df.loc[["frequent", "rare"]]
    assert parts["rounds"].sum() == df.loc["all", "rounds"] == config["rounds"]
    assert (df["multiplier"] <= 0.7 / 0.3 + 0.3 + 1e-9).all()
    assert parts["share"].sum() == pytest.approx(1.0) and parts["fedavg_share"].sum() == pytest.approx(1.0)
    assert df.loc["rare", "multiplier"] > df.loc["frequent", "multiplier"]
    assert df.loc["rare", "share"] > df.loc["rare", "fedavg_share"]
    # t settles where a fraction alpha of the steps is above it: the mean step is FedAvg's
    late = weights.group_weights([(config, table)], last_rounds=1000).set_index("group").loc["all"]
    assert late["above"] == pytest.approx(0.3, abs=0.01) and late["multiplier"] == pytest.approx(1.0, abs=0.03)


def test_fedavg_keeps_its_shares():
    config, table = _stored_mnist_run("fedavg")
    df = weights.group_weights([(config, table)], last_rounds=1000)
    assert np.allclose(df["share"], df["fedavg_share"]) and np.allclose(df["multiplier"], 1.0)
    assert df.set_index("group").loc["all", "rounds"] == 1000
    s = weights.summary(pd.concat([df, df.assign(seed=df["seed"] + 1)]))
    assert (s["seeds"] == 2).all() and (s["share_se"] == 0).all() and s["share"].max() == pytest.approx(100.0)


def test_after_a_rare_round_more_steps_are_above_t():
    """In the stored runs the round after a rare user's round has twice the share of above-t steps (the model
    has just trained on the rare classes alone): after_rare reads it from the trajectory and the draws."""
    config, table = _stored_mnist_run("fed-cvar-avg")
    row = weights.after_rare([(config, table)]).iloc[0]
    assert row["after_rare"] > row["other"] + 0.1 and 0 <= row["other"] <= 1


def test_reading_in_words_from_the_summaries():
    shares = pd.DataFrame([dict(method="fed-cvar-avg", r=r, group=g, fedavg_share=f, share=sh, multiplier=m,
                                above=a) for r, g, f, sh, m, a in [
        (0.9, "rare", 2.14, 3.14, 1.47, 50.2), (0.9, "all", 100, 100, 1.0, 30.0),
        (0.8, "rare", 4.62, 7.79, 1.69, 59.6), (0.8, "all", 100, 100, 1.0, 29.9)]])
    after = pd.DataFrame([dict(method="fed-cvar-avg", r=0.9, after_rare=56.3, other=29.3),
                          dict(method="fed-cvar-avg", r=0.8, after_rare=float("nan"), other=28.3)])
    words = weights.reading(shares, after, 0.3, 0.3)
    assert words["w_mult_rare"] == "1.47 (r = 90 %) and 1.69 (r = 80 %)"
    assert words["w_share"] == "from 2.1 % to 3.1 % (r = 90 %) and from 4.6 % to 7.8 % (r = 80 %)"
    assert words["w_after"] == "56 % against 29 % (r = 90 %) and n/a against 28 % (r = 80 %)"
    assert words["w_max"] == "2.63" and words["w_alpha"] == "30 %"


def test_for_reading_puts_mean_and_se_in_one_cell():
    df = pd.DataFrame(dict(method=["fedavg"] * 2, r=[0.9, 0.9], group=["rare", "all"], seed=[0, 0],
                           fedavg_share=[0.02, 1.0], share=[0.03, 1.0], multiplier=[1.5, float("nan")],
                           above=[0.5, 0.3]))
    out = weights.for_reading(weights.summary(pd.concat([df, df.assign(seed=1, share=df["share"] + 0.01)])))
    assert out.loc[0, "share (%)"] == "3.50 ± 0.50" and out.loc[1, "weight per step (x FedAvg)"] == "n/a"
    assert list(out["r"]) == ["90 %", "90 %"] and list(out["seeds"]) == [2, 2]
