"""Every chapter's golden results (tests/golden.py) are reproduced by the current code under the
reproducibility contract (flkit.numerics): float64 cases bit for bit unless golden.TOLERANCE declares (and
explains) a tolerance; float32 cases within golden's derived bounds, on any x86-64 kernel path."""
from __future__ import annotations

import numpy as np
import pytest

import golden
from flkit import datasets


@pytest.mark.parametrize("name", list(golden.CASES))
def test_golden(name):
    if name in golden.NEEDS_DATA and not datasets.available(golden.NEEDS_DATA[name]):
        pytest.skip(f"{golden.NEEDS_DATA[name]} is not in the data cache")
    want = golden.read(name)
    got = golden.normalise(golden.compute(name))
    problems = golden.compare(name, got, want)
    assert not problems, f"{name}: " + "; ".join(problems)


def _cvar_mnist_like():
    want = golden.read("cvar_mnist")
    return want, want.copy()


def test_float32_contract_accepts_kernel_rounding_and_rejects_real_changes():
    """The float32 bounds let through what another kernel path does (a loss a few ulps off, one t step
    flipped) and catch what a wrong implementation does (a loss off by 1e-4 relative, t off by two steps or
    off its lattice, several accuracies moved)."""
    want, got = _cvar_mnist_like()
    loss = np.flatnonzero(want["metric"] == "test_loss")
    t = np.flatnonzero((want["metric"] == "t") & (want["value"] != 0))
    acc = np.flatnonzero(want["metric"] == "test_acc_class")
    step = 1e-4 * (1 - 0.3) / 0.3                        # the smoke profile's lr_t (1 - gamma) / alpha
    got.loc[loss, "value"] *= 1 + 3 * golden.EPS32          # kernel rounding
    got.loc[t[0], "value"] += step                          # one flipped step
    got.loc[acc[0], "value"] += 0.01                        # one flipped test sample
    assert golden.compare("cvar_mnist", got, want) == []
    for change in ({loss[0]: 1 + 1e-4}, {t[1]: None}, {t[2]: 0.5}):
        bad = got.copy()
        for i, f in change.items():
            v = bad.loc[i, "value"]
            bad.loc[i, "value"] = v * f if f and f > 1 else v + (2 * step if f is None else f * step)
        assert golden.compare("cvar_mnist", bad, want), change
    moved = got.copy()
    moved.loc[acc[1:10], "value"] += 0.01                  # 10 of 400 rows: more than 1 %
    assert golden.compare("cvar_mnist", moved, want)
