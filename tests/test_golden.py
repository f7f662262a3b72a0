"""Every chapter's golden results (tests/golden.py) are reproduced by the current code, bit for bit
unless golden.TOLERANCE declares (and explains) a tolerance."""
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
    assert list(got.columns) == list(want.columns)
    assert len(got) == len(want), f"{name}: {len(got)} rows, golden has {len(want)}"
    rtol = golden.TOLERANCE.get(name, (0.0, ""))[0]
    for col in want.columns:
        a, b = got[col].to_numpy(), want[col].to_numpy()
        if want[col].dtype.kind == "f" or got[col].dtype.kind == "f":
            a, b = a.astype(float), b.astype(float)
            same = (a == b) | (np.isnan(a) & np.isnan(b)) | np.isclose(a, b, rtol=rtol, atol=0.0)
            bad = np.flatnonzero(~same)
            assert not len(bad), (f"{name}: column {col!r} differs in {len(bad)} of {len(a)} rows, first at row "
                                  f"{bad[0]}: {a[bad[0]]!r} vs golden {b[bad[0]]!r}")
        else:
            a, b = got[col].fillna("").astype(str).to_numpy(), want[col].fillna("").astype(str).to_numpy()
            assert (a == b).all(), f"{name}: column {col!r} differs"
