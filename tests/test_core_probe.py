"""flkit.seeding: one stream per (seed, concern), the law written out (issue 17's mutation probe)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from flkit.seeding import rng, torch_gen


def test_a_stream_is_keyed_by_seed_and_concern():
    """rng(s, c) = default_rng([s, crc32(c)]); torch_gen(s, c) is seeded by its first 63-bit draw. Other
    concerns of the same seed, and the same concern of another seed, give other streams."""
    got = rng(3, "data").random(6)
    assert np.array_equal(got, np.random.default_rng([3, zlib.crc32(b"data")]).random(6))
    others = [rng(3, c).random(6) for c in ("participation", "init", "batch")] + [rng(4, "data").random(6)]
    assert all(np.abs(got - o).max() > 0.01 for o in others)
    seed = int(np.random.default_rng([3, zlib.crc32(b"batch")]).integers(2**63 - 1))
    assert torch.equal(torch.rand(5, generator=torch_gen(3, "batch")),
                       torch.rand(5, generator=torch.Generator().manual_seed(seed)))


@pytest.mark.parametrize("seed,concern", [(-5, "data"), (True, "data"), (1.0, "data"), (1, ""), (1, None)])
def test_bad_seed_or_concern(seed, concern):
    with pytest.raises(ValueError, match="seed|concern"):
        rng(seed, concern)
